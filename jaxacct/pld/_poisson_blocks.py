"""Poisson-subsampled Gaussian PLD queries in blocks of lanes (the accelerator layout).

On the CPU layout the array door (:func:`jaxacct.pld.poisson_gaussian_epsilon`,
``_delta``) takes one lane at a time: the per-step grid and its truncation on
the host, then one compiled composition and query per shape bucket. On the
accelerator layout the same formulas run for blocks of (lane, direction)
items, in two kinds of compiled block programs:

1. :func:`_scan_block` (static: a buffer of
   :func:`jaxacct._core.window_cells.grid_cells` points >= each item's grid):
   the per-step grid (connect-the-dots, pessimistic), its truncation indices
   (the door's per-step tail mass) and the Chernoff window of the composition;
2. :func:`_query_block` (static: ``cells`` and ``kept_cells`` of
   :func:`jaxacct._core.window_cells.window_cells`): the kept points of the
   grid again, the tilted FFT composition (``jaxacct.pld._compose``) on each
   item's own window (the CPU layout's length, traced) inside ``cells``
   points that it divides (by default the window itself), and the query.

The static keys are set by the values (sigma, q, num_steps), never by the
number of lanes, and are fewer than the CPU layout's buckets: one grid
buffer every three octaves, one query program per window length whatever
the kept length. 16 sigmas in [0.5, 5] or 1,000 in [0.3, 30] (q 0.01, 1e3
steps) compile 11 and 18 programs (one per power-of-two grid and one per
(kept length, window) before: 22 and 35).
Each key's program is called from a host loop over blocks whose lane count
is sized from the device's memory
(:func:`jaxacct._core.batching.lanes_for_memory`). Lanes with q = 0 or 1 (a
plain Gaussian or nothing) take the CPU layout's path. Bound: upper, as the
CPU layout: the same windows, grids and truncations (zero padding moves no
mass). The grid's special functions (XLA's, not SciPy's) differ by ~1e-12
relative on the connect-the-dots split, which the composition carries to
epsilon by up to ~3e-9 relative (sigma 0.7, q 1e-3, 2,000 steps).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core.batching import lanes_for_memory, run_blocks
from jaxacct._core.compiled import ACCELERATOR_OPTIONS, jit
from jaxacct._core.namespace import JAX
from jaxacct._core.window_cells import grid_cells, window_cells
from jaxacct.pld._compose import compose_core, window_range
from jaxacct.pld._core import DEFAULT_TAIL_MASS
from jaxacct.pld._mechanisms import fast_lens, poisson_grid_bounds, poisson_intervals
from jaxacct.pld._query import delta_core, epsilon_core

# Bytes per item, from XLA:CPU's temporaries with a margin: the scan 545 a
# buffer point at 2,048 points (358 at 65,536), the query 230 a cell (its
# kept points included; 5.7e4 to 7.9e5 cells). Blocks are as large as a
# quarter of the device's memory holds.
_SCAN_BYTES_PER_POINT = 768
_QUERY_BYTES_PER_POINT = 512


def _lanes(bytes_per_item):
  """Items per block: a power of two, what a quarter of the device's memory holds."""
  return lanes_for_memory(bytes_per_item, lo=1)


def _points(sigma, q, lo_idx, size, step, add, k):
  """Grid P-masses at the points ``k`` (int64 array) of one item's grid.

  Point ``j`` of the pessimistic grid of :func:`jaxacct.pld._mechanisms._poisson_grid`
  gets the lower share ``a`` of interval ``j + 1`` (when ``j + 1 < size``), the
  upper share ``b`` of interval ``j`` (when ``1 <= j < size``) and, at ``j = 0``,
  the mass below the grid; points ``j >= size`` get none. Also returns the
  P-mass of every interval ``k`` (interval ``size`` is the mass above the grid).
  """
  kk = jnp.concatenate([k, k[-1:] + 1]).astype(jnp.float64)
  a, b, pk = poisson_intervals(sigma, q, lo_idx, kk, size, step, add, JAX)
  j = kk[:-1]
  lower = jnp.where(j + 1.0 <= size - 1.0, a[1:], 0.0)
  upper = jnp.where((j >= 1.0) & (j <= size - 1.0), b[:-1], 0.0)
  probs = lower + upper
  probs = probs + jnp.where(j == 0.0, pk[:-1], 0.0)
  return probs, pk


