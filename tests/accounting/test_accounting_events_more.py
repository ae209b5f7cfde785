"""dp_accounting 0.6.0's newer events in jaxacct's PLDAccountant.

Values are checked against dp_accounting 0.6.0's own ``PLDAccountant`` run
live (same grid step), and, where dp_accounting has no (or a looser)
answer, against exact brute force on small instances: every sampled batch
enumerated, output densities integrated on a fine grid (a one-step
hockey-stick divergence of an actual instance is a lower bound on the
mechanism's, so a valid upper bound must never fall below it).
"""

import itertools
import math

import numpy as np
import pytest

dpa = pytest.importorskip("dp_accounting")
from dp_accounting import dp_event as de  # noqa: E402
from dp_accounting.pld import pld_privacy_accountant as theirs  # noqa: E402

from jaxacct import pld as jpld  # noqa: E402
from jaxacct.accounting import NeighboringRelation as NR  # noqa: E402
from jaxacct.accounting import PLDAccountant, UnsupportedEventError  # noqa: E402
from jaxacct.accounting import mixtures  # noqa: E402

AOR, REP, SPE = NR.ADD_OR_REMOVE_ONE, NR.REPLACE_ONE, NR.REPLACE_SPECIAL


def _pair(events, rel, h):
  a, b = PLDAccountant(rel, h), theirs.PLDAccountant(rel, h)
  for e, c in events:
    a.compose(e, c)
    b.compose(e, c)
  return a, b


# dp_accounting builds these two PLDs by connect-the-dots of the exact
# hockey-stick curve at the grid losses, as we do: the values agree to float
# rounding (measured: <= 1.5e-10 relative on 9 settings x 2 relations x 4
# queries at step 1e-3; tolerance 1e-8).
@pytest.mark.parametrize("events, rel", [
    ([(de.DiscreteLaplaceDpEvent(1.0, 1), 3), (de.DiscreteLaplaceDpEvent(0.5, 2), 2)], AOR),
    ([(de.DiscreteLaplaceDpEvent(2.0, 1), 1)], SPE),
    ([(de.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.9, 0.1]), 2)], AOR),
])
def test_matches_dp_accounting_live(events, rel):
  a, b = _pair(events, rel, 1e-2)
  for d in (1e-6, 1e-3):
    r = a.get_epsilon_bounds(d)
    assert r.epsilon == pytest.approx(b.get_epsilon(d), rel=1e-8)
    assert r.lower <= r.epsilon
  for eps in (0.5, 2.0):
    r = a.get_delta_bounds(eps)
    assert r.delta == pytest.approx(b.get_delta(eps), rel=1e-8, abs=1e-15)
    assert r.lower <= r.delta


def test_discrete_laplace_off_grid_loss_is_not_rounded_up():
  # 0.2 * 3 / 1e-3 = 600.0000000000001 in floats: dp_accounting rounds the
  # loss 0.6 up to 0.601 (eps 3.005 for 5 events); the exact answer is 3.
  acc = PLDAccountant(None, 1e-3).compose(de.DiscreteLaplaceDpEvent(0.2, 3), 5)
  assert acc.get_epsilon(0.0) == pytest.approx(3.0, abs=1e-12)
  assert acc.get_epsilon(1e-6) <= 3.0


def test_discrete_laplace_pure_dp_limits():
  acc = PLDAccountant().compose(de.DiscreteLaplaceDpEvent(0.5, 2), 3)
  assert acc.get_epsilon(0.0) == pytest.approx(3.0, abs=1e-9)       # 3 * a * s
  assert acc.get_delta(3.0) <= 1e-15
  assert acc.get_delta(math.inf) == 0.0


def test_mixture_of_gaussians_c_min_positive_and_upper_above_lower():
  acc = PLDAccountant(None, 1e-3).compose(
      de.MixtureOfGaussiansDpEvent(1.5, [1.0, 2.0], [0.5, 0.5]), 2)
  r = acc.get_epsilon_bounds(1e-6)
  # dp_accounting 0.6.0 at step 1e-3: 8.59551667 (measured offline)
  assert r.epsilon == pytest.approx(8.59551667, rel=1e-8)
  assert r.lower <= r.epsilon <= r.lower + 1e-4


