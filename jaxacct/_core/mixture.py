r"""Binomial mixtures of RDP curves: the check-in Eq. 5 mixture and WBK Thm 9.

Source: Liew, Hasegawa & Takahashi, "Privacy Amplification via Shuffled
Check-Ins", arXiv:2206.03151v2, Thm 2 (Eq. 5); Wang, Balle & Kasiviswanathan,
"Subsampled Renyi Differential Privacy and Analytical Moments Accountant",
arXiv:1808.00087v2, Thm 9 (subsampling without replacement). Used by the
shuffled check-in curves of ``jaxacct.shuffle`` (certified upper and lower
bounds) and by ``jaxacct.experimental`` (the paper as printed).

* :func:`wbk_log_excess` / :func:`wbk_log_excess_moments` -- WBK Thm 9's
  ``log(E - 1)`` at a fixed rate or over rate moments.
* :func:`log_rate_moments` -- ``log E[(k/n)^j]``, ``k ~ Bin(n, p)`` (exact,
  Stirling numbers).
* :func:`mixture_log_excess` -- the Eq. 5 binomial mixture over a static
  window of k (:func:`mixture_window`, :func:`auto_num_terms`,
  :func:`resolve_num_terms`) with the Chernoff bound :func:`log_tail_mass`
  on the cut mass (times a cap, or dropped for a lower bound).
* :func:`finish_rdp`, :func:`order_envelope`, :func:`rr_rdp_times`,
  :func:`integer_orders`, :func:`check_rate_inputs`, :func:`nan_where_invalid`,
  :func:`lanes_f64`, :func:`orders_jit` (the kernels' shared plumbing).
* :func:`shuffle_gaussian_log_moments` -- the Eq. 8 brackets
  :math:`\log\mathbb E[M_k^j]` (Thm 3's lower bound and the Thm 5 estimate).

Generic RDP numerics (no scheme is imported), so the experimental paper
reproductions and the shuffle kernels share them without crossing into each
other's private modules.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammaln, xlog1py, xlogy

from jaxacct._core import checks
from jaxacct._core.compiled import jit
from jaxacct._core.dtype import require_x64, static_size
from jaxacct._core.logmath import (log_binom, log_binom_pmf, log_expm1,
                                   logsumexp)

#: Integer orders 2..256: every kernel here needs integer orders (binomial
#: expansions); the conversion warns when the optimum sits at the top order.
DEFAULT_CHECK_IN_ORDERS = np.arange(2, 257, dtype=np.float64)
DEFAULT_CHECK_IN_ORDERS.setflags(write=False)

_LOG2 = math.log(2.0)
_LOG4 = math.log(4.0)
_MAX_TERMS = 8192
_CHUNK = 32



# --------------------------------------------------------------------------
# small log-space helpers
# --------------------------------------------------------------------------

def _log_kl_tail(x, p, n):
  """-n KL(x || p) (log of the Chernoff bound), x, p in [0, 1]."""
  kl = (xlogy(x, x) - xlogy(x, p) + xlogy(1.0 - x, 1.0 - x)
        - xlog1py(1.0 - x, -p))
  return -n * jnp.maximum(kl, 0.0)


def integer_orders(orders):
  """Checked integer orders >= 2 as ``(float64 array, tuple)`` (the tuple is
  the static jit argument)."""
  arr = checks.check_orders(orders, integer=True, min_order=2)
  return arr, tuple(float(a) for a in arr)


def rr_rdp_times(lam, eps0):
  """(lam - 1) * RDP of binary randomized response with eps0 (worst eps0-DP pair)."""
  return (jnp.logaddexp(lam * eps0, (1.0 - lam) * eps0)
          - jnp.logaddexp(0.0, eps0))


# --------------------------------------------------------------------------
# Wang-Balle-Kasiviswanathan Thm 9 (subsampling without replacement, RDP)
# --------------------------------------------------------------------------

def wbk_log_excess(lam, log_q, eps_j, log_expm1_inf):
  """WBK at a fixed rate q (see :func:`wbk_log_excess_moments`)."""
  j = jnp.arange(2, eps_j.shape[-1] + 2, dtype=jnp.float64)
  return wbk_log_excess_moments(lam, j * log_q[..., None], eps_j, log_expm1_inf)


def wbk_log_excess_moments(lam, log_qj, eps_j, log_expm1_inf):
  r"""log(E - 1) of WBK Thm 9 (arXiv:1808.00087v2).

  E = 1 + q^2 C(l,2) min{4(e^{eps(2)}-1), e^{eps(2)} min{2,(e^{eps_inf}-1)^2}}
        + sum_{j=3}^l q^j C(l,j) e^{(j-1)eps(j)} min{2, (e^{eps_inf}-1)^j}.

  The rate enters only through q^j, so a random rate (Eq. 5 with a base
  curve independent of k) is handled exactly by passing log E[q^j].

  Args:
    lam: (L,) integer orders (float).
    log_qj: S + (J,), log q^j (or log E[q^j]) for j = 2..J+1.
    eps_j: S + (J,), base RDP at j = 2..J+1.
    log_expm1_inf: shape S, log(e^{eps(inf)} - 1) (+inf allowed).
  Returns: S + (L,).
  """
  num_j = eps_j.shape[-1]
  j = jnp.arange(2, num_j + 2, dtype=jnp.float64)
  li = log_expm1_inf[..., None]
  gen = (log_qj + (j - 1.0) * eps_j
         + jnp.minimum(_LOG2, jnp.where(jnp.isneginf(li), -jnp.inf, j * li)))
  e2 = eps_j[..., 0]
  two = log_qj[..., 0] + jnp.minimum(
      _LOG4 + log_expm1(e2),
      e2 + jnp.minimum(_LOG2, jnp.where(jnp.isneginf(log_expm1_inf), -jnp.inf,
                                        2.0 * log_expm1_inf)))
  gen = jnp.concatenate([two[..., None], gen[..., 1:]], axis=-1)
  mask = j[None, :] <= lam[:, None]
  log_c = log_binom(lam[:, None], jnp.minimum(j[None, :], lam[:, None]))
  terms = jnp.where(mask, gen[..., None, :] + log_c, -jnp.inf)
  return logsumexp(terms, axis=-1)


# --------------------------------------------------------------------------
# Eq. 5 binomial mixture
# --------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _log_stirling2(J: int) -> np.ndarray:
  """log S(j, i) (Stirling numbers of the 2nd kind), 0 <= i, j <= J (numpy)."""
  out = np.full((J + 1, J + 1), -np.inf)
  out[0, 0] = 0.0
  for j in range(1, J + 1):
    i = np.arange(1, j + 1)
    out[j, 1:j + 1] = np.logaddexp(np.log(i) + out[j - 1, 1:j + 1], out[j - 1, 0:j])
  return out


def log_rate_moments(n, p, J):
  r"""log E[(k/n)^j], k ~ Bin(n, p), j = 2..J; shape S + (J-1,).

  :math:`\mathbb E[k^j]=\sum_{i\le j}S(j,i)\,n^{\underline i}p^i` (all terms
  positive: no cancellation, exact for every n -- no truncation in k).
  """
  ls = jnp.asarray(_log_stirling2(J)[2:, :])                 # (J-1, J+1)
  t = jnp.arange(J, dtype=jnp.float64)
  lf = jnp.log(jnp.maximum(n[..., None] - t, 0.0))           # log(n - t), t < J
  logfall = jnp.concatenate([jnp.zeros(n.shape + (1,)), jnp.cumsum(lf, axis=-1)], axis=-1)
  i = jnp.arange(J + 1, dtype=jnp.float64)
  ip = xlogy(i, p[..., None])                                # i log p (0 at i = 0)
  terms = ls + (logfall + ip)[..., None, :]
  j = jnp.arange(2, J + 1, dtype=jnp.float64)
  return logsumexp(terms, axis=-1) - j * jnp.log(n[..., None])


def mixture_window(n, p, num_terms):
  """``(k_lo, ks)``: the static window of ``num_terms`` values of k around np."""
  mean = jnp.floor(n * p)
  k_lo = jnp.clip(mean - num_terms // 2, 0.0, jnp.maximum(n - num_terms + 1, 0.0))
  ks = k_lo[..., None] + jnp.arange(num_terms, dtype=jnp.float64)
  return k_lo, ks


def log_tail_mass(n, p, k_lo, num_terms):
  """Chernoff upper bound on log P(k < k_lo or k > k_lo + num_terms - 1)."""
  nn = jnp.maximum(n, 1.0)
  a = k_lo - 1.0
  xa = jnp.clip(a / nn, 0.0, 1.0)
  lower = jnp.where(xa < p, _log_kl_tail(xa, p, n), 0.0)
  lower = jnp.where(a < 0, -jnp.inf, lower)
  b = k_lo + num_terms
  xb = jnp.clip(b / nn, 0.0, 1.0)
  upper = jnp.where(xb > p, _log_kl_tail(xb, p, n), 0.0)
  upper = jnp.where(b > n, -jnp.inf, upper)
  return jnp.minimum(jnp.logaddexp(lower, upper), 0.0)


def mixture_log_excess(n, p, num_terms, per_k, log_cap=None):
  """log(sum_k w_k (E_k - 1) [+ tail * cap]) for the Eq. 5 mixture.

  per_k(ks) -> S + (K, L) log(E_k - 1) for k in ks (S + (K,), k <= n).
  log_cap: S + (L,) log of a bound on E_k - 1 valid for all k (None: drop the
  tail, which gives a lower bound).
  """
  k_lo, ks = mixture_window(n, p, num_terms)

  def chunk(ks):
    valid = ks <= n[..., None]
    ks_safe = jnp.minimum(ks, n[..., None])
    logw = log_binom_pmf(ks_safe, n[..., None], p[..., None])
    logx = per_k(ks_safe)
    terms = jnp.where(valid[..., None], logw[..., None] + logx, -jnp.inf)
    return logsumexp(terms, axis=-2)

  if num_terms <= _CHUNK:
    total = chunk(ks)
  else:  # bound memory: map over chunks of k
    nc = -(-num_terms // _CHUNK)
    pad = nc * _CHUNK - num_terms
    ks = jnp.concatenate([ks, jnp.full(ks.shape[:-1] + (pad,), jnp.inf)], axis=-1)
    ks = jnp.moveaxis(ks.reshape(ks.shape[:-1] + (nc, _CHUNK)), -2, 0)
    total = logsumexp(lax.map(chunk, ks), axis=0)
  if log_cap is not None:
    tail = log_tail_mass(n, p, k_lo, num_terms)
    total = jnp.logaddexp(total, tail[..., None] + log_cap)
  return total


def auto_num_terms(n, p, width=13.0, cap=_MAX_TERMS) -> int:
  """Static window size: covers np +- (width sd + 10), capped at n + 1 and cap."""
  n = np.asarray(n, np.float64)
  p = np.asarray(p, np.float64)
  sd = np.sqrt(np.maximum(n * p * (1 - p), 0.0))
  need = int(np.max(2 * np.ceil(width * sd + 10) + 1))
  need = min(need, int(np.max(n)) + 1, cap)
  return int(2 ** math.ceil(math.log2(max(need, 16))))


def resolve_num_terms(num_terms, n, p, **kw):
  """Checked ``num_terms``, or :func:`auto_num_terms` for concrete n, p, else 256."""
  if num_terms is not None:
    checks.check_int("num_terms", num_terms, min_value=1, max_value=2**20)
    return int(num_terms)
  return static_size((n, p), lambda: auto_num_terms(n, p, **kw), default=256)


def finish_rdp(log_excess, lam):
  """RDP ``log(1 + E - 1) / (lam - 1)`` from ``log(E - 1)``, clipped at 0."""
  rdp = jnp.logaddexp(0.0, log_excess) / (lam - 1.0)
  return jnp.maximum(rdp, 0.0)


def order_envelope(rdp, lam_np):
  """min over orders >= alpha of an upper RDP curve (valid: RDP is
  non-decreasing in the order); makes WBK's curve monotone."""
  idx = np.argsort(lam_np, kind="stable")
  inv = np.argsort(idx, kind="stable")
  env = lax.cummin(jnp.take(rdp, idx, axis=-1), axis=rdp.ndim - 1, reverse=True)
  return jnp.take(env, inv, axis=-1)


