r"""Exact add-direction RDP of 1-out-of-t random allocation, Gaussian noise.

Feldman & Shenfeld, "Privacy amplification by random allocation",
arXiv:2502.08202v3, Sec. 3 (dominating pair, Thm 3.1) and Lemma F.1 (add
analogue). The paper gives no composable add-direction bound: Thm 4.9 /
Cor. 4.10 carry a loss shift that adds up linearly over the m = kE rounds.
This module computes the add-direction RDP itself,
which composes additively, by an exact integral representation.

Derivations and sources: docs/bounds/allocation_rdp.md ("Bounds and proofs /
Random allocation: RDP and analytic bounds").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from jaxacct._core import batching, checks, sharding
from jaxacct._core.batching import block_programs, lanes_for_memory
from jaxacct._core.dtype import dispatch, require_x64
from jaxacct._core.logmath import log_expm1, logsumexp
from jaxacct._core.solve import newton
from jaxacct._core.compiled import ACCELERATOR_OPTIONS, jit
from jaxacct._core.units import per_epoch_steps

_XI_MAX = 38.0
# Outer nodes a trip of the accelerator layout's loop: 16 trips at the
# default 4096 x 2048 grid, 4 MB a (chunk x inner) temporary a lane.
_OUTER_CHUNK = 256


def _outer_chunk(num_outer: int) -> int:
  """Outer nodes a trip of the accelerator lane (static: from the grid alone)."""
  return min(int(num_outer), _OUTER_CHUNK)


def _neg_expm1_minus(y):
  """-expm1(-y) - y = -(e^{-y} - 1 + y) <= 0, accurate for small y >= 0."""
  series = -y * y * (0.5 - y * (1.0 / 6 - y * (1.0 / 24 - y * (1.0 / 120 - y / 720))))
  return jnp.where(y < 1e-2, series, -jnp.expm1(-y) - y)


def _log1p_neg_plus(x):
  """log1p(-x) + x for x in [0, 1), accurate for small x."""
  series = -x * x * (0.5 + x * (1.0 / 3 + x * (0.25 + x * (0.2 + x / 6))))
  return jnp.where(x < 1e-3, series, jnp.log1p(-x) + x)



def _t_log_phi_plus(w, tau, t, num_inner, fused=False):
  """(small, t (log phi(v) + v), t log phi(v)), v = e^w / t, vector w.

  log phi(v) + v >= 0 (Jensen; E[L] = 1). For 1 - phi < 1/2 it is formed
  as -G + (log1p(-x) + x) with x = 1 - phi = v + G, G = E[-expm1(-vL) - vL]
  (no cancellation for small v; for v >= 1 simply v + log1p(-x)); ``small``
  marks that regime. The third
  output (log-sum-exp form) is for the other one.

  ``fused`` (the accelerator layout): the log-sum-exp is shifted by the
  integrand's value at its mode (below), not by a first pass for the grid's
  max, so its term grid feeds one reduction (a compiler that fuses producers
  into reductions, XLA:GPU, never stores it). Same sum, rounding apart.
  """
  logv = w - jnp.log(t)                            # (n_w,)
  v = jnp.exp(logv)
  base = jnp.linspace(-1.0, 1.0, num_inner)
  lognorm = -0.5 * jnp.log(2 * jnp.pi)

  # (1) Standard window xi in [-38, 38]: 1 - phi and G (used where 1-phi < 1/2).
  xi = _XI_MAX * base
  logwt = -0.5 * xi**2 + lognorm + jnp.log(xi[1] - xi[0])
  vl = jnp.exp(jnp.minimum(logv[:, None] + (tau * xi - 0.5 * tau**2)[None, :], 700.0))
  wt = jnp.exp(logwt)[None, :]
  one_m_phi = jnp.sum(-jnp.expm1(-vl) * wt, axis=-1)          # all terms >= 0
  G = jnp.sum(_neg_expm1_minus(vl) * wt, axis=-1)              # = 1 - phi - v
  small = one_m_phi < 0.5
  xs = jnp.where(small, v + G, 0.0)
  d_lt1 = -G + _log1p_neg_plus(jnp.clip(xs, 0.0, 0.5))          # v < 1
  d_ge1 = v + jnp.log1p(-jnp.where(small, one_m_phi, 0.0))       # v >= 1
  d_small = jnp.where(v < 1.0, d_lt1, d_ge1)

  # (2) log phi by a log-sum-exp on a window around the mode of the
  # log-concave integrand f(xi) = -xi^2/2 - v e^{tau xi - tau^2/2}:
  # xi_m = -W(tau^2 v e^{-tau^2/2}) / tau (Lambert W), curvature -(1 + W).
  # Right half-width 38/sqrt(1+W); left min(38, 38/sqrt(1+W) + 800 tau/W)
  # (f drops by > 120 beyond both ends).
  W = _lambert_w_exp(2.0 * jnp.log(tau) + logv - 0.5 * tau**2)
  xi_m = -W / tau
  right = _XI_MAX / jnp.sqrt(1.0 + W)
  left = jnp.minimum(_XI_MAX, right + 800.0 * tau / jnp.maximum(W, 1e-300))
  ctr = xi_m + 0.5 * (right - left)
  half = 0.5 * (right + left)
  logh = jnp.log(half * (base[1] - base[0]))
  xi2 = ctr[:, None] + half[:, None] * base[None, :]
  logwt2 = -0.5 * xi2**2 + lognorm + logh[:, None]
  vl2 = jnp.exp(jnp.minimum(logv[:, None] + tau * xi2 - 0.5 * tau**2, 700.0))
  if fused:
    # f at its mode (the maximum of the continuous integrand, so every node
    # lies at or below it up to rounding; the nearest node within a drop of
    # (1 + W) h^2 / 8 << 1, so the sum is >= ~1: no overflow, no underflow).
    top = (-0.5 * xi_m**2 + lognorm + logh
           - jnp.exp(jnp.minimum(logv + tau * xi_m - 0.5 * tau**2, 700.0)))
    lse = jnp.log(jnp.sum(jnp.exp(-vl2 + logwt2 - top[:, None]), axis=-1)) + top
  else:
    lse = logsumexp(-vl2 + logwt2, axis=-1)
  return small, t * jnp.maximum(d_small, 0.0), t * lse


def _lambert_w_exp(z):
  """W(e^z) (principal branch) for real z, by Newton on u + log u = z."""
  u = jnp.where(z > 1.0, z - jnp.log(jnp.maximum(z, 1.0)), jnp.exp(jnp.minimum(z, 1.0)))
  u = jnp.maximum(u, 1e-300)
  return newton(lambda u: u + jnp.log(u) - z, lambda u: 1.0 + 1.0 / u, u, num_iters=30,
                lower=1e-300)


def _rows(w, tau, t, num_inner, chunk):
  """:func:`_t_log_phi_plus` at the outer nodes ``w``; with ``chunk`` (the
  accelerator layout) a static-trip loop over pieces of ``chunk`` outer nodes,
  each reduced over the inner axis at once, so no (outer x inner) grid is ever
  held: O(chunk x inner) a lane. Every row is the same formula either way."""
  n = w.shape[0]
  if chunk is None:
    return _t_log_phi_plus(w, tau, t, num_inner)
  if chunk >= n:
    return _t_log_phi_plus(w, tau, t, num_inner, fused=True)
  pieces = -(-n // chunk)
  wp = jnp.concatenate([w, jnp.full((pieces * chunk - n,), w[-1])]).reshape(pieces, chunk)
  out = jax.lax.map(lambda wc: _t_log_phi_plus(wc, tau, t, num_inner, fused=True), wp)
  return tuple(o.reshape(-1)[:n] for o in out)


def _add_rdp_one(sigma, t, orders, num_outer, num_inner, chunk=None):
  tau = 1.0 / sigma
  t = jnp.asarray(t, jnp.float64)
  s = orders - 1.0                                   # s = alpha - 1 > 0
  s_max = jnp.max(s)
  # Below w = -40 the integrand is O(e^{(s+2) w}) (after the subtraction).
  w_lo = -40.0
  w_hi = jnp.maximum(jnp.log(s_max + 60.0) + 2.0,
                     jnp.log(t) + s_max * tau**2 / t + 12.0 * tau + 5.0)
  w = jnp.linspace(w_lo, w_hi, num_outer)
  hw = w[1] - w[0]
  small, tD, tlp = _rows(w, tau, t, num_inner, chunk)     # (n_w,) each
  # A - 1 = Gamma(s)^-1 int e^{s w} (phi(e^w/t)^t - e^{-e^w}) dw  (>= 0): the
  # L == 1 integrand (which integrates to exactly 1) is subtracted. Where
  # phi >= 1/2: e^{-e^w} expm1(t (log phi + v)); elsewhere
  # phi^t (1 - e^{-t (log phi + v)}) with log phi from a log-sum-exp.
  ew = jnp.exp(w)
  tD_big = jnp.maximum(tlp + ew, 0.0)
  log_diff = jnp.where(small, -ew + log_expm1(tD),
                       tlp + jnp.log(-jnp.expm1(-jnp.where(small, 1.0, tD_big))))
  terms = s[:, None] * w[None, :] + log_diff[None, :]
  log_am1 = logsumexp(terms, axis=-1) + jnp.log(hw) - gammaln(s)
  return jnp.logaddexp(0.0, log_am1) / s


def allocation_add_rdp_kernel(sigma, t, orders, num_outer=4096, num_inner=2048):
  """Jittable kernel: add RDP at ``orders`` (1-D, > 1), shape batch + (n,)."""
  require_x64("allocation_add_rdp")
  sigma = jnp.asarray(sigma, jnp.float64)
  t = jnp.asarray(t, jnp.float64)
  orders = jnp.asarray(orders, jnp.float64)
  sigma, t = jnp.broadcast_arrays(sigma, t)
  shape = sigma.shape
  out = jax.lax.map(lambda st: _add_lane(*st, orders, num_outer, num_inner),
                    (sigma.reshape(-1), t.reshape(-1)))
  return out.reshape(shape + orders.shape)


def _add_lane(s, tt, orders, num_outer, num_inner, chunk=None):
  """Add RDP of one (sigma, t) lane at ``orders``; NaN for an invalid lane or order."""
  ok = (s > 0) & (tt >= 1)
  out = _add_rdp_one(jnp.where(ok, s, 1.0), jnp.where(ok, tt, 1.0),
                     jnp.where(orders > 1.0, orders, 2.0), num_outer, num_inner, chunk)
  return jnp.where(ok & (orders > 1.0), out, jnp.nan)


@functools.partial(jit, static_argnames=("num_outer", "num_inner"))
def _add_rdp_jit(sigma, t, orders, *, num_outer, num_inner):
  return allocation_add_rdp_kernel(sigma, t, orders, num_outer, num_inner)


@functools.partial(jit, static_argnames=("num_outer", "num_inner"),
                   compiler_options=ACCELERATOR_OPTIONS)
def add_rdp_block(sigma, t, *, orders, num_outer, num_inner):
  """The accelerator layout's block program: :func:`_add_lane` vmapped over
  the lanes of a block (``orders`` shared by the lanes)."""
  require_x64("allocation_add_rdp")
  orders = jnp.asarray(orders, jnp.float64)
  chunk = _outer_chunk(num_outer)
  return jax.vmap(lambda s, tt: _add_lane(s, tt, orders, num_outer, num_inner, chunk))(sigma, t)


def add_lane_bytes(num_outer: int, num_inner: int, num_orders: int = 63) -> int:
  """Bytes one lane of :data:`add_rdp_block` holds at its peak (an estimate):
  twice six float64 (chunk x inner) grids of a trip and the orders' terms on
  the outer grid plus 16 rows of it: 55.6 MB a lane at the default 4096 x
  2048, 63 orders (chunk 256), above XLA:CPU's own peak of 25.4 MB."""
  chunk = _outer_chunk(num_outer)
  return 2 * 8 * (6 * chunk * int(num_inner) + (int(num_orders) + 17) * int(num_outer))


