r"""Shuffled check-in: clients check in independently with probability p, then shuffle.

Source: Liew, Hasegawa & Takahashi, "Privacy Amplification via Shuffled
Check-Ins", arXiv:2206.03151v2.
The paper calls the check-in probability :math:`\gamma`; here it is ``p``.
Adjacency is *replacement* throughout (one of the n records is replaced), so a
Gaussian report of clipping norm C has sensitivity 2C: pass
``sigma = noise_std / (2 C)``.

Proofs and sources: docs/bounds/check_in.md ("Bounds and proofs /
Shuffled check-in").
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import betainc

from jaxacct._core import checks
from jaxacct._core.dtype import dispatch, host_door
from jaxacct.shuffle._host import ON_HOST
from jaxacct._core.logmath import log_binom_pmf, log_expm1, logsumexp
from jaxacct._core.results import EpsilonResult
from jaxacct._core.units import user_stacklevel
from jaxacct.shuffle import _pair_reference as pair_reference, _windows as windows
from jaxacct.shuffle._check_in_lower import check_in_gaussian_rdp_lower, check_num_terms
from jaxacct._core.mixture import (DEFAULT_CHECK_IN_ORDERS,
                                              check_rate_inputs, finish_rdp,
                                              integer_orders, lanes_f64,
                                              log_rate_moments,
                                              log_tail_mass,
                                              mixture_log_excess,
                                              mixture_window,
                                              nan_where_invalid,
                                              order_envelope, orders_jit,
                                              resolve_num_terms, rr_rdp_times,
                                              wbk_log_excess,
                                              wbk_log_excess_moments)
from jaxacct.shuffle._rdp_rounds import compose_rdp_epsilon
from jaxacct._core.compiled import jit


# --------------------------------------------------------------------------
# certified check-in RDP: eps0-LDP and Gaussian local randomizers
# --------------------------------------------------------------------------

def _check_in_ldp_impl(lam_np, n, p, eps0):
  n, p, eps0, lam, jmax = lanes_f64("check_in_ldp_rdp", lam_np, n, p, eps0)
  j = jnp.arange(2, jmax + 1, dtype=jnp.float64)
  eps_j = rr_rdp_times(j, eps0[..., None]) / (j - 1.0)          # S + (J,)
  li = log_expm1(eps0)
  nn = jnp.where(n >= 1, n, 1.0)
  log_qj = log_rate_moments(nn, jnp.clip(p, 0.0, 1.0), jmax)
  out = finish_rdp(wbk_log_excess_moments(lam, log_qj, eps_j, li), lam)
  # Every per-k moment is also <= the local randomizer's (post-processing).
  out = order_envelope(jnp.minimum(out, rr_rdp_times(lam, eps0[..., None]) / (lam - 1.0)), lam_np)
  bad = ~((n >= 1) & (p >= 0) & (p <= 1) & (eps0 >= 0) & jnp.isfinite(eps0))
  return jnp.where(bad[..., None], jnp.nan, out)


_check_in_ldp_jit = orders_jit(_check_in_ldp_impl)


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
  arr, otuple = integer_orders(orders)
  del arr
  return dispatch(functools.partial(_check_in_ldp_jit, orders=otuple), (n, p, eps0),
                  lambda: (checks.check_range("n", n, 1.0), checks.check_probability("p", p),
                           checks.check_range("eps0", eps0, 0.0)))


def check_in_ldp_rdp_clones(orders=DEFAULT_CHECK_IN_ORDERS, *, n, p, eps0, num_terms=None):
  r"""Replacement RDP of shuffled check-in of eps0-LDP reports, with shuffle gain (upper).

  The certified analogue of Liew et al.'s Approach 1 (arXiv:2206.03151v2,
  Sec. 3.3, Table 1): Eq. 5 over k, WBK Thm 9 (arXiv:1808.00087v2) at rate
  k/n, but with the base curve :math:`\varepsilon^S_k(j)` = Renyi divergence
  of the Feldman-McMillan-Talwar clone pair for k reports (arXiv:2012.12803,
  Sec. 6.1; ``jaxacct.shuffle.clone_rdp``, via the shared pair kernel)
  instead of FMT's (eps, delta) pushed through the unsound Lemma 1.
  :math:`\varepsilon(\infty)=\epsilon_0`. The per-k curve is also min'ed with
  randomized response, k outside a window of ``num_terms`` values around np
  are bounded by the Chernoff tail times the randomized-response cap, and the
  result is min'ed with :func:`check_in_ldp_rdp` (all valid upper bounds).

  Eager only (static pair windows from concrete n, p, eps0); scalars.
  Cost ~ num_terms x J x (pair window): EXPENSIVE -- minutes on a CPU
  for n = 1e4, p = 1e-2, eps0 = 2, orders 2..64 (window 512), where it
  gives eps = 0.34 after 100 rounds at delta = 1e-4 vs 1.44 without the
  shuffle; keep orders short and ``num_terms`` small (any value is sound).

  Returns: float64 ``(len(orders),)``. Bound: upper.
  """
  arr, otuple = integer_orders(orders)
  checks.check_scalar("jaxacct.shuffle.check_in_ldp_rdp_clones", n=n, p=p, eps0=eps0)
  checks.check_range("n", n, 1.0)
  checks.check_probability("p", p)
  checks.check_range("eps0", eps0, 0.0, lo_open=True)
  nt = resolve_num_terms(num_terms, n, p, width=6.0, cap=1024)
  J = int(arr.max())
  jgrid = np.arange(2, J + 1, dtype=np.float64)
  with jax.enable_x64(True):
    k_lo, ks = mixture_window(jnp.asarray(float(n)), jnp.asarray(float(p)), nt)
    ks_np = np.minimum(np.asarray(ks), float(n))
    pe = math.exp(eps0)
    beta = (pe - 1.0) / (pe + 1.0)
    q = 2.0 * pe * pe / (pe + 1.0)
    wc, wa = windows.rdp_widths(float(ks_np.max()), math.exp(-eps0), 0.5, J, eps0)
    base = _clones_curves(jnp.asarray(np.maximum(ks_np, 1.0)), pe, beta, q,
                          orders=tuple(jgrid.tolist()), wc=wc, wa=wa)
    out = _clones_mixture(jnp.asarray(float(n)), jnp.asarray(float(p)), jnp.asarray(float(eps0)),
                          base, orders=otuple, num_terms=nt)
    rr_only = check_in_ldp_rdp(arr, n=float(n), p=float(p), eps0=float(eps0))
    return jnp.minimum(out, rr_only)


@functools.partial(jit, static_argnames=("orders", "wc", "wa"))
def _clones_curves(ks, pe, beta, q, *, orders, wc, wa):
  jg = np.asarray(orders, np.float64)
  return lax.map(lambda kk: pair_reference.pair_rdp(
      jg, n=kk, p=pe, beta=beta, q0=q, q1=q, wc=wc, wa=wa, symmetric=True), ks)


@functools.partial(jit, static_argnames=("orders", "num_terms"))
def _clones_mixture(n, p, eps0, base, *, orders, num_terms):
  lam_np = np.asarray(orders, np.float64)
  lam = jnp.asarray(lam_np)
  J = base.shape[-1] + 1
  j = jnp.arange(2, J + 1, dtype=jnp.float64)
  rr = rr_rdp_times(j, eps0) / (j - 1.0)
  base = jnp.minimum(base, rr)                                  # (K, J-1)
  li = log_expm1(eps0)

  def per_k(ks):
    lq = jnp.log(ks / n)
    return wbk_log_excess(lam, lq, base, jnp.broadcast_to(li, ks.shape))

  log_cap = log_expm1(rr_rdp_times(lam, eps0))
  k_lo, ks = mixture_window(n, p, num_terms)
  valid = ks <= n
  ks_safe = jnp.minimum(ks, n)
  logw = log_binom_pmf(ks_safe, n, p)
  terms = jnp.where(valid[:, None], logw[:, None] + per_k(ks_safe), -jnp.inf)
  total = logsumexp(terms, axis=0)
  tail = log_tail_mass(n, p, k_lo, num_terms)
  total = jnp.logaddexp(total, tail + log_cap)
  out = jnp.minimum(finish_rdp(total, lam), rr_rdp_times(lam, eps0) / (lam - 1.0))
  return order_envelope(out, lam_np)


def _check_in_gauss_impl(lam_np, n, p, sigma):
  n, p, sigma, lam, jmax = lanes_f64("check_in_gaussian_rdp", lam_np, n, p, sigma)
  j = jnp.arange(2, jmax + 1, dtype=jnp.float64)
  s = jnp.where(sigma > 0, sigma, 1.0)
  eps_j = j / (2.0 * s[..., None] ** 2)
  nn = jnp.where(n >= 1, n, 1.0)
  log_qj = log_rate_moments(nn, jnp.clip(p, 0.0, 1.0), jmax)
  out = finish_rdp(wbk_log_excess_moments(lam, log_qj, eps_j, jnp.full(n.shape, jnp.inf)), lam)
  out = jnp.minimum(out, lam / (2.0 * s[..., None] ** 2))   # local Gaussian (post-processing)
  out = order_envelope(out, lam_np)
  return nan_where_invalid(out, n, p, sigma)


_check_in_gauss_jit = orders_jit(_check_in_gauss_impl)


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
  arr, otuple = integer_orders(orders)
  del arr
  return dispatch(functools.partial(_check_in_gauss_jit, orders=otuple), (n, p, sigma),
                  lambda: check_rate_inputs(n, p, "sigma", sigma))


# --------------------------------------------------------------------------
# Thm 4: distributed check-in with secure aggregation
# --------------------------------------------------------------------------

def _secagg_impl(lam_np, n, p, sigma, num_terms):
  n, p, sigma, lam, jmax = lanes_f64("check_in_secagg_gaussian_rdp", lam_np, n, p,
                                     sigma)
  j = jnp.arange(2, jmax + 1, dtype=jnp.float64)
  s = jnp.where(sigma > 0, sigma, 1.0)

  def per_k(ks):
    kk = jnp.maximum(ks, 1.0)
    eps_j = 2.0 * j / (kk[..., None] * s[..., None, None] ** 2)
    lq = jnp.log(ks / n[..., None])
    return wbk_log_excess(lam, lq, eps_j, jnp.full(ks.shape, jnp.inf))

  log_cap = log_expm1((lam - 1.0) * 2.0 * lam / s[..., None] ** 2)
  out = finish_rdp(mixture_log_excess(n, p, num_terms, per_k, log_cap), lam)
  out = jnp.minimum(out, 2.0 * lam / s[..., None] ** 2)     # k = 1 Gaussian, no sampling
  out = order_envelope(out, lam_np)
  return nan_where_invalid(out, n, p, sigma)


_secagg_jit = orders_jit(_secagg_impl, "num_terms")


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
  printed theorem omits. WBK's bound is not monotone in
  the order at rates near 1; we return its monotone envelope (min over
  larger orders in the grid), valid since RDP is non-decreasing in the order.

  Args / Returns: as :func:`check_in_gaussian_rdp`.

  Bound: upper.
  """
  arr, otuple = integer_orders(orders)
  check_num_terms(num_terms)
  nt = resolve_num_terms(num_terms, n, p)
  del arr
  return dispatch(functools.partial(_secagg_jit, orders=otuple, num_terms=nt), (n, p, sigma),
                  lambda: check_rate_inputs(n, p, "sigma", sigma))


