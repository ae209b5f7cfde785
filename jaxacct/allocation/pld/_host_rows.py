"""Host accumulation rows of the allocation laws' pairwise sums (``ns = HOST``).

A sum's diagonals are laid out as flat (index, real, imaginary) rows and summed
by one ``np.bincount`` per part, each output cell in the jitted loop's order
(:mod:`._sum_law`); a t-fold sum's levels on a thread share the rows.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

#: Diagonals per block of rows on the host (``ns = HOST``; :func:`host_sums`).
HOST_ROWS = 128


_WORK = threading.local()   # ns = HOST: the flat rows of this thread's t-fold sum


@contextlib.contextmanager
def host_workspace(ns):
  """Host: a t-fold sum's levels on this thread share one set of flat rows
  (:func:`flat_rows`; fresh ones, some MB a sum handed back to the OS between
  levels, cost a fresh process more in page faults than the sums). Jitted: nothing."""
  prev = getattr(_WORK, "rows", None)
  _WORK.rows = () if ns.is_host else prev
  try:
    yield
  finally:
    _WORK.rows = prev


def flat_rows(total: int):
  """Uninitialised ``(index, real, imaginary)`` rows of length ``total``: views
  of the workspace's (grown as needed) where one is open."""
  rows = getattr(_WORK, "rows", None)
  if not rows or rows[0].shape[0] < total:
    rows = (np.empty(total, np.intp), np.empty(total), np.empty(total))
    if getattr(_WORK, "rows", None) is not None:
      _WORK.rows = rows
  return tuple(r[:total] for r in rows)


def host_sums(inits, blocks):
  """Host: the complex rows of the sums, sum k's ``blocks[k]`` ``(terms, d,
  L)`` (``d`` a column of consecutive diagonals, one a row; the main diagonal,
  then d ascending) laid out one after another after its ``init`` rows in flat
  rows (:func:`flat_rows`) and summed by ONE ``np.bincount`` per part, which
  adds in array order: each output element receives its terms diagonal after
  diagonal, in the jitted loop's order (:func:`._sum_law._accumulate`), the same sums."""
  outs = []
  for (re0, im0), blks in zip(inits, blocks):
    size = re0.shape[0]
    idx, re, im = flat_rows(size + sum(d.shape[0] * (L + 1) for _, d, L in blks))
    idx[:size], re[:size], im[:size] = np.arange(size), re0, im0
    k = size
    for terms, d, L in blks:
      start, r, i = terms(d)
      c = d.shape[0] * (L + 1)
      for row, v in ((idx, start + np.arange(L + 1)), (re, r), (im, i)):
        row[k:k + c].reshape(-1, L + 1)[...] = v
      k += c
    out = np.empty(size, np.complex128)
    out.real, out.imag = (np.bincount(idx, w, minlength=size)[:size] for w in (re, im))
    outs.append(out)
  return tuple(outs)
