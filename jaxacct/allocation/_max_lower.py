"""The max-test lower bound on the remove delta of k-of-t random allocation.

Chua et al., "Balls-and-bins sampling for DP-SGD", arXiv:2412.16802v1 (the
lower bound of Feldman & Shenfeld, arXiv:2502.08202v3, Fig. 2): the event
"every one of the m = kE rounds has its largest of t' coordinates above C"
has probabilities ``P(max > C)^m`` and ``Q(max > C)^m``, so their difference
``P - e^eps Q`` at any C is a delta the remove pair attains. Bound: lower.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from jaxacct._core import batching, checks
from jaxacct._core.batching import lanes_for_memory
from jaxacct._core.compiled import ACCELERATOR_OPTIONS, jit
from jaxacct._core.dtype import HostDoor, host_door, require_x64, traced
from jaxacct._core.logmath import log_ndtr, log1m_exp, log_sub_exp
from jaxacct._core.units import per_epoch_steps
from jaxacct.allocation._bounds import check_scheme, split_rounds

_COUNTS_ON_HOST = HostDoor(
    "Pass steps_per_epoch, num_selected and num_epochs as concrete numbers or arrays; sigma "
    "and epsilon may be traced.", params=("steps_per_epoch", "num_selected", "num_epochs"))


def _max_lower(s, e, t, m, c):
  """``max_C p(C)^m - e^e q(C)^m`` (clipped at 0) of broadcast lanes ``s, e, t, m``
  over the thresholds ``c`` (their shape plus one trailing axis)."""
  s, e, t, m = (x[..., None] for x in (s, e, t, m))
  lp_le = log_ndtr((c - 1.0) / s) + (t - 1.0) * log_ndtr(c / s)
  lq_le = t * log_ndtr(c / s)
  lp = m * log1m_exp(jnp.minimum(lp_le, 0.0))     # log P(max > C)^m
  lq = m * log1m_exp(jnp.minimum(lq_le, 0.0))
  a, b = lp, e + lq
  val = jnp.where(a > b, log_sub_exp(a, jnp.minimum(a, b)), -jnp.inf)
  return jnp.maximum(jnp.exp(jnp.max(val, axis=-1)), 0.0)


_UNIT_GRID = 4001


def _thresholds(s, grid, scaled):
  """The thresholds of each lane: ``grid`` itself, or (``scaled``) the default
  ``-5 sigma + u (1 + 17 sigma + 8)`` at ``u = grid`` in [0, 1]."""
  s = s[..., None]
  if scaled:
    return -5.0 * s + grid * (1.0 + 17.0 * s + 8.0)
  return jnp.broadcast_to(grid, s.shape[:-1] + grid.shape)


@functools.partial(jit, static_argnames=("scaled",), compiler_options=ACCELERATOR_OPTIONS)
def lower_bound_block(s, e, t, m, grid, *, scaled):
  """The program of :func:`delta_lower_bound` over lanes ``(s, e, t, m)``
  (float64, one shape): a block of the accelerator layout, or the whole batch
  (the CPU layout, a traced call). The threshold grid is a dynamic argument
  (a new grid, t or epsilon compiles nothing)."""
  require_x64("delta_lower_bound")
  return _max_lower(s, e, t, m, _thresholds(s, grid, scaled))


def lower_bound_lanes(num_thresholds: int) -> int:
  """Lanes of :data:`lower_bound_block`: ~8 float64 arrays of the thresholds a
  lane at 1/16 of the device's memory (a function of the device alone)."""
  return lanes_for_memory(8 * 8 * int(num_thresholds), fraction=1.0 / 16, name="thresholds")


@host_door(_COUNTS_ON_HOST)
@per_epoch_steps
def delta_lower_bound(*, sigma, steps_per_epoch, epsilon, num_selected=1, num_epochs=1,
                      thresholds=None):
  r"""Provable lower bound on the remove delta (the max test of Chua et al., arXiv:2412.16802v1).

  Args:
    sigma: > 0 (scalar or array). steps_per_epoch: t >= 1. epsilon: real (broadcast).
    num_selected, num_epochs: k, E (the m = kE round 1-of-t' pair).
    thresholds: grid of C (default ``-5 sigma .. 1 + 12 sigma + 8``, 4001
      points).

  Returns:
    float64 array (broadcast of sigma and epsilon): max over C of
    ``p(C)^m - e^eps q(C)^m``, clipped at 0. Bound: lower.

  Concrete arrays on the accelerator layout run as blocks of one compiled
  program of a fixed lane count (:func:`lower_bound_lanes`), so its memory
  does not grow with the batch.
  """
  check_scheme(sigma, steps_per_epoch, num_selected, num_epochs)
  checks.check_range("epsilon", epsilon)
  if thresholds is not None:   # any reals (+-inf: a test that is always / never passed)
    checks.check_range("thresholds", thresholds, allow_inf=True)
  t, m = split_rounds(steps_per_epoch, num_selected, num_epochs)
  scaled = thresholds is None
  grid = (jnp.linspace(0.0, 1.0, _UNIT_GRID) if scaled
          else jnp.asarray(thresholds, jnp.float64).reshape(-1))
  if not traced((sigma, epsilon)) and (np.ndim(sigma) or np.ndim(epsilon) or np.ndim(t)) and (
      batching.block_programs() or not batching.whole_batch_fits(
          batching.broadcast_size(sigma, epsilon, t, m), 8 * 8 * grid.size)):
    # blocks on the accelerator layout, and on the CPU layout where the whole
    # batch would not fit the device's memory
    program = functools.partial(lower_bound_block, grid=grid, scaled=scaled)
    return batching.run_blocks(program, (sigma, epsilon, t, m), lower_bound_lanes(grid.size))
  lanes = jnp.broadcast_arrays(*(jnp.asarray(x, jnp.float64) for x in (sigma, epsilon, t, m)))
  return lower_bound_block(*lanes, grid, scaled=scaled)   # the whole batch: one program
