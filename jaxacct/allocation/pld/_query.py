"""Queries on composed allocation laws, and the batched jitted entry points (private).

Hockey-stick deltas and epsilons of a :class:`._compose.Composed` lane
(upper: exact segment inversion of the lattice law; lower: bisection then
Newton steps from the feasible side on the merged atoms, every iterate
evaluated), with the float ledger of :mod:`._compose`;
:func:`query_batch`, the host dispatch behind the epsilon/delta front doors
to the jitted programs of each round type (:func:`direct_batch`,
:func:`composed_batch`); and :func:`run_chunks`, the scheduler of a sweep's
chunks on the CPU cores.
"""

from __future__ import annotations

import functools
import math
import queue
import threading

import jax
import numpy as np

from jaxacct._core.batching import (accelerator_layout, lanes_for_memory, lanes_per_block,
                                    map_blocks)
from jaxacct._core import sharding
from jaxacct._core.dtype import require_x64
from jaxacct._core.namespace import JAX, host_call
from jaxacct._core.parallel import cores
from jaxacct.allocation.pld._compose import DEFAULT_SIZE, Composed, compose_laws
from jaxacct.allocation.pld._laws import deltas, epsilons
from jaxacct._core.compiled import ACCELERATOR_OPTIONS, jit


def _knots(C: Composed, xp):
  N = C.wu.shape[0]
  sh = (C.m + xp.arange(N, dtype=xp.int64)).astype(xp.float64) * C.h
  return sh, xp.exp(sh)


def composed_deltas(C: Composed, eps, ns=JAX):
  """(rem_up, add_up, rem_lo, add_lo) at eps (scalar) for one composed lane."""
  xp = ns.xp
  sh, x = _knots(C, xp)
  e = xp.asarray(eps, xp.float64)
  g = xp.exp(e - C.H)
  ru = C.fup * xp.exp(C.H) * (xp.sum(C.wu * xp.maximum(x - g, 0.0)) + C.defu)
  au = C.fup * (xp.sum(C.wu * xp.maximum(-xp.expm1(sh + e - C.H), 0.0)) + C.q0u)
  # 1 (always an upper delta) where the knots x = e^loss pass float64's range
  ru, au = (xp.where(xp.isnan(v), 1.0, v) for v in (ru, au))
  if C.wl_lo is None:
    rl = al = xp.full((), xp.nan)
  else:
    gl = xp.exp(e + C.H_lo)
    rl = C.flo * (xp.exp(-C.H_lo) * xp.sum(xp.maximum(C.pl_lo - gl * C.wl_hi, 0.0)) + C.singl)
    al = C.flo * (xp.sum(xp.maximum(C.wl_lo - gl * C.pl_hi, 0.0)) + C.q0l)
  bad = xp.isnan(C.fup) | xp.isnan(e)
  return tuple(xp.where(bad, xp.nan, v) for v in (ru, au, rl, al))


