"""Experimental bounds: published but NOT valid as general upper bounds.

Nothing here is used by the front doors. Each function states the
counterexample that keeps it out of the main namespace:

* Wang et al.'s per-randomizer variation-ratio rows (leftover weight > 0):
  :func:`row_parameters`, :func:`row_delta_unsafe`, :func:`row_epsilon_unsafe`.
* Liew et al.'s shuffled check-in as printed (Lemma 1, Approaches 1 and 2,
  Table 2) and the Thm 5 estimate: :func:`paper_lemma1_rdp`,
  :func:`paper_approach_rdp`, :func:`paper_table2_epsilon`,
  :func:`fmt_shuffle_dp`, :func:`subsampled_shuffle_gaussian_rdp_estimate`;
  ``UNSOUND`` is the ``bound`` string of their results.
"""

from jaxacct._core.dtype import public_surface
from jaxacct.experimental._check_in_paper import (UNSOUND, fmt_shuffle_dp, paper_approach_rdp,
                                                  paper_lemma1_rdp, paper_table2_epsilon,
                                                  subsampled_shuffle_gaussian_rdp_estimate)
from jaxacct.experimental._variation_ratio import (row_delta_unsafe, row_epsilon_unsafe,
                                                   row_parameters)

__all__ = [
    "row_parameters", "row_delta_unsafe", "row_epsilon_unsafe", "UNSOUND",
    "paper_lemma1_rdp", "paper_approach_rdp", "paper_table2_epsilon", "fmt_shuffle_dp",
    "subsampled_shuffle_gaussian_rdp_estimate",
]

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
