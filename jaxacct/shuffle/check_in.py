r"""Shuffled check-in: clients check in independently with probability p, then shuffle.

Source: Liew, Hasegawa & Takahashi, "Privacy Amplification via Shuffled
Check-Ins", arXiv:2206.03151v2 (digest: ``shared/digests/liew-shuffled-check-in.md``).
The paper calls the check-in probability :math:`\gamma`; here it is ``p``.
Adjacency is *replacement* throughout (one of the n records is replaced), so a
Gaussian report of clipping norm C has sensitivity 2C: pass
``sigma = noise_std / (2 C)``.

The engine is Thm 2 (Eq. 5): the number k of check-ins is public and has the
same law Bin(n, p) under both datasets, so the Renyi moment is *exactly* the
binomial mixture of the per-k moments of "subsample k of n, shuffle k":

.. math:: e^{(\lambda-1)\varepsilon(\lambda)} = \sum_{k=0}^n \binom nk p^k(1-p)^{n-k}
          \mathbb E_{q_k}[(p_k/q_k)^\lambda].

We evaluate it in log space as ``1 + sum_k w_k (E_k - 1)`` over a static window
of ``num_terms`` values of k around np; the mass outside the window is bounded
by the Chernoff bound :math:`e^{-n\,\mathrm{KL}(a/n\|p)}` and multiplied by a
safe cap of ``E_k - 1`` (the un-amplified local mechanism), so the result stays
an upper bound for any window size (a small window only loosens it). Per-k
moments use Wang-Balle-Kasiviswanathan's Thm 9 (arXiv:1808.00087v2) for
subsampling without replacement, as in the paper.

Public functions (``orders`` = integer Renyi orders >= 2, concrete; the other
inputs broadcast; kernels return ``broadcast shape + (len(orders),)`` float64,
are jittable and vmappable; invalid traced lanes are NaN):

Certified (upper bounds):

* :func:`check_in_ldp_rdp` -- eps0-LDP randomizer (pure), Eq. 5 + WBK with the
  randomized-response RDP curve as base (shuffling only as post-processing).
* :func:`check_in_ldp_rdp_clones` -- eps0-LDP, the certified analogue of the
  paper's Approach 1: Eq. 5 + WBK over the FMT clone-pair RDP of k reports
  (uses the shuffle; eager only).
* :func:`check_in_gaussian_rdp` -- Gaussian local randomizer, Eq. 5 + WBK with
  the Gaussian RDP :math:`j/(2\sigma^2)` as base.
* :func:`check_in_secagg_gaussian_rdp` -- Thm 4 (distributed check-in with
  secure aggregation), with the k = 0 term the printed theorem drops.
* :func:`check_in_first_cut_dp` -- Thm 1 per-round (eps, delta), either as
  derived from Eqs. 12-14 (``variant="derived"``, default) or as printed.
* eager: :func:`check_in_epsilon`, :func:`check_in_gaussian_epsilon`,
  :func:`check_in_secagg_gaussian_epsilon`, :func:`check_in_first_cut_epsilon`.

Lower bounds (Sec. 4):

* :func:`shuffle_gaussian_rdp_lower` -- Eq. 8 / Thm 3 (all n report), by an
  exact O(lambda^2) power recurrence (Algorithm 2's partition sum is the test oracle).
* :func:`check_in_gaussian_rdp_lower` -- the exact Renyi divergence of the same
  pair (0^n vs (1, 0^{n-1})) under shuffled check-in (derived here: Eq. 5 with
  the pair's per-k moments :math:`\sum_j\binom\lambda j(1-r)^{\lambda-j}r^j
  \mathbb E[M_k^j]`, r = k/n).
* eager: :func:`shuffle_gaussian_epsilon_lower` (an epsilon no valid accountant
  can beat at that delta is *not* implied; it is the conversion of a lower RDP
  curve and is reported for comparison only).

Optimistic estimates (NOT bounds; Eq. 8 is a lower bound, Sec. 5 of the paper):

* :func:`subsampled_shuffle_gaussian_rdp_estimate` -- Thm 5.

Paper reproduction only (use the printed Lemma 1, a DP->RDP "conversion" that
is unsound: at delta = 0 it returns ~0 for every eps; digest Sec. 1.3):

* :func:`paper_lemma1_rdp`, :func:`paper_approach_rdp` (Approaches 1 and 2 of
  Table 1), :func:`paper_table2_epsilon` (Table 2 pipeline incl. the Thm 1
  baseline). Their results carry ``bound="estimate"`` (not a valid bound).
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammaln, xlog1py, xlogy

from jaxacct._core import checks
from jaxacct._core.conversion import rdp_to_epsilon_kernel as _rdp_to_epsilon
from jaxacct._core.dtype import require_x64, x64_boundary
from jaxacct._core.logmath import (log_binom, log_binom_pmf,
                                   log_expm1, logsumexp)
from jaxacct._core.results import EpsilonResult

__all__ = [
    "DEFAULT_CHECK_IN_ORDERS", "check_in_ldp_rdp", "check_in_ldp_rdp_clones",
    "check_in_gaussian_rdp",
    "check_in_gaussian_rdp_lower", "check_in_secagg_gaussian_rdp",
    "shuffle_gaussian_rdp_lower", "subsampled_shuffle_gaussian_rdp_estimate",
    "check_in_first_cut_dp", "check_in_epsilon", "check_in_gaussian_epsilon",
    "check_in_secagg_gaussian_epsilon", "check_in_first_cut_epsilon",
    "shuffle_gaussian_epsilon_lower", "paper_lemma1_rdp", "paper_approach_rdp",
    "paper_table2_epsilon", "UNSOUND",
]

#: Integer orders 2..256: every kernel here needs integer orders (binomial
#: expansions); the conversion warns when the optimum sits at the top order.
DEFAULT_CHECK_IN_ORDERS = np.arange(2, 257, dtype=np.float64)
DEFAULT_CHECK_IN_ORDERS.setflags(write=False)

UNSOUND = "estimate"  # not a valid bound: the paper as printed (method says so)

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


def _orders_info(orders):
  arr = checks.check_orders(orders, integer=True, min_order=2)
  return arr, tuple(float(a) for a in arr)


def _rr_rdp_times(lam, eps0):
  """(lam - 1) * RDP of binary randomized response with eps0 (worst eps0-DP pair)."""
  return (jnp.logaddexp(lam * eps0, (1.0 - lam) * eps0)
          - jnp.logaddexp(0.0, eps0))


# --------------------------------------------------------------------------
# Wang-Balle-Kasiviswanathan Thm 9 (subsampling without replacement, RDP)
# --------------------------------------------------------------------------

def _wbk_log_excess(lam, log_q, eps_j, log_expm1_inf):
  """WBK at a fixed rate q (see :func:`_wbk_log_excess_moments`)."""
  j = jnp.arange(2, eps_j.shape[-1] + 2, dtype=jnp.float64)
  return _wbk_log_excess_moments(lam, j * log_q[..., None], eps_j, log_expm1_inf)


def _wbk_log_excess_moments(lam, log_qj, eps_j, log_expm1_inf):
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


def _log_rate_moments(n, p, J):
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


def _window(n, p, num_terms):
  mean = jnp.floor(n * p)
  k_lo = jnp.clip(mean - num_terms // 2, 0.0, jnp.maximum(n - num_terms + 1, 0.0))
  ks = k_lo[..., None] + jnp.arange(num_terms, dtype=jnp.float64)
  return k_lo, ks


def _log_tail_mass(n, p, k_lo, num_terms):
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


def _mixture_log_excess(n, p, num_terms, per_k, log_cap=None):
  """log(sum_k w_k (E_k - 1) [+ tail * cap]) for the Eq. 5 mixture.

  per_k(ks) -> S + (K, L) log(E_k - 1) for k in ks (S + (K,), k <= n).
  log_cap: S + (L,) log of a bound on E_k - 1 valid for all k (None: drop the
  tail, which gives a lower bound).
  """
  k_lo, ks = _window(n, p, num_terms)

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
    tail = _log_tail_mass(n, p, k_lo, num_terms)
    total = jnp.logaddexp(total, tail[..., None] + log_cap)
  return total


def _auto_num_terms(n, p, width=13.0, cap=_MAX_TERMS) -> int:
  """Static window size: covers np +- (width sd + 10), capped at n + 1 and cap."""
  n = np.asarray(n, np.float64)
  p = np.asarray(p, np.float64)
  sd = np.sqrt(np.maximum(n * p * (1 - p), 0.0))
  need = int(np.max(2 * np.ceil(width * sd + 10) + 1))
  need = min(need, int(np.max(n)) + 1, cap)
  return int(2 ** math.ceil(math.log2(max(need, 16))))


def _num_terms(num_terms, n, p, **kw):
  if num_terms is not None:
    checks.check_int("num_terms", num_terms, min_value=1, max_value=2**20)
    return int(num_terms)
  if checks.is_concrete((n, p)):
    return _auto_num_terms(n, p, **kw)
  return 256


def _finish(log_excess, lam):
  rdp = jnp.logaddexp(0.0, log_excess) / (lam - 1.0)
  return jnp.maximum(rdp, 0.0)


def _envelope(rdp, lam_np):
  """min over orders >= alpha of an upper RDP curve (valid: RDP is
  non-decreasing in the order); makes WBK's curve monotone."""
  idx = np.argsort(lam_np, kind="stable")
  inv = np.argsort(idx, kind="stable")
  env = lax.cummin(jnp.take(rdp, idx, axis=-1), axis=rdp.ndim - 1, reverse=True)
  return jnp.take(env, inv, axis=-1)