def _upper_eps(C: Composed, x, t_rem, t_add, xp):
  """(gamma_rem, gamma_add): the smallest gamma with sum wu (x - gamma)_+ <= t_rem
  (remove) and with sum wu (1 - gamma x)_+ <= t_add (add), by exact segment
  inversion of the lattice law.

  remove: with B_j = sum_{i >= j} w_i, delta(x_j) = D_j = sum_{l > j} dx_l B_l
  (D decreasing), and delta is linear on [x_j, x_{j+1}].
  add: y = 1/gamma with delta(y) = C_j - K_j / y on [x_j, x_{j+1}] (C, K: Q-
  and P-mass <= j).
  The five cumulative sums run as two stacked ones (each row bit for bit the
  sum it replaces), so the program holds two cumsum kernels instead of five.
  """
  wu = C.wu
  N = x.shape[0]
  dx = x * -xp.expm1(-C.h)                            # x_j - x_{j-1}
  c1 = xp.cumsum(xp.stack([wu[::-1], wu, wu * x]), axis=1)
  B = c1[0][::-1]                                      # B_j = sum_{i >= j} w_i
  Cq, Kp = c1[1], c1[2]
  Cprev = xp.concatenate([xp.zeros(1), Cq[:-1]])
  c2 = xp.cumsum(xp.stack([(dx * B)[::-1], dx * Cprev]), axis=1)
  S = c2[0][::-1]                                      # S_l = sum_{l' >= l} dx B
  G = c2[1]                                            # G_j = sum_{i<j} w_i (x_j - x_i)

  # remove: largest j with D_j >= target (D decreasing); j = -1 if none
  D = xp.concatenate([S[1:], xp.zeros(1)])           # D_j = delta(x_j)
  j = xp.sum(D >= t_rem) - 1
  jn = xp.clip(j + 1, 0, N - 1)
  D_next = xp.where(j + 1 <= N - 1, D[jn], 0.0)
  Bn = B[jn]
  g = x[jn] - (t_rem - D_next) / xp.where(Bn > 0, Bn, 1.0)
  g = xp.where(Bn > 0, g, x[jn])
  g_rem = xp.where(j >= N - 1, x[N - 1], g)

  # add
  dnode = G / x                                        # delta at y = x_j (increasing)
  j = xp.sum(dnode <= t_add) - 1                      # last node with delta <= target
  jc = xp.clip(j, 0, N - 1)
  denom = Cq[jc] - t_add
  y = xp.where(denom > 0, Kp[jc] / xp.where(denom > 0, denom, 1.0), xp.inf)
  y = xp.clip(y, x[jc], xp.where(jc + 1 <= N - 1, x[xp.minimum(jc + 1, N - 1)], xp.inf))
  y = xp.where(j < 0, x[0], y)                        # delta(x_0) > target: gamma >= 1/x_0
  return g_rem, 1.0 / y


def _lower_eps(A, B, target, g_hi, ns, *, iters_bis=24, iters_newton=8):
  """Largest gamma with f(gamma) = sum (A - gamma B)_+ >= target (f convex, decreasing).

  Bisection in log gamma on [1, g_hi] keeping the feasible end, then Newton
  steps from it (never past the root for a convex decreasing f); returns
  gamma with f(gamma) >= target evaluated, or 0 if f(1) < target.
  """
  xp = ns.xp
  f = lambda g: xp.sum(xp.maximum(A - g * B, 0.0))
  ok0 = f(1.0) >= target
  # log gamma: feasible (f >= target) on [0, root]
  a = ns.bisect(lambda x: target - f(xp.exp(x)), xp.zeros(()),
                xp.log(xp.maximum(g_hi, 1.0)) + 1e-9, increasing=True, num_iters=iters_bis)

  slope = lambda g: xp.sum(xp.where(A > g * B, B, 0.0))
  g = ns.newton_keep_feasible(f, slope, xp.exp(a), target, num_iters=iters_newton)
  return xp.where(ok0, g, 0.0)


#: Relative rounding allowance of the composed epsilon queries: the log of a
#: profile solved through tilted FFT sums carries float64 error of order
#: 1e-14 relative; upper epsilons move up and lower ones down by this much.
COMPOSED_ROUNDING = 1e-12


