r"""Fast kernel of the symmetric zero-leftover pairs (clone pair, stronger clone).

The pair of ``jaxacct.shuffle._pair_reference`` with ``lam = 0`` and
``q0 = q1`` (FMT'21 clone pair, Feldman, McMillan, Talwar, arXiv:2012.12803,
Thm 3.2; stronger clone, Wang et al. arXiv:2304.05007v5 generic row): same
quantity, one incomplete-beta call per ``BLOCK`` window cells instead of one
per cell, and eps(delta) by a safeguarded Newton solve instead of 40
bracketing steps. Checked against the reference kernel in
``tests/shuffle/test_shuffle_fast.py``. The block sum itself (one formula for this
kernel and the host path) is :mod:`._symmetric_pair_sum`.

Derivations and sources: docs/bounds/shuffle.md ("Bounds and proofs / Shuffling").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import batching, checks, sharding, solve
from jaxacct._core.batching import block_programs, host_lanes, lanes_for_memory
from jaxacct._core.dtype import dispatch, require_x64, static_size
from jaxacct._core.logmath import log_binom_pmf
from jaxacct._core.namespace import JAX, each_lane, for_inputs, host_call
from jaxacct._core.results import host_f64
from jaxacct.shuffle._symmetric_pair_sum import (HostBlockTerms, block_terms, cell_terms,
                                                  finish_delta, rr_sandwich, sym_eval,
                                                  sym_setup)
from jaxacct.shuffle._pair_reference import pair_params_invalid
from jaxacct.shuffle._windows import (BLOCK, betainc_fixed, bucket_widths, cut_mass, fast_width,
                                      raw_widths, window_start)
from jaxacct._core.compiled import ACCELERATOR_OPTIONS, jit

_EPS64 = float(np.finfo(np.float64).eps)
#: Largest n answered on the host for one question: the host path agrees with
#: the jitted kernel to 3e-12 relative up to n = 1e5 but drifts to 3e-11 at
#: n = 1e6 (XLA's summation order in the cancelling hockey-stick sum), so
#: larger n keeps the jitted kernel.
HOST_MAX_N = 200_000


def _sym_bad(n, p, beta, q, xp=jnp):
  return (pair_params_invalid(n, p, beta, q, q, True, xp)
          | (xp.abs(beta * (p + 1.0) / (p - 1.0) - 1.0) > 1e-12))


def _sym_fast_delta_scalar(eps, n, p, beta, q, width, block, fixed_tail=False, ns=JAX):
  """delta(eps) of one lane (``ns``: the jitted kernel, or one question on the host)."""
  xp = ns.xp
  alpha, r, lo, c, w, tail = sym_setup(n, p, beta, q, width, ns=ns, fixed_tail=fixed_tail)
  d, _, _ = sym_eval(xp.exp(eps), n, p, alpha, r, lo, c, w, tail, block, ns=ns,
                     fixed=fixed_tail)
  bad = _sym_bad(n, p, beta, q, xp) | xp.isnan(eps) | (eps < 0)
  return xp.where(bad, xp.nan, d)


#: Newton steps of the accelerator layout's eps(delta) before the one test
#: whether any lane of the block still moves ("typically 4-8 evaluations")
_FIRST_TRIPS = 8


def _propose(tgt, xp, x, d, qm, a, b):
  """The safeguarded Newton's next point of eps(delta) (elementwise)."""
  e = xp.exp(x)
  feas = d <= tgt
  # far above the target: Newton on log delta (fast, may overshoot);
  # close: Newton on delta in e, which stays left of the root (delta is
  # convex in e), pushed right by 1e-3 of the step (+ a few ulps) so that
  # the end of the convergence lands on the feasible side.
  safe_q = xp.where(qm > 0, qm, 1.0)
  ratio = xp.where(d > 0, d / tgt, 1.0)
  # Newton on phi = sqrt(-2 log delta), nearly linear in eps for
  # Gaussian-like profiles (falls back to log delta where delta >= 1/2)
  ld = xp.log(xp.where(d > 0, d, 1.0))
  lt = xp.log(tgt)
  phi = xp.sqrt(xp.maximum(-2.0 * ld, 0.0))
  phi_t = xp.sqrt(-2.0 * lt)
  dphi = e * safe_q / xp.where(d > 0, d, 1.0) / xp.where(phi > 0, phi, 1.0)
  x_phi = x + (phi_t - phi) / dphi
  x_log = xp.where((d < 0.5) & (tgt < 0.5), x_phi,
                   x + xp.log(ratio) * d / (e * safe_q))
  step_e = (d - tgt) / safe_q
  x_lin = xp.log(e + step_e * 1.001) + 8.0 * _EPS64 * (1.0 + x)
  # from the feasible side log-Newton converges from the right (log delta
  # is concave there in practice); undershoot it by 1e-3 of the step so
  # that near the root a point on the infeasible side certifies the bracket
  x_logf = x_log - 1e-3 * (x - x_log) - 8.0 * _EPS64 * (1.0 + x)
  x_new = xp.where(feas, x_logf, xp.where(d > 20.0 * tgt, x_log, x_lin))
  good = (qm > 0) & (d > 0) & xp.isfinite(x_new) & (x_new > a) & (x_new < b)
  return xp.where(good, x_new, 0.5 * (a + b))


