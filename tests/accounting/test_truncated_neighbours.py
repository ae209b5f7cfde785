"""``TruncatedSubsampledGaussianDpEvent`` holds for both neighbours of ``dataset_size`` (issue 48).

``dataset_size=N`` is the user's dataset. Under add/remove its neighbours
are the dataset of N - 1 others without the target (the remove neighbour:
the dataset holding the target has N records) and the dataset of N + 1
records with it (the add neighbour). Brute force on 1-D instances: the
target x = 1, every placement of the other records on {-1, 0, +1}; the
kept batch is a uniform subset of size min(K, b), K ~ Bin(m, q) (Poisson
sampling, then a uniform b-subset: exchangeability), so its sum has an
exact multivariate-hypergeometric law, and the output is a Gaussian mixture
on the integers. Its hockey-stick divergence is integrated exactly: normal
CDF masses on the regions where p > e^eps q, whose ends are the sign
changes of the log-ratio on a grid of step sigma/100, refined by secant
steps on the exact log-ratio (an end off by r changes delta by O(r^2);
tails beyond 12 sigma, < 1e-32, ignored). Every one-step instance delta is
a lower bound on the mechanism's, per direction, so the event's pair must
never fall below it.
"""

import math

import jax
import numpy as np
import pytest
from scipy import special, stats

from jaxacct import pld as jpld
from jaxacct.accounting import PLDAccountant
from jaxacct.accounting import mixtures

de = pytest.importorskip("dp_accounting.dp_event")


def _sum_law(counts, q, b):
  """{sum: prob} of the kept batch of records with values -1, 0, +1 (counts)."""
  cm, c0, cp = counts
  m = cm + c0 + cp
  pj = np.zeros(m + 1)
  np.add.at(pj, np.minimum(np.arange(m + 1), b), stats.binom.pmf(np.arange(m + 1), m, q))
  law = {}
  for j in map(int, np.nonzero(pj)[0]):
    tot = math.comb(m, j)
    for im in range(min(cm, j) + 1):
      for ip in range(min(cp, j - im) + 1):
        i0 = j - im - ip
        if i0 <= c0:
          w = math.comb(cm, im) * math.comb(c0, i0) * math.comb(cp, ip) / tot
          law[ip - im] = law.get(ip - im, 0.0) + pj[j] * w
  return law


def _logmix(y, means, logw, sigma):
  return special.logsumexp(logw[None, :] - (y[:, None] - means) ** 2 / (2 * sigma * sigma),
                           axis=1)


def _hockey_both(P, Q, sigma, eps):
  """(H_{e^eps}(P || Q), H_{e^eps}(Q || P)) of the mixtures sum_k P[k] N(k, sigma^2), Q alike."""
  mp, wp = (np.array(v, float) for v in zip(*[(k, w) for k, w in P.items() if w > 0]))
  mq, wq = (np.array(v, float) for v in zip(*[(k, w) for k, w in Q.items() if w > 0]))
  lwp, lwq = np.log(wp), np.log(wq)
  y = np.arange(min(mp.min(), mq.min()) - 12 * sigma, max(mp.max(), mq.max()) + 12 * sigma,
                sigma / 100)
  ratio = lambda t: _logmix(t, mp, lwp, sigma) - _logmix(t, mq, lwq, sigma)
  g = ratio(y)

  def mass(a, b, means, w):
    return np.sum(w * (special.ndtr((b[:, None] - means) / sigma)
                       - special.ndtr((a[:, None] - means) / sigma)))

  out = []
  for sgn, (ma, wa, mb, wb) in ((1.0, (mp, wp, mq, wq)), (-1.0, (mq, wq, mp, wp))):
    row = []
    for e in eps:
      f = sgn * g - e
      pos = f > 0
      i = np.nonzero(pos[1:] != pos[:-1])[0]
      r = y[i] + (y[i + 1] - y[i]) * f[i] / (f[i] - f[i + 1])
      for _ in range(4):
        h = 1e-6 * sigma
        fr, fh = sgn * ratio(r) - e, sgn * ratio(r + h) - e
        r = np.clip(r - fr * h / np.where(fh != fr, fh - fr, 1.0), y[i], y[i + 1])
      edges = np.concatenate([[-np.inf], r, [np.inf]])
      keep = np.concatenate([[pos[0]], pos[i + 1]])
      a, b = edges[:-1][keep], edges[1:][keep]
      row.append(max(mass(a, b, ma, wa) - math.exp(e) * mass(a, b, mb, wb), 0.0))
    out.append(np.array(row))
  return out[0], out[1]


