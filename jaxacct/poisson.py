r"""Poisson-subsampled Gaussian: epsilon/delta front doors, calibration.

Each record joins each step independently with probability ``q``; the step
adds Gaussian noise of standard deviation ``sigma`` (sensitivity 1). The RDP
curve (Mironov, Talwar & Zhang, arXiv:1908.10530v1, Sec. 3) is computed by
:mod:`jaxacct._core.subsampled_gaussian` (its docstring gives the numerics),
re-exported here as :func:`poisson_gaussian_rdp`.

Bound: upper (RDP composition with the tight conversion, or the tight PLD).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks
from jaxacct._core.conversion import rdp_to_delta_kernel, rdp_to_epsilon_kernel
from jaxacct._core.dtype import x64_boundary
from jaxacct._core.namespace import JAX, host_call, host_scalars, kernel_arg
from jaxacct._core.orders import DEFAULT_ORDERS
from jaxacct._core.results import DeltaResult, EpsilonResult
from jaxacct._core.solve import bisect, bisect_int, require_feasible, search_from_hint_host
from jaxacct._core.subsampled_gaussian import (poisson_gaussian_rdp,
                                               poisson_gaussian_rdp_kernel)
from jaxacct._core.compiled import jit

__all__ = ["poisson_gaussian_rdp", "epsilon", "delta", "calibrate_sigma",
           "calibrate_num_steps", "calibrate_q"]


def _validate_common(q, sigma, num_steps):
  checks.check_probability("q", q)
  checks.check_positive("sigma", sigma)
  checks.check_int("num_steps", num_steps, min_value=1)


def _check_target(epsilon, delta, orders):
  """Checks a calibration target (epsilon > 0, delta in (0, 1)); returns the orders."""
  checks.check_positive("epsilon", epsilon)
  checks.check_delta(delta)
  return checks.check_orders(DEFAULT_ORDERS if orders is None else orders)


def _query(quantity, value, *, q, sigma, num_steps, orders, method, conversion):
  """The one query behind :func:`epsilon` and :func:`delta`.

  ``quantity`` is ``"epsilon"`` (``value`` is a delta) or ``"delta"``
  (``value`` is an epsilon); returns the matching result type.
  """
  is_eps = quantity == "epsilon"
  _validate_common(q, sigma, num_steps)
  if is_eps:
    checks.check_delta(value)
  else:
    checks.check_range("epsilon", value)
  checks.check_choice("method", method, ("rdp", "pld"))
  checks.check_choice("conversion", conversion, checks.CONVERSIONS)
  given = "delta" if is_eps else "epsilon"
  cls = EpsilonResult if is_eps else DeltaResult
  if method == "pld":
    from jaxacct import pld as _pld
    front = _pld.poisson_gaussian_epsilon if is_eps else _pld.poisson_gaussian_delta
    v = getattr(front(sigma=sigma, q=q, num_steps=num_steps, **{given: value}), quantity)
    return cls(**{quantity: v, given: value}, method="pld", bound="upper")
  orders_np = checks.check_orders(DEFAULT_ORDERS if orders is None else orders)
  args = (q, sigma, num_steps, value)
  if host_scalars(*args):
    # a scalar question: the same formula in NumPy/SciPy, no compiled program
    v, order = host_call(_rdp_query, *(np.float64(x) for x in args), orders=orders_np,
                         quantity=quantity, conversion=conversion)
    v, order = np.float64(v), np.float64(order)
  else:
    # one compiled program per (orders, quantity, conversion); q, sigma,
    # num_steps and the target are traced arguments (host values, no eager jnp)
    v, order = _rdp_query_jit(*(kernel_arg(x) for x in args),
                              orders=tuple(orders_np.tolist()), quantity=quantity,
                              conversion=conversion)
  return cls(**{quantity: v, given: value}, method="rdp", bound="upper", order=order)


def _rdp_query(q, sigma, steps, value, *, orders, quantity, conversion, ns=JAX):
  """RDP curve, composition and conversion of :func:`epsilon`/:func:`delta`.

  ``ns``: ``JAX`` (inside :func:`_rdp_query_jit`) or ``HOST`` (scalar questions).
  """
  orders_np = np.asarray(orders)
  rdp = poisson_gaussian_rdp_kernel(orders_np, q, sigma, "both", ns)
  kernel = rdp_to_epsilon_kernel if quantity == "epsilon" else rdp_to_delta_kernel
  return kernel(ns.xp.asarray(orders_np), rdp * steps[..., None], value, conversion, ns)


@functools.partial(jit, static_argnames=("orders", "quantity", "conversion"))
def _rdp_query_jit(q, sigma, steps, value, *, orders, quantity, conversion):
  """:func:`_rdp_query` in one compiled program (arrays and traced input)."""
  return _rdp_query(q, sigma, steps, value, orders=orders, quantity=quantity,
                    conversion=conversion)


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

  Compiled programs: a scalar question (every argument a Python or NumPy
  scalar) compiles NONE, for either method: the same formulas run in
  NumPy/SciPy on the host (:mod:`jaxacct._core.namespace`). Arrays and
  traced input: ``method="rdp"`` compiles one program per (orders,
  conversion, input shapes); q, sigma, num_steps and delta are traced, so
  new values compile nothing. ``method="pld"``: see
  :func:`jaxacct.pld.poisson_gaussian_epsilon` (shape buckets set by sigma,
  q and num_steps).

  Bound: upper. Inputs broadcast; arrays give arrays.
  """
  return _query("epsilon", delta, q=q, sigma=sigma, num_steps=num_steps, orders=orders,
                method=method, conversion=conversion)


