r"""Balls-in-bins inside an epoch: the released prefix of a 1-of-t allocation.

After s of the t steps of an epoch of 1-of-t random allocation (each example
in one uniformly random step, independently), the released outputs are those
of steps 1..s. Conditioned on the others' assignments, with
``P0 = N(0, sigma^2 I_s)`` (the example absent) and
``A_s = (1/s) sum_{i<=s} N(e_i, sigma^2 I_s)`` (1-of-s allocation), the
prefix pair is ``(1 - s/t) P0 + (s/t) A_s``.

Derivations and sources: docs/bounds/tracking.md ("Bounds and proofs /
Tracking during training").
"""

from __future__ import annotations

import math
import threading

import jax
import numpy as np

from jaxacct import pld as jpld
from jaxacct._core.batching import accelerator_layout
from jaxacct._core.parallel import stop_at_exit
from jaxacct.allocation import pld as apld
from jaxacct.pld import from_losses_host, law, pair_column_epsilons, pair_epsilons


# counts per block of the repeated-event engine (below it: one column a count)
_ROWS = 32
# The later epochs' rows on a coarser loss grid (row_step): 8 times the accountant's
# step (an upper bound still; docs/bounds/tracking.md has what it costs in epsilon).
_ROW_COARSENING = 8
_ROW_STEP_MAX = 1e-3


def _prefix_laws(sigma, s: int, mechanism: str, host):
  """FinalLaws (NumPy, upper law only) of the 1-of-s round by ``laws_batch``:
  ``host=True`` built in NumPy (no program); ``"loops"`` the same with the
  pairwise sums' loops as one small compiled program (on the accelerator
  layout the jitted law program); False the jitted law program. The laws
  agree to rounding, and the ledger ``rel``, ``eta`` holds for either
  evaluation order."""
  if host == "loops" and accelerator_layout():
    host = False
  with jax.enable_x64(True):
    f = apld.laws_batch(np.array([sigma], np.float64), np.array([s], np.int32),
                        np.array([apld.DEFAULT_TAIL]), n=apld.DEFAULT_GRID_SIZE,
                        mechanism=mechanism, lower=False, host=host)
    return jax.tree.map(lambda a: np.asarray(a, np.float64)[0], f)


def _later_laws(sigma, ss, mechanism: str):
  """FinalLaws of the 1-of-s rounds for ``ss``, one per s: on the CPU layout
  ``shared_upper_laws`` (levels of common leading bits once, its loops one
  small program), else the jitted law program's."""
  if accelerator_layout():
    return [_prefix_laws(sigma, int(s), mechanism, False) for s in ss]
  F = apld.shared_upper_laws(float(sigma), np.asarray(ss), apld.DEFAULT_TAIL,
                             n=apld.DEFAULT_GRID_SIZE, mechanism=mechanism)
  return [jax.tree.map(lambda a, i=i: np.asarray(a, np.float64)[i], F) for i in range(len(ss))]


def prefix_pair(sigma, s: int, t: int, *, step: float, mechanism: str = "gaussian",
                host=False):
  """``PairPLD`` (pessimistic) of the first ``s`` of ``t`` steps of 1-of-t allocation.

  Args:
    sigma: noise multiplier (Laplace scale for ``mechanism="laplace"``), > 0.
    s, t: ints, 1 <= s <= t.
    step: loss grid step.
    mechanism: ``"gaussian"`` or ``"laplace"``.
    host: how the round's laws are evaluated (False: the jitted law program;
      True: NumPy; ``"loops"``: NumPy with compiled pairwise-sum loops; see
      :func:`_prefix_laws`).

  Bound: upper (dominating pair of the prefix; see the module docstring).
  """
  f = _prefix_laws(float(sigma), int(s), mechanism, host if host == "loops" else bool(host))
  return _pair_of_laws(f, int(s) / int(t), float(step))


def _pair_of_laws(f, gamma: float, step: float):
  """:func:`prefix_pair` from the round's laws ``f`` and ``gamma = s / t``."""
  rel, eta = float(f.rel), float(f.eta)
  fu = (1.0 + rel) * math.exp(eta)
  keep = f.up_p > 0
  loss, q = f.up_loss[keep], f.up_p[keep]
  # remove: ratios rounded up (e^eta), Q-masses (1 + rel) q
  r_up = (1.0 - gamma) + gamma * np.exp(loss + eta)
  q_up = (1.0 + rel) * q
  q0 = float(f.up_q0) * fu
  losses, masses = np.log(r_up), q_up * r_up
  if gamma < 1.0 and q0 > 0:
    losses = np.concatenate([losses, [math.log1p(-gamma)]])
    masses = np.concatenate([masses, [q0 * (1.0 - gamma)]])
  remove = from_losses_host(losses, masses, step=step, pessimistic=True,
                            inf_mass=min(1.0, gamma * float(f.up_minf_t) * fu))
  # add: ratios rounded down (e^-eta), Q-masses (1 + rel) e^eta q
  r_dn = (1.0 - gamma) + gamma * np.exp(loss - eta)
  losses, masses, inf = -np.log(r_dn), q * fu, 0.0
  if gamma < 1.0:
    losses = np.concatenate([losses, [-math.log1p(-gamma)]])
    masses = np.concatenate([masses, [q0]])
  else:
    inf = min(1.0, q0)
  add = from_losses_host(losses, masses, step=step, pessimistic=True, inf_mass=inf)
  return jpld.PairPLD(remove, add)


