"""The one solver module: bracketed roots that keep the feasible side.

Every calibrator and every epsilon(delta) inversion in jaxacct goes through
these functions, with one failure semantics: the jittable kernels return a
status (``ok``) and the eager callers turn a target that cannot be met into a
``ValueError`` naming the bracket (never an infeasible value, a silent 0 or +inf).

Proofs and sources: docs/bounds/numerics.md ("Bounds and proofs /
Numerics").
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks


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
  checks.check_bool("increasing", increasing)
  checks.check_bool("log_scale", log_scale)
  checks.check_int("num_iters", num_iters, min_value=1, max_value=100_000)
  checks.check_choice("method", method, ("bisect", "illinois"))
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


def bracket_decreasing(fn, lo, hi, f_lo, f_hi, *, num_iters: int,
                       illinois: bool = True):
  """Root bracket of a non-increasing ``fn`` with ``fn(hi) <= 0`` known.

  Like :func:`bisect` (Illinois steps, every third a
  halving) but ``fn`` is evaluated only inside the loop (the end values are
  supplied: ``f_lo`` any value >= fn(lo) is fine, it only steers the secant),
  so the compiled graph holds one copy of ``fn``. Returns ``(b, a)``: ``b``
  is feasible (``fn(b) <= 0``; ``hi`` if nothing better was found) and ``a``
  is the last point known infeasible (or ``lo``).
  """
  a = jnp.asarray(lo, jnp.float64)
  b = jnp.asarray(hi, jnp.float64)
  fa = jnp.asarray(f_lo, jnp.float64)
  fb = jnp.asarray(f_hi, jnp.float64)

  def body(i, carry):
    a, b, fa, fb, last = carry
    mid = 0.5 * (a + b)
    if illinois:
      sec = (a * fb - b * fa) / (fb - fa)
      good = (jnp.isfinite(sec) & (sec > a) & (sec < b) & (i % 3 != 2))
      m = jnp.where(good, sec, mid)
    else:
      m = mid
    fm = fn(m)
    feas = fm <= 0
    a2 = jnp.where(feas, a, m)
    b2 = jnp.where(feas, m, b)
    fa2 = jnp.where(feas, fa, fm)
    fb2 = jnp.where(feas, fm, fb)
    if illinois:
      fa2 = jnp.where(feas & (last == 1), 0.5 * fa2, fa2)
      fb2 = jnp.where(~feas & (last == -1), 0.5 * fb2, fb2)
    last2 = jnp.where(feas, 1, -1).astype(jnp.int32)
    return a2, b2, fa2, fb2, last2

  a, b, _, _, _ = jax.lax.fori_loop(
      0, num_iters, body, (a, b, fa, fb, jnp.zeros((), jnp.int32)))
  return b, a


def safeguarded_root(evaluate: Callable, propose: Callable, a, b, x0, *, target,
                     max_iter: int, rtol: float, first: int | None = None,
                     axis_name=None):
  """Bracket-keeping iteration for a decreasing function (jittable, one lane).

  ``evaluate(x)`` returns ``(value, *aux)``; ``x`` is feasible where
  ``value <= target`` (the feasible set is ``[root, b]``). Each step evaluates
  the current point, shrinks the bracket ``[a, b]`` (``a`` infeasible, ``b``
  feasible) and asks ``propose(x, value, *aux, a, b)`` for the next point (a
  problem-specific Newton step, which must fall back to the midpoint when it
  leaves the bracket). The first point is ``x0`` (e.g. ``a``: feasible
  there, the bracket collapses onto it). Guard: every fourth step after it
  the bracket must have halved, else the next point is the midpoint. Stops
  when ``b - a <= rtol * b`` or after ``max_iter`` further steps.

  ``first`` (the accelerator layout): no while loop of run-time trip count
  (XLA:GPU tests its exit on the host every trip). Chunks of ``first``
  steps, each a loop of known trip count run only where a lane has not
  stopped (one test a chunk, over the vmapped axis ``axis_name`` when
  given), ``ceil((max_iter + 1) / first)`` chunks; a lane that stopped keeps
  its state, so every lane takes exactly the while loop's steps. With
  ``first``, ``a``, ``b`` and ``x0`` may also be arrays of lanes
  (``evaluate`` and ``propose`` elementwise over them, e.g. lanes that
  share one evaluation): the test is then over all of them.

  Returns:
    ``(a, b)``: ``b`` is feasible (the conservative end), ``a`` infeasible.
  """

  def cond(st):
    a, b, xn, it, wlast, done = st
    return (~done) & (it < max_iter)

  def body(st):
    a, b, xn, it, wlast, done = st
    value, *aux = evaluate(xn)
    feas = value <= target
    a2 = jnp.where(feas, a, xn)
    b2 = jnp.where(feas, xn, b)
    chk = (it % 4) == 3
    slow = chk & ((b2 - a2) > 0.5 * wlast)
    wl2 = jnp.where(chk, b2 - a2, wlast)
    xp = propose(xn, value, *aux, a2, b2)
    xp = jnp.where(slow, 0.5 * (a2 + b2), xp)
    conv = (b2 - a2) <= rtol * b2
    return a2, b2, xp, it + 1, wl2, conv

  # step -1 evaluates x0 (wlast = inf: no guard) and sets wlast to b - a
  shape = jnp.shape(b)
  st = (a, b, x0, jnp.full(shape, -1, jnp.int32), jnp.full(shape, jnp.inf),
        jnp.zeros(shape, bool))
  if first is None:
    a, b, _, _, _, _ = jax.lax.while_loop(cond, body, st)
    return a, b

  def step(_, s):
    go = cond(s)
    return jax.tree.map(lambda new, old: jnp.where(go, new, old), body(s), s)

  def chunk(_, s):
    moving = jnp.any(cond(s))
    if axis_name is not None:
      moving = jax.lax.psum(moving.astype(jnp.int32), axis_name) > 0
    return jax.lax.cond(moving, lambda s: jax.lax.fori_loop(0, first, step, s),
                        lambda s: s, s)

  # one copy of the step in the program: chunks of ``first`` steps, each
  # run only while a lane moves (a lane past max_iter steps is frozen, so
  # the last chunk's extra steps change nothing)
  first = max(min(int(first), max_iter + 1), 1)
  st = jax.lax.fori_loop(0, -(-(max_iter + 1) // first), chunk, st)
  a, b, _, _, _, _ = st
  return a, b


def newton_keep_feasible(fn: Callable, minus_slope: Callable, x0, target, *,
                         num_iters: int):
  """Newton steps towards ``fn(x) = target`` that never leave the feasible side.

  For a convex, decreasing ``fn`` with ``fn(x0) >= target`` (feasible means
  ``fn(x) >= target``): ``x <- x + (fn(x) - target) / minus_slope(x)``, a step
  kept only where ``fn`` at the new point is still ``>= target`` (and never
  backwards). ``minus_slope(x)`` is ``-fn'(x)`` (a zero slope stops the walk).
  Jittable; ``num_iters`` is static. Used for the allocation PLD's certified
  lower epsilon after a :func:`bisect` bracket.
  """

  def step(_, x):
    s = minus_slope(x)
    x2 = x + (fn(x) - target) / jnp.where(s > 0, s, jnp.inf)
    return jnp.where(fn(x2) >= target, jnp.maximum(x2, x), x)

  return jax.lax.fori_loop(0, num_iters, step, x0)


def invert_decreasing(fn: Callable, target, hi, *, upper: bool,
                      num_iters: int = 80):
  """epsilon(delta) inversion of a non-increasing ``fn`` (e.g. delta(epsilon)).

  Upper (``upper=True``): the smallest ``x >= 0`` known to satisfy
  ``fn(x) <= target`` (0 if ``fn(0) <= target``; +inf if even ``hi`` fails).
  Lower: the largest ``x`` known to satisfy ``fn(x) >= target`` (0 if none).
  Jittable; ``target`` and ``hi`` broadcast.
  """
  target = jnp.asarray(target, jnp.float64)
  lo = jnp.zeros_like(target)
  hi = jnp.broadcast_to(jnp.asarray(hi, jnp.float64), target.shape)

  def body(_, c):
    a, b = c
    mid = 0.5 * (a + b)
    ok = fn(mid) <= target
    return jnp.where(ok, a, mid), jnp.where(ok, mid, b)

  a, b = jax.lax.fori_loop(0, num_iters, body, (lo, hi))
  if upper:
    res = jnp.where(fn(lo) <= target, 0.0, b)
    return jnp.where(fn(hi) <= target, res, jnp.inf)
  return jnp.where(fn(lo) <= target, 0.0, a)


def refine_bracket(feasible: Callable, a, b, *, tol, max_iters: int, active=None,
                   probes=()):
  """Bisect brackets ``[a, b]`` (``a`` infeasible, ``b`` feasible) of a decreasing problem.

  Each round evaluates ``feasible`` once at every midpoint (all lanes
  together, elementwise) and moves the end on the same side; lanes already
  ``<= tol`` wide do not move. Stops when no ``active`` lane (default: all)
  is wider than ``tol``, or after ``max_iters`` rounds. ``probes`` (arrays
  shaped like ``a``) are evaluated first, one a round in every lane, in place
  of the midpoint (a feasible probe ``x`` sets ``b = min(b, x)``, else
  ``a = max(a, x)``): one traced copy of a costly ``feasible``. Jittable.

  Returns:
    ``(a, b)``: ``b`` the feasible end, ``a`` the infeasible end.
  """
  checks.check_int("max_iters", max_iters, min_value=0, max_value=100_000)
  a = jnp.asarray(a, jnp.float64)
  b = jnp.asarray(b, jnp.float64)
  act = jnp.ones(a.shape, bool) if active is None else active
  num_probes = len(probes)
  pts = jnp.stack([jnp.broadcast_to(jnp.asarray(p, jnp.float64), a.shape) for p in probes]
                  or [a])

  def cond(c):
    a_, b_, r = c
    return (r < num_probes) | ((r < max_iters + num_probes) & jnp.any((b_ - a_ > tol) & act))

  def body(c):
    a_, b_, r = c
    probe = r < num_probes
    x = jnp.where(probe, pts[jnp.clip(r, 0, len(pts) - 1)], 0.5 * (a_ + b_))
    ok = feasible(x)
    live = (b_ - a_ > tol) | probe
    return (jnp.where(live & ~ok, jnp.maximum(a_, x), a_),
            jnp.where(live & ok, jnp.minimum(b_, x), b_), r + 1)

  a, b, _ = jax.lax.while_loop(cond, body, (a, b, jnp.zeros((), jnp.int32)))
  return a, b


def newton(fn: Callable, fprime: Callable, x0, *, num_iters: int, lower=None):
  """``num_iters`` Newton steps ``x - fn(x) / fprime(x)``, kept ``>= lower``.

  For roots where the starting point is already close (e.g. Lambert W from
  its asymptotic start): no bracket, a fixed number of steps (jittable,
  static ``num_iters``), the safeguard ``lower`` keeps a positive unknown
  positive.
  """
  checks.check_int("num_iters", num_iters, min_value=1, max_value=100_000)

  def body(_, x):
    x = x - fn(x) / fprime(x)
    return x if lower is None else jnp.maximum(x, lower)
  return jax.lax.fori_loop(0, num_iters, body, x0)


def search_decreasing_host(upper_fn: Callable, eps, hint, *, tight_hint: bool, rtol: float,
                           bounds, name: str, bar=None, known=None):
  """Smallest x > 0 with upper_fn(x) <= eps (decreasing), to relative width rtol (host).

  Host-side, on log x, for an eager costly ``upper_fn(x, idx)`` (upper
  epsilons of targets ``idx`` at ``x``; numpy): a feasible ``hi`` and an
  infeasible ``lo`` around ``hint`` (geometric growth within ``bounds``),
  then secant steps on (log x, log upper - log eps) until hi / lo <= 1 + rtol.
  Returns ``hi`` (evaluated feasible; ``x_min`` where that is feasible), so
  every returned x is certified by the caller's own function. ``tight_hint``:
  the hint is expected within rtol (first bracket [hint / (1 + rtol), hint]).
  ``known``: optional ``(xs, ups)``, shape ``(p, len(eps))``, points already
  evaluated and their values (the bracket starts from the tightest).
  ``bar``: optional progress bar. Raises ``ValueError`` (naming ``name`` and
  the bracket) where a target is not met at ``x_max``.
  """
  x_min, x_max = bounds
  m = eps.size
  leps = np.log(eps)

  def lg(up, idx):   # <= 0 feasible; +inf where the upper is infinite
    with np.errstate(divide="ignore"):
      return np.where(np.isfinite(up), np.log(np.maximum(up, 1e-300)), np.inf) - leps[idx]

  g = lambda s, idx: lg(upper_fn(s, idx), idx)
  step0 = math.log1p(rtol) if tight_hint else math.log(1.1)
  hint = np.clip(hint, x_min, x_max)
  hi = np.minimum(hint * math.exp(0.0 if tight_hint else step0), x_max)
  lo = np.maximum(hint * math.exp(-step0), x_min)
  ghi, glo = np.full(m, np.nan), np.full(m, np.nan)
  if known is not None:   # the tightest evaluated feasible / infeasible points
    hk, lk = np.full(m, np.inf), np.full(m, -np.inf)
    for xj, uj in zip(np.atleast_2d(known[0]), np.atleast_2d(known[1])):
      gj = lg(uj, np.arange(m))
      f, i = (gj <= 0) & (xj < hk), (gj > 0) & (xj > lk)
      hk[f], ghi[f], lk[i], glo[i] = xj[f], gj[f], xj[i], gj[i]
    glo[lk >= hk], lk[lk >= hk] = np.nan, -np.inf      # not monotone: keep the feasible one
    hi = np.where(np.isfinite(hk), hk, np.minimum(np.maximum(hi, lk * math.exp(step0)), x_max))
    lo = np.where(np.isfinite(lk), lk, np.maximum(np.minimum(lo, hk * math.exp(-step0)), x_min))
  # 1. a feasible hi (grown geometrically up to x_max; infeasible there: error)
  need = np.flatnonzero(np.isnan(ghi))
  w = step0
  while need.size:
    if np.any(lo[need] >= x_max * (1 - 1e-12)):
      raise ValueError(f"no {name} in [{x_min:g}, {x_max:g}] meets epsilon="
                       f"{eps[need[lo[need] >= x_max * (1 - 1e-12)][0]]:g} (target too small "
                       "for this configuration).")
    ghi[need] = gv = g(hi[need], need)
    bad = need[gv > 0]
    lo[bad], glo[bad] = hi[bad], ghi[bad]   # infeasible: a valid lo
    hi[bad] = np.minimum(hi[bad] * math.exp(2 * w), x_max)
    w *= 2
    need = bad
  # 2. an infeasible lo (skip those that already have one from step 1)
  need = np.flatnonzero(np.isnan(glo))
  w = step0
  while need.size:
    glo[need] = gv = g(lo[need], need)
    good = need[gv <= 0]           # feasible lo: it becomes hi; go further down
    hi[good], ghi[good] = lo[good], glo[good]
    floor = good[lo[good] <= x_min * (1 + 1e-12)]
    lo[floor] = hi[floor]          # feasible at the search floor: answer = floor
    good = np.setdiff1d(good, floor)
    lo[good] = np.maximum(lo[good] * math.exp(-2 * w), x_min)
    w *= 2
    need = good
  # 3. secant through the two latest evaluations (Dekker) where it lands inside, else
  # on the ends (Illinois: a stale end's value halved); halving if 4 steps did not halve
  a, b = np.log(lo), np.log(hi)
  last, it, wref = np.zeros(m, np.int8), 0, b - a
  px, pg, qx, qg = a.copy(), glo.copy(), b.copy(), ghi.copy()   # the two latest points
  while True:
    act = np.flatnonzero(b - a > math.log1p(rtol) * (1 + 1e-9))   # (rounding of log)
    if bar is not None:
      width = float(np.max(np.exp(b - a) - 1)) if m else 0.0
      bar.update(0, postfix=f"bracket width {width:.2e}")
    if not act.size:
      break
    it += 1
    aa, bb, fa, fb = a[act], b[act], glo[act], ghi[act]
    inside = lambda x: np.isfinite(x) & (x > aa) & (x < bb)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
      s2 = (px[act] * qg[act] - qx[act] * pg[act]) / (qg[act] - pg[act])
      sec = np.where(inside(s2), s2, (aa * fb - bb * fa) / (fb - fa))
    slow = (bb - aa > 0.5 * wref[act]) & (it % 4 == 0)
    wref[act] = np.where(it % 4 == 0, bb - aa, wref[act])
    ok = inside(sec) & np.isfinite(fa) & np.isfinite(fb) & ~slow
    # shift the estimate 0.45 rtol toward the end that did not move last (then the
    # probe usually lands on the other side and the bracket closes)
    shift = 0.45 * math.log1p(rtol) * np.where(last[act] == 1, -1.0,
                                               np.where(last[act] == -1, 1.0, 0.0))
    mid = np.where(ok, sec + shift, 0.5 * (aa + bb))
    # keep the probe at least rtol/4 inside the bracket, so both ends move
    pad = 0.25 * math.log1p(rtol)
    mid = np.clip(mid, aa + pad, bb - pad)
    gm = g(np.exp(mid), act)
    px[act], pg[act], qx[act], qg[act] = qx[act], qg[act], mid, gm
    feas = gm <= 0
    f_i, n_i = act[feas], act[~feas]
    b[f_i], ghi[f_i] = mid[feas], gm[feas]
    a[n_i], glo[n_i] = mid[~feas], gm[~feas]
    # Illinois: halve the stale end's value when the same end moves twice
    glo[f_i] = np.where(last[f_i] == 1, 0.5 * glo[f_i], glo[f_i])
    ghi[n_i] = np.where(last[n_i] == -1, 0.5 * ghi[n_i], ghi[n_i])
    last[f_i], last[n_i] = 1, -1
  return np.exp(b)


def largest_feasible_int_host(feasible: Callable, lo: int, hi: int, size: int, *, name: str,
                              target: str = "the target") -> np.ndarray:
  """Largest integer ``n`` in ``[lo, hi]`` with ``feasible(n)``, per lane (host, eager).

  For an eager, monotone predicate on ``size`` lanes (feasible for small
  ``n``, e.g. "the certified epsilon after n epochs meets the budget"):
  ``feasible(ns, idx)`` answers lanes ``idx`` at integers ``ns`` (numpy bools);
  bisection on integers, all live lanes together, about ``log2(hi - lo)``
  rounds. Same failure semantics as the calibrators: never an infeasible
  value.

  Returns:
    int64 numpy array of ``size`` integers.

  Raises:
    ValueError: ``feasible(lo)`` is False in some lane (naming ``name`` and
      the range).
  """
  lo, hi = int(lo), int(hi)
  every = np.arange(size)
  if not np.all(feasible(np.full(size, lo), every)):
    raise ValueError(f"no {name} in [{lo}, {hi}] meets {target}: even {name}={lo} "
                     "exceeds it.")
  a = np.full(size, lo, np.int64)                      # feasible
  b = np.where(feasible(np.full(size, hi), every), hi + 1, hi).astype(np.int64)  # infeasible
  a[b > hi] = hi
  while True:
    idx = np.flatnonzero(b - a > 1)
    if not idx.size:
      return a
    mid = (a[idx] + b[idx]) // 2
    ok = np.asarray(feasible(mid, idx), bool)
    a[idx[ok]], b[idx[~ok]] = mid[ok], mid[~ok]


def invert_decreasing_host(fn: Callable, target: float, hi: float, *, num_iters: int = 80,
                           hi_max: float = 1e4) -> float:
  """Smallest ``x >= 0`` known to satisfy ``fn(x) <= target`` (host, eager).

  The host-side twin of :func:`invert_decreasing` (``upper=True``) for a
  non-increasing scalar ``fn`` that is evaluated eagerly (e.g. a Monte Carlo
  mean): 0 if ``fn(0) <= target``; else ``hi`` (at least 1e-6) is doubled
  until it is feasible or passes ``hi_max``, then ``num_iters`` halvings keep
  the feasible end.

  Returns:
    float: the feasible end of the final bracket, or +inf when even the
    last ``hi`` fails (never the infeasible side).
  """
  checks.check_int("num_iters", num_iters, min_value=0, max_value=100_000)
  if fn(0.0) <= target:
    return 0.0
  lo, hi = 0.0, max(float(hi), 1e-6)
  f_hi = fn(hi)
  while f_hi > target and hi < hi_max:
    hi *= 2.0
    f_hi = fn(hi)
  if f_hi > target:
    return math.inf
  for _ in range(num_iters):
    mid = 0.5 * (lo + hi)
    if fn(mid) > target:
      lo = mid
    else:
      hi = mid
  return hi


def first_feasible_on_ladder_host(feasible: Callable, x0: float, *, factor: float,
                                  shift: float, max_steps: int) -> float:
  """First ``x`` of ``x0, x0 * factor + shift, ...`` (``max_steps`` steps) with ``feasible(x)``.

  For a feasibility predicate that is monotone but only known near a
  starting estimate ``x0`` (e.g. an epsilon certified by an extra slack
  term): a short upward march keeps the feasible side without a bracket.

  Returns:
    float: the first feasible point, or +inf if ``x0`` is not finite or no
    point of the ladder is feasible (never an infeasible value).
  """
  checks.check_int("max_steps", max_steps, min_value=0, max_value=100_000)
  x = float(x0)
  for i in range(max_steps + 1):
    if not math.isfinite(x):
      return math.inf
    if feasible(x):
      return x
    if i < max_steps:
      x = x * factor + shift
  return math.inf


def predict_root(U, G, k, k_secant=3.0):
  """Root of g(u) per lane from the evaluated points ``U``, ``G`` (rows =
  rounds): inverse quadratic through the 3 finite points nearest the root
  when it lands between the nearest feasible and infeasible ones, else
  secant through the nearest 2. Returns ``(root, error estimate)``."""
  m = U.shape[1]
  cols = np.arange(m)
  fin = np.isfinite(G)
  order = np.argsort(np.where(fin, np.abs(G), np.inf), axis=0)
  u1, g1 = U[order[0], cols], G[order[0], cols]
  u2, g2 = U[order[1], cols], G[order[1], cols]
  with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
    sec = u1 - g1 * (u2 - u1) / (g2 - g1)
    root = sec
    if k >= 3:
      u3, g3 = U[order[2], cols], G[order[2], cols]
      iqi = (u1 * g2 * g3 / ((g1 - g2) * (g1 - g3)) + u2 * g1 * g3 / ((g2 - g1) * (g2 - g3))
             + u3 * g1 * g2 / ((g3 - g1) * (g3 - g2)))
      good = np.isfinite(iqi) & np.isfinite(g3) & (np.abs(iqi - sec) < np.abs(sec - u1) + 1e-12)
      root = np.where(good, iqi, sec)
    err = k_secant * np.abs((u1 - root) * (u2 - root))
  ok = np.isfinite(root) & np.isfinite(g1) & np.isfinite(g2) & (np.abs(g2 - g1) > 0)
  return np.where(ok, root, np.nan), np.where(ok, err, np.inf)