def _sym_fast_eps_scalar(delta, n, p, beta, q, width, block, max_iter, rtol,
                         fixed_tail=False, ns=JAX, terms_cache=True):
  """Safeguarded Newton for eps(delta) of one lane; returns (eps, width) (``ns``
  as in :func:`_sym_fast_delta_scalar`; ``terms_cache=False``: the host
  recomputes every block at every evaluation, the reference of the cache)."""
  xp = ns.xp
  alpha, r, lo, c, w, tail = sym_setup(n, p, beta, q, width, ns=ns, fixed_tail=fixed_tail)
  lp = xp.log(p)
  # the host keeps a block's terms until one of its thresholds moves
  terms = HostBlockTerms(lo, c, block) if ns.is_host and terms_cache else None

  def ev(x):
    d, qm, _ = sym_eval(xp.exp(x), n, p, alpha, r, lo, c, w, tail, block, ns=ns,
                        fixed=fixed_tail, terms=terms)
    return d, qm

  tgt = delta
  propose = functools.partial(_propose, tgt, xp)

  # the first point is eps = 0: feasible there, the bracket is [0, 0]
  a0 = xp.zeros(())
  # the accelerator layout (fixed_tail): trips of static count, the lanes'
  # common exit test once (jaxacct._core.solve.safeguarded_root, axis "lanes")
  static = dict(first=_FIRST_TRIPS, axis_name="lanes") if fixed_tail and not ns.is_host else {}
  a, b = ns.safeguarded_root(ev, propose, a0, lp, a0, target=tgt,
                             max_iter=max_iter, rtol=rtol, **static)
  return b, b - a


def _sym_eps_lane(dl, n, p, beta, q, width, block, max_iter, rtol, fixed_tail=False, ns=JAX,
                  terms_cache=True):
  """:func:`_sym_fast_eps_scalar` with the invalid lanes as NaN."""
  xp = ns.xp
  e, wd = _sym_fast_eps_scalar(dl, n, p, beta, q, width, block, max_iter, rtol,
                               fixed_tail, ns, terms_cache)
  bad = _sym_bad(n, p, beta, q, xp) | (dl <= 0) | (dl >= 1) | xp.isnan(dl)
  return xp.where(bad, xp.nan, e), xp.where(bad, xp.nan, wd)


def _flat(*xs):
  args = jnp.broadcast_arrays(*[jnp.asarray(x, jnp.float64) for x in xs])
  return args[0].shape, [a.reshape(-1) for a in args]


