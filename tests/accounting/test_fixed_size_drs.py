"""Fixed-size batches without replacement: the per-step pair is Dong, Roth & Su's C_p.

Dong, Roth, Su (arXiv:1905.02383, subsampling theorem for sampling m of n
without replacement under replace-one): every step is C_p(f)-DP with
``C_p(f) = min{f_p, f_p^{-1}}^**``, ``f_p = p f + (1 - p) Id``, p = m/n,
here f = G_{2/sigma} (the Gaussian of sensitivity 2, dp_accounting's PLD
reading of sigma). C_p is symmetric and valid for both orders of the
neighbours, so a pair realising it composes (Zhu, Dong, Wang,
arXiv:2106.08567). Its privacy profile is ``delta(eps) = max over the two
curves of 1 - f(alpha) - e^eps alpha`` (the conjugate of a convex hull is
the max of the conjugates), i.e. the pointwise max of the remove and add
profiles: for eps >= 0 the remove profile, mirrored for eps < 0. That is
exactly the pair ``jaxacct.accounting.fixed_size.without_replacement_pair``
already composes (:func:`~jaxacct.accounting.fixed_size.symmetrize` of the
remove PLD), so the DRS route gives the same composed bound (10.43 at
N=60000, B=256, sigma=1, 2344 steps, delta=1e-5), not a tighter one.

Checked here from the trade-off curves themselves (not from PLDs): the
profile of C_p equals our upper pair's at eps in [-2, 4] (measured
<= 7e-8 relative at step 1e-4; 1e-3 here), and brute force over explicit
1-D datasets (every m-subset) stays below C_p in both orders, eps < 0
included.
"""

import itertools

import numpy as np
import pytest
from scipy import special

from jaxacct import pld as jpld
from jaxacct.accounting import fixed_size as fs

_EPS = np.array([-2.0, -0.5, -1e-3, 0.0, 1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 4.0])


def _drs_profile(p, mu, eps):
  """delta(eps) of C_p(G_mu) from the curves (alpha, f_p) and (f_p, alpha)."""
  z = np.linspace(-40.0, 40.0, 400001)      # reject N(0) vs N(mu) when x > z
  alpha = special.ndtr(-z)
  fp = p * special.ndtr(z - mu) + (1 - p) * (1 - alpha)
  one_minus_fp = p * special.ndtr(mu - z) + (1 - p) * alpha   # no cancellation
  a = np.concatenate([alpha, fp])                             # both curves
  c = np.concatenate([one_minus_fp, special.ndtr(z)])         # 1 - f(alpha)
  return np.array([max(float(np.max(c - np.exp(e) * a)), 0.0) for e in eps])


@pytest.mark.parametrize("n, m, sigma", [(60000, 256, 1.0), (1000, 100, 0.8),
                                         (10, 3, 2.0), (50000, 500, 1.5)])
def test_drs_symmetrised_trade_off_is_our_upper_pair(n, m, sigma):
  drs = _drs_profile(m / n, 2.0 / sigma, _EPS)
  up = fs.without_replacement_pair(n, m, sigma, step=1e-3)
  assert up.remove is up.add                 # one symmetric pair, both orders
  ours = np.asarray(jpld.delta(up.remove, _EPS))
  # pessimistic: never below the exact profile; step 1e-3: within 2e-3 relative
  # (measured 7e-8 at step 1e-4 with this curve resolution)
  assert np.all(ours >= drs * (1 - 1e-9))
  assert np.all(ours <= drs * (1 + 2e-3) + 1e-15)


def _wor_law(values, m):
  """{sum: prob} of the sum of a uniform m-subset of ``values``."""
  subs = list(itertools.combinations(range(len(values)), m))
  law = {}
  for s in subs:
    k = round(sum(values[i] for i in s), 9)
    law[k] = law.get(k, 0.0) + 1.0 / len(subs)
  return law


def _brute_profile(d, d2, m, sigma, eps):
  """Exact-to-1e-9 hockey stick of the WOR-Gaussian outputs on datasets d, d2."""
  x, dx = np.linspace(-m - 12 * sigma, m + 12 * sigma, 600001, retstep=True)

  def dens(law):
    return sum(w * np.exp(-(x - k) ** 2 / (2 * sigma ** 2)) for k, w in law.items()) / (
        sigma * np.sqrt(2 * np.pi))

  p, q = dens(_wor_law(d, m)), dens(_wor_law(d2, m))
  return np.array([np.sum(np.maximum(p - np.exp(e) * q, 0.0)) * dx for e in eps])


