r"""Random allocation ("balls-in-bins"): each example is used in exactly k of
t steps per epoch, chosen uniformly at random (Feldman & Shenfeld,
"Privacy amplification by random allocation", arXiv:2502.08202v3).

Front doors: :func:`epsilon` and :func:`delta` return the best valid bound
(max over the add/remove directions of the min over methods) and name the
method that won; :func:`calibrate_sigma` solves for the noise.

Methods (``methods=`` keyword), per direction:

=================  ============  =====================================  =======
name               directions    source                                 bound
=================  ============  =====================================  =======
``rdp_direct``     remove        Thm 4.8 / Cor 4.10 (power series) +    upper
                                 Lemma 3.2 for k, E; tight conversion
``direct_add``     add           Thm 4.9 / Cor 4.10 (shift x rounds)    upper
``decomposition``  both          Thm 4.6 over Poisson RDP (k=E=1)       upper
``local``          both          no amplification, Gaussian sigma/sqrt(kE)  upper
``pld``            both          tight allocation PLD (``allocation.pld``) upper
=================  ============  =====================================  =======
"""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks
from jaxacct._core.conversion import _rdp_to_epsilon, _rdp_to_delta
from jaxacct._core.dtype import x64_boundary
from jaxacct._core.results import DeltaResult, EpsilonResult
from jaxacct.allocation import bounds
from jaxacct.allocation.rdp import (allocation_add_rdp_upper, allocation_remove_rdp,
                                    allocation_remove_rdp_from_moments)

__all__ = ["epsilon", "delta", "allocation_rdp", "allocation_remove_rdp",
           "allocation_remove_rdp_from_moments", "allocation_add_rdp_upper",
           "calibrate_sigma", "bounds", "DEFAULT_METHODS"]

DEFAULT_METHODS = ("rdp_direct", "direct_add", "decomposition", "local")
_ALL_METHODS = DEFAULT_METHODS + ("pld",)


def allocation_rdp(*, sigma, num_steps, num_selected=1, num_epochs=1,
                   direction: str = "remove", max_order: int = 128):
  r"""RDP curve at integer orders 2..max_order of k-of-t allocation over E epochs.

  ``remove``: m = kE times the exact 1-of-floor(t/k) remove RDP (Thm 4.8 +
  Lemma 3.2). ``add``: m times the upper bound of
  :func:`allocation_add_rdp_upper` (loose: it carries the constant shift
  (1-1/t)/(2 sigma^2) per round). ``both``: the max.

  Returns: (orders, rdp) with orders ``2..max_order`` (float64) and rdp of
  shape ``broadcast(sigma).shape + (max_order-1,)``. Bound: upper.
  """
  bounds.check_scheme(sigma, num_steps, num_selected, num_epochs)
  checks.check_direction(direction)
  t, m = bounds._rounds(num_steps, num_selected, num_epochs)
  orders = np.arange(2, int(max_order) + 1, dtype=np.float64)
  out = None
  if direction in ("remove", "both"):
    out = allocation_remove_rdp(sigma=sigma, num_steps=t.astype(np.int64),
                                max_order=max_order) * jnp.asarray(m)[..., None]
  if direction in ("add", "both"):
    add = allocation_add_rdp_upper(orders, sigma=sigma, num_steps=t) * jnp.asarray(m)[..., None]
    out = add if out is None else jnp.maximum(out, add)
  return orders, out


def _check_methods(methods, k, E):
  methods = tuple(methods)
  for mth in methods:
    checks.check_choice("methods", mth, _ALL_METHODS)
  if not methods:
    raise ValueError("methods must name at least one method; got ().")
  return methods