# --------------------------------------------------------------------------
# certified check-in RDP: eps0-LDP and Gaussian local randomizers
# --------------------------------------------------------------------------

def _check_in_ldp_impl(lam_np, n, p, eps0):
  require_x64("check_in_ldp_rdp")
  n, p, eps0 = jnp.broadcast_arrays(*(jnp.asarray(x, jnp.float64) for x in (n, p, eps0)))
  lam = jnp.asarray(lam_np, jnp.float64)
  jmax = int(np.max(lam_np))
  j = jnp.arange(2, jmax + 1, dtype=jnp.float64)
  eps_j = _rr_rdp_times(j, eps0[..., None]) / (j - 1.0)          # S + (J,)
  li = log_expm1(eps0)
  nn = jnp.where(n >= 1, n, 1.0)
  log_qj = _log_rate_moments(nn, jnp.clip(p, 0.0, 1.0), jmax)
  out = _finish(_wbk_log_excess_moments(lam, log_qj, eps_j, li), lam)
  # Every per-k moment is also <= the local randomizer's (post-processing).
  out = _envelope(jnp.minimum(out, _rr_rdp_times(lam, eps0[..., None]) / (lam - 1.0)), lam_np)
  bad = ~((n >= 1) & (p >= 0) & (p <= 1) & (eps0 >= 0) & jnp.isfinite(eps0))
  return jnp.where(bad[..., None], jnp.nan, out)


@functools.partial(jax.jit, static_argnames=("orders",))
def _check_in_ldp_jit(n, p, eps0, *, orders):
  return _check_in_ldp_impl(np.asarray(orders, np.float64), n, p, eps0)


def check_in_ldp_rdp(orders=DEFAULT_CHECK_IN_ORDERS, *, n, p, eps0):
  r"""Replacement RDP of one round of shuffled check-in of eps0-LDP reports (upper).

  Liew, Hasegawa & Takahashi, arXiv:2206.03151v2, Thm 2 (Eq. 5), with the
  per-k moment bounded by Wang-Balle-Kasiviswanathan (arXiv:1808.00087v2) Thm
  9 at rate k/n over the base curve of an eps0-DP mechanism, which is at most
  that of binary randomized response,
  :math:`\varepsilon(j)=\frac1{j-1}\log\frac{e^{j\epsilon_0}+e^{(1-j)\epsilon_0}}{1+e^{\epsilon_0}}`,
  :math:`\varepsilon(\infty)=\epsilon_0`. Shuffling is used only as
  post-processing (a sound shuffle-RDP curve for k reports would tighten it).
  The result is also capped by the local randomizer's own RDP (every per-k
  moment is, by post-processing).

  .. math:: \varepsilon(\lambda)\le\frac1{\lambda-1}\log\Big(1+\sum_k
            \mathrm{Bin}(k;n,p)\,(E^{\rm WBK}_{k/n}(\lambda)-1)\Big)

  Since the base curve does not depend on k, the k-sum moves inside WBK's
  j-sum and needs only :math:`\mathbb E[(k/n)^j]` (exact, via Stirling
  numbers): the full Eq. 5 over all k in O(J^2), no truncation.

  Args:
    orders: concrete 1-D integer orders >= 2.
    n: number of clients, >= 1 (real values are accepted under jit).
    p: check-in probability in [0, 1].
    eps0: local privacy level >= 0.

  Returns:
    float64 array, shape ``broadcast(n, p, eps0).shape + (len(orders),)``.

  Bound: upper. Under jit, invalid lanes are NaN. Cost O(J^2).
  """
  arr, otuple = _orders_info(orders)
  if checks.is_concrete((n, p, eps0)):
    checks.check_range("n", n, 1.0)
    checks.check_probability("p", p)
    checks.check_range("eps0", eps0, 0.0)
    return x64_boundary(_check_in_ldp_jit)(n, p, eps0, orders=otuple)
  return _check_in_ldp_impl(arr, n, p, eps0)


