"""Host accumulation of the allocation laws' pairwise sums (``ns = HOST``).

A sum's diagonals come a block of rows at a time; runs of diagonals whose
output starts rise by one are added as one sheared block, each output cell in
the jitted loop's order (:mod:`._sum_law`).
"""

from __future__ import annotations

import numpy as np

#: Diagonals per block of rows on the host (``ns = HOST``; :func:`host_sums`):
#: a block's rows (32 x 1,025 floats, 260 KB) stay in the cache.
HOST_ROWS = 32


def host_sums(inits, blocks):
  """Host: the complex rows of the sums, sum k's ``blocks[k]`` ``(terms, d,
  L)`` (``d`` a column of consecutive diagonals, one a row; the main diagonal,
  then d ascending) added after its ``init`` rows: each output element
  receives its terms diagonal after diagonal, in the jitted loop's order
  (:func:`._sum_law._accumulate`), the same sums (real and imaginary parts
  never mix in a complex addition). Diagonals whose starts rise by one each
  (all but a few near the main diagonal) are added as one sheared block."""
  outs = []
  for (re0, im0), blks in zip(inits, blocks):
    out = np.empty(re0.shape[0], np.complex128)
    out.real, out.imag = re0, im0
    for terms, d, L in blks:
      start, r, i = terms(d)
      rows = r.shape[0]
      st = np.broadcast_to(start, (rows, 1))[:, 0]
      # runs of rows whose start rises by exactly one: one sheared sum each
      cuts = np.flatnonzero(np.diff(st) != 1) + 1
      for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), rows]):
        _add_sheared(out, int(st[a]), r[a:b], i[a:b], L)
    outs.append(out)
  return tuple(outs)


def _add_sheared(out, s0: int, r, i, L: int):
  """``out[s0 + k + j] += r[k, j] + i i[k, j]`` for the rows k in order: row k
  shifted k to the right by the stride of a flat buffer (a view), then one
  reduction over the rows, ``out``'s segment first (NumPy adds the rows of an
  axis-0 reduction one after another: the order of a loop over k)."""
  rows, width = r.shape[0], L + 1
  if rows == 1:
    seg = out[s0:s0 + width]
    seg.real += r[0]
    seg.imag += i[0]
    return
  span = width + rows - 1                       # the segment the rows touch
  buf = np.zeros((rows + 1) * (span + 1), np.complex128)
  buf[:span] = out[s0:s0 + span]
  body = buf[span:span + rows * (span + 1)].reshape(rows, span + 1)
  body.real[:, :width] = r
  body.imag[:, :width] = i
  # row k of the (rows, span + 1) body starts k cells later in rows of span
  view = buf[:(rows + 1) * span].reshape(rows + 1, span)
  out[s0:s0 + span] = view.sum(axis=0)
