r"""Tight privacy loss distribution of random allocation, certified upper and lower.

Source: V. Feldman and M. Shenfeld, "Efficient privacy loss accounting for
subsampling and random allocation", ICML 2026, arXiv:2602.17284v1 (the
allocation PLD and its package PLD_accounting 2.0); the reduction of k-of-t to
1-of-floor/ceil(t/k) is Feldman & Shenfeld, "Privacy amplification by random
allocation", Lemma 3.2. The second-order (convex-order) rounding is jaxacct's
own construction, not the package's first-order knot rounding.

Proofs and sources: docs/bounds/allocation_pld.md ("Bounds and proofs /
Random allocation: the tight PLD").

The engine, one module a stage: ``_one_step`` (one round's laws) ->
``_sum_law`` (with ``_diagonal_blocks``, ``_host_rows``, ``_far_field``,
``_lower_coarse``, ``_regrid``: the sum of a round's laws on a lattice) ->
``_laws`` and ``_input`` (final laws) -> ``_compose`` (the composed window) ->
``_query`` (lanes in chunks) and ``_export`` (PLDs); ``_doors`` holds the doors.
"""

from jaxacct._core.dtype import public_surface
from jaxacct.allocation.pld._doors import (DEFAULT_COMPOSITION_SIZE, DELTA_TAU, HOST_LANES,
                                           SWEEP_BRACKET, TAU_FACTOR, allocation_pld_delta,
                                           allocation_pld_epsilon, allocation_pld_laws,
                                           allocation_plds, delta_one, event_delta,
                                           event_epsilon, lower_one_step,
                                           sweep_size, upper_one_step)
from jaxacct.allocation.pld._laws import (DEFAULT_GRID_SIZE, DEFAULT_TAIL, laws_batch,
                                          shared_upper_laws)

__all__ = ["allocation_pld_epsilon", "allocation_pld_delta", "allocation_pld_laws",
           "allocation_plds", "event_epsilon", "event_delta"]

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
