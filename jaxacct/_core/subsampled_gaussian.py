r"""RDP of the Poisson-subsampled Gaussian mechanism (shared kernel).

Used by :mod:`jaxacct.poisson` (front doors, calibration) and by
``jaxacct.allocation.epsilon``'s ``"decomposition"`` method (Poisson decomposition, Thm 4.6 of
arXiv:2502.08202v3), so it lives below the schemes.

Proofs and sources: docs/bounds/poisson.md ("Bounds and proofs /
Poisson subsampling").
"""

from __future__ import annotations

import functools
import math

import numpy as np

from jaxacct._core import checks
from jaxacct._core.batching import (block_programs, broadcast_size, lanes_for_memory, run_blocks,
                                    whole_batch_fits)
from jaxacct._core.conversion import rdp_to_delta_kernel, rdp_to_epsilon_kernel
from jaxacct._core.dtype import dispatch, require_x64
from jaxacct._core.logmath import log1m_exp, log_binom, log_expm1
from jaxacct._core.namespace import JAX
from jaxacct._core.orders import DEFAULT_ORDERS
from jaxacct._core.compiled import ACCELERATOR_OPTIONS, jit

_MAX_EXACT_INT_ORDER = 1024
_INT_BLOCKS = (256, 1024)   # integer orders are summed in blocks of static length
_QUAD_POINTS = 8192
_QUAD_POINTS_SMALL = 320    # enough for alpha <= 16 (docs/bounds/poisson.md)
_QUAD_POINTS_ADD_SMALL = 2048   # add direction, alpha <= 16
_SMALL_ALPHA = 16.0
_QUAD_HALF_WIDTH = 14.0     # Gaussian tail e^{-98} beyond it
_FACT = [float(math.factorial(k)) for k in range(21)]
_MEMORY_FRACTION = 1.0 / 16   # of the device's memory, for one block (rdp_block_lanes)



def _log_a_minus_1_int(ns, alpha, q, sigma, max_order):
  """log(A_alpha - 1) for integer alpha in [2, max_order] by positive-term sum.

  alpha: (A,) float64 integer-valued; q, sigma: shape S. Returns S + (A,).
  """
  xp = ns.xp
  k = xp.arange(2, max_order + 1, dtype=xp.float64)  # (K,)
  a = alpha[:, None]                                             # (A, 1)
  q = q[..., None, None]
  sigma = sigma[..., None, None]
  logq = xp.log(q)
  log1q = xp.log1p(-q)
  rest = a - k
  tail = xp.where(rest == 0, 0.0, rest * log1q)
  kk = k * logq
  kk = xp.where(q == 0, -xp.inf, kk)
  terms = (log_binom(a, xp.minimum(k, a), ns.sp.gammaln) + kk + tail
           + log_expm1((k * k - k) / (2.0 * sigma**2), xp))
  terms = xp.where(k <= a, terms, -xp.inf)
  return ns.sp.logsumexp(terms, axis=-1)


def _log_one_plus(xp, gamma, logabs_x, x):
  """log(1 + gamma * x) for gamma * x > -1, given x and log|x|."""
  pos = gamma * x > 0
  big = xp.logaddexp(0.0, xp.log(xp.abs(gamma)) + logabs_x)
  small = xp.log1p(xp.where(pos, 0.0, gamma * x))
  return xp.where(pos, big, small)


def _log_g(xp, y):
  """log(e^y - 1 - y) (>= -inf) for real y, full relative precision.

  |y| <= 1: the Taylor series y^2 sum_{k>=2} y^{k-2}/k!, 19 terms
  (remainder < 1/21! ~ 2e-20 relative); y > 1: expm1(y) - y (no
  cancellation: expm1(y) >= 1.7 y), in log form above 30; y < -1:
  -y - 1 + e^y (> 0.36, a sum of a positive and a small positive term).
  """
  small = xp.abs(y) <= 1.0
  ys = xp.where(small, y, 0.0)
  s = xp.zeros_like(ys)
  for k in range(20, 1, -1):  # Horner: 1/2! + y/3! + ... + y^18/20!
    s = s * ys + 1.0 / _FACT[k]
  log_small = 2.0 * xp.log(xp.where(small & (y != 0), xp.abs(y), 1.0)) + \
      xp.log(s)
  log_small = xp.where(y == 0, -xp.inf, log_small)
  yp = xp.clip(y, 1.0, 30.0)
  log_mid = xp.log(xp.expm1(yp) - yp)
  yb = xp.maximum(y, 30.0)
  log_big = yb + xp.log1p(-(1.0 + yb) * xp.exp(-yb))
  yn = xp.minimum(y, -1.0)
  log_neg = xp.log(-yn - 1.0 + xp.exp(yn))
  return xp.where(small, log_small,
                   xp.where(y > 30.0, log_big,
                             xp.where(y > 0, log_mid, log_neg)))


