"""The optax hook of :mod:`jaxacct.tracking` (see the package docstring).

:func:`track_privacy` (count applied updates, look the epsilon up, enforce a
budget, refuse a schedule change), :func:`privacy_spent`, and the DP
aggregation pieces that compose with gradient accumulation
(:func:`gaussian_noise`; :func:`clip_and_sum` is in the aggregation module).
Bound: upper (the accountant's table), for a schedule fixed in advance.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxacct._core import checks
from jaxacct._core.dtype import x64_enabled
from jaxacct.tracking._accountants import check_accountant, check_table_size
from jaxacct.tracking._settings import ACCOUNTED, DELTAS, accounted, check_settings, schedule_of


def host_flag_set(flag) -> bool:
  """Whether ``flag`` is a host value (an eager ``update``) with an entry set.

  Under ``jit``/``vmap`` the flag is staged: the hook cannot raise there and
  records it in its state instead (read back by :func:`privacy_spent`).
  """
  return not isinstance(flag, jax.core.Tracer) and bool(np.any(np.asarray(flag)))


class PrivacyBudgetExceeded(RuntimeError):
  """Raised when an update would spend more than ``max_epsilon``."""


class PrivacyScheduleChanged(ValueError):
  """Raised when a run's accounted schedule (noise, batch size, ...) changes mid-run.

  The hook's epsilon and its budget stop hold for a schedule fixed in advance
  (see :func:`track_privacy`).
  """


class PrivacyTrackerState(NamedTuple):
  """State of :func:`track_privacy`.

  Attributes:
    count: int32 scalar, number of applied (not masked) updates.
    eps: float scalar, epsilon at ``delta`` spent after ``count`` updates
      (float64 under x64, else float32 rounded up).
    delta: float scalar, the delta at which ``eps`` holds (float32 under x64
      off: rounded up; :func:`privacy_spent` reports the exact one).
    budget_exhausted: bool scalar, True once an update was masked because it
      would have exceeded ``max_epsilon``.
    schedule_id: int32 scalar, fingerprint of the schedule (what the
      accountant accounts, ``num_steps``, ``delta``, ``max_epsilon``)
      recorded by ``init``.
    schedule_changed: bool scalar, True once an update ran under a hook
      built for another schedule (that update and every later one masked).
    raise_on_budget: bool scalar, the hook's ``on_budget == "raise"``
      (:func:`privacy_spent` raises :class:`PrivacyBudgetExceeded` on a
      concrete state with ``budget_exhausted`` set).
    table_base, table_hi: int32 scalars; table_eps, table_ok: the entries
      ``table_base..table_hi`` of the epsilon table (and whether the update
      that reaches each is allowed), fetched from the host table as
      training reaches them (shape ``(WINDOW + 1,)``; shape ``(0,)`` when
      the whole table was computed when the hook was built).
  """
  count: jax.Array
  eps: jax.Array
  delta: jax.Array
  budget_exhausted: jax.Array
  schedule_id: jax.Array
  schedule_changed: jax.Array
  raise_on_budget: jax.Array
  table_base: jax.Array
  table_hi: jax.Array
  table_eps: jax.Array
  table_ok: jax.Array


# entries of the epsilon table an optimizer state carries (a host fetch per WINDOW updates)
WINDOW = 256


def _round_up_f32(x: np.ndarray) -> np.ndarray:
  x = np.asarray(x, np.float64)
  y = x.astype(np.float32)
  return np.where(y.astype(np.float64) < x, np.nextafter(y, np.float32(np.inf)), y)


# --------------------------------------------------------------------------
# The transformation.
# --------------------------------------------------------------------------

def track_privacy(accountant, *, num_steps: int, delta: float,
                  max_epsilon: Optional[float] = None,
                  on_budget: str = "stop") -> optax.GradientTransformation:
  r"""Optax transform that counts applied updates and tracks epsilon (upper bound, fixed schedule).

  Passes ``updates`` through (or zeros them once the budget is spent) and keeps
  a :class:`PrivacyTrackerState`; ``optax.tree.get(opt_state, "eps")`` reads
  the epsilon spent so far inside or outside ``jit``.

  The float64 epsilon table of ``accountant`` for 0..``num_steps`` updates
  (see :func:`epsilon_table`) is computed once. Where it takes seconds
  (random allocation; a Poisson or shuffle event on an empty ledger) it is
  produced in step order on a background thread from the moment the hook
  is built, and the optimizer state carries the next ``WINDOW + 1`` = 257
  final entries: ``update`` adds an integer increment and a gather per
  step, and a host fetch (``jax.pure_callback`` inside a ``lax.cond``) once
  per window, which waits only until the entry it needs is final (with
  progress after 2 s). The first update waits for one small piece of the
  table, not the whole run's; the entries are the one-go table's to the last
  bit. Otherwise (Gaussian events, a ledger, a user's table, the grid mode)
  the table is computed here and ``update`` only looks it up.

  Neighbouring relation: the accountant's (``accountant.neighbouring``;
  ``"add_remove"`` for the accountants of the :mod:`jaxacct.sampling`
  samplers). Under add/remove the dataset size is not
  public: aggregate with :func:`jaxacct.tracking.dp_aggregate` (divisor: the
  declared expected batch size), not
  ``optax.contrib.differentially_private_aggregate`` (divisor: the padded
  length, which depends on the dataset size and, on overflow, on the batch).

  Fixed schedule: the table, and so ``eps`` and the budget stop, are valid
  for a schedule fixed before training (noise multiplier, sampling rate or
  batch size, number of steps, ``max_epsilon``). The stop itself is
  data-independent (the count where the table crosses ``max_epsilon``). A
  schedule chosen adaptively, e.g. a new sigma or batch size, or a stop
  decided from the training outputs with ``eps`` at the stop reported as the
  run's, is not covered: the natural f-DP stopping rule (stop when the
  composed trade-off reaches the target) is invalid under adaptive choices
  (arXiv:2602.06756); under adaptivity only a privacy filter/odometer
  analysis applies. A change the hook can see is refused: ``init`` records a
  fingerprint of the schedule (the float64 table, ``num_steps``, ``delta``,
  ``max_epsilon``);
  an ``update`` by a hook built for another schedule on that state (an
  optimizer rebuilt mid-run with a new accountant and the old state carried
  over) masks the update and sets ``schedule_changed`` (sticky: every later
  update is masked too, ``count`` and ``eps`` stay); eagerly it raises
  :class:`PrivacyScheduleChanged` at once, and :func:`privacy_spent` raises
  it on a concrete state with the flag set. (Stopping *earlier* than
  planned, for any reason, is always safe to report as ``eps[num_steps]``,
  the planned run's: a prefix is a post-processing of the whole run.)

  Args:
    accountant: an :class:`EventAccountant` (the sampling scheme as an event
      per block) or an :class:`EpsilonTableAccountant`.
    num_steps: planned number of applied updates (>= 1, at most 2**24: the
      table holds one entry per step); later updates report ``eps = +inf``
      (no guarantee) and are masked if a budget is set.
    delta: in (0, 1).
    max_epsilon: budget (> 0) or None (track only).
    on_budget: ``"stop"`` (mask further updates, set ``budget_exhausted``)
      or ``"raise"``: an eager ``update`` raises
      :class:`PrivacyBudgetExceeded`; a jitted one cannot raise (an
      exception inside XLA surfaces as ``JaxRuntimeError INTERNAL``), so it
      masks, sets ``budget_exhausted``, and :func:`privacy_spent` raises
      :class:`PrivacyBudgetExceeded` on that concrete state: call it after
      each jitted step (or each logging interval).

  Returns:
    ``optax.GradientTransformation``; state ``PrivacyTrackerState`` (count
    int32, eps float64 under x64 else float32 rounded up, delta, flags, the
    table window).

  Bound: upper (the accountant's).

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from jaxacct import tracking
    >>> from jaxacct.accounting import events
    >>> acc = tracking.EventAccountant(events.GaussianDpEvent(4.0))   # full batch
    >>> tx = tracking.track_privacy(acc, num_steps=10, delta=1e-5)
    >>> st = tx.init(jnp.zeros(3))
    >>> _, st = tx.update(jnp.ones(3), st)
    >>> round(float(optax.tree.get(st, "eps")), 4)
    0.9263
  """
  check_table_size("num_steps", num_steps)
  checks.check_delta(delta, scalar=True)
  checks.check_choice("on_budget", on_budget, ("stop", "raise"))
  if max_epsilon is not None:
    checks.check_positive("max_epsilon", max_epsilon, allow_inf=True, scalar=True)
  check_accountant(accountant)
  n, delta = int(num_steps), float(delta)
  budget = np.inf if max_epsilon is None else float(max_epsilon)
  table = accountant.lazy_table(n, delta)
  raising = on_budget == "raise"
  if table.background:
    reader = _Reader(table, accountant, n, delta, max_epsilon)
    sid = _fingerprint(accountant.schedule_key(), n, delta, budget)
    ACCOUNTED[sid] = accounted(accountant)
    DELTAS[sid] = delta
    return optax.GradientTransformation(*_lazy_fns(reader, n, delta, max_epsilon, sid, raising))
  table64 = table.full()
  if max_epsilon is not None:   # the crossing on the accountant's own numbers
    table64 = accountant.at_budget(table64, float(max_epsilon), delta)
  table64 = np.concatenate([table64, [np.inf]])
  # allowed[c]: may the update that moves count c -> c + 1 be applied?
  if max_epsilon is None:
    allowed = np.ones(n + 2, bool)
  else:
    allowed = np.concatenate([table64[1:] <= float(max_epsilon), [False]])
  table32 = _round_up_f32(table64)
  sid = zlib.crc32(np.concatenate([table64, [float(n), delta, budget]]).tobytes()) & 0x7FFFFFFF
  ACCOUNTED[sid] = accounted(accountant)
  DELTAS[sid] = delta

  def _tables():
    if x64_enabled():
      return jnp.asarray(table64, jnp.float64), jnp.float64
    return jnp.asarray(table32, jnp.float32), jnp.float32

  def init_fn(params):
    del params
    tab, dt = _tables()
    return _state0(tab[0], delta, dt, sid, raising, jnp.zeros(0, dt), jnp.zeros(0, bool),
                   base=0, hi=-1)

  def update_fn(updates, state, params=None):
    del params
    tab, _ = _tables()
    changed = _changed(state, sid, (0,))
    c = jnp.minimum(state.count, n + 1)
    ok = jnp.asarray(allowed)[c]
    if raising and not isinstance(ok, jax.core.Tracer) and not bool(ok):
      raise PrivacyBudgetExceeded(_budget_msg(int(state.count), table64[int(c) + 1]
                                              if int(c) <= n else np.inf,
                                              table64[int(c)], max_epsilon, delta))
    apply = ok & ~changed
    new_count = jnp.where(apply, optax.safe_increment(state.count), state.count)
    new_updates = jax.tree.map(lambda u: jnp.where(apply, u, jnp.zeros_like(u)), updates)
    new_state = state._replace(
        # refused (another schedule's table): keep the recorded eps, never this table's
        count=new_count, eps=jnp.where(changed, state.eps, tab[jnp.minimum(new_count, n + 1)]),
        budget_exhausted=state.budget_exhausted | ~ok, schedule_changed=changed)
    return new_updates, new_state

  return optax.GradientTransformation(init_fn, update_fn)


def _fingerprint(key: bytes, n, delta, budget) -> int:
  return zlib.crc32(key + np.array([n, delta, budget], np.float64).tobytes()) & 0x7FFFFFFF


def _arr(x, dtype):
  """``x`` as a ``dtype`` array: host values are put on the device as they are
  (no XLA program: an eager ``jnp.asarray`` compiles one per dtype and
  shape, a few tenths of a second in a fresh process), JAX values converted."""
  if isinstance(x, (jax.Array, jax.core.Tracer)):
    return jnp.asarray(x, dtype)
  return jax.device_put(np.asarray(x, np.dtype(dtype)))


def _state0(eps0, delta, dt, sid, raising, weps, wok, *, base, hi):
  # a float32 delta is rounded up: the claim it carries is weaker, never stronger
  d = delta if jnp.dtype(dt) == jnp.float64 else _round_up_f32(delta)
  return PrivacyTrackerState(
      count=_arr(0, jnp.int32), eps=_arr(eps0, dt), delta=_arr(d, dt),
      budget_exhausted=_arr(False, bool), schedule_id=_arr(sid, jnp.int32),
      schedule_changed=_arr(False, bool), raise_on_budget=_arr(raising, bool),
      table_base=_arr(base, jnp.int32), table_hi=_arr(hi, jnp.int32),
      table_eps=_arr(weps, dt), table_ok=_arr(wok, bool))


def _changed(state, sid, window_shape):
  """The schedule-changed flag of an update on ``state`` (raises eagerly)."""
  changed = (state.schedule_id != sid) | state.schedule_changed
  if tuple(state.table_eps.shape[-1:]) != window_shape[-1:] and state.table_eps.ndim <= 1:
    changed = jnp.ones_like(changed)      # a state of another kind of hook
  if host_flag_set(changed):
    raise PrivacyScheduleChanged(_schedule_msg("track_privacy"))
  return changed


class _Reader:
  """The host side of a hook whose table is produced while training runs.

  ``window(i)``: the entries ``i..i + WINDOW`` that are final (waiting until
  entry ``i`` is), each with the budget's verdict. With a budget, an
  accountant that settles the crossing (``at_budget``) gets it here, on the
  entries from the first block whose end passes the budget on: the blocks
  around the crossing are asked of the accountant itself (as
  ``EventAccountant.at_budget`` does on the whole table).
  """

  def __init__(self, table, accountant, n, delta, max_epsilon):
    self.table, self.acc, self.n, self.delta = table, accountant, n, delta
    self.budget = None if max_epsilon is None else float(max_epsilon)
    self.settle = self.budget is not None and accountant.settles_budget
    self.b = int(accountant.block_size)
    self.nb = -(-n // self.b)
    self.scanned = 0          # block ends checked against the budget
    self.cross = None         # (first block passed, end, eps before, eps from) once found
    self.lock = threading.Lock()

  def _scan(self, ready):
    vals = self.table.values
    while self.cross is None and self.scanned < self.nb:
      b = self.scanned + 1
      end = min(b * self.b, self.n)
      if end >= ready:
        return
      self.scanned = b
      if vals[end] > self.budget:
        self.cross = self._walk(b)

  def _walk(self, first):
    first0, memo = first, {0: 0.0}

    def acc(k):
      if k not in memo:
        memo[k] = self.acc.epsilon_after(k, self.delta)
      return memo[k]
    while first > 1 and acc(first - 1) > self.budget:
      first -= 1
    while first <= self.nb and acc(first) <= self.budget:
      first += 1
    end = min((first - 1) * self.b, self.n)
    return (first0, end, acc(first - 1), acc(first) if first <= self.nb else None)

  def entries(self, lo, hi):
    """Adjusted float64 entries ``lo..hi - 1`` (final ones only)."""
    idx = np.arange(lo, hi)
    vals = np.where(idx <= self.n, self.table.values[np.minimum(idx, self.n)], np.inf)
    if self.settle:
      with self.lock:
        self._scan(self.table.ready)
      if self.cross is not None:
        first0, end, below, above = self.cross
        blk = -(-idx // self.b)
        low = (idx <= end) & (blk >= first0)
        vals = np.where(low, np.minimum(vals, below), vals)
        if above is not None:
          vals = np.where(idx > end, np.maximum(vals, above), vals)
    return vals

  def window(self, i, dt):
    i = int(i)
    self.table.wait(min(i, self.n))
    ready = self.table.ready                      # entries [0, ready) final
    top = self.n + 1 if ready > self.n else ready - 1
    hi = min(i + WINDOW, top)
    vals = np.full(WINDOW + 1, np.inf)
    vals[:hi - i + 1] = self.entries(i, hi + 1)
    ok = np.ones(WINDOW + 1, bool) if self.budget is None else vals <= self.budget
    if self.budget is not None and i + WINDOW >= self.n + 1:
      ok[self.n + 1 - i:] = False                 # beyond the plan: masked
    eps = vals if dt == np.float64 else _round_up_f32(vals)
    return np.int32(i), np.int32(hi), eps.astype(dt), ok


def _lazy_fns(reader, n, delta, max_epsilon, sid, raising):
  """init and update of a hook whose table is produced while training runs."""
  shape = (WINDOW + 1,)

  def _dt():
    return jnp.float64 if x64_enabled() else jnp.float32

  def init_fn(params):
    del params
    dt = _dt()
    base, hi, weps, wok = reader.window(0, np.dtype(dt))
    return _state0(weps[0], delta, dt, sid, raising, weps, wok, base=base, hi=hi)

  def fetch(idx, dt):
    # float64 entries travel as uint32 pairs: the callback's results are
    # canonicalised on XLA's thread, where x64 may be off (it is thread-local)
    wide = np.dtype(dt) == np.float64

    def host(i):
      i = np.asarray(i)
      outs = [reader.window(int(k), np.dtype(dt)) for k in i.ravel()]
      if wide:
        outs = [(b, h, e.view(np.uint32).reshape(-1, 2), o) for b, h, e, o in outs]
      return tuple(np.stack([o[j] for o in outs]).reshape(i.shape + np.shape(outs[0][j]))
                   for j in range(4))
    espec = (jax.ShapeDtypeStruct(shape + (2,), jnp.uint32) if wide
             else jax.ShapeDtypeStruct(shape, dt))
    spec = (jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32),
            espec, jax.ShapeDtypeStruct(shape, jnp.bool_))
    base, hi, eps, ok = jax.pure_callback(host, spec, idx, vmap_method="broadcast_all")
    if wide:
      eps = jax.lax.bitcast_convert_type(eps, jnp.float64)
    return base, hi, eps, ok

  def update_fn(updates, state, params=None):
    del params
    changed = _changed(state, sid, shape)
    if tuple(state.table_eps.shape[-1:]) != shape:       # another kind of hook's state
      zeros = jax.tree.map(jnp.zeros_like, updates)
      return zeros, state._replace(schedule_changed=changed)
    dt = state.table_eps.dtype
    c = jnp.minimum(state.count, n + 1)
    idx = jnp.minimum(c + 1, n + 1)
    win = (state.table_base, state.table_hi, state.table_eps, state.table_ok)
    if isinstance(idx, jax.core.Tracer):
      need = (idx < state.table_base) | (idx > state.table_hi)
      win = jax.lax.cond(need, lambda i: fetch(i, dt), lambda i: win, idx)
    elif not state.table_base <= idx <= state.table_hi:
      win = tuple(jnp.asarray(w) for w in reader.window(int(idx), np.dtype(dt)))
    base, hi, weps, wok = win
    off = jnp.clip(idx - base, 0, WINDOW)
    ok = wok[off]
    if max_epsilon is not None:
      ok = ok & (c <= n)
    if raising and not isinstance(ok, jax.core.Tracer) and not bool(ok):
      cur = int(c)
      raise PrivacyBudgetExceeded(_budget_msg(
          int(state.count), float(reader.entries(cur + 1, cur + 2)[0]),
          float(reader.entries(cur, cur + 1)[0]), max_epsilon, delta))
    apply = ok & ~changed
    new_count = jnp.where(apply, optax.safe_increment(state.count), state.count)
    new_updates = jax.tree.map(lambda u: jnp.where(apply, u, jnp.zeros_like(u)), updates)
    new_state = state._replace(
        count=new_count, eps=jnp.where(apply, weps[off], state.eps),
        budget_exhausted=state.budget_exhausted | ~ok, schedule_changed=changed,
        table_base=base, table_hi=hi, table_eps=weps, table_ok=wok)
    return new_updates, new_state

  return init_fn, update_fn


def _schedule_msg(where):
  return (f"PrivacyScheduleChanged: {where}: this optimizer state was initialised for "
          "another schedule (noise multiplier, sampling rate or batch size, num_steps, "
          "delta or max_epsilon); the epsilon table and the budget stop hold only for a schedule fixed "
          "in advance (arXiv:2602.06756: the natural f-DP stopping rule is invalid under "
          "adaptive choices). The update was refused (masked); start a new run with a new "
          "init, or account the whole run with a filter/odometer analysis.")


def _budget_msg(count, nxt, spent, max_epsilon, delta):
  return (f"PrivacyBudgetExceeded: update {count + 1} would spend epsilon={nxt:.6g} "
          f"> max_epsilon={max_epsilon:g} at delta={delta:g} (spent so far: "
          f"{spent:.6g}); the update was masked.")


def privacy_spent(opt_state: Any):
  """``(eps, delta)`` from an optimizer state holding one tracker (jit-safe).

  Works on any state pytree (``optax.chain``, ``MultiSteps``, flax
  ``TrainState.opt_state``) through ``optax.tree.get``.

  Returns:
    ``(eps, delta)``: Python floats for a concrete unbatched state, ``delta``
    exactly the one the hook's table was computed for; arrays under
    ``jit``/``vmap`` or for a batched state (float32 under x64 off: ``eps``
    and ``delta`` rounded up, a weaker claim, never a stronger one).

  Raises:
    KeyError: if the state holds more than one tracker; ValueError if none,
      or (concrete states) if a :func:`jaxacct.tracking.dp_aggregate` in the
      state adds another noise multiplier, or divides by another expected
      batch size, than the tracker's accountant accounts.
    PrivacyBudgetExceeded: (concrete states only) if a tracker built with
      ``on_budget="raise"`` masked an update (the host-side check of a
      jitted step, which cannot raise itself).
    PrivacyScheduleChanged: (concrete states only) if the tracker, or a
      :func:`jaxacct.tracking.dp_aggregate` in the same state, refused an
      update because the schedule changed mid-run (the host-side check of
      the flags a jitted step sets).
  """
  st = optax.tree.get(opt_state, "PrivacyTrackerState")
  if st is None:
    raise ValueError("no PrivacyTrackerState in this optimizer state; add "
                     "jaxacct.tracking.track_privacy(...) to the chain.")
  flags = [st.schedule_changed]
  agg = optax.tree.get_all_with_path(opt_state, "settings_changed")
  flags += [v for _, v in agg]
  for flag in flags:
    if host_flag_set(flag):
      raise PrivacyScheduleChanged(_schedule_msg("privacy_spent"))
  if not isinstance(st.schedule_id, jax.core.Tracer):
    check_settings(st, opt_state)
  if host_flag_set(st.budget_exhausted) and host_flag_set(st.raise_on_budget):
    eps = np.asarray(st.eps).reshape(-1)
    raise PrivacyBudgetExceeded(
        f"PrivacyBudgetExceeded: an update was masked (on_budget='raise'): the next "
        f"update would have spent more than the hook's max_epsilon at delta="
        f"{float(np.asarray(st.delta).reshape(-1)[0]):g}; spent so far: "
        f"{float(eps.max()):.6g} after {int(np.asarray(st.count).reshape(-1).max())} "
        "updates. (Under jit the step cannot raise: it masks the update and sets "
        "budget_exhausted, and this check raises.)")
  if isinstance(st.eps, jax.core.Tracer) or np.ndim(st.eps) or np.ndim(st.delta):
    return st.eps, st.delta
  # the delta the table was computed for, exactly (the state's float32 copy is
  # rounded up); eps as the state holds it (float32: rounded up)
  return float(st.eps), DELTAS.get(schedule_of(st), float(st.delta))


# --------------------------------------------------------------------------
# DP aggregation that composes with gradient accumulation.
# --------------------------------------------------------------------------

class GaussianNoiseState(NamedTuple):
  """PRNG key of :func:`gaussian_noise`."""
  key: jax.Array


def gaussian_noise(stddev: float, key) -> optax.GradientTransformation:
  """Adds N(0, stddev^2) to every coordinate of the updates (once per call).

  Args:
    stddev: >= 0 (0 only for debugging: the tracker's accountant must
      match the noise actually added).
    key: a ``jax.random.key`` or an int seed.
  """
  checks.check_range("stddev", stddev, 0.0, np.inf)
  if isinstance(key, int):
    key = jax.random.key(key)

  def init_fn(params):
    del params
    return GaussianNoiseState(key=key)

  def update_fn(updates, state, params=None):
    del params
    flat, tdef = jax.tree.flatten(updates)
    new_key, *ks = jax.random.split(state.key, len(flat) + 1)
    noised = [g + stddev * jax.random.normal(k, g.shape, g.dtype) for g, k in zip(flat, ks)]
    return jax.tree.unflatten(tdef, noised), GaussianNoiseState(key=new_key)

  return optax.GradientTransformation(init_fn, update_fn)