@x64_boundary
def delta(*, q, sigma, num_steps, epsilon, orders=None,
          method: str = "rdp", conversion: str = "tight") -> DeltaResult:
  """Delta at ``epsilon`` of ``num_steps`` Poisson-subsampled Gaussian steps.

  Same arguments as :func:`epsilon`, with ``epsilon`` (real) instead of delta.

  Bound: upper.
  """
  return _query("delta", epsilon, q=q, sigma=sigma, num_steps=num_steps, orders=orders,
                method=method, conversion=conversion)


def _eps_fn(orders_np, conversion):
  orders = jnp.asarray(orders_np)

  def eps_of(q, sigma, steps, delta):
    rdp = poisson_gaussian_rdp_kernel(orders_np, q, sigma, "both")
    e, _ = rdp_to_epsilon_kernel(orders, rdp * jnp.asarray(steps, jnp.float64)[..., None],
                           delta, conversion)
    return e
  return eps_of


@x64_boundary
def calibrate_sigma(*, q, num_steps, epsilon, delta, orders=None,
                    sigma_range=(0.05, 1000.0), num_iters: int = 30,
                    method: str = "rdp", rtol: float = 1e-3):
  """Smallest sigma (to the stated tolerance, rounded up) meeting (epsilon, delta).

  ``method="rdp"``: vectorised, ``epsilon``/``delta``/``q``/``num_steps``
  broadcast, and the whole vector of targets is solved in one compiled
  bracketing search (Illinois regula falsi on ``log sigma``, every third step
  a halving; 30 iterations: relative tolerance ~1e-10 or better) on RDP with
  the tight conversion.

  ``method="pld"``: the tight PLD of :func:`epsilon` with ``method="pld"``
  (pessimistic connect-the-dots PLD composed by FFT, both directions). Per
  target (eager; new sigmas in the same grid bucket compile nothing): the
  RDP sigma (an upper bound on the answer in practice, checked) and a
  bracket below it found by steps of 1.25, then Illinois regula falsi on
  log(eps_pld) in log sigma until the bracket ratio is <= 1 + ``rtol``;
  every returned sigma was evaluated feasible and sigma / (1 + rtol) lies in
  an evaluated-infeasible bracket end or below.

  Args:
    q, num_steps, epsilon, delta: targets (broadcast); num_steps is the
      TOTAL number of steps.
    orders, num_iters: RDP only.
    sigma_range: (lo, hi) search bracket.
    method: "rdp" or "pld".
    rtol: relative tolerance on sigma for ``method="pld"``, in [1e-6, 0.1].

  Returns:
    float64 array of sigmas; each is feasible (its epsilon <= target).

  Raises:
    ValueError: invalid input, or no sigma in ``sigma_range`` is feasible.

  Bound: upper (the returned sigma is certified sufficient by the method's
  upper bound).
  """
  checks.check_probability("q", q)
  checks.check_int("num_steps", num_steps, min_value=1)
  orders_np = _check_target(epsilon, delta, orders)
  checks.check_int("num_iters", num_iters, min_value=1, max_value=10_000)
  checks.check_bracket("sigma_range", sigma_range)
  checks.check_choice("method", method, ("rdp", "pld"))
  checks.check_range("rtol", rtol, 1e-6, 0.1)
  lo, hi = sigma_range
  if method == "pld":
    return _calibrate_sigma_pld(q, num_steps, epsilon, delta, float(lo), float(hi),
                                float(rtol), orders_np, num_iters)
  res = _calibrate_sigma_jit(jnp.asarray(q, jnp.float64),
                             jnp.asarray(num_steps, jnp.float64),
                             jnp.asarray(epsilon, jnp.float64),
                             jnp.asarray(delta, jnp.float64), float(lo),
                             float(hi), orders=tuple(orders_np.tolist()),
                             num_iters=num_iters)
  return require_feasible(res, "sigma", lo, hi, target="the (epsilon, delta) target")


