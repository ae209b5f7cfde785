r"""jax_privacy adapter: run jax_privacy's accounting through jaxacct.

Usage and limits: docs/how-to/jax_privacy.md ("How-to / The jax_privacy config").
"""

from __future__ import annotations

import dataclasses
from typing import Optional

try:
  from jax_privacy.accounting import accountants as _jpa_accountants
except ImportError as err:  # pragma: no cover - depends on the environment
  raise ImportError(
      "jaxacct.accounting.jax_privacy needs jax_privacy: "
      "pip install 'jaxacct[test]' or pip install jax-privacy==2.0.0") from err

from jaxacct._core.dtype import public_surface
from jaxacct.accounting import _accountant
from jaxacct.accounting import events as _events

__all__ = ["JaxacctPldAccountantConfig", "balls_in_bins_event"]


# Caps of the per-config caches (entries): the calibrators visit ~10-30 values.
_MAX_COMPONENTS = 64
_MAX_ANSWERS = 4096


def _plain_dp_accounting(event) -> bool:
  """True when ``event`` and its sub-events are dp_accounting's own (value-keyed)."""
  if not type(event).__module__.startswith("dp_accounting"):
    return False
  subs = list(getattr(event, "events", None) or ())
  if getattr(event, "event", None) is not None:
    subs.append(event.event)
  return all(_plain_dp_accounting(e) for e in subs)


class _SharedPLDAccountant(_accountant.PLDAccountant):
  """``PLDAccountant`` that answers a repeated question from its config's memo.

  jax_privacy builds a fresh accountant for every evaluation, and its
  calibrators evaluate the same ledger more than once (the bracket's ends,
  brentq's conservative-side checks). The memo is keyed by the ledger (only
  when every event is one of dp_accounting's, whose repr is exact: floats
  round-trip), the relation, the grid, the tail mass and the question; the
  answer is the one this accountant would compute.
  """

  def __init__(self, *args, answers: Optional[dict] = None, **kwargs):
    super().__init__(*args, **kwargs)
    self._answers = answers

  def _key(self, kind, value):
    if self._answers is None or isinstance(value, bool) or not isinstance(
        value, (int, float)):
      return None
    events = self.events
    if not all(_plain_dp_accounting(e) for e, _ in events):
      return None
    return (kind, float(value), self.neighboring_relation.name,
            self.value_discretization_interval, self.tail_mass,
            tuple((repr(e), int(n)) for e, n in events))

  def _memo(self, kind, value, fn):
    key = self._key(kind, value)
    if key is None:
      return fn(value)
    hit = self._answers.get(key)
    if hit is None:
      hit = fn(value)
      if len(self._answers) >= _MAX_ANSWERS:
        self._answers.clear()
      self._answers[key] = hit
    return hit

  def get_epsilon(self, target_delta: float) -> float:
    return self._memo("epsilon", target_delta, super().get_epsilon)

  def get_delta(self, target_epsilon: float) -> float:
    return self._memo("delta", target_epsilon, super().get_delta)


@dataclasses.dataclass(kw_only=True, slots=True)
class JaxacctPldAccountantConfig(_jpa_accountants.PldAccountantConfig):
  """jax_privacy accountant config whose accountant is jaxacct's ``PLDAccountant``.

  Args:
    value_discretization_interval: loss grid step of every PLD (as in
      jax_privacy's ``PldAccountantConfig``; default 1e-4), > 0.
    tail_mass: truncation mass per side of the FFT compositions, charged to
      delta (``PLDAccountant``'s ``tail_mass``), in (0, 1e-3].

  Returns (``create_accountant``): a fresh
  ``jaxacct.accounting.PLDAccountant`` (a subclass) under
  add-or-remove-one (the relation jax_privacy's own configs use). The
  accountants one config creates share two caches, so that jax_privacy's
  calibrators (which build an accountant per evaluation) do not redo work:
  the per-event PLDs (``PLDAccountant``'s ``component_cache``, per grid and
  tail mass), and the answers to a repeated ``get_epsilon`` /
  ``get_delta`` on the same ledger of dp_accounting events (the same
  numbers, computed once). Bound: upper (``get_epsilon``).
  """

  tail_mass: float = _accountant.DEFAULT_TAIL_MASS
  _caches: dict = dataclasses.field(default_factory=dict, init=False, repr=False,
                                    compare=False)

  def create_accountant(self) -> _accountant.PLDAccountant:
    step, tail = self.value_discretization_interval, self.tail_mass
    components = self._caches.setdefault(("components", step, tail), {})
    if len(components) >= _MAX_COMPONENTS:
      components.clear()
    return _SharedPLDAccountant(
        _accountant.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=step, tail_mass=tail,
        component_cache=components,
        answers=self._caches.setdefault("answers", {}))


