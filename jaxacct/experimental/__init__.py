"""Experimental bounds: published but NOT valid as general upper bounds.

Nothing here is used by the front doors. Each module states the
counterexample that keeps it out of the main namespace:

* ``jaxacct.experimental.variation_ratio`` -- Wang et al.'s per-randomizer
  variation-ratio rows (leftover weight > 0).
* ``jaxacct.experimental.check_in_paper`` -- Liew et al.'s shuffled check-in
  as printed (Lemma 1, Approaches 1 and 2, Table 2) and the Thm 5 estimate.
"""
