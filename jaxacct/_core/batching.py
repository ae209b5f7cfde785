"""Lane batching for the kernels: ``lax.map`` in whole blocks.

``jax.lax.map(f, xs, batch_size=b)`` runs ``f`` vmapped over blocks of ``b``
lanes and, when the lane count is not a multiple of ``b``, traces ``f`` a
second time for the remainder: two copies of a large lane body in one
compiled kernel (about twice the compile time). :func:`map_blocks` pads the
lanes to whole blocks instead (repeating the last lane) and drops the padded
results, so ``f`` is traced once whatever the lane count.

:func:`lanes_per_block` is the one block-size policy: lanes one at a time on
the CPU, vmapped blocks on accelerators.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


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
  """Lanes per vmapped block: 1 on the CPU, ``accelerator_lanes`` elsewhere.

  On the CPU a vmapped block buys no parallelism, and lane-dependent dynamic
  slices (the allocation laws' pairwise sums slide by an offset that depends
  on each lane's lattice step) become gathers and scatters over the whole
  block: one lane at a time ran 16 allocation-PLD sigmas (t=234, E=10, 1024
  knots) in 1.38 s instead of 3.18 s, and the DP-SGD calibration compiled in
  10.6 s instead of 13.5 s (2 cores, 2026-11-24). Accelerators need the
  vmapped lanes in parallel.
  Called at trace time (a static block size).
  """
  return 1 if jax.default_backend() == "cpu" else int(accelerator_lanes)
