"""jaxacct.risk: TPR at FPR, advantage and calibration to attack risk.

References and tolerances:

* Gaussian mechanism: mu-GDP with mu = 1/sigma, TPR = Phi(Phi^-1(alpha) + mu)
  (Dong, Roth & Su, arXiv:1905.02383v3, Eq. (4)), evaluated with mpmath at 50
  digits. The PLD path (jaxacct.pld.gaussian, connect-the-dots, step 1e-4)
  must be >= exact (certified side) and within 1e-8 of it (second-order
  discretisation error, measured <= 5e-10).
* Poisson-subsampled Gaussian: dp_accounting 0.6.0's PLD
  (``from_gaussian_mechanism(sampling_prob=q)``, composed), its TPR read off
  each direction's ``get_delta_for_epsilon`` on an epsilon grid (step 1e-3 on
  [0, 12]; a grid gives an upper bound): agreement within 1e-5 absolute TPR
  (two independent discretisations of the same pair; measured <= 6.6e-7 at
  FPR 1e-5..0.5 for (q, T, sigma) = (0.01, 100, 1), (0.01, 100, 0.6),
  (256/60000, 235, 1); the brief asked for 1e-3).
* Calibration: the returned sigma is certified (upper TPR <= target) and
  sigma / (1 + rtol) is not; shuffle (exact Gaussian) against the closed form.
"""

import math

import numpy as np
import pytest

from jaxacct import pld as jpld
from jaxacct import risk

mpmath = pytest.importorskip("mpmath")
mpmath.mp.dps = 50

FPRS = np.array([1e-6, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 0.9])


def _gdp_tpr(mu, alpha):
  """Phi(Phi^-1(alpha) + mu) at 50 digits."""
  ninv = lambda p: mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(p) - 1)
  return np.array([float(mpmath.ncdf(ninv(a) + mpmath.mpf(mu))) for a in np.ravel(alpha)])


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0])
def test_gaussian_pld_matches_gdp_closed_form(sigma):
  r = risk.tpr_from_plds(jpld.gaussian(sigma), FPRS,
                         lower=jpld.gaussian(sigma, pessimistic=False))
  exact = _gdp_tpr(1.0 / sigma, FPRS)
  assert np.all(r.upper >= exact)                       # certified side
  np.testing.assert_allclose(r.upper, exact, rtol=0, atol=1e-8)
  # optimistic PLD (losses rounded down one step 1e-4): a first-order lower bound
  assert np.all(r.lower <= exact)
  np.testing.assert_allclose(r.lower, exact, rtol=0, atol=1e-4)
  adv = risk.advantage_from_plds(jpld.gaussian(sigma))
  exact_adv = float(2 * mpmath.ncdf(mpmath.mpf(0.5) / sigma) - 1)   # TV of N(0,1), N(mu,1)
  assert exact_adv <= adv.upper <= exact_adv + 1e-8


@pytest.mark.parametrize("epochs", [1, 4])
def test_shuffle_is_exact_gaussian(epochs):
  # no amplification: E Gaussian steps = mu-GDP with mu = sqrt(E) / sigma
  r = risk.tpr_at_fpr(FPRS, noise_multiplier=1.3, num_examples=1000, batch_size=7,
                      num_epochs=epochs, sampling="shuffle")
  exact = _gdp_tpr(math.sqrt(epochs) / 1.3, FPRS)
  assert np.all(r.upper >= exact)
  np.testing.assert_allclose(r.upper, exact, rtol=2e-9, atol=2e-15)   # the 1e-9 margin
  assert np.all(np.isnan(r.lower))                       # 7 does not divide 1000


def _dpa_tpr(sigma, q, steps, alpha):
  """TPR at alpha from dp_accounting's per-direction delta curves (eps grid)."""
  pld_mod = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
  p = pld_mod.from_gaussian_mechanism(sigma, sampling_prob=q,
                                      value_discretization_interval=1e-4).self_compose(steps)
  eps = np.linspace(0.0, 12.0, 12001)
  # dp_accounting exposes the two directions only as private attributes
  d_rem = np.asarray(p._pmf_remove.get_delta_for_epsilon(eps))
  d_add = np.asarray(p._pmf_add.get_delta_for_epsilon(eps))
  a = np.asarray(alpha)[:, None]

  def one(dfwd, drev):
    s1 = np.min(dfwd[None, :] + np.exp(eps)[None, :] * a, axis=1)
    s2 = np.min(1 - np.exp(-eps)[None, :] * (1 - drev[None, :] - a), axis=1)
    return np.minimum(np.minimum(s1, s2), 1.0)

  return np.maximum(one(d_rem, d_add), one(d_add, d_rem)), max(d_rem[0], d_add[0])


def test_poisson_matches_dp_accounting():
  pytest.importorskip("dp_accounting")
  n, b, steps, sigma = 10_000, 100, 100, 1.0                 # q = 0.01
  alpha = np.array([1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5])
  r = risk.tpr_at_fpr(alpha, noise_multiplier=sigma, num_examples=n, batch_size=b,
                      total_steps=steps, sampling="poisson")
  ref, ref_adv = _dpa_tpr(sigma, b / n, steps, alpha)
  np.testing.assert_allclose(r.upper, ref, rtol=0, atol=1e-5)
  assert np.all(r.lower <= r.upper) and np.all(r.lower >= alpha)
  adv = risk.advantage(noise_multiplier=sigma, num_examples=n, batch_size=b,
                       total_steps=steps, sampling="poisson")
  assert abs(adv.upper - ref_adv) <= 1e-5 and adv.lower <= adv.upper