def composed_epsilons(C: Composed, delta, ns=JAX):
  """(rem_up, add_up, rem_lo, add_lo) epsilons at delta (scalar), one lane."""
  xp = ns.xp
  sh, x = _knots(C, xp)
  d = xp.asarray(delta, xp.float64)
  nudge = lambda e: e + COMPOSED_ROUNDING * (1.0 + xp.abs(e))
  t_r = d / (C.fup * xp.exp(C.H)) - C.defu
  t_a = d / C.fup - C.q0u
  g_r, g_a = _upper_eps(C, x, t_r, t_a, xp)
  # +inf where the knots x = e^loss pass float64's range (losses above ~709: the
  # lattice's sums give NaN there) or the target is spent; bad lanes: NaN below
  ru = xp.where((t_r > 0) & ~xp.isnan(g_r),
                xp.maximum(nudge(xp.log(xp.maximum(g_r, 1e-300)) + C.H), 0.0), xp.inf)
  au = xp.where((t_a > 0) & ~xp.isnan(g_a),
                xp.maximum(nudge(xp.log(xp.maximum(g_a, 1e-300)) + C.H), 0.0), xp.inf)
  if C.wl_lo is None:
    rl = al = xp.full((), xp.nan)
  else:
    # remove: f(g) = sum (P_lo - g W_hi)_+; add: sum (W_lo - g P_hi)_+ (one traced
    # copy of the solver, lax.map over the two directions)
    A = xp.stack([C.pl_lo, C.wl_lo])
    B = xp.stack([C.wl_hi, C.pl_hi])
    t_l = xp.stack([(d / C.flo - C.singl) * xp.exp(C.H_lo), d / C.flo - C.q0l])
    ghi = xp.max(xp.where(B > 0, A / xp.where(B > 0, B, 1.0), 0.0), axis=1)
    g = ns.map_seq(lambda a: _lower_eps(*a, ns), (A, B, t_l, ghi))
    rl, al = (xp.where(t_l[i] > 0, xp.maximum(xp.log(xp.maximum(g[i], 1e-300)) - C.H_lo, 0.0),
                        xp.inf) for i in range(2))
    shrink = lambda e: xp.where(xp.isfinite(e), e * (1.0 - COMPOSED_ROUNDING), e)
    rl, al = shrink(rl), shrink(al)
  bad = xp.isnan(C.fup) | ~(d > 0) | ~(d < 1)
  return tuple(xp.where(bad, xp.nan, v) for v in (ru, au, rl, al))


#: Jitted epsilon sweeps with the default ``composition_size=None`` pick the lattice
#: per chunk from the ladder SWEEP_MIN_SIZE .. DEFAULT_COMPOSITION_SIZE (powers
#: of two): the smallest N >= SWEEP_SIZE_FACTOR * sqrt(c * ln(1/tau) / ln(1e12))
#: over the chunk's lanes (c = k E composed rounds, tau the window tail). The
#: lattice split adds a relative spread of order (W / N)^2 / var to a law of
#: width W ~ sqrt(c ln(1/tau)); measured (16 sigmas in [0.5, 5],
#: t = 234 E = 10 and 100, t = 100 k = 10 E = 20) the upper moves by
#: <= 110 c / N^2 relative, so this ladder keeps it near 1e-4 or below.
SWEEP_SIZE_FACTOR = 1024.0
SWEEP_MIN_SIZE = 1 << 11
#: Tilts per direction in jitted sweeps: the full ladder (1 or 2 left the remove
#: bracket at 1.013-1.07 for t = 234, E = 3, delta = 1e-9, sigma ~ 1, at 2**11 and
#: 2**13 alike: far mass folds in at the saddle tilt; 4: 1.0021, as at 2**15).
SWEEP_TILTS = 4
#: A sweep chunk where some composed lane's (k E > 1) bracket (upper over lower,
#: either direction) is wider than this runs again with the host path's settings (2**15 points,
#: DEFAULT_TILTS, the full Chernoff grid): the ladder's estimate of the lattice
#: error is a width argument and misses an epsilon that is tiny against the
#: window (sigma = 50, t = 1e6, E = 3, delta = 1e-15: 10 % wider at 2**12).
SWEEP_BRACKET = 1.005


def sweep_size(c, tau, cap=DEFAULT_SIZE):
  """The lattice size of a jitted sweep chunk: the smallest power of two in
  [SWEEP_MIN_SIZE, cap] with N >= SWEEP_SIZE_FACTOR * sqrt(c ln(1/tau) / ln(1e12))
  for every lane (c = c1 + c2 composed rounds, tau the window tail; host NumPy)."""
  c = np.maximum(np.asarray(c, np.float64), 1.0)
  z = np.maximum(-np.log(np.asarray(tau, np.float64)), 1.0) / math.log(1e12)
  need = SWEEP_SIZE_FACTOR * math.sqrt(float(np.max(c * z)))
  n = SWEEP_MIN_SIZE
  while n < need and n < cap:
    n *= 2
  return int(min(n, cap))


