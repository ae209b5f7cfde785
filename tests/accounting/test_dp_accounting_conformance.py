"""dp_accounting's own accountant tests, run against jaxacct's PLDAccountant.

dp_accounting 0.6.0 ships ``dp_accounting/pld/pld_privacy_accountant_test.py``
(and its base class ``privacy_accountant_test.PrivacyAccountantTest``). This
module imports that installed test module and runs every test in it with
``pld_privacy_accountant.PLDAccountant`` (and ``NeighborRel``) replaced by
jaxacct's: their code is not copied here, and their semantics are ours (0 for
an empty or no-op ledger, inf for a non-private one, ValueError for a
non-positive count, UnsupportedEventError naming the relation).

The module runs with ``PLDAccountant(..., truncated="dp_accounting")``, the
documented compatibility switch: one case (truncated subsampled Gaussian)
pins the value of dp_accounting's own construction for that event (17.904330,
looser, at n = dataset_size as theirs). Our default construction gives 17.44642
there, below theirs (:func:`test_truncated_default_is_tighter`; 16.45651 before
issue 48, when it covered only the neighbour that removes a record), and it is
checked against the exact truncated mechanism by brute force
(tests/accounting/test_truncated_neighbours.py: both neighbours); with the switch all 68
pass.
"""

import importlib
import itertools
import sys
import unittest

import numpy as np
import pytest
from scipy import signal, stats

pytest.importorskip("dp_accounting")
pytest.importorskip("absl.testing.absltest")

from jaxacct.accounting import NeighboringRelation, PLDAccountant  # noqa: E402


class CompatAccountant(PLDAccountant):
  """Ours with dp_accounting's construction for the truncated event (the switch)."""

  def __init__(self, neighboring_relation=None, *args, **kw):
    kw.setdefault("truncated", "dp_accounting")
    super().__init__(neighboring_relation, *args, **kw)


def _swapped_module():
  """The installed dp_accounting test module, with our accountant swapped in."""
  import dp_accounting.pld.pld_privacy_accountant as theirs
  mod = importlib.import_module("dp_accounting.pld.pld_privacy_accountant_test")

  class _Shim:                       # what the test module reads from `theirs`
    PLDAccountant = CompatAccountant
    NeighborRel = NeighboringRelation

  mod.pld_privacy_accountant = _Shim
  assert theirs.PLDAccountant is not PLDAccountant
  return mod


def _cases():
  mod = _swapped_module()
  loader = unittest.TestLoader()
  suite = loader.loadTestsFromTestCase(mod.PldPrivacyAccountantTest)
  out = []

  def flatten(s):
    for t in s:
      if isinstance(t, unittest.TestSuite):
        flatten(t)
      else:
        out.append(t)

  flatten(suite)
  return out


_CASES = _cases()


def _name(case):
  """The test method's name (with parameterized's index suffix), no parameter repr."""
  prefix = f"{type(case).__module__}.{type(case).__qualname__}."
  return case.id()[len(prefix):].split(" ", 1)[0]


@pytest.mark.slow
def test_truncated_default_is_tighter():
  """Our default truncated-subsampled-Gaussian value is below dp_accounting's.

  Their test pins epsilon 17.904330 at delta 1e-6 (within 1e-6) for
  3 x (n=4) + 2 x (n=3) events (q = 0.5, b = 2, sigma = 1). Both pairs are
  the mixture, over the truncation coin (P(B >= b), B ~ Bin(n-1, q) the
  other records sampled), of the Poisson-subsampled Gaussian at (sigma, q)
  and a pair at (sigma/2, q_t), q_t = P(target in batch | B >= b). In that
  second branch they put the *replace-one* pair (their comment: "a
  (slightly loose) upper bound"), we the add/remove pair, which it
  dominates; ``jaxacct.accounting.mixtures.truncated_poisson_gaussian``
  proves the add/remove pair dominates the mechanism, and
  :func:`test_truncated_brute_force_below_ours` checks it against the exact
  mechanism. ``dataset_size`` is the user's N: ours is the worse of the
  neighbours N (remove) and N + 1 (add) as one dominating pair (issue 48),
  17.44642 (16.45651 at N alone), between our certified lower bound and
  their value (theirs stays at N, as dp_accounting builds it); the switch
  ``truncated="dp_accounting"`` gives theirs.
  """
  from dp_accounting import dp_event
  acc = PLDAccountant()
  acc.compose(dp_event.TruncatedSubsampledGaussianDpEvent(4, 0.5, 2, 1.0), 3)
  acc.compose(dp_event.TruncatedSubsampledGaussianDpEvent(3, 0.5, 2, 1.0), 2)
  r = acc.get_epsilon_bounds(1e-6)
  assert r.lower <= r.epsilon < 17.904330   # 17.904330: dp_accounting's own test
  # ours (value regression; the brute-force test below is the independent check)
  assert r.epsilon == pytest.approx(17.44642, abs=1e-4)


# --------------------------------------------------------------------------
# brute force: the exact truncated mechanism on 1-D neighbouring datasets


