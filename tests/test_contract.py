"""Contract suite run over every scheme's epsilon front door.

Each row is ``fn(noise, steps, delta) -> EpsilonResult`` where ``noise`` is
the privacy knob that makes the bound smaller as it grows (sigma, or -eps0 for
the shuffle model) and ``steps`` the count that makes it larger. For each row:

* the result is an ``EpsilonResult`` with a bound from the closed vocabulary,
  epsilon finite and >= 0, ``lower <= epsilon`` where a lower end is given;
* epsilon is monotone: non-increasing in noise, non-decreasing in steps,
  non-increasing in delta (with a relative slack for grid-based methods);
* the user's float32 config is untouched and the answer is float64;
* delta doors: the same checks, and delta(epsilon(delta0)) <= delta0;
* traced input: the traceable door equals eager under jit and vmap and maps
  invalid traced input to NaN; host-only doors raise under jit;
* no retrace: a second call with *new values* of the same shapes compiles
  nothing (XLA backend compilations counted by ``jax.monitoring``).
"""

import jax
import numpy as np
import pytest

from jaxacct import allocation, poisson, shuffle
from jaxacct import BOUNDS, DeltaResult, EpsilonResult
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


# ------------------------------------------------------------- delta doors --

def _poisson_rdp_delta(s, T, e):
  return poisson.delta(q=0.01, sigma=s, num_steps=T, epsilon=e)


def _poisson_pld_delta(s, T, e):
  return poisson.delta(q=0.01, sigma=s, num_steps=T, epsilon=e, method="pld")


def _alloc_pld_delta(s, t, e):
  return apld.allocation_pld_delta(sigma=s, steps_per_epoch=t, epsilon=e, grid_size=256)


def _alloc_best_delta(s, t, e):
  return allocation.delta(sigma=s, steps_per_epoch=t, epsilon=e,
                          methods=("rdp_direct", "rdp_add"))


def _shuffle_delta(neg_eps0, n, e):
  return shuffle.delta(n=n, eps0=-neg_eps0, epsilon=e)


# name, fn(noise, steps, epsilon), noises (increasing), steps, epsilons
# (increasing), sign of d delta / d steps.
DELTA_ROWS = [
    ("poisson_rdp", _poisson_rdp_delta, (0.8, 1.0, 1.3), (100, 1000), (1.0, 2.0), +1),
    ("poisson_pld", _poisson_pld_delta, (0.8, 1.0, 1.02), (100, 1000), (1.0, 2.0), +1),
    ("allocation_pld", _alloc_pld_delta, (0.8, 1.0, 1.3), (100, 1000), (0.3, 0.6), -1),
    ("allocation_rdp", _alloc_best_delta, (0.8, 1.0, 1.3), (100, 1000), (0.3, 0.6), -1),
    ("shuffle", _shuffle_delta, (-2.0, -1.5, -1.0), (1000, 10000), (0.3, 0.6), -1),
]


def _dlt(r):
  assert isinstance(r, DeltaResult), type(r)
  assert r.bound in BOUNDS
  d = float(np.asarray(r.delta))
  assert 0.0 <= d <= 1.0, d
  if r.lower is not None:
    assert float(np.asarray(r.lower)) <= d * (1 + 1e-9) + 1e-300
  return d


@pytest.mark.parametrize("name,fn,noises,steps,epsilons,sign", DELTA_ROWS,
                         ids=[r[0] for r in DELTA_ROWS])
def test_delta_contract(name, fn, noises, steps, epsilons, sign, compile_counter):
  assert not jax.config.jax_enable_x64
  base = fn(noises[1], steps[0], epsilons[0])
  d0 = _dlt(base)
  assert d0 > 0.0, "pick a setting where delta is not 0"
  assert np.asarray(base.delta).dtype == np.float64
  assert not jax.config.jax_enable_x64, "the user's float32 config was changed"
  with compile_counter as c:
    d_hi_noise = _dlt(fn(noises[2], steps[0], epsilons[0]))
  assert c.count == 0, f"{name}: {c.count} compilations for a new noise value"
  assert d_hi_noise < d0   # a new value was computed, and it is smaller
  slack = 1e-9
  assert _dlt(fn(noises[0], steps[0], epsilons[0])) >= d0 * (1 - slack)
  d_steps = _dlt(fn(noises[1], steps[1], epsilons[0]))
  assert (d_steps >= d0 * (1 - slack)) if sign > 0 else (d_steps <= d0 * (1 + slack))
  assert _dlt(fn(noises[1], steps[0], epsilons[1])) <= d0 * (1 + slack)


@pytest.mark.parametrize("row", [r for r in ROWS if r[0] in ("poisson_rdp", "shuffle",
                                                            "allocation_pld")],
                         ids=lambda r: r[0])
