r"""jax_privacy adapter: run jax_privacy's accounting through jaxacct.

The event of a jax_privacy batch selection comes from the sampler registry,
one floor up: :mod:`jaxacct.dpsgd.jax_privacy`. Usage and limits:
docs/how-to/jax_privacy.md ("How-to / The jax_privacy config").
"""

from __future__ import annotations

import dataclasses
import warnings
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

# ``one_cycle`` is importable (jaxacct.dpsgd.jax_privacy reads it), not listed;
# ``balls_in_bins_event`` here is deprecated (jaxacct.dpsgd.jax_privacy's)
__all__ = ["JaxacctPldAccountantConfig"]


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


def one_cycle(strategy):
  """``(t, T)`` = (``cycle_length``, ``iterations``) of a jax_privacy
  ``BallsInBinsSampling`` that runs at most one cycle (ValueError naming
  ``strategy`` else): see :func:`jaxacct.dpsgd.jax_privacy.balls_in_bins_event`."""
  try:
    t, steps = int(getattr(strategy, "cycle_length")), int(getattr(strategy, "iterations"))
  except (AttributeError, TypeError, ValueError):
    raise ValueError(f"strategy must be a jax_privacy BallsInBinsSampling (with cycle_length "
                     f"and iterations); got {strategy!r}.") from None
  if t < 1:
    raise ValueError(f"strategy.cycle_length must be >= 1; got {t}.")
  if not 1 <= steps <= t:
    raise ValueError(
        f"strategy.iterations must be in [1, cycle_length={t}] (one cycle); got "
        f"{steps}. jax_privacy's BallsInBinsSampling keeps each record's bin "
        "across cycles, which is not a composition of fresh allocations; use "
        "one BallsInBinsSampling per epoch and compose the event per epoch.")
  return t, steps


def balls_in_bins_event(strategy, *, noise_multiplier: float, num_epochs: int = 1):
  """Deprecated spelling of :func:`jaxacct.dpsgd.jax_privacy.balls_in_bins_event`
  (the same event; there it comes from the sampler registry, which sits above
  this module). Removed in the next release."""
  warnings.warn("jaxacct.accounting.jax_privacy.balls_in_bins_event is deprecated and will be "
                "removed in the next release; use jaxacct.dpsgd.jax_privacy.balls_in_bins_event "
                "(the same event).", DeprecationWarning, stacklevel=2)
  t, _ = one_cycle(strategy)
  return _events.RandomAllocationDpEvent(float(noise_multiplier), steps_per_epoch=t,
                                         num_epochs=num_epochs)

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
