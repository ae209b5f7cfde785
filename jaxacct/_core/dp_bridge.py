"""The optional ``dp_accounting`` dependency: its base types, or stand-ins.

``jaxacct.accounting`` plugs into dp_accounting (Google's
``dp-accounting`` package) when it is installed: jaxacct's accountants
subclass ``dp_accounting.PrivacyAccountant`` and jaxacct's events subclass
``dp_accounting.DpEvent``, so ``ComposedDpEvent``, ``calibrate_dp_mechanism``
and jax_privacy's ``accountant_fn`` accept them. Without it, this module
defines stand-ins with the same names, fields and methods (frozen
dataclasses for the events), so ``import jaxacct`` and the accountant work
alone. Nothing here does arithmetic.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from typing import Any, List, NamedTuple, Optional, Sequence

from jaxacct._core.lazy import import_submodules

try:  # pragma: no cover - which branch runs depends on the environment
  # the three light modules only: dp_accounting's __init__ (SciPy's optimize,
  # signal and stats) runs when a name of the package itself is first looked up
  _dpe, _dpb, _dpa = import_submodules(
      "dp_accounting", ("dp_event", "dp_event_builder", "privacy_accountant"))
  HAS_DP_ACCOUNTING = True
except ImportError:  # pragma: no cover
  _dpe = _dpb = _dpa = None
  HAS_DP_ACCOUNTING = False

# Names of dp_accounting's standard events that jaxacct understands (their
# fields, in dp_accounting's order). Stand-ins are built from this table when
# dp_accounting is absent.
_STANDARD_FIELDS = {
    "NoOpDpEvent": (),
    "NonPrivateDpEvent": (),
    "UnsupportedDpEvent": (),
    "GaussianDpEvent": ("noise_multiplier",),
    "LaplaceDpEvent": ("noise_multiplier",),
    "RandomizedResponseDpEvent": ("noise_parameter", "num_buckets"),
    "SelfComposedDpEvent": ("event", "count"),
    "ComposedDpEvent": ("events",),
    "PoissonSampledDpEvent": ("sampling_probability", "event"),
    "SampledWithReplacementDpEvent": ("source_dataset_size", "sample_size",
                                      "event"),
    "SampledWithoutReplacementDpEvent": ("source_dataset_size", "sample_size",
                                         "event"),
    "ZCDpEvent": ("rho", "xi"),
    "DiscreteLaplaceDpEvent": ("noise_parameter", "sensitivity"),
    "MixtureOfGaussiansDpEvent": ("standard_deviation", "sensitivities",
                                  "sampling_probs"),
    "TruncatedSubsampledGaussianDpEvent": ("dataset_size", "sampling_probability",
                                           "truncated_batch_size",
                                           "noise_multiplier"),
    "SingleEpochTreeAggregationDpEvent": ("noise_multiplier", "step_counts"),
    "RepeatAndSelectDpEvent": ("event", "mean", "shape"),
}

if HAS_DP_ACCOUNTING:
  DpEvent = _dpe.DpEvent
  PrivacyAccountantBase = _dpa.PrivacyAccountant
  NeighboringRelation = _dpa.NeighboringRelation
  UnsupportedEventError = _dpa.UnsupportedEventError
  CompositionErrorDetails = _dpa.PrivacyAccountant.CompositionErrorDetails
  DpEventBuilder = _dpb.DpEventBuilder
  STANDARD_EVENTS = {name: getattr(_dpe, name) for name in _STANDARD_FIELDS
                     if hasattr(_dpe, name)}
else:

  class DpEvent:  # type: ignore[no-redef]
    """Stand-in for ``dp_accounting.DpEvent`` (dp_accounting not installed)."""

  class NeighboringRelation(enum.Enum):  # type: ignore[no-redef]
    """Stand-in for ``dp_accounting.NeighboringRelation``."""
    ADD_OR_REMOVE_ONE = 1
    REPLACE_ONE = 2
    REPLACE_SPECIAL = 3

  class UnsupportedEventError(Exception):  # type: ignore[no-redef]
    """Raised when an accountant is given an event it cannot account for."""

  class CompositionErrorDetails(NamedTuple):  # type: ignore[no-redef]
    """The offending sub-event and why composition fails."""
    invalid_event: Any
    error_message: Optional[str]

  def _make_standard(name: str, fields: Sequence[str]):
    defaults = {"xi": 0.0}
    spec = [(f, Any, dataclasses.field(default=defaults[f])) if f in defaults
            else (f, Any) for f in fields]
    return dataclasses.make_dataclass(name, spec, bases=(DpEvent,),
                                      frozen=True, eq=True)

  STANDARD_EVENTS = {n: _make_standard(n, f) for n, f in _STANDARD_FIELDS.items()}
  for _cls in STANDARD_EVENTS.values():
    _cls.__module__ = "jaxacct.accounting.events"   # their public home (saved states name it)
    _cls.__qualname__ = _cls.__name__
    globals()[_cls.__name__] = _cls
  # ComposedDpEvent holds a list: hash by identity (it is never a dict key).
  STANDARD_EVENTS["ComposedDpEvent"].__hash__ = object.__hash__
  STANDARD_EVENTS["MixtureOfGaussiansDpEvent"].__hash__ = object.__hash__

  class DpEventBuilder:  # type: ignore[no-redef]
    """Ledger of composed events (stand-in for dp_accounting's builder)."""

    def __init__(self):
      self._event_counts: List[tuple] = []

    def compose(self, event, count: int = 1):
      if not isinstance(event, DpEvent):
        raise TypeError(f"`event` must be a DpEvent. Found {type(event)}.")
      if not isinstance(count, int) or count < 1:
        raise ValueError(f"`count` must be a positive int. Found {count!r}.")
      if isinstance(event, STANDARD_EVENTS["NoOpDpEvent"]):
        return
      if isinstance(event, STANDARD_EVENTS["SelfComposedDpEvent"]):
        self.compose(event.event, count * event.count)
        return
      if self._event_counts and self._event_counts[-1][0] == event:
        self._event_counts[-1] = (event, self._event_counts[-1][1] + count)
      else:
        self._event_counts.append((event, count))

    def build(self):
      ev = [e if c == 1 else STANDARD_EVENTS["SelfComposedDpEvent"](e, c)
            for e, c in self._event_counts]
      if not ev:
        return STANDARD_EVENTS["NoOpDpEvent"]()
      if len(ev) == 1:
        return ev[0]
      return STANDARD_EVENTS["ComposedDpEvent"](ev)

  class PrivacyAccountantBase(abc.ABC):  # type: ignore[no-redef]
    """Stand-in for ``dp_accounting.PrivacyAccountant`` (same methods)."""

    def __init__(self, neighboring_relation):
      self._neighboring_relation = neighboring_relation
      self._ledger = DpEventBuilder()

    @property
    def neighboring_relation(self):
      return self._neighboring_relation

    def supports(self, event) -> bool:
      return self._maybe_compose(event, 0, False) is None

    @abc.abstractmethod
    def _maybe_compose(self, event, count: int, do_compose: bool):
      """Checks (and with ``do_compose``, records) ``event``; see dp_accounting."""

    def compose(self, event, count: int = 1):
      if not isinstance(event, DpEvent):
        raise TypeError(f"`event` must be `DpEvent`. Found {type(event)}.")
      err = self._maybe_compose(event, count, False)
      if err:
        raise UnsupportedEventError(
            f"Unsupported event: {event}. Error: [{err.error_message}] caused "
            f"by subevent {err.invalid_event}.")
      self._ledger.compose(event, count)
      self._maybe_compose(event, count, True)
      return self

    @property
    def ledger(self):
      return self._ledger.build()

    @abc.abstractmethod
    def get_epsilon(self, target_delta: float) -> float:
      """Epsilon at ``target_delta`` of everything composed so far."""

    def get_delta(self, target_epsilon: float) -> float:
      raise NotImplementedError()


def standard_event(name: str):
  """The class of dp_accounting's event ``name`` (or its stand-in); None if absent."""
  return STANDARD_EVENTS.get(name)
