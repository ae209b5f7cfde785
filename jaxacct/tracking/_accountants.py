"""Accountants of :mod:`jaxacct.tracking`: float64 epsilon tables, built once on the host.

Two accountants: :class:`EventAccountant` (the run as one event per block,
composed by ``jaxacct.accounting.PLDAccountant``: the package's one
accountant) and :class:`EpsilonTableAccountant` (a table the user supplies).
Each gives an epsilon table (``eps[b]``, an upper bound on epsilon at
``delta`` after ``b`` blocks); :func:`epsilon_table` expands it to applied
updates. Bound: upper.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct import accounting
from jaxacct._core import checks
from jaxacct._core.gaussian import gaussian_epsilon_kernel
from jaxacct._core.lazy import LazyModule
from jaxacct._core.namespace import host_call
from jaxacct._core.progress import check_progress_arg, progress
from jaxacct.tracking._epochs import allocation_step_segments
from jaxacct.tracking._lazy import LazyTable

if TYPE_CHECKING:
  from jaxacct._core import events
  from jaxacct.accounting import evaluator
else:   # imported with the first event: dp_accounting (when installed) comes with the events
  events = LazyModule("jaxacct._core.events")
  evaluator = LazyModule("jaxacct.accounting.evaluator")


# --------------------------------------------------------------------------
# Accountants: float64 epsilon tables, built once on the host.
# --------------------------------------------------------------------------

#: the longest run a table is built for: one float64 entry per step (with the
#: hook's float32 copy and budget flags, about 0.4 GB at this size)
MAX_STEPS = 2 ** 24


def check_table_size(name: str, count) -> int:
  """``int(count)``, or a ValueError naming ``name`` before anything is allocated
  when the table would hold more than :data:`MAX_STEPS` entries."""
  checks.check_int(name, count, min_value=1, scalar=True)
  if int(count) > MAX_STEPS:
    raise ValueError(
        f"{name} must be <= {MAX_STEPS:,} (2**24) for a tracker: its epsilon table holds "
        f"one float64 entry per step, built before training; got {name}={int(count):,}. "
        "Track a shorter run, or account the whole run at once with "
        "jaxacct.dpsgd.epsilon (or jaxacct.accounting.PLDAccountant).")
  return int(count)

class _Accountant:
  """Base class. Subclasses define ``block_size`` and ``_block_table``.

  ``neighbouring``: the neighbouring relation the table holds for
  (``"add_remove"``, ``"replace_one"``, ``"replace_special"``), or None where
  the user supplies the curve or table (then it is the supplier's).
  """

  block_size: int = 1
  neighbouring: Optional[str] = None
  # whether at_budget asks the accountant around a budget's crossing
  settles_budget: bool = False
  # what the accountant assumes of the aggregation (see declare)
  declared: Optional[dict] = None

  def declare(self, *, noise_multiplier=None, expected_batch_size=None):
    """Records the noise multiplier and expected batch size this accountant
    assumes (the samplers' and :func:`accountant_for`'s accountants do);
    :func:`privacy_spent` refuses an optimizer state whose ``dp_aggregate``
    adds other noise or divides by another batch size. Returns ``self``."""
    if noise_multiplier is not None:
      checks.check_sigma("noise_multiplier", noise_multiplier, scalar=True)
    if expected_batch_size is not None:
      checks.check_positive("expected_batch_size", expected_batch_size, scalar=True)
    self.declared = {"noise_multiplier": None if noise_multiplier is None
                     else float(noise_multiplier),
                     "expected_batch_size": None if expected_batch_size is None
                     else float(expected_batch_size)}
    return self

  def _block_table(self, num_blocks: int, delta: float) -> np.ndarray:
    raise NotImplementedError

  def block_table(self, num_blocks: int, delta: float) -> np.ndarray:
    """float64 array (num_blocks + 1,): eps after b = 0..num_blocks blocks."""
    check_table_size("num_blocks", num_blocks)
    checks.check_delta(delta, scalar=True)
    # The hook may be built inside a user's jit trace (e.g. a train function
    # that makes its optimizer): there ensure_compile_time_eval keeps the
    # table eager, once, on concrete numbers. Only there: it also evaluates a
    # kernel's constant subexpressions op by op while the kernel is traced,
    # one compiled program each (63 instead of 1 for a Poisson RDP kernel).
    staged = isinstance(jnp.zeros(()), jax.core.Tracer)
    with jax.enable_x64(True), (jax.ensure_compile_time_eval() if staged
                                else contextlib.nullcontext()):
      tab = np.array(self._block_table(int(num_blocks), float(delta)), np.float64)
    tab = np.concatenate([[0.0], tab[1:]])
    if tab.shape != (num_blocks + 1,) or np.any(np.isnan(tab)) or np.any(tab < 0):
      raise ValueError(f"{type(self).__name__} produced an invalid epsilon table "
                       f"(shape {tab.shape}, NaN or negative entries).")
    # Composition never decreases epsilon: a running max keeps the table a
    # valid upper bound and monotone even if a method switches between
    # counts (e.g. the accountant's exact and FFT paths); it never lowers an
    # entry.
    return np.maximum.accumulate(tab)

  def step_table(self, num_steps: int, delta: float) -> np.ndarray:
    """float64 (num_steps + 1,): epsilon after each applied update; a partial
    block is charged the whole block (the outputs so far are a post-processing
    of the whole block's)."""
    return self.lazy_table(num_steps, delta).full()

  def _whole_step_table(self, num_steps: int, delta: float) -> np.ndarray:
    b = self.block_size
    blocks = self.block_table(-(-int(num_steps) // b), float(delta))
    return blocks[-(-np.arange(int(num_steps) + 1) // b)]

  def step_segments(self, num_steps: int, delta: float):
    """None, or an iterator of the step table's entries 1..num_steps in order
    (consecutive pieces) for :class:`LazyTable`: accountants whose table
    takes seconds produce it piece by piece."""
    del num_steps, delta
    return None

  def lazy_table(self, num_steps: int, delta: float) -> LazyTable:
    """The step table as a :class:`LazyTable`, once per ``(num_steps, delta)``
    (and ledger): its pieces on a background thread where
    :meth:`step_segments` gives them, else computed here, at once (at most
    :data:`MAX_STEPS` steps: refused before anything is allocated)."""
    check_table_size("num_steps", num_steps)
    checks.check_delta(delta, scalar=True)
    key = ("lazy", int(num_steps), float(delta), self._ledger_key())
    memo = self.__dict__.setdefault("_tables", {})
    if key not in memo:
      segs = self.step_segments(int(num_steps), float(delta))
      if segs is None:
        memo[key] = LazyTable(int(num_steps),
                              values=self._whole_step_table(int(num_steps), float(delta)))
      else:
        memo[key] = LazyTable(int(num_steps), segs, enabled=getattr(self, "_progress", None),
                              desc=f"jaxacct.tracking epsilon table ({int(num_steps)} steps)")
    return memo[key]

  def _ledger_key(self):
    return ()

  def schedule_key(self) -> bytes:
    """Bytes naming what this accountant accounts (the hook's schedule fingerprint)."""
    return repr((type(self).__name__, self.block_size, self.neighbouring)).encode()

  def at_budget(self, table: np.ndarray, max_epsilon: float, delta: float) -> np.ndarray:
    """``table`` with its crossing of ``max_epsilon`` settled (here: as given)."""
    del max_epsilon, delta
    return table


class EpsilonTableAccountant(_Accountant):
  """A user-supplied table: ``epsilons[b]`` = eps at ``delta`` after b blocks.

  Args:
    epsilons: 1-D, ``epsilons[0]`` is the epsilon after 0 blocks (usually 0),
      non-decreasing, >= 0; length >= num_blocks + 1 when used.
    delta: the delta the table holds at (must equal the hook's ``delta``).
    block_size: applied updates per table entry (default 1).

  Bound: whatever the supplied table is (trusted).
  """

  def __init__(self, *, epsilons, delta, block_size: int = 1):
    checks.check_not_text("epsilons", epsilons)
    eps = np.asarray(epsilons, np.float64)
    if eps.ndim != 1 or eps.size < 2:
      raise ValueError(f"epsilons must be 1-D with >= 2 entries; got shape {eps.shape}.")
    checks.check_range("epsilons", eps, 0.0, np.inf, allow_inf=True)
    if np.any(np.diff(eps) < 0):
      raise ValueError("epsilons must be non-decreasing (composition never "
                       "lowers epsilon).")
    checks.check_delta(delta, scalar=True)
    checks.check_int("block_size", block_size, min_value=1, scalar=True)
    self.epsilons, self.delta, self.block_size = eps, float(delta), int(block_size)

  def _block_table(self, num_blocks, delta):
    if delta != self.delta:
      raise ValueError(f"EpsilonTableAccountant holds at delta={self.delta:g}; "
                       f"the hook asked for delta={delta:g}.")
    if self.epsilons.size < num_blocks + 1:
      raise ValueError(f"epsilons has {self.epsilons.size} entries; need "
                       f"num_blocks + 1 = {num_blocks + 1}.")
    return self.epsilons[:num_blocks + 1]

  def schedule_key(self) -> bytes:
    return super().schedule_key() + self.epsilons.tobytes() + repr(self.delta).encode()


class EventAccountant(_Accountant):
  r"""The run as one event per block, accounted by ``jaxacct.accounting.PLDAccountant``.

  The run is described as the same event (a dp_accounting ``DpEvent`` or a
  jaxacct one, :mod:`jaxacct.accounting.events`) repeated once per block of
  ``block_size`` applied updates:

  ========================================  ==================================================
  scheme                                    event, block
  ========================================  ==================================================
  Poisson subsampling (rate q), Gaussian    ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``,
                                            one step (``block_size=1``)
  full batch (every example every step)     ``GaussianDpEvent(sigma)``, one step
  random allocation (k of t steps/epoch)    ``RandomAllocationDpEvent(noise_multiplier=sigma,
                                            steps_per_epoch=t, num_selected=k)``, one epoch
                                            (``block_size=t``)
  shuffling n eps0-LDP reports              ``ShuffleDpEvent(n, eps0)``, one round
                                            (``neighboring_relation=REPLACE_ONE``)
  ========================================  ==================================================

  Every block count b = 1..num_blocks is evaluated (the default,
  ``max_evaluations=None``), at the cost of about one vectorised call:

  * a ledger the accountant answers in closed form (Gaussian events only):
    that closed form, ``mu_b = sqrt(mu_ledger^2 + b mu^2)``, vectorised;
    equal to ``PLDAccountant(...).compose(event, b).get_epsilon(delta)``;
  * random allocation: ``b`` epochs are handed to the accountant as one event
    with ``num_epochs`` multiplied by ``b`` (its direct allocation path, the
    number of :func:`jaxacct.dpsgd.epsilon`), one evaluation per epoch; for
    1-of-t allocation the steps inside an epoch get the released prefix's
    own bound (:func:`epsilon_table`; ``jaxacct.tracking._epochs``);
  * any other event (Poisson, shuffling, ...): the accountant's own batch
    (``PLDAccountant.epsilons_for_counts``): the b-fold compositions are
    powers of one characteristic function, evaluated as batched inverse FFTs
    by the engine that answers the accountant's ``get_epsilon`` for one event
    repeated (``jaxacct.pld._powers``; within 1e-11 of a direct, FFT-free
    convolution), so each entry IS ``get_epsilon`` after b blocks, to the last
    bit, on an empty ledger; onto a ledger of earlier events, the event's
    powers are composed onto the ledger's composed pair (equal to the
    accountant to its FFT round-off, about 1e-10 relative).

  ``max_evaluations`` (an int) is the cheaper mode: every count up to
  ``max_evaluations``; beyond, the first ``min(32, max_evaluations // 2)``
  counts, a geometric grid up to the last count and every multiple of
  ``evaluate_every``; a count between two evaluated ones is charged the next
  evaluated one. That is an upper bound but it OVERSTATES epsilon between the
  evaluated counts, by up to the gap to the next one: +40 % mid-run for a
  2,344-step Poisson run at 16 evaluations, and a budget stop then
  fires long before the run's epsilon reaches the budget.

  The table is computed once per ``(num_blocks, delta)`` and ledger and reused
  (:func:`track_privacy` after :func:`epsilon_table`).

  Args:
    event: the event of one block (must be supported by the accountant).
    block_size: applied updates per event, >= 1.
    accountant: a ``jaxacct.accounting.PLDAccountant`` to compose onto (its
      ledger is kept as a prefix, e.g. events spent before training, and its
      settings are used); default a fresh one with ``neighboring_relation``
      and ``value_discretization_interval``.
    neighboring_relation, value_discretization_interval: for the default
      accountant (default: add/remove, replace-one for an event of a
      fixed-size batch, the only relation the accountant takes for it, as
      :func:`jaxacct.dpsgd.epsilon`; value interval 1e-4).
    max_evaluations: None (default: every count) or an int >= 2 (the cheaper
      grid above, which overstates epsilon between its counts).
    evaluate_every: None or an int >= 1: with ``max_evaluations``, counts that
      are always evaluated exactly (its multiples, e.g. epoch ends).
    progress: None (global switch), True or False: progress output while
      tabulating.

  Neighbouring: the accountant's (``neighbouring``).

  Bound: upper (the accountant's).
  """

  def __init__(self, event, *, block_size: int = 1, accountant=None,
               neighboring_relation=None, value_discretization_interval: float = 1e-4,
               max_evaluations: Optional[int] = None, evaluate_every: Optional[int] = None,
               progress: Optional[bool] = None):
    if not events.is_event(event):
      raise ValueError(f"event must be a DpEvent (jaxacct.accounting.events or dp_accounting), "
                       f"the event of one block; got {type(event).__name__} {event!r:.80}.")
    checks.check_int("block_size", block_size, min_value=1, scalar=True)
    if max_evaluations is not None:
      checks.check_int("max_evaluations", max_evaluations, min_value=2, scalar=True)
    if evaluate_every is not None:
      checks.check_int("evaluate_every", evaluate_every, min_value=1, scalar=True)
    check_progress_arg(progress)
    if accountant is not None and not isinstance(accountant, accounting.PLDAccountant):
      raise ValueError("accountant must be None or a jaxacct.accounting.PLDAccountant (its "
                       f"ledger is composed first); got {type(accountant).__name__}.")
    if accountant is None:
      if neighboring_relation is None:   # the relation dpsgd accounts the event under
        neighboring_relation = evaluator.relation_of(event)
      # accounting.PLDAccountant resolves on first use (PEP 562): dp_accounting,
      # its base class when installed, loads with this accountant only
      accountant = accounting.PLDAccountant(neighboring_relation, value_discretization_interval)
    if not accountant.supports(event):
      raise accounting.UnsupportedEventError(f"the accountant does not support {event}.")
    self.event, self.block_size = event, int(block_size)
    self.accountant = accountant
    self.max_evaluations = None if max_evaluations is None else int(max_evaluations)
    self.evaluate_every = None if evaluate_every is None else int(evaluate_every)
    self._progress, self._memo = progress, {}

  @property
  def neighbouring(self) -> str:
    """The accountant's relation: ``"add_remove"``, ``"replace_one"`` or ``"replace_special"``."""
    name = getattr(self.accountant.neighboring_relation, "name",
                   self.accountant.neighboring_relation)
    return {"ADD_OR_REMOVE_ONE": "add_remove", "REPLACE_ONE": "replace_one",
            "REPLACE_SPECIAL": "replace_special"}[name]

  def evaluated_counts(self, num_blocks: int) -> np.ndarray:
    """The block counts whose epsilon is computed (sorted, ends with num_blocks)."""
    m = self.max_evaluations
    if m is None or num_blocks <= m:
      return np.arange(1, num_blocks + 1)
    k = min(32, m // 2)
    head = np.arange(1, k + 1)
    tail = np.unique(np.round(np.geomspace(k + 1, num_blocks, m - k)).astype(int))
    every = self.evaluate_every
    anchors = [] if every is None else np.arange(every, num_blocks + 1, every)
    return np.unique(np.concatenate([head, tail, anchors, [num_blocks]])).astype(int)

  def _blocks_event(self, count: int):
    """``(event, n)``: the accountant's description of ``count`` blocks."""
    e = self.event
    if count > 1 and self._is_allocation():
      return dataclasses.replace(e, num_epochs=int(e.num_epochs) * int(count)), 1
    return e, int(count)

  def _is_allocation(self) -> bool:
    return events.kind(self.event) == "allocation"

  def epsilon_after(self, count: int, delta: float) -> float:
    """Epsilon at ``delta`` after ``count`` blocks (onto the ledger), float: the
    accountant's own ``get_epsilon``."""
    checks.check_int("count", count, min_value=1, scalar=True)
    event, n = self._blocks_event(count)
    return float(self.accountant.copy().compose(event, n).get_epsilon(float(delta)))

  def _block_table(self, num_blocks, delta):
    key = (int(num_blocks), float(delta),
           tuple((id(e), n) for e, n in self.accountant.events))
    if key not in self._memo:
      counts = self.evaluated_counts(num_blocks)
      with progress(total=counts.size, enabled=self._progress,
                    desc=f"jaxacct.tracking epsilon table ({counts.size} counts)") as bar:
        eps = self._epsilons(counts, delta, bar)
      b = np.arange(1, num_blocks + 1)
      nxt = np.searchsorted(counts, b, side="left")   # first evaluated count >= b
      self._memo[key] = np.concatenate([[0.0], eps[nxt]])
    return self._memo[key].copy()

  def _epsilons(self, counts, delta, bar):
    """Epsilon after each of ``counts`` (sorted) blocks."""
    if self._is_allocation():           # a folded allocation event, count by count
      eps = np.empty(counts.size)
      for j, n in enumerate(counts):
        eps[j] = self.epsilon_after(int(n), delta)
        bar.update(1)
      return eps
    mu = self._closed_form(delta)
    if mu is not None:                  # the accountant's Gaussian closed form
      bar.update(counts.size)
      return gaussian_epsilons(mu, counts, delta)
    # the accountant's own batch: bitwise its get_epsilon per count on an empty
    # ledger (the repeated-event engine), to its round-off onto a ledger
    return self.accountant.epsilons_for_counts(self.event, counts, delta,
                                               on_count=lambda: bar.update(1))

  def _fresh(self):
    """An empty accountant with this one's settings."""
    a = self.accountant
    return accounting.PLDAccountant(a.neighboring_relation, a.value_discretization_interval,
                                    tail_mass=a.tail_mass, shortcuts=a.shortcuts,
                                    truncated=a.truncated)

  def _closed_form(self, delta):
    """``(mu_ledger, mu_event)`` when the accountant answers every count in closed
    form (a ledger of Gaussian events and a Gaussian event), else None."""
    if (not self.accountant.shortcuts or events.kind(self.event) != "gaussian"
        or not all(events.kind(e) == "gaussian" for e, _ in self.accountant.events)):
      return None
    one = self._fresh().compose(self.event).get_epsilon_bounds(delta)
    if one.method != "gaussian_exact":
      return None
    if not self.accountant.events:
      return 0.0, float(one.details["mu"])
    led = self.accountant.get_epsilon_bounds(delta)
    return float(led.details["mu"]), float(one.details["mu"])

  def _ledger_key(self):
    return tuple((id(e), n) for e, n in self.accountant.events)

  def schedule_key(self) -> bytes:
    a = self.accountant
    return super().schedule_key() + repr((
        self.event, a.value_discretization_interval, a.tail_mass, a.shortcuts, a.truncated,
        self.max_evaluations, self.evaluate_every,
        [(e, n) for e, n in a.events])).encode()

  def _prefix_steps(self) -> bool:
    """Whether steps inside an epoch get the released prefix's bound (1-of-t allocation)."""
    e = self.event
    return not (self.max_evaluations is not None or not self._is_allocation()
                or self.block_size < 2 or self.block_size != e.steps_per_epoch
                or int(e.num_selected) != 1 or int(e.num_epochs) != 1
                or not isinstance(e.mechanism, str) or self.accountant.events
                or self.neighbouring == "replace_one")

  def _whole_step_table(self, num_steps: int, delta: float) -> np.ndarray:
    segs = self.step_segments(num_steps, delta)
    if segs is None:
      return super()._whole_step_table(num_steps, delta)
    with jax.enable_x64(True):
      return np.concatenate([[0.0]] + [np.asarray(s, np.float64) for s in segs])

  def step_segments(self, num_steps: int, delta: float):
    """The step table's entries in pieces, for the accountants whose table takes
    seconds: random allocation (epoch by epoch; for 1-of-t the prefixes of
    epoch 1 a few at a time) and one non-Gaussian event on an empty ledger
    (counts 1, 2, 3-4, 5-8, 9-16, ...: the accountant's batch, whose value for a
    count does not depend on the others asked). None otherwise (the grid
    mode, Gaussian events, a ledger): computed at once."""
    n, delta = int(num_steps), float(delta)
    if self.max_evaluations is not None:
      return None
    if self._is_allocation():
      return self._allocation_segments(n, delta)
    if self.accountant.events or events.kind(self.event) == "gaussian":
      return None
    return self._repeated_segments(n, delta)

  def _checked(self, vals, run):
    vals = np.asarray(vals, np.float64)
    if np.any(np.isnan(vals)) or np.any(vals < 0):
      raise ValueError(f"{type(self).__name__} produced an invalid epsilon table "
                       "(NaN or negative entries).")
    return np.maximum.accumulate(np.concatenate([[run], vals]))[1:]

  def _repeated_segments(self, n, delta):
    # counts 1, 2, 3-4, 5-8, ..., 2^(a-1)+1..2^a: the Poisson door builds one
    # per-step pair per such bucket; an engine block of 32 counts (from 32 on)
    # serves a piece's last count and the next piece's others, so its choices
    # (read floor, tilt, length) are made twice, its rows once
    b, nb = self.block_size, -(-n // self.block_size)
    lo, run = 1, 0.0
    while lo <= nb:
      counts = np.arange(lo, min(max(2 * (lo - 1), 1), nb) + 1)
      blocks = self._checked(self.accountant.epsilons_for_counts(self.event, counts, delta), run)
      run = float(blocks[-1])
      steps = np.arange((lo - 1) * b + 1, min(int(counts[-1]) * b, n) + 1)
      yield blocks[-(-steps // b) - lo]
      lo = int(counts[-1]) + 1

  def _allocation_segments(self, n, delta):
    b, nb = self.block_size, -(-n // self.block_size)
    ends, run = [0.0], [0.0]

    def epoch_end(e):                  # the accountant's epoch ends, in order, running max
      while len(ends) <= e:
        v = self._checked([self.epsilon_after(len(ends), delta)], run[0])[0]
        ends.append(float(v))
        run[0] = float(v)
      return ends[e]
    if not self._prefix_steps():       # a partial block is charged the whole block
      for e in range(1, nb + 1):
        yield np.full(min(e * b, n) - (e - 1) * b, epoch_end(e))
      return
    segs = allocation_step_segments(self.event, epoch_end, nb, delta=delta,
                                    step=self.accountant.value_discretization_interval,
                                    tail_mass=self.accountant.tail_mass)
    done = 0
    for seg in segs:
      steps = np.arange(done + 1, min(done + len(seg), n) + 1)
      if steps.size:
        yield np.minimum(np.asarray(seg)[:steps.size],
                         np.asarray(ends)[-(-steps // b)])
      done += len(seg)
      if done >= n:
        return

  @property
  def settles_budget(self) -> bool:
    return self.max_evaluations is None and not self._is_allocation()

  def at_budget(self, table: np.ndarray, max_epsilon: float, delta: float) -> np.ndarray:
    """``table`` whose first entry above ``max_epsilon`` is the accountant's.

    The table and the accountant agree to the accountant's round-off, which
    could put a crossing of the budget one block early or late. The block
    counts around the table's crossing are asked of the accountant itself
    (``get_epsilon``, usually two or three) until ``B`` is found with
    ``eps(B - 1) <= max_epsilon < eps(B)``; the steps of blocks up to ``B - 1``
    are then charged at most ``eps(B - 1)`` (a valid bound for any prefix of
    those blocks) and those from block ``B`` on at least ``eps(B)``, so the
    budget stop fires at the first step of block ``B``: on time, by the
    accountant's numbers. Allocation epochs and the grid mode are left as they
    are (their epoch ends are the accountant's own values).
    """
    if self.max_evaluations is not None or self._is_allocation():
      return table
    b, n = self.block_size, len(table) - 1
    n_blocks = -(-n // b)
    ends = np.minimum(np.arange(n_blocks + 1) * b, n)
    over = np.flatnonzero(table[ends] > max_epsilon)
    first = int(over[0]) if over.size else n_blocks + 1
    memo = {0: 0.0}

    def acc(k):
      if k not in memo:
        memo[k] = self.epsilon_after(k, delta)
      return memo[k]
    while first > 1 and acc(first - 1) > max_epsilon:
      first -= 1
    while first <= n_blocks and acc(first) <= max_epsilon:
      first += 1
    table = table.copy()
    end = min((first - 1) * b, n)
    table[:end + 1] = np.minimum(table[:end + 1], acc(first - 1))
    if first <= n_blocks:
      table[end + 1:] = np.maximum(table[end + 1:], acc(first))
    return table


def gaussian_epsilons(mu, counts, delta) -> np.ndarray:
  """Epsilon of ``sqrt(mu[0]^2 + b mu[1]^2)``-GDP at ``delta`` for each count b.

  The accountant's Gaussian closed form (Balle & Wang, arXiv:1805.06530v2,
  Thm 8), evaluated as it does (``gaussian_epsilon(1 / mu, delta)``, the host
  formula), for all counts at once.
  """
  led, one = mu
  b = np.asarray(counts, np.float64)
  mus = np.sqrt(b * one ** 2) if led == 0.0 else np.sqrt(led ** 2 + b * one ** 2)
  return np.asarray(host_call(gaussian_epsilon_kernel, 1.0 / mus, np.float64(delta)),
                    np.float64)


_ACCOUNTANTS = (EventAccountant, EpsilonTableAccountant)


def check_accountant(accountant) -> None:
  """Raises ValueError unless ``accountant`` is one of the tracking accountants."""
  if not isinstance(accountant, _Accountant):
    raise ValueError(f"accountant must be one of {[a.__name__ for a in _ACCOUNTANTS]};"
                     f" got {type(accountant).__name__}.")


def epsilon_table(accountant, *, num_steps: int, delta: float) -> np.ndarray:
  """float64 epsilons after 0..num_steps applied updates (host side).

  ``table[s]`` is the accountant's bound for the first ``s`` updates. A
  partial block is charged the whole block, except the steps inside an epoch
  of 1-of-t random allocation (an :class:`EventAccountant` of a
  ``RandomAllocationDpEvent`` with ``num_selected=1``, ``block_size=t``, no
  ledger): step ``(e - 1) t + s`` is charged ``e - 1`` whole epochs and the
  released prefix of ``s`` steps, a 1-of-s allocation that holds the example
  with probability ``s / t`` (``jaxacct.tracking._epochs``, where the bound is
  proved; never above the whole epoch's), for 64 prefix lengths per epoch at
  most (a step between two is charged the next one). This is the table the
  hook looks up; use it for float64 reporting outside ``jit``:
  ``epsilon_table(...)[int(state.count)]``.

  Returns:
    numpy float64 array of shape (num_steps + 1,), non-decreasing.
  """
  check_accountant(accountant)
  checks.check_int("num_steps", num_steps, min_value=1, scalar=True)
  checks.check_delta(delta, scalar=True)
  return accountant.step_table(int(num_steps), float(delta))
