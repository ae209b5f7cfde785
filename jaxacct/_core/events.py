r"""Events: what a run did, described for an accountant (pure data).

The event types live here, at the bottom of the import graph: they import
nothing above ``jaxacct._core`` (a PLD field is recognised by its fields, not
by importing :mod:`jaxacct.pld`), so mechanism values can build them and the
accountant can read them. Their public home is :mod:`jaxacct.accounting.events`.

dp_accounting's standard events are re-exported here (or, without
dp_accounting, stand-ins with the same names and fields):
``GaussianDpEvent``, ``LaplaceDpEvent``, ``PoissonSampledDpEvent``,
``SampledWithoutReplacementDpEvent``, ``SelfComposedDpEvent``,
``ComposedDpEvent``, ``NoOpDpEvent``, ``NonPrivateDpEvent``,
``RandomizedResponseDpEvent``, ``ZCDpEvent``, ``UnsupportedDpEvent``,
``SampledWithReplacementDpEvent``, ``DiscreteLaplaceDpEvent``,
``MixtureOfGaussiansDpEvent``, ``TruncatedSubsampledGaussianDpEvent``,
``SingleEpochTreeAggregationDpEvent``, ``RepeatAndSelectDpEvent``.

jaxacct adds the mechanisms dp_accounting 0.6.0 cannot express. Each is a
frozen dataclass; with dp_accounting installed it subclasses
``dp_accounting.DpEvent``, so dp_accounting's ``ComposedDpEvent`` and
``SelfComposedDpEvent`` take it and ``to_named_tuple`` serialises it:

* :class:`RandomAllocationDpEvent` -- random allocation ("balls in bins"):
  every example joins ``num_selected`` of the ``steps_per_epoch`` steps of an
  epoch, chosen uniformly; ``num_epochs`` epochs; Gaussian (noise
  multiplier ``noise_multiplier``) or Laplace (``scale``) noise, or any mechanism
  given as a ``jaxacct.pld`` PLD (Feldman & Shenfeld, arXiv:2502.08202v3).
* :class:`ShuffleDpEvent` -- one round of shuffling ``n`` eps0-LDP reports
  with a declared randomizer (Feldman, McMillan, Talwar, arXiv:2012.12803v4).
* :class:`ShuffledCheckInDpEvent` -- one round of shuffled check-in (Liew,
  Hasegawa, Takahashi, arXiv:2206.03151v2).
* :class:`EpsilonDeltaDpEvent` -- any (epsilon, delta)-DP mechanism.
* :class:`PLDDpEvent` -- any mechanism given by its PLDs.

Events only describe; they check their own fields (``ValueError`` naming the
field) and do no accounting.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple, Optional, Union

import numpy as np

from jaxacct._core import checks, dp_bridge
from jaxacct._core.dp_bridge import DpEvent
from jaxacct._core.units import renamed_fields, warn_renamed

#: where the event types are public (their ``__module__``: reprs, pickles and
#: dp_accounting's NamedTuple round trip name that module)
PUBLIC_MODULE = "jaxacct.accounting.events"

# dp_accounting's own event classes (or stand-ins when it is not installed).
(GaussianDpEvent, LaplaceDpEvent, PoissonSampledDpEvent, SampledWithoutReplacementDpEvent,
 SampledWithReplacementDpEvent, SelfComposedDpEvent, ComposedDpEvent, NoOpDpEvent,
 NonPrivateDpEvent, UnsupportedDpEvent, RandomizedResponseDpEvent, ZCDpEvent) = (
     dp_bridge.standard_event(name) for name in (
         "GaussianDpEvent", "LaplaceDpEvent", "PoissonSampledDpEvent",
         "SampledWithoutReplacementDpEvent", "SampledWithReplacementDpEvent",
         "SelfComposedDpEvent", "ComposedDpEvent", "NoOpDpEvent", "NonPrivateDpEvent",
         "UnsupportedDpEvent", "RandomizedResponseDpEvent", "ZCDpEvent"))
(DiscreteLaplaceDpEvent, MixtureOfGaussiansDpEvent, TruncatedSubsampledGaussianDpEvent,
 SingleEpochTreeAggregationDpEvent, RepeatAndSelectDpEvent) = (
     dp_bridge.standard_event(name) for name in (
         "DiscreteLaplaceDpEvent", "MixtureOfGaussiansDpEvent",
         "TruncatedSubsampledGaussianDpEvent", "SingleEpochTreeAggregationDpEvent",
         "RepeatAndSelectDpEvent"))


class _JaxacctEvent(DpEvent):
  """Mixin: dp_accounting's NamedTuple round trip for dataclass events."""

  def to_named_tuple(self):
    """NamedTuple form (as ``dp_accounting.DpEvent.to_named_tuple``).

    String fields are stored as UTF-8 bytes: dp_accounting 0.6.0's
    ``from_named_tuple`` rebuilds every ``Sequence`` field with its own type,
    which turns a ``str`` into the text of a list of characters but a
    ``bytes`` back into the same bytes (the events decode them).
    """
    cls = type(self)
    names = [f.name for f in dataclasses.fields(self)]
    nt = NamedTuple(f"_{cls.__name__}NamedTupleWrapper",
             [("module_name", str), ("class_name", str)]
             + [(n, Any) for n in names])

    def enc(v):
      return v.encode() if isinstance(v, str) else v

    return nt(cls.__module__, cls.__name__,
              *[enc(getattr(self, n)) for n in names])


