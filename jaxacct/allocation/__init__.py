r"""Random allocation ("balls-in-bins"): each example is used in exactly k of
t steps per epoch, chosen uniformly at random (Feldman & Shenfeld,
"Privacy amplification by random allocation", arXiv:2502.08202v3).

Front doors: :func:`epsilon` and :func:`delta` return the best valid bound
(max over the add/remove directions of the min over methods) and name the
method that won. Sigma calibration: :func:`jaxacct.calibrate` of a
``jaxacct.accounting.events.RandomAllocationDpEvent`` (tight allocation PLD).

k-out-of-t over E epochs is accounted as m = kE compositions of 1-out-of-t'
allocation, t' = floor(t/k) (Lemma 3.2; valid, loose for large k).

Epochs: ``fresh_each_epoch=True`` (default) accounts a *new* k-of-t draw per
example every epoch (``jaxacct.sampling.BallsInBinsSampler``);
``fresh_each_epoch=False`` accounts *fixed* bins reused every epoch (jax_privacy
2.0 ``BallsInBinsSampling(iterations=t*E, cycle_length=t)``), which is exactly
one epoch at sigma / sqrt(E) (:func:`fixed_bins_pld_epsilon`). Accounting
a fixed-bin sampler as fresh draws under-reports epsilon.

Methods (``methods=`` keyword), per direction:

=================  ==========  ===========================================  =====
name               directions  source                                       bound
=================  ==========  ===========================================  =====
``rdp_direct``     remove      Thm 4.8 / Cor 4.10 (power series), x m,      upper
                               Canonne et al. conversion (exact RDP)
``rdp_add``        add         exact add-direction RDP (``add_rdp``,        upper
                               quadrature; not in the paper), x m
``direct_add``     add         Thm 4.9 / Cor 4.10, Gaussian sigma sqrt(t'/m)  upper
                               with the loss shift m(1-1/t')/(2 sigma^2)
``decomposition``  both        Thm 4.6 on the Poisson(1/t) profile from     upper
                               its RDP (``jaxacct.poisson``); k = E = 1
``decomposition_pld``  both    Thm 4.6 on the Poisson(1/t) PLD           upper
                               (``jaxacct.pld``, tighter, slower; opt-in)
``local``          both        no amplification: Gaussian sigma/sqrt(kE)    upper
``pld``            both        tight allocation PLD (``allocation.pld``)    upper
``truncated_poisson``  both    Thm 4.1 (Lemma 4.3, sinh Azuma range,      upper
                               optimised delta split; opt-in, seconds)
``recursive``      both        Thm 4.2, add profile bootstrapped by the     upper
                               allocation PLD / Thm 4.9 (opt-in, seconds)
=================  ==========  ===========================================  =====

One method alone: ``methods=(name,)`` (e.g. ``epsilon(..., methods=("recursive",),
direction="remove")``); ``details`` holds every method's value per direction.
``decomposition_pld`` also covers k > 1 / E > 1 (the Thm 4.6 pair as a PLD,
composed over the m rounds); ``truncated_poisson`` and ``recursive`` cover the
m rounds by a union bound. Their knobs (the paper's printed Azuma range and
the authors' delta split, tail fractions, bootstrap, PLD grid step) go through
``method_options={name: {keyword: value}}``.

Diagnostics (not accountants): :func:`delta_monte_carlo`
( estimate with confidence interval,
``delta_lower_bound`` provable lower bound).
"""

from jaxacct._core.dtype import public_surface
from jaxacct.allocation import pld, sum_law
from jaxacct.allocation._add_rdp import allocation_add_rdp
from jaxacct.allocation._bounds import check_scheme
from jaxacct.allocation._fixed_bins import fixed_bins_pld_delta, fixed_bins_pld_epsilon
from jaxacct.allocation._front import METHODS, allocation_rdp, delta, epsilon
from jaxacct.allocation._max_test import delta_lower_bound
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
# ``_bounds`` and ``_recursive`` (issue 29); the add-RDP upper bound of
# Thm 4.9 in RDP form is gone (``allocation_add_rdp`` is the exact add RDP,
# the ``"direct_add"`` method the same bound as a profile).
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