def add_block_lanes(num_outer: int, num_inner: int, num_orders: int = 63) -> int:
  """Lanes of :data:`add_rdp_block`: ``lanes_for_memory`` of
  :func:`add_lane_bytes`, from one lane up (one lane is millions of
  quadrature cells; 16 at the default grid on the CPU's fixed 4 GiB budget,
  more on an accelerator, as its memory allows)."""
  return lanes_for_memory(add_lane_bytes(num_outer, num_inner, num_orders), lo=1,
                          name="num_outer * num_inner")


def _add_rdp_blocks(sigma, t, orders, *, num_outer, num_inner):
  """Concrete arrays on the accelerator layout: :data:`add_rdp_block` over
  blocks of :func:`add_block_lanes` lanes."""
  orders = np.asarray(orders, np.float64)
  program = functools.partial(add_rdp_block, orders=orders,
                              num_outer=num_outer, num_inner=num_inner)
  return batching.run_blocks(program, (sigma, t),
                             add_block_lanes(num_outer, num_inner, orders.size))


def _check_add_rdp(orders, sigma, steps_per_epoch):
  checks.check_orders(orders)
  if np.ndim(orders) != 1:
    raise ValueError(f"orders must be a 1-D array of Renyi orders > 1; got {orders!r}.")
  if np.any(np.asarray(orders) <= 1.0):
    raise ValueError(f"orders must be > 1; got {np.min(orders)}.")
  checks.check_sigma("sigma", sigma)
  checks.check_int("steps_per_epoch", steps_per_epoch, min_value=1, max_value=2**31 - 1)