@functools.partial(jit, static_argnames=("width", "block", "fixed_tail"))
def sym_delta_fast(eps, n, p, beta, q, *, width: int, block: int = BLOCK,
                   fixed_tail: bool = False):
  r"""delta(eps) of a symmetric zero-leftover pair (fast block-recurrence kernel).

  Same quantity as ``pair_delta(..., q0=q, q1=q, symmetric=True)`` for
  ``beta = (p-1)/(p+1)`` (FMT'21 clone pair, stronger clone): the pair's
  exact delta plus the computed cut mass plus a rounding allowance of the
  recurrences (see the section comment). One incomplete-beta call per
  ``block`` cells instead of one per cell.

  Args:
    eps: >= 0. n: integer-valued >= 1. p > 1. beta: (p-1)/(p+1) (other values
      give NaN). q: blanket ratio >= 1 with ``2 p/((p+1) q) <= 1``.
    width: static window length, a multiple of ``block`` (``fast_width``).
    fixed_tail: the cut mass by a loop of known trip count (``sym_setup``).

  Returns:
    float64 array of the broadcast shape. Bound: upper bound of the pair's
    exact delta (NaN for invalid lanes).
  """
  require_x64("shuffle sym_delta_fast")
  shape, flat = _flat(eps, n, p, beta, q)
  f = jax.vmap(lambda *a: _sym_fast_delta_scalar(*a, width, block, fixed_tail),
               axis_name="lanes")
  return f(*flat).reshape(shape)


@functools.partial(jit, static_argnames=("width", "block", "max_iter",
                                             "with_width", "fixed_tail"))
def sym_epsilon_fast(delta, n, p, beta, q, *, width: int, block: int = BLOCK,
                     max_iter: int = 40, rtol: float = 1e-13,
                     with_width: bool = False, fixed_tail: bool = False):
  r"""eps(delta) of a symmetric zero-leftover pair: safeguarded Newton.

  delta(e) of the pair is a sum of ``(P - e Q)_+``: convex, decreasing and
  piecewise linear in ``e = exp(eps)``, with derivative ``-Q{P > e Q}`` from
  the same binomial tails. Far above the target a Newton step on
  ``log delta`` is taken; close to it a Newton step on ``delta`` in ``e``
  (which stays left of the root by convexity), pushed right by 1e-3 of the
  step so that it lands feasible; steps outside the bracket, or brackets
  that do not halve in 4 steps, are replaced by bisection. Every evaluated
  point is classified by the (upper-bounding) delta, so the returned right
  end ``b`` of the bracket is feasible: ``delta_upper(b) <= delta``. Stops
  when ``b - a <= rtol b`` (typically 4-8 evaluations) or after
  ``max_iter``.

  ``fixed_tail``: see :func:`sym_delta_fast` (the accelerator layout).

  Returns:
    float64 array (broadcast shape), or ``(eps, bracket_width)`` with
    ``with_width``. Bound: upper bound of the pair's exact eps(delta).
    NaN for invalid lanes (delta outside (0, 1), bad pair parameters).
  """
  require_x64("shuffle sym_epsilon_fast")
  shape, flat = _flat(delta, n, p, beta, q)

  e, wd = jax.vmap(lambda *a: _sym_eps_lane(*a, width, block, max_iter, rtol,
                                             fixed_tail), axis_name="lanes")(*flat)
  if with_width:
    return e.reshape(shape), wd.reshape(shape)
  return e.reshape(shape)


def sym_epsilon_grouped(delta, n, p, beta, q, *, coarse: bool = False,
                        block: int = BLOCK, max_iter: int = 40):
  """Eager ``sym_epsilon_fast`` over concrete arrays, lanes grouped by window.

  Each lane gets its own window length (``fast_width`` bucket); lanes that
  share a bucket run in one vmapped call (one compilation per bucket; use
  ``coarse=True`` -- power-of-2 buckets -- for wide grids). Returns a float64
  numpy array of the broadcast shape, in the input order. Bound: upper.
  """
  args = np.broadcast_arrays(*[np.asarray(x, np.float64)
                               for x in (delta, n, p, beta, q)])
  flat = [a.reshape(-1) for a in args]
  run = lambda *a, width: sym_epsilon_fast(*a, width=width, block=block, max_iter=max_iter)
  return _per_window(_lane_windows(*flat, block, coarse), flat, run).reshape(args[0].shape)