def _decode_bytes(event, *names):
  """Frozen-dataclass fields given as bytes (NamedTuple round trip) -> str."""
  for n in names:
    v = getattr(event, n)
    if isinstance(v, bytes):
      object.__setattr__(event, n, v.decode())
    elif isinstance(v, (tuple, list)):
      object.__setattr__(event, n, tuple(x.decode() if isinstance(x, bytes) else x
                                         for x in v))


# ``jaxacct.pld.PLD`` and ``PairPLD`` are NamedTuples: recognised by their fields
_PLD_FIELDS = ("probs", "offset", "step", "inf_mass", "pessimistic")
_PAIR_FIELDS = ("remove", "add")


def _is_pld(x) -> bool:
  """A ``jaxacct.pld.PLD``."""
  return getattr(type(x), "_fields", None) == _PLD_FIELDS


def _is_pld_or_pair(x) -> bool:
  """A ``jaxacct.pld.PLD`` or ``PairPLD``."""
  return _is_pld(x) or (getattr(type(x), "_fields", None) == _PAIR_FIELDS
                        and all(_is_pld(y) for y in x))


def _is_pld_like(x) -> bool:
  if _is_pld_or_pair(x):
    return True
  return (isinstance(x, tuple) and len(x) == 2 and all(_is_pld_or_pair(y) for y in x))


def _sigma_field(get):
  """Where the deprecated ``sigma`` of a RandomAllocationDpEvent goes."""
  return "scale" if get("mechanism") in ("laplace", b"laplace") else "noise_multiplier"


_sigma_field.label = "noise_multiplier (Gaussian) or scale (Laplace)"


