r"""Discretised privacy loss distributions (PLDs): representation and discretisation.

Composition (FFT, exponential tilts) lives in :mod:`jaxacct.pld._compose`,
the delta/epsilon queries in :mod:`jaxacct.pld._query`; all are re-exported
by :mod:`jaxacct.pld`.

Proofs and sources: docs/bounds/numerics.md ("Bounds and proofs /
Numerics").
"""


from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import batching, checks
from jaxacct._core.dtype import HostDoor, host_door, host_scalar, require_x64, static_size
from jaxacct._core.compiled import jit
from jaxacct._core.namespace import JAX, host_call

#: a PLD is built on the host; the pytree it makes is what traces
BUILD_ON_HOST = HostDoor(
    "Build the PLD outside jit/vmap, on concrete values; a PLD is a pytree: pass it into "
    "jit/vmap and query it there with jaxacct.pld.epsilon or jaxacct.pld.delta "
    "(jaxacct.pld.compose with a static size).")


DEFAULT_TAIL_MASS = 1e-18


class PLD(NamedTuple):
  """Privacy loss distribution on the grid ``loss_i = (offset + i) * step``.

  Attributes:
    probs: float64 array (N,), P-mass at each grid loss.
    offset: int, grid index of ``probs[0]``.
    step: float > 0, grid spacing (loss units).
    inf_mass: float64 scalar, mass at loss +inf plus charged truncations.
    pessimistic: bool, True = dominating (deltas are upper bounds), False =
      optimistic (lower estimates).
  """
  probs: Any
  offset: Any
  step: Any
  inf_mass: Any
  pessimistic: Any


def _pld_flatten(p):
  step = p.step
  if isinstance(step, (int, float, np.floating, np.integer)):
    return (p.probs, p.offset, p.inf_mass), (float(step), p.pessimistic, True)
  return (p.probs, p.offset, p.inf_mass, step), (None, p.pessimistic, False)


def _pld_unflatten(aux, children):
  step, pess, static_step = aux
  if static_step:
    probs, offset, inf = children
  else:
    probs, offset, inf, step = children
  return PLD(probs, offset, step, inf, pess)


# ``step`` (a Python float) and ``pessimistic`` (a bool) are static pytree
# data: under jit they stay concrete, so grids can be checked and the
# rounding kind is known at trace time.
jax.tree_util.register_pytree_node(PLD, _pld_flatten, _pld_unflatten)


class PairPLD(NamedTuple):
  """Both directions of a mechanism: ``remove`` = PLD(P=D, Q=D'), ``add``."""
  remove: PLD
  add: PLD


def device_array(x, dtype=np.float64):
  """``x`` as a jax array of ``dtype`` without compiling anything for concrete input.

  ``jnp.asarray`` of a NumPy array compiles a small copy program for every new
  shape; ``jax.device_put`` of the NumPy value does not, so a new grid length
  (a new sigma) costs no compilation. Jax arrays of the right dtype and
  tracers pass through.
  """
  if isinstance(x, jax.Array):
    return x if x.dtype == dtype else jnp.asarray(x, dtype)
  return jax.device_put(np.asarray(x, dtype))


# --------------------------------------------------------------------------
# construction from atoms


def fast_len(n: int) -> int:
  """Smallest 2^a or 3*2^a >= n (few distinct shapes -> few compiles)."""
  n = max(int(n), 1)
  p = 1 << (n - 1).bit_length()
  if 3 * p // 4 >= n and p >= 4:
    return 3 * p // 4
  return p


