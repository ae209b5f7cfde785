r"""Poisson-subsampled Gaussian: RDP kernels, epsilon/delta front doors, calibration.

Each record joins each step independently with probability ``q``; the step
adds Gaussian noise of standard deviation ``sigma`` (sensitivity 1).

RDP. With :math:`\mu_0=\mathcal N(0,\sigma^2)`, :math:`\mu_1=\mathcal N(1,\sigma^2)`
and :math:`\mu=(1-q)\mu_0+q\mu_1`, the remove direction is
:math:`A_\alpha = E_{\mu_0}[(\mu/\mu_0)^\alpha]` and the add direction
:math:`B_\alpha = E_{\mu}[(\mu_0/\mu)^\alpha]`; :math:`R_\alpha=\log(\cdot)/(\alpha-1)`.
Mironov, Talwar & Zhang, "Renyi differential privacy of the sampled Gaussian
mechanism", arXiv:1908.10530v1, Sec. 3, show :math:`A_\alpha \ge B_\alpha`, so
``direction="both"`` (the max) is :math:`A_\alpha`; ``tests/test_poisson.py``
checks :math:`B_\alpha \le A_\alpha` numerically on a grid.

Numerics (no catastrophic cancellation, all in log space):

* integer orders <= 1024: the exact binomial expansion (MTZ19 Sec. 3.3, the
  integer case) written as a sum of *positive* terms,
  :math:`A_\alpha - 1 = \sum_{k\ge2}\binom{\alpha}{k}q^k(1-q)^{\alpha-k}
  (e^{k(k-1)/(2\sigma^2)}-1)` (the k = 0, 1 terms cancel against the 1), so
  :math:`\log(A_\alpha-1)` has full relative precision even at q = 1e-6,
  where ``log A`` itself is below the float64 resolution of 1 + x;
* other orders (fractional, or integer > 1024): MTZ19 give a convergent
  series for fractional orders; its tail decays only polynomially (like
  :math:`i^{-\alpha-1}` when q is not small), so a fixed-length jittable
  truncation is inaccurate. We evaluate the same quantity as the integral
  :math:`A_\alpha-1=E_{u\sim N(0,1)}[f(x(u))]`,
  :math:`f(x)=(1+x)^\alpha-1-\alpha x\ge 0`,
  :math:`x=q(e^{u/\sigma-1/(2\sigma^2)}-1)` (the linear term has mean zero),
  by the trapezoidal rule on ``[-14, alpha/sigma + 14]`` with 320 points
  for alpha <= 16 and 8192 points above.
  The integrand is analytic in the strip :math:`|\Im u|<\pi\sigma`, so the
  relative error is about :math:`e^{-2\pi^2\sigma/h}`, below 1e-13 for
  alpha <= 16 at sigma >= 0.3 and for :math:`\alpha/\sigma^2 \lesssim 1500`
  above (all orders that matter at sigma >= 0.3). Where the estimate exceeds
  1e-13 (smaller sigma, huge alpha/sigma^2) we return the smaller of two
  upper bounds: A inflated by 100x the estimate, and the log-convex
  interpolation of log A between the neighbouring integer orders (valid
  because alpha -> log A_alpha is a log moment generating function). The MTZ19 series at
  50 digits (mpmath) is the test oracle.

Bound: exact RDP (upper bound on the mechanism's RDP, tight for the
dominating pair).
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks
from jaxacct._core.calibrate import bisect
from jaxacct._core.conversion import _rdp_to_delta, _rdp_to_epsilon
from jaxacct._core.dtype import require_x64, x64_boundary
from jaxacct._core.logmath import log1m_exp, log_binom, log_expm1, logsumexp
from jaxacct._core.orders import DEFAULT_ORDERS
from jaxacct._core.results import DeltaResult, EpsilonResult

__all__ = ["poisson_gaussian_rdp", "epsilon", "delta", "calibrate_sigma",
           "calibrate_num_steps", "calibrate_q"]

_MAX_EXACT_INT_ORDER = 1024
_INT_BLOCKS = (256, 1024)   # integer orders are summed in blocks of static length
_QUAD_POINTS = 8192
_QUAD_POINTS_SMALL = 320    # enough for alpha <= 16 (see module docstring)
_SMALL_ALPHA = 16.0
_QUAD_HALF_WIDTH = 14.0     # Gaussian tail e^{-98} beyond it



def _log_a_minus_1_int(alpha, q, sigma, max_order):
  """log(A_alpha - 1) for integer alpha in [2, max_order] by positive-term sum.

  alpha: (A,) float64 integer-valued; q, sigma: shape S. Returns S + (A,).
  """
  k = jnp.arange(2, max_order + 1, dtype=jnp.float64)  # (K,)
  a = alpha[:, None]                                             # (A, 1)
  q = q[..., None, None]
  sigma = sigma[..., None, None]
  logq = jnp.log(q)
  log1q = jnp.log1p(-q)
  rest = a - k
  tail = jnp.where(rest == 0, 0.0, rest * log1q)
  kk = k * logq
  kk = jnp.where(q == 0, -jnp.inf, kk)
  terms = (log_binom(a, jnp.minimum(k, a)) + kk + tail
           + log_expm1((k * k - k) / (2.0 * sigma**2)))
  terms = jnp.where(k <= a, terms, -jnp.inf)
  return logsumexp(terms, axis=-1)


def _log_one_plus(gamma, logabs_x, x):
  """log(1 + gamma * x) for gamma * x > -1, given x and log|x|."""
  pos = gamma * x > 0
  big = jnp.logaddexp(0.0, jnp.log(jnp.abs(gamma)) + logabs_x)
  small = jnp.log1p(jnp.where(pos, 0.0, gamma * x))
  return jnp.where(pos, big, small)


def _log_f(gamma, ell, x, logabs_x):
  """log((1+x)^gamma - 1 - gamma*x) >= -inf, for gamma > 1 or gamma < 0.

  ell = log(1 + x) (computed without cancellation by the caller).
  """
  gx = gamma * x
  # (a) |gamma x| <= 0.1: series sum_{k>=2} C(gamma,k) x^k, 11 terms (error < 1e-16 rel).
  c = gamma * (gamma - 1.0) / 2.0
  s = c
  xs = jnp.where(jnp.abs(gx) <= 0.1, x, 0.0)
  term = c
  for kk in range(3, 14):
    term = term * (gamma - kk + 1.0) / kk * xs
    s = s + term
  log_a = 2.0 * logabs_x + jnp.log(jnp.abs(s))
  # (b) moderate: expm1(gamma*ell) - gamma*x.
  gl = gamma * ell
  gl_b = jnp.minimum(gl, 30.0)
  fb = jnp.expm1(gl_b) - jnp.where(jnp.abs(gx) > 0.1, gx, 1.0)
  log_b = jnp.log(jnp.maximum(fb, 1e-300))
  # (c) gamma*ell > 30: log f = gamma*ell + log(1 - (1+gamma x) e^{-gamma ell}).
  l1gx = _log_one_plus(gamma, logabs_x, x)
  log_c = gl + log1m_exp(jnp.minimum(l1gx - gl, 0.0))
  out = jnp.where(jnp.abs(gx) <= 0.1, log_a, jnp.where(gl <= 30.0, log_b, log_c))
  return out


def _log_moment_minus_1_quad(gamma, alpha_for_range, q, sigma,
                             num_points=_QUAD_POINTS):
  """log(E_{mu0}[(mu/mu0)^gamma] - 1) by trapezoidal quadrature.

  gamma: (A,); q, sigma: shape S. Returns S + (A,).
  """
  q = q[..., None, None]
  sigma = sigma[..., None, None]
  g = gamma[:, None]
  hi = jnp.maximum(_QUAD_HALF_WIDTH,
                   alpha_for_range[:, None] / sigma + _QUAD_HALF_WIDTH)
  lo = -_QUAD_HALF_WIDTH
  t = jnp.linspace(0.0, 1.0, num_points)
  u = lo + (hi - lo) * t                                     # S + (A, N)
  h = (hi - lo) / (num_points - 1)
  v = u / sigma - 0.5 / sigma**2
  logq = jnp.log(q)
  log1q = jnp.log1p(-q)
  ell = jnp.logaddexp(log1q, logq + v)                       # log(1+x)
  vs = jnp.clip(v, -700.0, 700.0)
  x = q * jnp.expm1(vs)
  vpos = jnp.maximum(v, 1e-300)
  vneg = jnp.minimum(v, -1e-300)
  log_abs_em1 = jnp.where(v > 0, vpos + log1m_exp(-vpos), log1m_exp(vneg))
  logabs_x = logq + log_abs_em1
  logabs_x = jnp.where(v == 0, -jnp.inf, logabs_x)
  log_phi = -0.5 * u**2 - 0.5 * jnp.log(2 * jnp.pi)
  lf = _log_f(g, ell, x, logabs_x)
  log_int = logsumexp(log_phi + lf, axis=-1) + jnp.log(h)[..., 0]
  # Estimated relative trapezoid error (analytic strip |Im u| < pi sigma).
  err = jnp.exp(-2.0 * jnp.pi**2 * sigma[..., 0] / h[..., 0])
  return log_int, err


def _split_orders(orders: np.ndarray):
  is_int = (orders == np.round(orders)) & (orders >= 2) & (
      orders <= _MAX_EXACT_INT_ORDER)
  return is_int


@functools.partial(jax.jit, static_argnames=("orders", "direction"))
def _poisson_rdp_jit(q, sigma, *, orders, direction):
  return _poisson_rdp_impl(np.asarray(orders), q, sigma, direction)


def _poisson_rdp_impl(orders: np.ndarray, q, sigma, direction: str):
  require_x64("poisson_gaussian_rdp")
  q = jnp.asarray(q, jnp.float64)
  sigma = jnp.asarray(sigma, jnp.float64)
  q, sigma = jnp.broadcast_arrays(q, sigma)
  is_int = _split_orders(orders)
  out_shape = q.shape + (orders.size,)
  log_am1 = jnp.full(out_shape, -jnp.inf)
  qs = jnp.clip(q, 0.0, 1.0)
  ss = jnp.where(sigma > 0, sigma, 1.0)
  small = orders <= _SMALL_ALPHA
  if direction == "add":
    groups = [(small, lambda a: 1.0 - a, _QUAD_POINTS_SMALL),
              (~small, lambda a: 1.0 - a, _QUAD_POINTS)]
  else:
    lo_block = 1
    for block in _INT_BLOCKS:
      sel = is_int & (orders > lo_block) & (orders <= block)
      lo_block = block
      if sel.any():
        idx = np.nonzero(sel)[0]
        vals = _log_a_minus_1_int(jnp.asarray(orders[idx]), qs, ss, block)
        log_am1 = log_am1.at[..., idx].set(vals)
    groups = [(~is_int & small, lambda a: a, _QUAD_POINTS_SMALL),
              (~is_int & ~small, lambda a: a, _QUAD_POINTS)]
  quad_err = jnp.zeros(out_shape)
  for mask, expo, npts in groups:
    if mask.any():
      idx = np.nonzero(mask)[0]
      a = jnp.asarray(orders[idx])
      vals, err = _log_moment_minus_1_quad(expo(a), a, qs, ss, npts)
      log_am1 = log_am1.at[..., idx].set(vals)
      quad_err = quad_err.at[..., idx].set(err)
  a = jnp.asarray(orders)
  log_a = jnp.logaddexp(0.0, log_am1)
  # Where the quadrature error estimate is not negligible (sigma well below
  # 0.3, or alpha/sigma^2 very large), inflate A by 100x the estimate so the
  # value stays an upper bound; elsewhere (err < 1e-13) leave it untouched.
  inflated = log_a + jnp.log1p(100.0 * quad_err)
  if direction != "add" and (~is_int).any():
    # ... and also use log-convexity of alpha -> log A_alpha (a log-MGF):
    # linear interpolation between the neighbouring integer orders is a
    # valid upper bound; take the smaller of the two upper bounds.
    interp = jnp.full(out_shape, jnp.inf)
    frac_idx = np.nonzero(~is_int & (np.ceil(orders) <= _MAX_EXACT_INT_ORDER))[0]
    if frac_idx.size:
      fl = np.floor(orders[frac_idx])
      ce = fl + 1.0
      need = np.unique(np.concatenate([fl[fl >= 2], ce]))
      block = _INT_BLOCKS[0] if need.max() <= _INT_BLOCKS[0] else _INT_BLOCKS[1]
      la_need = jnp.logaddexp(0.0, _log_a_minus_1_int(jnp.asarray(need), qs, ss, block))
      pos = {v: i for i, v in enumerate(need.tolist())}
      la_fl = jnp.stack([la_need[..., pos[v]] if v >= 2 else jnp.zeros(qs.shape)
                         for v in fl.tolist()], axis=-1)
      la_ce = jnp.stack([la_need[..., pos[v]] for v in ce.tolist()], axis=-1)
      w = jnp.asarray(orders[frac_idx] - fl)
      interp = interp.at[..., frac_idx].set((1.0 - w) * la_fl + w * la_ce)
    inflated = jnp.minimum(inflated, interp)
  log_a = jnp.where(quad_err > 1e-13, inflated, log_a)
  rdp = log_a / (a - 1.0)
  rdp = jnp.maximum(rdp, 0.0)
  full = a / (2.0 * ss[..., None] ** 2)           # q == 1: plain Gaussian
  rdp = jnp.where(qs[..., None] == 1.0, full if direction != "add" else rdp, rdp)
  bad = ~((q >= 0) & (q <= 1) & (sigma > 0))
  return jnp.where(bad[..., None], jnp.nan, rdp)


def poisson_gaussian_rdp(orders=DEFAULT_ORDERS, *, q, sigma,
                         direction: str = "both"):
  r"""RDP of the Poisson-subsampled Gaussian mechanism (one step).

  Mironov, Talwar & Zhang, arXiv:1908.10530v1, Sec. 3 (see module docstring
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
    >>> float(jaxacct.poisson_gaussian_rdp([2.0], q=0.01, sigma=1.0)[0])  # doctest: +ELLIPSIS
    0.000171...
  """
  orders_np = checks.check_orders(orders)
  checks.check_direction(direction)
  if checks.is_concrete((q, sigma)):
    checks.check_probability("q", q)
    checks.check_positive("sigma", sigma)
    return x64_boundary(_poisson_rdp_jit)(q, sigma, orders=tuple(orders_np.tolist()),
                                          direction=direction)
  return _poisson_rdp_impl(orders_np, q, sigma, direction)


def _validate_common(q, sigma, num_steps):
  checks.check_probability("q", q)
  checks.check_positive("sigma", sigma)
  checks.check_int("num_steps", num_steps, min_value=1)


@x64_boundary
def epsilon(*, q, sigma, num_steps, delta, orders=None,
            method: str = "rdp", conversion: str = "tight") -> EpsilonResult:
  """Epsilon at ``delta`` of ``num_steps`` Poisson-subsampled Gaussian steps.

  Args:
    q: sampling probability in [0, 1].
    sigma: noise multiplier > 0.
    num_steps: integer >= 1.
    delta: in (0, 1).
    orders: Renyi orders for ``method="rdp"`` (default ``DEFAULT_ORDERS``).
    method: ``"rdp"`` (RDP composition + ``conversion``) or ``"pld"`` (tight
      FFT-composed privacy loss distribution, :mod:`jaxacct.pld`).
    conversion: ``"tight"`` or ``"classic"`` (RDP only).

  Returns:
    ``EpsilonResult``; ``order`` is the optimal Renyi order for RDP.

  Bound: upper. Inputs broadcast; arrays give arrays.
  """
  _validate_common(q, sigma, num_steps)
  checks.check_delta(delta)
  checks.check_choice("method", method, ("rdp", "pld"))
  if method == "pld":
    from jaxacct import pld as _pld
    eps = _pld.poisson_gaussian_epsilon(sigma=sigma, q=q, num_steps=num_steps,
                                        delta=delta)
    return EpsilonResult(epsilon=eps, delta=delta, method="pld", bound="upper")
  orders = DEFAULT_ORDERS if orders is None else orders
  rdp = poisson_gaussian_rdp(orders, q=q, sigma=sigma)
  steps = jnp.asarray(num_steps, jnp.float64)[..., None]
  eps, order = _rdp_to_epsilon(jnp.asarray(orders, jnp.float64), rdp * steps,
                               jnp.asarray(delta, jnp.float64), conversion)
  return EpsilonResult(epsilon=eps, delta=delta, method="rdp", bound="upper",
                       order=order)


@x64_boundary
def delta(*, q, sigma, num_steps, epsilon, orders=None,
          method: str = "rdp", conversion: str = "tight") -> DeltaResult:
  """Delta at ``epsilon`` of ``num_steps`` Poisson-subsampled Gaussian steps.

  Same arguments as :func:`epsilon`, with ``epsilon`` (real) instead of delta.

  Bound: upper.
  """
  _validate_common(q, sigma, num_steps)
  checks.check_range("epsilon", epsilon)
  checks.check_choice("method", method, ("rdp", "pld"))
  if method == "pld":
    from jaxacct import pld as _pld
    d = _pld.poisson_gaussian_delta(sigma=sigma, q=q, num_steps=num_steps,
                                    epsilon=epsilon)
    return DeltaResult(delta=d, epsilon=epsilon, method="pld", bound="upper")
  orders = DEFAULT_ORDERS if orders is None else orders
  rdp = poisson_gaussian_rdp(orders, q=q, sigma=sigma)
  steps = jnp.asarray(num_steps, jnp.float64)[..., None]
  d, order = _rdp_to_delta(jnp.asarray(orders, jnp.float64), rdp * steps,
                           jnp.asarray(epsilon, jnp.float64), conversion)
  return DeltaResult(delta=d, epsilon=epsilon, method="rdp", bound="upper",
                     order=order)


def _eps_fn(orders_np, conversion):
  orders = jnp.asarray(orders_np)

  def eps_of(q, sigma, steps, delta):
    rdp = _poisson_rdp_impl(orders_np, q, sigma, "both")
    e, _ = _rdp_to_epsilon(orders, rdp * jnp.asarray(steps, jnp.float64)[..., None],
                           delta, conversion)
    return e
  return eps_of


def _finish_calibration(res, name, lo, hi):
  if not bool(jnp.all(res.ok)):
    raise ValueError(
        f"no {name} in [{lo:g}, {hi:g}] meets the target; widen the bracket "
        "or relax the target.")
  return res.x


@x64_boundary
def calibrate_sigma(*, q, num_steps, epsilon, delta, orders=None,
                    sigma_range=(0.05, 1000.0), num_iters: int = 30):
  """Smallest sigma (to bisection tolerance, rounded up) meeting (epsilon, delta).

  Vectorised: ``epsilon``/``delta``/``q``/``num_steps`` broadcast, and the
  whole vector of targets is solved in one compiled bracketing search
  (Illinois regula falsi on ``log sigma``, every third step a halving;
  30 iterations: relative tolerance ~1e-10 or better). Uses RDP with the tight
  conversion.

  Returns:
    float64 array of sigmas; each is feasible (its epsilon <= target).

  Raises:
    ValueError: invalid input, or no sigma in ``sigma_range`` is feasible.
  """
  checks.check_probability("q", q)
  checks.check_int("num_steps", num_steps, min_value=1)
  checks.check_positive("epsilon", epsilon)
  checks.check_delta(delta)
  orders_np = checks.check_orders(DEFAULT_ORDERS if orders is None else orders)
  lo, hi = sigma_range
  res = _calibrate_sigma_jit(jnp.asarray(q, jnp.float64),
                             jnp.asarray(num_steps, jnp.float64),
                             jnp.asarray(epsilon, jnp.float64),
                             jnp.asarray(delta, jnp.float64), float(lo),
                             float(hi), orders=tuple(orders_np.tolist()),
                             num_iters=num_iters)
  return _finish_calibration(res, "sigma", lo, hi)


@functools.partial(jax.jit, static_argnames=("orders", "num_iters"))
def _calibrate_sigma_jit(q, steps, eps, delta, lo, hi, *, orders, num_iters):
  eps_of = _eps_fn(np.asarray(orders), "tight")
  q, steps, eps, delta = jnp.broadcast_arrays(q, steps, eps, delta)
  # 1e-12 relative margin: a later evaluation compiled differently may
  # round differently; the calibrated value must stay feasible.
  return bisect(lambda s: eps_of(q, s, steps, delta) - eps * (1 - 1e-12),
                jnp.full(q.shape, lo), jnp.full(q.shape, hi),
                increasing=False, num_iters=num_iters, log_scale=True,
                method="illinois")


@x64_boundary
def calibrate_num_steps(*, q, sigma, epsilon, delta, orders=None,
                        max_steps: int = 10**9):
  """Largest number of steps whose epsilon at ``delta`` is <= ``epsilon``.

  RDP composes linearly in the number of steps, so this bisects on an
  integer in ``[1, max_steps]``. Returns 0 where even one step exceeds the
  target. Vectorised over broadcast inputs.
  """
  checks.check_probability("q", q)
  checks.check_positive("sigma", sigma)
  checks.check_positive("epsilon", epsilon)
  checks.check_delta(delta)
  orders_np = checks.check_orders(DEFAULT_ORDERS if orders is None else orders)
  return _calibrate_steps_jit(jnp.asarray(q, jnp.float64),
                              jnp.asarray(sigma, jnp.float64),
                              jnp.asarray(epsilon, jnp.float64),
                              jnp.asarray(delta, jnp.float64),
                              float(max_steps), orders=tuple(orders_np.tolist()))


@functools.partial(jax.jit, static_argnames=("orders",))
def _calibrate_steps_jit(q, sigma, eps, delta, max_steps, *, orders):
  orders_np = np.asarray(orders)
  a = jnp.asarray(orders_np)
  q, sigma, eps, delta = jnp.broadcast_arrays(q, sigma, eps, delta)
  rdp = _poisson_rdp_impl(orders_np, q, sigma, "both")

  def eps_of(steps):
    e, _ = _rdp_to_epsilon(a, rdp * steps[..., None], delta, "tight")
    return e

  def body(_, ab):
    lo, hi = ab                      # lo feasible (or 0), hi infeasible
    mid = jnp.floor(0.5 * (lo + hi))
    feas = eps_of(jnp.maximum(mid, 1.0)) <= eps * (1 - 1e-12)
    return jnp.where(feas, mid, lo), jnp.where(feas, hi, mid)

  lo = jnp.zeros(q.shape)
  hi = jnp.full(q.shape, max_steps + 1.0)
  lo, hi = jax.lax.fori_loop(0, 64, body, (lo, hi))
  return lo.astype(jnp.int64)


@x64_boundary
def calibrate_q(*, sigma, num_steps, epsilon, delta, orders=None,
                num_iters: int = 30):
  """Largest sampling rate q in [0, 1] meeting (epsilon, delta) (rounded down).

  Vectorised over broadcast inputs; returns 0 where no positive q works.
  """
  checks.check_positive("sigma", sigma)
  checks.check_int("num_steps", num_steps, min_value=1)
  checks.check_positive("epsilon", epsilon)
  checks.check_delta(delta)
  orders_np = checks.check_orders(DEFAULT_ORDERS if orders is None else orders)
  res = _calibrate_q_jit(jnp.asarray(sigma, jnp.float64),
                         jnp.asarray(num_steps, jnp.float64),
                         jnp.asarray(epsilon, jnp.float64),
                         jnp.asarray(delta, jnp.float64),
                         orders=tuple(orders_np.tolist()), num_iters=num_iters)
  return jnp.where(res.ok, res.x, 0.0)


@functools.partial(jax.jit, static_argnames=("orders", "num_iters"))
def _calibrate_q_jit(sigma, steps, eps, delta, *, orders, num_iters):
  eps_of = _eps_fn(np.asarray(orders), "tight")
  sigma, steps, eps, delta = jnp.broadcast_arrays(sigma, steps, eps, delta)
  return bisect(lambda q: eps_of(q, sigma, steps, delta) - eps * (1 - 1e-12),
                jnp.zeros(sigma.shape), jnp.ones(sigma.shape),
                increasing=True, num_iters=num_iters, method="illinois")