def _lane_windows(delta, n, p, beta, q, block, coarse):
  """Each lane's window of :func:`sym_epsilon_grouped` (flat float64 numpy lanes)."""
  raw, _ = raw_widths(n, 2.0 * (beta / (p - 1.0)) * p / q, delta)
  return bucket_widths(raw, n, block, coarse)


def _per_window(widths, lanes, run, bounded=True):
  """``run(*lanes, width=w)`` over the lanes of each window ``w``, one call per
  window (``bounded``: in blocks of :func:`member_block_lanes` where the
  window's lanes do not fit the device's memory at once), gathered in the
  lanes' order (float64 numpy)."""
  out = np.full(widths.shape, np.nan)
  for wd in np.unique(widths):
    idx = np.nonzero(widths == wd)[0]
    out[idx] = np.asarray(_bounded(functools.partial(run, width=int(wd)),
                                   [a[idx] for a in lanes], int(wd), bounded))
  return out


def _bounded(run, args, width, bounded=True):
  """``run(*args)`` (a vmapped kernel of the whole batch), in blocks of
  :func:`member_block_lanes` lanes (:func:`jaxacct._core.batching.run_blocks`)
  where the batch's lanes of this window would hold more than a quarter of
  the device's memory: the CPU layout's peak memory is bounded as the block
  programs' (the same kernel, lane by lane the same values)."""
  if not bounded or batching.whole_batch_fits(batching.broadcast_size(*args),
                                              member_lane_bytes(width)):
    return run(*args)
  return batching.run_blocks(run, args, member_block_lanes(width))


# ---------------------------------------------------------------------------
# Named members: the clone pair and the stronger clone
# ---------------------------------------------------------------------------

#: Symmetric zero-leftover members: FMT'21's clone pair and the stronger clone.
MEMBERS = ("clone", "stronger")


def member_params(eps0, member: str):
  """``(p, beta, q)`` of a member (jnp for traced/jax input, numpy otherwise).

  ``p = e^eps0``, ``beta = (p-1)/(p+1)``; ``q = 2 p^2/(p+1)`` for the clone
  pair, ``q = p`` for the stronger clone.
  """
  xp = jnp if isinstance(eps0, jax.Array) else np
  p = xp.exp(eps0)
  if member == "clone":   # p^2 overflows past eps0 ~ 354.9: there 2 p / (1 + 1/p)
    q = xp.where(p < 1e150, 2.0 * p * p / (p + 1.0), 2.0 * p / (1.0 + 1.0 / p))
  else:
    q = p
  return p, (p - 1.0) / (p + 1.0), q


def member_total(eps0, member: str):
  """Clone probability ``r0 + r1`` of a member (numpy): ``e^-eps0`` for the
  clone pair, ``2/(e^eps0+1)`` for the stronger clone."""
  e0 = np.asarray(eps0, np.float64)
  return np.exp(-e0) if member == "clone" else 2.0 / (np.exp(e0) + 1.0)


def member_width(n, eps0, max_n, delta=None, *, member: str) -> int:
  """Static window of a member's fast kernel (``windows.fast_width``).

  From concrete ``n``/``eps0`` (and ``delta``) when possible; else from the
  static ``max_n`` (worst case ``total = 1/2``); raises ``ValueError`` when
  ``n`` is traced and ``max_n`` is None.
  """
  if max_n is not None:
    checks.check_int("max_n", max_n, min_value=1)
  return static_size((n, eps0), lambda: fast_width(n, member_total(eps0, member), delta),
                     bound=None if max_n is None else (lambda: fast_width(max_n, 0.5, None)))


@functools.partial(jit, static_argnames=("member", "width"))
def member_delta(eps, n, eps0, *, member: str, width: int):
  """delta(eps) of a member (``sym_delta_fast``), jitted once per (member, width)."""
  p, beta, q = member_params(jnp.asarray(eps0, jnp.float64), member)
  return sym_delta_fast(eps, n, p, beta, q, width=width)


