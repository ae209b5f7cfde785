"""Exact shuffled profiles, brute force at small n, the Wang counterexample,
and T-round composition.

Oracles: exhaustive enumeration of shuffled histograms (``shb.enumerate_delta``
-- dynamic programming over histograms, float64 or ``Fraction``), the FMT
clones digest §5.3 Tables C/D (scipy float64), the Wang digest §7.2 exact
rationals, and exact enumeration of T-fold products.
"""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

import jaxacct.shuffle as sh
from jaxacct import experimental as xvr
from jaxacct.shuffle import bounds as shb

MAXN = 16  # shared static window for all small-n kernel calls (one compile)


def test_binary_rr_digest_tables():
  # FMT digest §5.3 Table C ("2RR exact (max over m)") and Table D
  e = sh.binary_rr_epsilon(1e-3, n=50, eps0=1.0).epsilon
  assert abs(float(e) - 0.359958776739) < 1e-10
  e = sh.binary_rr_epsilon(1e-3, n=50, eps0=2.0).epsilon
  assert abs(float(e) - 1.27662623987) < 1e-9
  d = sh.binary_rr_delta(np.array([0.0]), n=10, eps0=1.0).delta
  assert abs(float(d[0]) - 0.1352355788) < 1e-10
  d = sh.binary_rr_delta(0.5, n=30, eps0=3.0).delta
  assert abs(float(d) - 0.2322617714) < 1e-10


def _histogram(rows):
  """{output histogram: probability} of independent users with output
  distributions ``rows``, by enumeration (the test's own oracle)."""
  dist = {tuple([0] * len(rows[0])): 1.0}
  for row in rows:
    new = {}
    for h, pr in dist.items():
      for y, ry in enumerate(row):
        if ry:
          h2 = h[:y] + (h[y] + 1,) + h[y + 1:]
          new[h2] = new.get(h2, 0.0) + pr * ry
    dist = new
  return dist


def _profiles(matrix, x0, x1, others, eps_grid):
  """Exact delta on eps_grid for one dataset pair (both directions)."""
  rows0 = [matrix[x0]] + [matrix[x] for x in others]
  rows1 = [matrix[x1]] + [matrix[x] for x in others]
  d0 = _histogram(rows0)
  d1 = _histogram(rows1)
  keys = sorted(set(d0) | set(d1))
  p = np.array([d0.get(k, 0.0) for k in keys])
  q = np.array([d1.get(k, 0.0) for k in keys])
  e = np.exp(eps_grid)[:, None]
  return np.maximum(np.maximum(p - e * q, 0).sum(1), np.maximum(q - e * p, 0).sum(1))


def _worst(matrix, n, eps_grid, pairs):
  best = np.zeros_like(eps_grid)
  for x0, x1 in pairs:
    for others in itertools.combinations_with_replacement(range(len(matrix)), n - 1):
      best = np.maximum(best, _profiles(matrix, x0, x1, others, eps_grid))
  return best


def _krr(k, e0):
  r = np.ones((k, k))
  np.fill_diagonal(r, math.exp(e0))
  return r / (math.exp(e0) + k - 1)