def _placements(k):
  """Counts (n_-, n_0, n_+) of k other records over {-1, 0, +1}."""
  return [(cm, k - cm - cp, cp) for cm in range(k + 1) for cp in range(k - cm + 1)]


def _truth(n, q, b, sigma, eps, neighbours=("remove", "add"), placements=None):
  """The worst instance delta per direction: (with || without, without || with),
  over the placements and the neighbours of a dataset of n records."""
  fwd, bwd = np.zeros(len(eps)), np.zeros(len(eps))
  for nb in neighbours:
    k = n - 1 if nb == "remove" else n          # others beside the target
    for cm, c0, cp in (placements or {}).get(nb) or _placements(k):
      f, r = _hockey_both(_sum_law((cm, c0, cp + 1), q, b), _sum_law((cm, c0, cp), q, b),
                          sigma, eps)
      fwd, bwd = np.maximum(fwd, f), np.maximum(bwd, r)
  return fwd, bwd


def _ours(n, q, b, sigma, eps, step):
  """The event's per-direction delta upper bounds and lower bounds (PLDAccountant)."""
  acc = PLDAccountant(None, step).compose(de.TruncatedSubsampledGaussianDpEvent(n, q, b, sigma))
  rs = [acc.get_delta_bounds(float(e)) for e in eps]
  get = lambda d, i: np.array([r.by_direction[d][i] for r in rs])
  assert all(r.delta == acc.get_delta(float(e)) for r, e in zip(rs, eps))
  return get("remove", 0), get("add", 0), np.maximum(get("remove", 1), get("add", 1))


def _old(n, q, b, sigma, eps, step):
  """The mixture at n = N alone (before issue 48): (remove, add) deltas."""
  with jax.enable_x64(True):
    pair = mixtures.truncated_poisson_gaussian(n, q, b, sigma, step=step, neighbours="remove")
    return (np.asarray(jpld.delta(pair.remove, np.asarray(eps))),
            np.asarray(jpld.delta(pair.add, np.asarray(eps))))


def _check(n, q, b, sigma, eps, step, placements=None):
  fwd, bwd = _truth(n, q, b, sigma, eps, placements=placements)
  rem, add, lower = _ours(n, q, b, sigma, eps, step)
  assert np.all(rem >= fwd * (1 - 1e-9) - 1e-12), (rem, fwd)
  assert np.all(add >= bwd * (1 - 1e-9) - 1e-12), (add, bwd)
  if placements is None:                      # the lower is the all-0 instance's
    assert np.all(lower <= np.maximum(fwd, bwd) + 1e-9)
  return fwd, bwd, rem, add


# The issue's three cases at the default grid (1e-4); the worst instance is the
# add neighbour with every other record at -1 (found by full enumeration;
# test_small_n_sweep_wide enumerates (20, 0.9, 19, 2.0) fully). Measured
# without_x || with_x truth / the old n = N add delta / the new add delta:
# 0.042816 / 0.031822 / 0.044352; 0.013694 / 0.0075059 / 0.016455;
# 0.015770 / 0.014214 / 0.018207.
@pytest.mark.parametrize("n, q, b, sigma, eps, old_ratio", [
    (8, 0.8, 7, 2.0, 0.5, 0.74),
    (20, 0.9, 19, 2.0, 1.0, 0.55),
    (200, 0.9, 183, 2.0, 1.0, 0.90),
])
def test_issue_cases_cover_the_add_neighbour(n, q, b, sigma, eps, old_ratio):
  e = np.array([eps])
  worst = {"add": [(n, 0, 0)], "remove": [(n - 1, 0, 0)]}
  fwd, bwd, rem, add = _check(n, q, b, sigma, e, 1e-4, placements=worst)
  old_rem, old_add = _old(n, q, b, sigma, e, 1e-4)
  assert old_add[0] / bwd[0] == pytest.approx(old_ratio, abs=0.01)   # the test can fail
  assert add[0] >= bwd[0] and rem[0] >= fwd[0]
  assert add[0] <= 1.25 * bwd[0]                                       # and stays tight


# Full enumeration of the placements, both neighbours, q up to 0.95 and b from
# the mean count to N - 1; the first is the tightest of a 105-setting sweep
# (N = 4..7, q in {0.5, 0.7, 0.8, 0.9, 0.95}, every such b, sigma in {0.7, 1,
# 2}: ours / truth >= 1.00098, add direction), the second the one where the
# n = N mixture alone fell lowest (0.783).
_EPS = np.array([0.0, 0.25, 0.5, 1.0, 2.0])