@functools.partial(jit, static_argnames=("member", "width"))
def member_epsilon(delta, n, eps0, *, member: str, width: int):
  """eps(delta) of a member (``sym_epsilon_fast``), jitted once per (member, width)."""
  p, beta, q = member_params(jnp.asarray(eps0, jnp.float64), member)
  return sym_epsilon_fast(delta, n, p, beta, q, width=width)


def member_epsilon_grouped(delta, n, eps0, *, member: str, coarse: bool = True):
  """Eager eps(delta) of a member over concrete arrays (``sym_epsilon_grouped``)."""
  p, beta, q = member_params(np.asarray(eps0, np.float64), member)
  return sym_epsilon_grouped(delta, n, p, beta, q, coarse=coarse)


@functools.partial(jit, static_argnames=("quantity", "member", "width"),
                   compiler_options=ACCELERATOR_OPTIONS)
def member_block(value, n, eps0, *, quantity: str, member: str, width: int):
  """The accelerator layout's block program: a member's delta(eps)
  (``quantity="delta"``, ``value`` the eps) or eps(delta), the CPU kernels
  with every loop of known trip count (no while loop of run-time trip
  count: an accelerator pays each trip's exit test as a host round trip):
  the cut mass and the block anchors' incomplete beta by
  :func:`._windows.betainc_fixed` (at most 599 trips, in chunks of 64, frozen
  once converged), and for eps(delta) the safeguarded Newton's 41 steps in
  chunks of 8, each run only while a lane of the block still moves (each
  lane frozen once it stopped: the CPU kernel's steps). Concrete arrays'
  eps(delta) without ``max_n`` run :func:`member_epsilon_slots` instead."""
  p, beta, q = member_params(jnp.asarray(eps0, jnp.float64), member)
  if quantity == "delta":
    return sym_delta_fast(value, n, p, beta, q, width=width, fixed_tail=True)
  return sym_epsilon_fast(value, n, p, beta, q, width=width, fixed_tail=True)


def member_lane_bytes(width: int) -> int:
  """Bytes one lane of :data:`member_block` holds at its peak (an estimate):
  twice 24 float64 per window cell (XLA:CPU measured ~16 for delta, ~21 for
  eps)."""
  return 2 * 24 * 8 * int(width)


def member_block_lanes(width: int) -> int:
  """Lanes of :data:`member_block`: ``lanes_for_memory`` of
  :func:`member_lane_bytes` at 1/64 of the device's memory (128 at width
  1024 on the CPU's fixed budget, more on an accelerator): a lane is a whole
  window, so a block of millions of cells fills a GPU."""
  return lanes_for_memory(member_lane_bytes(width), fraction=1.0 / 64, name="n")


def member_blocks(quantity, value, n, eps0, *, member: str, width: int):
  """:data:`member_block` over concrete arrays, blocks of
  :func:`member_block_lanes` lanes (:func:`run_blocks`)."""
  program = functools.partial(member_block, quantity=quantity, member=member,
                              width=int(width))
  return batching.run_blocks(program, (value, n, eps0), member_block_lanes(width))


def _arrays_on_accelerator(*args) -> bool:
  """Whether a concrete call runs in blocks: an array argument on the accelerator layout."""
  return block_programs() and any(np.ndim(a) for a in args)


