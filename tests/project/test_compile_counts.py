"""Never compile twice: a new value of any front-door argument compiles nothing.

For every front door: one call warms it up (compiles its programs), then a
call with a NEW value of ONE argument -- inside the same shape bucket -- must
trigger zero XLA backend compilations (``compile_counter``, conftest.py; a
persistent-cache load counts as a compilation too). Each case also checks that
the second answer differs from the first, so it was computed, not cached.

Buckets (documented in the doors' docstrings): the PLD doors size their
grids from the values -- the truncated per-step PLD has a power-of-two
length and the composition window a length 2^a or 3 * 2^(a-2) -- so the new
values below are chosen inside the base value's buckets; the shuffle doors'
binomial windows are bucketed to 3 significant bits of their length (n,
eps0 and delta set it), likewise. The RDP doors have no value-dependent shape.

Doors of modules owned elsewhere that still compile for a new value are
marked ``xfail(strict=True)`` with the reason (they pass once fixed, and the
strict mark then fails, so the mark must be removed).
"""

import numpy as np
import pytest

import jaxacct
from jaxacct import allocation, pld, poisson, shuffle
from jaxacct.accounting import PLDAccountant, events
from jaxacct.allocation import pld as apld
from jaxacct._core.gaussian import gaussian_delta, gaussian_epsilon


def _value(r):
  """The answer of a door as a float (epsilon of an EpsilonResult, delta of a DeltaResult)."""
  if isinstance(r, jaxacct.EpsilonResult):
    return float(np.asarray(r.epsilon))
  if isinstance(r, jaxacct.DeltaResult):
    return float(np.asarray(r.delta))
  return float(np.asarray(r))


def _accountant_epsilon(*, sigma, q, steps, delta):
  acc = PLDAccountant().compose(
      events.PoissonSampledDpEvent(q, events.GaussianDpEvent(sigma)), steps)
  return acc.get_epsilon(delta)


def _result(door, kw):
  return door(**kw)


_ALLOC_GRID = dict(grid_size=256)

