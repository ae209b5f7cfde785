"""Pairwise and t-fold sums of the allocation laws: the kernels, public for tests and checks.

The kernels live in :mod:`jaxacct.allocation.pld._sum_law` (mathematics in
:mod:`jaxacct.allocation.pld`); this module names the ones a test or a user
checking the construction needs:

* the law types :class:`UpperLaw`, :class:`LowerLaw` and :class:`Lattice`;
  the one-step laws come from ``jaxacct.mechanisms.Gaussian(sigma).one_step_law(n,
  tail)`` / ``Laplace(b).one_step_law(...)`` (NumPy ``Steps``: ``UpperLaw(p, q0,
  minf)``, ``LowerLaw(a, g, 0)``, ``Lattice(lo, D, 0)`` of its lane; their
  jitted twins run inside :func:`laws_batch` on traced input);
* the pairwise sums :func:`conv_upper`, :func:`conv_lower` (``far`` and
  ``coarsen`` switches; the t-fold sums run a level's two sums as one fused
  pair of these kernels);
* the t-fold sum laws :func:`sum_law_upper`, :func:`sum_law_lower` with their
  ``method`` switch ("fast", the default: near band in the fused loop plus the
  far field; "loop": every diagonal in the fused loop; "reference": the
  O(n^2) oracle, the two sums one by one);
* (not listed) the host's accumulation of a pairwise sum's diagonals
  ``host_sums`` (each output cell in the jitted loop's order), held to a
  plain loop by its test; and ``shared_upper_laws`` (the upper round laws of
  several t on the host, levels of common leading bits once);
* the round laws of lanes :func:`laws_batch` (one-step laws on the host, then
  the jitted round-law builder, or with ``host=True`` the same kernels
  evaluated in NumPy, ``ns = HOST`` of :mod:`jaxacct._core.namespace`: one
  text, the same FinalLaws for concrete input, no compiled program; with
  ``host="loops"`` the upper sums' near-band loops as one small compiled
  program, bit for bit NumPy's, which host laws then use too) and their
  one-round queries :func:`eps_batch`, :func:`delta_batch`
  (``laws_batch(..., aot="executable")``: the law program compiled and not
  run, for counting what it executes).

All are jittable (``laws_batch(host=True)`` aside); all need float64
(``jax.enable_x64``); ``n`` and ``method`` are static. The host path is
described in docs/bounds/allocation_pld.md ("The host path").
"""

from jaxacct._core.dtype import public_surface
from jaxacct.allocation.pld._host_rows import host_sums
from jaxacct.allocation.pld._laws import delta_batch, eps_batch, laws_batch, shared_upper_laws
from jaxacct.allocation.pld._law_types import Lattice, LowerLaw, UpperLaw
from jaxacct.allocation.pld._sum_law import conv_lower, conv_upper, sum_law_lower, sum_law_upper

__all__ = ["Lattice", "LowerLaw", "UpperLaw", "conv_lower", "conv_upper", "sum_law_lower",
           "sum_law_upper", "laws_batch", "eps_batch", "delta_batch"]

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