def _scan_lane(sigma, q, lo_idx, size, step, add, tail, count, *, buf):
  """One item of :func:`_scan_block`: ``(lo, hi, below, inf, window lo, window hi)``."""
  lo_idx = lo_idx.astype(jnp.int64)
  add = add > 0.5
  idx = jnp.arange(buf, dtype=jnp.int64)
  probs, pk = _points(sigma, q, lo_idx, size, step, add, idx)
  above = pk[size.astype(jnp.int64)]
  # jaxacct.pld._core.truncate_host, on the first `size` points
  c = jnp.cumsum(probs)
  r = jnp.cumsum(probs[::-1])[::-1]
  n = size.astype(jnp.int64)
  lo = jnp.searchsorted(c, tail, side="right").astype(jnp.int64)
  hi = jnp.max(jnp.where((r > tail) & (idx < n), idx, -1))
  hi = jnp.where(hi < 0, n - 1, hi)
  lo = jnp.minimum(lo, hi)
  below = jnp.where(lo > 0, c[jnp.maximum(lo - 1, 0)], 0.0)
  above_t = jnp.where(hi + 1 < n, r[jnp.minimum(hi + 1, buf - 1)], 0.0)
  inf = above + above_t
  kept = jax.lax.dynamic_slice(jnp.concatenate([probs, jnp.zeros(buf)]), (lo,), (buf,))
  kept = jnp.where(idx <= hi - lo, kept, 0.0).at[0].add(below)
  w_lo, w_hi = window_range((kept,), step, (count,), tail_mass=DEFAULT_TAIL_MASS, ns=JAX)
  return lo, hi, below, inf, w_lo, w_hi


@functools.partial(jit, static_argnames=("buf",), compiler_options=ACCELERATOR_OPTIONS)
def _scan_block(sigma, q, lo_idx, size, step, add, tail, count, *, buf):
  """Grid, truncation and composition window of a block of items (see module docstring)."""
  return jax.vmap(functools.partial(_scan_lane, buf=buf))(
      sigma, q, lo_idx, size, step, add, tail, count)


def _query_lane(sigma, q, lo_idx, size, step, add, count, lo, hi, below, inf, value, window,
                kept_len, *, kept_cells, cells, quantity):
  """One item of :func:`_query_block`: epsilon at ``value`` (a delta), or delta.

  The kept grid in ``kept_cells`` points (zeros past ``hi``), composed on
  the item's own window (``window`` points, a divisor of ``cells``) inside
  arrays of ``cells`` points; ``kept_len`` is the kept length the window
  was sized with (it sets the composition's largest index)."""
  lo_idx, lo, hi = lo_idx.astype(jnp.int64), lo.astype(jnp.int64), hi.astype(jnp.int64)
  add = add > 0.5
  k = lo + jnp.arange(kept_cells, dtype=jnp.int64)
  probs, _ = _points(sigma, q, lo_idx, size, step, add, k)
  kept = jnp.where(k <= hi, probs, 0.0).at[0].add(below)
  y, offset, inf = compose_core((kept,), (lo_idx + lo,), (inf,), step, True,
                                (count.astype(jnp.int64),), size=cells,
                                tail_mass=DEFAULT_TAIL_MASS, ns=JAX,
                                period=window.astype(jnp.int64),
                                max_idx=count * (kept_len - 1.0))
  if quantity == "epsilon":
    return epsilon_core(y, offset, step, inf, value, "up", JAX, loopless=True)
  return delta_core(y, offset, step, inf, value, JAX, loopless=True)


@functools.partial(jit, static_argnames=("kept_cells", "cells", "quantity"),
                   compiler_options=ACCELERATOR_OPTIONS)
def _query_block(sigma, q, lo_idx, size, step, add, count, lo, hi, below, inf, value, window,
                 kept_len, *, kept_cells, cells, quantity):
  """Kept grid, composition and query of a block of items (see module docstring)."""
  return jax.vmap(functools.partial(_query_lane, kept_cells=kept_cells, cells=cells,
                                    quantity=quantity))(
      sigma, q, lo_idx, size, step, add, count, lo, hi, below, inf, value, window, kept_len)


def _groups(keys):
  """``{key: indices}`` of the rows of ``keys`` (a tuple of int arrays)."""
  stacked = np.stack(keys, axis=1)
  uniq, inv = np.unique(stacked, axis=0, return_inverse=True)
  inv = inv.ravel()
  return {tuple(int(v) for v in u): np.nonzero(inv == g)[0] for g, u in enumerate(uniq)}