def _from_losses_core(losses, probs, step, offset, inf_mass, pessimistic, *, size, rounding,
                      ns=JAX):
  """The discretisation of :func:`from_losses` (``ns``: the array namespace; the
  jitted kernel and the host twin are this text)."""
  xp = ns.xp
  losses = xp.ravel(losses).astype(xp.float64)
  probs = xp.ravel(probs).astype(xp.float64)
  step = xp.asarray(step, xp.float64)
  active = probs > 0
  at_inf = active & (losses == xp.inf)
  finite = active & xp.isfinite(losses)
  safe_l = xp.where(finite, losses, 0.0)
  t = safe_l / step - offset  # position in grid units
  pw = xp.where(finite, probs, 0.0)
  extra_inf = xp.sum(xp.where(at_inf, probs, 0.0))
  pess = xp.zeros(size + 1, xp.float64)  # last slot: above the grid
  if rounding == "connect_dots":
    i = xp.floor(t)
    below = i < 0
    i = xp.clip(i, 0, size)  # size -> above the grid
    frac = xp.where(below, 0.0, (t - i) * step)  # L - loss_i in [0, step)
    frac = xp.clip(frac, 0.0, step)
    # b = p (1 - e^{-frac}) / (1 - e^{-step}),  a = p - b.
    b = pw * (-xp.expm1(-frac)) / (-xp.expm1(-step))
    b = xp.clip(b, 0.0, pw)
    ii = i.astype(xp.int32)
    pess = ns.add_at(pess, ii, pw - b)
    pess = ns.add_at(pess, xp.minimum(ii + 1, size), b)
  else:  # ceil: below -> 0 (rounded up), above -> inf
    k = xp.clip(xp.ceil(t), 0, size)
    pess = ns.add_at(pess, k.astype(xp.int32), pw)
  # optimistic: floor; below the grid dropped, above rounded down to the top
  k = xp.floor(t)
  keep = k >= 0
  k = xp.clip(k, 0, size - 1)
  opt = ns.add_at(xp.zeros(size + 1, xp.float64), k.astype(xp.int32), xp.where(keep, pw, 0.0))
  out = xp.where(pessimistic, pess, opt)
  inf_total = xp.asarray(inf_mass, xp.float64) + extra_inf + out[size]
  return out[:size], inf_total


@functools.partial(jit, static_argnames=("size", "rounding"))
def _from_losses_kernel(losses, probs, step, offset, inf_mass, pessimistic, *,
                        size, rounding):
  require_x64("jaxacct.pld.from_losses")
  return _from_losses_core(losses, probs, step, offset, inf_mass, pessimistic, size=size,
                           rounding=rounding)


def from_losses(losses, probs, *, step, pessimistic: bool = True,
                inf_mass=0.0, rounding: str = "connect_dots", offset=None,
                size=None) -> PLD:
  r"""PLD from atoms (privacy-loss values and their P-masses).

  Args:
    losses: float array, loss values ``log(P(o)/Q(o))``; ``+inf`` allowed
      (mass goes to ``inf_mass``); atoms with zero P-mass are ignored.
    probs: float array, same shape (or one number), finite P-masses >= 0 (need
      not sum to 1).
    step: grid spacing > 0.
    pessimistic: True -> dominating discretisation (upper bounds); False ->
      losses rounded down (lower estimate).
    inf_mass: extra mass at +inf, in [0, 1].
    rounding: ``"connect_dots"`` (default; keeps P- and Q-mass, dominating,
      second-order error) or ``"ceil"`` (losses rounded up); pessimistic only.
    offset, size: grid start index and length.  Computed from the finite
      losses when omitted (needs concrete input); give both to call it
      under ``jit`` (``size`` static).  Atoms outside the grid: pessimistic
      -> below moved up to the first point, above charged to ``inf_mass``.

  Returns:
    :class:`PLD` with ``probs`` float64 (size,).

  Bound: upper (pessimistic) / lower estimate (optimistic) of every delta.
  """
  pessimistic = _check_atoms(losses, probs, step, pessimistic, inf_mass, rounding)
  if offset is not None:
    checks.check_int("offset", offset, min_value=-2**62, scalar=True)
  if size is not None:
    checks.check_int("size", size, min_value=1, scalar=True)
  losses, probs = (np.asarray(v, np.float64) if isinstance(v, (list, tuple)) else v
                   for v in (losses, probs))
  if offset is None or size is None:
    offset, size, losses, probs = static_size(
        (losses, probs, step), lambda: _grid(losses, probs, step, offset, size),
        message="from_losses under jit needs static `offset` and `size`.")
  size = int(size)
  if size < 1:
    raise ValueError(f"size must be >= 1; got {size}.")
  if batching.on_host(losses, probs, step, offset, inf_mass):
    return _host_atoms(losses, probs, step, int(offset), size, pessimistic, inf_mass, rounding)
  # concrete atoms broadcast in NumPy: an eager jnp broadcast is a program per length
  xp = jnp if any(isinstance(v, jax.core.Tracer) for v in (losses, probs)) else np
  probs_b = xp.broadcast_to(xp.asarray(probs, np.float64), np.shape(losses))
  p, inf = _from_losses_kernel(losses, probs_b, step, offset, inf_mass,
                               jnp.asarray(pessimistic), size=size,
                               rounding=rounding)
  return PLD(p, host_scalar(offset, int), host_scalar(step, float), inf, pessimistic)


