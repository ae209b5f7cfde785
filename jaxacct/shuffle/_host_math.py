r"""Host (NumPy, float64) evaluations of the two special functions of the pair kernels.

The HOST namespace's ``lgamma`` and ``betainc`` for
:func:`._symmetric_pair_sum.special` (one question answered without a
compiled program): XLA's and jax's own formulas, evaluated by NumPy, so that
the host path keeps the jitted kernel's values. SciPy's ``gammaln`` and
``betainc`` are more accurate, and that is the point: jax's ``betainc`` at
arguments ~1e5 is off by up to ~1e-10 relative (the rounding of XLA's
``lgamma`` in its log-Beta prefactor, covered by the kernels' rounding
allowance), and SciPy's would move the host values by as much.

* :func:`lgamma` -- the Lanczos approximation XLA's ``lgamma`` uses
  (``xla/client/lib/math.cc``, g = 7, 9 coefficients, reflection for x < 1/2),
  with XLA-CPU's ``log1p`` (:func:`log1p`) and fused multiply-add (:func:`fma`);
* :func:`betainc` -- ``jax.scipy.special.betainc`` (DLMF 8.17.E23 continued
  fraction by the modified Lentz algorithm, symmetry DLMF 8.17.E4, 600
  iterations, tolerance eps/2).

Agreement with the jitted kernels: ``tests/shuffle/test_shuffle_host.py``.
"""

from __future__ import annotations

import math

import numpy as np


_EPS = float(np.finfo(np.float64).eps)
_TINY = float(np.finfo(np.float64).tiny)

# xla/client/lib/math.cc: Lanczos approximation, g = 7, n = 9
_LANCZOS_G = 7.0
_LANCZOS_C0 = 0.99999999999980993227684700473478
_LANCZOS_C = (676.520368121885098567009190444019,
              -1259.13921672240287047156078755283,
              771.3234287776530788486528258894,
              -176.61502916214059906584551354,
              12.507343278686904814458936853,
              -0.13857109526572011689554706,
              9.984369578019570859563e-6,
              1.50563273514931155834e-7)
_LOG_PI = math.log(math.pi)
_LOG1P_SMALL = 0.41421356237309504880
_LOG_SQRT_2PI = math.log(math.sqrt(2.0 * math.pi))
_LOG_LG = math.log(_LANCZOS_G + 0.5)


def log1p(y):
  """``log1p`` as XLA's CPU emitter computes it: ``log(1 + y)`` for
  ``|y| >= sqrt(2) - 1`` (a rational approximation below, which agrees with
  ``np.log1p`` to an ulp). Matching the large branch matters: inside
  ``lgamma`` its rounding is multiplied by the argument (~1e5)."""
  y = np.asarray(y, np.float64)
  with np.errstate(all="ignore"):
    return np.where(np.abs(y) < _LOG1P_SMALL, np.log1p(y), np.log(1.0 + y))


def _split(a):
  c = 134217729.0 * a
  hi = c - (c - a)
  return hi, a - hi


def fma(a, b, c):
  """``a * b + c`` with one rounding (as XLA's CPU code contracts it), by
  Dekker's exact product and Knuth's two-sum (correctly rounded but for rare
  double-rounding ties)."""
  a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
  with np.errstate(all="ignore"):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    s = p + c
    bb = s - p
    t = (p - (s - bb)) + (c - bb)
    out = s + (t + e)
    return np.where(np.isfinite(out), out, p + c)