@x64_boundary
def epsilon(*, sigma, num_steps, delta, num_selected=1, num_epochs=1,
            direction: str = "both", methods=None, max_order: int = 128) -> EpsilonResult:
  """Epsilon at ``delta`` of k-out-of-t random allocation with Gaussian noise.

  Args:
    sigma: noise multiplier > 0 (scalar).
    num_steps: steps per epoch t >= 1. num_selected: k in [1, t].
    num_epochs: E >= 1. delta: in (0, 1).
    direction: "both" (default; the max), "remove" or "add".
    methods: subset of ("rdp_direct", "direct_add", "decomposition",
      "local", "pld"); default all but "pld" plus "pld" when available.
    max_order: largest integer Renyi order for ``rdp_direct``.

  Returns:
    EpsilonResult(epsilon, delta, method, bound="upper", order, details):
    ``method`` is "<remove winner>/<add winner>" (the direction that binds
    first), ``order`` the Renyi order when RDP won, ``details`` every
    method's value per direction.
  """
  bounds.check_scheme(sigma, num_steps, num_selected, num_epochs)
  checks.check_delta(delta)
  checks.check_direction(direction)
  if np.ndim(sigma) or np.ndim(num_steps) or np.ndim(delta):
    raise ValueError("allocation.epsilon takes scalar sigma, num_steps and delta; "
                     "use allocation.rdp / calibrate_sigma for grids.")
  k, E, t = int(num_selected), int(num_epochs), int(num_steps)
  if methods is None:
    methods = DEFAULT_METHODS + (("pld",) if _has_pld() else ())
  methods = _check_methods(methods, k, E)
  vals = {"remove": {}, "add": {}}
  order = None
  dirs = ("remove", "add") if direction == "both" else (direction,)
  if "rdp_direct" in methods and "remove" in dirs:
    orders, rdp = allocation_rdp(sigma=sigma, num_steps=t, num_selected=k, num_epochs=E,
                                 direction="remove", max_order=max_order)
    e, order = _rdp_to_epsilon(jnp.asarray(orders), rdp, jnp.asarray(delta), "tight")
    vals["remove"]["rdp_direct"] = float(e)
    order = float(order)
    if order >= max_order:
      warnings.warn(f"optimal Renyi order is the largest one tried ({max_order}); "
                    "increase max_order for a tighter bound.", stacklevel=2)
  if "direct_add" in methods and "add" in dirs:
    vals["add"]["direct_add"] = float(bounds.direct_add_epsilon(
        sigma=sigma, num_steps=t, delta=delta, num_selected=k, num_epochs=E))
  if "decomposition" in methods and k == 1 and E == 1 and t >= 2:
    for d in dirs:
      vals[d]["decomposition"] = float(bounds.decomposition_epsilon(
          sigma=sigma, num_steps=t, delta=delta, direction=d))
  if "local" in methods:
    le = float(bounds.local_epsilon(sigma=sigma, delta=delta, num_selected=k, num_epochs=E))
    for d in dirs:
      vals[d]["local"] = le
  if "pld" in methods and _has_pld():
    from jaxacct.allocation import pld as _pld
    r = _pld.allocation_pld_epsilon(sigma=sigma, delta=delta, num_steps=t,
                                    num_selected=k, num_epochs=E, direction="both"
                                    if direction == "both" else direction)
    for d in dirs:
      vals[d]["pld"] = float(r.upper)
  best = {}
  for d in dirs:
    if not vals[d]:
      raise ValueError(f"no method in {methods} bounds the {d} direction for "
                       f"k={k}, epochs={E}; add 'local' or 'direct_add'/'rdp_direct'.")
    name = min(vals[d], key=vals[d].get)
    best[d] = (name, vals[d][name])
  worst_dir = max(best, key=lambda d: best[d][1])
  eps = best[worst_dir][1]
  method = "/".join(f"{d}:{best[d][0]}" for d in dirs)
  won_rdp = best.get("remove", ("",))[0] == "rdp_direct" and worst_dir == "remove"
  return EpsilonResult(epsilon=eps, delta=delta, method=method, bound="upper",
                       order=order if won_rdp else None, details=vals)


def _has_pld():
  try:
    from jaxacct.allocation import pld  # noqa: F401
    return hasattr(pld, "allocation_pld_epsilon")
  except ImportError:
    return False