def check_rate_inputs(n, p, scale_name=None, scale=None):
  """Eager checks of the check-in inputs: n >= 1, p in [0, 1] and, when
  given, the positive noise scale ``scale`` named ``scale_name``."""
  checks.check_range("n", n, 1.0)
  checks.check_probability("p", p)
  if scale_name is not None:
    checks.check_positive(scale_name, scale)


def nan_where_invalid(out, n, p, sigma):
  """NaN on lanes (leading axes of ``out``) with invalid n, p or sigma."""
  bad = ~((n >= 1) & (p >= 0) & (p <= 1) & (sigma > 0))
  return jnp.where(bad[..., None], jnp.nan, out)


def lanes_f64(where, lam_np, *xs):
  """``(*xs, lam, max_order)``: the inputs broadcast as float64 lanes, the
  orders as a float64 array and their (static) maximum. Needs x64 (names
  ``where`` in the error)."""
  require_x64(where)
  xs = jnp.broadcast_arrays(*(jnp.asarray(x, jnp.float64) for x in xs))
  return (*xs, jnp.asarray(lam_np, jnp.float64), int(np.max(lam_np)))


def orders_jit(impl, *static):
  """Module-level jit of ``impl(lam_np, *args, **static)`` with the orders
  (a tuple) and the names in ``static`` as static arguments: one compile per
  (orders, static values, shapes)."""

  @functools.partial(jit, static_argnames=("orders",) + static,
                     name=f"{impl.__module__}.{impl.__qualname__}")
  def run(*args, orders, **kw):
    return impl(np.asarray(orders, np.float64), *args, **kw)

  return run


