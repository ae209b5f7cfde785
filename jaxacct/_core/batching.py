"""Lane batching for the kernels: ``lax.map`` in whole blocks.

``jax.lax.map(f, xs, batch_size=b)`` runs ``f`` vmapped over blocks of ``b``
lanes and, when the lane count is not a multiple of ``b``, traces ``f`` a
second time for the remainder: two copies of a large lane body in one
compiled kernel (about twice the compile time). :func:`map_blocks` pads the
lanes to whole blocks instead (repeating the last lane) and drops the padded
results, so ``f`` is traced once whatever the lane count.

:func:`lanes_per_block` is the one block-size policy: lanes one at a time on
the CPU layout, vmapped blocks on the accelerator layout. :func:`layout` says
which layout the kernels are built for: ``"accelerator"`` on a GPU,
``"cpu"`` on the CPU (a TPU's float64 programs run on its host's CPU:
:func:`jaxacct._core.sharding.float64_device`), unless forced by the environment variable
``JAXACCT_LAYOUT`` (``auto``, ``cpu`` or ``accelerator``, read at each call) or
by :func:`set_layout` (public as ``jaxacct.set_layout``), so that a CPU
machine can run and test the accelerator programs.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import sharding

LAYOUTS = ("auto", "cpu", "accelerator")
_FORCED: list = []   # [layout] once set_layout was called; else the environment decides


def _env_layout() -> str:
  v = os.environ.get("JAXACCT_LAYOUT", "auto").strip().lower() or "auto"
  if v not in LAYOUTS:
    raise ValueError(f"JAXACCT_LAYOUT must be one of {LAYOUTS}; got {v!r}.")
  return v


def set_layout(name: Optional[str] = "auto"):
  """Forces the kernels' layout for this process: ``"accelerator"``, ``"cpu"`` or ``"auto"``.

  ``"auto"`` (default) follows the device the float64 programs run on: the
  accelerator layout on a GPU, the CPU layout on the CPU (a TPU's host CPU
  included). ``"accelerator"`` on a CPU machine runs the accelerator
  programs (lanes as the leading axis of every op, no run-time trip counts)
  there, to test or count them. The
  choice is part of every compiled program's key, so switching recompiles
  and never reuses the other layout's programs. Also usable as a context
  manager (``with jaxacct.set_layout("accelerator"): ...``), which restores
  the previous setting on exit. The environment variable
  ``JAXACCT_LAYOUT`` sets the starting value.

  Raises ``ValueError`` naming ``name`` for any other value.
  """
  if name is None:
    name = "auto"
  if not isinstance(name, str) or name.lower() not in LAYOUTS:
    raise ValueError(f"name must be one of {LAYOUTS}; got {name!r}.")
  before = list(_FORCED)
  _FORCED[:] = [name.lower()]
  return _Restorer(before)


class _Restorer:
  """The value of :func:`set_layout`: ignorable, or a context manager that undoes it."""

  def __init__(self, before):
    self._before = before

  def __enter__(self):
    return layout()

  def __exit__(self, *exc):
    _FORCED[:] = self._before
    return False

  def __repr__(self):
    return f"<jaxacct layout {layout()!r}>"


def layout() -> str:
  """The layout in force: ``"accelerator"`` or ``"cpu"`` (resolved from "auto")."""
  v = _FORCED[0] if _FORCED else _env_layout()
  if v == "auto":   # the device the float64 programs run on (a TPU's: the host CPU)
    return "cpu" if sharding.float64_device().platform == "cpu" else "accelerator"
  return v


def accelerator_layout() -> bool:
  """Whether the accelerator layout is in force (see :func:`layout`)."""
  return layout() == "accelerator"


def block_programs() -> bool:
  """Whether concrete arrays run in the block programs (:func:`run_blocks`):
  on the accelerator layout, or under a lanes mesh (a door's ``devices=``,
  :mod:`jaxacct._core.sharding`), on any layout."""
  return accelerator_layout() or sharding.active()


def host_lanes() -> int:
  """The most lanes a door with a host lane path answers on the host, lane by
  lane (the ``max_lanes`` of :func:`jaxacct._core.namespace.for_inputs`): every
  count where arrays do not run in block programs (the CPU layout: a host lane
  there is as fast as a warm jitted one or faster, and compiles nothing), one
  where they do (the accelerator layout, a lanes mesh)."""
  return 1 if block_programs() else sys.maxsize


def on_host(*xs) -> bool:
  """Whether concrete work runs its formula on the host (NumPy, no compiled program):
  the CPU layout (:func:`host_lanes`) and no tracer among ``xs`` (pytrees; concrete
  jax arrays count as concrete). The accelerator layout and a lanes mesh run the
  compiled kernels, on the device."""
  return host_lanes() > 1 and not any(
      isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(xs))


def device_memory_bytes() -> int:
  """Usable memory of the default device in bytes (4 GiB where it cannot be read).

  On a GPU this is the allocator's limit; a CPU (also with the accelerator
  layout forced) gets a fixed 4 GiB budget, so block sizes there are the same
  on every machine and tests can count them. The environment variable
  ``JAXACCT_DEVICE_MEMORY`` (bytes, read at each call) overrides both: a
  share of a GPU used by others, or small blocks to spread a small sweep over
  a lanes mesh (:mod:`jaxacct._core.sharding`).
  """
  env = os.environ.get("JAXACCT_DEVICE_MEMORY", "").strip()
  if env:
    try:
      value = int(float(env))
    except ValueError:
      value = 0
    if value <= 0:
      raise ValueError(f"JAXACCT_DEVICE_MEMORY must be a positive number of bytes; got {env!r}.")
    return value
  dev = sharding.float64_device()
  if dev.platform != "cpu":
    try:
      stats = dev.memory_stats() or {}
      lim = int(stats.get("bytes_limit", 0))
      if lim > 0:
        return lim
    except Exception:   # pragma: no cover - backends without memory_stats
      pass
  return 4 << 30


def lanes_for_memory(bytes_per_lane: float, *, fraction: float = 0.25,
                     lo: int = 8, hi: int = 1 << 16, name: str = "the question") -> int:
  """Lanes per block: a power of two in [lo, hi] whose block uses at most
  ``fraction`` of :func:`device_memory_bytes`.

  A function of the device alone (never of the batch), so one compiled block
  program serves every batch size, and its peak memory is the same at 1e3
  and 1e5 lanes. Raises ``ValueError`` naming ``name`` (the parameter that
  sets a lane's size) where even ``lo`` lanes need more than the device's
  whole memory: said before anything is allocated (:func:`check_fits`).
  """
  check_fits(lo * float(bytes_per_lane), name=name)
  budget = fraction * device_memory_bytes()
  b = max(int(budget // max(float(bytes_per_lane), 1.0)), 1)
  p = 1 << (b.bit_length() - 1)
  return int(min(max(p, lo), hi))


def check_fits(nbytes: float, *, name: str) -> None:
  """``ValueError`` naming ``name`` where one block of ``nbytes`` bytes exceeds
  :func:`device_memory_bytes` (before any allocation: a clear error, not the
  allocator's)."""
  cap = device_memory_bytes()
  if float(nbytes) > cap:
    raise ValueError(
        f"{name} is too large for this device: one block of the question needs "
        f"{float(nbytes) / 2**30:.3g} GiB, more than the device's {cap / 2**30:.3g} GiB "
        f"(the environment variable JAXACCT_DEVICE_MEMORY sets that budget).")


def whole_batch_fits(lanes: int, bytes_per_lane: float, *, fraction: float = 0.25) -> bool:
  """Whether ``lanes`` lanes of ``bytes_per_lane`` bytes fit in one program:
  at most ``fraction`` of :func:`device_memory_bytes`. The CPU layout runs a
  batch as one program when it fits (one compile per input shape, as
  before) and in the block programs (:func:`run_blocks`) when it does not:
  every layout's peak memory is bounded by the device's."""
  return int(lanes) * float(bytes_per_lane) <= fraction * device_memory_bytes()


def broadcast_size(*args) -> int:
  """Number of lanes of the broadcast ``args`` (concrete values)."""
  return int(np.prod(np.broadcast_shapes(*(np.shape(a) for a in args)), dtype=np.int64))


def map_blocks(f: Callable, xs, *, batch_size: int):
  """``lax.map(f, xs, batch_size=...)`` with one traced copy of ``f``.

  Args:
    f: function of one lane (a pytree slice of ``xs``).
    xs: pytree of arrays sharing a leading (lane) axis of static length L >= 1.
    batch_size: static lanes per block; more than L means one block of L.

  Returns:
    ``f`` mapped over the L lanes (the padded lanes are computed and dropped).
  """
  leaves = jax.tree.leaves(xs)
  num = leaves[0].shape[0]
  b = max(1, min(int(batch_size), num))
  extra = -num % b
  if extra:
    xs = jax.tree.map(lambda a: jnp.concatenate(
        [a, jnp.repeat(a[-1:], extra, axis=0)], axis=0), xs)
  out = jax.lax.map(f, xs, batch_size=b)
  return jax.tree.map(lambda a: a[:num], out) if extra else out


def lanes_per_block(accelerator_lanes: int) -> int:
  """Lanes per vmapped block: 1 on the CPU layout, ``accelerator_lanes`` on the accelerator one.

  On the CPU a vmapped block buys no parallelism, and lane-dependent dynamic
  slices (the allocation laws' pairwise sums slide by an offset that depends
  on each lane's lattice step) become gathers and scatters over the whole
  block: one lane at a time runs a batch of allocation-PLD sigmas about twice
  as fast, and compiles faster. Accelerators need the vmapped lanes in
  parallel.
  Called at trace time (a static block size).
  """
  return int(accelerator_lanes) if accelerator_layout() else 1


def padded_lanes(size: int, chunk: int, *, host: bool = False) -> int:
  """Lanes a chunked program computes for ``size`` lanes (the last repeated):
  on the accelerator layout a multiple of ``chunk``, so every batch runs the
  one compiled chunk program (its lanes run in parallel there); on the CPU
  layout, and on the host, the next power of two."""
  if accelerator_layout() and not host:
    return max(-(-int(size) // int(chunk)), 1) * int(chunk)
  return 1 << max(int(size) - 1, 0).bit_length()


def run_blocks(program, args, lanes: int):
  """``program`` over the broadcast ``args``, ``lanes`` lanes a call (a host loop).

  Args:
    program: a function of ``len(args)`` float64 arrays of shape ``(lanes,)``
      returning a pytree of arrays whose leading axis is the lane.
    args: concrete values; broadcast together and flattened to L lanes.
    lanes: lanes per call (static: one compiled program serves every L).

  Returns:
    the pytree with leaves of shape ``broadcast shape + leaf.shape[1:]`` (jax
    arrays, put on the device without a program). The last block is padded
    by repeating the last lane, and the padded lanes' results are dropped.
    The calls are dispatched before any result is read, so the blocks queue
    on an accelerator.
  """
  arrs = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in args))
  shape = arrs[0].shape
  flat = [a.reshape(-1) for a in arrs]
  n = flat[0].size
  mesh = sharding.current_mesh()
  if mesh is not None:
    # a lanes mesh (a door's ``devices=``): the same blocks, spread over its
    # devices (jaxacct._core.sharding)
    return _run_blocks_sharded(program, flat, n, shape, lanes, mesh)
  blocks = max(-(-n // lanes), 1)
  pad = blocks * lanes - n
  if pad:
    flat = [np.concatenate([a, np.repeat(a[-1:] if n else np.ones(1), pad)]) for a in flat]
  outs = jax.device_get([program(*(a[i * lanes:(i + 1) * lanes] for a in flat))
                         for i in range(blocks)])
  return jax.tree.map(lambda *xs: jax.device_put(
      np.concatenate(xs)[:n].reshape(shape + xs[0].shape[1:])), *outs)


def _run_blocks_sharded(program, flat, n, shape, lanes, mesh):
  """:func:`run_blocks` over a lanes mesh: the same blocks of ``lanes`` lanes,
  block ``i`` on mesh device ``i mod D`` (:func:`jaxacct._core.sharding.run_items`;
  every process gets the whole result)."""
  blocks = max(-(-n // lanes), 1)
  pad = blocks * lanes - n
  if pad:
    flat = [np.concatenate([a, np.repeat(a[-1:] if n else np.ones(1), pad)]) for a in flat]
  outs = sharding.run_items(lambda i: program(*(a[i * lanes:(i + 1) * lanes] for a in flat)),
                            list(range(blocks)), ahead=True)
  return jax.tree.map(lambda *xs: jax.device_put(
      np.concatenate(xs)[:n].reshape(shape + xs[0].shape[1:])), *outs)
