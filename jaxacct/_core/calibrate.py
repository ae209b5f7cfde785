"""Jittable, vmappable bisection that keeps the conservative side.

``bisect(fn, lo, hi, increasing=...)`` looks for the boundary of the feasible
set ``{x : fn(x) <= 0}`` of a monotone ``fn``:

* ``increasing=True``: feasible set is ``[lo, root]``; returns the largest
  point known to be feasible (the lower bracket end).
* ``increasing=False``: feasible set is ``[root, hi]``; returns the smallest
  point known to be feasible (the upper bracket end).

The returned point is therefore always feasible when ``ok`` is True, as
dp_accounting's ``calibrate_dp_mechanism`` keeps the conservative side. With
``log_scale=True`` the bracket is bisected geometrically (for positive
parameters such as sigma that span decades). ``num_iters`` is static, so a
whole vector of targets runs in one compiled call (``fn`` acts elementwise).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp


class BisectResult(NamedTuple):
  x: jax.Array      # conservative end of the final bracket
  ok: jax.Array     # bool: that end is feasible
  width: jax.Array  # final bracket width (in x units)


def bisect(fn: Callable, lo, hi, *, increasing: bool, num_iters: int = 64,
           log_scale: bool = False) -> BisectResult:
  lo = jnp.asarray(lo, jnp.float64)
  hi = jnp.asarray(hi, jnp.float64)
  lo, hi = jnp.broadcast_arrays(lo, hi)
  tf = jnp.log if log_scale else (lambda v: v)
  itf = jnp.exp if log_scale else (lambda v: v)
  a, b = tf(lo), tf(hi)
  # Feasibility of the conservative end is carried through the loop (not
  # re-evaluated afterwards: a second compiled evaluation may round
  # differently and flip a boundary case).
  end0 = lo if increasing else hi
  ok0 = fn(end0) <= 0

  def body(_, carry):
    a, b, ok = carry
    m = 0.5 * (a + b)
    feas = fn(itf(m)) <= 0
    if increasing:   # feasible below the root: move a up when m feasible
      a, b = jnp.where(feas, m, a), jnp.where(feas, b, m)
    else:            # feasible above the root: move b down when m feasible
      a, b = jnp.where(feas, a, m), jnp.where(feas, m, b)
    return a, b, ok | feas

  a, b, ok = jax.lax.fori_loop(0, num_iters, body, (a, b, ok0))
  x = itf(a) if increasing else itf(b)
  return BisectResult(x=x, ok=ok, width=itf(b) - itf(a))
