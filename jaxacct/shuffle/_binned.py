r"""Certified binned sums over log-concave integer pmfs (shared by the shuffle
RDP kernels in ``multinomial.py`` and ``girgis.py``).

The sums in these bounds have the form :math:`\sum_{j=0}^{N} f(j)\,g(j)`
with :math:`f` a binomial pmf (log-concave) and :math:`g \ge 0` monotone on
each side of a known split point. With a static number of grid edges
:math:`e_0 < \dots < e_{G-1}` (traced values; duplicates allowed, giving
empty bins) we bound each bin :math:`[x, y]`:

* **mass, upper** (log-concavity, :math:`f` monotone on the bin): the secant
  of :math:`\log f` at the end nearer the mode, extended across the bin, lies
  above :math:`\log f`, so :math:`\sum_{j\in[x,y]} f(j) \le f(y)\,
  \frac{1-\rho^{L}}{1-\rho}` with :math:`\rho = f(y-1)/f(y) \le 1` (left of
  the mode; mirrored on the right);
* **mass, lower**: :math:`\log f` lies above its chord on the bin.

A bin of length one is exact, so when every integer is an edge the sum is
exact. Every grid built here contains the pmf mode ``M`` and ``M + 1`` as
edges, so no bin straddles the mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core.logmath import log1m_exp



def binom_mode(n, p):
  """Mode ``floor((n+1) p)`` of Bin(n, p), clipped to [0, n]."""
  return jnp.clip(jnp.floor((n + 1.0) * p), 0.0, n)


def make_grid(top, centre, sd, num, *, focus=None):
  """Sorted integer edges in ``[0, top]`` (float64), ``num + 4`` of them.

  Mix: 0; ``centre``, ``centre+1``, ``centre+2`` (clipped); a geometric grid
  from 0 (dense at small values); a geometric grid from ``top`` downwards; a
  linear grid over ``[0, top]``; and most points on a linear grid over
  ``centre +- 6 sd`` -- half of them moved to ``focus +- 6 sd`` and to unit
  spacing around ``focus`` when ``focus``
  (e.g. the peak of a tilted summand) is given. Shapes are static (leading
  dims broadcast from ``top``, ``centre``, ``sd``, ``focus``); values traced.
  """
  top, centre, sd = jnp.broadcast_arrays(jnp.asarray(top, jnp.float64),
                                         jnp.asarray(centre, jnp.float64),
                                         jnp.asarray(sd, jnp.float64))
  n_geo = max(num // 16, 2)
  n_lin = max(num // 16, 2)
  n_bulk = num - 2 * n_geo - n_lin
  u = jnp.asarray(np.linspace(0.0, 1.0, n_geo))
  lt = jnp.log1p(top)
  geo_lo = jnp.floor(jnp.expm1(u * lt[..., None]))
  geo_hi = top[..., None] - geo_lo
  w = 6.0 * sd
  lin = jnp.round(top[..., None] * jnp.asarray(np.linspace(0.0, 1.0, n_lin)))
  pts = [jnp.zeros_like(top)[..., None], centre[..., None],
         centre[..., None] + 1.0, centre[..., None] + 2.0, geo_lo, geo_hi, lin]
  if focus is None:
    v = jnp.asarray(np.linspace(-1.0, 1.0, n_bulk))
    pts.append(jnp.round(centre[..., None] + w[..., None] * v))
  else:
    focus = jnp.broadcast_to(jnp.asarray(focus, jnp.float64), top.shape)
    nb1 = n_bulk // 2
    nb2 = (n_bulk - nb1) // 2
    nb3 = n_bulk - nb1 - nb2
    v1 = jnp.asarray(np.linspace(-1.0, 1.0, nb1))
    v2 = jnp.asarray(np.linspace(-1.0, 1.0, nb2))
    v3 = jnp.asarray(np.arange(nb3, dtype=np.float64) - nb3 // 2)
    pts.append(jnp.round(centre[..., None] + w[..., None] * v1))
    pts.append(jnp.round(focus[..., None] + w[..., None] * v2))
    pts.append(jnp.round(focus[..., None]) + v3)      # unit spacing at the peak
  allp = jnp.concatenate(pts, axis=-1)
  # Small supports: every integer is an edge (the binned sum is then exact).
  every = jnp.asarray(np.arange(allp.shape[-1], dtype=np.float64))
  allp = jnp.where((top + 1.0 <= allp.shape[-1])[..., None], every, allp)
  allp = jnp.clip(allp, 0.0, top[..., None])
  return jnp.sort(allp, axis=-1)


def bins(edges, top):
  """``(x, y, L)`` of the bins ``[e_k, e_{k+1} - 1]``; last ends at ``top``.

  Empty bins (duplicate edges) have ``L = 0`` and ``y = x``.
  """
  nxt = jnp.concatenate([edges[..., 1:], top[..., None] + 1.0], axis=-1)
  length = nxt - edges
  y = jnp.where(length >= 1, nxt - 1.0, edges)
  return edges, y, length


def _log_geom(lr, length):
  """``log sum_{i<L} exp(lr * i)`` for ``lr <= 0`` and integer ``L >= 1``."""
  lr = jnp.minimum(lr, 0.0)
  neg = lr < -1e-300
  lr_s = jnp.where(neg, lr, -1.0)
  val = log1m_exp(length * lr_s) - log1m_exp(lr_s)
  return jnp.where(neg, val, jnp.log(jnp.maximum(length, 1.0)))


def log_mass_upper(logpmf, x, y, length, mode):
  """Upper bound on ``log sum_{j=x}^{y} f(j)``; -inf for empty bins.

  ``logpmf`` is a callable (vectorised), f log-concave. Tent bound: log f
  lies below both end secants extended across the bin (concavity), so each
  term is at most the smaller of the two geometric envelopes; the two pieces
  are summed in closed form. ``mode`` is unused (kept for the call sites;
  the tent needs no side information).
  """
  del mode
  lfx, lfx1, lfy, lfym1 = pmf_ends(logpmf, x, y)
  a = jnp.where(jnp.isfinite(lfx) & jnp.isfinite(lfx1), lfx1 - lfx, jnp.inf)
  b = jnp.where(jnp.isfinite(lfy) & jnp.isfinite(lfym1), lfym1 - lfy, jnp.inf)
  # lines: A + a i (from x) and B + b (L-1-i) (from y), i = 0..L-1
  fin = jnp.isfinite(a) & jnp.isfinite(b) & jnp.isfinite(lfx) & jnp.isfinite(lfy)
  a_s = jnp.where(fin, a, 0.0)
  b_s = jnp.where(fin, b, 0.0)
  den = a_s + b_s
  istar = jnp.where(den > 0, (lfy + b_s * (length - 1.0) - lfx) / jnp.where(den > 0, den, 1.0),
                    jnp.where(lfx <= lfy, length - 1.0, -1.0))
  k = jnp.clip(jnp.floor(istar), -1.0, length - 1.0)      # terms 0..k use the x line
  n1 = k + 1.0
  n2 = length - n1
  p1 = jnp.where(n1 >= 1, lfx + _log_geom_any(a_s, jnp.maximum(n1, 1.0)), -jnp.inf)
  p2 = jnp.where(n2 >= 1, lfy + _log_geom_any(b_s, jnp.maximum(n2, 1.0)), -jnp.inf)
  tent = jnp.logaddexp(p1, p2)
  # fallback (an end pmf is 0 or a neighbour outside the support): length * max
  fallback = jnp.maximum(lfx, lfy) + jnp.log(jnp.maximum(length, 1.0))
  out = jnp.where(fin, jnp.minimum(tent, fallback), fallback)
  out = jnp.where(length >= 2, out, lfx)
  return jnp.where(length >= 1, out, -jnp.inf)


def pmf_ends(logpmf, x, y):
  """``(f(x), f(x+1), f(y), f(y-1))`` in log space, computed once per bin."""
  return logpmf(x), logpmf(x + 1.0), logpmf(y), logpmf(y - 1.0)


def log_sum_upper(logpmf, x, y, length, mode, lv_x, lv_y, lf=None):
  r"""Upper bound on ``log sum_{j=x}^{y} f(j) v(j)``, v >= 0 convex on the bin.

  ``v`` must be non-decreasing away from ``mode`` on the bin (so the far end
  carries the larger value). With the geometric envelope
  :math:`ar f(i)=f(\mathrm{near})
ho^i \ge f` (log-concavity) and the
  chord of v (>= v, convexity), the sum is at most
  :math:`ar M\,[v_{near}+(v_{far}-v_{near})\,ar\imath/(L-1)]` where
  :math:`ar M=\sum_i ar f(i)` and :math:`ar\imath` is the mean index of
  the truncated geometric law (<= (L-1)/2).
  """
  left = y <= mode
  lfx, lfx1, lfy, lfym1 = pmf_ends(logpmf, x, y) if lf is None else lf
  lf_end = jnp.where(left, lfy, lfx)
  lf_nb = jnp.where(left, lfym1, lfx1)
  lr = jnp.where(jnp.isfinite(lf_end), lf_nb - lf_end, 0.0)
  lr = jnp.minimum(jnp.where(jnp.isnan(lr), 0.0, lr), 0.0)
  lmass = lf_end + _log_geom(lr, length)
  u = -lr
  lu = length * u
  big = lu >= 1e-3
  us = jnp.where(big, u, 1.0)
  mean_big = 1.0 / jnp.expm1(us) - length / jnp.expm1(jnp.minimum(length * us, 700.0))
  mean = jnp.where(big, mean_big, (length - 1.0) / 2.0)
  frac = jnp.clip(mean / jnp.maximum(length - 1.0, 1.0), 0.0, 0.5)
  frac = jnp.where(length >= 2, frac, 0.0)
  lv_near = jnp.where(left, lv_y, lv_x)
  lv_far = jnp.where(left, lv_x, lv_y)
  lv_far = jnp.maximum(lv_far, lv_near)     # guards rounding; v_far >= v_near
  val = jnp.logaddexp(jnp.log1p(-frac) + lv_near,
                      jnp.where(frac > 0, jnp.log(jnp.where(frac > 0, frac, 1.0)) + lv_far,
                                -jnp.inf))
  out = jnp.where(length >= 2, lmass + val, lf_end + lv_near)
  return jnp.where(length >= 1, out, -jnp.inf)


def _log_geom_any(z, length):
  """``log sum_{i<L} exp(z i)`` for any real z, integer L >= 1."""
  return jnp.where(z <= 0, _log_geom(z, length),
                   (length - 1.0) * z + _log_geom(-jnp.abs(z), length))


def log_sum_upper_right_loglinear(logpmf, x, y, length, lv_x, lv_y, lf=None):
  r"""Upper bound on ``log sum_{j=x}^{y} f(j) v(j)`` for a bin right of the mode
  on which ``log v`` is convex (so below its chord): geometric envelope of f
  from x times the log-chord of v, summed in closed form.
  """
  lf_x, lf_x1, lf_y, lf_ym1 = pmf_ends(logpmf, x, y) if lf is None else lf
  lr = jnp.minimum(jnp.where(jnp.isfinite(lf_x), lf_x1 - lf_x, 0.0), 0.0)
  lr = jnp.where(jnp.isnan(lr), 0.0, lr)
  s = (lv_y - lv_x) / jnp.maximum(length - 1.0, 1.0)
  out = lf_x + lv_x + _log_geom_any(lr + s, length)
  # Same with the secant of log f at the y end (extended towards x): the
  # smaller of two valid bounds.
  lq = jnp.where(jnp.isfinite(lf_y), lf_ym1 - lf_y, jnp.inf)
  lq = jnp.maximum(jnp.where(jnp.isnan(lq), jnp.inf, lq), 0.0)
  out_y = lf_y + lv_y + _log_geom_any(lq - s, length)
  out = jnp.minimum(out, jnp.where(jnp.isfinite(out_y), out_y, jnp.inf))
  out = jnp.where(length >= 2, out, lf_x + lv_x)
  return jnp.where(length >= 1, out, -jnp.inf)


def log_mass_lower(logpmf, x, y, length):
  """Lower bound on ``log sum_{j=x}^{y} f(j)`` (chord of log f)."""
  lx = logpmf(x)
  ly = logpmf(y)
  both = jnp.isfinite(lx) & jnp.isfinite(ly)
  slope = jnp.where(both & (length >= 2),
                    (ly - lx) / jnp.maximum(length - 1.0, 1.0), 0.0)
  start = jnp.where(slope > 0, ly, lx)
  out = start + _log_geom(-jnp.abs(slope), length)
  out = jnp.where(both, out, jnp.maximum(lx, ly))
  out = jnp.where(length >= 2, out, lx)
  return jnp.where(length >= 1, out, -jnp.inf)


def _log1p_minus_x(x):
  """``log1p(x) - x`` without cancellation (series for |x| < 0.1)."""
  small = jnp.abs(x) < 0.1
  xs = jnp.where(small, x, 0.0)
  poly = jnp.full_like(xs, (-1.0) ** 21 / 20.0)
  for k in range(19, 1, -1):
    poly = poly * xs + (-1.0) ** (k + 1) / k
  xd = jnp.where(small, 0.5, x)
  return jnp.where(small, poly * xs * xs, jnp.log1p(xd) - xd)


def _expm1_minus_y(y):
  """``exp(y) - 1 - y`` for |y| <= 0.5 (Taylor to degree 24)."""
  fact = [float(np.prod(np.arange(1, k + 1, dtype=np.float64))) for k in range(25)]
  poly = jnp.full_like(y, 1.0 / fact[24])
  for k in range(23, 1, -1):
    poly = poly * y + 1.0 / fact[k]
  return poly * y * y


def log_convex_gap(lam, x, *, kind):
  r"""``log phi(x)``, with phi the (>= 0) convex gap of a likelihood-ratio power.

  * ``kind="chen"``: :math:`\phi=(1+x)^\lambda(1-x)^{1-\lambda}-1-(2\lambda-1)x`,
    ``x`` in (-1, 1);
  * ``kind="girgis"``: :math:`\phi=(1+x)^\lambda-1-\lambda x`, ``x > -1``.

  Both are :math:`\ge 0` (convexity) and vanish at x = 0 (returns -inf).
  Accurate to a few ulps relative for tiny x and huge ``lam * x``.
  """
  if kind == "chen":
    ell = lam * jnp.log1p(x) + (1.0 - lam) * jnp.log1p(-x)
    y = (2.0 * lam - 1.0) * x
    r = lam * _log1p_minus_x(x) + (1.0 - lam) * _log1p_minus_x(-x)
  else:
    ell = lam * jnp.log1p(x)
    y = lam * x
    r = lam * _log1p_minus_x(x)
  small = jnp.abs(y) <= 0.5
  ys = jnp.where(small, y, 0.0)
  val = _expm1_minus_y(ys) + jnp.exp(ys) * jnp.expm1(jnp.where(small, r, 0.0))
  small_out = jnp.log(jnp.maximum(val, 0.0))
  pos = 1.0 + y > 0
  big_pos = ell + log1m_exp(jnp.minimum(
      jnp.log1p(jnp.where(pos, y, 0.0)) - ell, 0.0))
  big_neg = jnp.logaddexp(ell, jnp.log(jnp.where(pos, 1.0, -1.0 - y)))
  big = jnp.where(pos, big_pos, big_neg)
  return jnp.where(small, small_out, big)


def monotone_upper(rdp, orders):
  """Reverse cumulative minimum over the (static) orders.

  The true RDP curve is non-decreasing in the order, so an upper bound at
  any larger order on the grid is also one at a smaller order: taking
  ``min_{a' >= a} bound(a')`` keeps validity and makes the curve monotone.
  """
  orders = np.asarray(orders, np.float64)
  perm = np.argsort(orders, kind="stable")
  inv = np.argsort(perm)
  srt = rdp[..., perm]
  srt = jax.lax.cummin(srt, axis=srt.ndim - 1, reverse=True)
  return srt[..., inv]
