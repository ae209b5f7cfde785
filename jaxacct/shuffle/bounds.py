r"""Every shuffling bound by its source: the sweep and reproduction API.

:mod:`jaxacct.shuffle` answers "what is epsilon for my randomizer" with the
best valid bound (its front door picks among the functions here). This module
lists the per-theorem curves it picks from, for sweeps (the RDP kernels are
vectorised and jittable) and for reproducing the papers' tables:

* FMT'21 (arXiv:2012.12803): Thm 4.1's numerical k-RR pair
  :func:`krr_thm41_delta` / :func:`krr_thm41_epsilon`.
* Wang et al. (arXiv:2304.05007v5): the variation-ratio pair
  :func:`variation_ratio_pair_delta` / :func:`variation_ratio_pair_epsilon`
  (reference kernel) and its lower bounds :func:`variation_ratio_lower_delta`
  / :func:`variation_ratio_lower_epsilon` (Thm 5.1; the k-RR row is
  ``(p, beta, q0 = q1) = (e^eps0, (e^eps0 - 1) / (e^eps0 + k - 1), e^eps0)``).
* Exact shuffled laws: :func:`worst_case_delta`, :func:`enumerate_delta`
  (small n, any randomizer matrix) and :func:`pair_pmfs` (the variation-ratio
  pair as probability vectors, e.g. for another PLD library); the shuffled
  binary-RR laws are ``randomizer="binary_rr"`` of :func:`jaxacct.shuffle.epsilon`.
* Chen et al. (arXiv:2401.04306v1): :func:`chen_exact_rdp`,
  :func:`chen_asymptotic_rdp`, :func:`chen_gdp_mu` (Table 1's other rows:
  Girgis et al. Thm 2 / Cor. 2 and EFM19 below).
* Girgis et al. (arXiv:2105.05180v1): :func:`girgis_thm1_rdp`,
  :func:`girgis_cor1_rdp`, :func:`girgis_thm2_rdp`, :func:`girgis_cor2_rdp`,
  :func:`girgis_mixture_rdp`, :func:`girgis_lower_rdp`, :func:`efm19_rdp`,
  :func:`girgis_subsampled_rdp`.
* Shuffled check-in (Liew et al., arXiv:2206.03151v2): the RDP curves
  :func:`check_in_ldp_rdp`, :func:`check_in_ldp_rdp_clones`,
  :func:`check_in_gaussian_rdp`, :func:`check_in_secagg_gaussian_rdp` (upper),
  :func:`check_in_gaussian_rdp_lower`, :func:`shuffle_gaussian_rdp_lower`
  (lower; compose and convert a curve with ``jaxacct.mechanisms.rdp_to_epsilon``)
  and Thm 1's :func:`check_in_first_cut_dp`, :func:`check_in_first_cut_epsilon`.
* ``parse_randomizer`` (not public: ``jaxacct.tracking`` reads the randomizer
  declaration of :func:`jaxacct.shuffle.epsilon` with it) and ``binary_rr_pmfs``
  (not public: ``jaxacct.accounting`` builds the shuffled binary-RR pair with
  it) are importable here.

Each function's docstring gives its source, theorem and ``Bound:``.
"""

from jaxacct._core.dtype import public_surface
from jaxacct.shuffle._check_in import (check_in_first_cut_dp, check_in_first_cut_epsilon,
                                       check_in_gaussian_rdp, check_in_ldp_rdp,
                                       check_in_ldp_rdp_clones, check_in_secagg_gaussian_rdp)
from jaxacct.shuffle._check_in_lower import (check_in_gaussian_rdp_lower,
                                             shuffle_gaussian_rdp_lower)
from jaxacct.shuffle._clones import krr_thm41_delta, krr_thm41_epsilon
from jaxacct.shuffle._exact import (binary_rr_pmfs, enumerate_delta, pair_pmfs,
                                    worst_case_delta)
from jaxacct.shuffle._girgis import (efm19_rdp, girgis_cor1_rdp, girgis_cor2_rdp,
                                     girgis_lower_rdp, girgis_mixture_rdp,
                                     girgis_subsampled_rdp, girgis_thm1_rdp,
                                     girgis_thm2_rdp)
from jaxacct.shuffle._multinomial import chen_asymptotic_rdp, chen_exact_rdp, chen_gdp_mu
from jaxacct.shuffle._pair_reference import (variation_ratio_pair_delta,
                                             variation_ratio_pair_epsilon)
from jaxacct.shuffle._variation_ratio import (variation_ratio_lower_delta,
                                              variation_ratio_lower_epsilon)

__all__ = [
    "krr_thm41_delta", "krr_thm41_epsilon",
    "variation_ratio_pair_delta", "variation_ratio_pair_epsilon",
    "variation_ratio_lower_delta", "variation_ratio_lower_epsilon",
    "worst_case_delta", "enumerate_delta", "pair_pmfs",
    "chen_exact_rdp", "chen_asymptotic_rdp", "chen_gdp_mu",
    "girgis_thm1_rdp", "girgis_cor1_rdp", "girgis_thm2_rdp", "girgis_cor2_rdp",
    "girgis_mixture_rdp", "girgis_lower_rdp", "efm19_rdp", "girgis_subsampled_rdp",
    "check_in_ldp_rdp", "check_in_ldp_rdp_clones", "check_in_gaussian_rdp",
    "check_in_secagg_gaussian_rdp", "check_in_gaussian_rdp_lower",
    "shuffle_gaussian_rdp_lower", "check_in_first_cut_dp", "check_in_first_cut_epsilon",
]

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