def row_step(step: float) -> float:
  """The loss grid step of the later epochs' prefix rows: ``step`` times
  ``_ROW_COARSENING`` (at most), never coarser than ``_ROW_STEP_MAX`` nor finer
  than ``step``."""
  m = max(1, min(_ROW_COARSENING, int(math.floor(_ROW_STEP_MAX / step * (1 + 1e-9)))))
  return m * float(step)


def _prefix_epsilon(pair, delta: float) -> float:
  """Epsilon at ``delta`` of a prefix's pair, on the host (``pair_epsilons`` at
  count 1: the formula of ``jaxacct.pld.epsilon``, no program)."""
  return float(pair_epsilons(law(pair), np.array([1]), delta)[0])


def allocation_steps(event, epoch_eps, *, delta: float, step: float, tail_mass: float,
                     max_prefixes: int = 64) -> np.ndarray:
  """Epsilons after each step of ``E`` epochs of 1-of-t allocation, float64 (E t + 1,).

  ``epoch_eps[e]`` (e = 0..E) is the accountant's epsilon after e whole
  epochs, kept at the epoch ends; step ``(e - 1) t + s`` (0 < s < t) gets
  ``min(epoch_eps[e], eps(prefix_s after e - 1 epochs))``, the prefix
  composed after ``e - 1`` copies of the whole epoch's pair (:mod:`._powers`).
  At most ``max_prefixes`` prefix lengths are evaluated (all of them when
  ``t - 1 <= max_prefixes``); a step between two is charged the next one (a
  shorter prefix is a post-processing of a longer one: an upper bound).
  The entries of :func:`allocation_step_segments`, in one array.

  Bound: upper.
  """
  eps = np.asarray(epoch_eps, np.float64)
  segs = allocation_step_segments(event, lambda e: float(eps[e]), len(eps) - 1, delta=delta,
                                  step=step, tail_mass=tail_mass, max_prefixes=max_prefixes)
  return np.concatenate([[0.0]] + [np.asarray(s) for s in segs])


