"""The accelerator layout of the allocation laws' pairwise sums: blocks of diagonals.

The CPU layout (:func:`jaxacct.allocation._sum_law._run_loops`) runs one
diagonal a loop trip, a slice update each, with a run-time trip count (the
near band). Here a trip sums ``DIAGONAL_BLOCK`` diagonals at once, as one
reduction of gathers from the length-n operands and one slice update, with a
static trip count: lanes are the leading axis of every op when vmapped, and
XLA:GPU runs no loop whose length it does not know.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

#: Diagonals per trip of the accelerator layout's pairwise sums (static).
DIAGONAL_BLOCK = 64


def dense_pairs(d0, K: int, L: int, hi, kap, o, n: int):
  """The index grid of the block of diagonals ``d0 .. d0 + K - 1``.

  Diagonal d adds its pair of low element j (pair ``(j, j + d)``) at output
  element ``start_d + j``, ``start_d = d + kappa(d) - o``. ``kappa`` drops by at
  most 1 a diagonal (``log(1 + r^-d) / D`` falls by at most 1/2), so
  ``start_d`` is non-decreasing and the block's outputs lie in the window
  ``base = start_{d0}`` .. ``base + L + K - 1``. Returns ``(base, d, j,
  live)``: per (diagonal k, window element c) the pair's low index ``j = c -
  (start_{d0+k} - base)``, and ``live`` (d < hi, per k). The block's sum at
  element c is one reduction over k of gathers from the length-n operands:
  the same products and weights as the CPU layout's loop, re-associated
  (nonnegative terms: the rounding ledger, which counts terms, is unchanged).
  """
  d = d0 + jnp.arange(K, dtype=jnp.int32)
  dk = jnp.minimum(d, n - 1)
  start = d + kap[dk] - o
  c = jnp.arange(L + K, dtype=jnp.int32)
  j = c[None, :] - (start - start[0])[:, None]
  return start[0], dk, j, (d < hi)[:, None]


def gather_rows(X, j, dk, live, n: int):
  """``(X[j], X[j + d])`` at the block's (k, c) grid, rows of the stacked
  operands ``X`` (shape (n, r)): one gather for the low and one for the high
  element of every operand; 0 where the pair is not one of the block (a dead
  diagonal, or an index off the window)."""
  jh = j + dk[:, None]
  ok = (live & (j >= 0) & (jh < n))[..., None]
  return (jnp.where(ok, X[jnp.clip(j, 0, n - 1)], 0.0),
          jnp.where(ok, X[jnp.clip(jh, 0, n - 1)], 0.0))


def add_window(out, base, seg):
  """``out[base : base + len(seg)] += seg`` (one slice update a block)."""
  return lax.dynamic_update_slice(out, lax.dynamic_slice(out, (base,), seg.shape) + seg,
                                  (base,))


def upper_block(X, symmetric: bool, kap, om, o, n: int):
  """``block(L, K)`` -> the trip body ``(d0, hi, out) -> out`` of the upper sum
  (``X``: the operands' masses stacked, (n, 1) for X + X, (n, 2) for A + B):
  each pair's mass is split between the knots j (real part) and j + 1
  (imaginary part) with the diagonal's weight, as the CPU layout's body."""
  def block(L: int, K: int):
    def body(d0, hi, out):
      base, dk, j, live = dense_pairs(d0, K, L, hi, kap, o, n)
      lo, hg = gather_rows(X, j, dk, live, n)
      if symmetric:
        v = (lo[..., 0] * hg[..., 0]) * 2.0
      else:
        v = lo[..., 0] * hg[..., 1] + lo[..., 1] * hg[..., 0]
      w = om[dk][:, None]
      return add_window(out, base, lax.complex(jnp.sum(v * (1.0 - w), axis=0),
                                               jnp.sum(v * w, axis=0)))
    return body
  return block


def lower_block(X, symmetric: bool, kap, o, n: int, scalars):
  """``block(L, K)`` -> the trip body of the lower sum (``X``: masses and
  relative moments of the operands stacked as columns (a, f) per operand;
  ``scalars``: the per-diagonal tables r^-d, e^{kD} e^D, e^{-kD} and the scalar
  e^{-D} of the CPU layout's body). A pair's mass and exact moment stay in
  the cell of window element c or move one cell up, to c + 1 (a static
  shift of the grid), by the same test as the CPU layout's body."""
  rdt, tht, sct, emD = scalars
  nxt = lambda x: jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], axis=1)

  def block(L: int, K: int):
    def body(d0, hi, out):
      base, dk, j, live = dense_pairs(d0, K, L, hi, kap, o, n)
      rd, th, sc = rdt[dk][:, None], tht[dk][:, None], sct[dk][:, None]
      lo, hg = gather_rows(X, j, dk, live, n)

      def parts(a, b):       # low from operand a, high from operand b
        mass = lo[..., 2 * a] * hg[..., 2 * b]
        s_rel = hg[..., 2 * b + 1] + lo[..., 2 * a + 1] * rd
        up = s_rel >= th
        m0, m1 = jnp.where(up, 0.0, mass), jnp.where(up, mass, 0.0)
        return m0 + nxt(m1), m0 * (s_rel * sc) + nxt(m1 * (s_rel * sc)) * emD

      if symmetric:
        xa, xg = parts(0, 0)
        xa, xg = xa * 2.0, xg * 2.0
      else:
        (xa, xg), (ya, yg) = parts(0, 1), parts(1, 0)
        xa, xg = xa + ya, xg + yg
      return add_window(out, base, lax.complex(jnp.sum(xa, axis=0), jnp.sum(xg, axis=0)))
    return body
  return block