@x64_boundary
def delta(*, sigma, num_steps, epsilon, num_selected=1, num_epochs=1,
          direction: str = "both", max_order: int = 128) -> DeltaResult:
  """Delta at ``epsilon`` (methods rdp_direct, direct_add, local). Bound: upper."""
  bounds.check_scheme(sigma, num_steps, num_selected, num_epochs)
  checks.check_range("epsilon", epsilon)
  checks.check_direction(direction)
  k, E, t = int(num_selected), int(num_epochs), int(num_steps)
  dirs = ("remove", "add") if direction == "both" else (direction,)
  vals = {d: {} for d in dirs}
  from jaxacct._core.gaussian import gaussian_delta_kernel
  local = float(gaussian_delta_kernel(sigma / np.sqrt(k * E), epsilon))
  if "remove" in dirs:
    orders, rdp = allocation_rdp(sigma=sigma, num_steps=t, num_selected=k, num_epochs=E,
                                 direction="remove", max_order=max_order)
    d, _ = _rdp_to_delta(jnp.asarray(orders), rdp, jnp.asarray(epsilon, jnp.float64), "tight")
    vals["remove"]["rdp_direct"] = float(d)
    vals["remove"]["local"] = local
  if "add" in dirs:
    vals["add"]["direct_add"] = float(bounds.direct_add_delta(
        sigma=sigma, num_steps=t, epsilon=epsilon, num_selected=k, num_epochs=E))
    vals["add"]["local"] = local
  best = {d: min(vals[d].items(), key=lambda kv: kv[1]) for d in dirs}
  worst = max(best, key=lambda d: best[d][1])
  return DeltaResult(delta=best[worst][1], epsilon=epsilon,
                     method="/".join(f"{d}:{best[d][0]}" for d in dirs),
                     bound="upper", details=vals)


@x64_boundary
def calibrate_sigma(*, epsilon, delta, num_steps, num_selected=1, num_epochs=1,
                    max_order: int = 128, sigma_range=(0.2, 200.0), num_iters: int = 40):
  """Smallest sigma meeting (epsilon, delta) with rdp_direct (remove) and
  direct_add (add), vectorised over targets in one compiled search.

  Returns float64 sigmas (conservative: each meets its target). Raises
  ValueError if some target is infeasible in ``sigma_range``.
  """
  checks.check_positive("epsilon", epsilon)
  checks.check_delta(delta)
  bounds.check_scheme(1.0, num_steps, num_selected, num_epochs)
  from jaxacct._core.calibrate import bisect
  from jaxacct._core.gaussian import gaussian_epsilon_kernel
  from jaxacct.allocation.rdp import _allocation_gaussian_rdp_kernel
  t, m = bounds._rounds(num_steps, num_selected, num_epochs)
  eps_t = jnp.asarray(epsilon, jnp.float64)
  d_t = jnp.asarray(delta, jnp.float64)
  eps_t, d_t = jnp.broadcast_arrays(eps_t, d_t)
  orders = jnp.arange(2, max_order + 1, dtype=jnp.float64)

  def eps_of(s):
    rdp = _allocation_gaussian_rdp_kernel(s, jnp.full(s.shape, int(t), jnp.int64), max_order) * m
    e_rem, _ = _rdp_to_epsilon(orders, rdp, d_t, "tight")
    e_add = gaussian_epsilon_kernel(s * jnp.sqrt(t / m), d_t) + m * (1 - 1 / t) / (2 * s**2)
    e_loc = gaussian_epsilon_kernel(s / jnp.sqrt(m), d_t)
    return jnp.maximum(jnp.minimum(e_rem, e_loc), jnp.minimum(e_add, e_loc))

  import jax
  lo, hi = sigma_range
  res = jax.jit(lambda: bisect(lambda s: eps_of(s) - eps_t * (1 - 1e-12),
                               jnp.full(eps_t.shape, lo), jnp.full(eps_t.shape, hi),
                               increasing=False, num_iters=num_iters, log_scale=True,
                               method="illinois"))()
  if not bool(jnp.all(res.ok)):
    raise ValueError(f"no sigma in [{lo:g}, {hi:g}] meets the target; widen sigma_range.")
  return res.x
