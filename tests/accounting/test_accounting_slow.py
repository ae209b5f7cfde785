"""jaxacct.accounting on random allocation and a mixed run (the mixed run is slow).

References: ``jaxacct.allocation.pld`` (the module the accountant must equal
for a single allocation event); the issue's numbers for sigma=2, k=10, t=100,
delta=1e-6 (dp_accounting's unreleased random-allocation PLD gives 2.4265,
upper bound only, measured by the issue's author; jaxacct certified
[2.4232, 2.4246] there).
"""

import time

import pytest

from jaxacct.accounting import NeighboringRelation as NR, PLDAccountant, events as ev


def test_allocation_event_equals_allocation_pld():
  # default suite (one allocation PLD compile): the accountant's shortcut for a
  # single random-allocation event must stay in step with allocation.pld
  from jaxacct.allocation.pld import allocation_pld_epsilon
  e = ev.RandomAllocationDpEvent(noise_multiplier=2.0, steps_per_epoch=100, num_selected=10)
  PLDAccountant().compose(e).get_epsilon_bounds(1e-6)        # compile
  t = time.perf_counter()
  r = PLDAccountant().compose(e).get_epsilon_bounds(1e-6)
  dt = time.perf_counter() - t
  ref = allocation_pld_epsilon(sigma=2.0, steps_per_epoch=100, num_selected=10, delta=1e-6)
  assert r.method == "allocation_pld"
  assert r.epsilon == pytest.approx(float(ref.upper), rel=1e-12, abs=0)
  assert r.lower == pytest.approx(float(ref.lower), rel=1e-12, abs=0)
  assert r.lower <= r.epsilon <= 2.4265 and r.epsilon / r.lower <= 1.01
  assert r.details["lower_scope"] == "reduction"      # k > 1: Lemma 3.2 object
  print(f"allocation sigma=2 k=10 t=100: [{r.lower:.5f}, {r.epsilon:.5f}] in {dt:.2f}s")
  d = PLDAccountant().compose(e).get_delta_bounds(2.0)
  from jaxacct.allocation.pld import allocation_pld_delta
  dref = allocation_pld_delta(sigma=2.0, steps_per_epoch=100, num_selected=10, epsilon=2.0)
  assert d.delta == pytest.approx(float(dref.delta), rel=1e-12, abs=0)
  assert d.lower == pytest.approx(float(dref.lower), rel=1e-12, abs=0)


@pytest.mark.slow
def test_mixed_run_bracket_is_not_wider_than_its_parts():
  parts = [
      ev.RandomAllocationDpEvent(noise_multiplier=1.1, steps_per_epoch=100, num_epochs=3),
      ev.RandomAllocationDpEvent(noise_multiplier=0.9, steps_per_epoch=100, num_selected=2, num_epochs=2),
      ev.SelfComposedDpEvent(ev.GaussianDpEvent(20.0), 50),
      ev.SelfComposedDpEvent(ev.ShuffleDpEvent(n=1000, eps0=1.0), 10),
  ]
  delta = 1e-6
  widths, uppers = [], []
  for p in parts:
    r = PLDAccountant(NR.REPLACE_SPECIAL, shortcuts=False).compose(p).get_epsilon_bounds(delta)
    assert r.lower <= r.epsilon
    widths.append(r.epsilon - r.lower)
    uppers.append(r.epsilon)
  acc = PLDAccountant(NR.REPLACE_SPECIAL)
  for p in parts:
    acc.compose(p)
  t = time.perf_counter()
  r = acc.get_epsilon_bounds(delta)
  dt = time.perf_counter() - t
  assert r.method == "pld" and r.lower <= r.epsilon
  assert max(uppers) <= r.epsilon <= sum(uppers)
  # measured: width 0.042 against 0.207 summed (the shuffle part's generic
  # lower bound dominates both); composition does not widen the bracket
  assert r.epsilon - r.lower <= 1.1 * sum(widths)
  assert r.details["lower_scope"] == "reduction"      # the k = 2 part
  print(f"mixed run: [{r.lower:.5f}, {r.epsilon:.5f}] width {r.epsilon - r.lower:.2e}; "
        f"parts' widths {[f'{w:.2e}' for w in widths]} (sum {sum(widths):.2e}); {dt:.1f}s")