def check_in_ldp_rdp_clones(orders=DEFAULT_CHECK_IN_ORDERS, *, n, p, eps0, num_terms=None):
  r"""Replacement RDP of shuffled check-in of eps0-LDP reports, with shuffle gain (upper).

  The certified analogue of Liew et al.'s Approach 1 (arXiv:2206.03151v2,
  Sec. 3.3, Table 1): Eq. 5 over k, WBK Thm 9 (arXiv:1808.00087v2) at rate
  k/n, but with the base curve :math:`\varepsilon^S_k(j)` = Renyi divergence
  of the Feldman-McMillan-Talwar clone pair for k reports (arXiv:2012.12803,
  Sec. 6.1; ``jaxacct.shuffle.clones.clone_rdp``, via the shared pair kernel)
  instead of FMT's (eps, delta) pushed through the unsound Lemma 1.
  :math:`\varepsilon(\infty)=\epsilon_0`. The per-k curve is also min'ed with
  randomized response, k outside a window of ``num_terms`` values around np
  are bounded by the Chernoff tail times the randomized-response cap, and the
  result is min'ed with :func:`check_in_ldp_rdp` (all valid upper bounds).

  Eager only (static pair windows from concrete n, p, eps0); scalars.
  Cost ~ num_terms x J x (pair window): EXPENSIVE -- about 200 s on 2 CPU
  cores for n = 1e4, p = 1e-2, eps0 = 2, orders 2..64 (window 512), where it
  gives eps = 0.34 after 100 rounds at delta = 1e-4 vs 1.44 without the
  shuffle; keep orders short and ``num_terms`` small (any value is sound).

  Returns: float64 ``(len(orders),)``. Bound: upper.
  """
  from jaxacct.shuffle import _pairs  # pylint: disable=import-outside-toplevel
  arr, otuple = _orders_info(orders)
  for name, v in (("n", n), ("p", p), ("eps0", eps0)):
    if np.ndim(v):
      raise ValueError(f"{name} must be a scalar here; got shape {np.shape(v)}.")
  checks.check_range("n", n, 1.0)
  checks.check_probability("p", p)
  checks.check_range("eps0", eps0, 0.0, lo_open=True)
  nt = _num_terms(num_terms, n, p, width=6.0, cap=1024)
  J = int(arr.max())
  jgrid = np.arange(2, J + 1, dtype=np.float64)
  with jax.enable_x64(True):
    k_lo, ks = _window(jnp.asarray(float(n)), jnp.asarray(float(p)), nt)
    ks_np = np.minimum(np.asarray(ks), float(n))
    pe = math.exp(eps0)
    beta = (pe - 1.0) / (pe + 1.0)
    q = 2.0 * pe * pe / (pe + 1.0)
    wc, wa = _pairs.rdp_widths(float(ks_np.max()), math.exp(-eps0), 0.5, J, eps0)
    base = _clones_curves(jnp.asarray(np.maximum(ks_np, 1.0)), pe, beta, q,
                          orders=tuple(jgrid.tolist()), wc=wc, wa=wa)
    out = _clones_mixture(jnp.asarray(float(n)), jnp.asarray(float(p)), jnp.asarray(float(eps0)),
                          base, orders=otuple, num_terms=nt)
    rr_only = check_in_ldp_rdp(arr, n=float(n), p=float(p), eps0=float(eps0))
    return jnp.minimum(out, rr_only)


@functools.partial(jax.jit, static_argnames=("orders", "wc", "wa"))
def _clones_curves(ks, pe, beta, q, *, orders, wc, wa):
  from jaxacct.shuffle import _pairs  # pylint: disable=import-outside-toplevel
  jg = np.asarray(orders, np.float64)
  return lax.map(lambda kk: _pairs.pair_rdp(jg, n=kk, p=pe, beta=beta, q0=q, q1=q,
                                             wc=wc, wa=wa, symmetric=True), ks)


@functools.partial(jax.jit, static_argnames=("orders", "num_terms"))
def _clones_mixture(n, p, eps0, base, *, orders, num_terms):
  lam_np = np.asarray(orders, np.float64)
  lam = jnp.asarray(lam_np)
  J = base.shape[-1] + 1
  j = jnp.arange(2, J + 1, dtype=jnp.float64)
  rr = _rr_rdp_times(j, eps0) / (j - 1.0)
  base = jnp.minimum(base, rr)                                  # (K, J-1)
  li = log_expm1(eps0)

  def per_k(ks):
    lq = jnp.log(ks / n)
    return _wbk_log_excess(lam, lq, base, jnp.broadcast_to(li, ks.shape))

  log_cap = log_expm1(_rr_rdp_times(lam, eps0))
  k_lo, ks = _window(n, p, num_terms)
  valid = ks <= n
  ks_safe = jnp.minimum(ks, n)
  logw = log_binom_pmf(ks_safe, n, p)
  terms = jnp.where(valid[:, None], logw[:, None] + per_k(ks_safe), -jnp.inf)
  total = logsumexp(terms, axis=0)
  tail = _log_tail_mass(n, p, k_lo, num_terms)
  total = jnp.logaddexp(total, tail + log_cap)
  out = jnp.minimum(_finish(total, lam), _rr_rdp_times(lam, eps0) / (lam - 1.0))
  return _envelope(out, lam_np)


def _check_in_gauss_impl(lam_np, n, p, sigma):
  require_x64("check_in_gaussian_rdp")
  n, p, sigma = jnp.broadcast_arrays(*(jnp.asarray(x, jnp.float64) for x in (n, p, sigma)))
  lam = jnp.asarray(lam_np, jnp.float64)
  jmax = int(np.max(lam_np))
  j = jnp.arange(2, jmax + 1, dtype=jnp.float64)
  s = jnp.where(sigma > 0, sigma, 1.0)
  eps_j = j / (2.0 * s[..., None] ** 2)
  nn = jnp.where(n >= 1, n, 1.0)
  log_qj = _log_rate_moments(nn, jnp.clip(p, 0.0, 1.0), jmax)
  out = _finish(_wbk_log_excess_moments(lam, log_qj, eps_j, jnp.full(n.shape, jnp.inf)), lam)
  out = jnp.minimum(out, lam / (2.0 * s[..., None] ** 2))   # local Gaussian (post-processing)
  out = _envelope(out, lam_np)
  bad = ~((n >= 1) & (p >= 0) & (p <= 1) & (sigma > 0))
  return jnp.where(bad[..., None], jnp.nan, out)


@functools.partial(jax.jit, static_argnames=("orders",))
def _check_in_gauss_jit(n, p, sigma, *, orders):
  return _check_in_gauss_impl(np.asarray(orders, np.float64), n, p, sigma)


def check_in_gaussian_rdp(orders=DEFAULT_CHECK_IN_ORDERS, *, n, p, sigma):
  r"""Replacement RDP of shuffled check-in of Gaussian reports (upper).

  Liew et al., arXiv:2206.03151v2, Thm 2 (Eq. 5) with WBK Thm 9
  (arXiv:1808.00087v2) at rate k/n over the Gaussian base
  :math:`\varepsilon(j)=j/(2\sigma^2)`, :math:`\varepsilon(\infty)=\infty`
  (the per-report noise is N(0, sigma^2) per unit of replacement distance;
  the shuffle's own amplification is not used, since no certified
  shuffle-Gaussian RDP is known -- Eq. 8 is only a lower bound).

  Args:
    orders: concrete integer orders >= 2.
    n: clients >= 1. p: check-in probability in [0, 1]. sigma: > 0.

  Returns:
    float64, shape ``broadcast(n, p, sigma).shape + (len(orders),)``.

  Full Eq. 5 over all k in O(J^2) (binomial moments, as in
  :func:`check_in_ldp_rdp`).

  Bound: upper. Invalid traced lanes NaN. Always >= :func:`check_in_gaussian_rdp_lower`.
  """
  arr, otuple = _orders_info(orders)
  if checks.is_concrete((n, p, sigma)):
    checks.check_range("n", n, 1.0)
    checks.check_probability("p", p)
    checks.check_positive("sigma", sigma)
    return x64_boundary(_check_in_gauss_jit)(n, p, sigma, orders=otuple)
  return _check_in_gauss_impl(arr, n, p, sigma)