@renamed_fields(sigma=_sigma_field)
@dataclasses.dataclass(frozen=True, eq=False)
class RandomAllocationDpEvent(_JaxacctEvent):
  r"""Random allocation: each example in ``num_selected`` of ``steps_per_epoch`` steps.

  Feldman & Shenfeld, "Privacy amplification by random allocation",
  arXiv:2502.08202v3 (k-of-t by Lemma 3.2); accounted with the tight PLD of
  Feldman & Shenfeld, arXiv:2602.17284v1 (``jaxacct.allocation.pld``).

  Attributes:
    noise_multiplier: Gaussian noise multiplier (``mechanism="gaussian"``),
      > 0; None otherwise.
    steps_per_epoch: steps per epoch t (was ``num_steps``), integer >= 1.
    num_selected: steps each example joins per epoch k, in [1, t].
    num_epochs: epochs E >= 1 (each a fresh allocation).
    mechanism: ``"gaussian"``, ``"laplace"``, or the per-step mechanism as a
      ``jaxacct.pld`` ``PLD`` / ``PairPLD`` / ``(upper, lower)`` tuple (as in
      ``jaxacct.allocation.pld.allocation_pld_epsilon``).
    scale: Laplace scale (``mechanism="laplace"``), > 0; None otherwise.

  ``sigma`` is a deprecated
  alias, for one release, of ``noise_multiplier`` (Gaussian) or ``scale``
  (Laplace), with a ``DeprecationWarning``.

  Equality: field by field; a PLD mechanism compares by identity.
  """
  noise_multiplier: Optional[float] = None
  steps_per_epoch: int = 1
  num_selected: int = 1
  num_epochs: int = 1
  mechanism: Any = "gaussian"
  scale: Optional[float] = None

  def __post_init__(self):
    if isinstance(self.mechanism, bytes):
      _decode_bytes(self, "mechanism")
    checks.check_int("steps_per_epoch", self.steps_per_epoch, min_value=1)
    checks.check_int("num_selected", self.num_selected, min_value=1,
                     max_value=self.steps_per_epoch)
    checks.check_int("num_epochs", self.num_epochs, min_value=1)
    if isinstance(self.mechanism, str):
      checks.check_choice("mechanism", self.mechanism, ("gaussian", "laplace"))
      name, other = (("noise_multiplier", "scale") if self.mechanism == "gaussian"
                     else ("scale", "noise_multiplier"))
      if (self.mechanism == "laplace" and self.scale is None
          and self.noise_multiplier is not None):   # the old first field, by position
        warn_renamed(_ALLOCATION, "noise_multiplier (the first field) for mechanism='laplace'",
                     "scale")
        object.__setattr__(self, "scale", self.noise_multiplier)
        object.__setattr__(self, "noise_multiplier", None)
      v = getattr(self, name)
      if v is None:
        raise ValueError(f"{name} is required for mechanism={self.mechanism!r}.")
      if getattr(self, other) is not None:
        raise ValueError(f"{other} must be None for mechanism={self.mechanism!r} "
                         f"(give {name}).")
      _check_number(name, v)
      checks.check_range(name, v, 0.0, np.inf, lo_open=True, allow_inf=True)
    else:
      if not _is_pld_like(self.mechanism):
        raise ValueError("mechanism must be 'gaussian', 'laplace', a "
                         "jaxacct.pld.PLD, a PairPLD or a tuple (upper, lower) "
                         f"of them; got {type(self.mechanism).__name__}.")
      for name in ("noise_multiplier", "scale"):
        if getattr(self, name) is not None:
          raise ValueError(f"{name} must be None when mechanism is a PLD.")

  def __eq__(self, other):
    return type(other) is type(self) and _allocation_key(self) == _allocation_key(other)

  def __hash__(self):
    return hash((type(self).__name__,) + _allocation_key(self))


_ALLOCATION = f"{PUBLIC_MODULE}.RandomAllocationDpEvent"


def allocation_sigma(event) -> Optional[float]:
  """The allocation kernels' ``sigma`` of a :class:`RandomAllocationDpEvent`: its
  noise multiplier (Gaussian) or its scale (Laplace); None for a PLD mechanism."""
  return event.scale if event.mechanism == "laplace" else event.noise_multiplier


def _allocation_key(e):
  mech = e.mechanism if isinstance(e.mechanism, str) else id(e.mechanism)
  return (e.noise_multiplier, e.scale, e.steps_per_epoch, e.num_selected, e.num_epochs, mech)


