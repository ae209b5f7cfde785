r"""Random allocation ("balls-in-bins"): each example is used in exactly k of
t steps per epoch, chosen uniformly at random (Feldman & Shenfeld,
"Privacy amplification by random allocation", arXiv:2502.08202v3).

Front doors: :func:`epsilon` and :func:`delta` return the best valid bound
(max over the add/remove directions of the min over methods) and name the
method that won. Sigma calibration: :func:`jaxacct.calibrate` of a
``jaxacct.accounting.events.RandomAllocationDpEvent`` (tight allocation PLD).

Proofs and sources: docs/bounds/allocation_rdp.md ("Bounds and proofs /
Random allocation: RDP and analytic bounds").
"""

from jaxacct._core.dtype import public_surface
from jaxacct.allocation import pld, sum_law
from jaxacct.allocation._add_rdp import allocation_add_rdp
from jaxacct.allocation._bounds import check_scheme
from jaxacct.allocation._fixed_bins import fixed_bins_pld_delta, fixed_bins_pld_epsilon
from jaxacct.allocation._front import METHODS, allocation_rdp, delta, epsilon
from jaxacct.allocation._max_lower import delta_lower_bound
from jaxacct.allocation._monte_carlo import (delta_monte_carlo,
                                             true_allocation_delta_monte_carlo,
                                             true_allocation_epsilon_monte_carlo)
from jaxacct.allocation._rdp import allocation_remove_rdp, allocation_remove_rdp_from_moments

# Importable for jaxacct.tracking, not public: ``METHODS``, ``check_scheme``.
# Not re-exported: ``allocation_remove_rdp`` and
# ``allocation_add_rdp`` are jittable themselves, so their kernels
# (``allocation_gaussian_rdp_kernel``, ``allocation_add_rdp_kernel``) are not
# public; ``local_epsilon`` is ``jaxacct.mechanisms.Gaussian(sigma / sqrt(kE))
# .epsilon(delta)``; ``equivalent_sigma`` and ``self_composed`` are steps of
# :func:`fixed_bins_pld_epsilon`. One method's bound is :func:`epsilon` /
# :func:`delta` with ``methods=(name,)`` (and ``method_options``); the steps
# of the methods (the Thm 4.6 gamma and round PLDs, the Thm 4.1 rate, the
# Thm 4.2 tail) live in
# ``_bounds`` and ``_recursive``. The add direction's RDP is
# :func:`allocation_add_rdp` (exact, by quadrature); the ``"direct_add"``
# method gives the same bound as a profile.
__all__ = [
    # front doors (best of the methods, or one with ``methods=(name,)``) and the RDP curve
    "epsilon", "delta", "allocation_rdp",
    # RDP of one allocation round (remove: Thm 4.8; add: quadrature; jittable)
    "allocation_remove_rdp", "allocation_remove_rdp_from_moments", "allocation_add_rdp",
    # fixed bins reused every epoch
    "fixed_bins_pld_epsilon", "fixed_bins_pld_delta",
    # diagnostics (estimates and provable lower bounds, not accountants)
    "delta_monte_carlo", "delta_lower_bound", "true_allocation_delta_monte_carlo",
    "true_allocation_epsilon_monte_carlo",
    # the tight allocation PLD and the sum-law kernels
    "pld", "sum_law",
]

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