def too_wide(out, counts):
  """True where some composed lane's (``counts`` = c1 + c2 > 1) epsilon sweep
  bracket is wider than SWEEP_BRACKET (host NumPy; a NaN lane, an invalid
  input, does not count). A single-round lane is left out: its query reads the
  round's own laws, which the host settings would not change."""
  ru, au, rl, al = (np.asarray(a) for a in out)
  with np.errstate(invalid="ignore"):
    wide = [u > SWEEP_BRACKET * np.maximum(l, 0.0) + 1e-9 for u, l in ((ru, rl), (au, al))]
  return bool(np.any((wide[0] | wide[1]) & (np.asarray(counts) > 1)))


SWEEP_CHUNK = 128       # lanes per jitted call on the CPU layout (larger sweeps: chunks)
#: Device memory a lane of a sweep chunk takes on the accelerator layout (the
#: query's tilted FFTs dominate: ~12 MB a lane; the laws' diagonal blocks
#: ~2 MB): chunks there are sized from the device's memory
#: (:func:`jaxacct._core.batching.lanes_for_memory`), each one vmapped block.
LANE_BYTES = 16 << 20


def sweep_chunk() -> int:
  """Lanes per jitted call: ``SWEEP_CHUNK`` on the CPU layout; on the
  accelerator layout as many as a quarter of the device's memory holds (a
  power of two, a function of the device only: one compiled shape for every
  batch of at least that many lanes), all in one vmapped block."""
  return lanes_for_memory(LANE_BYTES) if accelerator_layout() else SWEEP_CHUNK


def sweep_threads(chunks: int) -> int:
  """Threads running the chunks of a jitted sweep: one per CPU core, at most
  ``chunks``, on the CPU backend (a compiled law or query program runs its
  lanes one after another on one core); 1 on accelerators, whose lanes
  already run in parallel."""
  if chunks < 2 or accelerator_layout():
    return 1
  return max(1, min(cores(), chunks))


#: Held around a chunk's rerun with the host settings: one thread compiles
#: that program, the others wait for it instead of compiling it again.
RERUN = threading.Lock()


#: Stage keys (``run_chunks``' ``keys``) whose first chunk has run in this
#: process: their programs are compiled, so later calls need not wait for a
#: first chunk before the other threads enter the stage.
_WARM = set()


def _through(stages, x):
  """One chunk through every stage (each output made ready before the next)."""
  for stage in stages:
    x = jax.block_until_ready(stage(x))
  return x


