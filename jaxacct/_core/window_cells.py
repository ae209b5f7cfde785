"""Few program lengths for many FFT windows (the accelerator layout's PLD blocks).

A window of ``N`` points (``2^a`` or ``3 * 2^a``) is composed inside a ring of
``M`` cells that ``N`` divides (:func:`decimated_powers`), so one compiled
program serves every window between two of the few lengths :func:`window_cells`
rounds to; :func:`grid_cells` does the same for the per-step grid buffers.
"""

from __future__ import annotations

import numpy as np

from jaxacct._core import tilted_fft

#: Windows round up every ``CELL_OCTAVES`` octaves of each form (a window
#: point costs at most ``2^CELL_OCTAVES`` cells of work and memory) from
#: ``2^CELL_FLOOR`` points; a window whose rounded length would pass
#: ``CELLS_ROUNDED_TO`` keeps its own. 1 and 0: every window keeps its length,
#: because a longer FFT rounds the composition otherwise: at 3 and 12 (12
#: programs for 1,000 sigmas in [0.3, 30], q 0.01, 1e3 steps, not 17), an
#: epsilon at sigma 0.8 moved by 1.8e-11 relative, past the layouts' 1e-12.
#: Grid buffers: every ``GRID_OCTAVES`` octaves from ``2^GRID_FLOOR`` points
#: (the scan's outputs do not move with the buffer).
CELL_OCTAVES = 1
CELL_FLOOR = 0
CELLS_ROUNDED_TO = 1 << 20
GRID_OCTAVES = 3
GRID_FLOOR = 12


def _level(n, octaves, floor):
  """The smallest ``2^(octaves j)`` or ``3 * 2^(octaves j)`` (``j`` from
  ``floor / octaves``) of the form of ``n`` (int64 array of ``2^a``, ``3 * 2^a``)
  that ``n`` divides (elementwise)."""
  n = np.asarray(n, np.int64)
  three = (n % 3 == 0) & (n >= 3)
  a = np.round(np.log2(np.where(three, n // 3, n))).astype(np.int64)
  a = np.maximum(-(-a // octaves) * octaves, floor)
  return np.where(three, 3, 1) * np.left_shift(np.int64(1), a)


def window_cells(window, kept_len):
  """``(cells, kept_cells)`` (int64 arrays) of PLD queries whose composition
  windows are ``window`` (``2^a`` or ``3 * 2^a``) and per-step PLDs ``kept_len``
  (powers of two) points long.

  ``cells`` is a multiple of ``window``: the window rounded up as the module
  constants say. ``kept_cells``: the largest power of two <= ``cells``, or
  ``kept_len`` where that is longer (it wraps onto the window). So one
  program length serves every window of one form within ``CELL_OCTAVES``
  octaves, and every kept length up to it."""
  window, kept_len = np.asarray(window, np.int64), np.asarray(kept_len, np.int64)
  cells = _level(window, CELL_OCTAVES, CELL_FLOOR)
  cells = np.where(cells > np.maximum(window, CELLS_ROUNDED_TO), window, cells)
  kept_cells = np.left_shift(np.int64(1), np.floor(np.log2(cells)).astype(np.int64))
  kept_cells = np.maximum(kept_cells, kept_len)
  return cells, kept_cells


def grid_cells(size):
  """Buffer lengths (int64 array) for grids of ``size`` points: the smallest
  ``2^(GRID_OCTAVES j) >= size``, at least ``2^GRID_FLOOR``."""
  a = np.ceil(np.log2(np.maximum(np.asarray(size, np.int64), 1))).astype(np.int64)
  return np.left_shift(np.int64(1), np.maximum(-(-a // GRID_OCTAVES) * GRID_OCTAVES,
                                               GRID_FLOOR))


def decimated_powers(rings, counts, size, period, xp):
  """:func:`jaxacct._core.tilted_fft.convolve_powers` on ``period`` cells
  (traced int, a divisor of ``size``) inside rings of ``size`` cells.

  The ``period``-point DFT of a ring is its ``size``-point DFT at every
  ``r``-th frequency (``r = size / period``: the ``size``-ring wraps onto the
  ``period``-ring as :func:`jaxacct._core.tilted_fft.wrap` would), so the other
  frequencies are set to 0 and the inverse transform times ``r`` is the
  ``period``-point composition, repeated ``r`` times along the ``size`` cells.
  The same sums as a ``period``-point FFT, rounded by another FFT length."""
  spec = None
  for x, c in zip(rings, counts):
    f = tilted_fft.cpow(xp.fft.rfft(x, axis=-1), c, xp)
    spec = f if spec is None else spec * f
  r = size // period
  keep = xp.mod(xp.arange(size // 2 + 1), r) == 0
  return xp.fft.irfft(xp.where(keep, spec, 0.0), size, axis=-1) * xp.asarray(r, xp.float64)
