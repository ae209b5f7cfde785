"""Pairwise and t-fold sums of the allocation laws: the kernels, public for tests and checks.

The kernels live in :mod:`jaxacct.allocation._sum_law` (mathematics in
:mod:`jaxacct.allocation.pld`); this module names the ones a test or a user
checking the construction needs: the one-step laws (and ``one_steps``, their
NumPy twin batched over lanes, which the law builder uses), the t-fold sum
laws with their ``method`` switch ("fast", the default, or "reference", the
O(n^2) oracle of the former vmapped pair of sums), and the pairwise sums. All
but ``one_steps`` are jittable; all need float64 (``jax.enable_x64``); ``n``
and ``method`` are static. ``steps_laws_host`` (with ``sum_law_upper_host``,
``sum_law_lower_host``) is the NumPy twin of the jitted round-law builder
``steps_laws_batch``: the same FinalLaws for concrete input, no compiled program.
"""

from jaxacct.allocation._one_step import Steps, one_steps
from jaxacct.allocation._pld_laws import (FinalLaws, delta_batch, eps_batch, laws_batch,
                                          steps_laws_batch, steps_laws_host)
from jaxacct.allocation._sum_law import (METHODS, PIECES, Lattice, LowerLaw, UpperLaw,
                                         conv_lower, conv_lower_pair, conv_upper,
                                         conv_upper_pair, gaussian_one_step,
                                         laplace_one_step, sum_law_lower, sum_law_upper)
from jaxacct.allocation._sum_law_host import sum_law_lower_host, sum_law_upper_host

__all__ = ["Lattice", "LowerLaw", "conv_lower", "conv_lower_pair", "conv_upper",
           "conv_upper_pair", "gaussian_one_step", "laplace_one_step", "one_steps",
           "sum_law_lower", "sum_law_upper", "FinalLaws", "delta_batch", "eps_batch",
           "laws_batch", "steps_laws_batch", "steps_laws_host", "sum_law_lower_host"]