# --------------------------------------------------------------------------
# Thm 4: distributed check-in with secure aggregation
# --------------------------------------------------------------------------

def _secagg_impl(lam_np, n, p, sigma, num_terms):
  require_x64("check_in_secagg_gaussian_rdp")
  n, p, sigma = jnp.broadcast_arrays(*(jnp.asarray(x, jnp.float64) for x in (n, p, sigma)))
  lam = jnp.asarray(lam_np, jnp.float64)
  jmax = int(np.max(lam_np))
  j = jnp.arange(2, jmax + 1, dtype=jnp.float64)
  s = jnp.where(sigma > 0, sigma, 1.0)

  def per_k(ks):
    kk = jnp.maximum(ks, 1.0)
    eps_j = 2.0 * j / (kk[..., None] * s[..., None, None] ** 2)
    lq = jnp.log(ks / n[..., None])
    return _wbk_log_excess(lam, lq, eps_j, jnp.full(ks.shape, jnp.inf))

  log_cap = log_expm1((lam - 1.0) * 2.0 * lam / s[..., None] ** 2)
  out = _finish(_mixture_log_excess(n, p, num_terms, per_k, log_cap), lam)
  out = jnp.minimum(out, 2.0 * lam / s[..., None] ** 2)     # k = 1 Gaussian, no sampling
  out = _envelope(out, lam_np)
  bad = ~((n >= 1) & (p >= 0) & (p <= 1) & (sigma > 0))
  return jnp.where(bad[..., None], jnp.nan, out)


@functools.partial(jax.jit, static_argnames=("orders", "num_terms"))
def _secagg_jit(n, p, sigma, *, orders, num_terms):
  return _secagg_impl(np.asarray(orders, np.float64), n, p, sigma, num_terms)


def check_in_secagg_gaussian_rdp(orders=DEFAULT_CHECK_IN_ORDERS, *, n, p, sigma,
                                 num_terms=None):
  r"""RDP of distributed check-in with secure aggregation, Gaussian noise (upper).

  Liew et al., arXiv:2206.03151v2, Thm 4: each checked-in client adds
  N(0, sigma^2) to a report of norm <= 1 and only the sum is released, so k
  reports carry N(0, k sigma^2) and replacement distance 2:

  .. math:: \varepsilon^{\rm SG}_k(\lambda)\le\frac1{\lambda-1}\log\Big(1+(\tfrac kn)^2
            \binom\lambda2\min\{4(e^{4/(k\sigma^2)}-1),2e^{4/(k\sigma^2)}\}
            +\sum_{j\ge3}2(\tfrac kn)^j\binom\lambda je^{2j(j-1)/(k\sigma^2)}\Big)

  mixed over k ~ Bin(n, p) *including* the k = 0 term (1-p)^n that the
  printed theorem omits (digest Sec. 2.5). WBK's bound is not monotone in
  the order at rates near 1; we return its monotone envelope (min over
  larger orders in the grid), valid since RDP is non-decreasing in the order.

  Args / Returns: as :func:`check_in_gaussian_rdp`.

  Bound: upper.
  """
  arr, otuple = _orders_info(orders)
  nt = _num_terms(num_terms, n, p)
  if checks.is_concrete((n, p, sigma)):
    checks.check_range("n", n, 1.0)
    checks.check_probability("p", p)
    checks.check_positive("sigma", sigma)
    return x64_boundary(_secagg_jit)(n, p, sigma, orders=otuple, num_terms=nt)
  return _secagg_impl(arr, n, p, sigma, nt)


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


def _log_moments(sigma, k, L):
  """log E[M_k^j], j = 0..L, M_k = mean of k iid lognormals (Eq. 8 bracket)."""
  logb = _log_power_coeffs(_log_a(sigma, L), k, L)
  j = jnp.arange(L + 1, dtype=jnp.float64)
  kk = jnp.maximum(k, 1.0)[..., None]
  return gammaln(j + 1.0) + logb - j * jnp.log(kk)


def _shuffle_lower_impl(lam_np, n, sigma):
  require_x64("shuffle_gaussian_rdp_lower")
  n = jnp.asarray(n, jnp.float64)
  sigma = jnp.asarray(sigma, jnp.float64)                 # not broadcast: the
  lam = jnp.asarray(lam_np, jnp.float64)                  # small-n table is per sigma
  L = int(np.max(lam_np))
  s = jnp.where(sigma > 0, sigma, 1.0)
  nn = jnp.where(n >= 1, jnp.round(n), 1.0)
  logm = _log_moments(s, nn, L)                           # S + (L+1,)
  n, sigma = jnp.broadcast_arrays(n, sigma)
  li = lam_np.astype(np.int64)
  out = jnp.maximum(jnp.take(logm, li, axis=-1) / (lam - 1.0), 0.0)
  bad = ~((n >= 1) & (sigma > 0))
  return jnp.where(bad[..., None], jnp.nan, out)


@functools.partial(jax.jit, static_argnames=("orders",))
def _shuffle_lower_jit(n, sigma, *, orders):
  return _shuffle_lower_impl(np.asarray(orders, np.float64), n, sigma)


def shuffle_gaussian_rdp_lower(orders=DEFAULT_CHECK_IN_ORDERS, *, n, sigma):
  r"""Lower bound on the RDP of the shuffled Gaussian mechanism (n reports).

  Liew et al., arXiv:2206.03151v2, Thm 3 (Eq. 8 = Eq. 19): the Renyi
  divergence, in Def. 4's direction D_lambda(M(D') || M(D)), of the pair
  D = 0^n, D' = (1, 0^{n-1}) with N(0, sigma^2) noise per report:

  .. math:: \varepsilon(\lambda)=\frac1{\lambda-1}\log\Big(\frac{e^{-\lambda/2\sigma^2}}{n^\lambda}
            \sum_{k_1+\dots+k_n=\lambda}\binom{\lambda}{k_1,\dots,k_n}e^{\sum k_i^2/2\sigma^2}\Big)
            =\frac{\log\lambda!+\log b_\lambda-\lambda\log n}{\lambda-1},

  with b the coefficients of :math:`(\sum_i e^{i(i-1)/2\sigma^2}t^i/i!)^n`,
  computed by J.C.P. Miller's power recurrence in log space (O(lambda^2), no
  cancellation for lambda <= n + 1; repeated multiplication otherwise)
  instead of Algorithm 2's partition sum (used as test oracle).

  Args:
    orders: concrete integer orders >= 2. n: reports >= 1 (rounded). sigma: > 0.

  Returns:
    float64, shape ``broadcast(n, sigma).shape + (len(orders),)``.

  Bound: lower (the worst-case pair is open, Sec. 6 of the paper). It is
  <= lambda/(2 sigma^2) (Cor. 1). Exact value of this pair's divergence.
  """
  arr, otuple = _orders_info(orders)
  if checks.is_concrete((n, sigma)):
    checks.check_range("n", n, 1.0)
    checks.check_positive("sigma", sigma)
    return x64_boundary(_shuffle_lower_jit)(n, sigma, orders=otuple)
  return _shuffle_lower_impl(arr, n, sigma)


