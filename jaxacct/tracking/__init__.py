r"""Optax hook: track (and enforce) the privacy spent while training.

:func:`track_privacy` returns an :class:`optax.GradientTransformation` that
passes updates through unchanged (as ``optax.snapshot`` does), counts the
*applied* updates and keeps the epsilon spent so far in its state.

Proofs and sources: docs/bounds/tracking.md ("Bounds and proofs /
Tracking during training").
"""

from typing import TYPE_CHECKING

from jaxacct._core.lazy import lazy_exports as _lazy_exports

# Imported on first access (PEP 562): optax loads with the hook
# (``track_privacy`` and its helpers), not with the accountants.
_LAZY = {
    **{n: ("jaxacct.tracking._accountants", n)
       for n in ("EpsilonTableAccountant", "EventAccountant", "epsilon_table")},
    "accountant_for": ("jaxacct.tracking._calibration", "accountant_for"),
    **{n: ("jaxacct.tracking._hook", n)
       for n in ("PrivacyBudgetExceeded", "PrivacyScheduleChanged", "PrivacyTrackerState",
                 "gaussian_noise", "privacy_spent", "track_privacy")},
    **{n: ("jaxacct.tracking._aggregate", n)
       for n in ("DPAggregateState", "clip_and_sum", "dp_aggregate")},
    # the balls-in-bins table's prefix pair (not listed: its oracle tests read it)
    "prefix_pair": ("jaxacct.tracking._epochs", "prefix_pair"),
}

if TYPE_CHECKING:
  from jaxacct.tracking._accountants import (EpsilonTableAccountant, EventAccountant,
                                             epsilon_table)
  from jaxacct.tracking._calibration import accountant_for
  from jaxacct.tracking._aggregate import DPAggregateState, clip_and_sum, dp_aggregate
  from jaxacct.tracking._hook import (PrivacyBudgetExceeded, PrivacyScheduleChanged,
                                      PrivacyTrackerState, gaussian_noise, privacy_spent,
                                      track_privacy)

# The optax states (``PrivacyTrackerState``, ``DPAggregateState``) are read by
# name (``optax.tree.get(state, "PrivacyTrackerState")``) or through
# :func:`privacy_spent`; importable here, not listed.
__all__ = [
    "PrivacyBudgetExceeded", "PrivacyScheduleChanged",
    "track_privacy", "dp_aggregate",
    "EventAccountant", "EpsilonTableAccountant",
    "epsilon_table", "privacy_spent", "accountant_for",
    "clip_and_sum", "gaussian_noise",
]

__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals())