def _log_f_negative(xp, gamma, ell, x):
  """log((1+x)^gamma - 1 - gamma*x) for gamma < 0 (the add direction).

  With ell = log(1+x) and g(y) = e^y - 1 - y >= 0,
  (1+x)^gamma - 1 - gamma x = g(gamma ell) - gamma g(ell): for gamma < 0 a
  sum of two nonnegative terms, so no series in x (the binomial series
  diverges for |x| >= 1, as at alpha near 1) and no
  cancellation.  ell is recomputed as log1p(x) where |x| <= 1/2, so it
  has relative precision when x is tiny.
  """
  ell = xp.where(xp.abs(x) <= 0.5, xp.log1p(xp.clip(x, -0.5, 0.5)), ell)
  return xp.logaddexp(_log_g(xp, gamma * ell), xp.log(-gamma) + _log_g(xp, ell))


def _log_f(xp, gamma, ell, x, logabs_x):
  """log((1+x)^gamma - 1 - gamma*x) >= -inf, for gamma > 1 (remove direction).

  ell = log(1 + x) (computed without cancellation by the caller).
  """
  gx = gamma * x
  # (a) |gamma x| <= 0.1: series sum_{k>=2} C(gamma,k) x^k, 11 terms (error < 1e-16 rel).
  c = gamma * (gamma - 1.0) / 2.0
  s = c
  xs = xp.where(xp.abs(gx) <= 0.1, x, 0.0)
  term = c
  for kk in range(3, 14):
    term = term * (gamma - kk + 1.0) / kk * xs
    s = s + term
  log_a = 2.0 * logabs_x + xp.log(xp.abs(s))
  # (b) moderate: expm1(gamma*ell) - gamma*x.
  gl = gamma * ell
  gl_b = xp.minimum(gl, 30.0)
  fb = xp.expm1(gl_b) - xp.where(xp.abs(gx) > 0.1, gx, 1.0)
  log_b = xp.log(xp.maximum(fb, 1e-300))
  # (c) gamma*ell > 30: log f = gamma*ell + log(1 - (1+gamma x) e^{-gamma ell}).
  l1gx = _log_one_plus(xp, gamma, logabs_x, x)
  log_c = gl + log1m_exp(xp.minimum(l1gx - gl, 0.0), xp)
  out = xp.where(xp.abs(gx) <= 0.1, log_a, xp.where(gl <= 30.0, log_b, log_c))
  return out


def _log_moment_minus_1_quad(ns, gamma, alpha_for_range, q, sigma,
                             num_points=_QUAD_POINTS, negative=False):
  """log(E_{mu0}[(mu/mu0)^gamma] - 1) by trapezoidal quadrature.

  gamma: (A,); q, sigma: shape S. Returns S + (A,).  ``negative`` (static):
  gamma < 0 (add direction, :func:`_log_f_negative`), else gamma > 1.
  """
  xp = ns.xp
  q = q[..., None, None]
  sigma = sigma[..., None, None]
  g = gamma[:, None]
  hi = xp.maximum(_QUAD_HALF_WIDTH,
                   alpha_for_range[:, None] / sigma + _QUAD_HALF_WIDTH)
  lo = -_QUAD_HALF_WIDTH
  if negative:
    # (1+x)^gamma <= (1-q)^gamma and <= (q e^v)^gamma: the integrand's left
    # tail is below e^{-98} relative beyond -sqrt(14^2 + 2|gamma| L),
    # L = -log(1-q), and beyond -(|gamma|/sigma + 14) (at q = 0.999,
    # alpha = 256 the fixed -14 cut off the dominant part, 1e-4 under).
    ng = -g
    lo = -xp.minimum(
        xp.sqrt(_QUAD_HALF_WIDTH**2 - 2.0 * ng * xp.log1p(-xp.minimum(q, 1.0))),
        ng / sigma + _QUAD_HALF_WIDTH)
  t = xp.linspace(0.0, 1.0, num_points)
  u = lo + (hi - lo) * t                                     # S + (A, N)
  h = (hi - lo) / (num_points - 1)
  v = u / sigma - 0.5 / sigma**2
  logq = xp.log(q)
  log1q = xp.log1p(-q)
  ell = xp.logaddexp(log1q, logq + v)                       # log(1+x)
  vs = xp.clip(v, -700.0, 700.0)
  x = q * xp.expm1(vs)
  # log|e^v - 1| = max(v, 0) + log(1 - e^{-|v|}): one log1m_exp (the same
  # bits as the two-sided where; v = 0 is masked below)
  log_abs_em1 = xp.maximum(v, 0.0) + log1m_exp(-xp.abs(v), xp)
  logabs_x = logq + log_abs_em1
  logabs_x = xp.where(v == 0, -xp.inf, logabs_x)
  log_phi = -0.5 * u**2 - 0.5 * xp.log(2 * xp.pi)
  if negative:
    lf = _log_f_negative(xp, g, ell, x)
  else:
    lf = _log_f(xp, g, ell, x, logabs_x)
  log_int = ns.sp.logsumexp(log_phi + lf, axis=-1) + xp.log(h)[..., 0]
  # Estimated relative trapezoid error (analytic strip |Im u| < pi sigma).
  err = xp.exp(-2.0 * xp.pi**2 * sigma[..., 0] / h[..., 0])
  return log_int, err


