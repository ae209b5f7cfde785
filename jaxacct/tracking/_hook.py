"""The optax hook of :mod:`jaxacct.tracking` (see the package docstring).

:func:`track_privacy` (count applied updates, look the epsilon up, enforce a
budget, refuse a schedule change), :func:`privacy_spent`, and the DP
aggregation pieces that compose with gradient accumulation
(:func:`clip_and_sum`, :func:`gaussian_noise`).
Bound: upper (the accountant's table), for a schedule fixed in advance.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxacct._core import checks
from jaxacct._core.dtype import x64_enabled
from jaxacct.tracking._accountants import epsilon_table


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
    delta: float scalar, the delta at which ``eps`` holds.
    budget_exhausted: bool scalar, True once an update was masked because it
      would have exceeded ``max_epsilon``.
    schedule_id: int32 scalar, fingerprint of the schedule (the float64
      epsilon table, ``num_steps``, ``delta``, ``max_epsilon``) recorded by
      ``init``.
    schedule_changed: bool scalar, True once an update ran under a hook
      built for another schedule (that update and every later one masked).
  """
  count: jax.Array
  eps: jax.Array
  delta: jax.Array
  budget_exhausted: jax.Array
  schedule_id: jax.Array
  schedule_changed: jax.Array


def _round_up_f32(x: np.ndarray) -> np.ndarray:
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

  The float64 epsilon table of ``accountant`` for 0..``num_steps`` updates is
  computed here, once (see :func:`epsilon_table`); ``update`` only looks it
  up, so it adds an integer increment and a gather per step.

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
    num_steps: planned number of applied updates (>= 1); later updates
      report ``eps = +inf`` (no guarantee) and are masked if a budget is set.
    delta: in (0, 1).
    max_epsilon: budget (> 0) or None (track only).
    on_budget: ``"stop"`` (mask further updates, set ``budget_exhausted``)
      or ``"raise"`` (mask, and raise :class:`PrivacyBudgetExceeded`; under
      ``jit`` through ``jax.debug.callback``).

  Returns:
    ``optax.GradientTransformation``; state ``PrivacyTrackerState`` (count
    int32, eps float64 under x64 else float32 rounded up, delta, bool flag).

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
  checks.check_int("num_steps", num_steps, min_value=1)
  checks.check_delta(delta)
  checks.check_choice("on_budget", on_budget, ("stop", "raise"))
  if max_epsilon is not None:
    checks.check_positive("max_epsilon", max_epsilon, allow_inf=True)
  n = int(num_steps)
  table64 = epsilon_table(accountant, num_steps=n, delta=delta)
  if max_epsilon is not None:   # the crossing on the accountant's own numbers
    table64 = accountant.at_budget(table64, float(max_epsilon), float(delta))
  table64 = np.concatenate([table64, [np.inf]])
  # allowed[c]: may the update that moves count c -> c + 1 be applied?
  if max_epsilon is None:
    allowed = np.ones(n + 2, bool)
  else:
    allowed = np.concatenate([table64[1:] <= float(max_epsilon), [False]])
  table32 = _round_up_f32(table64)
  delta = float(delta)
  budget = np.inf if max_epsilon is None else float(max_epsilon)
  sid = zlib.crc32(np.concatenate([table64, [float(n), delta, budget]]).tobytes()) & 0x7FFFFFFF

  def _tables():
    if x64_enabled():
      return jnp.asarray(table64, jnp.float64), jnp.float64
    return jnp.asarray(table32, jnp.float32), jnp.float32

  def init_fn(params):
    del params
    tab, dt = _tables()
    return PrivacyTrackerState(count=jnp.zeros([], jnp.int32), eps=tab[0],
                               delta=jnp.asarray(delta, dt),
                               budget_exhausted=jnp.zeros([], bool),
                               schedule_id=jnp.asarray(sid, jnp.int32),
                               schedule_changed=jnp.zeros([], bool))

  def update_fn(updates, state, params=None):
    del params
    tab, _ = _tables()
    changed = (state.schedule_id != sid) | state.schedule_changed
    if host_flag_set(changed):
      raise PrivacyScheduleChanged(_schedule_msg("track_privacy"))
    c = jnp.minimum(state.count, n + 1)
    ok = jnp.asarray(allowed)[c]
    if on_budget == "raise":
      if isinstance(ok, jax.core.Tracer):      # staged: raise when the step runs
        jax.debug.callback(functools.partial(
            _raise_if_exceeded, table64=table64, max_epsilon=max_epsilon,
            delta=delta), ok, state.count)
      elif not bool(ok):
        raise PrivacyBudgetExceeded(_budget_msg(int(state.count), table64, max_epsilon, delta))
    apply = ok & ~changed
    new_count = jnp.where(apply, optax.safe_increment(state.count), state.count)
    new_updates = jax.tree.map(lambda u: jnp.where(apply, u, jnp.zeros_like(u)), updates)
    new_state = PrivacyTrackerState(
        # refused (another schedule's table): keep the recorded eps, never this table's
        count=new_count, eps=jnp.where(changed, state.eps, tab[jnp.minimum(new_count, n + 1)]),
        delta=state.delta, budget_exhausted=state.budget_exhausted | ~ok,
        schedule_id=state.schedule_id, schedule_changed=changed)
    return new_updates, new_state

  return optax.GradientTransformation(init_fn, update_fn)


