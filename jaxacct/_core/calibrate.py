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
           log_scale: bool = False, method: str = "bisect") -> BisectResult:
  """Bracketing root search on a monotone ``fn`` keeping the feasible side.

  Args:
    fn: elementwise, monotone; feasible where ``fn(x) <= 0``.
    lo, hi: bracket ends (broadcast together).
    increasing: whether ``fn`` increases (feasible set ``[lo, root]``) or
      decreases (feasible set ``[root, hi]``).
    num_iters: static number of iterations (one ``fn`` evaluation each).
    log_scale: search in ``log x`` (positive parameters spanning decades).
    method: ``"bisect"`` (halving) or ``"illinois"`` (regula falsi with the
      Illinois modification, falling back to halving whenever the secant
      point is not strictly inside the bracket or not finite, and on every
      third step, so that the feasible end converges too).

  Returns:
    ``BisectResult(x, ok, width)``: ``x`` the feasible end of the final
    bracket, ``ok`` whether it is known feasible.
  """
  lo = jnp.asarray(lo, jnp.float64)
  hi = jnp.asarray(hi, jnp.float64)
  lo, hi = jnp.broadcast_arrays(lo, hi)
  tf = jnp.log if log_scale else (lambda v: v)
  itf = jnp.exp if log_scale else (lambda v: v)
  a, b = tf(lo), tf(hi)
  # Feasibility of the conservative end is carried through the loop (not
  # re-evaluated afterwards: a second compiled evaluation may round
  # differently and flip a boundary case).
  fa, fb = fn(lo), fn(hi)
  ok0 = (fa <= 0) if increasing else (fb <= 0)
  illinois = method == "illinois"
  if method not in ("bisect", "illinois"):
    raise ValueError(f"method must be one of ('bisect', 'illinois'); got {method!r}.")

  def body(i, carry):
    a, b, fa, fb, ok, last = carry
    mid = 0.5 * (a + b)
    if illinois:
      sec = (a * fb - b * fa) / (fb - fa)
      good = jnp.isfinite(sec) & (sec > a) & (sec < b) & jnp.isfinite(fa) & jnp.isfinite(fb)
      # every third step is a plain halving, so both ends keep moving
      good = good & (i % 3 != 2)
      m = jnp.where(good, sec, mid)
    else:
      m = mid
    fm = fn(itf(m))
    feas = fm <= 0
    # move the end on the same side of the root as m
    move_a = feas if increasing else ~feas
    a2 = jnp.where(move_a, m, a)
    b2 = jnp.where(move_a, b, m)
    fa2 = jnp.where(move_a, fm, fa)
    fb2 = jnp.where(move_a, fb, fm)
    if illinois:  # halve the stale end's value when the same end moves twice
      fb2 = jnp.where(move_a & (last == 1), 0.5 * fb2, fb2)
      fa2 = jnp.where(~move_a & (last == -1), 0.5 * fa2, fa2)
    last2 = jnp.where(move_a, 1, -1).astype(jnp.int32)
    return a2, b2, fa2, fb2, ok | feas, last2

  last0 = jnp.zeros(a.shape, jnp.int32)
  a, b, _, _, ok, _ = jax.lax.fori_loop(0, num_iters, body, (a, b, fa, fb, ok0, last0))
  x = itf(a) if increasing else itf(b)
  return BisectResult(x=x, ok=ok, width=itf(b) - itf(a))
