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
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct import accounting
from jaxacct._core import checks
from jaxacct._core.progress import check_progress_arg, progress


# --------------------------------------------------------------------------
# Accountants: float64 epsilon tables, built once on the host.
# --------------------------------------------------------------------------

class _Accountant:
  """Base class. Subclasses define ``block_size`` and ``_block_table``.

  ``neighbouring``: the neighbouring relation the table holds for
  (``"add_remove"``, ``"replace_one"``, ``"replace_special"``), or None where
  the user supplies the curve or table (then it is the supplier's).
  """

  block_size: int = 1
  neighbouring: Optional[str] = None

  def _block_table(self, num_blocks: int, delta: float) -> np.ndarray:
    raise NotImplementedError

  def block_table(self, num_blocks: int, delta: float) -> np.ndarray:
    """float64 array (num_blocks + 1,): eps after b = 0..num_blocks blocks."""
    checks.check_int("num_blocks", num_blocks, min_value=1)
    checks.check_delta(delta)
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
    checks.check_delta(delta)
    checks.check_int("block_size", block_size, min_value=1)
    self.epsilons, self.delta, self.block_size = eps, float(delta), int(block_size)

  def _block_table(self, num_blocks, delta):
    if delta != self.delta:
      raise ValueError(f"EpsilonTableAccountant holds at delta={self.delta:g}; "
                       f"the hook asked for delta={delta:g}.")
    if self.epsilons.size < num_blocks + 1:
      raise ValueError(f"epsilons has {self.epsilons.size} entries; need "
                       f"num_blocks + 1 = {num_blocks + 1}.")
    return self.epsilons[:num_blocks + 1]


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
  random allocation (k of t steps/epoch)    ``RandomAllocationDpEvent(sigma=sigma,
                                            steps_per_epoch=t, num_selected=k)``, one epoch
                                            (``block_size=t``)
  shuffling n eps0-LDP reports              ``ShuffleDpEvent(n, eps0)``, one round
                                            (``neighboring_relation=REPLACE_ONE``)
  ========================================  ==================================================

  ``eps[b]`` is exactly ``PLDAccountant(...).compose(event, b).get_epsilon(delta)``
  (composed onto ``accountant``'s ledger when one is given): the tracker
  reports what the accountant certifies, by construction. ``b`` epochs of a
  ``RandomAllocationDpEvent`` are handed to the accountant as one event with
  ``num_epochs`` multiplied by ``b`` (the same run: each epoch a fresh
  allocation), so that the accountant's direct allocation path evaluates
  them (``jaxacct.dpsgd.epsilon``'s number, not the FFT self-composition of
  one epoch, which is about 2e-4 relative looser).

  Which block counts are evaluated (:meth:`evaluated_counts`): every count
  up to ``max_evaluations``; beyond, the first ``min(32, max_evaluations //
  2)`` counts, a geometric grid up to the last count (always included) and
  every multiple of ``evaluate_every`` (e.g. the steps of an epoch, so that
  every epoch end is exact). A count between two evaluated ones is charged
  the next evaluated one: an upper bound, since epsilon never decreases with
  more compositions. The table is computed once per ``(num_blocks, delta)``
  and ledger and reused (:func:`track_privacy` after :func:`epsilon_table`).

  Cost: one accountant evaluation (one FFT composition; the event's PLDs are
  built once) per evaluated count, about 0.1 s each on a CPU for a Poisson
  step at the default grid step (plus one compilation per FFT length).

  Args:
    event: the event of one block (must be supported by the accountant).
    block_size: applied updates per event, >= 1.
    accountant: a ``jaxacct.accounting.PLDAccountant`` to compose onto (its
      ledger is kept as a prefix, e.g. events spent before training, and its
      settings are used); default a fresh one with ``neighboring_relation``
      and ``value_discretization_interval``.
    neighboring_relation, value_discretization_interval: for the default
      accountant (dp_accounting's defaults: add/remove, 1e-4).
    max_evaluations: >= 2 (default 16).
    evaluate_every: None or an int >= 1: block counts that are always
      evaluated exactly (its multiples).
    progress: None (global switch), True or False: progress output while
      tabulating.

  Neighbouring: the accountant's (``neighbouring``).

  Bound: upper (the accountant's).
  """

  def __init__(self, event, *, block_size: int = 1, accountant=None,
               neighboring_relation=None, value_discretization_interval: float = 1e-4,
               max_evaluations: int = 16, evaluate_every: Optional[int] = None,
               progress: Optional[bool] = None):
    checks.check_int("block_size", block_size, min_value=1)
    checks.check_int("max_evaluations", max_evaluations, min_value=2)
    if evaluate_every is not None:
      checks.check_int("evaluate_every", evaluate_every, min_value=1)
    check_progress_arg(progress)
    if accountant is None:
      # accounting.PLDAccountant resolves on first use (PEP 562): dp_accounting,
      # its base class when installed, loads with this accountant only
      accountant = accounting.PLDAccountant(neighboring_relation, value_discretization_interval)
    if not accountant.supports(event):
      raise accounting.UnsupportedEventError(f"the accountant does not support {event}.")
    self.event, self.block_size = event, int(block_size)
    self.accountant, self.max_evaluations = accountant, int(max_evaluations)
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
    if num_blocks <= m:
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
    if count > 1 and isinstance(e, accounting.events.RandomAllocationDpEvent):
      return dataclasses.replace(e, num_epochs=int(e.num_epochs) * int(count)), 1
    return e, int(count)

  def epsilon_after(self, count: int, delta: float) -> float:
    """Epsilon at ``delta`` after ``count`` blocks (onto the ledger), float."""
    checks.check_int("count", count, min_value=1)
    event, n = self._blocks_event(count)
    return float(self.accountant.copy().compose(event, n).get_epsilon(float(delta)))

  def _block_table(self, num_blocks, delta):
    key = (int(num_blocks), float(delta),
           tuple((id(e), n) for e, n in self.accountant.events))
    if key not in self._memo:
      counts = self.evaluated_counts(num_blocks)
      fold = isinstance(self.event, accounting.events.RandomAllocationDpEvent)
      with progress(total=counts.size, enabled=self._progress,
                    desc=f"jaxacct.tracking epsilon table ({counts.size} evaluations)") as bar:
        if fold:   # a folded allocation event, count by count
          eps = np.empty(counts.size)
          for j, n in enumerate(counts):
            eps[j] = self.epsilon_after(int(n), delta)
            bar.update(1)
        else:      # the accountant's own batch: shared per-event PLDs, one FFT length
          eps = self.accountant.epsilons_for_counts(self.event, counts, delta,
                                                    on_count=lambda: bar.update(1))
      b = np.arange(1, num_blocks + 1)
      nxt = np.searchsorted(counts, b, side="left")   # first evaluated count >= b
      self._memo[key] = np.concatenate([[0.0], eps[nxt]])
    return self._memo[key].copy()


_ACCOUNTANTS = (EventAccountant, EpsilonTableAccountant)


def epsilon_table(accountant, *, num_steps: int, delta: float) -> np.ndarray:
  """float64 epsilons after 0..num_steps applied updates (host side).

  ``table[s]`` is the accountant's bound for the first ``s`` updates
  (charging a partial block as a whole block). This is the table the hook
  looks up; use it for float64 reporting outside ``jit``:
  ``epsilon_table(...)[int(state.count)]``.

  Returns:
    numpy float64 array of shape (num_steps + 1,), non-decreasing.
  """
  if not isinstance(accountant, _Accountant):
    raise ValueError(f"accountant must be one of {[a.__name__ for a in _ACCOUNTANTS]};"
                     f" got {type(accountant).__name__}.")
  checks.check_int("num_steps", num_steps, min_value=1)
  checks.check_delta(delta)
  b = accountant.block_size
  num_blocks = -(-int(num_steps) // b)
  blocks = accountant.block_table(num_blocks, float(delta))
  s = np.arange(int(num_steps) + 1)
  return blocks[-(-s // b)]
