"""The allocation laws' containers (upper and lower laws of a sum on a log lattice)
and the helpers that pick, stack and map them.

Kernels that build them are in :mod:`._sum_law`; the mathematics is in
docs/bounds/allocation_pld.md.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class UpperLaw(NamedTuple):
  p: jax.Array      # masses at knots
  q0: jax.Array     # mass at x = 0
  minf: jax.Array   # first-moment defect at infinity (absolute x units)


class LowerLaw(NamedTuple):
  a: jax.Array      # cell masses
  g: jax.Array      # cell moments in units of the cell's left knot
  q0: jax.Array


class Lattice(NamedTuple):
  u_ref: jax.Array  # log of knot 0
  step: jax.Array   # D
  off: jax.Array    # int: knot index of array element 0


def nbits(t, xp=jnp):
  """Bit length of t >= 1 (exact integer arithmetic)."""
  bits = xp.arange(31, dtype=xp.int32)
  return xp.sum(((t[..., None] >> bits) > 0).astype(xp.int32), axis=-1)


def pick(bit, x, y, xp=jnp):
  return jax.tree.map(lambda u, v: xp.where(bit == 1, v, u), x, y)


def stack(x, y):
  return jax.tree.map(lambda u, v: jnp.stack([u, v]), x, y)


def unstack(z):
  return jax.tree.map(lambda u: u[0], z), jax.tree.map(lambda u: u[1], z)


def both(f, A, LA, B, LB, ns):
  """``(f(A, LA), f(B, LB))``: one vmapped copy under jit (half the code to
  compile), two calls on the host."""
  if ns.is_host:
    return f(A, LA), f(B, LB)
  return unstack(jax.vmap(f)(stack(A, B), stack(LA, LB)))