@dataclasses.dataclass(frozen=True)
class ShuffleDpEvent(_JaxacctEvent):
  r"""One round of shuffling ``n`` reports of an eps0-LDP randomizer.

  Replacement neighbours (one user's input changes): accounted under
  ``REPLACE_ONE`` or ``REPLACE_SPECIAL`` only. Upper bound: the per-round
  dominating pair of the declared randomizer (``jaxacct.shuffle``):
  ``"generic"`` -- the clone pair (Feldman, McMillan, Talwar,
  arXiv:2012.12803v4, Thm 3.2); ``"blanket"``, ``"binary_rr"``, ``("k_rr",
  k)`` -- the stronger clone pair (Wang et al., arXiv:2304.05007v5).

  Attributes:
    n: number of users (reports), integer >= 2.
    eps0: local epsilon > 0.
    randomizer: ``"generic"``, ``"blanket"``, ``"binary_rr"`` or
      ``("k_rr", k)``.
  """
  n: int
  eps0: float
  randomizer: Union[str, tuple] = "generic"

  def __post_init__(self):
    _decode_bytes(self, "randomizer")
    checks.check_int("n", self.n, min_value=2)
    _check_number("eps0", self.eps0)
    checks.check_positive("eps0", self.eps0)
    r = self.randomizer
    if isinstance(r, str):
      checks.check_choice("randomizer", r, ("generic", "blanket", "binary_rr"))
    elif not (isinstance(r, tuple) and len(r) == 2 and r[0] == "k_rr"):
      raise ValueError("randomizer must be 'generic', 'blanket', 'binary_rr' "
                       f"or ('k_rr', k); got {r!r}.")
    else:
      checks.check_int("k", r[1], min_value=2)


@renamed_fields(sigma="noise_multiplier")
@dataclasses.dataclass(frozen=True)
class ShuffledCheckInDpEvent(_JaxacctEvent):
  r"""One round of shuffled check-in: each of ``n`` clients checks in w.p. ``p``.

  Liew, Hasegawa & Takahashi, arXiv:2206.03151v2, Thm 2 (Eq. 5) with
  Wang-Balle-Kasiviswanathan's subsampling bound (``jaxacct.shuffle.check_in_epsilon``).
  Replacement neighbours. Local randomizer: eps0-LDP (``eps0``) or a
  Gaussian report with noise multiplier ``noise_multiplier`` relative to the
  *replacement* sensitivity (``noise_std / (2 C)``). Give exactly one.
  RDP only (no PLD): composed through the accountant's RDP fallback.

  Attributes:
    n: clients, >= 1. p: check-in probability in (0, 1].
    eps0: local epsilon > 0, or None. noise_multiplier: > 0, or None
    (``sigma`` is its deprecated alias, for one release).
  """
  n: int
  p: float
  eps0: Optional[float] = None
  noise_multiplier: Optional[float] = None

  def __post_init__(self):
    checks.check_int("n", self.n, min_value=1)
    _check_number("p", self.p)
    checks.check_probability("p", self.p, open_lo=True)
    if (self.eps0 is None) == (self.noise_multiplier is None):
      raise ValueError("give exactly one of eps0 (LDP reports) and noise_multiplier "
                       f"(Gaussian reports); got eps0={self.eps0}, "
                       f"noise_multiplier={self.noise_multiplier}.")
    for name in ("eps0", "noise_multiplier"):
      v = getattr(self, name)
      if v is not None:
        _check_number(name, v)
        checks.check_positive(name, v)


@dataclasses.dataclass(frozen=True)
class EpsilonDeltaDpEvent(_JaxacctEvent):
  r"""Any (epsilon, delta)-DP mechanism (both directions).

  Accounted as its dominating pair, the four-point pair of Kairouz, Oh,
  Viswanath, "The composition theorem for differential privacy",
  arXiv:1311.0776v4, Thm 3.4 (losses +-epsilon and +-inf), which is also the
  worst mechanism with this guarantee: its lower bound is the same pair.

  Attributes:
    epsilon: >= 0. delta: in [0, 1].
  """
  epsilon: float
  delta: float

  def __post_init__(self):
    _check_number("epsilon", self.epsilon)
    checks.check_range("epsilon", self.epsilon, 0.0, np.inf)
    _check_number("delta", self.delta)
    checks.check_probability("delta", self.delta)