def _check_in_lower_impl(lam_np, n, p, sigma, num_terms):
  require_x64("check_in_gaussian_rdp_lower")
  n, p, sigma = jnp.broadcast_arrays(*(jnp.asarray(x, jnp.float64) for x in (n, p, sigma)))
  lam = jnp.asarray(lam_np, jnp.float64)
  L = int(np.max(lam_np))
  s = jnp.where(sigma > 0, sigma, 1.0)
  n = jnp.where(n >= 1, jnp.round(n), 1.0)
  j = jnp.arange(2, L + 1, dtype=jnp.float64)

  def per_k(ks):
    logm = _log_moments(s[..., None], ks, L)[..., 2:]         # S + (K, J)
    lx = log_expm1(jnp.maximum(logm, 0.0))
    r = ks / n[..., None]
    rr = r[..., None, None]
    jj = j[None, :]
    ll = lam[:, None]
    t = (log_binom(ll, jnp.minimum(jj, ll)) + xlog1py(jnp.maximum(ll - jj, 0.0), -rr)
         + xlogy(jj, rr) + lx[..., None, :])
    t = jnp.where(jj <= ll, t, -jnp.inf)
    return logsumexp(t, axis=-1)                               # S + (K, L)

  out = _finish(_mixture_log_excess(n, p, num_terms, per_k, None), lam)
  bad = ~((n >= 1) & (p >= 0) & (p <= 1) & (sigma > 0))
  return jnp.where(bad[..., None], jnp.nan, out)


@functools.partial(jax.jit, static_argnames=("orders", "num_terms"))
def _check_in_lower_jit(n, p, sigma, *, orders, num_terms):
  return _check_in_lower_impl(np.asarray(orders, np.float64), n, p, sigma, num_terms)


def check_in_gaussian_rdp_lower(orders=DEFAULT_CHECK_IN_ORDERS, *, n, p, sigma,
                                num_terms=None):
  r"""Lower bound on the RDP of shuffled check-in of Gaussian reports.

  Section 4 of Liew et al. (arXiv:2206.03151v2, Thm 3) carried to check-in
  (derived here): for D = 0^n, D' = (1, 0^{n-1}), given k check-ins the
  likelihood ratio is :math:`1-r+rM_k`, r = k/n, M_k the mean of k iid
  lognormals :math:`e^{(2x-1)/2\sigma^2}`, so by Eq. 5

  .. math:: e^{(\lambda-1)\varepsilon(\lambda)}=\sum_k\mathrm{Bin}(k;n,p)
            \sum_{j=0}^\lambda\binom\lambda j(1-r)^{\lambda-j}r^j\,\mathbb E[M_k^j],

  with :math:`\mathbb E[M_k^j]` the Eq. 8 brackets. Terms outside the
  k-window are dropped (this keeps it a lower bound).

  Args / Returns: as :func:`check_in_gaussian_rdp`.

  ``num_terms`` (static) defaults to covering np +- (7 sd + 10), capped at 2048.

  Bound: lower (exact divergence of one neighbouring pair, up to the window).
  """
  arr, otuple = _orders_info(orders)
  nt = _num_terms(num_terms, n, p, width=7.0, cap=2048)
  if checks.is_concrete((n, p, sigma)):
    checks.check_range("n", n, 1.0)
    checks.check_probability("p", p)
    checks.check_positive("sigma", sigma)
    return x64_boundary(_check_in_lower_jit)(n, p, sigma, orders=otuple, num_terms=nt)
  return _check_in_lower_impl(arr, n, p, sigma, nt)


# --------------------------------------------------------------------------
# Thm 5: subsampled shuffle Gaussian (optimistic estimate)
# --------------------------------------------------------------------------

def _ssg_impl(lam_np, n, m, sigma):
  require_x64("subsampled_shuffle_gaussian_rdp_estimate")
  n, m, sigma = jnp.broadcast_arrays(*(jnp.asarray(x, jnp.float64) for x in (n, m, sigma)))
  lam = jnp.asarray(lam_np, jnp.float64)
  L = int(np.max(lam_np))
  s = jnp.where(sigma > 0, sigma, 1.0)
  mm = jnp.where(m >= 1, jnp.round(m), 1.0)
  logm = _log_moments(s, mm, L)                                # S + (L+1,)
  j = jnp.arange(2, L + 1, dtype=jnp.float64)
  eps_j = jnp.maximum(logm[..., 2:], 0.0) / (j - 1.0)
  lq = jnp.log(mm / n)
  out = _finish(_wbk_log_excess(lam, lq, eps_j, jnp.full(n.shape, jnp.inf)), lam)
  bad = ~((n >= 1) & (m >= 1) & (m <= n) & (sigma > 0))
  return jnp.where(bad[..., None], jnp.nan, out)


@functools.partial(jax.jit, static_argnames=("orders",))
def _ssg_jit(n, m, sigma, *, orders):
  return _ssg_impl(np.asarray(orders, np.float64), n, m, sigma)


def subsampled_shuffle_gaussian_rdp_estimate(orders=DEFAULT_CHECK_IN_ORDERS, *, n, m, sigma):
  r"""Thm 5 RDP of sample-m-of-n-then-shuffle Gaussian: an optimistic ESTIMATE.

  Liew et al., arXiv:2206.03151v2, Thm 5: WBK Thm 9 at rate m/n with the
  Eq. 8 curve of m shuffled reports as base curve. Because Eq. 8 is a lower
  bound on the shuffle-Gaussian RDP, this is neither an upper nor a lower
  bound (the paper uses it "to estimate optimistically", Sec. 5). Matches the
  authors' ``shuffgauss.SubShuffGaussRDPtoDP``.

  Args:
    orders: concrete integer orders >= 2. n >= 1; m in [1, n]; sigma > 0.
  Returns:
    float64, shape ``broadcast(n, m, sigma).shape + (len(orders),)``.

  Bound: estimate (not certified).
  """
  arr, otuple = _orders_info(orders)
  if checks.is_concrete((n, m, sigma)):
    checks.check_range("n", n, 1.0)
    checks.check_range("m", m, 1.0)
    if np.any(np.asarray(m) > np.asarray(n)):
      raise ValueError(f"m must be in [1, n]; got m={m}, n={n}.")
    checks.check_positive("sigma", sigma)
    return x64_boundary(_ssg_jit)(n, m, sigma, orders=otuple)
  return _ssg_impl(arr, n, m, sigma)


# --------------------------------------------------------------------------
# Thm 1 (first cut) and FMT shuffle DP (Eqs. 10-11)
# --------------------------------------------------------------------------

def _fmt_shuffle_dp(k, eps0, delta0, delta1):
  """FMT 'Hiding among the clones' Thm 3.8 as printed in Liew et al. Eqs. 10-11.

  Falls back to (eps0, delta0) (no amplification) when the FMT condition
  eps0 <= log(k / (16 log(2/delta1))) fails (the paper does not say; digest 3.3).
  TODO: switch to jaxacct.shuffle.clones' closed form when it exposes one.
  """
  kk = jnp.maximum(k, 1.0)
  e0 = jnp.exp(eps0)
  cond = eps0 <= jnp.log(kk / (16.0 * jnp.log(2.0 / delta1)))
  a = 8.0 * jnp.sqrt(e0 * jnp.log(4.0 / delta1) / kk)
  c = 8.0 * e0 / kk
  eps = jnp.log1p(jnp.tanh(eps0 / 2.0) * (a + c))
  dlt = delta1 + (e0 + 1.0) * (1.0 + jnp.exp(-eps0) / 2.0) * kk * delta0
  eps = jnp.where(cond, eps, eps0)
  dlt = jnp.where(cond, dlt, delta0)
  eps = jnp.where(k < 1, 0.0, eps)
  dlt = jnp.where(k < 1, 0.0, dlt)
  return eps, dlt