def allocation_step_segments(event, epoch_end, num_epochs: int, *, delta: float, step: float,
                             tail_mass: float, max_prefixes: int = 64, piece: int = 8):
  """Yields the entries 1..E t of :func:`allocation_steps`, in order, as they become final.

  ``epoch_end(e)`` returns the accountant's epsilon after e whole epochs; it
  is called for e = 1..E in order, on one helper thread, beside the prefixes
  (the accountant's epoch ends and the prefixes' laws share nothing). Epoch 1
  comes ``piece`` prefixes at a time after the first (each prefix a 1-of-s
  law, upper only, and a host query; the first prefix's law on the host, the
  others by one compiled law program, a piece's prefixes side by side on the
  cores). Epoch e >= 2 comes once every prefix
  has been composed after e - 1 whole epochs: below ``_ROWS`` epochs as one
  column a count (``jaxacct.pld.pair_column_epsilons``: the whole epoch's
  power once, the prefixes as rows of batched inverse FFTs), from ``_ROWS``
  epochs on by prefix (``jaxacct.pld.pair_epsilons`` over the counts). These
  rows (the prefixes and the whole epoch) are on the coarser grid of
  :func:`row_step` (8 times ``step`` at most): each prefix's row pair is built
  in epoch 1 from the same laws and kept with its memoised log-MGFs and,
  between columns, its last spectrum. The values do not depend on timing: the
  same run gives the same table, piece by piece or whole (a running maximum
  is carried from piece to piece).

  Bound: upper.
  """
  mech = event.mechanism
  t = int(event.steps_per_epoch)
  sigma = float(event.scale if mech == "laplace" else event.noise_multiplier)
  n_ep = int(num_epochs)
  grid = np.arange(1, t)
  if t - 1 > max_prefixes:
    grid = np.unique(np.round(np.linspace(1, t - 1, max_prefixes)).astype(np.int64))
  # step s of an epoch: the first evaluated prefix >= s
  pick = np.searchsorted(grid, np.arange(1, t), side="left")
  run = [0.0]

  def emit(vals):
    out = np.maximum.accumulate(np.concatenate([[run[0]], np.asarray(vals, np.float64)]))[1:]
    run[0] = float(out[-1]) if out.size else run[0]
    return out

  def epoch_part(col, e_end, lo, hi):
    """steps lo+1..hi (1 <= ..., < t) of an epoch whose prefix column is col."""
    p = pick[lo:hi]
    return np.where(p < grid.size, col[np.minimum(p, grid.size - 1)], e_end)

  def end_at(e):
    with jax.enable_x64(True):           # thread-local: entered on the helper thread
      return float(epoch_end(e))

  rows_at = row_step(step)

  # the laws of prefixes 2.. and (later epochs) of the whole epoch, in one go
  later = [int(s) for s in grid[1:]] + ([t] if n_ep >= 2 else [])
  laws = {}

  def prefix(i):
    with jax.enable_x64(True):           # thread-local: entered on each thread
      if i == 0:   # the first step's prefix in NumPy: it waits for no compiled program
        f = _prefix_laws(sigma, int(grid[0]), mech, True)
      else:
        if not laws:
          laws.update(zip(later, _later_laws(sigma, later, mech)))
        f = laws.pop(int(grid[i]))
      gamma = int(grid[i]) / t
      # epoch 1 reads it on the accountant's grid, the later epochs on the rows'
      row = law(_pair_of_laws(f, gamma, rows_at)) if n_ep >= 2 else None
      return row, _prefix_epsilon(law(_pair_of_laws(f, gamma, step)), delta)

  ends = _InOrder(end_at, n_ep)   # end 1 beside the first prefix
  try:
    pairs = []
    col = np.full(grid.size, np.inf)
    done = 0                              # steps of epoch 1 emitted
    cuts = np.unique(np.concatenate([[1], np.arange(piece, grid.size, piece), [grid.size]]))
    for a, b in zip(np.concatenate([[0], cuts[:-1]]), cuts):   # step 1 at once
      for i in range(a, b):
        p, col[i] = prefix(i)
        pairs.append(p)
      e1 = ends.get(1)
      ends.allow(n_ep)         # the later ends, in order, once step 1 is out
      yield emit(epoch_part(np.minimum(col, e1), e1, done, int(grid[b - 1])))
      done = int(grid[b - 1])
    e1 = ends.get(1)
    ends.allow(n_ep)
    if done < t - 1:
      yield emit(epoch_part(np.minimum(col, e1), e1, done, t - 1))
    yield emit([e1])
    if n_ep < 2:
      return
    with jax.enable_x64(True):
      f = laws.pop(t) if laws else _later_laws(sigma, [t], mech)[0]
    whole = law(_pair_of_laws(f, 1.0, rows_at))
    counts = np.arange(1, n_ep)
    if counts.size >= _ROWS:  # counts in shared blocks: all counts of a prefix at once
      val = np.stack([pair_epsilons(whole, counts, delta, factor=p, tail_mass=tail_mass)
                      for p in pairs])
      cols = lambda c: val[:, c - 1]   # noqa: E731
    else:                     # a column a count: the prefixes as rows

      def cols(c):
        v = pair_column_epsilons(whole, c, pairs, delta, tail_mass=tail_mass)
        for p in pairs:       # keep the log-MGFs and the last spectrum (the next
          p.remove.drop_spectra(keep_last=True)   # column's tilt and length, often)
          p.add.drop_spectra(keep_last=True)
        return v
    for c in range(1, n_ep):
      v = cols(c)
      end = ends.get(c + 1)
      yield emit(np.concatenate([epoch_part(np.minimum(v, end), end, 0, t - 1), [end]]))
  finally:
    ends.close()


class _InOrder:
  """``fn(1), fn(2), ...`` computed in order on a daemon thread, each started once
  :meth:`allow` lets it; :meth:`get` waits for one (an exception in ``fn`` is
  raised there). At the interpreter's exit the thread is closed and joined
  after its current value (:func:`jaxacct._core.parallel.stop_at_exit`)."""

  def __init__(self, fn, n: int):
    self._vals, self._error, self._limit, self._closed = {}, None, 1, False
    self._cond = threading.Condition()
    self._thread = threading.Thread(target=self._run, args=(fn, int(n)), daemon=True,
                                    name="jaxacct-epoch-ends")
    stop_at_exit(self)
    self._thread.start()

  def _run(self, fn, n):
    try:
      for e in range(1, n + 1):
        with self._cond:
          while e > self._limit and not self._closed:
            self._cond.wait()
          if self._closed:
            return
        v = fn(e)
        with self._cond:
          self._vals[e] = v
          self._cond.notify_all()
    except BaseException as exc:   # noqa: BLE001 - raised by get
      with self._cond:
        self._error = exc
        self._cond.notify_all()

  def allow(self, n: int) -> None:
    with self._cond:
      self._limit = max(self._limit, int(n))
      self._cond.notify_all()

  def get(self, e: int):
    with self._cond:
      while e not in self._vals and self._error is None and not self._closed:
        self._cond.wait()
      if e in self._vals:
        return self._vals[e]
      raise self._error if self._error is not None else RuntimeError("closed")

  def close(self, join: bool = False) -> None:
    """Stops the producer after its current value; ``join``: waits for it (60 s at most)."""
    with self._cond:
      self._closed = True
      self._cond.notify_all()
    if join and self._thread is not threading.current_thread():
      self._thread.join(timeout=60.0)

  def stop(self) -> None:
    """:meth:`close`, then waits for the thread (its current value first)."""
    self.close(join=True)
