"""Privacy loss distributions in JAX: tight (eps, delta) by FFT composition.

Public interface (a contract used by other jaxacct modules):

* :class:`PLD` ``(probs, offset, step, inf_mass, pessimistic)``: P-mass of the
  privacy loss on ``loss_i = (offset + i) * step`` plus mass at +inf;
  :class:`PairPLD` ``(remove, add)``.
* constructors: :func:`from_losses`, :func:`from_pair`, :func:`gaussian`,
  :func:`laplace`, :func:`poisson_gaussian`, :func:`randomized_response`.
* composition: :func:`compose` (self), :func:`compose_many` (heterogeneous).
* queries: :func:`delta`, :func:`epsilon` (of a :class:`PLD`, or of a
  :class:`PairPLD`: the max of the two directions).
* the composed Poisson-subsampled Gaussian pair :func:`poisson_gaussian_composed`
  (default grid step ``min(1e-4, s/1000)``, s the standard deviation of the loss
  composed over at most 10^4 steps: :func:`default_step`); its epsilon/delta door is
  ``jaxacct.poisson.epsilon`` / ``delta`` with ``method="pld"``;
  :func:`to_dp_accounting` (export).

The other names importable from this package (``truncate``, ``window_size``,
``poisson_gaussian_pair``, the repeated-event engine ``pair_epsilons`` /
``direction_epsilons`` (:mod:`jaxacct.pld._powers`), ``poisson_gaussian_epsilon`` / ``_delta`` behind
``jaxacct.poisson``'s ``method="pld"``, ``DEFAULT_STEP``, ``default_step``, ...)
are what the other jaxacct packages use; they are not public (not in ``__all__``).

See :mod:`jaxacct.pld._core` for the discretisation and its guarantees,
:mod:`jaxacct.pld._compose` for the FFT composition and :mod:`jaxacct.pld._query`
for the queries.
"""

from __future__ import annotations

from jaxacct._core.dtype import public_surface
from jaxacct.pld._compose import HOST_MAX_SIZE, compose, compose_many, window_size
from jaxacct.pld._core import (DEFAULT_TAIL_MASS, PLD, PairPLD, from_losses, from_losses_host,
                              from_pair, truncate)
from jaxacct.pld._doors import (default_step, poisson_gaussian_composed, poisson_gaussian_delta,
                                poisson_gaussian_epsilons,
                                poisson_gaussian_epsilon, to_dp_accounting)
from jaxacct.pld._query import ROUNDING_ALLOWANCE, delta, delta_core, epsilon
from jaxacct.pld._host_law import law
from jaxacct.pld._powers import (column_epsilons, direction_delta, direction_epsilons,
                                 pair_column_epsilons, pair_epsilons, window_fits)
from jaxacct.pld._windows import MAX_WINDOW
from jaxacct.pld._mechanisms import (DEFAULT_STEP, gaussian, laplace, poisson_gaussian,
                                    poisson_gaussian_pair, randomized_response, truncate_to_bucket)

__all__ = [
    "PLD", "PairPLD", "from_losses", "from_pair", "compose", "compose_many",
    "delta", "epsilon", "gaussian", "laplace", "poisson_gaussian", "randomized_response",
    "poisson_gaussian_composed", "to_dp_accounting",
]

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