def _first_cut_impl(n, p, eps0, delta0, delta, l, variant):
  from jax.scipy.special import betainc
  n, p, eps0, delta0, delta, l = jnp.broadcast_arrays(
      *(jnp.asarray(x, jnp.float64) for x in (n, p, eps0, delta0, delta, l)))
  e0 = jnp.exp(eps0)
  cond = eps0 <= jnp.log(l / (16.0 * jnp.log(2.0 / delta)))
  pref = jnp.where(variant == "printed", -jnp.expm1(-eps0), jnp.tanh(eps0 / 2.0))
  inner = (8.0 * jnp.sqrt(l * e0 * jnp.log(4.0 / delta)) / n + 8.0 * e0 / n)
  eps = jnp.log1p(pref * inner)
  fac = (jnp.exp(eps) if variant == "printed" else e0) + 1.0
  delta_l = l / n * (delta + fac * (1.0 + jnp.exp(-eps0) / 2.0) * l * delta0)
  # Fallback when FMT's condition fails: subsampling of the local randomizer.
  eps_fb = jnp.log1p(l / n * jnp.expm1(eps0))
  eps = jnp.where(cond, eps, eps_fb)
  delta_l = jnp.where(cond, delta_l, l / n * delta0)
  beta = jnp.where(l <= 0, 1.0, betainc(jnp.maximum(l, 1e-300),
                                        jnp.maximum(n - l + 1.0, 1e-300), p))
  return eps, beta + delta_l


def check_in_first_cut_dp(*, n, p, eps0, delta0, delta, l, variant: str = "derived"):
  r"""Thm 1 (first-cut) per-round (eps, delta) of shuffled check-in (upper).

  Liew et al., arXiv:2206.03151v2, Thm 1 / Eq. 4: condition on fewer than l
  check-ins (failure :math:`\beta=\Pr[\mathrm{Bin}(n,p)\ge l]`), apply FMT
  (Eqs. 10-11, n -> l) and subsampling l of n (Eq. 12):

  .. math:: \epsilon=\log\Big(1+c\Big(\frac{8\sqrt{l e^{\epsilon_0}\log(4/\delta)}}n
            +\frac{8e^{\epsilon_0}}n\Big)\Big),\quad \delta_{\rm tot}=\beta+\frac ln
            \big(\delta+(e^{x}+1)(1+e^{-\epsilon_0}/2)l\delta_0\big).

  ``variant="derived"`` (default): :math:`c=\frac{e^{\epsilon_0}-1}{e^{\epsilon_0}+1}`,
  :math:`x=\epsilon_0` (what Eqs. 12-14 give). ``variant="printed"``:
  :math:`c=\frac{e^{\epsilon_0}-1}{e^{\epsilon_0}}`, :math:`x=\epsilon` (Eq. 4 as
  printed; its delta factor is *smaller*, so it is not certified). When
  :math:`\epsilon_0>\log\frac{l}{16\log(2/\delta)}` FMT does not apply and we
  fall back to :math:`(\log(1+\frac ln(e^{\epsilon_0}-1)), \frac ln\delta_0)`.

  Args:
    n >= 1, p in [0,1], eps0 >= 0, delta0 in [0,1], delta in (0,1) (FMT's
    delta), l in [1, n] (all broadcast; jittable except ``variant``).

  Returns:
    ``(eps, delta_total)`` float64 arrays.

  Bound: upper for ``"derived"`` (given FMT Thm 3.8); ``"printed"`` is a
  reproduction.
  """
  checks.check_choice("variant", variant, ("derived", "printed"))
  if checks.is_concrete((n, p, eps0, delta0, delta, l)):
    checks.check_range("n", n, 1.0)
    checks.check_probability("p", p)
    checks.check_range("eps0", eps0, 0.0)
    checks.check_probability("delta0", delta0)
    checks.check_delta(delta)
    checks.check_range("l", l, 1.0)
    return x64_boundary(_first_cut_impl)(n, p, eps0, delta0, delta, l, variant)
  return _first_cut_impl(n, p, eps0, delta0, delta, l, variant)


# --------------------------------------------------------------------------
# eager front doors (certified)
# --------------------------------------------------------------------------

def _check_front(rounds, delta, conversion):
  """Front-door checks, before any RDP is computed."""
  checks.check_int("rounds", rounds, min_value=1)
  checks.check_delta(delta)
  checks.check_choice("conversion", conversion, checks.CONVERSIONS)


def _compose_convert(orders, rdp, rounds, delta, conversion, name, bound):
  _check_front(rounds, delta, conversion)
  r = jnp.asarray(rounds, jnp.float64)[..., None]
  eps, order = _rdp_to_epsilon(jnp.asarray(orders, jnp.float64), rdp * r,
                               jnp.asarray(delta, jnp.float64), conversion)
  top = float(np.max(orders))
  if np.any(np.asarray(order) == top):
    warnings.warn(f"{name}: the optimal Renyi order is the largest one given "
                  f"({top:g}); a larger order grid may give a smaller epsilon.",
                  stacklevel=3)
  return EpsilonResult(epsilon=eps, delta=delta, method=name, bound=bound, order=order)


@x64_boundary
def check_in_epsilon(*, n, p, eps0, delta, rounds=1, orders=None,
                     conversion: str = "tight") -> EpsilonResult:
  """Epsilon at ``delta`` after ``rounds`` rounds of shuffled check-in, eps0-LDP (upper).

  RDP of :func:`check_in_ldp_rdp` times ``rounds`` (Lemma 2), converted with
  ``jaxacct._core.conversion`` (``"tight"`` = the paper's Eq. 9).

  Returns: ``EpsilonResult(method="check_in_ldp_rdp", bound="upper", order=...)``.
  """
  _check_front(rounds, delta, conversion)
  orders = DEFAULT_CHECK_IN_ORDERS if orders is None else orders
  rdp = check_in_ldp_rdp(orders, n=n, p=p, eps0=eps0)
  return _compose_convert(orders, rdp, rounds, delta, conversion, "check_in_ldp_rdp", "upper")


@x64_boundary
def check_in_gaussian_epsilon(*, n, p, sigma, delta, rounds=1, orders=None,
                              bound: str = "upper", conversion: str = "tight",
                              num_terms=None) -> EpsilonResult:
  """Epsilon at ``delta`` of shuffled check-in with Gaussian reports.

  ``bound="upper"``: :func:`check_in_gaussian_rdp` (certified).
  ``bound="lower"``: conversion of :func:`check_in_gaussian_rdp_lower`; an
  RDP lower bound converted by an upper-bounding conversion is NOT a lower
  bound on the true epsilon -- it is the best any RDP accountant can report
  (no RDP accountant can certify a smaller epsilon with this conversion).
  """
  checks.check_choice("bound", bound, ("upper", "lower"))
  _check_front(rounds, delta, conversion)
  if num_terms is not None:
    checks.check_int("num_terms", num_terms, min_value=1, max_value=2**20)
  orders = DEFAULT_CHECK_IN_ORDERS if orders is None else orders
  if bound == "upper":
    rdp = check_in_gaussian_rdp(orders, n=n, p=p, sigma=sigma)
    return _compose_convert(orders, rdp, rounds, delta, conversion,
                            "check_in_gaussian_rdp", "upper")
  rdp = check_in_gaussian_rdp_lower(orders, n=n, p=p, sigma=sigma, num_terms=num_terms)
  return _compose_convert(orders, rdp, rounds, delta, conversion,
                          "check_in_gaussian_rdp_lower", "estimate")


