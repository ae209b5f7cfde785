r"""The binomial-mixture pair family of shuffling bounds: the reference kernel.

Source: S. Wang, Y. Peng, J. Li, Z. Wen, Z. Li, S. Yu, D. Wang, W. Yang,
"Privacy Amplification via Shuffling: Unified, Simplified, and Tightened",
arXiv:2304.05007v5, appendix (repo ``wangsw/PrivacyAmplification``, appendix.pdf)
App. E/H and Prop. I.1 (closed n-trial form as in the jaxacct digest
``wang-variation-ratio-shuffle.md`` §0/§3.2).

Proofs and sources: docs/bounds/shuffle.md ("Bounds and proofs /
Shuffling").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks
from jaxacct._core.dtype import require_x64
from jaxacct._core.logmath import log_binom_pmf
from jaxacct._core.solve import bracket_decreasing
from jaxacct._core.binomial import binom_cdf, binom_sf
from jaxacct.shuffle._windows import cut_mass, window_size, window_start
from jaxacct._core.compiled import jit


def clone_q(eps0):
  """Blanket ratio q that turns the pair into FMT'21's clone pair."""
  e0 = jnp.exp(eps0) if isinstance(eps0, jax.Array) else np.exp(eps0)
  return 2.0 * e0 * e0 / (e0 + 1.0)


def stronger_q(eps0):
  """Blanket ratio of the stronger clone / generic row: q = e^eps0."""
  return jnp.exp(eps0) if isinstance(eps0, jax.Array) else np.exp(eps0)


def pair_params(p, beta, q0, q1):
  """(alpha, r0, r1, lam, s) of the pair (docs/bounds/shuffle.md)."""
  alpha = beta / (p - 1.0)
  r0 = alpha * p / q0
  r1 = alpha * p / q1
  lam = jnp.maximum(1.0 - alpha - p * alpha, 0.0)
  s = 1.0 - r0 - r1
  return alpha, r0, r1, lam, s


def pair_hockey_stick(eps, n, p, alpha, r0, r1, lam, s, width):
  """H_{e^eps}(P||Q) of the pair restricted to the c-window, plus the window's
  start (for the tail); all arguments scalars (vmapped by the callers)."""
  total = r0 + r1
  rho = r0 / jnp.where(total > 0, total, 1.0)
  e = jnp.exp(eps)
  u = (p - e) * alpha / r0
  v = (1.0 - p * e) * alpha / r1
  w = jnp.where(lam > 0, (1.0 - e) * lam / jnp.where(s > 0, s, 1.0), 0.0)
  lo = window_start(n, total, width)
  c = lo + jnp.arange(width, dtype=jnp.float64)
  valid = c <= n
  logw = log_binom_pmf(c, n, total)
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
  f = jnp.exp(log_binom_pmf(t - 1.0, cm1, rho))
  f = jnp.where(c >= 1, f, 0.0)
  x = jnp.where(c >= 1, x, jnp.where(t <= 0, 1.0, 0.0))
  f0 = jnp.where(c >= 1, f, 0.0)
  term1 = sig * c * rho * (x + f0)
  term2 = kap * (x + rho * f0)
  inner = jnp.maximum(term1 + term2, 0.0)
  contrib = jnp.where(valid, jnp.exp(logw) * inner, 0.0)
  return jnp.sum(contrib) / n, lo


def _pair_delta_scalar(eps, n, p, beta, q0, q1, width, symmetric=False):
  alpha, r0, r1, lam, s = pair_params(p, beta, q0, q1)
  total = r0 + r1
  h_pq, lo = pair_hockey_stick(eps, n, p, alpha, r0, r1, lam, s, width)
  if symmetric:  # q0 == q1 declared by the caller: H(Q||P) = H(P||Q)
    h_qp = h_pq
  else:
    h_qp, _ = pair_hockey_stick(eps, n, p, alpha, r1, r0, lam, s, width)
  tail = cut_mass(n, total, lo, width)
  d = jnp.maximum(h_pq, h_qp) + tail
  d = jnp.where(eps >= jnp.log(p), 0.0, d)  # likelihood ratio in [1/p, p]
  d = jnp.clip(d, 0.0, 1.0)
  bad = pair_params_invalid(n, p, beta, q0, q1, symmetric) | jnp.isnan(eps) | (eps < 0)
  return jnp.where(bad, jnp.nan, d)


def pair_params_invalid(n, p, beta, q0, q1, symmetric=False, xp=jnp):
  """Invalid-lane mask for the pair parameters (jittable; ``xp``: NumPy on the host)."""
  alpha = beta / (p - 1.0)
  s = 1.0 - alpha * p / q0 - alpha * p / q1
  bad = ((p <= 1.0) | (beta <= 0) | (beta > (p - 1.0) / (p + 1.0) * (1 + 1e-12))
         | (q0 < 1.0) | (q1 < 1.0) | (q0 > p * q1 * (1 + 1e-12))
         | (q1 > p * q0 * (1 + 1e-12)) | (s < -1e-12) | (n < 1)
         | (n != xp.floor(n)) | xp.isnan(p + beta + q0 + q1 + n))
  if symmetric:
    bad = bad | (q0 != q1)
  return bad


def pair_delta(eps, *, n, p, beta, q0, q1, width: int,
               symmetric: bool = False):
  r"""Exact (windowed, tail added) delta(eps) of the variation-ratio pair.

  Wang et al., arXiv:2304.05007v5, App. H + Prop. I.1 (in n-trial
  form). Replacement neighbours, max of both directions.

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
    bad = (pair_params_invalid(n_, p_, b_, q0_, q1_, symmetric) | (dl <= 0)
           | (dl >= 1) | jnp.isnan(dl))
    return jnp.where(bad, jnp.nan, hi)

  return jax.vmap(one)(*flat).reshape(shape)


