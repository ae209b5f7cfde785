"""Log-space primitives (float64, jittable, NaN-free on their domain)."""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.special import gammaln, log_ndtr, logsumexp

__all__ = ["log_ndtr", "logsumexp", "log1m_exp", "log_sub_exp", "log_binom",
           "log_add_exp", "log_expm1", "log_binom_pmf"]

log_add_exp = jnp.logaddexp


def log1m_exp(x):
  """``log(1 - exp(x))`` for ``x <= 0`` (Maechler's two-branch rule).

  Returns -inf at x = 0 and NaN for x > 0.
  """
  x = jnp.asarray(x)
  safe = jnp.minimum(x, -1e-300)
  out = jnp.where(safe > -0.6931471805599453, jnp.log(-jnp.expm1(safe)),
                  jnp.log1p(-jnp.exp(safe)))
  out = jnp.where(x == 0, -jnp.inf, out)
  return jnp.where(x > 0, jnp.nan, out)


def log_sub_exp(a, b):
  """``log(exp(a) - exp(b))`` for ``a >= b``; -inf when a == b (incl. -inf)."""
  a = jnp.asarray(a)
  b = jnp.asarray(b)
  a_fin = jnp.where(jnp.isfinite(a), a, 0.0)
  diff = jnp.where(jnp.isfinite(a), b - a_fin, -jnp.inf)
  out = a_fin + log1m_exp(jnp.minimum(diff, 0.0))
  out = jnp.where(a == -jnp.inf, -jnp.inf, out)
  out = jnp.where(a == jnp.inf, jnp.where(b == jnp.inf, jnp.nan, jnp.inf), out)
  return jnp.where(b > a, jnp.nan, out)


def log_binom(n, k):
  """``log C(n, k)`` via ``gammaln`` (real n >= k >= 0)."""
  return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


def log_expm1(y):
  """``log(e^y - 1)``: -inf for ``y <= 0``, +inf at ``y = +inf``.

  Written as ``y + log1m_exp(-y)``, accurate for tiny y (no underflow of
  expm1) and huge y (no overflow).
  """
  y = jnp.asarray(y)
  pos = y > 0
  ys = jnp.where(pos & jnp.isfinite(y), y, 1.0)
  out = ys + log1m_exp(-ys)
  out = jnp.where(y == jnp.inf, jnp.inf, out)
  return jnp.where(pos, out, -jnp.inf)


def log_binom_pmf(k, n, p):
  """``log Bin(k; n, p)``; -inf outside ``[0, n]``; ``p`` in [0, 1] (0^0 = 1)."""
  k = jnp.asarray(k, jnp.float64)
  ok = (k >= 0) & (k <= n)
  ks = jnp.clip(k, 0.0, jnp.maximum(n, 0.0))
  lp = jnp.where(ks > 0, ks * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0)
  lp = jnp.where((ks > 0) & (p <= 0), -jnp.inf, lp)
  lq = jnp.where(n - ks > 0, (n - ks) * jnp.log1p(-jnp.where(p < 1, p, 0.0)), 0.0)
  lq = jnp.where((n - ks > 0) & (p >= 1), -jnp.inf, lq)
  return jnp.where(ok, log_binom(n, ks) + lp + lq, -jnp.inf)
