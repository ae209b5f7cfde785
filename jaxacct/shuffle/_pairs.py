r"""The binomial-mixture pair family of shuffling bounds, one jittable kernel.

Source: S. Wang, Y. Peng, J. Li, Z. Wen, Z. Li, S. Yu, D. Wang, W. Yang,
"Privacy Amplification via Shuffling: Unified, Simplified, and Tightened",
arXiv:2304.05007v5, appendix (repo ``wangsw/PrivacyAmplification``, appendix.pdf)
App. E/H and Prop. I.1 (closed n-trial form as in the jaxacct digest
``wang-variation-ratio-shuffle.md`` §0/§3.2).

The pair, with parameters ``(p, beta, q0, q1)``:
``alpha = beta/(p-1)``, ``r0 = alpha p/q0``, ``r1 = alpha p/q1``,
``s = 1 - r0 - r1``, ``rho = r0/(r0+r1)``, ``lam = 1 - alpha - p alpha``.
Draw ``C ~ Bin(n-1, r0+r1)``, ``A | C ~ Bin(C, rho)`` and
``(D1, D2) = (1,0), (0,1), (0,0)`` w.p. ``p alpha, alpha, lam``;
``P = (A + D1, C - A + D2)`` and ``Q = (A + D2, C - A + D1)``.

.. math::
  H_{e^\varepsilon}(P\|Q) = \frac1n\sum_{c=0}^{n}\mathrm{Bin}(c;n,r_0{+}r_1)
    \sum_{a}\mathrm{Bin}(a;c,\rho)\Big[u a + v (c-a) + w (n-c)\Big]_+,

with ``u = (p - e^eps) alpha / r0``, ``v = (1 - p e^eps) alpha / r1`` and
``w = (1 - e^eps) lam / s``; the inner sum is two binomial tails.
``H(Q||P)`` is the same sum with ``r0`` and ``r1`` swapped.

Members used by jaxacct (all with ``lam = 0``, i.e. ``beta = (p-1)/(p+1)``):

* FMT'21 clone pair (Feldman, McMillan, Talwar, arXiv:2012.12803, Thm 3.2):
  ``p = e^eps0``, ``q = 2 e^{2 eps0} / (e^eps0 + 1)`` (so ``r0 + r1 = e^-eps0``).
* Stronger clone = generic variation-ratio row: ``p = q = e^eps0``
  (``r0 + r1 = 2/(e^eps0+1)``).

Windowing: only ``c`` in a window of static length ``W`` around the mean is
summed; the ``P``-mass (and ``Q``-mass) of the cut totals is at most
``Pr[Bin(n-1, r0+r1) notin [lo, lo+W-2]]``, which is computed (regularised
incomplete beta) and ADDED to delta, so windowed deltas are upper bounds of the
pair's exact delta. With the default ``z = 10`` the added mass is < 1e-20.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import betainc, gammaln

from jaxacct._core.solve import bisect
from jaxacct._core.dtype import require_x64
from jaxacct._core.logmath import log_binom_pmf

__all__ = ["pair_params", "window_size", "pair_delta", "pair_epsilon",
           "pair_rdp", "rdp_widths", "resolve_width",
           "binom_sf", "binom_cdf", "binom_logpmf", "clone_q", "stronger_q",
           "fast_width", "sym_delta_fast", "sym_epsilon_fast",
           "sym_epsilon_grouped", "sym_delta", "sym_epsilon"]

_Z = 10.0


def clone_q(eps0):
  """Blanket ratio q that turns the pair into FMT'21's clone pair."""
  e0 = jnp.exp(eps0) if isinstance(eps0, jax.Array) else np.exp(eps0)
  return 2.0 * e0 * e0 / (e0 + 1.0)


def stronger_q(eps0):
  """Blanket ratio of the stronger clone / generic row: q = e^eps0."""
  return jnp.exp(eps0) if isinstance(eps0, jax.Array) else np.exp(eps0)


def pair_params(p, beta, q0, q1):
  """(alpha, r0, r1, lam, s) of the pair (see module docstring)."""
  alpha = beta / (p - 1.0)
  r0 = alpha * p / q0
  r1 = alpha * p / q1
  lam = jnp.maximum(1.0 - alpha - p * alpha, 0.0)
  s = 1.0 - r0 - r1
  return alpha, r0, r1, lam, s


def window_size(n, total, z: float = _Z) -> int:
  """Static window length for ``Bin(n, total)`` (eager, numpy; max over a batch).

  ``2 (z sd + z^2) + 3`` points, capped at ``n + 1`` (the whole support).
  """
  n = np.asarray(n, np.float64)
  t = np.clip(np.asarray(total, np.float64), 0.0, 1.0)
  n, t = np.broadcast_arrays(n, t)
  sd = np.sqrt(n * t * (1.0 - t))
  w = float(max(np.max(np.ceil(2.0 * (z * sd + z * z)) + 3.0), 2.0))
  # round up to a bucket {2^k, 1.5 * 2^k} so that nearby settings share one
  # compiled kernel; never beyond the largest support
  k = 2.0 ** np.floor(np.log2(w))
  w = k if w <= k else (1.5 * k if w <= 1.5 * k else 2.0 * k)
  return int(min(w, float(np.max(n)) + 1.0))


def binom_logpmf(k, m, logp, log1mp):
  """log Bin(k; m, p); -inf outside 0..m (k, m float arrays)."""
  inside = (k >= 0) & (k <= m)
  ks = jnp.clip(k, 0.0, jnp.maximum(m, 0.0))
  out = (gammaln(m + 1.0) - gammaln(ks + 1.0) - gammaln(m - ks + 1.0)
         + jnp.where(ks > 0, ks * logp, 0.0)
         + jnp.where(m - ks > 0, (m - ks) * log1mp, 0.0))
  return jnp.where(inside, out, -jnp.inf)


def binom_sf(t, m, prob):
  """Pr[Bin(m, prob) >= t] for real integer-valued t, m >= 0 (betainc)."""
  t = jnp.asarray(t, jnp.float64)
  m = jnp.asarray(m, jnp.float64)
  mid = (t >= 1) & (t <= m)
  ta = jnp.where(mid, t, 1.0)
  tb = jnp.where(mid, m - t + 1.0, 1.0)
  pr = jnp.clip(prob, 0.0, 1.0)
  val = betainc(ta, tb, pr)
  return jnp.where(t <= 0, 1.0, jnp.where(t > m, 0.0, val))


def binom_cdf(t, m, prob):
  """Pr[Bin(m, prob) <= t]."""
  return binom_sf(m - t, m, 1.0 - prob)


def _window(n_tr, total, width: int):
  """Integer window start for Bin(n_tr, total) of static length width."""
  mean = n_tr * total
  lo = jnp.floor(mean - 0.5 * (width - 1))
  lo = jnp.clip(lo, 0.0, jnp.maximum(n_tr + 1.0 - width, 0.0))
  return lo


def _one_direction(eps, n, p, alpha, r0, r1, lam, s, width):
  """H_{e^eps}(P||Q) of the pair restricted to the c-window, plus the window's
  start (for the tail); all arguments scalars (vmapped by the callers)."""
  total = r0 + r1
  rho = r0 / jnp.where(total > 0, total, 1.0)
  e = jnp.exp(eps)
  u = (p - e) * alpha / r0
  v = (1.0 - p * e) * alpha / r1
  w = jnp.where(lam > 0, (1.0 - e) * lam / jnp.where(s > 0, s, 1.0), 0.0)
  lo = _window(n, total, width)
  c = lo + jnp.arange(width, dtype=jnp.float64)
  valid = c <= n
  logw = binom_logpmf(c, n, jnp.log(total), jnp.log1p(-total))
  sig = u - v  # > 0
  kap = v * c + w * (n - c)  # <= 0
  t = jnp.floor(-kap / sig) + 1.0
  # sum_{a>=t} Bin(a;c,rho) (sig a + kap) =
  #   sig c rho Pr[Bin(c-1,rho) >= t-1] + kap Pr[Bin(c,rho) >= t]
  # With X = Pr[Bin(c-1,rho) >= t] and f = Bin(t-1; c-1, rho):
  #   Pr[Bin(c-1,rho) >= t-1] = X + f,  Pr[Bin(c,rho) >= t] = X + rho f,
  # so one incomplete-beta call per c.
  cm1 = jnp.maximum(c - 1.0, 0.0)
  x = binom_sf(t, cm1, rho)
  f = jnp.exp(binom_logpmf(t - 1.0, cm1, jnp.log(rho), jnp.log1p(-rho)))
  f = jnp.where(c >= 1, f, 0.0)
  x = jnp.where(c >= 1, x, jnp.where(t <= 0, 1.0, 0.0))
  f0 = jnp.where(c >= 1, f, 0.0)
  term1 = sig * c * rho * (x + f0)
  term2 = kap * (x + rho * f0)
  inner = jnp.maximum(term1 + term2, 0.0)
  contrib = jnp.where(valid, jnp.exp(logw) * inner, 0.0)
  return jnp.sum(contrib) / n, lo


def _tail_mass(n, total, lo, width):
  """Pr[Bin(n-1, total) <= lo-1] + Pr[Bin(n-1, total) >= lo+width-1]."""
  m = n - 1.0
  hi = lo + width - 1.0  # last c kept (n-trial index)
  left = jnp.where(lo >= 1, binom_cdf(lo - 1.0, m, total), 0.0)
  right = binom_sf(hi, m, total)
  return left + right


def _pair_delta_scalar(eps, n, p, beta, q0, q1, width, symmetric=False):
  alpha, r0, r1, lam, s = pair_params(p, beta, q0, q1)
  total = r0 + r1
  h_pq, lo = _one_direction(eps, n, p, alpha, r0, r1, lam, s, width)
  if symmetric:  # q0 == q1 declared by the caller: H(Q||P) = H(P||Q)
    h_qp = h_pq
  else:
    h_qp, _ = _one_direction(eps, n, p, alpha, r1, r0, lam, s, width)
  tail = _tail_mass(n, total, lo, width)
  d = jnp.maximum(h_pq, h_qp) + tail
  d = jnp.where(eps >= jnp.log(p), 0.0, d)  # likelihood ratio in [1/p, p]
  d = jnp.clip(d, 0.0, 1.0)
  bad = _params_bad(n, p, beta, q0, q1, symmetric) | jnp.isnan(eps) | (eps < 0)
  return jnp.where(bad, jnp.nan, d)


def _params_bad(n, p, beta, q0, q1, symmetric=False):
  """Invalid-lane mask for the pair parameters (jittable)."""
  alpha = beta / (p - 1.0)
  s = 1.0 - alpha * p / q0 - alpha * p / q1
  bad = ((p <= 1.0) | (beta <= 0) | (beta > (p - 1.0) / (p + 1.0) * (1 + 1e-12))
         | (q0 < 1.0) | (q1 < 1.0) | (q0 > p * q1 * (1 + 1e-12))
         | (q1 > p * q0 * (1 + 1e-12)) | (s < -1e-12) | (n < 1)
         | (n != jnp.floor(n)) | jnp.isnan(p + beta + q0 + q1 + n))
  if symmetric:
    bad = bad | (q0 != q1)
  return bad


def bracket_decreasing(fn, lo, hi, f_lo, f_hi, *, num_iters: int,
                       illinois: bool = True):
  """Root bracket of a non-increasing ``fn`` with ``fn(hi) <= 0`` known.

  Like ``jaxacct._core.solve.bisect`` (Illinois steps, every third a
  halving) but ``fn`` is evaluated only inside the loop (the end values are
  supplied: ``f_lo`` any value >= fn(lo) is fine, it only steers the secant),
  so the compiled graph holds one copy of ``fn``. Returns ``(b, a)``: ``b``
  is feasible (``fn(b) <= 0``; ``hi`` if nothing better was found) and ``a``
  is the last point known infeasible (or ``lo``).
  """
  a = jnp.asarray(lo, jnp.float64)
  b = jnp.asarray(hi, jnp.float64)
  fa = jnp.asarray(f_lo, jnp.float64)
  fb = jnp.asarray(f_hi, jnp.float64)

  def body(i, carry):
    a, b, fa, fb, last = carry
    mid = 0.5 * (a + b)
    if illinois:
      sec = (a * fb - b * fa) / (fb - fa)
      good = (jnp.isfinite(sec) & (sec > a) & (sec < b) & (i % 3 != 2))
      m = jnp.where(good, sec, mid)
    else:
      m = mid
    fm = fn(m)
    feas = fm <= 0
    a2 = jnp.where(feas, a, m)
    b2 = jnp.where(feas, m, b)
    fa2 = jnp.where(feas, fa, fm)
    fb2 = jnp.where(feas, fm, fb)
    if illinois:
      fa2 = jnp.where(feas & (last == 1), 0.5 * fa2, fa2)
      fb2 = jnp.where(~feas & (last == -1), 0.5 * fb2, fb2)
    last2 = jnp.where(feas, 1, -1).astype(jnp.int32)
    return a2, b2, fa2, fb2, last2

  a, b, _, _, _ = jax.lax.fori_loop(
      0, num_iters, body, (a, b, fa, fb, jnp.zeros((), jnp.int32)))
  return b, a


def pair_delta(eps, *, n, p, beta, q0, q1, width: int,
               symmetric: bool = False):
  r"""Exact (windowed, tail added) delta(eps) of the variation-ratio pair.

  Wang et al., arXiv:2304.05007v5, App. H + Prop. I.1 (n-trial form of the
  jaxacct digest, §0). Replacement neighbours, max of both directions.

  Args:
    eps: epsilon >= 0 (float64 array).
    n: number of users >= 1 (integer-valued float array).
    p: probability-ratio bound > 1. beta: total-variation bound in
      (0, (p-1)/(p+1)]. q0, q1: blanket ratios >= 1 with q0/q1 in [1/p, p]
      and r0 + r1 <= 1.
    width: static c-window length (``window_size``).
    symmetric: static; True when ``q0 == q1`` (one direction suffices;
      lanes with ``q0 != q1`` become NaN).

  Returns:
    float64 array, the broadcast shape of the inputs.

  Bound: exact delta of the pair up to the added tail mass (an upper bound of
  it, tight to < 1e-20 for the default window). NaN for invalid lanes.
  """
  require_x64("shuffle pair_delta")
  args = jnp.broadcast_arrays(*[jnp.asarray(x, jnp.float64)
                                for x in (eps, n, p, beta, q0, q1)])
  shape = args[0].shape
  flat = [a.reshape(-1) for a in args]
  f = jax.vmap(lambda *a: _pair_delta_scalar(*a, width, symmetric))
  return f(*flat).reshape(shape)


def pair_epsilon(delta, *, n, p, beta, q0, q1, width: int,
                 symmetric: bool = False, num_iters: int = 40,
                 method: str = "illinois"):
  """Upper end of the bisection bracket of eps(delta) for the pair.

  Illinois bracketing (``jaxacct._core.solve.bisect``, every third step a
  halving) on ``[0, ln p]`` (``delta(ln p) = 0``), keeping the feasible
  (upper) end; 40 steps guarantee at least 13 halvings and in practice reach
  the float64 resolution (checked against 60 plain halvings).

  Returns:
    float64 array (broadcast shape); NaN for invalid lanes.
  Bound: an upper bound of the pair's exact eps(delta), within the bracket
  width above it.
  """
  require_x64("shuffle pair_epsilon")
  args = jnp.broadcast_arrays(*[jnp.asarray(x, jnp.float64)
                                for x in (delta, n, p, beta, q0, q1)])
  shape = args[0].shape
  flat = [a.reshape(-1) for a in args]

  def one(dl, n_, p_, b_, q0_, q1_):
    fn = lambda e: _pair_delta_scalar(e, n_, p_, b_, q0_, q1_, width,
                                      symmetric) - dl
    hi, _ = bracket_decreasing(fn, 0.0, jnp.log(p_), 1.0 - dl, -dl,
                               num_iters=num_iters,
                               illinois=(method == "illinois"))
    bad = (_params_bad(n_, p_, b_, q0_, q1_, symmetric) | (dl <= 0)
           | (dl >= 1) | jnp.isnan(dl))
    return jnp.where(bad, jnp.nan, hi)

  return jax.vmap(one)(*flat).reshape(shape)


def resolve_width(n, total, max_n=None, z: float = _Z) -> int:
  """Static window length: from concrete ``n``/``total`` when possible, else
  from the static ``max_n`` (worst case ``total = 1/2``)."""
  from jaxacct._core.checks import is_concrete
  if max_n is not None:
    return window_size(max_n, 0.5, z)
  if is_concrete((n, total)):
    return window_size(n, total, z)
  raise ValueError(
      "n is traced: pass the static keyword max_n (an upper bound on n) so "
      "the summation window can be sized.")


def rdp_widths(n, total, rho, max_order, log_p, z: float = _Z):
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
  lp = float(np.max(log_p))
  h = math.sqrt(max(cmax, 1.0) * (float(max_order) * lp + 60.0) / 2.0) + 2.0
  wa = max(int(min(cmax + 1.0, 2.0 * h + 4.0)), 2)
  # same buckets as ``window_size`` (one compiled kernel serves nearby
  # settings; a longer a-window only moves mass from the added tail bound
  # into the exact sum)
  k = 2.0 ** math.floor(math.log2(wa))
  wa = int(k if wa <= k else (1.5 * k if wa <= 1.5 * k else 2.0 * k))
  return wc, wa


def _pair_rdp_one(order, n, p, alpha, r0, r1, lam, s, wc, wa):
  total = r0 + r1
  rho = r0 / total
  lo = _window(n, total, wc)
  c = lo + jnp.arange(wc, dtype=jnp.float64)  # (wc,)
  lw = binom_logpmf(c, n, jnp.log(total), jnp.log1p(-total))
  alo = jnp.floor(c * rho - 0.5 * (wa - 1))
  alo = jnp.clip(alo, 0.0, jnp.maximum(c + 1.0 - wa, 0.0))
  a = alo[:, None] + jnp.arange(wa, dtype=jnp.float64)[None, :]  # (wc, wa)
  cc = c[:, None]
  b = cc - a
  ok = (a <= cc) & (cc <= n)
  la = binom_logpmf(a, cc, jnp.log(rho), jnp.log1p(-rho))
  lamterm = jnp.where(lam > 0, lam * (n - cc) / jnp.where(s > 0, s, 1.0), 0.0)
  gp = p * alpha * a / r0 + alpha * b / r1 + lamterm
  gq = alpha * a / r0 + p * alpha * b / r1 + lamterm
  pos = ok & (gp > 0) & (gq > 0)
  gps = jnp.where(pos, gp, 1.0)
  gqs = jnp.where(pos, gq, 1.0)
  lt = (lw[:, None] + la - jnp.log(n) + order * jnp.log(gps)
        + (1.0 - order) * jnp.log(gqs))
  lt = jnp.where(pos, lt, -jnp.inf)
  kept = jax.scipy.special.logsumexp(lt)
  # rigorous tails: Q-mass outside, weighted by the maximal ratio p^order
  ctail = _tail_mass(n, total, lo, wc)
  ahi = alo + wa - 1.0

  def slice_tail(cm):
    cm = jnp.maximum(cm, 0.0)
    left = jnp.where(alo >= 1, binom_cdf(alo - 1.0, cm, rho), 0.0)
    return left + binom_sf(ahi, cm, rho)

  atail = jnp.maximum(slice_tail(c), slice_tail(c - 1.0))
  atail = jnp.max(jnp.where(c <= n, atail, 0.0))
  tail = ctail + atail
  ltail = jnp.where(tail > 0, order * jnp.log(p) + jnp.log(
      jnp.where(tail > 0, tail, 1.0)), -jnp.inf)
  return jnp.logaddexp(kept, ltail) / (order - 1.0)


@functools.partial(jax.jit, static_argnames=("wc", "wa", "symmetric"))
def pair_rdp(orders, *, n, p, beta, q0, q1, wc: int, wa: int,
             symmetric: bool = False):
  r"""Renyi divergence of the pair, max of both directions, real orders > 1.

  Wang et al. arXiv:2304.05007v5 pair (module docstring); for the clone
  member this is FMT'21 (arXiv:2012.12803) Sec. 6.1.

  .. math:: D_\alpha = \frac{1}{\alpha-1}\log\sum_{a,b} P(a,b)^\alpha Q(a,b)^{1-\alpha}

  summed over a (c, a) window; the omitted Q-mass times ``p^alpha`` is added
  (rigorous: the ratio is at most p).

  Args:
    orders: 1-D float64 array of orders > 1.
    n, p, beta, q0, q1: scalars (see ``pair_delta``).
    wc, wa: static window lengths (``rdp_widths``).

  Returns:
    float64 array ``(len(orders),)``.

  Bound: upper bound of the pair's exact RDP (tight to ~e^-60 relative).
  """
  require_x64("shuffle pair_rdp")
  orders = jnp.asarray(orders, jnp.float64)
  n, p, beta, q0, q1 = [jnp.asarray(x, jnp.float64) for x in (n, p, beta, q0, q1)]
  alpha, r0, r1, lam, s = pair_params(p, beta, q0, q1)

  def per(order):
    d1 = _pair_rdp_one(order, n, p, alpha, r0, r1, lam, s, wc, wa)
    if symmetric:
      return d1
    d2 = _pair_rdp_one(order, n, p, alpha, r1, r0, lam, s, wc, wa)
    return jnp.maximum(d1, d2)

  out = jax.lax.map(per, orders)
  return jnp.clip(out, 0.0, jnp.log(p))


@functools.partial(jax.jit, static_argnames=("width",))
def sym_delta(eps, n, p, beta, q, *, width: int):
  """``pair_delta`` with ``q0 = q1 = q`` (one shared compiled kernel)."""
  return pair_delta(eps, n=n, p=p, beta=beta, q0=q, q1=q, width=width,
                    symmetric=True)


@functools.partial(jax.jit, static_argnames=("width",))
def sym_epsilon(delta, n, p, beta, q, *, width: int):
  """``pair_epsilon`` with ``q0 = q1 = q`` (one shared compiled kernel)."""
  return pair_epsilon(delta, n=n, p=p, beta=beta, q0=q, q1=q, width=width,
                      symmetric=True)


# ---------------------------------------------------------------------------
# Fast path: symmetric members with zero leftover weight (lam = 0, q0 = q1)
# ---------------------------------------------------------------------------
#
# For lam = 0 and q0 = q1 (FMT'21 clone pair, stronger clone) rho = 1/2 and the
# threshold of the inner sum is linear in c: a >= t_c = floor(c theta) + 1,
# theta = (p e - 1)/((p - 1)(1 + e)) in [1/2, 1) for e in [1, p). Along the
# c-window the pair (m, t) = (c - 1, t_c) moves by (1, d), d in {0, 1}, and
#
#   G(m+1, t+d) = G(m, t) + b(t-1; m) (1/2 if d == 0 else (t - m - 1)/(2 t)),
#   b(t+d-1; m+1) = b(t-1; m) (m+1)/(2(m-t+2)) if d == 0 else (m+1)/(2 t),
#
# with G(m, t) = Pr[Bin(m, 1/2) >= t] and b(j; m) = Bin(j; m, 1/2). The window
# is cut into blocks of ``block`` cells; each block is anchored by one
# incomplete-beta call (as the reference kernel makes for EVERY cell) and the
# other cells follow by the exact recurrences (cumulative sums/products). A
# running bound on the rounding error of the recurrences is propagated to the
# hockey-stick sum and ADDED to delta, together with the rounding of the
# cancelling two-term inner sum and of the final summation.

_EPS64 = float(np.finfo(np.float64).eps)
BLOCK = 64


def _raw_widths(n, total, delta=None, z=None):
  """Per-lane unrounded window lengths ``2 (z sd + z^2) + 3`` (numpy)."""
  n = np.asarray(n, np.float64)
  t = np.clip(np.asarray(total, np.float64), 0.0, 1.0)
  if z is None:
    if delta is None:
      z = np.float64(_Z)
    else:
      dl = np.clip(np.asarray(delta, np.float64), 1e-300, 1.0)
      z = np.minimum(np.sqrt(2.0 * np.log(2.0 / (1e-10 * dl))), 40.0)
  n, t, z = np.broadcast_arrays(n, t, np.asarray(z, np.float64))
  sd = np.sqrt(n * t * (1.0 - t))
  return np.maximum(np.ceil(2.0 * (z * sd + z * z)) + 3.0, 2.0), n


def _bucket(w, n, block, coarse):
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
  w, nn = _raw_widths(n, total, delta, z)
  i = int(np.argmax(w))
  wmax = float(w.reshape(-1)[i])
  return int(_bucket(wmax, float(np.max(nn)), block, coarse))


def _sym_setup(n, p, beta, q, width):
  """e-independent parts of the fast kernel for one lane (scalars)."""
  alpha = beta / (p - 1.0)
  r = alpha * p / q
  total = 2.0 * r
  lo = _window(n, total, width)
  c = lo + jnp.arange(width, dtype=jnp.float64)
  valid = c <= n
  # Loader's saddle-point pmf (1e-14 absolute in log at n = 1e7; the gammaln
  # difference of ``binom_logpmf`` loses ~1e-8 there)
  w = jnp.where(valid, jnp.exp(log_binom_pmf(c, n, total)), 0.0)
  tail = _tail_mass(n, total, lo, width)
  return alpha, r, lo, c, w, tail


def _sym_eval(e, n, p, alpha, r, lo, c, w, tail, block):
  """(delta, Q-mass, ok) at e = exp(eps) for one lane of the fast kernel.

  delta includes the cut mass ``tail`` and the rounding allowance; Q-mass is
  ``-d delta / d e`` (the Q-probability of the set {P > e Q}), >= 0.
  ``ok`` is False where a threshold step was not in {0, 1} (then delta = 1,
  the trivial bound).
  """
  width = c.shape[0]
  nb = width // block
  rho = 0.5
  sig = alpha * (p - 1.0) * (1.0 + e) / r
  v = (1.0 - p * e) * alpha / r
  theta = (p * e - 1.0) / ((p - 1.0) * (1.0 + e))
  theta = jnp.clip(theta, 0.0, 1.0)
  cb = c.reshape(nb, block)
  tb = jnp.floor(cb * theta) + 1.0
  mb = cb - 1.0
  # block 0 starts at c = 0 when lo == 0: anchor it at c = 1 (the c = 0 cell
  # contributes exactly 0: t_0 = 1 > 0 = c)
  s = jnp.where((jnp.arange(nb) == 0) & (lo == 0), 1, 0)
  ca = cb[:, 0] + s
  ta = jnp.where(s == 1, tb[:, 1], tb[:, 0])
  ma = ca - 1.0
  xa = binom_sf(ta, ma, rho)
  # jax's betainc is not correctly rounded: against scipy its relative error
  # was <= 0.5 M eps for m <= 1e7 (one outlier of 7.9 M eps at m = 3e7),
  # with M the magnitude of the log-Gamma terms of its prefactor; allow 16 M
  # eps on each anchor (added to delta through err_g below).
  mag = (jnp.abs(gammaln(ma + 1.0)) + jnp.abs(gammaln(jnp.maximum(ta, 1.0)))
         + jnp.abs(gammaln(jnp.maximum(ma - ta + 2.0, 1.0)))
         + (ma + 1.0) * math.log(2.0) + 1.0)
  err_anchor = 16.0 * _EPS64 * mag * jnp.abs(xa)
  lfa = log_binom_pmf(ta - 1.0, ma, rho)
  # steps i -> i+1 inside a block
  ti, mi = tb[:, :-1], mb[:, :-1]
  d = tb[:, 1:] - ti
  ok = jnp.all((d == 0) | (d == 1))
  active = jnp.arange(block - 1)[None, :] >= s[:, None]
  d0 = d == 0
  ratio = jnp.where(d0, (mi + 1.0) / (2.0 * jnp.maximum(mi - ti + 2.0, 1.0)),
                    (mi + 1.0) / (2.0 * jnp.maximum(ti, 1.0)))
  g = jnp.where(d0, 0.5, (ti - mi - 1.0) / (2.0 * jnp.maximum(ti, 1.0)))
  logr = jnp.where(active, jnp.log(ratio), 0.0)
  zero = jnp.zeros((nb, 1))
  cums = jnp.concatenate([zero, jnp.cumsum(logr, axis=1)], axis=1)
  logb = lfa[:, None] + cums
  b = jnp.exp(logb)
  incr = jnp.where(active, b[:, :-1] * g, 0.0)
  gsum = jnp.concatenate([zero, jnp.cumsum(incr, axis=1)], axis=1)
  gval = xa[:, None] + gsum
  # rounding allowance of the recurrences (relative to the anchor values)
  kk = jnp.maximum(jnp.arange(block)[None, :] - s[:, None], 0).astype(jnp.float64)
  big_l = jnp.max(jnp.abs(logr), axis=1, keepdims=True)
  fin_logb = jnp.where(jnp.isfinite(logb), jnp.abs(logb), 0.0)
  # + 64: the anchor log-pmf's own absolute error (Loader form, <= ~40 eps
  # measured against mpmath up to n = 1e9)
  rel_b = 1.01 * _EPS64 * (kk * (3.0 + big_l) + kk * kk * big_l + fin_logb + 66.0)
  err_inc = jnp.where(active, jnp.abs(incr) * (rel_b[:, :-1] + 2.0 * _EPS64), 0.0)
  abs_inc = jnp.concatenate([zero, jnp.cumsum(jnp.abs(incr), axis=1)], axis=1)
  err_g = 1.01 * (jnp.concatenate([zero, jnp.cumsum(err_inc, axis=1)], axis=1)
                  + (kk + 1.0) * _EPS64 * (jnp.abs(xa)[:, None] + abs_inc)
                  + err_anchor[:, None])
  x = jnp.clip(gval, 0.0, 1.0).reshape(-1)
  f = b.reshape(-1)
  err_g = err_g.reshape(-1)
  rel_b = rel_b.reshape(-1)
  live = (kk >= 0).reshape(-1) & ~((jnp.arange(block)[None, :] < s[:, None])
                                   .reshape(-1))
  kap = v * c
  a1 = sig * c * rho
  term1 = a1 * (x + f)
  term2 = kap * (x + rho * f)
  inner = jnp.where(live, jnp.maximum(term1 + term2, 0.0), 0.0)
  allow = jnp.where(live, jnp.abs(a1 + kap) * err_g
                    + jnp.abs(a1 + kap * rho) * f * rel_b
                    + 4.0 * _EPS64 * (jnp.abs(term1) + jnp.abs(term2)), 0.0)
  h = jnp.sum(w * inner) / n
  allowance = 1.01 * (jnp.sum(w * allow) / n + 2.0 * width * _EPS64 * h)
  qm = (alpha / r) * ((1.0 - p) * c * rho * (x + f) + p * c * (x + rho * f))
  qmass = jnp.maximum(jnp.sum(jnp.where(live, w * qm, 0.0)) / n, 0.0)
  dl = h + allowance + tail
  dl = jnp.where(ok, dl, 1.0)
  dl = jnp.where(e >= p, 0.0, jnp.clip(dl, 0.0, 1.0))
  return dl, qmass, ok


def _sym_bad(n, p, beta, q):
  return (_params_bad(n, p, beta, q, q, True)
          | (jnp.abs(beta * (p + 1.0) / (p - 1.0) - 1.0) > 1e-12))


def _sym_fast_delta_scalar(eps, n, p, beta, q, width, block):
  alpha, r, lo, c, w, tail = _sym_setup(n, p, beta, q, width)
  d, _, _ = _sym_eval(jnp.exp(eps), n, p, alpha, r, lo, c, w, tail, block)
  bad = _sym_bad(n, p, beta, q) | jnp.isnan(eps) | (eps < 0)
  return jnp.where(bad, jnp.nan, d)


def _sym_fast_eps_scalar(delta, n, p, beta, q, width, block, max_iter, rtol):
  """Safeguarded Newton for eps(delta) of one lane; returns (eps, width)."""
  alpha, r, lo, c, w, tail = _sym_setup(n, p, beta, q, width)
  lp = jnp.log(p)

  def ev(x):
    d, qm, _ = _sym_eval(jnp.exp(x), n, p, alpha, r, lo, c, w, tail, block)
    return d, qm

  d0, q0 = ev(jnp.zeros(()))
  tgt = delta

  def propose(x, d, qm, a, b):
    e = jnp.exp(x)
    feas = d <= tgt
    # far above the target: Newton on log delta (fast, may overshoot);
    # close: Newton on delta in e, which stays left of the root (delta is
    # convex in e), pushed right by 1e-3 of the step (+ a few ulps) so that
    # the end of the convergence lands on the feasible side.
    safe_q = jnp.where(qm > 0, qm, 1.0)
    ratio = jnp.where(d > 0, d / tgt, 1.0)
    # Newton on phi = sqrt(-2 log delta), nearly linear in eps for
    # Gaussian-like profiles (falls back to log delta where delta >= 1/2)
    ld = jnp.log(jnp.where(d > 0, d, 1.0))
    lt = jnp.log(tgt)
    phi = jnp.sqrt(jnp.maximum(-2.0 * ld, 0.0))
    phi_t = jnp.sqrt(-2.0 * lt)
    dphi = e * safe_q / jnp.where(d > 0, d, 1.0) / jnp.where(phi > 0, phi, 1.0)
    x_phi = x + (phi_t - phi) / dphi
    x_log = jnp.where((d < 0.5) & (tgt < 0.5), x_phi,
                      x + jnp.log(ratio) * d / (e * safe_q))
    step_e = (d - tgt) / safe_q
    x_lin = jnp.log(e + step_e * 1.001) + 8.0 * _EPS64 * (1.0 + x)
    # from the feasible side log-Newton converges from the right (log delta
    # is concave there in practice); undershoot it by 1e-3 of the step so
    # that near the root a point on the infeasible side certifies the bracket
    x_logf = x_log - 1e-3 * (x - x_log) - 8.0 * _EPS64 * (1.0 + x)
    x_new = jnp.where(feas, x_logf, jnp.where(d > 20.0 * tgt, x_log, x_lin))
    good = (qm > 0) & (d > 0) & jnp.isfinite(x_new) & (x_new > a) & (x_new < b)
    return jnp.where(good, x_new, 0.5 * (a + b))

  a0 = jnp.zeros(())
  b0 = lp
  done0 = d0 <= tgt
  x1 = propose(a0, d0, q0, a0, b0)

  def cond(st):
    a, b, xn, it, wlast, done = st
    return (~done) & (it < max_iter)

  def body(st):
    a, b, xn, it, wlast, done = st
    d, qm = ev(xn)
    feas = d <= tgt
    a2 = jnp.where(feas, a, xn)
    b2 = jnp.where(feas, xn, b)
    # guard: every 4th step the bracket must have halved, else bisect
    chk = (it % 4) == 3
    slow = chk & ((b2 - a2) > 0.5 * wlast)
    wl2 = jnp.where(chk, b2 - a2, wlast)
    xp = propose(xn, d, qm, a2, b2)
    xp = jnp.where(slow, 0.5 * (a2 + b2), xp)
    conv = (b2 - a2) <= rtol * b2
    return a2, b2, xp, it + 1, wl2, conv

  st = (a0, b0, x1, jnp.zeros((), jnp.int32), b0 - a0, done0)
  a, b, _, _, _, _ = jax.lax.while_loop(cond, body, st)
  eps = jnp.where(done0, 0.0, b)
  wid = jnp.where(done0, 0.0, b - a)
  return eps, wid


def _flat(*xs):
  args = jnp.broadcast_arrays(*[jnp.asarray(x, jnp.float64) for x in xs])
  return args[0].shape, [a.reshape(-1) for a in args]


@functools.partial(jax.jit, static_argnames=("width", "block"))
def sym_delta_fast(eps, n, p, beta, q, *, width: int, block: int = BLOCK):
  r"""delta(eps) of a symmetric zero-leftover pair (fast block-recurrence kernel).

  Same quantity as ``pair_delta(..., q0=q, q1=q, symmetric=True)`` for
  ``beta = (p-1)/(p+1)`` (FMT'21 clone pair, stronger clone): the pair's
  exact delta plus the computed cut mass plus a rounding allowance of the
  recurrences (see the section comment). One incomplete-beta call per
  ``block`` cells instead of one per cell.

  Args:
    eps: >= 0. n: integer-valued >= 1. p > 1. beta: (p-1)/(p+1) (other values
      give NaN). q: blanket ratio >= 1 with ``2 p/((p+1) q) <= 1``.
    width: static window length, a multiple of ``block`` (``fast_width``).

  Returns:
    float64 array of the broadcast shape. Bound: upper bound of the pair's
    exact delta (NaN for invalid lanes).
  """
  require_x64("shuffle sym_delta_fast")
  shape, flat = _flat(eps, n, p, beta, q)
  f = jax.vmap(lambda *a: _sym_fast_delta_scalar(*a, width, block))
  return f(*flat).reshape(shape)


@functools.partial(jax.jit, static_argnames=("width", "block", "max_iter",
                                             "with_width"))
def sym_epsilon_fast(delta, n, p, beta, q, *, width: int, block: int = BLOCK,
                     max_iter: int = 40, rtol: float = 1e-13,
                     with_width: bool = False):
  r"""eps(delta) of a symmetric zero-leftover pair: safeguarded Newton.

  delta(e) of the pair is a sum of ``(P - e Q)_+``: convex, decreasing and
  piecewise linear in ``e = exp(eps)``, with derivative ``-Q{P > e Q}`` from
  the same binomial tails. Far above the target a Newton step on
  ``log delta`` is taken; close to it a Newton step on ``delta`` in ``e``
  (which stays left of the root by convexity), pushed right by 1e-3 of the
  step so that it lands feasible; steps outside the bracket, or brackets
  that do not halve in 4 steps, are replaced by bisection. Every evaluated
  point is classified by the (upper-bounding) delta, so the returned right
  end ``b`` of the bracket is feasible: ``delta_upper(b) <= delta``. Stops
  when ``b - a <= rtol b`` (typically 4-8 evaluations) or after
  ``max_iter``.

  Returns:
    float64 array (broadcast shape), or ``(eps, bracket_width)`` with
    ``with_width``. Bound: upper bound of the pair's exact eps(delta).
    NaN for invalid lanes (delta outside (0, 1), bad pair parameters).
  """
  require_x64("shuffle sym_epsilon_fast")
  shape, flat = _flat(delta, n, p, beta, q)

  def one(dl, n_, p_, b_, q_):
    e, wd = _sym_fast_eps_scalar(dl, n_, p_, b_, q_, width, block, max_iter,
                                 rtol)
    bad = _sym_bad(n_, p_, b_, q_) | (dl <= 0) | (dl >= 1) | jnp.isnan(dl)
    return jnp.where(bad, jnp.nan, e), jnp.where(bad, jnp.nan, wd)

  e, wd = jax.vmap(one)(*flat)
  if with_width:
    return e.reshape(shape), wd.reshape(shape)
  return e.reshape(shape)


def sym_epsilon_grouped(delta, n, p, beta, q, *, coarse: bool = False,
                        block: int = BLOCK, max_iter: int = 40):
  """Eager ``sym_epsilon_fast`` over concrete arrays, lanes grouped by window.

  Each lane gets its own window length (``fast_width`` bucket); lanes that
  share a bucket run in one vmapped call (one compilation per bucket; use
  ``coarse=True`` -- power-of-2 buckets -- for wide grids). Returns a float64
  numpy array of the broadcast shape, in the input order. Bound: upper.
  """
  args = np.broadcast_arrays(*[np.asarray(x, np.float64)
                               for x in (delta, n, p, beta, q)])
  shape = args[0].shape
  dl, nn, pp, bb, qq = [a.reshape(-1) for a in args]
  total = 2.0 * (bb / (pp - 1.0)) * pp / qq
  raw, _ = _raw_widths(nn, total, dl)
  widths = _bucket(raw, nn, block, coarse)
  out = np.full(dl.shape, np.nan)
  for wd in np.unique(widths):
    idx = np.nonzero(widths == wd)[0]
    out[idx] = np.asarray(sym_epsilon_fast(dl[idx], nn[idx], pp[idx], bb[idx],
                                           qq[idx], width=int(wd),
                                           block=block, max_iter=max_iter))
  return out.reshape(shape)
