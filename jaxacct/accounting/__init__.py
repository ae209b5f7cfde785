r"""Accounting for whole runs, in the dp_accounting ecosystem.

:class:`PLDAccountant` implements dp_accounting's ``PrivacyAccountant``
interface (it subclasses ``dp_accounting.PrivacyAccountant`` when
dp_accounting is installed; dp_accounting stays optional) over jaxacct's
PLD engine, with jaxacct's events for what dp_accounting cannot express
(random allocation, shuffling, shuffled check-in, (eps, delta), any PLD)::

    from jaxacct.accounting import PLDAccountant, NeighboringRelation, events as ev

    acc = PLDAccountant(NeighboringRelation.REPLACE_SPECIAL)
    acc.compose(ev.RandomAllocationDpEvent(noise_multiplier=1.1, steps_per_epoch=100, num_epochs=3))
    acc.compose(ev.GaussianDpEvent(20.0), 50)
    acc.compose(ev.ShuffleDpEvent(n=1000, eps0=1.0), 10)
    r = acc.get_epsilon_bounds(1e-6)      # r.epsilon (upper), r.lower

Modules: :mod:`~jaxacct.accounting.events` (event types); the accountant,
the event -> PLD-pair builders, the pair constructors (``regrid``,
``from_profile``), the TPR / mu-GDP views and the JSON state live in private
modules and are re-exported here; :mod:`~jaxacct.accounting.mixtures` and
:mod:`~jaxacct.accounting.fixed_size` hold dp_accounting 0.6.0's newer
events (mixtures of Gaussians, truncated Poisson sampling, sampling with and
without replacement).
"""

from typing import TYPE_CHECKING

from jaxacct._core.lazy import lazy_exports as _lazy_exports

# Imported on first access (PEP 562): dp_accounting (a base class of
# PLDAccountant when installed) loads with the accountant, not with
# ``from_profile``.
_LAZY = {
    "events": ("jaxacct.accounting.events", None),
    **{n: ("jaxacct.accounting._accountant", n)
       for n in ("NeighboringRelation", "PLDAccountant", "UnsupportedEventError")},
    "from_profile": ("jaxacct.accounting._pairs", "from_profile"),
    **{n: ("jaxacct.accounting._tradeoff", n) for n in ("GDPResult", "TradeOff")},
}

if TYPE_CHECKING:
  from jaxacct.accounting import events
  from jaxacct.accounting._accountant import (NeighboringRelation, PLDAccountant,
                                              UnsupportedEventError)
  from jaxacct.accounting._pairs import from_profile
  from jaxacct.accounting._tradeoff import GDPResult, TradeOff

__all__ = ["PLDAccountant", "NeighboringRelation", "UnsupportedEventError",
           "events", "from_profile", "TradeOff"]

__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals(), float64=True)