@pytest.mark.parametrize("n, m, sigma", [(5, 2, 1.0), (4, 3, 0.7)])
def test_brute_force_below_drs_both_orders(n, m, sigma):
  eps = np.array([-1.0, -0.2, 0.0, 0.3, 1.0, 2.0])
  drs = _drs_profile(m / n, 2.0 / sigma, eps)
  worst = np.zeros(eps.size)
  for others in [(-1.0,) * (n - 1), (1.0,) * (n - 1), (0.0,) * (n - 1),
                 (0.5,) * (n - 1), (-1.0, 1.0) + (0.0,) * (n - 3)]:
    d, d2 = [1.0, *others], [-1.0, *others]
    for a, b in ((d, d2), (d2, d)):
      bf = _brute_profile(a, b, m, sigma, eps)
      assert np.all(bf <= drs + 1e-7), (others, bf, drs)
      worst = np.maximum(worst, bf)
  # attained: the others-at-(-1) dataset and its mirror reach C_p at every eps
  np.testing.assert_allclose(worst, drs, rtol=1e-6, atol=1e-9)


# ---------------------------------------------------------------- tightness


def _hull(a, f):
  """Lower convex envelope (biconjugate) of the points (a, f), a ascending, on a."""
  h = []
  for pt in zip(a, f):
    while len(h) >= 2 and ((h[-1][0] - h[-2][0]) * (pt[1] - h[-2][1])
                           - (h[-1][1] - h[-2][1]) * (pt[0] - h[-2][0])) <= 0:
      h.pop()
    h.append(pt)
  hx, hy = np.array(h).T
  return np.interp(a, hx, hy)


def _instance_tradeoff(q, sigma, c, alpha, order):
  """f_T on ``alpha`` for the 1-D instance x = 1, x' = -1, other records at c
  (shifted: P = (1-q) N(0) + q N(1-c), Q = (1-q) N(0) + q N(-1-c), std
  sigma). Its likelihood ratio is increasing in y, so threshold tests are the
  Neyman-Pearson tests: reject when y > t (remove order) or y < t (add order)."""
  t = np.linspace(-40.0, 40.0, 200001) * sigma
  u, v = 1.0 - c, -1.0 - c

  def cdf(shift):
    return (1 - q) * special.ndtr(t / sigma) + q * special.ndtr((t - shift) / sigma)
  if order == "remove":          # type I error Q(y > t), type II P(y <= t)
    a, b = 1.0 - cdf(v), cdf(u)
  else:                          # pair (Q, P): type I P(y < t), type II Q(y >= t)
    a, b = cdf(u), 1.0 - cdf(v)
  o = np.argsort(a)
  return np.interp(alpha, a[o], b[o])


@pytest.mark.parametrize("n, m, sigma", [(5, 2, 1.0), (60000, 256, 1.0), (10, 3, 0.5)])
def test_c_p_is_the_biconjugate_of_the_instance_minimum(n, m, sigma):
  """The tightness argument of ``jaxacct.accounting.fixed_size`` (WOR), step by step.

  Any one-step dominating pair valid for every instance T (both orders) has
  trade-off f <= inf_T f_T, hence f <= (inf_T f_T)** (f is convex). Here:
  every instance of a family (others at c in [-1, 1], both orders) has
  f_T >= C_p (Dong-Roth-Su), and (inf_T f_T)** = C_p (c = -1 and c = +1
  attain f_p and f_p^{-1}). So C_p is the largest valid trade-off, i.e. the
  tightest one-step dominating pair, and by Blackwell every valid pair
  composes to at least composed C_p. Tolerance: 1e-6 absolute on the
  trade-off (curves sampled at 2e5 thresholds, interpolated on 2e4 alphas;
  measured max |hull - C_p| and max (C_p - f_T): 2.7e-9, 2.2e-11, 5.8e-15
  for the three settings).
  """
  q, mu = m / n, 2.0 / sigma
  alpha = np.linspace(0.0, 1.0, 20001)
  # f_p = q G_mu + (1 - q) Id, sampled along alpha = Phi(-t) (G_mu(alpha) =
  # Phi(t - mu)); f_p^{-1} is the same curve with the axes swapped
  t = np.linspace(-40.0, 40.0, 200001)
  a_t = special.ndtr(-t)
  f_t = q * special.ndtr(t - mu) + (1 - q) * special.ndtr(t)
  fp = np.interp(alpha, a_t[::-1], f_t[::-1])
  fp_inv = np.interp(alpha, f_t, a_t)
  c_p = _hull(alpha, np.minimum(fp, fp_inv))
  inf_f = np.full(alpha.size, np.inf)
  for c in np.linspace(-1.0, 1.0, 21):
    for order in ("remove", "add"):
      f = _instance_tradeoff(q, sigma, c, alpha, order)
      assert np.all(f >= c_p - 1e-6), (c, order)                # DRS: f_T >= C_p
      inf_f = np.minimum(inf_f, f)
  np.testing.assert_allclose(_hull(alpha, inf_f), c_p, atol=1e-6, rtol=0)