# --------------------------------------------------------------------------
# Thm 1 (first cut)
# --------------------------------------------------------------------------

def _first_cut_impl(n, p, eps0, delta0, delta, l, variant):
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
  def validate():
    checks.check_range("n", n, 1.0)
    checks.check_probability("p", p)
    checks.check_range("eps0", eps0, 0.0)
    checks.check_probability("delta0", delta0)
    checks.check_delta(delta)
    checks.check_range("l", l, 1.0)

  return dispatch(functools.partial(_first_cut_impl, variant=variant),
                  (n, p, eps0, delta0, delta, l), validate)


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
  eps, order = compose_rdp_epsilon(orders, rdp, rounds, delta, conversion)
  top = float(np.max(orders))
  if np.any(np.asarray(order) == top):
    warnings.warn(f"{name}: the optimal Renyi order is the largest one given "
                  f"({top:g}); a larger order grid may give a smaller epsilon.",
                  stacklevel=user_stacklevel())
  return EpsilonResult(epsilon=eps, delta=delta, method=name, bound=bound, order=order)


@host_door(ON_HOST)
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


@host_door(ON_HOST)
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
  check_num_terms(num_terms)
  orders = DEFAULT_CHECK_IN_ORDERS if orders is None else orders
  if bound == "upper":
    rdp = check_in_gaussian_rdp(orders, n=n, p=p, sigma=sigma)
    return _compose_convert(orders, rdp, rounds, delta, conversion,
                            "check_in_gaussian_rdp", "upper")
  rdp = check_in_gaussian_rdp_lower(orders, n=n, p=p, sigma=sigma, num_terms=num_terms)
  return _compose_convert(orders, rdp, rounds, delta, conversion,
                          "check_in_gaussian_rdp_lower", "estimate")


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
  checks.check_scalar("jaxacct.shuffle.check_in_first_cut_epsilon", n=n, p=p, eps0=eps0,
                      delta0=delta0)
  checks.check_range("n", n, 1.0, float(checks.MAX_INT))   # scipy counts in int64
  checks.check_probability("p", p)
  checks.check_range("eps0", eps0, 0.0)
  checks.check_probability("delta0", delta0)
  checks.check_delta(delta)
  checks.check_int("rounds", rounds, min_value=1, scalar=True)
  from scipy import stats  # here, not at import: scipy.stats is slow to import
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
