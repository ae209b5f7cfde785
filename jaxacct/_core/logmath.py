"""Log-space primitives (float64, jittable, NaN-free on their domain)."""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax.scipy.special import gammaln, logsumexp, ndtr

from jaxacct._core.namespace import JAX

log_add_exp = jnp.logaddexp
LOG_HALF = -0.6931471805599453


def log_mills_series(x, xp=jnp):
  """``log(-x Phi(x) / phi(x))``, the asymptotic factor of the lower tail, for
  x <= -37: ``log Phi(x) = -x^2/2 - log(-x) - log(2 pi)/2`` plus this, six terms
  (the next, 10395 / x^12, under 1e-15 there)."""
  r = 1.0 / (x * x)
  return xp.log1p(-r * (1.0 - 3.0 * r * (1.0 - 5.0 * r * (1.0 - 7.0 * r * (1.0 - 9.0 * r)))))


def log_ndtr(x):
  """``log Phi(x)`` to relative precision on both sides (jittable), so that the
  upper tail ``1 - Phi(x) = -expm1(log_ndtr(x))`` keeps its digits.

  jax's ``log_ndtr`` takes ``log(ndtr(x))`` for ``0 < x < 8`` in float64:
  ~1e-16 absolute, so the tail it implies is ~5 % off at x = 7.9 (mpmath);
  and below -20 a three-term series, up to 3.9e-9 absolute off on [-37, -20].
  Here: ``log1p(-ndtr(-x))`` for x > 0 (``ndtr(-x)`` is accurate: erfc),
  ``log(ndtr(x))`` on [-37, 0] (a normal float there), and
  :func:`log_mills_series` below (SciPy's ``log_ndtr`` agrees within 2.3e-13).
  """
  x = jnp.asarray(x)
  near = jnp.clip(x, -37.0, 0.0)
  xs = jnp.minimum(x, -37.0)
  far = -0.5 * xs * xs - jnp.log(-xs) - 0.5 * math.log(2.0 * math.pi) + log_mills_series(xs)
  return jnp.where(x > 0, jnp.log1p(-ndtr(-jnp.abs(x))),
                   jnp.where(x > -37.0, jnp.log(ndtr(near)), far))


def log1m_exp(x, xp=jnp):
  """``log(1 - exp(x))`` for ``x <= 0`` (Maechler's two-branch rule).

  Returns -inf at x = 0 and NaN for x > 0. ``xp``: ``jax.numpy`` (default)
  or ``numpy`` (the host path, :mod:`jaxacct._core.namespace`); likewise below.
  """
  x = xp.asarray(x)
  safe = xp.minimum(x, -1e-300)
  out = xp.where(safe > -0.6931471805599453, xp.log(-xp.expm1(safe)),
                 xp.log1p(-xp.exp(safe)))
  out = xp.where(x == 0, -xp.inf, out)
  return xp.where(x > 0, xp.nan, out)


def log_sub_exp(a, b, xp=jnp):
  """``log(exp(a) - exp(b))`` for ``a >= b``; -inf when a == b (incl. -inf)."""
  a = xp.asarray(a)
  b = xp.asarray(b)
  a_fin = xp.where(xp.isfinite(a), a, 0.0)
  diff = xp.where(xp.isfinite(a), b - a_fin, -xp.inf)
  out = a_fin + log1m_exp(xp.minimum(diff, 0.0), xp)
  out = xp.where(a == -xp.inf, -xp.inf, out)
  out = xp.where(a == xp.inf, xp.where(b == xp.inf, xp.nan, xp.inf), out)
  return xp.where(b > a, xp.nan, out)


def log_ndtr_diff(a, b, ns=JAX):
  """``log(Phi(b) - Phi(a))`` for ``a <= b`` (+-inf allowed), accurate in both tails.

  Cells of a normal law: both ends reflected to the left tail when ``a > 0``,
  then :func:`log_sub_exp` of ``ns.sp.log_ndtr`` at both (one stacked call:
  a small program). ``ns``: :data:`jaxacct._core.namespace.JAX` (jittable)
  or ``HOST`` (NumPy/SciPy; through ``host_call``).
  """
  xp = ns.xp
  a, b = xp.broadcast_arrays(xp.asarray(a, xp.float64), xp.asarray(b, xp.float64))
  flip = a > 0
  lo = xp.where(flip, -b, a)
  hi = xp.where(flip, -a, b)
  both = ns.sp.log_ndtr(xp.stack([hi, lo]))
  return log_sub_exp(both[0], both[1], xp)


def log_laplace_cells(x1, x2, scale, xp=jnp):
  """Log masses of ``Lap(0, scale)`` and ``Lap(1, scale)`` on ``(x1, x2)``,
  ``0 <= x1 <= x2 <= 1`` (-inf for an empty cell):
  ``log(e^{-x1/b} - e^{-x2/b}) - log 2`` and ``log(e^{(x2-1)/b} - e^{(x1-1)/b}) - log 2``.
  """
  w = xp.maximum(x2 - x1, 0.0) / scale
  lw = xp.where(w > 0, xp.log(-xp.expm1(-xp.maximum(w, 1e-300))), -xp.inf)
  return LOG_HALF - x1 / scale + lw, LOG_HALF - (1.0 - x2) / scale + lw


def log_binom(n, k, gammaln=gammaln):
  """``log C(n, k)`` via ``gammaln`` (real n >= k >= 0; jax's or scipy's)."""
  return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


def log_expm1(y, xp=jnp):
  """``log(e^y - 1)``: -inf for ``y <= 0``, +inf at ``y = +inf``.

  Written as ``y + log1m_exp(-y)``, accurate for tiny y (no underflow of
  expm1) and huge y (no overflow).
  """
  y = xp.asarray(y)
  pos = y > 0
  ys = xp.where(pos & xp.isfinite(y), y, 1.0)
  out = ys + log1m_exp(-ys, xp)
  out = xp.where(y == xp.inf, xp.inf, out)
  return xp.where(pos, out, -xp.inf)