@x64_boundary
def check_in_secagg_gaussian_epsilon(*, n, p, sigma, delta, rounds=1, orders=None,
                                     conversion: str = "tight",
                                     num_terms=None) -> EpsilonResult:
  """Epsilon at ``delta`` of distributed check-in with secure aggregation (Thm 4, upper)."""
  _check_front(rounds, delta, conversion)
  orders = DEFAULT_CHECK_IN_ORDERS if orders is None else orders
  rdp = check_in_secagg_gaussian_rdp(orders, n=n, p=p, sigma=sigma, num_terms=num_terms)
  return _compose_convert(orders, rdp, rounds, delta, conversion,
                          "check_in_secagg_gaussian_rdp", "upper")


@x64_boundary
def shuffle_gaussian_epsilon_lower(*, n, sigma, delta, rounds=1, orders=None,
                                   conversion: str = "tight") -> EpsilonResult:
  """Conversion of the Eq. 8 lower RDP curve (``bound="estimate"``: a converted lower RDP curve is no bound on epsilon, see
  :func:`check_in_gaussian_epsilon`); reproduces ``shuffgauss.ShuffGaussRDPtoDP``."""
  _check_front(rounds, delta, conversion)
  orders = DEFAULT_CHECK_IN_ORDERS if orders is None else orders
  rdp = shuffle_gaussian_rdp_lower(orders, n=n, sigma=sigma)
  return _compose_convert(orders, rdp, rounds, delta, conversion,
                          "shuffle_gaussian_rdp_lower", "estimate")


@x64_boundary
def check_in_first_cut_epsilon(*, n, p, eps0, delta0, delta, rounds=1) -> EpsilonResult:
  r"""Thm 1 baseline composed soundly over ``rounds`` rounds (upper).

  Per round: :func:`check_in_first_cut_dp` (``variant="derived"``) with
  :math:`\delta_r=\delta/(2T)` split as FMT delta :math:`\delta_r/2` and
  :math:`\beta\le\delta_r/4` (l = the smallest such); composed with the
  better of basic composition and Dwork-Rothblum-Vadhan advanced composition
  at :math:`\delta'=\delta/2` (instead of the paper's unsound Lemma 1 route).
  Scalars only. Returns ``EpsilonResult(bound="upper")``; epsilon is ``inf``
  when the delta0 term alone exceeds the per-round budget.
  """
  from scipy import stats
  for name, v in (("n", n), ("p", p), ("eps0", eps0), ("delta0", delta0)):
    if np.ndim(v):
      raise ValueError(f"{name} must be a scalar here; got shape {np.shape(v)}.")
  checks.check_range("n", n, 1.0)
  checks.check_probability("p", p)
  checks.check_range("eps0", eps0, 0.0)
  checks.check_probability("delta0", delta0)
  checks.check_delta(delta)
  checks.check_int("rounds", rounds, min_value=1)
  T = int(rounds)
  d_r = delta / (2.0 * T)
  l = max(1.0, float(stats.binom.isf(d_r / 4.0, int(n), p)) + 1.0)
  l = min(l, float(n))
  eps, d_tot = check_in_first_cut_dp(n=n, p=p, eps0=eps0, delta0=delta0,
                                     delta=d_r / 2.0, l=l)
  eps, d_tot = float(eps), float(d_tot)
  if d_tot > d_r:
    return EpsilonResult(epsilon=math.inf, delta=delta, method="first_cut",
                         bound="upper", details={"l": l, "delta_round": d_tot})
  adv = math.sqrt(2 * T * math.log(2.0 / delta)) * eps + T * eps * math.expm1(eps)
  return EpsilonResult(epsilon=min(T * eps, adv), delta=delta, method="first_cut",
                       bound="upper", details={"l": l, "eps_round": eps,
                                               "delta_round": d_tot})


# --------------------------------------------------------------------------
# paper reproduction (unsound Lemma 1)
# --------------------------------------------------------------------------

def _eq9(orders, rdp, delta):
  """Liew et al. Eq. 9 (CKS20 conversion) minimised over the grid, without the
  KL/TV shortcut of jaxacct's "tight" conversion (so tiny RDP curves give the
  paper's conversion overhead, not 0). Returns (eps, order)."""
  a = jnp.asarray(orders, jnp.float64)
  e = rdp + (jnp.log(1.0 / delta) + (a - 1.0) * jnp.log1p(-1.0 / a) - jnp.log(a)) / (a - 1.0)
  i = jnp.argmin(e, axis=-1)
  return jnp.take_along_axis(e, i[..., None], axis=-1)[..., 0], a[i]


_G_GRID = 256
_G_ITERS = 60


def _lemma1_impl(lam, eps, delta):
  """Printed Lemma 1 (Eq. 2): eps + log(min_r ...)/(lam - 1); broadcast."""
  lam, eps, delta = jnp.broadcast_arrays(*(jnp.asarray(x, jnp.float64) for x in (lam, eps, delta)))
  ee = jnp.exp(eps)
  u_hi = jnp.log1p(-delta) - 1e-12
  u_lo = jnp.minimum(jnp.log(jnp.maximum(delta, 1e-300)) - 30.0, u_hi - 1.0)
  u_lo = jnp.maximum(u_lo, -700.0)

  def g(u):
    r = delta + jnp.exp(u)
    a = lam * jnp.log(r) + (1.0 - lam) * u
    b = xlog1py(lam, -jnp.minimum(r, 1.0)) + (1.0 - lam) * jnp.log(jnp.maximum(ee - r + delta, 1e-300))
    return jnp.logaddexp(a, b)

  t = jnp.linspace(0.0, 1.0, _G_GRID)
  grid = u_lo[..., None] + (u_hi - u_lo)[..., None] * t
  r = delta[..., None] + jnp.exp(grid)
  a = lam[..., None] * jnp.log(r) + (1.0 - lam[..., None]) * grid
  b = (xlog1py(lam[..., None], -jnp.minimum(r, 1.0))
       + (1.0 - lam[..., None]) * jnp.log(jnp.maximum(ee[..., None] - r + delta[..., None], 1e-300)))
  vals = jnp.logaddexp(a, b)
  i = jnp.argmin(vals, axis=-1)
  step = (u_hi - u_lo) / (_G_GRID - 1)
  lo = u_lo + jnp.maximum(i - 1, 0) * step
  hi = u_lo + jnp.minimum(i + 1, _G_GRID - 1) * step
  phi = (math.sqrt(5.0) - 1.0) / 2.0

  def body(_, ab):
    lo, hi = ab
    x1 = hi - phi * (hi - lo)
    x2 = lo + phi * (hi - lo)
    left = g(x1) < g(x2)
    return jnp.where(left, lo, x1), jnp.where(left, x2, hi)

  lo, hi = lax.fori_loop(0, _G_ITERS, body, (lo, hi))
  best = jnp.minimum(jnp.min(vals, axis=-1), g(0.5 * (lo + hi)))
  return jnp.maximum(eps + best / (lam - 1.0), 0.0)