def lgamma(x):
  """``log |Gamma(x)|`` by XLA's Lanczos form (the jitted ``gammaln``'s formula)."""
  x = np.asarray(x, np.float64)
  with np.errstate(all="ignore"):
    need_reflect = x < 0.5
    z = np.where(need_reflect, -x, x - 1.0)
    s = np.full_like(z, _LANCZOS_C0)
    for i, c in enumerate(_LANCZOS_C):
      s = s + c / (z + (i + 1.0))
    # the order and constants of XLA's expansion (z / 7.5 as z * (1/7.5))
    t = z + (_LANCZOS_G + 0.5)
    log_t = log1p(z * (1.0 / (_LANCZOS_G + 0.5))) + _LOG_LG
    log_y = fma((z + 0.5) - t / log_t, log_t, _LOG_SQRT_2PI) + np.log(s)
    abs_x = np.abs(x)
    frac = abs_x - np.floor(abs_x)
    frac = np.where(frac > 0.5, 1.0 - frac, frac)
    denom = np.log(np.sin(math.pi * frac))
    reflection = np.where(np.isfinite(denom), _LOG_PI - denom - log_y, -denom)
    out = np.where(need_reflect, reflection, log_y)
    out = np.where(np.isinf(x), np.inf, out)
    return out


def betainc(a, b, x):
  """Regularised incomplete beta ``I_x(a, b)``: ``jax.scipy.special.betainc``'s
  algorithm (Lentz continued fraction, 600 iterations, tolerance eps/2)."""
  a, b, x = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, x)))
  shape = a.shape
  a, b, x = (np.array(v, np.float64, ndmin=1) for v in (a, b, x))
  with np.errstate(all="ignore"):
    a_zero = (a == 0) | (b == np.inf)
    b_zero = (b == 0) | (a == np.inf)
    res_zero = (b_zero & (x != 1)) | (a_zero & (x == 0))
    res_one = (a_zero & (x != 0)) | (b_zero & (x == 1))
    res_nan = ((a < 0) | (b < 0) | (x < 0) | (x > 1) | (a_zero & b_zero)
               | np.isnan(a) | np.isnan(b) | np.isnan(x))
    fast = x < (a + 1.0) / (a + b + 2.0)
    a, b = np.where(fast, a, b), np.where(fast, b, a)
    x = np.where(fast, x, 1.0 - x)
    small = thr = _EPS / 2.0
    # iteration 0: partial denominator 0 -> h = c = small, d = 0
    h = np.full(a.shape, small)
    c = h.copy()
    d = np.zeros(a.shape)
    # the partial numerators do not depend on the recurrence: all at once
    # (rows = iterations 1..599), with their Dekker split for the fma below
    it = np.arange(1, 600, dtype=np.float64)[:, None]
    m = np.floor((it - 1.0) / 2.0)
    even = -(a + m) * ((a + b) + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0))
    even[1] = (-(a + b) * x / (a + 1.0))
    odd = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m))
    nums = np.where(it % 2 == 0, even, odd)
    nums[0] = 1.0
    nhs, nls = _split(nums)
    for i in range(599):
      num = nums[i]
      c = 1.0 + num / c
      c[np.abs(c) < small] = small
      # d = fma(num, d, 1): XLA contracts the product and the sum
      p = num * d
      nh, nl = nhs[i], nls[i]
      dh, dlo = _split(d)
      e = ((nh * dh - p) + nh * dlo + nl * dh) + nl * dlo
      sm = p + 1.0
      bb = sm - p
      d = sm + (((p - (sm - bb)) + (1.0 - bb)) + e)
      d[np.abs(d) < small] = small
      d = 1.0 / d
      dl = c * d
      h = h * dl
      if not (np.abs(dl - 1.0) >= thr).any():
        break
    lbeta_small = lgamma(b) - lgamma(a + b)
    lbeta = lgamma(a) + lbeta_small
    # XLA contracts log(x) * a + (...) into one fma: the same rounding here
    arg = fma(np.log(x), a, log1p(-x) * b) - lbeta
    factor = np.where(a < 2.0 * _TINY, np.exp(log1p(-x) * b - lbeta_small),
                      np.exp(arg) / a)
    out = h * factor
    out = np.where(fast, out, 1.0 - out)
    out = np.where(res_zero, 0.0, out)
    out = np.where(res_one, 1.0, out)
    return np.where(res_nan, np.nan, out).reshape(shape)