def run_chunks(stages, slices, done, keys=None, prepares=None):
  """The chunks ``slices`` through ``stages`` (functions applied in turn, the
  first to the slice; each output made ready before the next), on :func:`sweep_threads`
  threads; returns the last stage's outputs in order, calling ``done(1)``
  (the progress bar) in the calling thread as each chunk's output arrives.

  Scheduling: a free thread takes the earliest chunk whose next stage may
  run; once every stage is open, the earliest stage first among the next
  2 x threads chunks (the last chunks' laws before the queries ahead of them:
  the threads finish together). Another chunk enters a stage only once the
  first chunk has left it
  (the first chunk compiles each stage's program; the others reuse it instead
  of compiling it again); meanwhile the other threads go on with the stages
  that may run (in a fresh process: the next chunks' laws while the first
  chunk compiles its query), never waiting while there is work. ``keys``
  (optional, one hashable or None per stage): a stage whose key has run
  before in this process (its program compiled) is not gated, so a warm sweep
  keeps every core busy from the start; a key that misses a static only
  costs a second compile, never a wrong value. A lane's values depend on its
  chunk only: they are those of a serial run, bit for bit. The workers enter
  the caller's float64 setting (JAX's ``enable_x64`` context is
  thread-local); with one worker (accelerators) everything runs in the
  calling thread, under all of the caller's JAX contexts (a
  ``jax.default_device``, say). An exception in a stage stops the workers
  and is raised here.

  ``prepares`` (optional, one callable or None per stage; several workers
  only, for the stages whose key has not run): compiles that stage's programs
  without running them (``CachedJit.precompile``); a free thread takes it once
  the stages before it are open (XLA's compile of one program already uses
  more than one core), and the stage opens to every chunk when it returns,
  instead of after the first chunk. In a fresh process: the law program is
  compiled, then one core compiles the query program from the laws' shapes
  while the other runs the first chunks' laws. A prepare that raises only opens its
  stage (the chunks compile what they need). Under a lanes mesh (a door's
  ``devices=``) chunk ``i`` runs on mesh device ``i mod D``, every stage in
  that device's thread (:func:`jaxacct._core.sharding.run_items`)."""
  if sharding.active():   # a lanes mesh (``devices=``): chunk i on its device i mod D
    return sharding.run_items(functools.partial(_through, stages), slices, done)
  x64 = bool(jax.config.jax_enable_x64)
  n_st, n_ch = len(stages), len(slices)
  keys = list(keys) if keys is not None else [None] * n_st
  workers = sweep_threads(n_ch)
  if workers <= 1:
    outs = []
    for x in slices:
      for stage in stages:
        x = jax.block_until_ready(stage(x))
      outs.append(x)
      done(1)
    return outs

  open_ = [key is not None and key in _WARM for key in keys]
  prep = [None if open_[k] or prepares is None else prepares[k] for k in range(n_st)]
  todo = [k for k in range(n_st) if prep[k] is not None]   # prepares not taken yet
  nxt, busy, vals = [0] * n_ch, [False] * n_ch, list(slices)
  errors, finished = [], queue.Queue()
  cv = threading.Condition()

  def pick():
    # prepares in stage order, each once the one before it is done: the first
    # compile has the cores to itself (two at once contend for them and for
    # memory), the next overlaps the first stage's runs
    if todo and all(open_[k] for k in range(todo[0])):
      return ("prepare", todo.pop(0))
    ready = [i for i in range(n_ch) if nxt[i] < n_st and not busy[i]
             and (open_[nxt[i]] or (i == 0 and prep[nxt[i]] is None))]
    if not ready:
      return None
    if all(open_):
      # the earliest stage first among the next 2 x workers chunks: the last
      # chunks' laws run before the queries ahead of them, so no chunk's whole
      # pipeline is left to one thread at the end (and at most that many
      # chunks' laws wait for their query)
      lo = min(i for i in range(n_ch) if nxt[i] < n_st)
      near = [i for i in ready if i < lo + 2 * workers]
      if near:
        return min(near, key=lambda i: (nxt[i], i))
    return ready[0]

  def prepare(k):
    try:
      prep[k]()
    except Exception:   # noqa: BLE001 -- the chunks compile what they need
      pass
    with cv:
      open_[k] = True
      cv.notify_all()

  def worker():
    with jax.enable_x64(x64):
      while True:
        with cv:
          while True:
            if errors:
              return
            i = pick()
            if i is not None:
              break
            if all(k == n_st or b for k, b in zip(nxt, busy)):
              return          # whatever is left is running on another thread
            cv.wait()
          if isinstance(i, tuple):
            task = i
          else:
            task = None
            busy[i], k = True, nxt[i]
        if task is not None:
          prepare(task[1])
          continue
        try:
          y = jax.block_until_ready(stages[k](vals[i]))
        except BaseException as e:   # noqa: BLE001 -- re-raised by the caller
          with cv:
            errors.append(e)
            cv.notify_all()
          finished.put(None)
          return
        with cv:
          vals[i], nxt[i], busy[i] = y, k + 1, False
          if i == 0:
            open_[k] = True
            if keys[k] is not None:
              _WARM.add(keys[k])
          cv.notify_all()
        if k + 1 == n_st:
          finished.put(i)

  threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
  for th in threads:
    th.start()
  try:
    for _ in range(n_ch):
      if finished.get() is None:
        break
      done(1)
  finally:
    for th in threads:
      th.join()
  if errors:
    raise errors[0]
  return vals