@pytest.mark.parametrize("n, q, b, sigma", [
    (4, 0.95, 3, 2.0),
    (7, 0.7, 6, 2.0),
    (6, 0.9, 5, 0.7),
])
def test_small_n_both_neighbours(n, q, b, sigma):
  _check(n, q, b, sigma, _EPS, 1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("n", [4, 5, 6, 7, 8, 9, 10])
def test_small_n_sweep_wide(n):
  for q in (0.5, 0.7, 0.8, 0.9, 0.95):
    for b in range(max(1, math.floor(q * n)), n):
      for sigma in (0.7, 1.0, 2.0):
        _check(n, q, b, sigma, _EPS, 1e-3)


@pytest.mark.slow
def test_issue_case_full_enumeration():
  _check(20, 0.9, 19, 2.0, np.array([0.0, 0.5, 1.0, 2.0]), 1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("n", [4, 5, 6, 7])
def test_dp_accounting_construction_covers_the_add_neighbour_here(n):
  """dp_accounting's construction (the compatibility switch) stays at n = N, as
  theirs does; its looser replace-one branch covered the add neighbour in every
  setting of the sweep (ours / truth >= 1.012). Observed, not proven."""
  for q in (0.5, 0.7, 0.8, 0.9, 0.95):
    for b in range(max(1, math.floor(q * n)), n):
      for sigma in (0.7, 1.0, 2.0):
        fwd, bwd = _truth(n, q, b, sigma, _EPS)
        acc = PLDAccountant(None, 1e-3, truncated="dp_accounting").compose(
            de.TruncatedSubsampledGaussianDpEvent(n, q, b, sigma))
        for j, e in enumerate(_EPS):
          r = acc.get_delta_bounds(float(e)).by_direction
          assert r["remove"][0] >= fwd[j] - 1e-12 and r["add"][0] >= bwd[j] - 1e-12


def _grid_profile(pair, step, top):
  """Each direction's delta at the grid losses 0, step, .., top * step."""
  eps = np.arange(top + 1) * step
  return [np.asarray(jpld.delta(getattr(pair, d), eps)) for d in ("remove", "add")]


def test_no_truncation_at_either_neighbour_is_poisson_and_worse_of_is_the_max():
  with jax.enable_x64(True):
    # b > N: neither neighbour truncates (t = 0 at N and N + 1): the plain
    # Poisson-subsampled Gaussian pair, whichever neighbour is asked for
    same = mixtures.truncated_poisson_gaussian(5, 0.3, 6, 0.8, step=1e-2)
    pg = mixtures.truncated_poisson_gaussian(5, 0.3, 6, 0.8, step=1e-2, neighbours="add")
    for d in ("remove", "add"):
      assert np.array_equal(np.asarray(getattr(same, d).probs), np.asarray(getattr(pg, d).probs))
    # b = N: the add neighbour (N + 1 records) can truncate, the remove one cannot
    pairs = [mixtures.truncated_poisson_gaussian(5, 0.3, 5, 0.8, step=1e-2, neighbours=nb)
             for nb in ("remove", "add")]
    both = mixtures.truncated_poisson_gaussian(5, 0.3, 5, 0.8, step=1e-2)
    # at every grid loss >= 0 the pair's profile is the max of the two
    # neighbours' (both directions): the least pair above both there
    top = 400
    want = [np.maximum(a, b) for a, b in zip(*(_grid_profile(p, 1e-2, top) for p in pairs))]
    got = _grid_profile(both, 1e-2, top)
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-15)
    rem_only = _grid_profile(pairs[0], 1e-2, top)
    assert got[0][5] > rem_only[0][5] or got[1][5] > rem_only[1][5]


@pytest.mark.parametrize("sigma", [0.02, 0.03])
def test_worse_of_dominates_each_neighbour_past_exp_overflow(sigma):
  # at sigma 0.02-0.03 the sigma/2 branch's losses run past 709.8 nats, where the
  # worse-of hull's gamma = e^eps overflows: the worse-of pair must still be at least
  # each neighbour's own mixture (computed without the hull), both directions
  n, q, b, h = 60_000, 256 / 60_000, 300, 1e-2
  both = mixtures.truncated_poisson_gaussian(n, q, b, sigma, step=h)
  for nb in ("remove", "add"):
    one = mixtures.truncated_poisson_gaussian(n, q, b, sigma, step=h, neighbours=nb)
    for d in ("remove", "add"):
      assert float(jpld.epsilon(getattr(both, d), 1e-5)) >= float(
          jpld.epsilon(getattr(one, d), 1e-5)), (nb, d)
