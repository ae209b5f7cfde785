r"""Amplification by shuffling: the tightest VALID bound for what you declare.

Front door: :func:`epsilon` / :func:`delta` (replacement neighbours, both
directions). The caller declares the local randomizer:

Proofs and sources: docs/bounds/shuffle.md ("Bounds and proofs /
Shuffling").
"""

from jaxacct._core.dtype import public_surface
from jaxacct.shuffle._check_in import check_in_epsilon, check_in_gaussian_epsilon
from jaxacct.shuffle._clones import (clone_delta, clone_epsilon,
                                    clone_epsilon_approx_ldp,
                                    clone_epsilon_closed_form, clone_rdp,
                                    krr_epsilon_closed_form, rr2_lower_delta,
                                    rr2_lower_epsilon)
from jaxacct.shuffle._exact import (MAX_EXACT_BINARY_N, binary_rr_delta,
                                   binary_rr_epsilon)
from jaxacct.shuffle._front import delta, dominating_pairs, epsilon
from jaxacct.shuffle._girgis import girgis_epsilon
from jaxacct.shuffle._multinomial import chen_epsilon
from jaxacct.shuffle._subsampling import (amplify_epsilon_delta,
                                         subsampled_delta, subsampled_epsilon)
from jaxacct.shuffle._variation_ratio import (check_blanket_condition,
                                             stronger_clone_delta,
                                             stronger_clone_epsilon,
                                             stronger_clone_rdp)
from jaxacct.shuffle import bounds

__all__ = [
    "epsilon", "delta", "dominating_pairs", "subsampled_epsilon",
    "subsampled_delta", "amplify_epsilon_delta", "check_blanket_condition",
    "MAX_EXACT_BINARY_N", "clone_epsilon", "clone_delta",
    "clone_epsilon_closed_form", "clone_epsilon_approx_ldp", "clone_rdp",
    "stronger_clone_epsilon", "stronger_clone_delta", "stronger_clone_rdp",
    "rr2_lower_epsilon", "rr2_lower_delta", "krr_epsilon_closed_form",
    "binary_rr_epsilon", "binary_rr_delta", "chen_epsilon", "girgis_epsilon",
    "check_in_epsilon", "check_in_gaussian_epsilon",
]

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