def from_losses_host(losses, probs, *, step, pessimistic: bool = True, inf_mass=0.0,
                     rounding: str = "connect_dots") -> PLD:
  """:func:`from_losses` of concrete atoms on the host: the same discretisation
  (:func:`_from_losses_core` with ``ns = HOST``), NumPy ``probs``, no compiled
  program. It agrees with the jitted kernel to rounding, not bit for bit:
  XLA's division and ``expm1`` are not NumPy's, so a cell's split moves by
  ulps (1e-11 relative where it cancels) and, with ``rounding="ceil"``, an atom
  that lies on a grid point to within an ulp may land one cell apart.

  Bound: as :func:`from_losses`.
  """
  pessimistic = _check_atoms(losses, probs, step, pessimistic, inf_mass, rounding)
  offset, size, lv, pv = _grid(losses, probs, step, None, None)
  return _host_atoms(lv, pv, step, offset, size, pessimistic, inf_mass, rounding)


def _host_atoms(losses, probs, step, offset, size, pessimistic, inf_mass, rounding) -> PLD:
  """:func:`_from_losses_core` of concrete atoms in NumPy (no program; checked input)."""
  lv = np.ravel(np.asarray(losses, np.float64))
  pv = np.broadcast_to(np.asarray(probs, np.float64), np.shape(losses)).ravel()
  p, inf = host_call(_from_losses_core, lv, pv, float(step), int(offset), float(inf_mass),
                     bool(pessimistic), size=int(size), rounding=rounding)
  return PLD(np.asarray(p, np.float64), int(offset), float(step), np.float64(inf),
             bool(pessimistic))


def _check_atoms(losses, probs, step, pessimistic, inf_mass, rounding) -> bool:
  """The checks :func:`from_losses` and :func:`from_losses_host` share; returns
  ``pessimistic`` as a static bool. Losses may be +-inf (not NaN), P-masses are
  finite and >= 0, one per loss (or one for all)."""
  checks.check_positive("step", step, scalar=True)
  checks.check_choice("rounding", rounding, ("connect_dots", "ceil"))
  checks.check_probability("inf_mass", inf_mass)
  if np.size(losses) or np.size(probs):   # no atoms at all: a law of no mass (grid [0])
    checks.check_range("losses", losses, allow_inf=True)
    checks.check_range("probs", probs, 0.0, np.inf)
  try:
    fits = np.broadcast_shapes(np.shape(probs), np.shape(losses)) == np.shape(losses)
  except ValueError:
    fits = False
  if not fits:
    raise ValueError(f"probs must hold one P-mass per loss (the shape of losses) or one "
                     f"number; got losses of shape {np.shape(losses)} and probs of shape "
                     f"{np.shape(probs)}.")
  return checks.check_static_bool("pessimistic", pessimistic)


def _grid(losses, probs, step, offset, size):
  """(offset, size, losses, probs) of :func:`from_losses` from concrete atoms:
  the grid spans the finite losses of positive mass (host glue, NumPy)."""
  lv = np.ravel(np.asarray(losses, np.float64))
  pv = np.ravel(np.asarray(probs, np.float64)) * np.ones_like(lv)
  if np.any(np.isnan(lv)) or np.any(np.isnan(pv)) or np.any(pv < 0):
    raise ValueError("losses must not be NaN and probs must be >= 0.")
  fin = np.isfinite(lv) & (pv > 0)
  if np.any((lv == -np.inf) & (pv > 0)):
    raise ValueError("an atom with loss -inf must have P-mass 0.")
  h = float(step)
  if not np.any(fin):
    lo_i, hi_i = 0, 0
  else:
    lo_i = int(math.floor(lv[fin].min() / h))
    hi_i = int(math.floor(lv[fin].max() / h)) + 1
  offset = lo_i if offset is None else int(offset)
  size = fast_len(hi_i - offset + 1) if size is None else int(size)
  return offset, size, lv, pv