@per_epoch_steps
def allocation_add_rdp(orders=None, *, sigma, steps_per_epoch, max_order: int = 64,
                       num_outer: int = 4096, num_inner: int = 2048, devices=None):
  r"""Add-direction RDP of 1-out-of-``steps_per_epoch`` allocation, Gaussian (exact).

  Feldman & Shenfeld, arXiv:2502.08202v3, dominating pair of Thm 3.1 in the
  add direction, :math:`R_\alpha(Q^{\otimes t}\,\|\,\bar P)`, computed by the
  Laplace-transform integral in the module docstring (not in the paper).
  Any real order alpha > 1 (not only integers).

  Args:
    orders: 1-D Renyi orders > 1; default ``2..max_order``.
    sigma: noise multiplier > 0; any shape, broadcast with ``steps_per_epoch``.
    steps_per_epoch: t, integer >= 1.
    max_order: used when ``orders`` is None.
    num_outer, num_inner: trapezoid grid sizes (static).
    devices: None (the default device), or jax devices or a
      ``jax.sharding.Mesh``: arrays run in blocks spread over them (values
      bitwise those of one device; :mod:`jaxacct.sweep` across hosts).

  Returns:
    float64 array ``broadcast(sigma, steps_per_epoch).shape + (len(orders),)``: RDP
    of one round (add direction). Composes additively over rounds.

  Bound: exact (to quadrature accuracy: < 1e-11 relative against a 4x finer
  grid for sigma in [0.2, 100], t in [1, 1e7], alpha <= 256). NaN lanes for
  invalid traced input. Cost O(num_outer * num_inner) per (sigma, t), all
  orders at once.

  Example:
    >>> import numpy as np
    >>> from jaxacct.allocation import allocation_add_rdp
    >>> r = allocation_add_rdp([2.0, 3.0], sigma=1.0, steps_per_epoch=1)  # t = 1: Gaussian
    >>> bool(np.allclose(r, [1.0, 1.5], rtol=1e-10))
    True
  """
  checks.check_int("max_order", max_order, min_value=2, max_value=4096, scalar=True)
  checks.check_int("num_outer", num_outer, min_value=2, max_value=2**24, scalar=True)
  checks.check_int("num_inner", num_inner, min_value=2, max_value=2**24, scalar=True)
  if orders is None:
    orders = np.arange(2, int(max_order) + 1, dtype=np.float64)
  grid = dict(num_outer=int(num_outer), num_inner=int(num_inner))
  with sharding.use_devices(devices):
    eager = None
    if block_programs() and (np.ndim(sigma) or np.ndim(steps_per_epoch)):
      eager = functools.partial(_add_rdp_blocks, **grid)
    return dispatch(functools.partial(_add_rdp_jit, **grid), (sigma, steps_per_epoch, orders),
                    lambda: _check_add_rdp(orders, sigma, steps_per_epoch), eager=eager)
