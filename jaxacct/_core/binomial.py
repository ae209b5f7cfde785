"""Binomial tails by the regularised incomplete beta: jittable, or on the host.

One formula, two evaluations: ``jax.numpy`` and jax's ``betainc`` (the
kernels), or NumPy and SciPy's ``betainc`` (the host; there it is bit for bit
``scipy.stats.binom``'s tail, without importing ``scipy.stats``).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.special import betainc


def binom_sf(t, m, prob, xp=jnp, betainc=betainc):
  """Pr[Bin(m, prob) >= t] for real integer-valued t, m >= 0 (betainc).

  ``xp``/``betainc``: jax.numpy and jax's betainc (the kernels), or NumPy and
  SciPy's betainc (the host path: one formula, two evaluations).
  """
  t = xp.asarray(t, xp.float64)
  m = xp.asarray(m, xp.float64)
  mid = (t >= 1) & (t <= m)
  ta = xp.where(mid, t, 1.0)
  tb = xp.where(mid, m - t + 1.0, 1.0)
  pr = xp.clip(prob, 0.0, 1.0)
  val = betainc(ta, tb, pr)
  return xp.where(t <= 0, 1.0, xp.where(t > m, 0.0, val))


def binom_cdf(t, m, prob):
  """Pr[Bin(m, prob) <= t]."""
  return binom_sf(m - t, m, 1.0 - prob)
