r"""The Gaussian-DP (CLT) model of a noise-scale family: a calibration's first guess.

mu^2 = sum_i c_i min((e^{1/s^2} - 1) / f_i, 1 / s^2) over rounds ``[(c_i, f_i)]``
(count, 1 / rate); delta(eps; mu-GDP) from Dong, Roth & Su, arXiv:1905.02383v3,
Cor. 2.13. Only a starting point: every point a calibration returns is evaluated.
"""

from __future__ import annotations

import numpy as np


def mu2(s, rounds):
  with np.errstate(over="ignore"):
    return sum(c * np.minimum(np.expm1(1.0 / s**2) / f, 1.0 / s**2) for c, f in rounds if c)


def bisect_log(f, lo, hi, iters=64):
  """x in [lo, hi] (log scale, vectorised) with f(x) changing sign from <= 0 to > 0."""
  a, b = np.log(lo), np.log(hi)
  for _ in range(iters):
    m = 0.5 * (a + b)
    up = f(np.exp(m)) > 0
    a, b = np.where(up, a, m), np.where(up, m, b)
  return np.exp(0.5 * (a + b))


def log_delta_excess(eps, mu, delta):
  """log delta(eps; mu-GDP) - log delta (Dong, Roth & Su, Cor. 2.13)."""
  from scipy.special import log_ndtr
  la, lb = log_ndtr(-eps / mu + mu / 2), log_ndtr(-eps / mu - mu / 2)
  with np.errstate(divide="ignore", invalid="ignore"):
    return la + np.log(-np.expm1(np.minimum(eps + lb - la, 0.0))) - np.log(delta)


def model_sigma(eps, delta, rounds):
  mu = bisect_log(lambda m: log_delta_excess(eps, m, delta), np.full(eps.shape, 1e-8),
                   np.full(eps.shape, 1e3))
  return bisect_log(lambda s: mu**2 - mu2(s, rounds), np.full(eps.shape, 1e-3),
                     np.full(eps.shape, 1e6))


def model_eps(sigma, delta, rounds):
  mu = np.sqrt(mu2(sigma, rounds))
  hi = mu**2 / 2 + mu * np.sqrt(2 * np.log(1 / delta)) + 1.0
  return bisect_log(lambda e: -log_delta_excess(e, mu, delta),
                     np.full(np.shape(mu), 1e-12), hi)