# --------------------------------------------------------------------------
# Eq. 8 (shuffle-Gaussian lower bound) by the power recurrence
# --------------------------------------------------------------------------

def _log_a(sigma, L):
  """log a_i = i(i-1)/(2 sigma^2) - log i!, i = 0..L; shape S + (L+1,)."""
  i = jnp.arange(L + 1, dtype=jnp.float64)
  return i * (i - 1.0) / (2.0 * sigma[..., None] ** 2) - gammaln(i + 1.0)


def _log_power_coeffs(log_a, m, L):
  """log of the coefficients b_0..b_L of A(t)^m, A = sum a_i t^i, a_0 = 1.

  log_a: S_a + (L+1,); m: S_m (integer-valued float >= 0), S_a broadcasting
  against S_m (sigma may carry fewer batch dims than m). Miller's recurrence
  b_i = (1/i) sum_{j=1}^i ((m+1) j - i) a_j b_{i-j} has non-negative
  coefficients for i <= m + 1 (all terms positive, no cancellation); lanes
  with m + 1 < L read A^m from a table of powers 0..L-2 built by repeated
  multiplication over S_a only (O(L^3) per sigma, independent of S_m).
  """
  shape = jnp.broadcast_shapes(log_a.shape[:-1], m.shape)
  log_a_b = jnp.broadcast_to(log_a, shape + (L + 1,))
  m = jnp.broadcast_to(m, shape)
  jv = jnp.arange(1, L + 1, dtype=jnp.float64)
  init = jnp.full(shape + (L + 1,), -jnp.inf).at[..., 0].set(0.0)

  def body(i, logb):
    fi = i.astype(jnp.float64)
    coef = (m[..., None] + 1.0) * jv - fi
    idx = jnp.clip(i - jnp.arange(1, L + 1), 0, L)
    prev = jnp.take(logb, idx, axis=-1)
    t = jnp.where((jv <= fi) & (coef > 0),
                  jnp.log(jnp.maximum(coef, 1.0)) + log_a_b[..., 1:] + prev, -jnp.inf)
    val = logsumexp(t, axis=-1) - jnp.log(fi)
    return lax.dynamic_update_index_in_dim(logb, val, i, axis=-1)

  miller = lax.fori_loop(1, L + 1, body, init)
  if L <= 2:
    return jnp.where((m == 0)[..., None], init, miller)

  # Table of A^0 .. A^{L-2} over log_a's own batch shape (skipped at run
  # time when no lane needs it; under vmap both branches run).
  def with_table(miller):
    return jnp.where((m + 1.0 < L)[..., None], _small_powers(log_a, m, L, shape), miller)

  return lax.cond(jnp.any(m + 1.0 < L), with_table, lambda x: x, miller)