# name: (door, base keywords, {argument: new value inside the base's bucket})
CASES = {
    "gaussian_epsilon": (
        gaussian_epsilon, dict(sigma=1.0, delta=1e-5), dict(sigma=1.1, delta=2e-5)),
    "gaussian_delta": (
        gaussian_delta, dict(sigma=1.0, epsilon=1.0), dict(sigma=1.1, epsilon=1.2)),
    "poisson_epsilon_rdp": (
        poisson.epsilon, dict(q=0.01, sigma=1.0, num_steps=1000, delta=1e-5),
        dict(q=0.013, sigma=1.1, num_steps=1300, delta=2e-5)),
    "poisson_delta_rdp": (
        poisson.delta, dict(q=0.01, sigma=1.0, num_steps=1000, epsilon=1.0),
        dict(q=0.013, sigma=1.1, num_steps=1300, epsilon=1.2)),
    "poisson_epsilon_pld": (
        poisson.epsilon, dict(q=0.01, sigma=1.0, num_steps=100, delta=1e-5, method="pld"),
        dict(q=0.0101, sigma=1.01, num_steps=101, delta=2e-5)),
    "poisson_delta_pld": (
        poisson.delta, dict(q=0.01, sigma=1.0, num_steps=100, epsilon=1.0, method="pld"),
        dict(q=0.0101, sigma=1.01, num_steps=101, epsilon=1.2)),
    "allocation_pld_epsilon_k1": (
        apld.allocation_pld_epsilon,
        dict(sigma=1.0, steps_per_epoch=100, delta=1e-5, **_ALLOC_GRID),
        dict(sigma=1.01, steps_per_epoch=101, delta=2e-5)),
    "allocation_pld_delta_k1": (
        apld.allocation_pld_delta,
        dict(sigma=1.0, steps_per_epoch=100, epsilon=1.0, **_ALLOC_GRID),
        dict(sigma=1.01, steps_per_epoch=101, epsilon=1.2)),
    "allocation_pld_epsilon_k2_E2": (
        apld.allocation_pld_epsilon,
        dict(sigma=1.0, steps_per_epoch=100, num_selected=2, num_epochs=2, delta=1e-5,
             **_ALLOC_GRID),
        dict(sigma=1.01, steps_per_epoch=101, num_selected=3, num_epochs=3, delta=2e-5)),
    "allocation_pld_delta_k2_E2": (
        apld.allocation_pld_delta,
        dict(sigma=1.0, steps_per_epoch=100, num_selected=2, num_epochs=2, epsilon=1.0,
             **_ALLOC_GRID),
        dict(sigma=1.01, steps_per_epoch=101, num_selected=3, num_epochs=3, epsilon=1.2)),
    "allocation_epsilon_rdp": (
        allocation.epsilon,
        dict(sigma=1.0, steps_per_epoch=100, delta=1e-5, methods=("rdp_direct", "rdp_add")),
        dict(sigma=1.1, steps_per_epoch=130, delta=2e-5, num_selected=2, num_epochs=2)),
    "shuffle_epsilon": (
        shuffle.epsilon, dict(n=10_000, eps0=1.0, delta=1e-6),
        dict(n=10_010, eps0=1.001, delta=1.01e-6)),
    "shuffle_delta": (
        shuffle.delta, dict(n=10_000, eps0=1.0, epsilon=0.1),
        dict(n=10_010, eps0=1.001, epsilon=0.11)),
    "dpsgd_epsilon_poisson": (
        jaxacct.dpsgd.epsilon,
        dict(noise_multiplier=1.0, num_examples=10_000, batch_size=100, num_epochs=3,
             delta=1e-5, sampling="poisson"),
        dict(noise_multiplier=1.01, num_examples=10_100, batch_size=101, num_epochs=4,
             delta=2e-5)),
    "dpsgd_epsilon_balls_in_bins": (
        jaxacct.dpsgd.epsilon,
        dict(noise_multiplier=1.0, num_examples=10_000, batch_size=100, num_epochs=1,
             delta=1e-5),
        dict(noise_multiplier=1.01, num_examples=10_100, batch_size=101, num_epochs=2,
             delta=2e-5)),
    "accountant_pld_poisson": (
        _accountant_epsilon, dict(sigma=1.0, q=0.01, steps=100, delta=1e-5),
        dict(sigma=0.99, q=0.0101, steps=101, delta=2e-5)),
}

# (case, argument) -> reason: doors owned by other modules that still compile
# for a new value (strict xfail: remove the entry once fixed). Empty since the
# allocation PLD query lost its count-dependent static flags (issue 28 item 3).
KNOWN_RECOMPILES = {}

# Entries that pass only when earlier tests of the session compiled the new
# value's program (not strict).
ORDER_DEPENDENT = set()

PARAMS = []
for _name, (_door, _base, _new) in CASES.items():
  for _arg in _new:
    _marks = ()
    if (_name, _arg) in KNOWN_RECOMPILES:
      # ORDER_DEPENDENT: passes when earlier tests of the session already compiled the new
      # value's program (the full suite), fails alone: not strict
      _strict = (_name, _arg) not in ORDER_DEPENDENT
      _marks = (pytest.mark.xfail(strict=_strict, reason=KNOWN_RECOMPILES[(_name, _arg)]),)
    PARAMS.append(pytest.param(_name, _arg, id=f"{_name}-{_arg}", marks=_marks))


@pytest.mark.parametrize("name,arg", PARAMS)
def test_new_value_compiles_nothing(name, arg, compile_counter):
  door, base, new = CASES[name]
  first = _value(_result(door, base))        # warm: compiles the door's programs
  kw = dict(base, **{arg: new[arg]})
  with compile_counter as c:
    second = _value(_result(door, kw))
  assert second != first, f"{name}: {arg}={new[arg]} gave the cached answer {first}"
  assert c.count == 0, f"{name}: {c.count} compilations for a new {arg}={new[arg]}"