def _split_orders(orders: np.ndarray):
  is_int = (orders == np.round(orders)) & (orders >= 2) & (
      orders <= _MAX_EXACT_INT_ORDER)
  return is_int


@functools.partial(jit, static_argnames=("orders", "direction"))
def _poisson_rdp_jit(q, sigma, *, orders, direction):
  return poisson_gaussian_rdp_kernel(np.asarray(orders), q, sigma, direction)


@functools.partial(jit, static_argnames=("orders", "direction"),
                   compiler_options=ACCELERATOR_OPTIONS)
def _poisson_rdp_block(q, sigma, *, orders, direction):
  """The accelerator layout's block program of :func:`poisson_gaussian_rdp`
  (always called at the top level: XLA takes compiler options only there)."""
  return poisson_gaussian_rdp_kernel(np.asarray(orders), q, sigma, direction)


def _int_block(order_max):
  """The static block length (number of binomial terms) for integer orders <= order_max."""
  for block in _INT_BLOCKS:
    if order_max <= block:
      return block
  return _INT_BLOCKS[-1]


def poisson_gaussian_rdp_kernel(orders: np.ndarray, q, sigma, direction: str, ns=JAX):
  """Jittable kernel of :func:`poisson_gaussian_rdp` (no validation).

  ``orders`` is a concrete numpy array (it selects the algorithm);
  ``direction`` is ``"both"``, ``"remove"`` or ``"add"``. Invalid lanes are NaN.
  Returns float64, shape ``broadcast(q, sigma).shape + orders.shape``. Bound: exact.

  ``ns`` (:mod:`jaxacct._core.namespace`): ``JAX`` (default; traced or under
  jit) or ``HOST`` (NumPy/SciPy on concrete input, no compiled program; the
  same formula, so the same values to float64 rounding).

  The orders are split on the host into static groups (integer orders by
  block, quadrature orders by point count); each group is one vectorised
  evaluation, and the groups are put back in order by one gather (no per-order
  slices: the program stays small whatever the number of orders).
  """
  xp = ns.xp
  if not ns.is_host:
    require_x64("poisson_gaussian_rdp")
  orders = np.asarray(orders, np.float64)
  q = xp.asarray(q, xp.float64)
  sigma = xp.asarray(sigma, xp.float64)
  q, sigma = xp.broadcast_arrays(q, sigma)
  is_int = _split_orders(orders)
  qs = xp.clip(q, 0.0, 1.0)
  ss = xp.where(sigma > 0, sigma, 1.0)
  small = orders <= _SMALL_ALPHA
  add = direction == "add"
  # log-convex interpolation needs the integer neighbours of fractional orders
  frac_idx = np.zeros(0, np.int64)
  if not add:
    frac_idx = np.nonzero(~is_int & (np.ceil(orders) <= _MAX_EXACT_INT_ORDER))[0]
  fl = np.floor(orders[frac_idx])
  ce = fl + 1.0
  # integer orders evaluated exactly: the requested ones and the neighbours,
  # one evaluation per static block length
  int_vals = {}                  # order -> (group number, position)
  pieces, piece_idx, piece_err = [], [], []
  if not add:
    need_int = np.unique(np.concatenate([orders[is_int], fl[fl >= 2], ce]))
    lo_block = 1
    for block in _INT_BLOCKS:
      sel = need_int[(need_int > lo_block) & (need_int <= block)]
      lo_block = block
      if sel.size:
        vals = _log_a_minus_1_int(ns, xp.asarray(sel), qs, ss, block)
        pieces.append(vals)
        for i, v in enumerate(sel.tolist()):
          int_vals[v] = (len(pieces) - 1, i)
  # quadrature groups
  if add:
    # (1+x)^(1-alpha) drops double-exponentially: 320 points left 8.7e-9
    # under mpmath at alpha = 16, sigma = 0.3
    groups = [(small, _QUAD_POINTS_ADD_SMALL), (~small, _QUAD_POINTS)]
  else:
    groups = [(~is_int & small, _QUAD_POINTS_SMALL), (~is_int & ~small, _QUAD_POINTS)]
  quad = []                       # (orders indices, piece number)
  for mask, npts in groups:
    if mask.any():
      idx = np.nonzero(mask)[0]
      a = xp.asarray(orders[idx])
      # the add integrand is O(x^2) where x is small and O(x) where it is
      # large, so its mass ends by u = 2/sigma + 14, not at alpha/sigma + 14
      # as the remove one's: a window 2,000 wide at alpha = 1024, sigma = 0.5
      # left h = 0.25, too coarse for the double-exponential drop of
      # (1+x)^gamma near u = -1.4 (4.8e-11 under mpmath)
      reach = xp.minimum(a, 2.0) if add else a
      vals, err = _log_moment_minus_1_quad(ns, 1.0 - a if add else a, reach, qs, ss, npts,
                                           negative=add)
      pieces.append(vals)
      piece_err.append(err)
      quad.append((idx, len(pieces) - 1))
  # one gather puts every order back in place
  offsets = np.cumsum([0] + [int(pc.shape[-1]) for pc in pieces])
  flat = xp.concatenate(pieces, axis=-1)
  pos = np.empty(orders.size, np.int64)
  for idx, k in quad:
    pos[idx] = offsets[k] + np.arange(idx.size)
  for i in np.nonzero(is_int)[0] if not add else []:
    k, j = int_vals[float(orders[i])]
    pos[i] = offsets[k] + j
  log_am1 = xp.take(flat, xp.asarray(pos), axis=-1)
  n_int = int(offsets[len(pieces) - len(piece_err)])
  err_flat = xp.concatenate([xp.zeros(q.shape + (n_int,))] + piece_err, axis=-1)
  quad_err = xp.take(err_flat, xp.asarray(pos), axis=-1)
  a = xp.asarray(orders)
  log_a = xp.logaddexp(0.0, log_am1)
  # Where the quadrature error estimate is not negligible (sigma well below
  # 0.3, or alpha/sigma^2 very large), inflate A by 100x the estimate so the
  # value stays an upper bound; elsewhere (err < 1e-13) leave it untouched.
  inflated = log_a + xp.log1p(100.0 * quad_err)
  if not add and (~is_int).any():
    # ... and also use log-convexity of alpha -> log A_alpha (a log-MGF):
    # linear interpolation between the neighbouring integer orders is a
    # valid upper bound; take the smaller of the two upper bounds.
    interp_pos = np.full(orders.size, -1, np.int64)   # -1: no interpolation
    fl_pos = np.full(orders.size, -1, np.int64)        # -1: log A_1 = 0
    w = np.zeros(orders.size)
    for i, f, c in zip(frac_idx.tolist(), fl.tolist(), ce.tolist()):
      k, j = int_vals[c]
      interp_pos[i] = offsets[k] + j
      if f >= 2:
        k, j = int_vals[f]
        fl_pos[i] = offsets[k] + j
      w[i] = orders[i] - f
    la_flat = xp.logaddexp(0.0, flat)
    la_ext = xp.concatenate([la_flat, xp.zeros(q.shape + (1,))], axis=-1)
    la_fl = xp.take(la_ext, xp.asarray(np.where(fl_pos < 0, flat.shape[-1], fl_pos)),
                     axis=-1)
    la_ce = xp.take(la_ext, xp.asarray(np.maximum(interp_pos, 0)), axis=-1)
    wj = xp.asarray(w)
    interp = xp.where(xp.asarray(interp_pos >= 0), (1.0 - wj) * la_fl + wj * la_ce,
                       xp.inf)
    inflated = xp.minimum(inflated, interp)
  log_a = xp.where(quad_err > 1e-13, inflated, log_a)
  rdp = log_a / (a - 1.0)
  rdp = xp.maximum(rdp, 0.0)
  full = a / (2.0 * ss[..., None] ** 2)           # q == 1: plain Gaussian
  rdp = xp.where(qs[..., None] == 1.0, full if not add else rdp, rdp)
  bad = ~((q >= 0) & (q <= 1) & (sigma > 0))
  return xp.where(bad[..., None], xp.nan, rdp)


