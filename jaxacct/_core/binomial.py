"""Binomial tails by the regularised incomplete beta: jittable, or on the host.

One formula, two evaluations: ``jax.numpy`` and jax's ``betainc`` (the
kernels), or NumPy and SciPy's ``betainc`` (the host; there it is bit for bit
``scipy.stats.binom``'s tail, without importing ``scipy.stats``). On the host,
``scipy.stats.binom``'s pmf, cdf and sf themselves (:func:`host_law`).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
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


def host_law():
  """``(pmf, cdf, sf)`` of ``Bin(n, q)`` on the host, for integer ``k`` (arrays
  or scalars), integer ``n >= 1`` and ``0 < q < 1``: ``scipy.stats.binom``'s
  values bit for bit (tests/_core/test_binomial.py), without importing
  ``scipy.stats``. The sf is :func:`binom_sf` on SciPy's ``betainc``; the pmf
  and cdf are the ufuncs scipy.stats' ``_pmf`` and ``_cdf`` call (the betainc
  route to the cdf differs in the last bits), with its values off the support
  (pmf 0; cdf 0 below 0 and 1 from n on); where SciPy has no such ufuncs,
  ``scipy.stats.binom``'s own methods."""
  try:
    from scipy.special._ufuncs import _binom_cdf, _binom_pmf
  except ImportError:   # another SciPy: its public distribution
    from scipy.stats import binom
    return binom.pmf, binom.cdf, binom.sf
  from scipy.special import betainc as sp_betainc

  def on(f, k, n, q, above, top):
    k = np.asarray(k)
    val = f(np.clip(k, 0, n), n, q)
    return np.where(k < 0, 0.0, np.where(k > top, above, val))[()]

  def sf(k, n, q):   # P(Bin > k) = P(Bin >= k + 1)
    return binom_sf(np.asarray(k) + 1, n, q, xp=np, betainc=sp_betainc)[()]

  return (lambda k, n, q: on(_binom_pmf, k, n, q, 0.0, n),
          lambda k, n, q: on(_binom_cdf, k, n, q, 1.0, n - 1), sf)