def test_balls_in_bins_bracket_and_epsilon_consistency():
  from jaxacct import dpsgd
  cfg = dict(noise_multiplier=1.0, num_examples=6_000, batch_size=60, num_epochs=2)
  alpha = np.array([1e-5, 1e-4, 1e-3, 1e-2, 0.1])
  r = risk.tpr_at_fpr(alpha, **cfg)
  assert np.all(np.diff(r.upper) > 0) and np.all(r.upper <= 1)
  assert np.all(r.lower <= r.upper) and np.all(r.lower >= alpha)
  assert np.all(r.upper / r.lower < 1.05)               # the tight PLD's bracket
  # an (eps, delta) certificate gives TPR <= delta + e^eps alpha; the trade-off
  # (min over all eps) is below it (two PLD paths: 1e-3 relative slack)
  for delta in (1e-5, 1e-3):
    eps = dpsgd.epsilon(delta=delta, **cfg).epsilon
    assert np.all(r.upper <= (delta + math.exp(eps) * alpha) * (1 + 1e-3))
  adv = risk.advantage(**cfg)
  assert 0 < adv.lower <= adv.upper < 1
  # balls-in-bins amplifies: below shuffle's no-amplification Gaussian
  sh = risk.tpr_at_fpr(alpha, sampling="shuffle", **cfg)
  assert np.all(r.upper <= sh.upper)


def test_tpr_from_plds_compiles_nothing(compile_counter):
  pair = jpld.gaussian(0.9)
  risk.tpr_from_plds(pair, FPRS)
  with compile_counter as c:
    risk.tpr_from_plds(pair, np.geomspace(1e-7, 0.99, 50))
    risk.advantage_from_plds(pair)
  assert c.count == 0


@pytest.mark.parametrize("epochs", [1, 3])
def test_calibrate_shuffle_closed_form(epochs):
  from scipy.special import ndtri
  tpr, fpr = np.array([0.1, 0.5, 0.05]), np.array([1e-3, 1e-2, 1e-4])
  s = risk.calibrate_noise_multiplier(tpr=tpr, fpr=fpr, num_examples=1000, batch_size=10,
                                      num_epochs=epochs, sampling="shuffle", rtol=1e-4)
  exact = math.sqrt(epochs) / (ndtri(tpr) - ndtri(fpr))
  assert np.all(s >= exact * (1 - 1e-12)) and np.all(s <= exact * (1 + 1e-4) * (1 + 1e-9))
  s_adv = risk.calibrate_noise_multiplier(advantage=0.2, num_examples=1000, batch_size=10,
                                          num_epochs=epochs, sampling="shuffle", rtol=1e-4)
  exact_adv = math.sqrt(epochs) / (2 * ndtri(0.6))
  assert exact_adv * (1 - 1e-12) <= s_adv <= exact_adv * (1 + 1e-4) * (1 + 1e-9)


def test_calibrate_poisson_is_certified_and_tight():
  # q = 0.1, 10 steps; targets met near sigma ~ 1 (small PLD grids: a large
  # sigma makes the Poisson grid step, and so the PLD, much finer)
  cfg = dict(num_examples=1000, batch_size=100, total_steps=10, sampling="poisson")
  tpr, fpr, rtol = np.array([0.008, 0.04]), np.array([1e-3, 1e-2]), 1e-3
  s = risk.calibrate_noise_multiplier(tpr=tpr, fpr=fpr, rtol=rtol, **cfg)
  assert s.shape == (2,)
  for si, t, a in zip(s, tpr, fpr):
    at = risk.tpr_at_fpr(a, noise_multiplier=si, with_lower=False, **cfg).upper
    below = risk.tpr_at_fpr(a, noise_multiplier=si / (1 + rtol), with_lower=False, **cfg).upper
    assert at <= t < below
  a = risk.calibrate_noise_multiplier(advantage=0.15, rtol=rtol, **cfg)
  assert risk.advantage(noise_multiplier=a, with_lower=False, **cfg).upper <= 0.15
  assert risk.advantage(noise_multiplier=a / (1 + rtol), with_lower=False, **cfg).upper > 0.15


@pytest.mark.parametrize("kw, match", [
    (dict(tpr=0.001, fpr=0.01), "tpr must be > fpr"),
    (dict(tpr=0.1, fpr=0.0), "fpr"),
    (dict(tpr=1.0, fpr=0.01), "tpr"),
    (dict(tpr=0.1), "tpr and fpr together"),
    (dict(tpr=0.1, fpr=0.01, advantage=0.1), "either advantage"),
    (dict(advantage=1.5), "advantage"),
    (dict(tpr=0.1, fpr=0.01, rtol=0.5), "rtol"),
    (dict(tpr=0.1, fpr=0.01, direction="up"), "direction"),
])
def test_calibrate_validation(kw, match):
  with pytest.raises(ValueError, match=match):
    risk.calibrate_noise_multiplier(num_examples=1000, batch_size=10, num_epochs=1,
                                    sampling="shuffle", **kw)


def test_tpr_at_fpr_validation():
  cfg = dict(num_examples=1000, batch_size=10, num_epochs=1, sampling="shuffle")
  with pytest.raises(ValueError, match="noise_multiplier"):
    risk.tpr_at_fpr(0.1, noise_multiplier=[1.0, 2.0], **cfg)
  with pytest.raises(ValueError, match="noise_multiplier"):
    risk.tpr_at_fpr(0.1, noise_multiplier=-1.0, **cfg)
  with pytest.raises(ValueError, match="fpr"):
    risk.tpr_at_fpr(1.5, noise_multiplier=1.0, **cfg)
  with pytest.raises(ValueError, match="sampling"):
    risk.tpr_at_fpr(0.1, noise_multiplier=1.0, num_examples=1000, batch_size=10,
                    num_epochs=1, sampling="bins")
