r"""The final rule of an allocation run, in one place: the smaller of its PLD and
no amplification.

A k-of-t allocation run over E epochs is a post-processing of m = k E
full-batch Gaussian steps (each example joins k of the t steps of each epoch),
whose exact epsilon / delta is one Gaussian at sigma / sqrt(m) (Balle & Wang,
arXiv:1805.06530v2, Thm 8). Both are upper bounds, so the smaller is; where the
allocation PLD cannot certify (+inf, or NaN) the Gaussian stands. Read by the evaluator
(flat arrays) and by the accountant's scheme door (one ledger, one run).
"""

from __future__ import annotations

import math

import numpy as np

from jaxacct._core.gaussian import (gaussian_delta_kernel, gaussian_epsilon_jit,
                                    gaussian_epsilon_kernel)
from jaxacct._core.lazy import LazyModule
from jaxacct._core.namespace import for_inputs, host_call

# the ledger's events and values: imported with the first ledger (dp_accounting comes along)
composition = LazyModule("jaxacct.accounting._composition")


def is_host(sigma, delta) -> bool:
  """The host-or-jit choice of one question, made once (:func:`for_inputs`:
  one lane in NumPy, arrays by the jitted programs) and passed down as
  ``host=`` to the doors below (None: they make it themselves)."""
  return for_inputs(sigma, delta).is_host


def gaussian_upper(sigma, delta, host=None):
  """Exact epsilon at ``delta`` of one Gaussian step of noise ``sigma`` (numpy;
  one lane in NumPy, arrays by the jitted kernel: :func:`is_host`)."""
  sigma, delta = np.asarray(sigma, np.float64), np.asarray(delta, np.float64)
  if is_host(sigma, delta) if host is None else host:
    return np.asarray(host_call(gaussian_epsilon_kernel, sigma, delta), np.float64)
  return np.asarray(gaussian_epsilon_jit(sigma, delta), np.float64)


def gaussian_lower(sigma, delta):
  """A lower bound on :func:`gaussian_upper` (NumPy, nothing compiled).

  With mu = 1 / sigma the privacy loss under P is N(mu^2/2, mu^2) and
  dP >= e^{x + s} dQ on {loss > x + s}, so delta(x) >= (1 - e^{-s})
  P(loss > x + s): the epsilon at delta exceeds x_s = mu^2/2 - s - mu
  Phi^{-1}(delta / (1 - e^{-s})) for every s > 0 (best of a few s, less a
  float margin of 1e-9 relative).
  """
  from scipy.special import ndtri   # scipy loads with the first calibration
  mu = 1.0 / np.asarray(sigma, np.float64)
  d = np.asarray(delta, np.float64) * (1 + 1e-9)
  best = np.full(np.broadcast(mu, d).shape, -np.inf)
  for s in (0.05, 0.2, 0.5, 1.0, 2.0):
    r = d / -math.expm1(-s)
    with np.errstate(invalid="ignore", divide="ignore"):
      x = np.where(r < 1, mu**2 / 2 - s - mu * ndtri(np.minimum(r, 1.0)), -np.inf)
    best = np.maximum(best, np.where(np.isfinite(x), x, -np.inf))
  return best - 1e-9 * (1 + np.abs(best))


def local_sigma(sigma, m):
  """The one Gaussian that m full-batch steps of noise ``sigma`` compose to."""
  return np.asarray(sigma, np.float64) / math.sqrt(m)


def local_epsilon(sigma, delta, m, host=None):
  """Exact epsilon at ``delta`` of m full-batch Gaussian steps."""
  return gaussian_upper(local_sigma(sigma, m), delta, host)


def local_delta(sigma, epsilon, m):
  """Exact delta at ``epsilon`` of m full-batch Gaussian steps (NumPy)."""
  return np.asarray(host_call(gaussian_delta_kernel, local_sigma(sigma, m),
                              np.asarray(epsilon, np.float64)), np.float64)


def smaller(pld, local):
  """The final rule: the smaller upper, ``local`` where ``pld`` is NaN or +inf."""
  return np.fmin(np.asarray(pld, np.float64), np.asarray(local, np.float64))


def min_no_amplification(up, sigma, delta, m, exact=False, host=None):
  """``(smaller(up, local), local or None)`` at ``delta``, local = m Gaussian
  steps without amplification (exact); without ``exact`` the Gaussian program
  runs only where :func:`gaussian_lower` does not already show ``local >=
  up``."""
  if not exact and np.all(gaussian_lower(local_sigma(sigma, m), delta) >= up):
    return up, None
  loc = local_epsilon(sigma, delta, m, host)
  return smaller(up, loc), loc


def gaussian_ledger(live, relation):
  """``(mu, [(mechanism value, count), ...])`` of a ledger ``[(event, count)]`` of
  Gaussian events only, else None: mu-GDP composes in closed form (mu =
  sqrt(sum n mu_i^2); Dong, Roth & Su, arXiv:1905.02383v3, Cor. 3.3), no PLD built."""
  ms = [(composition.base_mechanism(e, relation) if composition.kind(e) == "gaussian"
         and float(e.noise_multiplier) > 0 else None, n) for e, n in live]
  if any(m is None for m, _ in ms):
    return None
  return composed_mu((m.gdp_mu, n) for m, n in ms), ms


def composed_mu(terms) -> float:
  """mu of ``n`` compositions of each mu_i-GDP mechanism, ``[(mu_i, n), ...]``:
  sqrt(sum n mu_i^2) (Dong, Roth & Su, arXiv:1905.02383v3, Cor. 3.3; exact)."""
  return math.sqrt(sum(n * mu ** 2 for mu, n in terms))
