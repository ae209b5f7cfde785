r"""Binomial windows of the shuffling pair kernels: tails, lengths, buckets.

Every pair kernel of ``jaxacct.shuffle`` sums a binomial mixture over a window
of static length ``W`` around the mean and charges (adds) the mass it cuts.
This module holds that shared policy:

* :func:`betainc_fixed` -- jax's ``betainc`` with a loop of known trip count
  (the accelerator layout's programs); the binomial tails themselves are
  :mod:`jaxacct._core.binomial`'s.
* :func:`window_start` / :func:`cut_mass` -- the integer start of a window of
  static length and the ``Bin(n-1, total)`` mass it cuts.
* :func:`window_size`, :func:`rdp_widths` -- static
  lengths of the reference kernels (power-of-2 / 1.5 x power-of-2 buckets).
* :func:`raw_widths`, :func:`bucket_widths`, :func:`fast_width` -- static
  lengths of the fast symmetric kernel (3-significant-bit buckets, multiples
  of ``BLOCK``).

Window rule: ``2 (z sd + z^2) + 3`` cells (Bernstein: the cut mass is at most
``2 exp(-z^2/2)``); with the default ``z = 10`` the cut mass is < 1e-20 and it
is computed and added anyway.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import betainc

from jaxacct._core.binomial import binom_sf


#: Default window half-width in standard deviations (cut mass < 1e-20).
DEFAULT_Z = 10.0
#: Block length of the fast symmetric kernel (one incomplete-beta anchor each).
BLOCK = 64


_BETAINC_ITERATIONS = 600   # jax's float64 continued fraction
_CHUNK = 64                 # trips of betainc_fixed between two tests whether it still moves


def betainc_fixed(a, b, x, axis_name=None):
  """``jax.scipy.special.betainc`` (float64), its Lentz loop of known trip count.

  The operations of jax's ``regularized_incomplete_beta_impl`` (DLMF 8.17.E23
  continued fraction, symmetry 8.17.E4, tolerance eps/2): jax stops its
  while loop when every element of the call has converged; here the loop runs
  at most 599 steps and stops updating at that step, in chunks of 64 steps
  of known trip count, each run only while an element still moves: no
  while loop of run-time trip count (an accelerator pays each trip's exit
  test as a host round trip), one test every 64 steps. Within ~1e-14
  absolute of jax's (XLA rounds the two programs differently).

  ``axis_name``: a vmapped axis (the lanes of a block) over which the loop
  goes on while any element has not converged, as jax's ``betainc`` does
  for a vmapped call (its primitive sees the whole batch): the same steps
  for every element as the CPU kernel of the same lanes.
  """
  a, b, x = jnp.broadcast_arrays(*(jnp.asarray(v, jnp.float64) for v in (a, b, x)))
  a_zero = (a == 0) | (b == jnp.inf)
  b_zero = (b == 0) | (a == jnp.inf)
  res_zero = (b_zero & (x != 1)) | (a_zero & (x == 0))
  res_one = (a_zero & (x != 0)) | (b_zero & (x == 1))
  res_nan = ((a < 0) | (b < 0) | (x < 0) | (x > 1) | (a_zero & b_zero)
             | jnp.isnan(a) | jnp.isnan(b) | jnp.isnan(x))
  fast = x < (a + 1.0) / (a + b + 2.0)
  a, b = jnp.where(fast, a, b), jnp.where(fast, b, a)
  x = jnp.where(fast, x, 1.0 - x)
  small = thr = float(np.finfo(np.float64).eps) / 2.0

  def step(i, st):
    c, d, h, going = st
    going = going & (i < _BETAINC_ITERATIONS)   # the last chunk's extra trips
    even = i % 2 == 0
    m = ((i - 1) // 2).astype(jnp.float64)
    zero_num = -(a + b) * x / (a + 1.0)
    even_num = jnp.where(m == 0, zero_num,
                         -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0)))
    odd_num = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m))
    num = jnp.where(i == 1, 1.0, jnp.where(even, even_num, odd_num))
    c2 = 1.0 + num / c
    c2 = jnp.where(jnp.abs(c2) < small, small, c2)
    d2 = 1.0 + num * d
    d2 = 1.0 / jnp.where(jnp.abs(d2) < small, small, d2)
    delta = c2 * d2
    keep = lambda new, old: jnp.where(going, new, old)
    more = jnp.any(jnp.abs(delta - 1.0) >= thr)
    if axis_name is not None:
      more = jax.lax.psum(more.astype(jnp.int32), axis_name) > 0
    going = going & more
    return keep(c2, c), keep(d2, d), keep(h * delta, h), going

  def chunk(k, st):   # _CHUNK trips, run only while an element still moves
    run = lambda s: jax.lax.fori_loop(0, _CHUNK, lambda j, s: step(1 + k * _CHUNK + j, s), s)
    return jax.lax.cond(st[3], run, lambda s: s, st)

  # iteration 0: partial denominator 0 -> h = c = small, d = 0
  h0 = jnp.full(a.shape, small)
  _, _, h, _ = jax.lax.fori_loop(0, -(-(_BETAINC_ITERATIONS - 1) // _CHUNK), chunk,
                                 (h0, jnp.zeros(a.shape), h0, jnp.asarray(True)))
  lbeta_small = jax.lax.lgamma(b) - jax.lax.lgamma(a + b)
  lbeta = jax.lax.lgamma(a) + lbeta_small
  factor = jnp.where(a < 2.0 * float(np.finfo(np.float64).tiny),
                     jnp.exp(jnp.log1p(-x) * b - lbeta_small),
                     jnp.exp(jnp.log(x) * a + jnp.log1p(-x) * b - lbeta) / a)
  out = h * factor
  out = jnp.where(fast, out, 1.0 - out)
  out = jnp.where(res_zero, 0.0, out)
  out = jnp.where(res_one, 1.0, out)
  return jnp.where(res_nan, jnp.nan, out)


def window_start(n_tr, total, width: int, xp=jnp):
  """Integer start of the window of static length ``width`` for Bin(n_tr, total).

  Centred on the mean, clipped to the support ``[0, n_tr]``. Jittable.
  """
  mean = n_tr * total
  lo = xp.floor(mean - 0.5 * (width - 1))
  lo = xp.clip(lo, 0.0, xp.maximum(n_tr + 1.0 - width, 0.0))
  return lo


def cut_mass(n, total, lo, width, xp=jnp, betainc=betainc):
  """Pr[Bin(n-1, total) <= lo-1] + Pr[Bin(n-1, total) >= lo+width-1].

  The mass of the clone count outside the window ``[lo, lo + width - 2]``
  (n-trial indexing of the pair kernels). Jittable.
  """
  m = n - 1.0
  hi = lo + width - 1.0  # last c kept (n-trial index)
  # both tails in ONE incomplete-beta call (binom_cdf(t, m, x) is
  # binom_sf(m - t, m, 1 - x)): one copy of betainc in the compiled program
  tl, tr, mm, xl, xr = xp.broadcast_arrays(
      *(xp.asarray(v, xp.float64) for v in (m - (lo - 1.0), hi, m, 1.0 - total, total)))
  tails = binom_sf(xp.stack([tl, tr]), xp.stack([mm, mm]), xp.stack([xl, xr]), xp, betainc)
  left = xp.where(lo >= 1, tails[0], 0.0)
  return left + tails[1]


def _bucket_coarse(w):
  """Round up to the bucket set {2^k, 1.5 * 2^k} (scalar, float)."""
  k = 2.0 ** math.floor(math.log2(w))
  return k if w <= k else (1.5 * k if w <= 1.5 * k else 2.0 * k)


def window_size(n, total, z: float = DEFAULT_Z) -> int:
  """Static window length for ``Bin(n, total)`` (eager, numpy; max over a batch).

  ``2 (z sd + z^2) + 3`` points, rounded up to a bucket ``{2^k, 1.5 * 2^k}``
  (nearby settings share one compiled kernel) and capped at ``n + 1`` (the
  whole support).
  """
  n = np.asarray(n, np.float64)
  t = np.clip(np.asarray(total, np.float64), 0.0, 1.0)
  n, t = np.broadcast_arrays(n, t)
  sd = np.sqrt(n * t * (1.0 - t))
  w = float(max(np.max(np.ceil(2.0 * (z * sd + z * z)) + 3.0), 2.0))
  k = 2.0 ** np.floor(np.log2(w))
  w = k if w <= k else (1.5 * k if w <= 1.5 * k else 2.0 * k)
  return int(min(w, float(np.max(n)) + 1.0))


def rdp_widths(n, total, rho, max_order, log_p, z: float = DEFAULT_Z):
  """Static (c-window, a-window) lengths for ``pair_rdp`` (eager numpy).

  The a-window half-width ``h`` makes the Hoeffding tail ``2 exp(-2 h^2 / c)``
  at most ``e^{-60}`` after the ``p^alpha`` weighting.
  """
  lp = float(np.max(log_p))
  # the c-tail is weighted by p^alpha too: Bernstein gives < exp(-z^2/2)
  zc = max(z, math.sqrt(2.0 * (float(max_order) * lp + 60.0)))
  wc = window_size(n, total, zc)
  n = float(np.max(np.asarray(n, np.float64)))
  cmax = min(n, float(np.max(np.asarray(n) * np.asarray(total))) + wc)
  h = math.sqrt(max(cmax, 1.0) * (float(max_order) * lp + 60.0) / 2.0) + 2.0
  wa = max(int(min(cmax + 1.0, 2.0 * h + 4.0)), 2)
  # same buckets as ``window_size`` (a longer a-window only moves mass from
  # the added tail bound into the exact sum)
  return wc, int(_bucket_coarse(wa))


def raw_widths(n, total, delta=None, z=None):
  """Per-lane unrounded window lengths ``2 (z sd + z^2) + 3`` (numpy).

  ``z`` defaults to ``DEFAULT_Z``, or with ``delta`` to the value that makes
  the cut mass <= 1e-10 delta (at most 40). Returns ``(widths, n)`` broadcast.
  """
  n = np.asarray(n, np.float64)
  t = np.clip(np.asarray(total, np.float64), 0.0, 1.0)
  if z is None:
    if delta is None:
      z = np.float64(DEFAULT_Z)
    else:
      dl = np.clip(np.asarray(delta, np.float64), 1e-300, 1.0)
      z = np.minimum(np.sqrt(2.0 * np.log(2.0 / (1e-10 * dl))), 40.0)
  n, t, z = np.broadcast_arrays(n, t, np.asarray(z, np.float64))
  sd = np.sqrt(n * t * (1.0 - t))
  return np.maximum(np.ceil(2.0 * (z * sd + z * z)) + 3.0, 2.0), n


def bucket_widths(w, n, block, coarse):
  """Round window lengths up to buckets (3 significant bits, or powers of 2
  when ``coarse``), to a multiple of ``block``, at most the support."""
  w = np.asarray(w, np.float64)
  k = 2.0 ** np.floor(np.log2(w))
  if coarse:
    w = np.where(w <= k, k, 2.0 * k)
  else:
    step = np.maximum(k / 8.0, 1.0)
    w = np.ceil(w / step) * step
  w = np.minimum(w, np.asarray(n, np.float64) + 1.0)
  return (np.maximum(np.ceil(w / block), 1.0) * block).astype(np.int64)


def fast_width(n, total, delta=None, *, block: int = BLOCK, z=None,
               coarse: bool = False) -> int:
  """Static c-window length of the fast symmetric kernel (eager numpy).

  ``2 (z sd + z^2) + 3`` cells (Bernstein: the cut mass is at most
  ``2 exp(-z^2/2)``; it is computed and added to delta anyway), with ``z``
  from ``delta`` (cut mass <= 1e-10 delta) or 10 when ``delta`` is None;
  rounded up to 3 significant bits (buckets 12.5% apart, so nearby settings
  share one compiled kernel; powers of 2 with ``coarse``), to a multiple of
  ``block``, and to at most the whole support. The max over a batch.
  """
  if delta is not None:
    delta = np.min(np.asarray(delta, np.float64))
  w, nn = raw_widths(n, total, delta, z)
  i = int(np.argmax(w))
  wmax = float(w.reshape(-1)[i])
  return int(bucket_widths(wmax, float(np.max(nn)), block, coarse))
