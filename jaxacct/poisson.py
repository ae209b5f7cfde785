r"""Poisson-subsampled Gaussian: epsilon/delta front doors.

Each record joins each step independently with probability ``q``; the step
adds Gaussian noise of standard deviation ``sigma`` (sensitivity 1). The RDP
curve (Mironov, Talwar & Zhang, arXiv:1908.10530v1, Sec. 3) is computed by
:mod:`jaxacct._core.subsampled_gaussian` (its docstring gives the numerics),
re-exported here as :func:`poisson_gaussian_rdp`.

Bound: upper (RDP composition with the tight conversion, or the tight PLD).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import checks, sharding
from jaxacct._core.dtype import HostDoor, dispatch, host_door, public_surface
from jaxacct._core.namespace import for_inputs, host_call, kernel_arg
from jaxacct._core.orders import DEFAULT_ORDERS
from jaxacct._core.results import DeltaResult, EpsilonResult, host_f64
from jaxacct._core.subsampled_gaussian import (poisson_gaussian_rdp, poisson_rdp_query,
                                               poisson_rdp_query_blocks, poisson_rdp_query_jit)

#: method='pld' builds and composes a PLD on the host; method='rdp' traces
_PLD_ON_HOST = HostDoor(
    "Inside jit/vmap use method='rdp' (jittable: q, sigma, num_steps and the target "
    "may be traced), or call method='pld' outside jit/vmap on concrete arrays.",
    when=(("method", "pld"),))


__all__ = ["poisson_gaussian_rdp", "epsilon", "delta"]


def _validate_common(q, sigma, num_steps):
  checks.check_probability("q", q)
  checks.check_sigma("sigma", sigma)
  checks.check_int("num_steps", num_steps, min_value=1)


def _query(quantity, value, *, q, sigma, num_steps, orders, method, conversion, devices=None):
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
  # a list is a grid of values, as an array is
  q, sigma, num_steps, value = (np.asarray(x, np.float64) if isinstance(x, (list, tuple))
                                else x for x in (q, sigma, num_steps, value))
  with sharding.use_devices(devices):   # block programs spread over the devices
    return _answer(quantity, value, is_eps, q=q, sigma=sigma, num_steps=num_steps,
                   orders=orders, method=method, conversion=conversion)


def _answer(quantity, value, is_eps, *, q, sigma, num_steps, orders, method, conversion):
  given = "delta" if is_eps else "epsilon"
  cls = EpsilonResult if is_eps else DeltaResult
  if method == "pld":
    front = jpld.poisson_gaussian_epsilon if is_eps else jpld.poisson_gaussian_delta
    r = front(sigma=sigma, q=q, num_steps=num_steps, **{given: value})
    return cls(**{quantity: getattr(r, quantity), given: value}, method="pld", bound="upper",
               details=r.details)
  orders_np = checks.check_orders(DEFAULT_ORDERS if orders is None else orders)
  args = (q, sigma, num_steps, value)
  static = dict(orders=tuple(orders_np.tolist()), quantity=quantity, conversion=conversion)
  if for_inputs(*args).is_host:
    # one question: the same formula in NumPy/SciPy, no compiled program
    v, order = host_call(poisson_rdp_query, *(np.asarray(x, np.float64) for x in args),
                         **static)
    v, order = host_f64(v), host_f64(order)
  else:
    # one compiled program per (orders, quantity, conversion); q, sigma,
    # num_steps and the target are traced arguments (host values, no eager jnp);
    # dispatch enters float64 (concrete) or requires it (traced). On the
    # accelerator layout concrete arrays run in blocks of a fixed lane count
    # (one program whatever the batch), on the CPU layout too where the whole
    # batch would not fit the device's memory (rdp_in_blocks); traced input
    # is one program as here.
    blocks = functools.partial(poisson_rdp_query_blocks, **static)
    v, order = dispatch(
        lambda *a: _rdp_query_traced(*(kernel_arg(x) for x in a), static["orders"],
                                     quantity, conversion),
        args, where=f"jaxacct.poisson.{quantity}", eager=blocks)
  return cls(**{quantity: v, given: value}, method="rdp", bound="upper", order=order)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5, 6))
def _rdp_query_traced(q, sigma, steps, value, orders, quantity, conversion):
  """The jitted RDP query, with derivatives taken in forward mode.

  Reverse mode through the kernel's ``where`` branches multiplies a zero
  cotangent by an infinite local derivative in the unused branch (NaN for
  ``jax.grad`` of epsilon in sigma or q); forward mode selects the used branch's
  tangent and is finite (-4.852 at q = 0.01, sigma = 1, 1000 steps, delta 1e-5;
  central difference -4.852). The rule returns the forward-mode partial
  derivatives as coefficients, so ``jax.grad`` only transposes a product.
  """
  return poisson_rdp_query_jit(q, sigma, steps, value, orders=orders, quantity=quantity,
                               conversion=conversion)


@_rdp_query_traced.defjvp
def _rdp_query_jvp(orders, quantity, conversion, primals, tangents):
  run = functools.partial(poisson_rdp_query_jit, orders=orders, quantity=quantity,
                          conversion=conversion)
  out = run(*primals)
  real = [jnp.issubdtype(jnp.result_type(x), jnp.inexact) for x in primals]

  def unit(i):   # a tangent of 1 on input i (lanes are independent), 0 elsewhere
    return tuple((jnp.ones_like(x) if j == i else jnp.zeros_like(x)) if r
                 else np.zeros(np.shape(x), jax.dtypes.float0)
                 for j, (x, r) in enumerate(zip(primals, real)))
  dv = jnp.zeros_like(out[0])
  for i, (t, r) in enumerate(zip(tangents, real)):
    if r:
      dv = dv + jax.jvp(run, primals, unit(i))[1][0] * t
  return out, (dv, jnp.zeros_like(out[1]))


@host_door(_PLD_ON_HOST)
def epsilon(*, q, sigma, num_steps, delta, orders=None,
            method: str = "rdp", conversion: str = "tight", devices=None) -> EpsilonResult:
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
    devices: None (the default device), or a sequence of jax devices or a
      ``jax.sharding.Mesh`` (also spanning hosts): arrays run in the block
      programs (as on the accelerator layout), block ``i`` on device
      ``i mod D``; the values are bitwise those of one device.

  Returns:
    ``EpsilonResult``; ``order`` is the optimal Renyi order for RDP.

  Compiled programs: a scalar question (every argument a Python or NumPy
  scalar) compiles NONE, for either method: the same formulas run in
  NumPy/SciPy on the host (:mod:`jaxacct._core.namespace`). Arrays and
  traced input: ``method="rdp"`` compiles one program per (orders,
  conversion, input shapes); q, sigma, num_steps and delta are traced, so
  new values compile nothing. On the accelerator layout
  (:func:`jaxacct.set_layout`) concrete arrays run through one program of a
  fixed block of lanes (set by the orders and the device's memory), called
  once per block: the same program, compile time and peak memory for 1e3
  and 1e5 sigmas. ``method="pld"``, concrete arrays on the CPU layout: each
  lane is answered on the host like a scalar question (its value bit for
  bit), none compiled (:func:`jaxacct._core.batching.host_lanes`; the
  measurements are in bench/results/HISTORY.md). On the accelerator layout the grid,
  truncation, window, composition and query run on the device for blocks of
  lanes, one program per bucket (:mod:`jaxacct.pld._poisson_blocks`).
  The PLD grid step is ``min(1e-4, s/1000)``, s the standard deviation of the
  privacy loss composed over ``min(num_steps, 10^4)`` steps
  (:func:`jaxacct.pld.default_step`). Its
  per-step truncation, at most 1e-16 over the run, is charged to delta: at a
  delta at or below that charge (about 1e-16 and less) ``method="pld"``
  certifies no finite epsilon and answers ``inf``; ``method="rdp"`` answers.

  Bound: upper. Inputs broadcast; arrays give arrays.
  """
  return _query("epsilon", delta, q=q, sigma=sigma, num_steps=num_steps, orders=orders,
                method=method, conversion=conversion, devices=devices)


@host_door(_PLD_ON_HOST)
def delta(*, q, sigma, num_steps, epsilon, orders=None,
          method: str = "rdp", conversion: str = "tight", devices=None) -> DeltaResult:
  """Delta at ``epsilon`` of ``num_steps`` Poisson-subsampled Gaussian steps.

  Same arguments as :func:`epsilon`, with ``epsilon`` (real) instead of delta.

  Bound: upper.
  """
  return _query("delta", epsilon, q=q, sigma=sigma, num_steps=num_steps, orders=orders,
                method=method, conversion=conversion, devices=devices)

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
