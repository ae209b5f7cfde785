"""The lower convex hull of points sorted by x: Andrew's monotone chain, run fast.

The same pops as the plain chain, in the same float64 arithmetic, so the same
indices for every input (tests/_core/test_hull.py holds them equal); runs the
plain chain cannot change are taken whole. Proofs: docs/bounds/numerics.md.
"""

from __future__ import annotations

import numpy as np


def _cross(x, y, a, b, i):
  """The chain's test: > 0 keeps ``b`` (below the chord a -> i)."""
  return (x[b] - x[a]) * (y[i] - y[a]) - (y[b] - y[a]) * (x[i] - x[a])


def lower_hull_indices(x, y) -> np.ndarray:
  """Indices of the lower convex hull of points sorted by x (ascending, ties allowed).

  The monotone chain: each point is pushed after popping every top ``b``
  with ``cross(a, b, i) <= 0`` (on or above the chord from the point below
  it to the new one). Two kinds of run skip its Python loop, with the pops it
  would make:

  * a convex run: where the top two are the points just before ``i`` and the
    consecutive triples' crosses (one vectorised pass, the same operations)
    are > 0 up to ``j``, the chain pops nothing there: ``i .. j - 1`` are
    pushed;
  * a flat run ``s .. e`` (equal finite y, finite x): each new point pops
    the one before it (a zero cross), and where the point ``a`` below ``s``
    lies higher and ``cross(a, s, s + 1) > 0``, every ``cross(a, s, k)`` is
    too (it does not decrease in k: rounding is monotone), so ``s`` stays and
    the chain ends the run holding ``s, e``.

  Returns:
    int array of the hull's indices, ascending.
  """
  x = np.asarray(x, np.float64).ravel()
  y = np.asarray(y, np.float64).ravel()
  n = x.size
  xs, ys = x.tolist(), y.tolist()
  if n >= 3:
    with np.errstate(invalid="ignore", over="ignore"):   # as the chain's Python floats
      c = (x[1:-1] - x[:-2]) * (y[2:] - y[:-2]) - (y[1:-1] - y[:-2]) * (x[2:] - x[:-2])
    bad = np.flatnonzero(c <= 0) + 2          # where a convex run stops (NaN: a push)
    bad = np.append(bad, n).tolist()
    ends = np.flatnonzero(y[1:] != y[:-1])    # the last index of each run of equal y
    ends = np.append(ends, n - 1).tolist()
    flat_ok = bool(np.all(np.abs(x) < 1e307))   # differences of x finite
  else:
    bad, ends, flat_ok = [n], [n - 1], False
  nb = ne = 0                                 # cursors into bad and ends
  idx = []
  i = 0
  while i < n:
    if i >= 2 and len(idx) >= 2 and idx[-1] == i - 1 and idx[-2] == i - 2:
      while bad[nb] < i:
        nb += 1
      j = bad[nb]
      if j > i:                               # a convex run: pushes only
        idx.extend(range(i, j))
        i = j
        continue
    xi, yi = xs[i], ys[i]
    while len(idx) >= 2:
      a, b = idx[-2], idx[-1]
      cross = (xs[b] - xs[a]) * (yi - ys[a]) - (ys[b] - ys[a]) * (xi - xs[a])
      if cross <= 0:
        idx.pop()
      else:
        break
    idx.append(i)
    if flat_ok and i + 1 < n and ys[i + 1] == yi and abs(yi) < 1e307:
      while ends[ne] < i:
        ne += 1
      # the run's point the chain keeps: i, or the one below it when that has the
      # same y (then i + 1 pops i first)
      k = 2 if len(idx) >= 2 and ys[idx[-2]] == yi else 1
      s = idx[-k]
      if len(idx) == k or (ys[idx[-k - 1]] > yi
                           and _cross(xs, ys, idx[-k - 1], s, i + 1) > 0):
        if k == 2:
          idx.pop()
        idx.append(ends[ne])                  # a flat run: the chain keeps s and its end
        i = ends[ne] + 1
        continue
    i += 1
  return np.asarray(idx, int)


def certified_at_least(x, y, at: float, level: float) -> bool:
  """True only where the lower convex hull of the points (x sorted) is >= ``level``
  at x = ``at`` (some points below ``at``, some at or above it).

  A line below every point bounds the hull from below: the one of slope
  ``beta`` (the chord of the two points around ``at``) through the lowest
  ``y - beta (x - at)``, each less 8 ulps of its terms (more than twice its
  rounding). False says nothing (then compute the hull).
  """
  x = np.asarray(x, np.float64).ravel()
  y = np.asarray(y, np.float64).ravel()
  k = int(np.searchsorted(x, at))
  if not 0 < k < x.size or not x[k] > x[k - 1]:
    return False
  beta = (y[k] - y[k - 1]) / (x[k] - x[k - 1])
  with np.errstate(invalid="ignore", over="ignore"):
    run = beta * (x - at)
    low = y - run - 8.0 * np.finfo(np.float64).eps * (np.abs(y) + np.abs(run))
  return bool(np.isfinite(beta) and np.all(np.isfinite(low)) and np.min(low) >= level)
