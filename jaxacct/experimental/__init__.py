"""Experimental bounds: published but NOT valid as general upper bounds.

Nothing here is used by the front doors. Each function states the
counterexample that keeps it out of the main namespace:

* Wang et al.'s per-randomizer variation-ratio rows (leftover weight > 0):
  :func:`row_delta_unsafe`, :func:`row_epsilon_unsafe` (a row's ``(p, beta,
  q)`` is computed inside from ``mechanism`` and ``eps0``).
* Liew et al.'s shuffled check-in as printed (Lemma 1, Approaches 1 and 2,
  Table 2) and the Thm 5 estimate: :func:`paper_lemma1_rdp`,
  :func:`paper_approach_rdp`, :func:`paper_table2_epsilon` (FMT's Thm 3.8 as
  printed there is a step of the approaches),
  :func:`subsampled_shuffle_gaussian_rdp_estimate`; their results carry
  ``bound="estimate"``.
"""

from jaxacct._core.dtype import public_surface
from jaxacct.experimental._check_in_paper import (paper_approach_rdp, paper_lemma1_rdp,
                                                  paper_table2_epsilon,
                                                  subsampled_shuffle_gaussian_rdp_estimate)
from jaxacct.experimental._variation_ratio import row_delta_unsafe, row_epsilon_unsafe

__all__ = [
    "row_delta_unsafe", "row_epsilon_unsafe",
    "paper_lemma1_rdp", "paper_approach_rdp", "paper_table2_epsilon",
    "subsampled_shuffle_gaussian_rdp_estimate",
]

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