# ---------------------------------------------------------------- truncated


def _truncated_batches(vals, q, b):
  """{batch sum: probability} of Poisson(q) sampling of vals truncated to b."""
  out = {}
  n = len(vals)
  for mask in itertools.product([0, 1], repeat=n):
    idx = [i for i in range(n) if mask[i]]
    pm = q ** len(idx) * (1 - q) ** (n - len(idx))
    subs = [idx] if len(idx) <= b else list(itertools.combinations(idx, b))
    for s in subs:
      v = round(sum(vals[i] for i in s), 9)
      out[v] = out.get(v, 0.0) + pm / len(subs)
  return out


def _hockey(P, Q, sigma, eps):
  grid = np.linspace(-8 - 9 * sigma, 8 + 9 * sigma, 40001)

  def dens(D):
    return sum(w * np.exp(-(grid - m) ** 2 / (2 * sigma ** 2)) for m, w in D.items())
  p, q = dens(P), dens(Q)
  c = (grid[1] - grid[0]) / (math.sqrt(2 * math.pi) * sigma)
  return np.array([np.sum(np.maximum(p - math.exp(e) * q, 0)) * c for e in eps])


EPS = np.array([0.0, 0.5, 1.0, 2.0])


@pytest.mark.parametrize("n, q, b, sigma", [(4, 0.5, 2, 1.0), (4, 0.9, 1, 1.0)])
def test_truncated_upper_above_brute_force(n, q, b, sigma):
  up = mixtures.truncated_poisson_gaussian(n, q, b, sigma, step=1e-3)
  ub = np.maximum(np.asarray(jpld.delta(up.remove, EPS)), np.asarray(jpld.delta(up.add, EPS)))
  worst = np.zeros(EPS.size)
  for others in itertools.product([-1.0, 0.0, 1.0], repeat=n - 1):
    d = _truncated_batches(list(others) + [1.0], q, b)
    dp = _truncated_batches(list(others), q, b)
    worst = np.maximum(worst, np.maximum(_hockey(d, dp, sigma, EPS),
                                         _hockey(dp, d, sigma, EPS)))
  assert np.all(worst <= ub + 1e-9)          # measured margin >= 4e-5
  lo = mixtures.truncated_poisson_gaussian(n, q, b, sigma, step=1e-3, pessimistic=False)
  lb = np.maximum(np.asarray(jpld.delta(lo.remove, EPS)), np.asarray(jpld.delta(lo.add, EPS)))
  assert np.all(lb <= worst + 1e-6)          # the lower is an instance's (0-valued others)


def test_truncated_below_dp_accounting_and_no_truncation_is_poisson():
  e = de.TruncatedSubsampledGaussianDpEvent(10, 0.3, 2, 0.8)
  a, b = _pair([(e, 2)], AOR, 1e-2)
  r = a.get_epsilon_bounds(1e-5)
  # ours lies between our certified lower bound and the un-amplified bound
  # (the sum moves by at most 2: the Gaussian at sigma/2, composed twice);
  # dp_accounting's value is printed in the README note, not asserted: our
  # truncated branch uses the add/remove pair at sigma/2 and the average
  # inclusion probability q_t, theirs the replace-one pair at the same rate
  g = PLDAccountant(None, 1e-2).compose(de.GaussianDpEvent(0.4), 2)
  assert r.lower <= r.epsilon <= g.get_epsilon(1e-5)
  assert b.get_epsilon(1e-5) > r.lower
  # b > n: never truncated, exactly the Poisson-subsampled Gaussian (b = n: the
  # add neighbour, n + 1 records, can truncate; tests/accounting/test_truncated_neighbours.py)
  t = PLDAccountant(None, 1e-2).compose(de.TruncatedSubsampledGaussianDpEvent(5, 0.3, 6, 0.8), 2)
  p = PLDAccountant(None, 1e-2).compose(de.PoissonSampledDpEvent(0.3, de.GaussianDpEvent(0.8)), 2)
  assert t.get_epsilon(1e-5) == pytest.approx(p.get_epsilon(1e-5), rel=1e-12)


