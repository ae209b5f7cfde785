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
  Laplace), its one-step laws (NumPy; the input of the allocation law builder).

The accountant (``jaxacct.accounting``) maps each base event to its value and
asks the value, so this module is the one place that says which kernels
belong to which mechanism.

**Kernels** (``laplace_rdp``, ``pure_dp_rdp``): the vmappable sweep API (the
Gaussian's curve is ``orders / (2 sigma^2)``: ``Gaussian(sigma).rdp(orders)``, or
that expression for an array of sigmas). They take ``orders`` (1-D, shape (A,)) and a parameter
array of any shape S and return float64 of shape ``S + (A,)``. Eagerly called
with concrete input they validate it and run in float64 (see
:mod:`jaxacct._core.dtype`); under a user's ``jit`` they need x64 enabled, and
invalid lanes give NaN.

**RDP conversion** (the one public place of these; RDP composes by
addition: ``sum(count * curve)`` on one order grid):
:func:`rdp_to_epsilon` / :func:`rdp_to_delta` convert a curve to
``EpsilonResult`` / ``DeltaResult`` (upper bounds; ``method="tight"``, the
default, or ``"classic"``).
"""

from typing import TYPE_CHECKING

from jaxacct._core.lazy import lazy_exports as _lazy_exports

# Imported on first access (PEP 562): the kernels load jax only; the values
# also load ``jaxacct.pld`` and the allocation one-step laws.
_LAZY = {
    **{n: ("jaxacct.mechanisms._values", n)
       for n in ("Gaussian", "Laplace", "RandomizedResponse", "EpsilonDelta")},
    **{n: ("jaxacct.mechanisms._kernels", n) for n in ("laplace_rdp", "pure_dp_rdp")},
    **{n: ("jaxacct._core.conversion", n) for n in ("rdp_to_delta", "rdp_to_epsilon")},
}

if TYPE_CHECKING:
  from jaxacct._core.conversion import rdp_to_delta, rdp_to_epsilon
  from jaxacct.mechanisms._kernels import laplace_rdp, pure_dp_rdp
  from jaxacct.mechanisms._values import EpsilonDelta, Gaussian, Laplace, RandomizedResponse

__all__ = ["Gaussian", "Laplace", "RandomizedResponse", "EpsilonDelta", "laplace_rdp",
           "pure_dp_rdp", "rdp_to_epsilon", "rdp_to_delta"]

__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals(), float64=True)