def balls_in_bins_event(strategy, *, noise_multiplier: float, num_epochs: int = 1):
  r"""jaxacct's event for one cycle of jax_privacy's ``BallsInBinsSampling`` + Gaussian noise.

  ``BallsInBinsSampling(iterations=T, cycle_length=t)`` puts every record in
  one of t bins uniformly at random (independently of the others) and uses
  it in the steps i with ``i % t`` equal to its bin. For ``T <= t`` (one
  cycle; an epoch when the expected batch is N / t) each record joins at
  most one step, chosen uniformly among t: random allocation, 1 of t
  (Feldman & Shenfeld, arXiv:2502.08202v3; "balls-and-bins", Chua et al.,
  arXiv:2412.16802v1), accounted by the tight allocation PLD
  (``jaxacct.allocation.pld``, arXiv:2602.17284v1). Steps t > T of the
  allocation that are never run only add outputs (post-processing), so the
  event has ``steps_per_epoch = t``.

  For ``T > t`` jax_privacy keeps each record's bin for every cycle: a
  record joins steps j, j + t, j + 2t, ... with ONE random j. That is not E
  fresh allocations (jaxacct's ``num_epochs``, and
  ``jaxacct.dpsgd.epsilon(sampling="balls_in_bins")``): the shared bin
  correlates the cycles, and accounting it as fresh allocations would
  under-report, so it is refused with a ``ValueError``. To train E epochs
  that jaxacct accounts, draw a fresh ``BallsInBinsSampling`` (new rng) per
  epoch with ``iterations = cycle_length`` and pass ``num_epochs=E`` (the
  same number as composing the one-epoch event E times, but through the
  exact allocation path: ``jaxacct.dpsgd.epsilon`` with
  ``sampling="balls_in_bins"``, t = ``cycle_length``).

  Args:
    strategy: a ``jax_privacy.batch_selection.BallsInBinsSampling`` with
      ``1 <= iterations <= cycle_length``.
    noise_multiplier: sigma of the Gaussian noise (per unit clip norm), > 0.
    num_epochs: E >= 1, epochs each with a fresh ``strategy`` draw.

  Returns:
    ``jaxacct.accounting.events.RandomAllocationDpEvent(sigma, steps_per_epoch=t,
    num_epochs=E)``.
    Bound: as ``jaxacct.allocation.pld`` (upper, with a certified lower).
  """
  t = int(getattr(strategy, "cycle_length"))
  steps = int(getattr(strategy, "iterations"))
  if t < 1:
    raise ValueError(f"strategy.cycle_length must be >= 1; got {t}.")
  if not 1 <= steps <= t:
    raise ValueError(
        f"strategy.iterations must be in [1, cycle_length={t}] (one cycle); got "
        f"{steps}. jax_privacy's BallsInBinsSampling keeps each record's bin "
        "across cycles, which is not a composition of fresh allocations; use "
        "one BallsInBinsSampling per epoch and compose the event per epoch.")
  return _events.RandomAllocationDpEvent(noise_multiplier=float(noise_multiplier),
                                         steps_per_epoch=t,
                                         num_epochs=num_epochs)

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