@dataclasses.dataclass(frozen=True, eq=False)
class PLDDpEvent(_JaxacctEvent):
  r"""A mechanism given by its privacy loss distributions (``jaxacct.pld``).

  Attributes:
    upper: a pessimistic ``PLD`` (both directions; e.g. a symmetric
      mechanism) or ``PairPLD(remove, add)`` of pessimistic PLDs that
      dominate the mechanism in each direction.
    lower: optional optimistic (or exact) ``PLD`` / ``PairPLD`` dominated by
      the mechanism; None: no lower bound (the accountant's composed lower
      then leaves this mechanism out, which keeps it a valid lower bound).
    name: a label for reports.

  Equality: by identity (PLD arrays are not compared).
  """
  upper: Any
  lower: Any = None
  name: str = "pld"

  def __post_init__(self):
    for fld, need in (("upper", True), ("lower", False)):
      v = getattr(self, fld)
      if v is None and not need:
        continue
      if not _is_pld_or_pair(v):
        raise ValueError(f"{fld} must be a jaxacct.pld.PLD or PairPLD; got "
                         f"{type(v).__name__}.")
    parts = (self.upper,) if _is_pld(self.upper) else self.upper
    if not all(bool(p.pessimistic) for p in parts):
      raise ValueError("upper must hold pessimistic PLDs (pessimistic=True).")

  def __eq__(self, other):
    return other is self

  __hash__ = object.__hash__


def _check_number(name, value):
  if isinstance(value, (str, bytes)) or not np.isscalar(value) and np.ndim(value):
    raise ValueError(f"{name} must be a real scalar; got {value!r}.")
  try:
    float(value)
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be a real scalar; got {value!r}.") from None



# ---------------------------------------------------------------------------
# kinds and families: the one table of event types. Every module that must
# tell events apart asks :func:`kind` (the accountant's leaves, builders and
# mechanism values, the tracker) or :func:`family` (the calibrator's lanes and
# the accountant's scheme doors); none tests an event's class itself.
# ---------------------------------------------------------------------------

#: event class -> kind, tried in this order: dp_accounting's classes (by name,
#: through the bridge; absent ones skipped), jaxacct's own, and dp_accounting's
#: own ``RandomAllocationDpEvent`` (kind ``"dp_allocation"``) where it exists.
KIND_TABLE = (
    ("NoOpDpEvent", "noop"), ("NonPrivateDpEvent", "non_private"),
    ("SelfComposedDpEvent", "self_composed"), ("ComposedDpEvent", "composed"),
    ("GaussianDpEvent", "gaussian"), ("LaplaceDpEvent", "laplace"),
    ("RandomizedResponseDpEvent", "randomized_response"),
    ("PoissonSampledDpEvent", "poisson_sampled"),
    ("SampledWithoutReplacementDpEvent", "without_replacement"),
    ("ZCDpEvent", "zcdp"),
    ("EpsilonDeltaDpEvent", "epsilon_delta"), ("PLDDpEvent", "pld"),
    ("RandomAllocationDpEvent", "allocation"), ("dp_accounting.RandomAllocationDpEvent",
                                                 "dp_allocation"),
    ("ShuffleDpEvent", "shuffle"), ("ShuffledCheckInDpEvent", "check_in"),
    ("DiscreteLaplaceDpEvent", "discrete_laplace"), ("MixtureOfGaussiansDpEvent", "mog"),
    ("TruncatedSubsampledGaussianDpEvent", "truncated"),
    ("SampledWithReplacementDpEvent", "with_replacement"),
    ("SingleEpochTreeAggregationDpEvent", "tree"),
    ("RepeatAndSelectDpEvent", "repeat_and_select"),
    ("UnsupportedDpEvent", "unsupported"),
)


def dp_random_allocation_class():
  """dp_accounting's own RandomAllocationDpEvent, when the installed version has it."""
  if not dp_bridge.HAS_DP_ACCOUNTING:
    return None
  from dp_accounting import dp_event   # optional dependency: loaded only when installed
  return getattr(dp_event, "RandomAllocationDpEvent", None)


@functools.lru_cache(maxsize=None)
def _kind_classes() -> tuple:
  ours = {c.__name__: c for c in (RandomAllocationDpEvent, ShuffleDpEvent,
                                  ShuffledCheckInDpEvent, EpsilonDeltaDpEvent, PLDDpEvent)}
  out = []
  for name, k in KIND_TABLE:
    if name.startswith("dp_accounting."):
      cls = dp_random_allocation_class()
    else:
      cls = ours.get(name) or dp_bridge.standard_event(name)
    if cls is not None:
      out.append((cls, k))
  return tuple(out)