_lemma1_jit = jax.jit(_lemma1_impl)


def paper_lemma1_rdp(orders, *, eps, delta):
  r"""Liew et al.'s Lemma 1 (Eq. 2) DP->RDP map AS PRINTED -- UNSOUND, reproduction only.

  arXiv:2206.03151v2, Lemma 1 (attributed to Asoodeh et al. 2021):
  :math:`\epsilon(\lambda)=\epsilon+\frac1{\lambda-1}\log\min_{r\in(\delta,1)}
  \big(r^\lambda(r-\delta)^{1-\lambda}+(1-r)^\lambda(e^\epsilon-r+\delta)^{1-\lambda}\big)`.
  The minimum over r returns the *least* divergence compatible with the
  (eps, delta) boundary, so this is not an upper bound (at delta = 0 it is
  ~0 for every eps; no finite DP->RDP bound exists for delta > 0). Digest Sec. 1.3.

  Returns: float64, shape ``broadcast(eps, delta).shape + (len(orders),)``.
  Bound: none (unsound).
  """
  arr, _ = _orders_info(orders)
  checks.check_range("eps", eps, 0.0)
  checks.check_range("delta", delta, 0.0, 1.0, hi_open=True)
  with jax.enable_x64(True):
    e = jnp.asarray(eps, jnp.float64)[..., None]
    d = jnp.asarray(delta, jnp.float64)[..., None]
    return _lemma1_jit(jnp.asarray(arr), e, d)


@functools.partial(jax.jit, static_argnames=("orders", "approach", "num_terms"))
def _approach_jit(n, p, eps0, delta0, delta1, *, orders, approach, num_terms):
  lam = jnp.asarray(orders)
  L = int(max(orders))
  j = jnp.arange(2, L + 1, dtype=jnp.float64)

  def per_k(ks):
    eS, dS = _fmt_shuffle_dp(ks, eps0, delta0, delta1)           # (K,)
    r = ks / n
    if approach == 1:
      eps_j = _lemma1_impl(j[None, :], eS[:, None], dS[:, None])  # (K, J)
      return _wbk_log_excess(lam, jnp.log(r), eps_j, log_expm1(eS))
    ek = jnp.log1p(r * jnp.expm1(eS))
    dk = r * dS
    e_l = _lemma1_impl(lam[None, :], ek[:, None], dk[:, None])    # (K, L)
    return log_expm1((lam - 1.0) * e_l)

  n_ = jnp.asarray(n, jnp.float64)
  p_ = jnp.asarray(p, jnp.float64)
  return _finish(_mixture_log_excess(n_, p_, num_terms, per_k, None), lam)


def paper_approach_rdp(orders=np.arange(2, 65, dtype=np.float64), *, approach: int,
                       n, p, eps0, delta0, delta1, num_terms=None):
  r"""Approach 1 or 2 of Liew et al.'s Table 1, AS PRINTED -- UNSOUND, reproduction only.

  arXiv:2206.03151v2, Sec. 3.3 / Table 1, with the Eq. 5 mixture over the
  binomial bulk (c = 13 sd; the far tail is dropped as in a finite sum):

  * Approach 1: per k, FMT shuffle DP of k reports (Eqs. 10-11, falling back
    to (eps0, delta0) when FMT's condition fails) -> printed Lemma 1 at each
    j -> WBK Thm 9 at rate k/n with eps(inf) = eps^S_k.
  * Approach 2: per k, FMT -> Balle et al. subsampling at rate k/n (Eq. 12)
    -> printed Lemma 1 at lambda.

  Both go through the printed Lemma 1 (see :func:`paper_lemma1_rdp`), so the
  result is not a privacy guarantee. Scalars only.

  Returns: float64 ``(len(orders),)``. Bound: none (unsound).
  """
  arr, otuple = _orders_info(orders)
  checks.check_choice("approach", approach, (1, 2))
  checks.check_range("n", n, 1.0)
  checks.check_probability("p", p)
  checks.check_range("eps0", eps0, 0.0)
  checks.check_probability("delta0", delta0)
  checks.check_delta(delta1, "delta1")
  nt = _num_terms(num_terms, n, p)
  with jax.enable_x64(True):
    return _approach_jit(float(n), float(p), float(eps0), float(delta0), float(delta1),
                         orders=otuple, approach=int(approach), num_terms=nt)


def paper_table2_epsilon(*, method: str, n, p, eps0, delta0, delta, rounds=100,
                         orders=np.arange(2, 65, dtype=np.float64),
                         num_terms=None) -> EpsilonResult:
  r"""Liew et al. Table 2 pipeline (reproduction; UNSOUND printed Lemma 1 inside).

  arXiv:2206.03151v2, Table 2 / Sec. 3.3: per-round RDP from ``method`` in
  ``("baseline", "approach1", "approach2")``, times ``rounds`` (Lemma 2),
  then Eq. 9 (the tight conversion without its KL shortcut) at ``delta``; FMT's delta1 = delta.
  Baseline = Thm 1 (printed Eq. 4) -> Lemma 1, with l minimising the final
  epsilon subject to delta_tot <= delta (Remark 1; the paper's rule is not
  stated). Scalars only.

  Returns: ``EpsilonResult(bound="estimate")`` (the paper as printed; not a valid bound).
  """
  checks.check_choice("method", method, ("baseline", "approach1", "approach2"))
  checks.check_int("rounds", rounds, min_value=1)
  arr, _ = _orders_info(orders)
  with jax.enable_x64(True):
    if method == "baseline":
      mean = n * p
      ls = np.unique(np.round(np.linspace(max(1.0, mean), n, 400)))
      eps_l, dtot = check_in_first_cut_dp(n=n, p=p, eps0=eps0, delta0=delta0,
                                          delta=delta, l=ls, variant="printed")
      eps_l = np.asarray(eps_l)
      dtot = np.asarray(dtot)
      ok = dtot <= delta
      if not np.any(ok):
        return EpsilonResult(epsilon=math.inf, delta=delta, method="paper_baseline",
                             bound=UNSOUND)
      rdp = np.asarray(paper_lemma1_rdp(arr, eps=eps_l[ok], delta=dtot[ok]))
      eps, order = _eq9(arr, jnp.asarray(rdp * rounds), delta)
      i = int(np.argmin(np.asarray(eps)))
      return EpsilonResult(epsilon=float(eps[i]), delta=delta, method="paper_baseline",
                           bound=UNSOUND, order=float(order[i]),
                           details={"l": float(ls[ok][i])})
    rdp = paper_approach_rdp(arr, approach=1 if method == "approach1" else 2, n=n, p=p,
                             eps0=eps0, delta0=delta0, delta1=delta, num_terms=num_terms)
    eps, order = _eq9(arr, rdp * rounds, delta)
    return EpsilonResult(epsilon=float(eps), delta=delta, method="paper_" + method,
                         bound=UNSOUND, order=float(order))