# ----------------------------------------------------------------------------
# one lane, the batched jitted entry point and the host entry point
# ----------------------------------------------------------------------------

def composed_lane(fr1, fa1, fr2, fa2, c1, c2, value, tau, *, mode: str, size: int, tilts: int,
                  shared: bool, blocks: int, want_lower: bool = True, sweep: bool = False,
                  ns=JAX):
  """(rem_up, add_up, rem_lo, add_lo) of c1 rounds F1 composed with c2 rounds
  F2 for one lane (remove laws fr*, add laws fa*; ``shared``: fa* is fr*;
  ``blocks`` 1: c1 rounds only); ``ns``: ``JAX`` (jittable) or ``HOST``
  (NumPy, concrete input). ``want_lower=False``: upper only (one
  composition instead of three; the lower entries are NaN); ``sweep``: the
  coarser Chernoff grid of :func:`._compose.compose_laws`."""
  query = composed_epsilons if mode == "eps" else composed_deltas

  def run(f1, f2):
    C = compose_laws(f1, f2, c1, c2, tau, value, mode=mode, size=size, tilts=tilts,
                     want_lower=want_lower, blocks=blocks, sweep=sweep, ns=ns)
    return query(C, value, ns)

  out = run(fr1, fr2)
  if not shared:
    oa = run(fa1, fa2)
    out = (out[0], oa[1], out[2], oa[3])
  return out


@functools.partial(jit, static_argnames=("mode", "batch"),
                   compiler_options=ACCELERATOR_OPTIONS)
def direct_batch(Fr1, Fa1, value, *, mode: str, batch: int):
  """(rem_up, add_up, rem_lo, add_lo) per lane of single-round lanes (c1 + c2
  = 1): the round's own profile (:func:`._laws.epsilons` / ``deltas``), no
  lattice; mode "eps" (value = delta) or "delta" (value = epsilon)."""
  require_x64("allocation.pld")
  direct_fn = epsilons if mode == "eps" else deltas
  return map_blocks(lambda xs: direct_fn(xs[0], xs[2], xs[1]), (Fr1, Fa1, value),
                    batch_size=lanes_per_block(batch))


@functools.partial(jit, static_argnames=("mode", "size", "tilts", "shared", "batch", "sweep",
                                         "blocks"),
                   compiler_options=ACCELERATOR_OPTIONS)
def composed_batch(Fr1, Fa1, Fr2, Fa2, c1, c2, value, tau, *, mode: str, size: int, tilts: int,
                   shared: bool, batch: int, sweep: bool = False, blocks: int = 2):
  """(rem_up, add_up, rem_lo, add_lo) per lane of c1 rounds F1 composed with c2
  rounds F2 (:func:`composed_lane` over the lanes; ``blocks`` 1: c1 rounds
  only, F2 left out exactly; 2: both; a lane with c2 = 0 leaves F2 out
  exactly either way)."""
  require_x64("allocation.pld")

  def lane(xs):
    fr1, fa1, fr2, fa2, cc1, cc2, vv, tt = xs
    return composed_lane(fr1, fa1, fr2, fa2, cc1, cc2, vv, tt, mode=mode, size=size,
                         tilts=tilts, shared=shared, blocks=blocks, sweep=sweep)

  return map_blocks(lane, (Fr1, Fa1, Fr2, Fa2, c1, c2, value, tau),
                    batch_size=lanes_per_block(batch))


