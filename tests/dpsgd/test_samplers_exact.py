"""The new samplers' numbers against sources other than our accountant.

``jaxacct.dpsgd.epsilon`` for ``fixed_size``, ``fixed_size_with_replacement``
and ``truncated_poisson`` (their numbers come from ``PLDAccountant`` of the
sampler's event) held to:

* exact instances, brute force at tiny runs (N <= 5, one step): scalar
  records, the differing one at x = +1 (replace-one: x' = -1; add/remove:
  absent), every multiset of the others on {-1, 0, +1}; every batch the
  sampler can draw enumerated, so each output law is an exact finite mixture
  of N(sum, sigma^2). Its hockey-stick divergence is integrated exactly: the
  sign changes of log p - log q - eps on a grid of step sigma/200, refined by
  brentq, and normal CDF masses between them; the epsilon at delta of the
  worst instance by brentq (1e-10). Each instance's epsilon is a lower bound
  on the sampler's, so the upper may never fall below it; for ``fixed_size``
  the instance with the others at -1 is the worst case of every dataset
  (docs/bounds/fixed_size.md), so the upper must also be within 1e-7 of it.
* dp_accounting 0.6.0's RDP accountant (peer-live): ``SampledWithoutReplacement
  DpEvent`` under REPLACE_ONE reads the Gaussian with sensitivity 1, ours with
  2 (docs/bounds/fixed_size.md), so ours at sigma lies below theirs at sigma/2.

All behind ``slow`` (each 10 s to 2 min on two cores).
"""

import itertools
import math

import numpy as np
import pytest
from scipy import optimize, special

from jaxacct import dpsgd

pytestmark = pytest.mark.slow

SIGMA, DELTA = 2.0, 1e-5


def _mixture(pairs):
  """``[(sum, prob)]`` -> (means, weights), equal sums merged."""
  acc = {}
  for v, p in pairs:
    acc[v] = acc.get(v, 0.0) + p
  keys = sorted(acc)
  return np.array(keys, np.float64), np.array([acc[k] for k in keys])


def _mass(law, a, b):
  """P(a < X < b) for X ~ the mixture with N(., SIGMA^2) components (accurate in both tails)."""
  m, w = law
  lo, hi = (a - m) / SIGMA, (b - m) / SIGMA
  return float(np.sum(w * np.where(lo > 0, special.ndtr(-lo) - special.ndtr(-hi),
                                   special.ndtr(hi) - special.ndtr(lo))))


def _log_ratio(x, p, q):
  x = np.atleast_1d(x)[:, None]
  lp = special.logsumexp(-(x - p[0]) ** 2 / (2 * SIGMA**2), b=p[1], axis=1)
  lq = special.logsumexp(-(x - q[0]) ** 2 / (2 * SIGMA**2), b=q[1], axis=1)
  return lp - lq


def _hockey(p, q, eps):
  """delta(eps) = int (p - e^eps q)_+ dx, exactly (see the module)."""
  lo = min(p[0].min(), q[0].min()) - 40 * SIGMA
  hi = max(p[0].max(), q[0].max()) + 40 * SIGMA
  xs = np.arange(lo, hi, SIGMA / 200)
  gs = _log_ratio(xs, p, q) - eps
  g = lambda x: float(_log_ratio(x, p, q)[0]) - eps
  cut = np.nonzero(np.sign(gs[:-1]) != np.sign(gs[1:]))[0]
  ends = [-np.inf] + [optimize.brentq(g, xs[i], xs[i + 1], xtol=1e-13) for i in cut] + [np.inf]
  d = 0.0
  for k, (a, b) in enumerate(zip(ends[:-1], ends[1:])):
    if (gs[0] > 0) if k == 0 else g(a + min(b - a, SIGMA) / 2) > 0:
      d += _mass(p, a, b) - math.exp(eps) * _mass(q, a, b)
  return max(d, 0.0)


def _worst_epsilon(pairs):
  """epsilon at DELTA of the worst pair, both directions (the root of the max delta)."""
  def excess(eps):
    return max(max(_hockey(p, q, eps), _hockey(q, p, eps)) for p, q in pairs) - DELTA
  hi = 1.0
  while excess(hi) > 0:
    hi *= 2
  return optimize.brentq(excess, 0.0, hi, xtol=1e-10)


def _others(k):
  return itertools.combinations_with_replacement((-1.0, 0.0, 1.0), k)