def test_truncation_probabilities_identity():
  """The identity behind truncated_poisson_gaussian's inclusion probability
  (its step ``_truncation_probabilities``, not public): q_t = q E[b/(B+1) |
  B >= b] = b P(Bin(n, q) > b) / (n t), t = P(B >= b), B ~ Bin(n-1, q)."""
  from scipy import stats
  n, q, b = 12, 0.3, 4
  t = float(stats.binom.sf(b - 1, n - 1, q))
  qt = float(stats.binom.sf(b, n, q)) * b / (t * n)
  qbar = (1 - t) * q + t * qt
  k = np.arange(b, n)
  direct = q * np.sum(stats.binom.pmf(k, n - 1, q) * b / (k + 1)) / t
  assert qt == pytest.approx(direct, rel=1e-12)
  assert qbar == pytest.approx((1 - t) * q + t * qt, rel=1e-15)


# ------------------------------------------------------------ with replacement


def _wr_batches(vals, m):
  out = {}
  n = len(vals)
  for draw in itertools.product(range(n), repeat=m):
    v = round(sum(vals[i] for i in draw), 9)
    out[v] = out.get(v, 0.0) + n ** -m
  return out


def test_with_replacement_replace_one_above_brute_force():
  n, m, sigma = 3, 2, 1.0
  up = mixtures.with_replacement_gaussian(n, m, sigma, step=1e-3)
  lo = mixtures.with_replacement_gaussian(n, m, sigma, step=1e-3, pessimistic=False)
  ub = np.asarray(jpld.delta(up.remove, EPS))
  lb = np.asarray(jpld.delta(lo.remove, EPS))
  worst = np.zeros(EPS.size)
  for others in itertools.product([-1.0, 0.0, 1.0], repeat=n - 1):
    d = _wr_batches([1.0] + list(others), m)
    dp = _wr_batches([-1.0] + list(others), m)
    worst = np.maximum(worst, _hockey(d, dp, sigma, EPS))
  assert np.all(worst <= ub + 1e-9)
  assert np.all(lb <= worst + 1e-6)


def test_with_replacement_special_is_the_binomial_mixture_of_gaussians():
  from scipy import stats
  n, m, sigma = 20, 3, 1.0
  w = stats.binom.pmf(np.arange(m + 1), m, 1.0 / n)
  wr = de.SampledWithReplacementDpEvent(n, m, de.GaussianDpEvent(sigma))
  ours = PLDAccountant(SPE, 1e-2).compose(wr, 2)
  mog = PLDAccountant(AOR, 1e-2).compose(
      de.MixtureOfGaussiansDpEvent(sigma, list(range(m + 1)), list(w / w.sum())), 2)
  # identical pairs up to the cut binomial tail (<= 1e-20, charged to +inf)
  assert ours.get_epsilon(1e-6) == pytest.approx(mog.get_epsilon(1e-6), rel=1e-9)
  r = PLDAccountant(REP, 1e-2).compose(wr, 2).get_epsilon_bounds(1e-6)
  assert r.lower <= r.epsilon
  # replace-one (x -> x') is at least the replace-special case (x -> 0)
  assert r.epsilon >= ours.get_epsilon(1e-6)


# ------------------------------------------------------------ tree aggregation


def test_tree_aggregation_is_a_gaussian():
  e = de.SingleEpochTreeAggregationDpEvent(2.0, [7, 3])      # depth ceil(log2 8) = 3
  ours = PLDAccountant(SPE).compose(e, 2).get_epsilon(1e-6)
  ref = PLDAccountant(SPE).compose(de.GaussianDpEvent(2.0 / math.sqrt(3)), 2).get_epsilon(1e-6)
  assert ours == ref
  assert not PLDAccountant().supports(e)