def rdp_lane_bytes(orders, direction: str = "both") -> int:
  """Bytes one lane of :func:`poisson_gaussian_rdp_kernel` holds at its peak (an estimate).

  Twice the float64 size of its largest temporaries (the binomial terms of
  each integer block and the quadrature nodes of each group, counted as the
  kernel groups the orders): XLA:CPU's measured temporaries were 1.40 MB a
  lane for ``DEFAULT_ORDERS``, this estimate 2.7 MB.
  """
  orders = np.asarray(orders, np.float64).ravel()
  is_int = _split_orders(orders)
  small = orders <= _SMALL_ALPHA
  elements = 0
  if direction == "add":
    groups = [(small, _QUAD_POINTS_ADD_SMALL), (~small, _QUAD_POINTS)]
  else:
    fl = np.floor(orders[~is_int & (np.ceil(orders) <= _MAX_EXACT_INT_ORDER)])
    need = np.unique(np.concatenate([orders[is_int], fl[fl >= 2], fl + 1.0]))
    lo = 1
    for block in _INT_BLOCKS:
      elements += int(np.count_nonzero((need > lo) & (need <= block))) * block
      lo = block
    groups = [(~is_int & small, _QUAD_POINTS_SMALL), (~is_int & ~small, _QUAD_POINTS)]
  elements += sum(int(np.count_nonzero(m)) * n for m, n in groups)
  return 2 * 8 * (elements + 8 * orders.size)


