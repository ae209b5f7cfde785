r"""Base (non-amplified) mechanisms: values that say what each one knows, and RDP kernels.

**Values** (:class:`Gaussian`, :class:`Laplace`, :class:`RandomizedResponse`,
:class:`EpsilonDelta`): small frozen, hashable descriptions (static pytrees:
they pass through ``jit`` as static data), checked when built, each with the
same methods:

* ``rdp(orders)`` -- exact Renyi DP curve (both directions);
* ``delta(epsilon)`` / ``epsilon(delta)`` -- the exact privacy profile of one
  use (``DeltaResult`` / ``EpsilonResult``, ``bound="exact"``);
* ``pld(*, value_discretization_interval, pessimistic=True)`` -- a
  ``jaxacct.pld.PairPLD`` (remove, add) through ``jaxacct.pld``'s
  constructors: dominating (upper) when pessimistic, optimistic (lower) else;
* ``event()`` -- the ``jaxacct.accounting.events`` event with this pair;
* ``one_step_law(n, tail)`` -- where random allocation has one (Gaussian,
  Laplace), its one-step laws (``jaxacct.allocation.sum_law.one_steps``).

The accountant (``jaxacct.accounting``) maps each base event to its value and
asks the value, so this module is the one place that says which kernels
belong to which mechanism.

**Kernels** (``gaussian_rdp``, ``laplace_rdp``, ``pure_dp_rdp``): the
vmappable sweep API. They take ``orders`` (1-D, shape (A,)) and a parameter
array of any shape S and return float64 of shape ``S + (A,)``. Eagerly called
with concrete input they validate it and run in float64 (see
:mod:`jaxacct._core.dtype`); under a user's ``jit`` they need x64 enabled, and
invalid lanes give NaN.
"""

from typing import TYPE_CHECKING

from jaxacct._core.lazy import lazy_exports as _lazy_exports

# Imported on first access (PEP 562): the kernels load jax only; the values
# also load ``jaxacct.pld`` and the allocation one-step laws.
_LAZY = {
    "Gaussian": ("jaxacct.mechanisms._values", "Gaussian"),
    "Laplace": ("jaxacct.mechanisms._values", "Laplace"),
    "RandomizedResponse": ("jaxacct.mechanisms._values", "RandomizedResponse"),
    "EpsilonDelta": ("jaxacct.mechanisms._values", "EpsilonDelta"),
    "gaussian_rdp": ("jaxacct._core.gaussian", "gaussian_rdp"),
    "laplace_rdp": ("jaxacct.mechanisms._kernels", "laplace_rdp"),
    "pure_dp_rdp": ("jaxacct.mechanisms._kernels", "pure_dp_rdp"),
    "randomized_response_rdp": ("jaxacct.mechanisms._kernels", "randomized_response_rdp"),
}

if TYPE_CHECKING:
  from jaxacct._core.gaussian import gaussian_rdp
  from jaxacct.mechanisms._kernels import laplace_rdp, pure_dp_rdp, randomized_response_rdp
  from jaxacct.mechanisms._values import EpsilonDelta, Gaussian, Laplace, RandomizedResponse

# the values and the kernels defined here; ``gaussian_rdp`` (from jaxacct._core)
# and ``randomized_response_rdp`` (binary randomized response: ``pure_dp_rdp``)
# resolve here too and are listed at the top level (``jaxacct.__all__``)
__all__ = ["Gaussian", "Laplace", "RandomizedResponse", "EpsilonDelta", "laplace_rdp",
           "pure_dp_rdp"]

__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals())
