"""Suffix sums without sequential loops, for the accelerator layout.

``jaxacct.pld._query``'s tables carry block sums from the top of a PLD down by
two reverse scans (window/256 sequential trips each); these are the same sums
of nonnegative terms as static-depth products and an associative scan.
"""

from __future__ import annotations

import jax

BLOCK = 256


def later_sum(v, log_r, xp):
  """``w_b = sum_{j > b} r^(j - b - 1) v_j`` (``r = e^log_r < 1``; ``v >= 0``, (n,)),
  with no loop: blocks of ``BLOCK`` as one triangular product, their
  carries by the same formula one level up (static depth ``log_256 n``), each
  power of ``r`` one exponential. A sum of nonnegative terms, as the scan of
  ``jaxacct.pld._query``'s tables it replaces on the accelerator layout (another order)."""
  n = v.shape[0]
  bsz = BLOCK
  idx = xp.arange(min(n, bsz), dtype=xp.float64)
  diff = idx[None, :] - idx[:, None] - 1.0  # j - b - 1 (row b, column j)
  geo = xp.where(diff >= 0, xp.exp(xp.maximum(diff, 0.0) * log_r), 0.0)
  if n <= bsz:
    return geo @ v
  nb = -(-n // bsz)
  x = xp.pad(v, (0, nb * bsz - n)).reshape(nb, bsz)
  loc = x @ geo.T
  # carry into block k: sum over later blocks k' of R^(k'-k-1) s_k', R = r^B,
  # s_k' = sum_i r^i v_(k'B+i); at row i it is scaled by r^(B-1-i)
  s = x @ xp.exp(idx * log_r)
  carry = later_sum(s, bsz * log_r, xp)
  out = loc + xp.exp((bsz - 1.0 - idx) * log_r)[None, :] * carry[:, None]
  return out.reshape(-1)[:n]


def later_total(v, xp):
  """``w_b = sum_{j > b} v_j`` (``v >= 0``, (n,)): a reverse cumulative sum (an
  associative scan, no loop). Not :func:`later_sum` at ``r = 1``: XLA:CPU
  (jax 0.11) ran that product with a constant triangular mask wrong under jit
  and vmap (the last block's sum came out as the whole sum: 0.0995 for 0),
  right in eager and under jit alone."""
  return xp.concatenate([jax.lax.cumsum(v, reverse=True)[1:], xp.zeros(1, v.dtype)])