@host_door(BUILD_ON_HOST)
def from_pair(p, q, *, step, pessimistic: bool = True,
              rounding: str = "connect_dots") -> PLD:
  r"""PLD of the pair (P = p, Q = q) of discrete distributions.

  ``L(o) = log p(o) - log q(o)`` with P-mass ``p(o)``; outcomes with
  ``q(o) = 0 < p(o)`` go to ``inf_mass``.  The add direction of a
  (remove-direction) pair is ``from_pair(q, p)``.

  Args:
    p, q: float arrays of the same shape, probability vectors (>= 0).
    step: grid spacing > 0.
    pessimistic, rounding: see :func:`from_losses`.

  Returns:
    :class:`PLD`.

  Bound: upper (pessimistic) / lower estimate (optimistic).
  """
  checks.check_not_text("p", p)
  checks.check_not_text("q", q)
  checks.check_positive("step", step, scalar=True)
  checks.check_bool("pessimistic", pessimistic)
  checks.check_choice("rounding", rounding, ("connect_dots", "ceil"))
  pv = np.asarray(p, np.float64)
  qv = np.asarray(q, np.float64)
  if pv.shape != qv.shape:
    raise ValueError(f"p and q must have the same shape; got {pv.shape} and "
                     f"{qv.shape}.")
  if np.any(~np.isfinite(pv)) or np.any(pv < 0) or np.any(
      ~np.isfinite(qv)) or np.any(qv < 0):
    raise ValueError("p and q must be finite and >= 0.")
  with np.errstate(divide="ignore", invalid="ignore"):
    losses = np.where(pv > 0, np.where(qv > 0, np.log(pv) - np.log(qv),
                                       np.inf), 0.0)
  return from_losses(losses, pv, step=step, pessimistic=pessimistic,
                     rounding=rounding)

def truncate_host(pld: PLD, tail_mass: float):
  """Host-side (numpy) tail cut shared by :func:`truncate` and its bucketed twin.

  Pessimistic: mass below the kept range (<= tail_mass) moves up to its first
  point; mass above (<= tail_mass) goes to ``inf_mass``.  Optimistic: the
  lower tail is dropped, the upper one moved down to the last point.

  Returns:
    ``(kept, lo, inf)``: the kept P-masses (float64 numpy array), the index
    of the first kept point in ``pld.probs`` and the new ``inf_mass`` (float).
  """
  checks.check_range("tail_mass", tail_mass, 0.0, 1.0, lo_open=True,
                     hi_open=True)
  p = np.asarray(pld.probs, np.float64)
  c = np.cumsum(p)
  r = np.cumsum(p[::-1])[::-1]
  lo = int(np.searchsorted(c, tail_mass, side="right"))
  hi_candidates = np.nonzero(r > tail_mass)[0]
  hi = int(hi_candidates[-1]) if hi_candidates.size else len(p) - 1
  lo = min(lo, hi)
  below = float(c[lo - 1]) if lo > 0 else 0.0
  above = float(r[hi + 1]) if hi + 1 < len(p) else 0.0
  kept = p[lo:hi + 1].copy()
  inf = float(np.asarray(pld.inf_mass))
  if pld.pessimistic:
    kept[0] += below
    inf += above
  else:
    kept[-1] += above
  return kept, lo, inf


def truncate(pld: PLD, tail_mass: float = DEFAULT_TAIL_MASS) -> PLD:
  """Drops negligible tails (eager): smaller grids for later compositions.

  Pessimistic: mass below the kept range (<= tail_mass) moves up to its first
  point; mass above (<= tail_mass) goes to ``inf_mass``.  Optimistic: the
  lower tail is dropped, the upper one moved down to the last point.

  Bound: as the input.
  """
  kept, lo, inf = truncate_host(pld, tail_mass)
  return PLD(device_array(kept), int(pld.offset) + lo, pld.step,
             device_array(inf), pld.pessimistic)