def rdp_block_lanes(orders, direction: str = "both") -> int:
  """Lanes of the accelerator layout's block program for these orders.

  :func:`jaxacct._core.batching.lanes_for_memory` of :func:`rdp_lane_bytes`
  at a sixteenth of the device's memory: a power of two set by the orders and
  the device alone (64 for ``DEFAULT_ORDERS`` on the CPU's fixed 4 GiB
  budget, more on an accelerator). A few thousand lanes fill a GPU, so the
  block holds a sixteenth of the device's memory, not a quarter of it.
  """
  return lanes_for_memory(rdp_lane_bytes(orders, direction), fraction=_MEMORY_FRACTION,
                          name="orders")


def rdp_in_blocks(orders, *args, direction: str = "both") -> bool:
  """Whether concrete arrays run in the block programs: on the accelerator
  layout (or a lanes mesh) always; on the CPU layout when the whole batch
  would hold more than a quarter of the device's memory
  (:func:`jaxacct._core.batching.whole_batch_fits`; 1e5 sigmas at the
  default orders asked for one 135 GB buffer)."""
  return block_programs() or not whole_batch_fits(broadcast_size(*args),
                                                  rdp_lane_bytes(orders, direction))


def poisson_rdp_query(q, sigma, steps, value, *, orders, quantity, conversion, ns=JAX):
  """RDP curve of ``steps`` composed steps, then epsilon (``quantity="epsilon"``,
  ``value`` a delta) or delta (``value`` an epsilon): ``(value, order)``.

  The kernel of :func:`jaxacct.poisson.epsilon`/``delta`` (``method="rdp"``);
  ``ns``: ``JAX`` (in :data:`poisson_rdp_query_jit`) or ``HOST`` (a scalar
  question). Shapes broadcast; lanes are the leading axes.
  """
  orders_np = np.asarray(orders)
  rdp = poisson_gaussian_rdp_kernel(orders_np, q, sigma, "both", ns)
  kernel = rdp_to_epsilon_kernel if quantity == "epsilon" else rdp_to_delta_kernel
  return kernel(ns.xp.asarray(orders_np), rdp * steps[..., None], value, conversion, ns)