def _calibrate_sigma_pld(q, num_steps, epsilon, delta, lo, hi, rtol, orders_np, num_iters):
  """Eager tight calibration on the PLD epsilon (see :func:`calibrate_sigma`)."""
  from jaxacct import pld as _pld
  q_, t_, e_, d_ = np.broadcast_arrays(np.asarray(q, np.float64), np.asarray(num_steps),
                                       np.asarray(epsilon, np.float64),
                                       np.asarray(delta, np.float64))
  out = np.empty(q_.shape)
  for idx in np.ndindex(q_.shape):
    qq, tt, ee, dd = float(q_[idx]), int(t_[idx]), float(e_[idx]), float(d_[idx])
    target = ee * (1.0 - 1e-12)

    def f(sig):   # log(eps_pld / target): feasible iff <= 0
      e = float(_pld.poisson_gaussian_epsilon(sigma=sig, q=qq, num_steps=tt, delta=dd).epsilon)
      return math.log(max(e, 1e-300) / target) if math.isfinite(e) else math.inf

    try:
      b = float(_calibrate_sigma_jit(jnp.asarray(qq), jnp.asarray(float(tt)), jnp.asarray(ee),
                                     jnp.asarray(dd), lo, hi,
                                     orders=tuple(orders_np.tolist()),
                                     num_iters=num_iters).x)
    except Exception:  # noqa: BLE001 -- the RDP start is only a hint
      b = hi
    out[idx] = search_from_hint_host(
        f, b, lo, hi, rtol=rtol,
        error=(f"no sigma in [{lo:g}, {hi:g}] meets epsilon={ee:g} at delta={dd:g} "
               f"(q={qq:g}, num_steps={tt}) with method='pld'; widen sigma_range or "
               "relax the target."))
  return out if out.ndim else float(out)


@functools.partial(jit, static_argnames=("orders", "num_iters"))
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
  integer in ``[1, max_steps]`` (:func:`jaxacct._core.solve.bisect_int`).
  Vectorised over broadcast inputs.

  Raises:
    ValueError: invalid input, or even one step exceeds a target.
  """
  checks.check_probability("q", q)
  checks.check_positive("sigma", sigma)
  orders_np = _check_target(epsilon, delta, orders)
  checks.check_int("max_steps", max_steps, min_value=1, max_value=2**52)
  res = _calibrate_steps_jit(jnp.asarray(q, jnp.float64),
                             jnp.asarray(sigma, jnp.float64),
                             jnp.asarray(epsilon, jnp.float64),
                             jnp.asarray(delta, jnp.float64),
                             float(max_steps), orders=tuple(orders_np.tolist()))
  x = require_feasible(res, "num_steps", 1, max_steps, target="the (epsilon, delta) target")
  return x.astype(jnp.int64)


@functools.partial(jit, static_argnames=("orders",))
def _calibrate_steps_jit(q, sigma, eps, delta, max_steps, *, orders):
  orders_np = np.asarray(orders)
  a = jnp.asarray(orders_np)
  q, sigma, eps, delta = jnp.broadcast_arrays(q, sigma, eps, delta)
  rdp = poisson_gaussian_rdp_kernel(orders_np, q, sigma, "both")

  def eps_of(steps):
    e, _ = rdp_to_epsilon_kernel(a, rdp * steps[..., None], delta, "tight")
    return e

  return bisect_int(lambda n: eps_of(n) <= eps * (1 - 1e-12), jnp.ones(q.shape),
                    jnp.full(q.shape, max_steps), num_iters=64)


@x64_boundary
def calibrate_q(*, sigma, num_steps, epsilon, delta, orders=None,
                num_iters: int = 30):
  """Largest sampling rate q in [0, 1] meeting (epsilon, delta) (rounded down).

  Vectorised over broadcast inputs. The bracket search
  (:func:`jaxacct._core.solve.bisect`, ``num_iters`` Illinois steps on
  [0, 1]) keeps the feasible end.

  Raises:
    ValueError: invalid input, or no q > 0 probed meets a target (q = 0
      always does: epsilon is 0 there; such a target needs more ``num_iters``).
  """
  checks.check_positive("sigma", sigma)
  checks.check_int("num_steps", num_steps, min_value=1)
  orders_np = _check_target(epsilon, delta, orders)
  checks.check_int("num_iters", num_iters, min_value=1, max_value=10_000)
  res = _calibrate_q_jit(jnp.asarray(sigma, jnp.float64),
                         jnp.asarray(num_steps, jnp.float64),
                         jnp.asarray(epsilon, jnp.float64),
                         jnp.asarray(delta, jnp.float64),
                         orders=tuple(orders_np.tolist()), num_iters=num_iters)
  # eps(q = 0) = 0, so q = 0 is always feasible: a 0 means no probed q > 0 was.
  res = res._replace(ok=res.ok & (res.x > 0))
  return require_feasible(res, "q", 0.0, 1.0,
                          target="the (epsilon, delta) target with q > 0 (or raise num_iters)")


@functools.partial(jit, static_argnames=("orders", "num_iters"))
def _calibrate_q_jit(sigma, steps, eps, delta, *, orders, num_iters):
  eps_of = _eps_fn(np.asarray(orders), "tight")
  sigma, steps, eps, delta = jnp.broadcast_arrays(sigma, steps, eps, delta)
  return bisect(lambda q: eps_of(q, sigma, steps, delta) - eps * (1 - 1e-12),
                jnp.zeros(sigma.shape), jnp.ones(sigma.shape),
                increasing=True, num_iters=num_iters, method="illinois")
