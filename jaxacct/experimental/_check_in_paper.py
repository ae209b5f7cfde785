r"""Shuffled check-in as printed by Liew et al.: NOT valid privacy bounds.

Source: Liew, Hasegawa & Takahashi, "Privacy Amplification via Shuffled
Check-Ins", arXiv:2206.03151v2.
Moved out of the shuffle check-in module: nothing here is used by
a front door, and every result says ``bound="estimate"`` (:data:`UNSOUND`).
The certified bounds for the same mechanisms are
``jaxacct.shuffle.check_in_epsilon`` / ``check_in_gaussian_epsilon`` (upper)
and the curves of ``jaxacct.shuffle.bounds`` (``check_in_*_rdp``, upper;
``*_rdp_lower``, lower).

* :func:`paper_lemma1_rdp` -- Lemma 1 (Eq. 2), the DP->RDP "conversion" as
  printed. Counterexample (regression
  ``tests/shuffle/test_shuffle_check_in.py::test_printed_lemma1_is_unsound``): at
  eps = 1, delta = 0, order 2 it returns < 1e-10, although binary randomized
  response with eps = 1 -- which is (1, 0)-DP -- has RDP 0.7353 at order 2;
  at eps = 2, delta = 1e-8, order 4 it returns 1.3e-5 instead of ~1.96. No
  finite DP->RDP bound exists for delta > 0.
* :func:`paper_approach_rdp` -- Approaches 1 and 2 of Table 1 (FMT's shuffle
  DP, Eqs. 10-11, pushed through the printed Lemma 1).
* :func:`paper_table2_epsilon` -- the Table 2 pipeline (baseline = Thm 1 as
  printed, Approaches 1 and 2). The Approach-1 cell (0.17) reproduces; the
  certified ``jaxacct.shuffle.check_in_epsilon`` for the same setting is
  more than 5x larger (``test_table2_approach1_reproduced_and_sound_value_differs``).
* :func:`subsampled_shuffle_gaussian_rdp_estimate` -- Thm 5 (WBK Thm 9 at
  rate m/n over the Eq. 8 curve). Eq. 8 is a LOWER bound on the
  shuffle-Gaussian RDP (Thm 3), so an upper-bounding amplification theorem
  applied to it is neither an upper nor a lower bound; the paper uses it "to
  estimate optimistically" (Sec. 5). Matches the authors'
  ``shuffgauss.SubShuffGaussRDPtoDP`` (``test_shuffgauss_reference_outputs``).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import xlog1py

from jaxacct._core import checks
from jaxacct._core.dtype import dispatch
from jaxacct._core.logmath import log_expm1
from jaxacct._core.results import EpsilonResult
from jaxacct._core.compiled import jit
from jaxacct._core.mixture import (DEFAULT_CHECK_IN_ORDERS, finish_rdp, integer_orders,
                                   lanes_f64, mixture_log_excess, orders_jit,
                                   resolve_num_terms, shuffle_gaussian_log_moments,
                                   wbk_log_excess)
from jaxacct.shuffle.bounds import check_in_first_cut_dp

#: The ``bound`` of every result here: not a valid bound (the paper as printed).
UNSOUND = "estimate"


def fmt_shuffle_dp(k, eps0, delta0, delta1):
  """FMT 'Hiding among the clones' Thm 3.8 as printed in Liew et al. Eqs. 10-11.

  Falls back to (eps0, delta0) (no amplification) when the FMT condition
  eps0 <= log(k / (16 log(2/delta1))) fails (the paper does not say).
  (``jaxacct.shuffle.clone_epsilon_closed_form`` is the sound Thm 3.1 with the
  4/delta condition; this one keeps the paper's printed 2/delta.)
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


# --------------------------------------------------------------------------
# Thm 5: subsampled shuffle Gaussian (optimistic estimate)
# --------------------------------------------------------------------------

def _ssg_impl(lam_np, n, m, sigma):
  n, m, sigma, lam, L = lanes_f64("subsampled_shuffle_gaussian_rdp_estimate", lam_np,
                                  n, m, sigma)
  s = jnp.where(sigma > 0, sigma, 1.0)
  mm = jnp.where(m >= 1, jnp.round(m), 1.0)
  logm = shuffle_gaussian_log_moments(s, mm, L)                                # S + (L+1,)
  j = jnp.arange(2, L + 1, dtype=jnp.float64)
  eps_j = jnp.maximum(logm[..., 2:], 0.0) / (j - 1.0)
  lq = jnp.log(mm / n)
  out = finish_rdp(wbk_log_excess(lam, lq, eps_j, jnp.full(n.shape, jnp.inf)), lam)
  bad = ~((n >= 1) & (m >= 1) & (m <= n) & (sigma > 0))
  return jnp.where(bad[..., None], jnp.nan, out)


_ssg_jit = orders_jit(_ssg_impl)


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
  _, otuple = integer_orders(orders)

  def validate():
    checks.check_range("n", n, 1.0)
    checks.check_range("m", m, 1.0)
    if np.any(np.asarray(m) > np.asarray(n)):
      raise ValueError(f"m must be in [1, n]; got m={m}, n={n}.")
    checks.check_sigma("sigma", sigma)

  return dispatch(functools.partial(_ssg_jit, orders=otuple), (n, m, sigma), validate)


# --------------------------------------------------------------------------
# the paper as printed (unsound Lemma 1)
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


_lemma1_jit = jit(_lemma1_impl)


def paper_lemma1_rdp(orders, *, eps, delta):
  r"""Liew et al.'s Lemma 1 (Eq. 2) DP->RDP map AS PRINTED -- UNSOUND, reproduction only.

  arXiv:2206.03151v2, Lemma 1 (attributed to Asoodeh et al. 2021):
  :math:`\epsilon(\lambda)=\epsilon+\frac1{\lambda-1}\log\min_{r\in(\delta,1)}
  \big(r^\lambda(r-\delta)^{1-\lambda}+(1-r)^\lambda(e^\epsilon-r+\delta)^{1-\lambda}\big)`.
  The minimum over r returns the *least* divergence compatible with the
  (eps, delta) boundary, so this is not an upper bound (at delta = 0 it is
  ~0 for every eps; no finite DP->RDP bound exists for delta > 0).

  Returns: float64, shape ``broadcast(eps, delta).shape + (len(orders),)``.
  Bound: none (unsound).
  """
  arr, _ = integer_orders(orders)
  checks.check_range("eps", eps, 0.0)
  checks.check_range("delta", delta, 0.0, 1.0, hi_open=True)
  with jax.enable_x64(True):
    e = jnp.asarray(eps, jnp.float64)[..., None]
    d = jnp.asarray(delta, jnp.float64)[..., None]
    return _lemma1_jit(jnp.asarray(arr), e, d)


@functools.partial(jit, static_argnames=("orders", "approach", "num_terms"))
def _approach_jit(n, p, eps0, delta0, delta1, *, orders, approach, num_terms):
  lam = jnp.asarray(orders)
  L = int(max(orders))
  j = jnp.arange(2, L + 1, dtype=jnp.float64)

  def per_k(ks):
    eS, dS = fmt_shuffle_dp(ks, eps0, delta0, delta1)           # (K,)
    r = ks / n
    if approach == 1:
      eps_j = _lemma1_impl(j[None, :], eS[:, None], dS[:, None])  # (K, J)
      return wbk_log_excess(lam, jnp.log(r), eps_j, log_expm1(eS))
    ek = jnp.log1p(r * jnp.expm1(eS))
    dk = r * dS
    e_l = _lemma1_impl(lam[None, :], ek[:, None], dk[:, None])    # (K, L)
    return log_expm1((lam - 1.0) * e_l)

  n_ = jnp.asarray(n, jnp.float64)
  p_ = jnp.asarray(p, jnp.float64)
  return finish_rdp(mixture_log_excess(n_, p_, num_terms, per_k, None), lam)


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
  arr, otuple = integer_orders(orders)
  checks.check_choice("approach", approach, (1, 2))
  checks.check_range("n", n, 1.0)
  checks.check_probability("p", p)
  checks.check_range("eps0", eps0, 0.0)
  checks.check_probability("delta0", delta0)
  checks.check_delta(delta1, "delta1")
  nt = resolve_num_terms(num_terms, n, p)
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
  arr, _ = integer_orders(orders)
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