def query_batch(Fr1, Fa1, Fr2, Fa2, c1, c2, value, tau, *, mode: str, size: int, tilts: int,
                shared: bool, batch: int, sweep: bool = False, precompile: bool = False):
  """(rem_up, add_up, rem_lo, add_lo) per lane (NumPy): epsilons (mode "eps", value
  = delta) or deltas (mode "delta", value = epsilon) of c1 rounds F1 composed with
  c2 rounds F2 (remove laws Fr*, add laws Fa*; ``shared``: Fa* is Fr*; F2 =
  F1 where no lane has c2 > 0). The host picks the compiled programs a batch
  needs from its counts (host NumPy ``c1``, ``c2``): single-round lanes (c1 +
  c2 = 1) through :func:`direct_batch`, the others through
  :func:`composed_batch` with one round type (no lane has c2 > 0) or two. So
  a question compiles only the programs of its round types (a sweep at E =
  10: the one-block composition, not all three in one program), and a new
  t, k or E compiles nothing unless it brings a round
  type the process has not compiled yet (each of the three once, per shape
  and static setting). ``sweep``: the coarser Chernoff grid of
  :func:`._compose.compose_laws` (tightness only). ``precompile``: the
  laws may be ``jax.ShapeDtypeStruct``s; the programs this batch would run are
  compiled (``CachedJit.precompile``), nothing runs, None is returned.
  """
  c1n, c2n = np.asarray(c1, np.float64), np.asarray(c2, np.float64)
  one = (c1n + c2n) == 1
  programs = []
  if np.any(one):
    programs.append((direct_batch, (Fr1, Fa1, value), dict(mode=mode, batch=batch)))
  if not np.all(one):
    programs.append((composed_batch, (Fr1, Fa1, Fr2, Fa2, c1, c2, value, tau),
                     dict(mode=mode, size=size, tilts=tilts, shared=shared, batch=batch,
                          sweep=sweep, blocks=2 if np.any(c2n > 0) else 1)))
  if precompile:
    for f, args, kw in programs:
      f.precompile(*args, **kw)
    return None
  out = [np.full(one.shape, np.nan) for _ in range(4)]
  for f, args, kw in programs:
    sel = one if f is direct_batch else ~one
    out = [np.where(sel, np.asarray(a), b) for a, b in zip(f(*args, **kw), out)]
  return tuple(out)


def query_host(Fr1, Fa1, Fr2, Fa2, c1, c2, value, tau, *, mode: str, size: int, tilts: int,
               shared: bool, want_lower: bool = True):
  """:func:`query_batch` on the host (NumPy laws and lanes), no XLA program:
  composed lanes through :func:`composed_lane`, single-round lanes
  (c1 + c2 == 1) through the round's own profile (:func:`._laws.deltas`,
  :func:`._laws.epsilons`, the text the jitted direct query runs)."""
  c1, c2, value, tau = (np.asarray(a, np.float64) for a in (c1, c2, value, tau))
  out = np.full((4, c1.shape[0]), np.nan)
  comp = np.flatnonzero(c1 + c2 != 1)
  row = lambda F, i: jax.tree.map(lambda a: np.asarray(a)[i], F)
  for i in comp:
    out[:, i] = host_call(composed_lane, row(Fr1, i), row(Fa1, i), row(Fr2, i), row(Fa2, i),
                          c1[i], c2[i], value[i], tau[i], mode=mode, size=size, tilts=tilts,
                          shared=shared, blocks=2 if c2[i] > 0 else 1,
                          want_lower=want_lower)
  direct = epsilons if mode == "eps" else deltas
  for i in np.flatnonzero(c1 + c2 == 1):
    r = host_call(direct, row(Fr1, i), value[i])
    a = r if shared else host_call(direct, row(Fa1, i), value[i])
    out[:, i] = (r[0], a[1], r[2], a[3])
  if not want_lower:
    out[2:] = np.nan
  return tuple(out)