@functools.partial(jit, static_argnames=("member",), compiler_options=ACCELERATOR_OPTIONS)
def member_epsilon_slots(delta, n, eps0, width, lane_live, slot_lane, slot_block, slot_live,
                         *, member: str):
  """The accelerator layout's eps(delta) program for lanes of every window:
  the lanes' windows cut into slots of ``BLOCK`` cells (one incomplete-beta
  anchor each), so one program of static shape (``L`` lanes, ``S`` slots)
  serves every window length, and a lane costs its own window, not the
  batch's longest.

  Lanes ``[L]``: ``delta, n, eps0``, ``width`` (the lane's window, a multiple
  of ``BLOCK``: its cells, cut mass and rounding allowance are those of the
  vmapped kernel of that window), ``lane_live`` (False: padding, answered at
  the first point). Slots ``[S]``: ``slot_lane`` (the lane, non-decreasing),
  ``slot_block`` (the block of the lane's window), ``slot_live``. Each
  evaluation sums a slot's cells (:func:`block_terms`) and the lane's slots
  (``segment_sum``: a float64 scatter, one 64-bit element an index); every
  order of a window's sum is inside its rounding allowance. The safeguarded
  Newton runs on all lanes at once, in chunks of 8 steps, each run only
  while a lane still moves (each lane frozen once it stopped: the CPU
  kernel's steps).
  """
  L, S = delta.shape[0], slot_lane.shape[0]
  p, beta, q = member_params(eps0, member)
  alpha = beta / (p - 1.0)
  r = alpha * p / q
  total = 2.0 * r
  lo = window_start(n, total, width)
  # the cut mass lane by lane (each lane's own convergence, as sym_setup)
  tail = jax.vmap(lambda *a: cut_mass(*a, betainc=betainc_fixed))(n, total, lo, width)
  take = lambda v: v[slot_lane][:, None]
  cells = take(lo) + slot_block[:, None] * BLOCK + jnp.arange(BLOCK, dtype=jnp.float64)
  n_s, total_s = take(n), take(total)
  valid = (cells <= n_s) & slot_live[:, None]
  w = jnp.where(valid, jnp.exp(log_binom_pmf(cells, n_s, total_s)), 0.0)
  # the block at c = 0 is anchored at c = 1 (its c = 0 cell contributes 0)
  s = jnp.where((slot_block == 0) & (take(lo)[:, 0] == 0), 1, 0)
  p_s, alpha_s, r_s = take(p), take(alpha), take(r)
  lanes_sum = lambda v: jax.ops.segment_sum(v, slot_lane, num_segments=L,
                                            indices_are_sorted=True)

  def ev(x):
    e = jnp.exp(x)
    e_s = take(e)
    x, f, err_g, rel_b, live, ok = block_terms(e_s, p_s, alpha_s, r_s, cells, s,
                                               fixed=True, axis_name=None)
    inner, allow, qm = cell_terms(e_s, p_s, alpha_s, r_s, cells, x, f, err_g, rel_b, live, jnp)
    h = lanes_sum(jnp.sum(w * inner, axis=1))
    al = lanes_sum(jnp.sum(w * allow, axis=1))
    qs = lanes_sum(jnp.sum(jnp.where(live, w * qm, 0.0), axis=1))
    bad = lanes_sum(jnp.where(ok | ~slot_live, 0.0, 1.0)) > 0
    d, qs = rr_sandwich(finish_delta(e, p, n, width, h, al, tail, ~bad, jnp),
                        jnp.maximum(qs / n, 0.0), e, p, n, jnp)
    return jnp.where(lane_live, d, 0.0), qs

  zero = jnp.zeros((L,))
  a, b = solve.safeguarded_root(ev, functools.partial(_propose, delta, jnp), zero,
                                jnp.log(p), zero, target=delta, max_iter=40, rtol=1e-13,
                                first=_FIRST_TRIPS)
  bad = _sym_bad(n, p, beta, q) | (delta <= 0) | (delta >= 1) | jnp.isnan(delta)
  del a, S
  return jnp.where(bad, jnp.nan, b)


def slot_program_size() -> tuple[int, int]:
  """``(lanes, slots)`` of :data:`member_epsilon_slots`: ``slots`` from
  :func:`member_lane_bytes` of one block at 1/64 of the device's memory
  (2,048 on the CPU's fixed budget, more on an accelerator), as many lanes (a
  lane holds one slot at least). A function of the device alone: one
  program for every batch."""
  slots = lanes_for_memory(member_lane_bytes(BLOCK), fraction=1.0 / 64, name="n")
  return slots, slots