def query_blocks(quantity, sigma, q, num_steps, value, steps, tails):
  """The array door's values on the accelerator layout (see module docstring).

  Args:
    quantity: ``"epsilon"`` (``value`` a delta) or ``"delta"``.
    sigma, q, num_steps, value, steps, tails: float64 arrays of one shape
      (L,) (``steps`` the grid step and ``tails`` the per-step truncation mass
      of each lane); q in (0, 1).

  Returns:
    float64 array (L,): the max over the two directions.
  """
  n = sigma.shape[0]
  with jax.enable_x64(True):
    # items: every lane twice, remove then add
    it = {"sigma": np.tile(sigma, 2), "q": np.tile(q, 2), "step": np.tile(steps, 2),
          "count": np.tile(num_steps, 2), "tail": np.tile(tails, 2),
          "value": np.tile(value, 2), "add": np.repeat([0.0, 1.0], n)}
    lo_idx, size = poisson_grid_bounds(it["sigma"], it["q"], it["step"], it["add"] > 0.5)
    it["lo_idx"], it["size"] = lo_idx.astype(np.float64), size.astype(np.float64)
    m = 2 * n
    scan = [np.zeros(m) for _ in range(6)]
    buf = grid_cells(size)
    names = ("sigma", "q", "lo_idx", "size", "step", "add", "tail", "count")
    for (b,), rows in _groups((buf,)).items():
      program = functools.partial(_scan_block, buf=b)
      outs = run_blocks(program, tuple(it[k][rows] for k in names),
                        _lanes(_SCAN_BYTES_PER_POINT * b))
      for dst, o in zip(scan, outs):
        dst[rows] = np.asarray(o)
    lo, hi, below, inf, w_lo, w_hi = scan
    lo, hi = lo.astype(np.int64), hi.astype(np.int64)
    kept = hi - lo + 1
    kept_len = np.left_shift(np.int64(1), np.ceil(np.log2(np.maximum(kept, 1))).astype(np.int64))
    kept_len = np.where(kept_len < kept, 2 * kept_len, kept_len)
    # jaxacct.pld._compose._natural_size, per item
    max_idx = it["count"].astype(np.int64) * (kept_len - 1)
    wl = np.maximum(0, np.floor(w_lo)).astype(np.int64)
    wh = np.minimum(max_idx, np.ceil(w_hi)).astype(np.int64)
    window = fast_lens(np.maximum(wh - wl + 1, 2))
    window = np.where(window > max_idx + 1, fast_lens(max_idx + 1), window)
    cells, kept_cells = window_cells(window, kept_len)
    it.update(lo=lo.astype(np.float64), hi=hi.astype(np.float64), below=below, inf=inf,
              window=window.astype(np.float64), kept_len=kept_len.astype(np.float64))
    names = ("sigma", "q", "lo_idx", "size", "step", "add", "count", "lo", "hi", "below",
             "inf", "value", "window", "kept_len")
    out = np.zeros(m)
    for (c, k2), rows in _groups((cells, kept_cells)).items():
      program = functools.partial(_query_block, kept_cells=k2, cells=c, quantity=quantity)
      lanes = _lanes(_QUERY_BYTES_PER_POINT * c + _SCAN_BYTES_PER_POINT * k2)
      out[rows] = np.asarray(run_blocks(program, tuple(it[k][rows] for k in names), lanes))
    return np.maximum(out[:n], out[n:])


def door_blocks(quantity, one, given, *, sigma, q, num_steps, value, step, default_step,
                tail_mass):
  """The array door of :func:`jaxacct.pld.poisson_gaussian_epsilon` (``_delta``) on
  the accelerator layout: broadcast, lanes with 0 < q < 1 in blocks
  (:func:`query_blocks`), the others (q = 0 or 1) by ``one`` as on the CPU layout.

  ``one(sigma, q, num_steps, **{given: value})`` answers one lane;
  ``default_step`` and ``tail_mass`` are the door's grid step and per-step
  truncation mass (functions of one lane). Returns a float64 array of the
  broadcast shape, or a float for 0-d input.
  """
  arrs = np.broadcast_arrays(*(np.asarray(x, np.float64) for x in (sigma, q, num_steps, value)))
  shape = arrs[0].shape
  s, qq, t, v = (a.ravel() for a in arrs)
  out = np.empty(s.size)
  mid = (qq > 0) & (qq < 1)
  for i in np.nonzero(~mid)[0]:
    out[i] = one(s[i], qq[i], t[i], **{given: v[i]})
  if mid.any():
    s, qq, t, v = s[mid], qq[mid], t[mid], v[mid]
    if step is None:
      steps = np.array([default_step(sigma=a, q=b, num_steps=int(c))
                        for a, b, c in zip(s.tolist(), qq.tolist(), t.tolist())])
    else:
      steps = np.full(s.size, float(step))
    uniq, inv = np.unique(t, return_inverse=True)
    tails = np.array([tail_mass(int(c)) for c in uniq.tolist()])[inv.ravel()]
    out[mid] = query_blocks(quantity, s, qq, t, v, steps, tails)
  return out.reshape(shape) if shape else float(out[0])