@functools.partial(jit, static_argnames=("orders", "quantity", "conversion"))
def poisson_rdp_query_jit(q, sigma, steps, value, *, orders, quantity, conversion):
  """:func:`poisson_rdp_query` in one compiled program of the whole batch (the
  CPU layout, and traced input on either layout)."""
  return poisson_rdp_query(q, sigma, steps, value, orders=orders, quantity=quantity,
                           conversion=conversion)


@functools.partial(jit, static_argnames=("orders", "quantity", "conversion"),
                   compiler_options=ACCELERATOR_OPTIONS)
def poisson_rdp_block_jit(q, sigma, steps, value, *, orders, quantity, conversion):
  """The accelerator layout's block program: :func:`poisson_rdp_query` at
  :func:`rdp_block_lanes` lanes, called at the top level (XLA takes compiler
  options only there) by :func:`poisson_rdp_query_blocks`."""
  return poisson_rdp_query(q, sigma, steps, value, orders=orders, quantity=quantity,
                           conversion=conversion)


def poisson_rdp_query_blocks(q, sigma, steps, value, *, orders, quantity, conversion):
  """:data:`poisson_rdp_block_jit` over concrete arrays in blocks of
  :func:`rdp_block_lanes` lanes (:func:`run_blocks`) where
  :func:`rdp_in_blocks`, else :data:`poisson_rdp_query_jit` of the whole batch."""
  if not rdp_in_blocks(orders, q, sigma, steps, value):
    return poisson_rdp_query_jit(q, sigma, steps, value, orders=tuple(orders),
                                 quantity=quantity, conversion=conversion)
  program = functools.partial(poisson_rdp_block_jit, orders=tuple(orders),
                              quantity=quantity, conversion=conversion)
  return run_blocks(program, (q, sigma, steps, value), rdp_block_lanes(orders))


def _rdp_blocks(q, sigma, *, orders, direction):
  if not rdp_in_blocks(orders, q, sigma, direction=direction):
    return _poisson_rdp_jit(q, sigma, orders=orders, direction=direction)
  program = functools.partial(_poisson_rdp_block, orders=orders, direction=direction)
  return run_blocks(program, (q, sigma), rdp_block_lanes(orders, direction))


def poisson_gaussian_rdp(orders=DEFAULT_ORDERS, *, q, sigma,
                         direction: str = "both"):
  r"""RDP of the Poisson-subsampled Gaussian mechanism (one step).

  Mironov, Talwar & Zhang, arXiv:1908.10530v1, Sec. 3 (docs/bounds/poisson.md
  for the evaluation). ``"both"`` and ``"remove"`` return
  :math:`\log A_\alpha/(\alpha-1)`, which dominates the add direction
  (MTZ19); ``"add"`` returns :math:`\log B_\alpha/(\alpha-1)` by quadrature.

  Args:
    orders: 1-D concrete array of Renyi orders > 1 (default
      ``DEFAULT_ORDERS``). Must be concrete (it selects the algorithm).
    q: sampling probability in [0, 1]; any shape S (broadcast with sigma).
    sigma: noise multiplier > 0.
    direction: ``"both"`` (default), ``"remove"`` or ``"add"``.

  Returns:
    float64 array of shape ``broadcast(q, sigma).shape + (len(orders),)``.

  Bound: exact. Under jit, invalid lanes are NaN.

  Example:
    >>> import jaxacct
    >>> float(jaxacct.poisson.poisson_gaussian_rdp([2.0], q=0.01, sigma=1.0)[0])  # doctest: +ELLIPSIS
    0.000171...
  """
  orders_np = checks.check_orders(orders)
  checks.check_direction(direction)
  def validate():
    checks.check_probability("q", q)
    checks.check_sigma("sigma", sigma)
  eager = functools.partial(_poisson_rdp_jit, orders=tuple(orders_np.tolist()),
                            direction=direction)
  if np.ndim(q) or np.ndim(sigma):
    # arrays: one block program and a host loop on the accelerator layout, or
    # on the CPU layout where the whole batch would not fit (rdp_in_blocks)
    eager = functools.partial(_rdp_blocks, orders=tuple(orders_np.tolist()),
                              direction=direction)
  return dispatch(lambda q, s: poisson_gaussian_rdp_kernel(orders_np, q, s, direction),
                  (q, sigma), validate, eager=eager)