def _fixed_size_law(values, b, replace):
  n = len(values)
  draws = (itertools.product(range(n), repeat=b) if replace
           else list(itertools.combinations(range(n), b)))
  draws = list(draws)
  return _mixture((sum(values[i] for i in s), 1.0 / len(draws)) for s in draws)


def _truncated_law(values, q, cap):
  """Poisson at rate q, then a uniform ``cap``-subset of a larger batch."""
  out, m = [], len(values)
  for chosen in itertools.product((0, 1), repeat=m):
    idx = [i for i in range(m) if chosen[i]]
    p = q ** len(idx) * (1 - q) ** (m - len(idx))
    kept = [idx] if len(idx) <= cap else list(itertools.combinations(idx, cap))
    out += [(sum(values[i] for i in s), p / len(kept)) for s in kept]
  return _mixture(out)


def _run(sampling, **kw):
  return dpsgd.epsilon(noise_multiplier=SIGMA, delta=DELTA, sampling=sampling, **kw)


@pytest.mark.parametrize("n, b", [(4, 3), (3, 2)])
def test_fixed_size_one_step_is_the_exact_worst_instance(n, b):
  # measured: upper - exact = 3.3e-9 (4, 3) and 6.0e-9 (3, 2); exact 4.0263154952,
  # 3.8829611567 (sigma 2, delta 1e-5)
  pairs = [(_fixed_size_law([1.0, *o], b, False), _fixed_size_law([-1.0, *o], b, False))
           for o in _others(n - 1)]
  exact = _worst_epsilon(pairs)
  r = _run("fixed_size", num_examples=n, batch_size=b, num_epochs=1)
  assert r.details["schedule"].total_steps == 1
  assert exact <= r.epsilon <= exact + 1e-7
  assert r.lower <= exact + 1e-9


def test_fixed_size_with_replacement_one_step_above_every_instance():
  # the upper is proven in any dimension; above the 1-D worst instance 9.6815584270
  # by 0.86 here (2-D instances are worse: tests/accounting/test_fixed_size_wr.py).
  # Our certified lower is that 1-D instance: within 1e-7 of the exact value.
  pairs = [(_fixed_size_law([1.0, *o], 3, True), _fixed_size_law([-1.0, *o], 3, True))
           for o in _others(3)]
  exact = _worst_epsilon(pairs)
  r = _run("fixed_size_with_replacement", num_examples=4, batch_size=3, num_epochs=1)
  assert r.epsilon >= exact
  assert abs(r.lower - exact) <= 1e-7


@pytest.mark.parametrize("cap", [1, 2])
def test_truncated_poisson_one_step_above_both_neighbours(cap):
  # N = 4, q = 1/2, one step: the remove neighbour (the target among N records)
  # and the add neighbour (among N + 1). Measured exact 2.0227 (cap 1) and 1.6152
  # (cap 2) against uppers 2.3948 and 2.8010
  pairs = [(_truncated_law([1.0, *o], 0.5, cap), _truncated_law(list(o), 0.5, cap))
           for k in (3, 4) for o in _others(k)]
  exact = _worst_epsilon(pairs)
  r = _run("truncated_poisson", num_examples=4, batch_size=2, total_steps=1,
           max_batch_size=cap)
  assert r.lower <= exact <= r.epsilon


@pytest.mark.parametrize("n, b, sigma, epochs", [(1000, 10, 1.0, 1), (4, 2, 2.0, 1)])
def test_fixed_size_below_dp_accounting_rdp(n, b, sigma, epochs):
  # measured: 6.6408 < 11.2127 (T = 100) and 4.8542 < 5.9700 (T = 2)
  dpa = pytest.importorskip("dp_accounting")
  from dp_accounting import dp_event as de   # noqa: PLC0415 - the peer
  from dp_accounting.rdp import rdp_privacy_accountant as rdp   # noqa: PLC0415
  r = dpsgd.epsilon(noise_multiplier=sigma, num_examples=n, batch_size=b, num_epochs=epochs,
                    delta=DELTA, sampling="fixed_size")
  steps = r.details["schedule"].total_steps
  peer = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
  peer.compose(de.SelfComposedDpEvent(
      de.SampledWithoutReplacementDpEvent(n, b, de.GaussianDpEvent(sigma / 2)), steps))
  assert r.lower <= r.epsilon < peer.get_epsilon(DELTA)