def _schedule_msg(where):
  return (f"PrivacyScheduleChanged: {where}: this optimizer state was initialised for "
          "another schedule (noise multiplier, sampling rate or batch size, num_steps, "
          "delta or max_epsilon); the epsilon table and the budget stop hold only for a schedule fixed "
          "in advance (arXiv:2602.06756: the natural f-DP stopping rule is invalid under "
          "adaptive choices). The update was refused (masked); start a new run with a new "
          "init, or account the whole run with a filter/odometer analysis.")


def _budget_msg(count, table64, max_epsilon, delta):
  nxt = table64[min(count + 1, len(table64) - 1)]
  return (f"PrivacyBudgetExceeded: update {count + 1} would spend epsilon={nxt:.6g} "
          f"> max_epsilon={max_epsilon:g} at delta={delta:g} (spent so far: "
          f"{table64[min(count, len(table64) - 1)]:.6g}); the update was masked.")


def _raise_if_exceeded(ok, count, table64, max_epsilon, delta):
  ok = np.asarray(ok)
  if not np.all(ok):
    c = int(np.asarray(count).reshape(-1)[np.argmin(ok.reshape(-1))])
    raise PrivacyBudgetExceeded(_budget_msg(c, table64, max_epsilon, delta))


def privacy_spent(opt_state: Any):
  """``(eps, delta)`` from an optimizer state holding one tracker (jit-safe).

  Works on any state pytree (``optax.chain``, ``MultiSteps``, flax
  ``TrainState.opt_state``) through ``optax.tree.get``.

  Returns:
    ``(eps, delta)`` scalar arrays (batched under vmap).

  Raises:
    KeyError: if the state holds more than one tracker; ValueError if none.
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
  return st.eps, st.delta


# --------------------------------------------------------------------------
# DP aggregation that composes with gradient accumulation.
# --------------------------------------------------------------------------

def clip_and_sum(l2_norm_clip: float) -> optax.GradientTransformation:
  """Clips per-example gradients (leading axis) to ``l2_norm_clip`` and sums them.

  Stateless. With ``optax.MultiSteps(inner, every_k_schedule=K)`` put it
  *outside* (``optax.chain(clip_and_sum(C), optax.MultiSteps(...))``):
  MultiSteps then averages K clipped sums, whose sensitivity is C / K, so the
  inner chain adds noise once per applied update with
  ``gaussian_noise(stddev=sigma * C / K, ...)`` and scales by
  ``K / expected_batch_size`` (the declared expected logical batch size: a
  constant, never the padded length K * micro_batch_size, which depends on
  the dataset size; see :func:`jaxacct.tracking.dp_aggregate`);
  ``track_privacy`` inside counts one step per applied update with noise
  multiplier sigma. The sampling scheme the
  accountant assumes applies to the *logical* batch (the union of the K
  micro-batches), e.g. Poisson at rate q over the dataset, then split into K
  fixed-size chunks padded with all-zero rows (which clip to zero).

  Example (the test suite runs this pattern)::

    tx = optax.chain(
        clip_and_sum(C),
        optax.MultiSteps(optax.chain(
            gaussian_noise(sigma * C / K, key),
            track_privacy(EventAccountant(PoissonSampledDpEvent(q, GaussianDpEvent(sigma))),
                          num_steps=T, delta=d),
            optax.scale(K / expected_batch_size), optax.sgd(lr)),
          every_k_schedule=K))

  Args:
    l2_norm_clip: > 0.
  """
  checks.check_positive("l2_norm_clip", l2_norm_clip)

  def update_fn(updates, state, params=None):
    del params
    flat, tdef = jax.tree.flatten(updates)
    summed, _ = optax.per_example_global_norm_clip(flat, l2_norm_clip)
    return jax.tree.unflatten(tdef, summed), state

  return optax.GradientTransformation(lambda p: optax.EmptyState(), update_fn)


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