# ------------------------------------------------------- zero / empty / refusals


@pytest.mark.parametrize("event, eps_at_1e6", [
    (de.DiscreteLaplaceDpEvent(0.0, 1), math.inf),
    (de.DiscreteLaplaceDpEvent(1.0, 0), 0.0),
    (de.MixtureOfGaussiansDpEvent(1.0, [0.0, 0.0], [0.5, 0.5]), 0.0),
    (de.MixtureOfGaussiansDpEvent(0.0, [0.0, 1.0], [0.5, 0.5]), math.inf),
    (de.TruncatedSubsampledGaussianDpEvent(10, 0.0, 2, 1.0), 0.0),
    (de.TruncatedSubsampledGaussianDpEvent(10, 0.5, 0, 1.0), 0.0),
    (de.TruncatedSubsampledGaussianDpEvent(10, 0.5, 2, 0.0), math.inf),
])
def test_zero_cases(event, eps_at_1e6):
  acc = PLDAccountant().compose(event, 3)
  assert acc.get_epsilon(1e-6) == eps_at_1e6
  assert acc.get_epsilon(0.0) == eps_at_1e6
  assert acc.get_delta(1.0) == (1.0 if eps_at_1e6 == math.inf else 0.0)


@pytest.mark.parametrize("event, eps_at_1e6", [
    (de.SampledWithReplacementDpEvent(10, 0, de.GaussianDpEvent(1.0)), 0.0),
    (de.SampledWithReplacementDpEvent(10, 3, de.GaussianDpEvent(0.0)), math.inf),
])
def test_zero_cases_replace(event, eps_at_1e6):
  assert PLDAccountant(REP).compose(event).get_epsilon(1e-6) == eps_at_1e6


@pytest.mark.parametrize("rel, event, text", [
    (REP, de.DiscreteLaplaceDpEvent(1.0, 1), "`ADD_OR_REMOVE_ONE` or `REPLACE_SPECIAL`"),
    (REP, de.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.5, 0.5]), "`REPLACE_SPECIAL`"),
    (AOR, de.MixtureOfGaussiansDpEvent(1.0, [-1.0, 1.0], [0.5, 0.5]), "sensitivities"),
    (AOR, de.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.5, 0.6]), "sum to 1"),
    (REP, de.TruncatedSubsampledGaussianDpEvent(10, 0.5, 2, 1.0), "add/remove"),
    (AOR, de.SampledWithReplacementDpEvent(10, 2, de.GaussianDpEvent(1.0)),
     "`REPLACE_ONE` or `REPLACE_SPECIAL`"),
    (REP, de.SampledWithReplacementDpEvent(10, 2, de.LaplaceDpEvent(1.0)), "GaussianDpEvent"),
    (AOR, de.SingleEpochTreeAggregationDpEvent(1.0, 4), "`REPLACE_SPECIAL`"),
    (AOR, de.RepeatAndSelectDpEvent(de.GaussianDpEvent(1.0), 10.0, 1.0), "Papernot"),
    (AOR, de.PoissonSampledDpEvent(0.1, de.ZCDpEvent(0.5)), "zCDP"),
    (REP, de.LaplaceDpEvent(1.0), "LaplaceDpEvent"),
])
def test_refusals_name_the_reason(rel, event, text):
  acc = PLDAccountant(rel)
  assert not acc.supports(event)
  with pytest.raises(UnsupportedEventError, match=text):
    acc.compose(event)


@pytest.mark.parametrize("count", [0, -1, 1.5, True])
def test_non_positive_count_is_a_value_error(count):
  with pytest.raises(ValueError, match="count"):
    PLDAccountant().compose(de.DiscreteLaplaceDpEvent(1.0, 1), count)


def test_empty_ledger_answers_zero():
  acc = PLDAccountant()
  assert acc.get_epsilon(0.0) == acc.get_epsilon(1.0) == 0.0
  assert acc.get_delta(0.0) == acc.get_delta(math.inf) == 0.0