def test_binary_rr_exact_equals_bruteforce():
  grid = np.array([0.0, 0.2, 0.5, 0.9])
  for n, e0 in [(2, 1.0), (5, 0.7), (9, 1.5), (12, 1.0)]:
    truth = _worst(_krr(2, e0), n, grid, [(0, 1)])
    got = np.asarray(sh.binary_rr_delta(grid, n=n, eps0=e0).delta)
    np.testing.assert_allclose(got, truth, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("k,ns", [(2, (4, 12)), (3, (4, 7, 10)),
                                  (4, (3, 5, 7)), (5, (3, 6))])
def test_upper_bounds_dominate_bruteforce_krr(k, ns):
  grid = np.array([0.0, 0.1, 0.3, 0.6, 1.0, 1.5])
  for e0 in (1.0, 2.0):
    for n in ns:
      truth = _worst(_krr(k, e0), n, grid, [(0, 1)])  # k-RR: pairs symmetric
      sc = np.asarray(sh.stronger_clone_delta(grid, n=n, eps0=e0, max_n=MAXN).delta)
      cl = np.asarray(sh.clone_delta(grid, n=n, eps0=e0, max_n=MAXN).delta)
      assert np.all(sc >= truth * (1 - 1e-12) - 1e-15), (k, n, e0, sc, truth)
      assert np.all(cl >= truth * (1 - 1e-12) - 1e-15), (k, n, e0)
      if k >= 3:
        # the k-RR row of the variation-ratio lower pair (Wang et al. Thm 5.1)
        p = math.exp(e0)
        lo = np.asarray(shb.variation_ratio_lower_delta(
            grid, n=n, p=p, beta=(p - 1.0) / (p + k - 1.0), q0=p, q1=p, max_n=MAXN).delta)
        assert np.all(lo <= truth * (1 + 1e-12) + 1e-15), (k, n, e0, lo, truth)
      else:
        lo = np.asarray(sh.rr2_lower_delta(grid, n=n, eps0=e0, max_n=MAXN).delta)
        assert np.all(lo <= truth * (1 + 1e-12) + 1e-15)


def test_front_door_krr_dominates_bruteforce():
  # the front door's best upper bound (eps at delta) >= the true eps
  n, e0, k, dl = 7, 1.5, 4, 1e-2
  grid = np.linspace(0.0, e0, 301)
  truth = _worst(_krr(k, e0), n, grid, [(0, 1)])
  true_eps = grid[np.argmax(truth <= dl)]  # grid point at/above the truth
  r = sh.epsilon(n=n, eps0=e0, delta=dl, randomizer=("k_rr", k))
  assert r.bound == "upper" and r.method == "stronger_clone"
  assert r.epsilon >= true_eps - e0 / 300
  lo = r.details["krr_lower"][0]
  assert lo <= true_eps + 1e-12


def test_generic_clone_dominates_random_ldp_randomizers():
  rng = np.random.default_rng(0)
  grid = np.array([0.0, 0.2, 0.5])
  pairs = [(a, b) for a in range(3) for b in range(3) if a != b]
  for trial in range(10):
    m = np.exp(rng.uniform(0, 1.2, size=(3, 3)))
    m /= m.sum(1, keepdims=True)
    _, e0 = sh.check_blanket_condition(m)
    n = 3 + trial % 4
    truth = _worst(m, n, grid, pairs)
    cl = np.asarray(sh.clone_delta(grid, n=n, eps0=e0, max_n=MAXN).delta)
    assert np.all(cl >= truth - 1e-14), (trial, cl, truth)


def test_stronger_clone_dominates_blanket_subset_randomizer():
  # 3-RR with an extra "null" output of probability c/(P+2+c) (same for every
  # input): meets the blanket condition, is not RR. (A 2-subset-of-4
  # randomizer does NOT meet it: a column with two high entries fails.)
  grid = np.array([0.0, 0.2, 0.5, 1.0])
  pairs = [(a, b) for a in range(3) for b in range(3) if a != b]
  for e0 in (0.8, 2.0):
    P = math.exp(e0)
    m = np.array([[P, 1, 1, 2], [1, P, 1, 2], [1, 1, P, 2]]) / (P + 4)
    ok, _ = sh.check_blanket_condition(m, e0)
    assert ok
    sub = np.array([[P, P, 1, 1], [1, P, P, 1], [1, 1, P, P]]) / (2 * P + 2)
    assert not sh.check_blanket_condition(sub, e0)[0]
    for n in (3, 5, 7):
      truth = _worst(m, n, grid, pairs)
      sc = np.asarray(sh.stronger_clone_delta(grid, n=n, eps0=e0, max_n=MAXN).delta)
      assert np.all(sc >= truth * (1 - 1e-12) - 1e-15), (e0, n, sc, truth)


def test_vr_krr_k4_n3_exceeds_pair():
  """Wang digest §7.2 / issue 11: 4-RR, n=3, e^eps0=3, e^eps=2."""
  P, k = Fraction(3), 4
  z = P + k - 1
  m = [[P / z if i == j else Fraction(1) / z for j in range(k)] for i in range(k)]
  res = shb.worst_case_delta(m, 3, ("exp", Fraction(2)), exact=True,
                               pairs=[(0, 1)])
  worst = res.delta
  assert worst == Fraction(11, 216)
  third = shb.enumerate_delta(m, 0, 1, (2, 2), ("exp", Fraction(2)),
                                exact=True).delta
  assert third == Fraction(5, 108)
  row = float(xvr.row_delta_unsafe(math.log(2), n=3, mechanism="k_rr",
                                   eps0=math.log(3), k=4).delta)
  assert abs(row - 7 / 216) < 1e-14
  assert row < float(worst)  # the per-randomizer row is NOT an upper bound
  # what the front door returns for k-RR is a valid upper bound
  d = sh.delta(n=3, eps0=math.log(3), epsilon=math.log(2), randomizer=("k_rr", 4))
  assert d.bound == "upper" and d.delta >= 11 / 216
  assert d.details["krr_lower"][0] <= 11 / 216 + 1e-15


def test_pair_pmfs_match_kernel():
  p = math.exp(1.0)
  pv, qv = shb.pair_pmfs(300, p, (p - 1) / (p + 1), p, p)
  e = np.exp(np.array([0.0, 0.1, 0.3]))[:, None]
  hs = np.maximum(pv - e * qv, 0).sum(1)
  want = np.asarray(sh.stronger_clone_delta(np.log(e[:, 0]), n=300, eps0=1.0).delta)
  np.testing.assert_allclose(hs, want, rtol=1e-9, atol=1e-15)
  assert abs(pv.sum() - 1) < 1e-9 and abs(qv.sum() - 1) < 1e-9


def _binary_rr_pmfs(n, e0, m):
  """(Y0, Y1): exact laws of the count of ones of shuffled binary RR (eps0 =
  e0), user 1 holding 0 resp. 1 and m of the other n-1 holding 1 (SciPy
  binomials: Bin(m, 1-pi) + Bin(n-1-m, pi) + the user's own report)."""
  from scipy import stats
  pi = 1.0 / (math.exp(e0) + 1.0)
  z = np.convolve(stats.binom.pmf(np.arange(m + 1), m, 1.0 - pi),
                  stats.binom.pmf(np.arange(n - m), n - 1 - m, pi))
  zs, z = np.concatenate([[0.0], z]), np.concatenate([z, [0.0]])
  return (1.0 - pi) * z + pi * zs, pi * z + (1.0 - pi) * zs


def _exact_composed_eps(n, e0, rounds, delta):
  """Exact eps(delta) of T rounds of shuffled binary RR, by enumeration of the
  T-fold product for every dataset and direction."""
  def dl(eps):
    best = 0.0
    for m in range(n):
      y0, y1 = _binary_rr_pmfs(n, e0, m)
      pt, qt = y0, y1
      for _ in range(rounds - 1):
        pt = np.outer(pt, y0).ravel()
        qt = np.outer(qt, y1).ravel()
      best = max(best, np.maximum(pt - math.exp(eps) * qt, 0).sum(),
                 np.maximum(qt - math.exp(eps) * pt, 0).sum())
    return best
  lo, hi = 0.0, rounds * e0
  for _ in range(60):
    mid = 0.5 * (lo + hi)
    lo, hi = (lo, mid) if dl(mid) <= delta else (mid, hi)
  return hi


def test_composition_binary_rr_pld_vs_exact_vs_rdp():
  n, e0, T, dl = 6, 1.0, 3, 1e-3
  truth = _exact_composed_eps(n, e0, T, dl)
  r = sh.epsilon(n=n, eps0=e0, delta=dl, rounds=T, randomizer="binary_rr",
                 step=1e-4)
  pld_eps = r.details["pld_exact_pairs"][0]
  assert pld_eps >= truth - 1e-12
  assert pld_eps - truth < 2e-3  # discretisation (step 1e-4, pessimistic)
  assert pld_eps <= r.details["stronger_clone_rdp"][0]
  assert r.bound == "upper"


@pytest.mark.slow
def test_composition_clone_pld_below_rdp():
  # FMT digest §5.3 Table F: n=1000, eps0=1, T=100, delta=1e-6:
  # RDP 2.324402469; dp_accounting PLD (interval 1e-4) 2.1701749.
  r = sh.epsilon(n=1000, eps0=1.0, delta=1e-6, rounds=100)
  assert abs(r.details["clone_rdp"][0] - 2.324402469) < 1e-6
  pld = r.details["pld_clone"][0]
  assert pld <= r.details["clone_rdp"][0]
  assert 2.10 < pld < 2.1702
  assert r.method == "pld_clone"


@pytest.mark.slow
def test_clone_pld_single_round_vs_dp_accounting():
  dpa = pytest.importorskip("dp_accounting")
  from dp_accounting.pld import privacy_loss_distribution as pldm
  p = math.exp(1.0)
  pv, qv = shb.pair_pmfs(1000, p, (p - 1) / (p + 1), 2 * p * p / (p + 1),
                           2 * p * p / (p + 1))
  keep = (pv > 0) & (qv > 0)
  # dp_accounting 0.6.0 takes LOG probability mass functions
  pl = pldm.from_two_probability_mass_functions(
      dict(enumerate(np.log(pv[keep]))), dict(enumerate(np.log(qv[keep]))),
      value_discretization_interval=1e-4, pessimistic_estimate=True)
  e_dpa = pl.get_epsilon_for_delta(1e-6)
  e_ours = float(sh.clone_epsilon(1e-6, n=1000, eps0=1.0).epsilon)
  # FMT digest: exact 0.1824123, dp_accounting 0.1824631
  assert abs(e_ours - 0.1824123) < 1e-6
  assert e_ours <= e_dpa + 1e-9 and e_dpa - e_ours < 1e-3


def test_krr_thm41_numerical_pair():
  # FMT digest §5.3 (brute-force line under Table E): (n, k, eps0, eps) =
  # (10, 3, 1, 0.3): exact shuffled k-RR 0.045446782 <= Thm 4.1 0.072118252
  # <= clone 0.091708122
  grid = np.array([0.0, 0.3, 0.6])
  d = np.asarray(shb.krr_thm41_delta(grid, n=10, eps0=1.0, k=3).delta)
  assert abs(d[1] - 0.072118252) < 1e-9
  truth = _worst(_krr(3, 1.0), 10, grid, [(0, 1)])
  assert abs(truth[1] - 0.045446782) < 1e-9
  assert np.all(d >= truth - 1e-15)
  cl = np.asarray(sh.clone_delta(grid, n=10, eps0=1.0, max_n=MAXN).delta)
  assert np.all(d <= cl + 1e-15)


@pytest.mark.slow
def test_krr_thm41_table_e():
  # FMT digest §5.3 Table E: n=1e4, delta=1e-6, eps0=1, k=10 -> 0.02461579492
  e = float(shb.krr_thm41_epsilon(1e-6, n=10_000, eps0=1.0, k=10).epsilon)
  assert abs(e - 0.02461579492) < 1e-8


@pytest.mark.slow
def test_fmt_authors_code_brackets_our_exact_clone():
  # FMT'21 authors' code (vendored in random-allocation 1.0.5), example
  # settings: returns the upper end of its bisection bracket
  fmt = pytest.importorskip("random_allocation.external_sources.shuffle_external")
  theirs = fmt.numericalanalysis(100_000, 4.0, 1e-6, 10, 100, True)
  # the authors' README prints 0.172790550755978 (digest §3.4); the copy
  # vendored by random-allocation 1.0.5 returns ~0.17542 (its block walk
  # differs); both are right ends of a 2^-10 eps0 bracket around a delta that
  # over-counts, so both must be >= the exact clone eps 0.169769747255.
  ours = float(sh.clone_epsilon(1e-6, n=100_000, eps0=4.0).epsilon)
  assert ours <= theirs and theirs - ours < 0.01