def _pair_rdp_one(order, n, p, alpha, r0, r1, lam, s, wc, wa):
  total = r0 + r1
  rho = r0 / total
  lo = window_start(n, total, wc)
  c = lo + jnp.arange(wc, dtype=jnp.float64)  # (wc,)
  lw = log_binom_pmf(c, n, total)
  alo = jnp.floor(c * rho - 0.5 * (wa - 1))
  alo = jnp.clip(alo, 0.0, jnp.maximum(c + 1.0 - wa, 0.0))
  a = alo[:, None] + jnp.arange(wa, dtype=jnp.float64)[None, :]  # (wc, wa)
  cc = c[:, None]
  b = cc - a
  ok = (a <= cc) & (cc <= n)
  la = log_binom_pmf(a, cc, rho)
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
  ctail = cut_mass(n, total, lo, wc)
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


@functools.partial(jit, static_argnames=("wc", "wa", "symmetric"))
def pair_rdp(orders, *, n, p, beta, q0, q1, wc: int, wa: int,
             symmetric: bool = False):
  r"""Renyi divergence of the pair, max of both directions, real orders > 1.

  Wang et al. arXiv:2304.05007v5 pair (docs/bounds/shuffle.md); for the clone
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


@functools.partial(jit, static_argnames=("width",))
def sym_delta(eps, n, p, beta, q, *, width: int):
  """``pair_delta`` with ``q0 = q1 = q`` (one shared compiled kernel)."""
  return pair_delta(eps, n=n, p=p, beta=beta, q0=q, q1=q, width=width,
                    symmetric=True)


@functools.partial(jit, static_argnames=("width",))
def sym_epsilon(delta, n, p, beta, q, *, width: int):
  """``pair_epsilon`` with ``q0 = q1 = q`` (one shared compiled kernel)."""
  return pair_epsilon(delta, n=n, p=p, beta=beta, q0=q, q1=q, width=width,
                      symmetric=True)



_pair_delta_jit = jit(pair_delta, static_argnames=("width", "symmetric"))
_pair_epsilon_jit = jit(pair_epsilon, static_argnames=("width", "symmetric"))


def _pair_query(sym_kernel, kernel, value, n, p, beta, q0, q1):
  """One reference-kernel query of the pair, window sized from concrete n (p, beta, q0
  and q1 are grids: lists too)."""
  checks.check_int("n", n, min_value=1)
  checks.check_range("p", p, 1.0, lo_open=True)
  checks.check_range("beta", beta, 0.0, 1.0, lo_open=True)
  checks.check_range("q0", q0, 1.0)
  if q1 is not None:
    checks.check_range("q1", q1, 1.0)
  p, beta, q0 = (np.asarray(x, np.float64) for x in (p, beta, q0))
  q1 = None if q1 is None else np.asarray(q1, np.float64)
  if q1 is None or np.all(np.asarray(q0) == np.asarray(q1)):
    alpha = beta / (p - 1)
    w = window_size(n, 2 * alpha * p / q0)
    with jax.enable_x64(True):
      return np.asarray(sym_kernel(value, n, p, beta, q0, width=w))
  alpha = beta / (p - 1)
  w = window_size(n, alpha * p / q0 + alpha * p / q1)
  with jax.enable_x64(True):
    return np.asarray(kernel(value, n=n, p=p, beta=beta, q0=q0, q1=q1, width=w))


def variation_ratio_pair_delta(eps, *, n, p, beta, q0, q1=None):
  r"""delta(eps) of the variation-ratio pair (reference kernel).

  Wang et al., arXiv:2304.05007v5, App. H + Prop. I.1 (in n-trial
  form): the pair with probability-ratio bound ``p``,
  total-variation bound ``beta`` and blanket ratios ``q0``, ``q1`` (``q1``
  defaults to ``q0``: the symmetric pair), replacement neighbours, max of
  both directions; the c-window is sized from concrete ``n`` and the cut
  mass is added. Eager; returns a float64 numpy array (NaN for invalid
  parameters).

  Bound: exact delta of the pair. It bounds a randomizer's shuffled delta
  only when the pair dominates the randomizer (the clone pairs do for every
  eps0-LDP randomizer: :func:`jaxacct.shuffle.clone_delta`); for a
  per-randomizer row it is NOT an upper bound (``jaxacct.experimental``).
  """
  checks.check_range("eps", eps, 0.0)
  checks.check_scalar("jaxacct.shuffle.bounds.variation_ratio_pair_delta", n=n)   # p..: grids
  return _pair_query(sym_delta, _pair_delta_jit, eps, n, p, beta, q0, q1)


def variation_ratio_pair_epsilon(delta, *, n, p, beta, q0, q1=None):
  """eps(delta) of the variation-ratio pair (reference kernel).

  See :func:`variation_ratio_pair_delta`; the upper end of 40 Illinois steps
  (``pair_epsilon``). Eager; returns a float64 numpy array.
  """
  checks.check_delta(delta)
  checks.check_scalar("jaxacct.shuffle.bounds.variation_ratio_pair_epsilon", n=n)   # p..: grids
  return _pair_query(sym_epsilon, _pair_epsilon_jit, delta, n, p, beta, q0, q1)