def _batch_sum_law(values, q, b):
  """{sum: prob} of the released batch sum: Poisson(q), then a uniform b-subset."""
  law = {}
  n = len(values)
  for mask in itertools.product((0, 1), repeat=n):
    k = sum(mask)
    p = q ** k * (1 - q) ** (n - k)
    idx = [i for i in range(n) if mask[i]]
    subs = [idx] if k <= b else list(itertools.combinations(idx, b))
    for sub in subs:
      m = round(sum(values[i] for i in sub), 9)
      law[m] = law.get(m, 0.0) + p / len(subs)
  return law


def _cells(law, sigma, edges):
  means = np.array(list(law))
  w = np.array([law[m] for m in means])
  cdf = stats.norm.cdf((edges[None, :] - means[:, None]) / sigma)
  ones = np.ones((means.size, 1))
  return w @ np.diff(np.concatenate([0 * ones, cdf, ones], axis=1), axis=1)


def _lower_epsilon(pairs, delta, grid=1e-3, lo=-60.0, hi=60.0):
  """A certified LOWER bound on epsilon(delta) of the composed pairs (p, q, count).

  Each pair is already post-processed onto cells (data processing: its
  divergences are at most the mechanism's); losses are rounded DOWN onto
  the grid and losses below ``lo`` dropped, both of which only lower
  delta(eps) = E_P[(1 - e^(eps - L))_+]; so the returned epsilon is at most
  the true one (up to float round-off of the FFT, ~1e-13 here).
  """
  nb = int(round((hi - lo) / grid))
  total, offset = None, 0.0
  for p, q, count in pairs:
    keep = (p > 0) & (q > 0)
    loss = np.log(p[keep]) - np.log(q[keep])
    assert loss.max() < hi
    idx = np.floor((loss - lo) / grid).astype(np.int64)
    ok = idx >= 0
    h = np.bincount(idx[ok], weights=p[keep][ok], minlength=nb)
    for _ in range(count):
      total = h if total is None else np.maximum(signal.fftconvolve(total, h), 0.0)
      offset += lo
  losses = offset + grid * np.arange(total.size)

  def dlt(eps):
    m = losses > eps
    return float(np.sum(total[m] * -np.expm1(eps - losses[m])))

  a, z = 0.0, float(losses[-1])
  if dlt(a) <= delta:
    return 0.0
  for _ in range(60):
    mid = 0.5 * (a + z)
    a, z = (mid, z) if dlt(mid) > delta else (a, mid)
  return a


def _instance_epsilon(events, others, delta, h=2e-3, lim=40.0):
  """Lower bound on epsilon of the truncated mechanism: target x = 1, the other
  records ``others[:n-1]`` (1-D, |value| <= 1); both directions."""
  edges = np.arange(-lim, lim + h / 2, h)
  fwd, bwd = [], []
  for (n, q, b, sigma), count in events:
    o = list(others[:n - 1])
    p = _cells(_batch_sum_law([1.0] + o, q, b), sigma, edges)
    r = _cells(_batch_sum_law(o, q, b), sigma, edges)
    fwd.append((p, r, count))
    bwd.append((r, p, count))
  return max(_lower_epsilon(fwd, delta), _lower_epsilon(bwd, delta))


@pytest.mark.parametrize("events,delta,others,ours,near", [
    # dp_accounting's own ledger: its worst instance is far from any bound
    pytest.param([((4, 0.5, 2, 1.0), 3), ((3, 0.5, 2, 1.0), 2)], 1e-6, (-1.0, 0.0, 0.0),
                 17.4464, 0.0, marks=pytest.mark.slow),
    # t = P(B >= b) near 1: the truncated branch is nearly revealed, and the
    # all -1 instance nearly attains the bound (a rate q b/(b+1) in its place
    # gives 12.40 here, dp_accounting's replace-one pair 10.445)
    ([((5, 0.8, 1, 1.0), 2)], 1e-5, (-1.0,) * 4, 10.0020, 0.97),
    ([((6, 0.7, 2, 2.0), 3)], 1e-5, (-1.0,) * 5, 4.4327, 0.93),
])
def test_truncated_brute_force_below_ours(events, delta, others, ours, near):
  from dp_accounting import dp_event
  acc = PLDAccountant(None, 1e-3)
  for (n, q, b, sigma), count in events:
    acc.compose(dp_event.TruncatedSubsampledGaussianDpEvent(n, q, b, sigma), count)
  got = acc.get_epsilon(delta)
  assert got == pytest.approx(ours, abs=1e-3)
  exact_lower = _instance_epsilon(events, others, delta)
  assert exact_lower <= got
  assert exact_lower >= near * got



def test_all_cases_collected():
  # dp_accounting 0.6.0's module has 68 test cases (parameterized expanded)
  assert len(_CASES) == 68
  assert len({_name(c) for c in _CASES}) == 68


# the two cases whose ledgers build large PLD grids (tens of seconds each) run
# under -m slow; the events themselves are covered in the default suite by
# tests/accounting/test_accounting_events_more.py
_SLOW = {"test_mixture_of_gaussians_basic", "test_truncated_subsampled_gaussian_basic"}


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.slow) if _name(c) in _SLOW else c for c in _CASES],
    ids=[f"{_name(c)}-{i}" for i, c in enumerate(_CASES)])
def test_dp_accounting_case(case):
  result = unittest.TestResult()
  case.run(result)
  problems = result.failures + result.errors
  assert not problems, problems[0][1]
  assert not result.skipped or result.skipped[0][1]