def _pack_slots(widths, slots_max, lanes_max):
  """Lanes (in order) into calls of at most ``lanes_max`` lanes and
  ``slots_max`` slots: ``[(first lane, end lane)]``."""
  nb = widths // BLOCK
  calls, start, used = [], 0, 0
  for i, k in enumerate(nb.tolist()):
    if i > start and (used + k > slots_max or i - start >= lanes_max):
      calls.append((start, i))
      start, used = i, 0
    used += k
  calls.append((start, len(nb)))
  return calls


def member_epsilon_blocks(delta, n, eps0, *, member: str):
  """eps(delta) over concrete arrays on the accelerator layout: each lane
  gets the window of :func:`sym_epsilon_grouped` (power-of-two buckets, the
  CPU layout's windows and so its values), and the lanes run through
  :func:`member_epsilon_slots`, packed in order into calls of its static
  shape (one program for every window; the calls are dispatched before any
  result is read). A lane whose window alone is over a call's slots runs in
  :func:`member_blocks` of its window."""
  args = np.broadcast_arrays(*(np.asarray(x, np.float64) for x in (delta, n, eps0)))
  lanes = [a.reshape(-1) for a in args]
  widths = _lane_windows(*lanes[:2], *member_params(lanes[2], member), BLOCK, True)
  lanes_max, slots_max = slot_program_size()
  out = np.full(widths.shape, np.nan)
  wide = widths // BLOCK > slots_max
  if wide.any():
    idx = np.nonzero(wide)[0]
    run = functools.partial(member_blocks, "epsilon", member=member)
    out[idx] = _per_window(widths[idx], [a[idx] for a in lanes], run, bounded=False)
  idx = np.nonzero(~wide)[0]
  calls = _pack_slots(widths[idx], slots_max, lanes_max) if idx.size else []

  def call(c):   # the program's arguments of call c, dispatched
    sel = idx[c[0]:c[1]]
    k = widths[sel] // BLOCK
    lane_args = [np.resize(a[sel], lanes_max) for a in lanes]   # padding repeats lanes
    width = np.resize(widths[sel].astype(np.float64), lanes_max)
    live = np.arange(lanes_max) < sel.size
    pad = slots_max - int(k.sum())
    slot_lane = np.concatenate([np.repeat(np.arange(sel.size), k),
                                np.full(pad, sel.size - 1)]).astype(np.int32)
    slot_block = np.concatenate([np.arange(j) for j in k] + [np.zeros(pad)]).astype(np.float64)
    slot_live = np.arange(slots_max) < slots_max - pad
    return member_epsilon_slots(*lane_args, width, live, slot_lane, slot_block, slot_live,
                                member=member)

  if sharding.current_mesh() is None:   # every call dispatched before any result is read
    results = jax.device_get([call(c) for c in calls])
  else:                                 # a lanes mesh: call i on device i mod D
    results = sharding.run_items(call, calls, ahead=True)
  for (lo, hi), res in zip(calls, results):
    out[idx[lo:hi]] = np.asarray(res)[:hi - lo]
  return out.reshape(args[0].shape)


def _check_member_inputs(n, eps0):
  """n >= 1 and eps0 in (0, EPS0_MAX] (beyond it e^eps0 overflows: the shuffle doors'
  range)."""
  checks.check_int("n", n, min_value=1)
  checks.check_range("eps0", eps0, 0.0, checks.EPS0_MAX, lo_open=True)


def _on_host(max_n, *args) -> bool:
  """Whether a concrete (validated) question is answered on the host: no
  ``max_n``, every ``n <= HOST_MAX_N``, and one lane, or any number on the CPU
  layout (:func:`jaxacct._core.batching.host_lanes`, :func:`for_inputs`)."""
  return (max_n is None and for_inputs(*args, max_lanes=host_lanes()).is_host
          and float(np.max(args[1])) <= HOST_MAX_N)


