r"""RDP -> (epsilon, delta) conversion.

Two methods:

* ``"tight"`` (default): Canonne, Kamath & Steinke, "The discrete Gaussian for
  differential privacy", arXiv:2004.00010v5, Prop. 12 (also Asoodeh et al.
  arXiv:2001.05990v1 eq. 20; Balle et al. arXiv:1905.09982v2 Thm 21):

  .. math:: \varepsilon = \rho_\alpha + \log(1-1/\alpha)
            - \frac{\log\delta + \log\alpha}{\alpha-1},
  .. math:: \log\delta = (\alpha-1)(\rho_\alpha-\varepsilon+\log(1-1/\alpha))
            - \log\alpha,

  combined with the KL/total-variation bound
  :math:`\delta(0) \le \sqrt{1-e^{-\rho_\alpha}}` (Bretagnolle-Huber, valid
  because :math:`R_\alpha \ge \mathrm{KL}`). As in dp-accounting 0.6.0, orders
  ``alpha <= 1.01`` are skipped by this formula (it is unstable there and
  never optimal).
* ``"classic"``: Mironov, "Renyi differential privacy", arXiv:1702.07476v3,
  Prop. 3: :math:`\varepsilon = \rho_\alpha + \log(1/\delta)/(\alpha-1)`.

Both minimise over the order grid and return the minimising order. The
functions are jittable; ``rdp`` has shape ``(..., len(orders))`` and
``delta``/``epsilon`` broadcast against ``rdp.shape[:-1]``.

Bound: upper (given an upper bound on the RDP curve). NaN for invalid traced
inputs (delta outside (0,1), negative RDP).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks
from jaxacct._core.dtype import dispatch, require_x64
from jaxacct._core.namespace import JAX
from jaxacct._core.results import DeltaResult, EpsilonResult
from jaxacct._core.compiled import jit

_METHODS = checks.CONVERSIONS


def _check(orders, rdp, method, name, value):
  """The eager checks of both conversions: ``orders`` a 1-D grid, ``rdp`` one value
  (>= 0, inf allowed) per order on its last axis, ``value`` (``name``: delta or
  epsilon) broadcasting against the other axes."""
  checks.check_choice("method", method, _METHODS)
  checks.check_orders(orders)
  if np.ndim(orders) != 1:
    raise ValueError(f"orders must be a 1-D array of Renyi orders; got {orders!r:.60} "
                     f"(shape {np.shape(orders)}).")
  checks.check_range("rdp", rdp, 0.0, jnp.inf, allow_inf=True)
  n, shape = np.shape(orders)[0], np.shape(rdp)
  if not shape or shape[-1] != n:
    raise ValueError(f"rdp must hold one value per order on its last axis (shape (..., {n}) "
                     f"for the {n} orders); got rdp of shape {shape}.")
  try:
    np.broadcast_shapes(shape[:-1], np.shape(value))
  except ValueError:
    raise ValueError(f"{name} must broadcast against rdp's shape without its order axis "
                     f"{shape[:-1]}; got shape {np.shape(value)}.") from None


def _eps_per_order(orders, rdp, delta, method, xp=jnp):
  a = orders
  log_delta = xp.log(delta)[..., None]
  if method == "classic":
    eps = rdp - log_delta / (a - 1.0)
    return xp.where(a > 1.0, eps, xp.inf)
  eps = rdp + xp.log1p(-1.0 / a) - (log_delta + xp.log(a)) / (a - 1.0)
  eps = xp.where(a > 1.01, eps, xp.inf)
  # KL / TV route: delta^2 > 1 - exp(-rdp) => epsilon = 0 is achievable.
  kl_ok = delta[..., None] ** 2 + xp.expm1(-rdp) > 0
  return xp.where(kl_ok, 0.0, eps)


def _min_over_orders(orders, rdp, value, method, mode, ns=JAX):
  """Kernel of both conversions: minimum over the orders, with the NaN policy.

  ``mode`` is ``"epsilon"`` (``value`` a delta) or ``"delta"``; returns
  ``(best, order)``. ``ns`` (:mod:`jaxacct._core.namespace`): ``JAX``
  (default, jittable) or ``HOST`` (NumPy, no compiled program).
  """
  xp = ns.xp
  if not ns.is_host:
    require_x64("rdp_to_" + mode)
  orders = xp.asarray(orders, xp.float64)
  rdp = xp.asarray(rdp, xp.float64)
  value = xp.asarray(value, xp.float64)
  batch = xp.broadcast_shapes(rdp.shape[:-1], value.shape)
  rdp = xp.broadcast_to(rdp, batch + rdp.shape[-1:])
  value = xp.broadcast_to(value, batch)
  per = (_eps_per_order if mode == "epsilon" else _log_delta_per_order)(
      orders, rdp, value, method, xp)
  per = xp.where(xp.isnan(rdp), xp.nan, per)
  idx = xp.argmin(xp.where(xp.isnan(per), xp.inf, per), axis=-1)
  best = xp.take_along_axis(per, idx[..., None], axis=-1)[..., 0]
  bad = xp.any(rdp < 0, axis=-1) | xp.any(xp.isnan(rdp), axis=-1) | xp.isnan(value)
  if mode == "epsilon":
    best = xp.maximum(best, 0.0)
    bad = bad | (value <= 0) | (value >= 1)
  else:
    best = xp.minimum(xp.exp(best), 1.0)
  return xp.where(bad, xp.nan, best), orders[idx]


_min_over_orders_jit = jit(_min_over_orders, static_argnames=("method", "mode"))


def _run(orders, rdp, value, method, mode):
  """Traced input: the kernel inline; concrete input (an eager caller): one
  compiled program per shapes and method, not one per jnp operation."""
  if checks.is_concrete((orders, rdp, value)):
    return _min_over_orders_jit(_host(orders), _host(rdp), _host(value), method, mode)
  return _min_over_orders(orders, rdp, value, method, mode)


def rdp_to_epsilon_kernel(orders, rdp, delta, method: str = "tight", ns=JAX):
  """Jittable :func:`rdp_to_epsilon` without the eager checks (needs x64).

  ``ns=HOST`` (:mod:`jaxacct._core.namespace`): the same formula in NumPy on
  concrete input (no compiled program).
  """
  if ns.is_host:
    return _min_over_orders(orders, rdp, delta, method, "epsilon", ns)
  return _run(orders, rdp, delta, method, "epsilon")


def rdp_to_delta_kernel(orders, rdp, epsilon, method: str = "tight", ns=JAX):
  """Jittable :func:`rdp_to_delta` without the eager checks (needs x64); ``ns``
  as in :func:`rdp_to_epsilon_kernel`."""
  if ns.is_host:
    return _min_over_orders(orders, rdp, epsilon, method, "delta", ns)
  return _run(orders, rdp, epsilon, method, "delta")


@functools.partial(jit, static_argnames=("kernel", "method"))
def _eager_jit(orders, rdp, value, *, kernel, method):
  return kernel(orders, rdp, value, method)


def _host(x):
  """A kernel argument: jax arrays as they are, anything else as float64 NumPy
  (no eager conversion program is compiled)."""
  return x if isinstance(x, jax.Array) else np.asarray(x, np.float64)


def _convert(result, orders, rdp, value, method, validate):
  """The one entry of both conversions (:func:`jaxacct._core.dtype.dispatch`):
  concrete input is validated and converted in one compiled program (per
  shapes and method), not one small program per eager jnp operation; traced
  input goes to the result kernel as it is."""
  return dispatch(functools.partial(result, method=method), (orders, rdp, value), validate,
                  eager=lambda o, r, v: _eager_jit(_host(o), _host(r), _host(v), kernel=result,
                                                   method=method))


def rdp_to_epsilon(orders, rdp, delta, *, method: str = "tight") -> EpsilonResult:
  """Smallest epsilon at ``delta`` implied by an RDP curve.

  Jittable (traced input skips the eager checks; a pytree result).

  Args:
    orders: 1-D array of Renyi orders, all > 1.
    rdp: RDP values, shape ``(..., len(orders))``, >= 0 (``inf`` allowed).
    delta: target delta in (0, 1); broadcasts against ``rdp.shape[:-1]``.
    method: ``"tight"`` (default) or ``"classic"``.

  Returns:
    ``EpsilonResult(epsilon, delta, method="rdp_tight" | "rdp_classic",
    bound="upper", order)``: ``epsilon`` and ``order`` (the minimising Renyi
    order) float64 arrays of shape ``broadcast(rdp.shape[:-1], delta.shape)``,
    ``epsilon >= 0``; ``delta`` the given delta as a float64 array.
    (The jittable kernel :func:`rdp_to_epsilon_kernel` returns the bare
    ``(epsilon, order)`` pair.)

  Bound: upper. NaN lanes for invalid traced delta.
  """
  def validate():
    checks.check_delta(delta)
    _check(orders, rdp, method, "delta", delta)
  return _convert(_epsilon_result, orders, rdp, delta, method, validate)


def _epsilon_result(orders, rdp, delta, method):
  eps, order = rdp_to_epsilon_kernel(orders, rdp, delta, method)
  return EpsilonResult(eps, jnp.asarray(delta, jnp.float64), method="rdp_" + method,
                       bound="upper", order=order)


def _delta_result(orders, rdp, epsilon, method):
  d, order = rdp_to_delta_kernel(orders, rdp, epsilon, method)
  return DeltaResult(d, jnp.asarray(epsilon, jnp.float64), method="rdp_" + method,
                     bound="upper", order=order)


def _log_delta_per_order(orders, rdp, epsilon, method, xp=jnp):
  a = orders
  eps = epsilon[..., None]
  if method == "classic":
    ld = (a - 1.0) * (rdp - eps)
    return xp.where(a > 1.0, ld, xp.inf)
  ld = (a - 1.0) * (rdp - eps + xp.log1p(-1.0 / a)) - xp.log(a)
  ld = xp.where(a > 1.01, ld, xp.inf)
  # KL / TV route, valid for epsilon >= 0.
  safe_r = xp.where(rdp > 0, rdp, 1.0)
  kl = xp.where(rdp > 0, 0.5 * xp.log1p(-xp.exp(-safe_r)), -xp.inf)
  kl = xp.where(eps >= 0, kl, xp.inf)
  return xp.minimum(ld, kl)


def rdp_to_delta(orders, rdp, epsilon, *, method: str = "tight") -> DeltaResult:
  """Smallest delta at ``epsilon`` implied by an RDP curve.

  Jittable (traced input skips the eager checks; a pytree result).

  Args:
    orders: 1-D array of Renyi orders, all > 1.
    rdp: shape ``(..., len(orders))``, >= 0.
    epsilon: real; broadcasts against ``rdp.shape[:-1]``.
    method: ``"tight"`` or ``"classic"``.

  Returns:
    ``DeltaResult(delta, epsilon, method="rdp_tight" | "rdp_classic",
    bound="upper", order)``: ``delta`` in [0, 1] and ``order`` (the
    minimising Renyi order) float64 arrays of the broadcast shape;
    ``epsilon`` the given epsilon as a float64 array. (The jittable kernel
    :func:`rdp_to_delta_kernel` returns the bare ``(delta, order)`` pair.)

  Bound: upper.
  """
  def validate():
    checks.check_range("epsilon", epsilon, -jnp.inf, jnp.inf)
    _check(orders, rdp, method, "epsilon", epsilon)
  return _convert(_delta_result, orders, rdp, epsilon, method, validate)


# Deprecated private aliases (kept while call sites migrate to the public kernels).
_rdp_to_epsilon = rdp_to_epsilon_kernel
_rdp_to_delta = rdp_to_delta_kernel


def compose_rdp(*events):
  """Composes heterogeneous RDP events over a shared order grid.

  Args:
    *events: ``(rdp_curve, count)`` pairs (or bare curves, count 1); every
      curve is evaluated on the same orders, shape ``(..., A)``.

  Returns:
    The summed curve ``sum(count * rdp)`` (RDP composes additively:
    Mironov, arXiv:1702.07476v3, Prop. 1).
  """
  total = None
  for ev in events:
    curve, count = (ev if isinstance(ev, tuple) else (ev, 1))
    checks.check_range("count", count, 0, float("inf"))
    term = jnp.asarray(curve) * count
    total = term if total is None else total + term
  if total is None:
    raise ValueError("compose_rdp needs at least one event; got none.")
  return total
