"""The accelerator layout of the allocation laws' pairwise sums: blocks of diagonals.

The CPU layout (:func:`jaxacct.allocation.pld._sum_law._run_loops`) runs one
diagonal a loop trip, a slice update each, with a run-time trip count (the
near band). Here every block of ``DIAGONAL_BLOCK`` diagonals of every piece
is summed at once into its own window (a gather-reduction; a static loop of
``DIAGONAL_BLOCK / DIAGONALS_PER_TRIP`` trips bounds the gathers'
temporaries), and the windows are combined into the output row by one
output-stationary gather-reduction: float64 rows only, no scatter, no slice
update, no loop whose trip count depends on the lanes or the data. Lanes are
the leading axis of every op when vmapped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

#: Diagonals per block (one window each; static).
DIAGONAL_BLOCK = 64
#: Diagonals of every block summed per loop trip (static; DIAGONAL_BLOCK: no
#: loop). The gathers of a trip hold (blocks, DIAGONALS_PER_TRIP, window)
#: elements per operand column and lane where XLA materialises them.
DIAGONALS_PER_TRIP = 8


def _windows(X, d, base, kap, o, live, W: int, n: int):
  """Per diagonal ``d`` (shape (nb, U)) of blocks whose windows start at output
  element ``base`` (nb,): the operands of its pairs at window element c,
  ``(X[j], X[j + d])`` with ``j = c - (start_d - base)`` (shape (nb, U, W, r)),
  0 where j or j + d is outside 0..n-1 or the diagonal is not ``live``, and
  the clipped diagonal.

  Diagonal d adds its pair (j, j + d) at output element ``start_d + j``,
  ``start_d = d + kappa(d) - o``; ``kappa`` drops by at most 1 a diagonal, so
  ``start_d`` is non-decreasing, ``start_d - base`` lies in 0..K-1 and a
  block's pairs lie in its window ``base .. base + W - 1`` (W = n + K). Each
  operand row is ONE window slice of the zero-padded operands per diagonal
  (a gather of contiguous windows under vmap: one start index per diagonal
  and lane, not one per element)."""
  K = W - n
  dk = jnp.minimum(d, n - 1)
  shift = d + kap[dk] - o - base[:, None]
  r = X.shape[-1]
  Xp = jnp.concatenate([jnp.zeros((K, r)), X, jnp.zeros((n + 2 * K + 1, r))])
  win = jax.vmap(jax.vmap(lambda s: lax.dynamic_slice(Xp, (s, jnp.zeros_like(s)), (W, r))))
  keep = live[..., None, None]
  return (jnp.where(keep, win(K - shift), 0.0), jnp.where(keep, win(K - shift + dk), 0.0), dk)


def _combine(seg, base, buf: int):
  """``out[:, x] = sum_b seg[b, :, x - base[b]]`` over the blocks whose window
  holds x: the blocks' windows added into two float64 rows of length ``buf``,
  one output-stationary gather-reduction."""
  W = seg.shape[-1]
  idx = jnp.arange(buf, dtype=jnp.int32)[None, :] - base[:, None]          # (nb, buf)
  ok = (idx >= 0) & (idx < W)
  g = jnp.take_along_axis(seg, jnp.clip(idx, 0, W - 1)[:, None, :], axis=2)  # (nb, 2, buf)
  return jnp.sum(jnp.where(ok[:, None, :], g, 0.0), axis=0)


def dense_sums(terms, X, his, n: int, kap, o, buf: int):
  """The rows ``(S, 2, buf)`` of S pairwise sums A + B on one lattice.

  ``X`` (S, n, r): each sum's operands stacked as columns (X + X is A + B
  with B = A: ``x y + x y = 2 (x y)`` exactly, the CPU layout's doubled
  orientation); ``his`` (S,): the end of the diagonals each sum runs (its
  near band; 0: none); ``terms(lo, hg, d, dk)``: the two parts of the pairs
  on a grid of diagonals from their operand windows (:func:`upper_terms`,
  :func:`lower_terms`), summed
  over the diagonal axis (-2). Every block of ``K`` diagonals (the main one
  included) spans an output window of ``n + K`` elements; its diagonals are
  summed ``DIAGONALS_PER_TRIP`` a trip. Every output element sums the same
  non-negative terms as the CPU layout's loop, re-associated (the rounding
  ledger counts terms, not their order).
  """
  K = min(DIAGONAL_BLOCK, n)
  d0 = jnp.asarray(np.arange(0, n, K, dtype=np.int32))
  W = n + K
  U = min(DIAGONALS_PER_TRIP, K)
  trips = -(-K // U)
  base = d0 + kap[jnp.minimum(d0, n - 1)] - o

  def one(Xs, hi, seg, u):
    d = d0[:, None] + u * U + jnp.arange(U, dtype=jnp.int32)[None, :]
    live = (d < hi) & (d < d0[:, None] + K)   # past K: the next block's
    lo, hg, dk = _windows(Xs, d, base, kap, o, live, W, n)
    a, b = terms(lo, hg, d, dk)
    return seg + jnp.stack([a, b], axis=1)

  body = lambda u, seg: jax.vmap(one, in_axes=(0, 0, 0, None))(X, his, seg, u)
  seg = jnp.zeros((X.shape[0], d0.shape[0], 2, W))
  seg = body(0, seg) if trips == 1 else lax.fori_loop(0, trips, body, seg)
  return jax.vmap(lambda sg: _combine(sg, base, buf))(seg)


def upper_terms(om):
  """The upper sum's parts on a grid (``X``: the operands' masses as columns
  (A, B)): each pair's mass split between the knots j (first part) and j + 1
  (second) with the diagonal's weight, as the CPU layout's body; the main
  diagonal (d = 0) has one orientation."""

  def terms(lo, hg, d, dk):
    main = (d == 0)[..., None]
    v = lo[..., 0] * hg[..., 1] + jnp.where(main, 0.0, lo[..., 1] * hg[..., 0])
    w = om[dk][..., None]
    return jnp.sum(v * (1.0 - w), axis=-2), jnp.sum(v * w, axis=-2)
  return terms


def lower_terms(scalars):
  """The lower sum's parts (mass, moment in units of the cell's left knot) on a
  grid (``X``: masses and relative moments as columns (a_A, f_A, a_B, f_B); ``scalars``: the per-diagonal tables r^-d, e^{kD} e^D, e^{-kD}
  and the scalar e^{-D} of the CPU layout's body). A pair stays in the cell
  of window element c or moves one cell up, to c + 1 (a static shift of the
  grid), by the same test as the CPU layout's body."""
  rdt, tht, sct, emD = scalars
  nxt = lambda x: jnp.concatenate([jnp.zeros_like(x[..., :1]), x[..., :-1]], axis=-1)

  def terms(lo, hg, d, dk):
    rd, th, sc = rdt[dk][..., None], tht[dk][..., None], sct[dk][..., None]
    main = (d == 0)[..., None]

    def parts(a, b):       # low from operand a, high from operand b
      mass = lo[..., 2 * a] * hg[..., 2 * b]
      s_rel = hg[..., 2 * b + 1] + lo[..., 2 * a + 1] * rd
      up = s_rel >= th
      m0, m1 = jnp.where(up, 0.0, mass), jnp.where(up, mass, 0.0)
      return m0 + nxt(m1), m0 * (s_rel * sc) + nxt(m1 * (s_rel * sc)) * emD

    (xa, xg), (ya, yg) = parts(0, 1), parts(1, 0)
    xa, xg = xa + jnp.where(main, 0.0, ya), xg + jnp.where(main, 0.0, yg)
    return jnp.sum(xa, axis=-2), jnp.sum(xg, axis=-2)
  return terms