def _host_member_delta(eps, n, eps0, member):
  """delta(eps) of a member on the host, lane by lane: :func:`_sym_fast_delta_scalar`."""
  def one(eps, n, eps0):
    p, beta, q = member_params(eps0, member)
    width = fast_width(n, member_total(eps0, member), None)
    return host_call(_sym_fast_delta_scalar, eps, n, p, beta, q, width, BLOCK)
  return host_f64(each_lane(one, eps, n, eps0))


def _host_member_epsilon(delta, n, eps0, member, terms_cache=True):
  """eps(delta) of a member on the host, lane by lane: :func:`_sym_eps_lane`
  (``terms_cache=False``: every block at every evaluation, the reference)."""
  def one(delta, n, eps0):
    p, beta, q = member_params(eps0, member)
    raw, _ = raw_widths(n, 2.0 * (beta / (p - 1.0)) * p / q, delta)
    width = int(bucket_widths(raw, n, BLOCK, True))
    e, _ = host_call(_sym_eps_lane, delta, n, p, beta, q, width, BLOCK, 40, 1e-13,
                     terms_cache=terms_cache)
    return e
  return host_f64(each_lane(one, delta, n, eps0))


def member_delta_checked(eps, *, n, eps0, max_n, member: str, where: str, devices=None):
  """Front door of a member's delta(eps): concrete inputs are validated
  (ValueError); one concrete question (no ``max_n``; on the CPU layout any
  number of lanes, each its own question) is answered on the host (the
  kernel's formula with ``ns = HOST``, no compiled program), other arrays by
  the jitted kernel under the float64 boundary; traced inputs need
  x64 (RuntimeError naming ``where``) and a static window (``max_n``)."""
  def validate():
    _check_member_inputs(n, eps0)
    checks.check_range("eps", eps, 0.0)

  def kernel(eps, n, eps0):
    return member_delta(eps, n, eps0, member=member,
                        width=member_width(n, eps0, max_n, member=member))

  def concrete(eps, n, eps0):
    if _on_host(max_n, eps, n, eps0):
      return _host_member_delta(eps, n, eps0, member)
    if _arrays_on_accelerator(eps, n, eps0):   # blocks of a fixed lane count
      return member_blocks("delta", eps, n, eps0, member=member,
                           width=member_width(n, eps0, max_n, member=member))
    w = member_width(n, eps0, max_n, member=member)
    return _bounded(functools.partial(member_delta, member=member, width=w), (eps, n, eps0), w)

  with sharding.use_devices(devices):   # a lanes mesh: blocks over its devices
    return dispatch(kernel, (eps, n, eps0), validate, where=where, eager=concrete)


def member_epsilon_checked(delta, *, n, eps0, max_n, member: str, where: str, devices=None):
  """Front door of a member's eps(delta) (see :func:`member_delta_checked`);
  concrete arrays without ``max_n`` are grouped by window bucket
  (:func:`member_epsilon_grouped`), what :func:`_on_host` takes goes to the host path."""
  def validate():
    _check_member_inputs(n, eps0)
    checks.check_delta(delta)

  def kernel(delta, n, eps0):
    return member_epsilon(delta, n, eps0, member=member,
                          width=member_width(n, eps0, max_n, member=member))

  def concrete(delta, n, eps0):
    if _on_host(max_n, delta, n, eps0):
      return _host_member_epsilon(delta, n, eps0, member)
    if _arrays_on_accelerator(delta, n, eps0):  # blocks of a fixed lane count
      if max_n is not None:
        return member_blocks("epsilon", delta, n, eps0, member=member,
                             width=member_width(n, eps0, max_n, member=member))
      return member_epsilon_blocks(delta, n, eps0, member=member)
    if max_n is not None:
      w = member_width(n, eps0, max_n, member=member)
      return _bounded(functools.partial(member_epsilon, member=member, width=w),
                      (delta, n, eps0), w)
    return member_epsilon_grouped(delta, n, eps0, member=member)  # lanes by window bucket

  with sharding.use_devices(devices):   # a lanes mesh: blocks over its devices
    return dispatch(kernel, (delta, n, eps0), validate, where=where, eager=concrete)
