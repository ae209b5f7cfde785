r"""Lower bounds for shuffled Gaussian reports, with and without check-in.

Source: Liew, Hasegawa & Takahashi, "Privacy Amplification via Shuffled
Check-Ins", arXiv:2206.03151v2, Sec. 4 (Thm 3, Eq. 8 = Eq. 19).

* :func:`shuffle_gaussian_rdp_lower` -- Eq. 8 / Thm 3 (all n report), by an
  exact O(lambda^2) power recurrence (Algorithm 2's partition sum is the test
  oracle).
* :func:`check_in_gaussian_rdp_lower` -- the exact Renyi divergence of the
  same pair (0^n vs (1, 0^{n-1})) under shuffled check-in (derived here: Eq. 5
  with the pair's per-k moments).

The Eq. 8 brackets :math:`\log\mathbb E[M_k^j]` are
``jaxacct._core.mixture.shuffle_gaussian_log_moments`` (shared with the Thm 5
estimate in ``jaxacct.experimental``). Both curves are public
as ``jaxacct.shuffle.bounds.*``.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import xlog1py, xlogy

from jaxacct._core import checks
from jaxacct._core.dtype import dispatch, require_x64
from jaxacct._core.logmath import log_binom, log_expm1, logsumexp
from jaxacct._core.mixture import (DEFAULT_CHECK_IN_ORDERS, check_rate_inputs, finish_rdp,
                                   integer_orders, lanes_f64, mixture_log_excess,
                                   nan_where_invalid, orders_jit, resolve_num_terms,
                                   shuffle_gaussian_log_moments)


def _shuffle_lower_impl(lam_np, n, sigma):
  require_x64("shuffle_gaussian_rdp_lower")
  n = jnp.asarray(n, jnp.float64)
  sigma = jnp.asarray(sigma, jnp.float64)                 # not broadcast: the
  lam = jnp.asarray(lam_np, jnp.float64)                  # small-n table is per sigma
  L = int(np.max(lam_np))
  s = jnp.where(sigma > 0, sigma, 1.0)
  nn = jnp.where(n >= 1, jnp.round(n), 1.0)
  logm = shuffle_gaussian_log_moments(s, nn, L)                           # S + (L+1,)
  n, sigma = jnp.broadcast_arrays(n, sigma)
  li = lam_np.astype(np.int64)
  out = jnp.maximum(jnp.take(logm, li, axis=-1) / (lam - 1.0), 0.0)
  bad = ~((n >= 1) & (sigma > 0))
  return jnp.where(bad[..., None], jnp.nan, out)


_shuffle_lower_jit = orders_jit(_shuffle_lower_impl)


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
  arr, otuple = integer_orders(orders)
  del arr
  return dispatch(functools.partial(_shuffle_lower_jit, orders=otuple), (n, sigma),
                  lambda: (checks.check_range("n", n, 1.0), checks.check_sigma("sigma", sigma)))


def _check_in_lower_impl(lam_np, n, p, sigma, num_terms):
  n, p, sigma, lam, L = lanes_f64("check_in_gaussian_rdp_lower", lam_np, n, p, sigma)
  s = jnp.where(sigma > 0, sigma, 1.0)
  n = jnp.where(n >= 1, jnp.round(n), 1.0)
  j = jnp.arange(2, L + 1, dtype=jnp.float64)

  def per_k(ks):
    logm = shuffle_gaussian_log_moments(s[..., None], ks, L)[..., 2:]         # S + (K, J)
    lx = log_expm1(jnp.maximum(logm, 0.0))
    r = ks / n[..., None]
    rr = r[..., None, None]
    jj = j[None, :]
    ll = lam[:, None]
    t = (log_binom(ll, jnp.minimum(jj, ll)) + xlog1py(jnp.maximum(ll - jj, 0.0), -rr)
         + xlogy(jj, rr) + lx[..., None, :])
    t = jnp.where(jj <= ll, t, -jnp.inf)
    return logsumexp(t, axis=-1)                               # S + (K, L)

  out = finish_rdp(mixture_log_excess(n, p, num_terms, per_k, None), lam)
  return nan_where_invalid(out, n, p, sigma)


_check_in_lower_jit = orders_jit(_check_in_lower_impl, "num_terms")


def check_num_terms(num_terms) -> None:
  """``num_terms`` (static, one count per call): None, or an integer in [1, 2^20]."""
  if num_terms is not None:
    checks.check_int("num_terms", num_terms, min_value=1, max_value=2**20, scalar=True)


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
  arr, otuple = integer_orders(orders)
  check_num_terms(num_terms)
  nt = resolve_num_terms(num_terms, n, p, width=7.0, cap=2048)
  del arr
  return dispatch(functools.partial(_check_in_lower_jit, orders=otuple, num_terms=nt),
                  (n, p, sigma), lambda: check_rate_inputs(n, p, "sigma", sigma))