_HALF_LOG_2PI = 0.91893853320467274178


def _stirlerr(x, xp=jnp, gammaln=gammaln):
  """Stirling-series remainder ``log x! - [(x+1/2) log x - x + log(2 pi)/2]``.

  Asymptotic series (5 terms, error < 3e-17) for ``x > 15``; ``gammaln``
  below (absolute error ~1e-15 there). ``x >= 1``; callers mask ``x = 0``.
  """
  x = xp.asarray(x, xp.float64)
  big = x > 15.0
  xb = xp.where(big, x, 16.0)
  x2 = 1.0 / (xb * xb)
  series = (1.0 / 12 - (1.0 / 360 - (1.0 / 1260 - (1.0 / 1680 - x2 / 1188) * x2)
                        * x2) * x2) / xb
  xs = xp.where(big, 1.0, xp.maximum(x, 1e-300))
  small = gammaln(xs + 1.0) - (xs + 0.5) * xp.log(xs) + xs - _HALF_LOG_2PI
  return xp.where(big, series, small)


def _bd0(x, m, xp=jnp):
  """Deviance ``x log(x/m) + m - x`` (>= 0) without cancellation (Loader 2000).

  For ``|x - m| < 0.1 (x + m)`` the series ``(x-m) v + 2x sum v^{2j+1}/(2j+1)``,
  ``v = (x-m)/(x+m)`` (14 terms: truncation < 1e-30 relative); otherwise the
  direct formula. ``x >= 0``, ``m > 0``.
  """
  x = xp.asarray(x, xp.float64)
  m = xp.asarray(m, xp.float64)
  near = xp.abs(x - m) < 0.1 * (x + m)
  ms = xp.where(m > 0, m, 1.0)
  v = xp.where(near, (x - m) / xp.where(near, x + m, 1.0), 0.0)
  v2 = v * v
  acc = xp.zeros_like(v)
  for j in range(13, 0, -1):  # Horner in v^2 of sum_{j>=1} v^{2j}/(2j+1)
    acc = (acc + 1.0 / (2 * j + 1)) * v2
  ser = (x - m) * v + 2.0 * x * v * acc
  xs = xp.where(x > 0, x, 1.0)
  direct = xp.where(x > 0, xs * xp.log(xs / ms), 0.0) + m - x
  return xp.where(near, ser, direct)


def log_binom_pmf(k, n, p, xp=jnp, gammaln=gammaln):
  """``log Bin(k; n, p)``; -inf outside ``[0, n]``; ``p`` in [0, 1] (0^0 = 1).

  Saddle-point form of C. Loader, "Fast and accurate computation of binomial
  probabilities" (2000): ``stirlerr(n) - stirlerr(k) - stirlerr(n-k)
  - bd0(k, np) - bd0(n-k, nq) + log(n / (2 pi k (n-k)))/2``. Absolute error
  ~1e-14 even at n = 1e7 (the ``gammaln`` difference loses ~6e-8 there,
  since ``gammaln(1e7) ~ 1.5e8``); checked against mpmath in tests.
  Real (non-integer) ``k`` and ``n`` are allowed (the Gamma-function form).
  ``xp``/``gammaln``: jax.numpy and jax's gammaln (the kernels), or NumPy and
  a host gammaln (SciPy's: one formula, two evaluations; wrap host calls in
  ``np.errstate``).
  """
  k = xp.asarray(k, xp.float64)
  n = xp.asarray(n, xp.float64)
  p = xp.asarray(p, xp.float64)
  ok = (k >= 0) & (k <= n)
  ks = xp.clip(k, 0.0, xp.maximum(n, 0.0))
  nk = n - ks
  q = 1.0 - p
  ps = xp.where(p > 0, p, 1.0)
  # edges: k = 0 or k = n (also covers p in {0, 1})
  lq_all = xp.where(nk > 0, nk * xp.log1p(-xp.where(p < 1, p, 0.0)), 0.0)
  lq_all = xp.where((nk > 0) & (p >= 1), -xp.inf, lq_all)
  lp_all = xp.where(ks > 0, ks * xp.log(ps), 0.0)
  lp_all = xp.where((ks > 0) & (p <= 0), -xp.inf, lp_all)
  edge = (ks == 0) | (nk == 0)
  interior_p = (p > 0) & (p < 1)
  use = ~edge & interior_p
  kk = xp.where(use, ks, 1.0)
  nn = xp.where(use, n, 2.0)
  nkk = nn - kk
  pp = xp.where(use, p, 0.5)
  qq = xp.where(use, q, 0.5)
  # the three stirlerr and the two bd0 terms each in ONE stacked call: the
  # same values, a third of the compiled program (compile time)
  nn, kk, nkk, pp, qq = xp.broadcast_arrays(nn, kk, nkk, pp, qq)
  st = _stirlerr(xp.stack([nn, kk, nkk]), xp, gammaln)
  bd = _bd0(xp.stack([kk, nkk]), xp.stack([nn * pp, nn * qq]), xp)
  saddle = (st[0] - st[1] - st[2]
            - bd[0] - bd[1]
            + 0.5 * (xp.log(nn) - xp.log(kk) - xp.log(nkk)) - _HALF_LOG_2PI)
  # interior k with p in {0, 1}: probability 0
  other = xp.where(edge, log_binom(n, ks, gammaln) + lp_all + lq_all, -xp.inf)
  out = xp.where(use, saddle, other)
  return xp.where(ok, out, -xp.inf)