def test_epsilon_and_delta_doors_agree(row):
  """The two doors of one scheme describe one privacy profile. With e = the
  epsilon door's upper at d0, the true delta(e) <= d0; so the delta door's
  certified lower at e is <= d0 (its upper may exceed d0 on a coarser grid:
  measured 1.046e-6 at grid 256 for allocation, 9.56e-7 at grid 4096). Where
  the epsilon door brackets, the true delta at its lower end is >= d0, so the
  delta door's upper there is too. Doors without a bracket: delta(e) <= d0
  and delta(0.98 e) > d0 (the epsilon is within 2 % of the delta door's)."""
  name = row[0]
  eps_fn = dict((r[0], r[1]) for r in ROWS)[name]
  dlt_fn = dict((r[0], r[1]) for r in DELTA_ROWS)[name]
  noise, steps, d0 = row[2][1], row[3][0], 1e-6
  r = eps_fn(noise, steps, d0)
  e = float(np.asarray(r.epsilon))
  back = dlt_fn(noise, steps, e)
  if back.lower is not None and r.lower is not None:
    assert float(np.asarray(back.lower)) <= d0 * (1 + 1e-9), (name, e, back)
    e_lo = float(np.asarray(r.lower))
    assert float(np.asarray(dlt_fn(noise, steps, e_lo).delta)) >= d0 * (1 - 1e-9), name
  else:
    assert float(np.asarray(back.delta)) <= d0 * (1 + 1e-6), (name, e, back)
    assert float(np.asarray(dlt_fn(noise, steps, e * 0.98).delta)) > d0 * (1 - 1e-6), name


# ------------------------------------------------ traced input (jit / vmap) --

def test_traceable_front_door_eager_jit_vmap_agree():
  """poisson.epsilon/delta (RDP) trace: under the user's float64 jit and vmap
  they equal the eager call (1e-13 relative: another compilation may round
  differently), and traced invalid input gives NaN instead of raising."""
  s = np.array([0.8, 1.0, 1.3])
  d = np.array([1e-7, 1e-5, 1e-3])
  eager = np.asarray(poisson.epsilon(q=0.01, sigma=s, num_steps=500, delta=d).epsilon)
  eager_d = np.asarray(poisson.delta(q=0.01, sigma=s, num_steps=500, epsilon=2.0).delta)
  with jax.enable_x64(True):
    f = lambda s, d: poisson.epsilon(q=0.01, sigma=s, num_steps=500, delta=d)  # noqa: E731
    g = lambda s: poisson.delta(q=0.01, sigma=s, num_steps=500, epsilon=2.0)  # noqa: E731
    jitted = np.asarray(jax.jit(f)(s, d).epsilon)
    vmapped = np.asarray(jax.vmap(f)(s, d).epsilon)
    jv = np.asarray(jax.jit(jax.vmap(g))(s).delta)
    bad = jax.jit(f)(np.array([1.0, -1.0, 1.0]), np.array([1e-5, 1e-5, 1.5]))
  np.testing.assert_allclose(jitted, eager, rtol=1e-13)
  np.testing.assert_allclose(vmapped, eager, rtol=1e-13)
  np.testing.assert_allclose(jv, eager_d, rtol=1e-13)
  be = np.asarray(bad.epsilon)
  assert np.isfinite(be[0]) and np.isnan(be[1]) and np.isnan(be[2]), be
  with pytest.raises(ValueError, match="sigma"):
    poisson.epsilon(q=0.01, sigma=-1.0, num_steps=500, delta=1e-5)


def test_traceable_front_door_in_float32_trace_says_enable_x64():
  assert not jax.config.jax_enable_x64
  f = lambda s: poisson.epsilon(q=0.01, sigma=s, num_steps=500, delta=1e-5)  # noqa: E731
  with pytest.raises(RuntimeError, match="x64"):
    jax.jit(f)(1.0)
  assert not jax.config.jax_enable_x64


_HOST_ONLY = [r for r in ROWS if r[0] not in ("poisson_rdp",)]


@pytest.mark.parametrize("name,fn,noises,steps,deltas,sign", _HOST_ONLY,
                         ids=[r[0] for r in _HOST_ONLY])
def test_host_front_doors_refuse_tracers_loudly(name, fn, noises, steps, deltas, sign):
  """Front doors that size their computation from the values (grids, windows,
  method choice) need concrete input: under jit they raise -- never return a
  number computed from a placeholder."""
  with jax.enable_x64(True):
    with pytest.raises((jax.errors.ConcretizationTypeError,
                        jax.errors.TracerArrayConversionError,
                        jax.errors.TracerIntegerConversionError,
                        jax.errors.TracerBoolConversionError, ValueError, TypeError)):
      jax.jit(lambda x: fn(x, steps[0], deltas[0]))(noises[1])
