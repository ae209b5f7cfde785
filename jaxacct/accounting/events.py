r"""Events: what a run did, described for an accountant.

dp_accounting's standard events (or, without dp_accounting, stand-ins with the
same names and fields) and the jaxacct events for what dp_accounting 0.6.0
cannot express: :class:`RandomAllocationDpEvent`, :class:`ShuffleDpEvent`,
:class:`ShuffledCheckInDpEvent`, :class:`EpsilonDeltaDpEvent`,
:class:`PLDDpEvent`. Events only describe; they check their own fields
(``ValueError`` naming the field) and do no accounting. They are defined at
the bottom of the package (``jaxacct._core.events``, importing nothing above
the numerical core), so mechanism values build them without importing the
accountant.
"""

from jaxacct._core.events import (ComposedDpEvent, DiscreteLaplaceDpEvent, DpEvent,
                                  EpsilonDeltaDpEvent, GaussianDpEvent, LaplaceDpEvent,
                                  MixtureOfGaussiansDpEvent, NonPrivateDpEvent, NoOpDpEvent,
                                  PLDDpEvent, PoissonSampledDpEvent, RandomAllocationDpEvent,
                                  RandomizedResponseDpEvent, RepeatAndSelectDpEvent,
                                  SampledWithoutReplacementDpEvent,
                                  SampledWithReplacementDpEvent, SelfComposedDpEvent,
                                  ShuffledCheckInDpEvent, ShuffleDpEvent,
                                  SingleEpochTreeAggregationDpEvent,
                                  TruncatedSubsampledGaussianDpEvent, UnsupportedDpEvent,
                                  ZCDpEvent)

__all__ = [
    "DpEvent", "RandomAllocationDpEvent", "ShuffleDpEvent",
    "ShuffledCheckInDpEvent", "EpsilonDeltaDpEvent", "PLDDpEvent",
    "GaussianDpEvent", "LaplaceDpEvent", "PoissonSampledDpEvent",
    "SampledWithoutReplacementDpEvent", "SampledWithReplacementDpEvent",
    "SelfComposedDpEvent", "ComposedDpEvent", "NoOpDpEvent",
    "NonPrivateDpEvent", "UnsupportedDpEvent", "RandomizedResponseDpEvent",
    "ZCDpEvent", "DiscreteLaplaceDpEvent", "MixtureOfGaussiansDpEvent",
    "TruncatedSubsampledGaussianDpEvent", "SingleEpochTreeAggregationDpEvent",
    "RepeatAndSelectDpEvent",
]
