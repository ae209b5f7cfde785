"""``chen_epsilon`` computes Chen et al.'s upper RDP curve only at the orders
that can decide epsilon (a lower-bracket screen certifies the others): its
epsilon equals the whole curve's (``chen_exact_rdp`` at every order, converted
here with CKS20 Prop. 12 / Mironov Prop. 3 in NumPy) and never falls below it.

The default run checks the search's logic against a stand-in kernel (closed-form
curves, no compile); the slow run checks the real kernel on a 48-point grid
(every grid size is a valid bound) and the ``jaxacct`` table at 5 epochs
(issue 55: ``--sigma 2 --num-steps 1000 --num-epochs 5 --delta 1e-6``).
"""

import inspect

import numpy as np
import pytest

from jaxacct import shuffle as sh
from jaxacct._core.orders import DEFAULT_ORDERS
from jaxacct.shuffle import bounds as shb

# the module namespace of chen_epsilon (its kernel, its search's limits)
CHEN = inspect.unwrap(sh.chen_epsilon).__globals__

GRID = 48
# (n, eps0, delta, rounds, conversion)
CASES = [(1000, 1.0, 1e-6, 5, "tight"), (1000, 1.0, 1e-6, 2, "tight"),
         (1000, 2.0, 1e-8, 10, "tight"), (300, 0.5, 1e-5, 3, "classic"),
         (50, 1.0, 1e-6, 40, "tight")]


def _convert(rdp, rounds, delta, conversion, orders=DEFAULT_ORDERS):
  """min over orders of the converted composed curve (NumPy, independent of the kernels)."""
  o = np.asarray(orders, np.float64)
  r = rounds * np.asarray(rdp, np.float64)
  if conversion == "classic":
    return float(np.min(r - np.log(delta) / (o - 1.0)))
  eps = r + np.log1p(-1.0 / o) - (np.log(delta) + np.log(o)) / (o - 1.0)   # CKS20 Prop. 12
  return float(np.min(np.where(o > 1.01, eps, np.inf)))


def _stand_in(slack, shape, hole=None):
  """A kernel of ``_multinomial._at``'s signature: an increasing curve D(order)
  (upper ``D (1 + slack)``, lower ``D (1 - slack)``, or ``D / 2`` on the orders in
  ``hole``, where the screen misleads), clipped at eps0."""
  def at(n, eps0, orders, num, lower, passes=3):
    d = eps0 * (1.0 - np.exp(-orders * shape / n))
    lo = np.where((orders >= hole[0]) & (orders <= hole[1]), 0.5, 1.0 - slack) if hole \
        else 1.0 - slack
    return np.minimum(d * (lo if lower else 1.0 + slack), eps0)
  return at


@pytest.mark.parametrize("rounds, delta, conv, slack, shape, hole", [
    (5, 1e-6, "tight", 0.05, 1.0, None), (2, 1e-6, "tight", 0.1, 1.0, None),
    (40, 1e-9, "tight", 0.02, 0.3, None), (3, 1e-5, "classic", 0.05, 3.0, None),
    (100, 1e-6, "tight", 0.001, 0.05, None), (5, 1e-6, "tight", 0.15, 1.0, None),
    (1, 1e-10, "classic", 0.2, 0.2, None), (5, 1e-6, "tight", 0.01, 1.0, (20.0, 60.0))])
def test_search_logic_equals_whole_curve(rounds, delta, conv, slack, shape, hole, monkeypatch):
  at = _stand_in(slack, shape, hole)
  calls = []
  monkeypatch.setitem(CHEN, "_at", lambda *a, **k: calls.append(a) or at(*a, **k))
  monkeypatch.setitem(CHEN, "chen_exact_rdp", None)   # never called
  got = float(sh.chen_epsilon(n=1000, eps0=1.0, delta=delta, rounds=rounds,
                              method=conv).epsilon)
  upper = at(1000.0, 1.0, np.asarray(DEFAULT_ORDERS), 160, False)
  ref = _convert(np.minimum.accumulate(upper[::-1])[::-1], rounds, delta, conv)
  assert got == pytest.approx(ref, rel=1e-12) and got >= ref * (1.0 - 1e-14)
  searched = sum(len(a[2]) for a in calls if not a[4])
  assert 0 < searched < len(DEFAULT_ORDERS) // 4     # the point of the search


@pytest.fixture(scope="module")
def whole():
  """The whole upper curve at every default order, one lane per case (one program)."""
  n = np.array([c[0] for c in CASES], np.float64)
  e = np.array([c[1] for c in CASES])
  return np.asarray(shb.chen_exact_rdp(DEFAULT_ORDERS, n=n, eps0=e, num_c=GRID, num_a=GRID))


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(CASES)))
def test_search_equals_whole_curve(whole, i, monkeypatch):
  n, e, delta, rounds, conv = CASES[i]
  ref = _convert(whole[i], rounds, delta, conv)

  def boom(*a, **k):
    raise AssertionError("the whole curve was computed")

  # the search decides alone: the whole-curve kernel is not called
  monkeypatch.setitem(CHEN, "chen_exact_rdp", boom)
  got = float(sh.chen_epsilon(n=n, eps0=e, delta=delta, rounds=rounds, method=conv,
                              num_c=GRID, num_a=GRID).epsilon)
  assert got == pytest.approx(ref, rel=1e-12)
  assert got >= ref * (1.0 - 1e-14)    # an upper bound never below the whole curve's


@pytest.mark.slow
def test_search_falls_back_to_whole_curve(whole, monkeypatch):
  # more orders than the search may compute: the whole curve, same value
  monkeypatch.setitem(CHEN, "_MAX_SEARCHED", 1)
  n, e, delta, rounds, conv = CASES[0]
  got = float(sh.chen_epsilon(n=n, eps0=e, delta=delta, rounds=rounds, method=conv,
                              num_c=GRID, num_a=GRID).epsilon)
  assert got == pytest.approx(_convert(whole[0], rounds, delta, conv), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("randomizer, best, ref", [
    # best row: the PLD of the per-round pair (unchanged by the search); chen_exact
    # before the search (the whole curve, main at b72bff8): 0.4661565661594429
    ("generic", 0.43021482919558224, 0.4661565661594429),
    # (binary_rr: the stronger-clone pair's PLD; the table printed 0.351001 before too)
    ("binary_rr", 0.35100055939906233, 0.4661565661594429),
])
def test_table_5_epochs_rows_equal_whole_curve(randomizer, best, ref):
  """The table's two shuffling rows at 5 epochs; Chen's entry against the whole
  curve at the default grid (about a minute on 2 cores)."""
  r = sh.epsilon(n=1000, eps0=1.0, delta=1e-6, rounds=5, randomizer=randomizer)
  rdp = np.asarray(shb.chen_exact_rdp(DEFAULT_ORDERS, n=1000, eps0=1.0))
  whole = _convert(rdp, 5, 1e-6, "tight")
  assert whole == pytest.approx(ref, rel=1e-12)
  assert r.details["chen_exact"][0] == pytest.approx(whole, rel=1e-12)
  assert r.details["chen_exact"][0] >= whole * (1.0 - 1e-14)
  assert r.epsilon == pytest.approx(best, rel=1e-12)
  ups = [v for v, b in r.details.values() if b == "upper"]
  assert r.epsilon == min(ups)