_KIND_OF_TYPE: dict = {}   # type(event) -> kind, filled on first sight


def is_event(x) -> bool:
  """Whether ``x`` is a DpEvent at all (dp_accounting's, a stand-in or jaxacct's)."""
  return isinstance(x, DpEvent)


def kind(event) -> Optional[str]:
  """The kind of ``event`` (:data:`KIND_TABLE`), or None for an event of no known kind."""
  t = type(event)
  if t not in _KIND_OF_TYPE:
    _KIND_OF_TYPE[t] = next((k for cls, k in _kind_classes() if isinstance(event, cls)), None)
  return _KIND_OF_TYPE[t]


def require_allocation(event, name: str = "event"):
  """``event`` if it is a :class:`RandomAllocationDpEvent` (its fields checked when it
  was built), else ValueError naming ``name``."""
  if kind(event) != "allocation":
    raise ValueError(f"{name} must be a jaxacct.accounting.events.RandomAllocationDpEvent; "
                     f"got {type(event).__name__}.")
  return event


class Family(NamedTuple):
  """The door family of an event (see :func:`family`).

  Attributes:
    name: ``"allocation"`` (key ``(t, k, E)``), ``"poisson"`` (key ``(q,
      count)``), ``"gaussian"`` (key ``()``) or ``"other"`` (key ``()``).
    key: the family's static key.
    sigma: the noise: the allocation's ``sigma`` (None for a PLD mechanism),
      the Poisson-sampled Gaussian's noise multiplier, or the Gaussian's
      effective single-step noise sigma / sqrt(count); None for ``"other"``.
    mechanism: the allocation's per-step mechanism (``"gaussian"``,
      ``"laplace"`` or a PLD); ``"gaussian"`` for the Poisson and Gaussian
      families.
  """
  name: str
  key: tuple
  sigma: Optional[float]
  mechanism: Any = "gaussian"


_OTHER = Family("other", (), None, None)


def family(event, count: int = 1) -> Family:
  """The family of ``event`` composed ``count`` times (one table: event kind -> family).

  * ``RandomAllocationDpEvent`` -> ``"allocation"`` (its own count is its
    epochs; ``count`` is not folded in);
  * ``PoissonSampledDpEvent(q, GaussianDpEvent(s))`` with 0 < q < 1 and s > 0,
    alone or self-composed -> ``"poisson"`` (key ``(q, count)``); q = 1 is the
    Gaussian;
  * ``GaussianDpEvent(s)``, s > 0, alone or self-composed -> ``"gaussian"``
    (sigma / sqrt(count): one Gaussian of the composed noise);
  * anything else -> ``"other"`` (the accountant's leaves and builders).
  """
  if kind(event) == "allocation":
    s = allocation_sigma(event)
    sigma = None if s is None else float(s)
    return Family("allocation", (int(event.steps_per_epoch), int(event.num_selected),
                                 int(event.num_epochs)), sigma, event.mechanism)
  n, inner = int(count), event
  if kind(inner) == "self_composed" and int(inner.count) >= 1:
    n, inner = n * int(inner.count), inner.event
  if kind(inner) == "poisson_sampled" and kind(inner.event) == "gaussian":
    q, s = float(inner.sampling_probability), float(inner.event.noise_multiplier)
    if 0 < q < 1 and s > 0:
      return Family("poisson", (q, n), s)
    inner = inner.event if q == 1 else inner
  if kind(inner) == "gaussian" and float(inner.noise_multiplier) > 0:
    return Family("gaussian", (), float(inner.noise_multiplier) / math.sqrt(n))
  return _OTHER


for _cls in (RandomAllocationDpEvent, ShuffleDpEvent, ShuffledCheckInDpEvent,
             EpsilonDeltaDpEvent, PLDDpEvent):
  _cls.__module__ = PUBLIC_MODULE
