r"""RDP of the shuffle model for general discrete eps0-LDP mechanisms (Girgis et al.).

Girgis, Data, Diggavi, Suresh & Kairouz, "On the Renyi Differential Privacy
of the Shuffle Model", arXiv:2105.05180v1 (CCS'21). Replace-one neighbours,
n clients, the same eps0-LDP randomizer with a discrete range.

Derivations and sources: docs/bounds/shuffle.md ("Bounds and proofs / Shuffling").
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from jaxacct._core import checks
from jaxacct._core.batching import map_blocks
from jaxacct._core.dtype import dispatch, require_x64
from jaxacct._core.logmath import log_binom_pmf, log_expm1, logsumexp
from jaxacct._core.orders import DEFAULT_INTEGER_ORDERS, DEFAULT_ORDERS
from jaxacct._core.results import EpsilonResult
from jaxacct._core.units import renamed
from jaxacct.shuffle import _binned
from jaxacct.shuffle._rdp_rounds import compose_rdp_epsilon
from jaxacct._core.compiled import jit



def _prep(n, eps0):
  n = jnp.asarray(n, jnp.float64)[..., None]
  e = jnp.asarray(eps0, jnp.float64)[..., None]
  ok = (n >= 1) & (jnp.floor(n) == n) & (e >= 0) & jnp.isfinite(e)
  return jnp.where(ok, n, 2.0), jnp.where(ok, jnp.maximum(e, 1e-300), 1.0), ok


def _finish(rdp, ok, e, clip=True):
  if clip:
    rdp = jnp.minimum(rdp, e)
  rdp = jnp.where(e <= 1e-300, 0.0, rdp)
  return jnp.where(ok, rdp, jnp.nan)


def _log_u1_minus_1(lam, m, e, imax):
  r"""``log(U_1(m) - 1)`` (Thm 5, eq. (15)); lam integer, shape broadcast."""
  lam = lam[..., None]
  m = m[..., None]
  e = e[..., None]
  l2 = (jnp.log(lam * (lam - 1.0) / 2.0) + 2.0 * log_expm1(e) - jnp.log(m) - e)
  i = jnp.asarray(np.arange(3, max(imax, 3) + 1, dtype=np.float64))
  logx = 2.0 * log_expm1(2.0 * e) - jnp.log(2.0) - jnp.log(m) - 2.0 * e
  li = (gammaln(lam + 1.0) - gammaln(i + 1.0) - gammaln(jnp.maximum(lam - i, 0.0) + 1.0)
        + jnp.log(i) + gammaln(i / 2.0) + 0.5 * i * logx)
  li = jnp.where(i <= lam, li, -jnp.inf)
  allt = jnp.concatenate([l2, li], axis=-1)
  return logsumexp(allt, axis=-1)


def _thm1(lam, n, e, gamma_c, imax):
  nbar = jnp.floor((1.0 - gamma_c) * (n - 1.0) / jnp.exp(e)) + 1.0
  lu = _log_u1_minus_1(lam, nbar, e, imax)
  lc = e * lam - gamma_c ** 2 * (n - 1.0) / (2.0 * jnp.exp(e))
  # log(U1 + chernoff) = softplus(logaddexp(log(U1 - 1), lc))
  return jnp.logaddexp(0.0, jnp.logaddexp(lu, lc)) / (lam - 1.0)


def _int_orders(orders):
  return checks.check_orders(orders, integer=True, min_order=2)


def _door(kernel, name, orders_np, n, eps0, **static):
  """A Girgis door: ``dtype.dispatch`` of the module-level jit (x64 named ``name``)."""

  def run(n, eps0):
    require_x64(name)
    return _jit_call(kernel, n, eps0, tuple(orders_np.tolist()),
                     tuple(sorted(static.items())))

  return dispatch(run, (n, eps0), lambda: (checks.check_int("n", n, min_value=1),
                                            checks.check_range("eps0", eps0, 0.0, np.inf)))


@functools.partial(jit, static_argnums=(0, 3, 4))
def _jit_call(kernel, n, eps0, orders, static):
  return kernel(np.asarray(orders, np.float64), n, eps0, **dict(static))


def _k_thm1(lam_np, n, eps0, gamma_c):
  n, e, ok = _prep(n, eps0)
  imax = int(np.max(lam_np))
  lam = jnp.asarray(lam_np, jnp.float64)
  g = jnp.asarray(gamma_c, jnp.float64)
  if np.ndim(gamma_c) == 0:
    out = _thm1(lam, n, e, g, imax)
  else:  # min over a fixed set of slacks (each valid, Remark 3)
    out = jnp.min(jnp.stack([_thm1(lam, n, e, gi, imax) for gi in gamma_c]), 0)
  intok = jnp.floor(lam) == lam
  out = _binned.monotone_upper(_finish(out, ok, e), lam_np)
  return jnp.where(intok, out, jnp.nan)


def girgis_thm1_rdp(orders=DEFAULT_INTEGER_ORDERS, *, n, eps0, gamma_c=0.5):
  r"""Upper RDP bound for shuffling n eps0-LDP discrete reports (Girgis Thm 1).

  Girgis et al., arXiv:2105.05180v1, Thm 1, eq. (6); ``gamma_c`` is the
  Chernoff slack of Remark 3 (paper: 1/2; a tuple gives the minimum over the
  set, each being valid):

  .. math:: \epsilon(\lambda)\le\frac{1}{\lambda-1}\log\Big(U_1(\bar n)
     +e^{\epsilon_0\lambda-\gamma_C^2(n-1)/(2e^{\epsilon_0})}\Big),\quad
     \bar n=\lfloor(1-\gamma_C)(n-1)e^{-\epsilon_0}\rfloor+1,

  :math:`U_1(m)=1+\binom\lambda2\frac{(e^{\epsilon_0}-1)^2}{me^{\epsilon_0}}
  +\sum_{i=3}^\lambda\binom\lambda i\,i\,\Gamma(i/2)\big(\frac{(e^{2\epsilon_0}-1)^2}
  {2me^{2\epsilon_0}}\big)^{i/2}`.

  Args:
    orders: concrete integer orders >= 2 (default DEFAULT_INTEGER_ORDERS).
    n: clients, integer >= 1. eps0: >= 0. Broadcast together.
    gamma_c: float in (0, 1) or a tuple of them (static).

  Returns:
    float64, shape ``broadcast(n, eps0).shape + (len(orders),)``.

  Bound: upper; clipped at eps0 (§2.8). Cost O(max order) per order.
  NaN for invalid traced lanes.
  """
  o = _int_orders(orders)
  checks.check_range("gamma_c", gamma_c, 0.0, 1.0, lo_open=True, hi_open=True)
  gc = tuple(float(g) for g in np.atleast_1d(gamma_c))
  for g in gc:
    checks.check_range("gamma_c", g, 0.0, 1.0, lo_open=True, hi_open=True)
  return _door(_k_thm1, "girgis_thm1_rdp", o, n, eps0,
                   gamma_c=gc[0] if len(gc) == 1 else gc)


def _k_cor1(lam_np, n, eps0):
  n, e, ok = _prep(n, eps0)
  lam = jnp.asarray(lam_np, jnp.float64)
  val = jnp.logaddexp(0.0, jnp.log(lam * (lam - 1.0) / 2.0 * 4.0) + 2.0 * log_expm1(e)
                      - jnp.log(n)) / (lam - 1.0)
  valid = 4.0 * jnp.log(lam) + 5.0 * e < jnp.log(n / 9.0)
  val = jnp.where(valid, val, jnp.inf)
  val = _binned.monotone_upper(_finish(val, ok, e), lam_np)
  return jnp.where(jnp.floor(lam) == lam, val, jnp.nan)


def girgis_cor1_rdp(orders=DEFAULT_INTEGER_ORDERS, *, n, eps0):
  r"""Simplified upper RDP bound (Girgis Cor. 1, eq. (7)); eps0 outside its domain.

  :math:`\epsilon(\lambda)\le\frac1{\lambda-1}\log(1+\binom\lambda2
  \frac{4(e^{\epsilon_0}-1)^2}{n})` for integer :math:`\lambda\ge2` with
  :math:`\lambda^4e^{5\epsilon_0}<n/9` (arXiv:2105.05180v1). Outside that
  domain the formula can fall below the true RDP, so it is not
  used there (+inf, then the universal clip at eps0).

  Returns: float64, ``broadcast(n, eps0).shape + (len(orders),)``.
  Bound: upper (clipped at eps0).
  """
  return _door(_k_cor1, "girgis_cor1_rdp", _int_orders(orders), n, eps0)


def _thm2(lam, n, e):
  nbar = jnp.floor((n - 1.0) / (2.0 * jnp.exp(e))) + 1.0
  a = lam ** 2 * jnp.exp(2.0 * log_expm1(e)) / nbar
  b = e * lam - (n - 1.0) / (8.0 * jnp.exp(e))
  return jnp.logaddexp(a, b) / (lam - 1.0)


def _k_thm2(lam_np, n, eps0):
  n, e, ok = _prep(n, eps0)
  lam = jnp.asarray(lam_np, jnp.float64)
  return _binned.monotone_upper(_finish(_thm2(lam, n, e), ok, e), lam_np)


def girgis_thm2_rdp(orders=DEFAULT_ORDERS, *, n, eps0):
  r"""Upper RDP bound for any real order (Girgis Thm 2, eq. (9)).

  .. math:: \epsilon(\lambda)\le\frac1{\lambda-1}\log\Big(e^{\lambda^2
     (e^{\epsilon_0}-1)^2/\bar n}+e^{\epsilon_0\lambda-\frac{n-1}{8e^{\epsilon_0}}}\Big),
     \quad\bar n=\lfloor\frac{n-1}{2e^{\epsilon_0}}\rfloor+1

  (arXiv:2105.05180v1; = Chen et al. arXiv:2401.04306v1 eq. (4)).

  Returns: float64, ``broadcast(n, eps0).shape + (len(orders),)``.
  Bound: upper (clipped at eps0); real orders > 1.
  """
  return _door(_k_thm2, "girgis_thm2_rdp", checks.check_orders(orders), n, eps0)


def _k_efm(lam_np, n, eps0):
  n, e, ok = _prep(n, eps0)
  lam = jnp.asarray(lam_np, jnp.float64)
  val = lam * 2.0 * jnp.exp(4.0 * e + 2.0 * log_expm1(e)) / n
  return _finish(val, ok, e, clip=False)


def efm19_rdp(orders=DEFAULT_ORDERS, *, n, eps0):
  r"""Baseline RDP of Erlingsson et al. (SODA'19) as stated by Girgis eq. (10).

  :math:`\epsilon(\lambda)=\lambda\,2e^{4\epsilon_0}(e^{\epsilon_0}-1)^2/n`
  (arXiv:2105.05180v1, eq. (10); Chen et al. Table 1 row [8], O(e^{6 eps0})).
  Reproduced as printed (not clipped), for comparisons only.

  Bound: upper as stated by the source (not re-derived here).
  """
  return _door(_k_efm, "efm19_rdp", checks.check_orders(orders), n, eps0)


def _k_cor2(lam_np, n, eps0):
  n, e, ok = _prep(n, eps0)
  lam = jnp.asarray(lam_np, jnp.float64)
  val = jnp.logaddexp(0.0, jnp.log(lam * (lam - 1.0) / 2.0) + 2.0 * log_expm1(e)
                      - jnp.log(n) - e) / (lam - 1.0)
  val = jnp.where(e <= 1e-300, 0.0, val)
  return jnp.where(ok & (jnp.floor(lam) == lam), val, jnp.nan)


def girgis_cor2_rdp(orders=DEFAULT_INTEGER_ORDERS, *, n, eps0):
  r"""Lower RDP bound, simplified (Girgis Cor. 2, eq. (12) = Chen et al. eq. (5)).

  :math:`\epsilon(\lambda)\ge\frac1{\lambda-1}\log\big(1+\binom\lambda2
  \frac{(e^{\epsilon_0}-1)^2}{ne^{\epsilon_0}}\big)`, integer orders >= 2.

  Bound: lower (the odd central moments dropped are >= 0).
  """
  return _door(_k_cor2, "girgis_cor2_rdp", _int_orders(orders), n, eps0)


def _lower_lane(lam, n, e, num):
  p = 1.0 / (jnp.exp(e) + 1.0)
  mode = _binned.binom_mode(n, p)
  edges = _binned.make_grid(n, mode, jnp.sqrt(n * p * (1 - p)), num)
  x, y, ln = _binned.bins(edges, n)
  lpmf = functools.partial(log_binom_pmf, n=n, p=p)
  lmass = _binned.log_mass_lower(lpmf, x, y, ln)
  centre = n * p
  near = jnp.where(y < centre, y, jnp.where(x > centre, x, centre))
  slope = 2.0 * jnp.sinh(e) / n            # r(k) - 1 = slope (k - n p)
  xv = slope * (near - centre)
  lphi = _binned.log_convex_gap(lam[:, None], xv[None], kind="girgis")
  # phi is convex with minimum at the mean: on each bin it is >= phi(near).
  lem1 = logsumexp(lmass[None] + lphi, axis=-1)
  return jnp.logaddexp(0.0, lem1) / (lam - 1.0)


def _k_lower(lam_np, n, eps0, num, batch_size):
  nn, e, ok = _prep(n, eps0)
  lam = jnp.asarray(lam_np, jnp.float64)
  shape = jnp.broadcast_shapes(nn.shape, e.shape)[:-1]
  nf = jnp.broadcast_to(nn[..., 0], shape).reshape(-1)
  ef = jnp.broadcast_to(e[..., 0], shape).reshape(-1)
  out = map_blocks(lambda ne: _lower_lane(lam, ne[0], ne[1], num), (nf, ef),
                   batch_size=batch_size)
  out = out.reshape(shape + lam.shape)
  cor2 = _k_cor2(lam_np, n, eps0)
  out = jnp.where(jnp.floor(lam) == lam, jnp.maximum(out, cor2), out)
  out = jnp.where(e <= 1e-300, 0.0, out)
  return jnp.where(ok, out, jnp.nan)


def girgis_lower_rdp(orders=DEFAULT_ORDERS, *, n, eps0, num: int = 256,
                     batch_size: int = 8):
  r"""Lower RDP bound: shuffled binary randomized response (Girgis Thm 3).

  Girgis et al., arXiv:2105.05180v1, Thm 3, eq. (11), evaluated as the
  exact divergence of the paper's pair (2RR, D=(0..0) vs D'=(0..0,1)),
  :math:`k\sim\mathrm{Bin}(n,1/(e^{\epsilon_0}+1))`:

  .. math:: \epsilon(\lambda)\ge\frac1{\lambda-1}\log\mathbb E_k\Big[\Big(
     \frac{k e^{\epsilon_0}+(n-k)e^{-\epsilon_0}}{n}\Big)^\lambda\Big]

  (valid for real orders; the central-moment expansion of (11) is not used).
  The sum is bounded from below on a static grid of ``num`` edges (chord
  lower bounds of the log-concave pmf), exact when n < ~num/2; at integer
  orders the maximum with Cor. 2 is taken.

  Returns: float64, ``broadcast(n, eps0).shape + (len(orders),)``.
  Bound: lower. NaN for invalid traced lanes.
  """
  o = checks.check_orders(orders)
  checks.check_int("num", num, min_value=16)
  checks.check_int("batch_size", batch_size, min_value=1, scalar=True)
  return _door(_k_lower, "girgis_lower_rdp", o, n, eps0, num=int(num),
                   batch_size=int(batch_size))


def _mixture_lane(lam, n, e, num, imax, paper_caps):
  big_n = n - 1.0
  q = jnp.exp(-e)
  mode = _binned.binom_mode(big_n, q)
  edges = _binned.make_grid(big_n, mode, jnp.sqrt(big_n * q * (1 - q)), num)
  x, y, ln = _binned.bins(edges, big_n)
  lpmf = functools.partial(log_binom_pmf, n=big_n, p=q)
  lmass = _binned.log_mass_upper(lpmf, x, y, ln, mode)
  m1 = x + 1.0                                 # E_m <= U1(m + 1), left end
  lu = _log_u1_minus_1(lam[:, None], m1[None], e, imax)   # (orders, bins)
  if paper_caps:                               # min(U1, e^{lam eps0})
    lcap = log_expm1(lam * e)[:, None]
  else:
    l2 = lam[:, None] ** 2 * jnp.exp(2.0 * log_expm1(e)) / m1[None]   # Thm 6
    lu = jnp.minimum(lu, log_expm1(jnp.maximum(l2, 1e-300)))
    lcap = log_expm1((lam - 1.0) * e)[:, None]  # E_0 <= e^{(lam-1) eps0}
  lval = jnp.minimum(lu, lcap)
  lem1 = logsumexp(lmass[None] + lval, axis=-1)
  return jnp.logaddexp(0.0, lem1) / (lam - 1.0)


def _k_mixture(lam_np, n, eps0, num, paper_caps, batch_size):
  nn, e, ok = _prep(n, eps0)
  imax = int(np.max(lam_np))
  lam = jnp.asarray(lam_np, jnp.float64)
  shape = jnp.broadcast_shapes(nn.shape, e.shape)[:-1]
  nf = jnp.broadcast_to(nn[..., 0], shape).reshape(-1)
  ef = jnp.broadcast_to(e[..., 0], shape).reshape(-1)
  out = map_blocks(lambda ne: _mixture_lane(lam, ne[0], ne[1], num, imax, paper_caps),
                   (nf, ef), batch_size=batch_size)
  out = out.reshape(shape + lam.shape)
  out = jnp.where(jnp.floor(lam) == lam, out, jnp.nan)
  return _binned.monotone_upper(_finish(out, ok, e), lam_np)


def girgis_mixture_rdp(orders=DEFAULT_INTEGER_ORDERS, *, n, eps0, num: int = 256,
                       paper_caps: bool = False, batch_size: int = 8):
  r"""Upper RDP bound: Girgis' reduction with the exact binomial mixture.

  Girgis et al., arXiv:2105.05180v1, eqs. (40)-(43) (Thm 4 + Thm 5 + Thm 6 +
  Lemma 8) without the Chernoff step of Thm 1:

  .. math:: \epsilon(\lambda)\le\frac1{\lambda-1}\log\mathbb E_{m\sim
     \mathrm{Bin}(n-1,e^{-\epsilon_0})}\big[\min(U_1(m+1),U_2(m+1),
     e^{(\lambda-1)\epsilon_0})\big],\quad U_2(m)=e^{\lambda^2(e^{\epsilon_0}-1)^2/m}.

  ``paper_caps=True`` uses :math:`\min(U_1(m+1), e^{\lambda\epsilon_0})` (the
  regression form). The summand is non-increasing in m, so each
  grid bin uses its left end and a log-concave upper bound on its mass.
  Always <= Thm 1 (up to the grid slack, < 1e-3 relative by default).

  Returns: float64, ``broadcast(n, eps0).shape + (len(orders),)``.
  Bound: upper (clipped at eps0); integer orders.
  """
  o = _int_orders(orders)
  checks.check_int("num", num, min_value=16)
  checks.check_int("batch_size", batch_size, min_value=1, scalar=True)
  checks.check_bool("paper_caps", paper_caps)
  return _door(_k_mixture, "girgis_mixture_rdp", o, n, eps0, num=int(num),
                   paper_caps=bool(paper_caps), batch_size=int(batch_size))


_BASES = ("thm1", "thm2", "mixture", "lower")


def _base_rdp(base, orders, n, eps0):
  if base == "thm1":
    return girgis_thm1_rdp(orders, n=n, eps0=eps0)
  if base == "thm2":
    return girgis_thm2_rdp(orders, n=n, eps0=eps0)
  if base == "mixture":
    return girgis_mixture_rdp(orders, n=n, eps0=eps0)
  return girgis_lower_rdp(orders, n=n, eps0=eps0)


def zw19_poisson_rdp(orders, base_rdp_all, sampling_rate):
  r"""Zhu & Wang (ICML'19) general upper bound for Poisson-subsampled RDP.

  For integer :math:`\alpha\ge2` and rate :math:`\gamma`:
  :math:`\frac1{\alpha-1}\log\{(1-\gamma)^{\alpha-1}(\alpha\gamma-\gamma+1)
  +\binom\alpha2\gamma^2(1-\gamma)^{\alpha-2}e^{\epsilon(2)}+3\sum_{\ell=3}^\alpha
  \binom\alpha\ell(1-\gamma)^{\alpha-\ell}\gamma^\ell e^{(\ell-1)\epsilon(\ell)}\}`.

  Args:
    orders: integer orders (1-D), all >= 2.
    base_rdp_all: base RDP at orders 2..max(orders), shape (..., max-1).
    sampling_rate: gamma in [0, 1]; broadcasts with the batch.

  Returns: float64 (..., len(orders)). Bound: upper (add/remove neighbours
  in ZW19; see girgis_subsampled_rdp for the adjacency caveat).
  """
  orders = jnp.asarray(orders, jnp.float64)
  amax = base_rdp_all.shape[-1] + 1
  ell = jnp.asarray(np.arange(2, amax + 1, dtype=np.float64))
  g = jnp.asarray(sampling_rate, jnp.float64)[..., None, None]
  a = orders[:, None]
  lg = jnp.log(jnp.maximum(g, 1e-300))
  l1g = jnp.log1p(-jnp.minimum(g, 1.0 - 1e-16))
  t0 = (a - 1.0) * l1g + jnp.log1p(jnp.minimum(g, 1.0) * (a - 1.0))
  lb = gammaln(a + 1.0) - gammaln(ell + 1.0) - gammaln(jnp.maximum(a - ell, 0.0) + 1.0)
  terms = (lb + (a - ell) * l1g + ell * lg + (ell - 1.0) * base_rdp_all[..., None, :]
           + jnp.where(ell >= 3, jnp.log(3.0), 0.0))
  terms = jnp.where(ell <= a, terms, -jnp.inf)
  t0 = jnp.broadcast_to(t0, terms.shape[:-1] + (1,))
  tot = logsumexp(jnp.concatenate([t0, terms], axis=-1), axis=-1)
  return jnp.maximum(tot, 0.0) / (orders - 1.0)


@renamed(sampling_rate="sampling_probability")
def girgis_subsampled_rdp(orders=None, *, n, eps0, sampling_probability, base="thm1"):
  r"""RDP of Poisson-subsampled shuffling (Girgis Sec. 4 / Fig. 5 recipe).

  Per-round shuffle RDP of ``n`` *sampled* clients (the paper's Fig. 5 uses
  ``n = gamma * N``) from ``base`` ("thm1", "thm2", "mixture"
  upper; "lower" gives what the lower curve would give), fed to Zhu & Wang
  general factor-3 bound at every integer order 2..max(orders).

  Caveats: ZW19 is for add/remove neighbours while the
  shuffle RDP is replace-one, and the number of sampled clients is random;
  the paper ignores both, and so does this function (it reproduces the
  paper's recipe). Bound: upper for the paper's model, eager only.
  """
  orders = np.arange(2, 201, dtype=np.float64) if orders is None else orders
  o = _int_orders(orders)
  checks.check_choice("base", base, _BASES)
  checks.check_probability("sampling_probability", sampling_probability)
  allo = np.arange(2, int(o.max()) + 1, dtype=np.float64)
  base_rdp = _base_rdp(base, allo, n, eps0)
  return zw19_poisson_rdp(o, base_rdp, sampling_probability)


@renamed(sampling_rate="sampling_probability")
def girgis_epsilon(*, n, eps0, delta, rounds=1, bound: str = "thm1",
                   sampling_probability=None, orders=None,
                   method: str = "tight") -> EpsilonResult:
  r"""(eps, delta) after ``rounds`` rounds via a Girgis et al. RDP curve.

  RDP composes additively (Lemma 2); conversion by
  ``jaxacct._core.conversion`` (``"classic"``: Mironov; ``"tight"``:
  Canonne-Kamath-Steinke Prop. 12 = the paper's Lemma 1).

  Args:
    n: clients per shuffle (sampled clients if ``sampling_probability`` is set).
    eps0: >= 0. delta: (0, 1). rounds: integer >= 1.
    bound: "thm1" | "thm2" | "mixture" (upper) | "lower" (the epsilon the
      lower RDP curve would give: NOT a lower bound on epsilon).
    sampling_probability: None or Poisson rate (uses girgis_subsampled_rdp).
    orders: defaults: integers 2..2000 (geometric above 256) or 2..200 when
      subsampled; must be integers except for "thm2"/"lower".

  Returns:
    EpsilonResult(epsilon, delta, method="girgis_<bound>", bound=
    "upper"|"estimate" (converted lower curve), order=best order).
  """
  checks.check_choice("bound", bound, _BASES)
  checks.check_delta(delta)
  checks.check_int("rounds", rounds, min_value=1)
  checks.check_choice("method", method, checks.CONVERSIONS)
  if sampling_probability is None:
    if orders is None:
      orders = np.unique(np.concatenate([np.arange(2, 257.0),
                                         np.round(np.geomspace(257, 2000, 60))]))
    rdp = _base_rdp(bound, orders, n, eps0)
  else:
    if orders is None:
      orders = np.arange(2, 201, dtype=np.float64)
    rdp = girgis_subsampled_rdp(orders, n=n, eps0=eps0,
                                sampling_probability=sampling_probability, base=bound)
  eps, order = compose_rdp_epsilon(orders, rdp, rounds, delta, method)
  return EpsilonResult(epsilon=eps, delta=delta, method="girgis_" + bound,
                       bound="estimate" if bound == "lower" else "upper",
                       order=order)