def _small_powers(log_a, m, L, shape):
  ii = jnp.arange(L + 1)
  conv_idx = ii[:, None] - ii[None, :]                       # (L+1, L+1): i - j
  conv_ok = conv_idx >= 0
  a_mat = jnp.where(conv_ok, jnp.take(log_a, jnp.clip(conv_idx, 0, L), axis=-1), -jnp.inf)

  def mult(cur, _):
    nxt = logsumexp(cur[..., None, :] + a_mat, axis=-1)
    return nxt, nxt

  one = jnp.full(log_a.shape, -jnp.inf).at[..., 0].set(0.0)
  _, pows = lax.scan(mult, one, None, length=L - 2)           # A^1 .. A^{L-2}
  table = jnp.concatenate([one[None], pows], axis=0)           # (L-1,) + S_a + (L+1,)
  table = jnp.moveaxis(table, 0, -2)                           # S_a + (L-1, L+1)
  nd = len(shape) - (log_a.ndim - 1)
  table = table.reshape((1,) * nd + table.shape)
  idx = jnp.clip(m, 0, L - 2).astype(jnp.int32)[..., None, None]
  return jnp.take_along_axis(table, idx, axis=-2)[..., 0, :]


def shuffle_gaussian_log_moments(sigma, k, L):
  """log E[M_k^j], j = 0..L, M_k = mean of k iid lognormals (Eq. 8 bracket).

  ``sigma``: S_a, ``k``: S_m (integer-valued >= 1), static ``L``; returns
  ``broadcast(S_a, S_m) + (L+1,)``. Jittable.
  """
  logb = _log_power_coeffs(_log_a(sigma, L), k, L)
  j = jnp.arange(L + 1, dtype=jnp.float64)
  kk = jnp.maximum(k, 1.0)[..., None]
  return gammaln(j + 1.0) + logb - j * jnp.log(kk)
