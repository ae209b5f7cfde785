r"""Amplification by shuffling: the tightest VALID bound for what you declare.

Front door: :func:`epsilon` / :func:`delta` (replacement neighbours, both
directions). The caller declares the local randomizer:

* ``"generic"``: any (also adaptive) eps0-LDP randomizer. Upper bound: the
  FMT'21 clone pair (Feldman, McMillan, Talwar, arXiv:2012.12803, Thm 3.2),
  :func:`clone_epsilon` / :func:`clone_delta`.
* ``"blanket"``: an eps0-LDP randomizer meeting the pointwise blanket
  condition ``R(x)[y] >= (R(x0)[y] + R(x1)[y]) / (e^eps0 + 1)`` (check a matrix
  with :func:`check_blanket_condition`). Upper bound: the stronger-clone pair
  (Wang et al., arXiv:2304.05007v5 generic row; FMT22 arXiv:2208.04591),
  :func:`stronger_clone_epsilon` / :func:`stronger_clone_delta`.
* ``"binary_rr"``: binary randomized response. Exact shuffled profile (max
  over all datasets) for ``n <= MAX_EXACT_BINARY_N``; beyond, the stronger
  clone upper bound (binary RR meets the blanket condition) and a lower bound.
* ``("k_rr", k)``: k-ary randomized response. Upper: min of the stronger clone
  (k-RR meets the blanket condition), the clone pair, FMT'21 Thm 4.1's
  numerical k-RR pair (while its (m, z) window has <= 3e5 cells) and Cor 4.2's
  closed form;
  no exact low-dimensional reduction is implemented (said in ``details``);
  lower: the variation-ratio k-RR pair (Thm 5.1, exact for others at a third
  value).

``rounds = T > 1`` composes the per-round dominating pair: PLD of the discrete
pair (``jaxacct.pld``, pessimistic; while the pair has <= 4e6 atoms) and RDP
of the pair (summed, converted; n <= 2e4), plus the generic RDP bounds of the
sibling bounds (Chen et al. :func:`chen_epsilon` -- the clone pair's
RDP with certified binning, any n -- and Girgis et al. :func:`girgis_epsilon`
Thm 1); ``method="best"`` returns the smallest (all are upper bounds).
Users sampled m of n without replacement, then shuffled:
:func:`subsampled_epsilon` / :func:`subsampled_delta`. Shuffled check-in
(:func:`check_in_epsilon`, :func:`check_in_gaussian_epsilon`) is a different
mechanism (needs the check-in probability) and is not routed here.

Every bound the front door picks from, by its paper and theorem (RDP curves
for sweeps, the exact laws, the lower bounds): :mod:`jaxacct.shuffle.bounds`.
The implementation lives in private modules (``_clones``, ``_front``, ...).

Returns :class:`jaxacct._core.results.EpsilonResult` / ``DeltaResult`` with
``method`` (which bound won), ``bound`` (``"exact"``, ``"upper"``,
``"lower"``) and ``details`` (every value computed, with its bound type; a
bound that could not be computed is listed as ``(nan, "failed: <error>")`` --
never dropped silently -- and is never picked).  ``bound="lower_generic"``
(key ``generic_worst_case_lower``) is a lower bound on generic theorems for
the declared class, not on the user's randomizer (see :func:`epsilon`).
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
