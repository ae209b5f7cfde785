"""Contract suite run over every scheme's epsilon front door.

Each row is ``fn(noise, steps, delta) -> EpsilonResult`` where ``noise`` is
the privacy knob that makes the bound smaller as it grows (sigma, or -eps0 for
the shuffle model) and ``steps`` the count that makes it larger. For each row:

* the result is an ``EpsilonResult`` with a bound from the closed vocabulary,
  epsilon finite and >= 0, ``lower <= epsilon`` where a lower end is given;
* epsilon is monotone: non-increasing in noise, non-decreasing in steps,
  non-increasing in delta (with a relative slack for grid-based methods);
* the user's float32 config is untouched and the answer is float64;
* no retrace: a second call with *new values* of the same shapes compiles
  nothing (XLA backend compilations counted by ``jax.monitoring``).
"""

import jax
import numpy as np
import pytest

from jaxacct import allocation, poisson, shuffle
from jaxacct._core.results import BOUNDS, EpsilonResult
from jaxacct.allocation import pld as apld


def _poisson_rdp(s, T, d):
  return poisson.epsilon(q=0.01, sigma=s, num_steps=T, delta=d)


def _poisson_pld(s, T, d):
  return poisson.epsilon(q=0.01, sigma=s, num_steps=T, delta=d, method="pld")


def _alloc_pld(s, t, d):
  return apld.allocation_pld_epsilon(sigma=s, steps_per_epoch=t, delta=d, grid_size=256)


def _alloc_pld_epochs(s, t, d):
  return apld.allocation_pld_epsilon(sigma=s, steps_per_epoch=t, delta=d, num_epochs=3,
                                     grid_size=256)


def _alloc_best(s, t, d):
  return allocation.epsilon(sigma=s, steps_per_epoch=t, delta=d,
                            methods=("rdp_direct", "rdp_add"))


def _shuffle(neg_eps0, n, d):
  return shuffle.epsilon(n=n, eps0=-neg_eps0, delta=d)


# name, fn, noise values (increasing), step values (increasing), deltas
# (increasing), sign of d eps / d steps (+1: total steps compose; -1: steps per
# epoch or users amplify).
ROWS = [
    ("poisson_rdp", _poisson_rdp, (0.8, 1.0, 1.3), (100, 1000), (1e-7, 1e-5), +1),
    ("poisson_pld", _poisson_pld, (0.8, 1.0, 1.3), (100, 1000), (1e-7, 1e-5), +1),
    ("allocation_pld", _alloc_pld, (0.8, 1.0, 1.3), (100, 1000), (1e-7, 1e-5), -1),
    ("allocation_pld_epochs", _alloc_pld_epochs, (0.8, 1.0, 1.3), (100, 1000), (1e-7, 1e-5),
     -1),
    ("allocation_rdp", _alloc_best, (0.8, 1.0, 1.3), (100, 1000), (1e-7, 1e-5), -1),
    ("shuffle", _shuffle, (-2.0, -1.5, -1.0), (1000, 10000), (1e-7, 1e-5), -1),
]

# Front doors that still compile for new values (tracked in issues 16/17).
RETRACE_KNOWN = {}
# Front doors whose array shapes depend on the values (eager grid sizing,
# bucketed to lengths 2^a or 3 * 2^(a-2)): the no-retrace check uses a new
# noise value in the same bucket. The Poisson PLD's loss range scales with
# 1/sigma^2, so sigma = 1.0 -> 1.3 moves to another bucket (measured: 1.02
# compiles nothing; 1.05 and 1.3 compile the truncation/composition again).
SAME_BUCKET_NOISE = {"poisson_pld": 1.02}
# Front doors that do not yet return EpsilonResult (issue 16).
RESULT_KNOWN = {}

_SLACK = 1e-9   # relative slack for monotonicity of grid-based bounds


def _eps(r):
  assert isinstance(r, EpsilonResult), type(r)
  assert r.bound in BOUNDS
  e = float(np.asarray(r.epsilon))
  assert np.isfinite(e) and e >= 0.0
  if r.lower is not None:
    lo = float(np.asarray(r.lower))
    assert lo <= e * (1 + 1e-12) + 1e-15, (lo, e)
  return e


@pytest.mark.parametrize("name,fn,noises,steps,deltas,sign", ROWS, ids=[r[0] for r in ROWS])
def test_contract(name, fn, noises, steps, deltas, sign, compile_counter):
  if name in RESULT_KNOWN:
    pytest.xfail(RESULT_KNOWN[name])
  assert not jax.config.jax_enable_x64
  base = fn(noises[1], steps[0], deltas[0])
  e0 = _eps(base)
  assert np.asarray(base.epsilon).dtype == np.float64
  assert not jax.config.jax_enable_x64, "the user's float32 config was changed"
  # no retrace for a new value of the same shape
  with compile_counter as c:
    r = fn(SAME_BUCKET_NOISE.get(name, noises[2]), steps[0], deltas[0])
  if name in SAME_BUCKET_NOISE:
    assert _eps(r) < e0   # a different value was computed, not a cached one
    r = fn(noises[2], steps[0], deltas[0])
  e_hi_noise = _eps(r)
  if name in RETRACE_KNOWN:
    pytest.xfail(RETRACE_KNOWN[name])
  assert c.count == 0, f"{name}: {c.count} compilations for a new noise value"
  # monotone in noise, steps and delta
  e_lo_noise = _eps(fn(noises[0], steps[0], deltas[0]))
  assert e_lo_noise >= e0 * (1 - _SLACK) and e0 >= e_hi_noise * (1 - _SLACK)
  e_more_steps = _eps(fn(noises[1], steps[1], deltas[0]))
  if sign > 0:
    assert e_more_steps >= e0 * (1 - _SLACK)
  else:
    assert e_more_steps <= e0 * (1 + _SLACK)
  e_more_delta = _eps(fn(noises[1], steps[0], deltas[1]))
  assert e_more_delta <= e0 * (1 + _SLACK)
