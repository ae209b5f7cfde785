"""The two result types every public epsilon/delta query returns.

``EpsilonResult`` (an epsilon at a given delta) and ``DeltaResult`` (a delta
at a given epsilon) are NamedTuples registered as JAX pytrees: the numbers
(``epsilon``, ``delta``, ``order``, ``lower``, ``by_direction``) are children,
so a result passes through ``jit`` and ``vmap``; ``method``, ``bound`` and
``details`` are static auxiliary data.

``bound`` is one word of a closed vocabulary (:data:`BOUNDS`):

* ``"exact"``    -- the value itself (to floating-point rounding);
* ``"upper"``    -- a certified upper bound (the accountant's guarantee);
* ``"lower"``    -- a certified lower bound (no mechanism of this kind is more
  private than this);
* ``"estimate"`` -- neither (Monte Carlo, a heuristic, a paper's estimate).

Where a method brackets the truth, ``epsilon`` is the upper end and ``lower``
the certified lower end; ``upper`` is an alias of ``epsilon`` (``delta`` for
a DeltaResult), so ``r.upper, r.lower`` reads a bracket. ``by_direction``
maps ``"remove"`` / ``"add"`` to ``(upper, lower)`` where the directions
differ (``lower`` may be None).
"""

from __future__ import annotations

import collections

import jax
import numpy as np

BOUNDS = ("exact", "upper", "lower", "estimate")


def host_f64(x):
  """A host (numpy) result field: ``np.float64`` for a scalar (0-d) value,
  else a float64 ndarray; the value itself is unchanged."""
  a = np.asarray(x, np.float64)
  return a if a.ndim else np.float64(a)


def check_bound(bound: str) -> str:
  """Returns ``bound`` if it is one of :data:`BOUNDS`, else raises ValueError."""
  if bound not in BOUNDS:
    raise ValueError(f"bound must be one of {BOUNDS}; got {bound!r}.")
  return bound


class _Static:
  """Holds ``details`` as static pytree data (compared by identity)."""
  __slots__ = ("value",)

  def __init__(self, value):
    self.value = value

  def __eq__(self, other):
    return isinstance(other, _Static) and other.value is self.value

  def __hash__(self):
    return id(self.value)


_FIELDS = ("method", "bound", "order", "details", "lower", "by_direction")


def _result_type(name: str, value: str, at: str, doc: str):
  """A NamedTuple ``(value, at, method, bound, order, details, lower,
  by_direction)`` whose constructor checks ``bound`` and whose ``upper`` is an
  alias of ``value``."""
  base = collections.namedtuple(f"_{name}Fields", (value, at) + _FIELDS,
                                defaults=(None,) * 4)

  def __new__(cls, *args, **kwargs):
    obj = base.__new__(cls, *args, **kwargs)
    check_bound(obj.bound)
    return obj

  upper = property(lambda self: self[0], doc=f"Alias of ``{value}`` (the upper end).")
  return type(name, (base,), {"__slots__": (), "__new__": __new__, "upper": upper,
                              "__doc__": doc, "__module__": __name__})


EpsilonResult = _result_type("EpsilonResult", "epsilon", "delta", """An epsilon at a given delta, with where it came from.

  Attributes:
    epsilon: float64 array; the value (the upper end of a bracket).
    delta: the delta it holds at.
    method: name of the bound that produced it (e.g. ``"rdp_direct"``).
    bound: one of :data:`BOUNDS`.
    order: the Renyi order that won, when an RDP method won (else None).
    details: optional dict of per-method values (static data).
    lower: certified lower bound where the method brackets (else None).
    by_direction: ``{"remove": (upper, lower), "add": (upper, lower)}`` where
      the directions differ (else None).
    upper: alias of ``epsilon``.
  """)

DeltaResult = _result_type("DeltaResult", "delta", "epsilon", """A delta at a given epsilon, with where it came from.

  Attributes:
    delta: float64 array; the value (the upper end of a bracket).
    epsilon: the epsilon it holds at.
    method, bound, order, details, lower, by_direction: as in
      :class:`EpsilonResult`; ``upper`` is an alias of ``delta``.
  """)


def _flatten(r):
  children = (r[0], r[1], r.order, r.lower, r.by_direction)
  return children, (r.method, r.bound, _Static(r.details))


def _unflatten(cls):
  def build(aux, children):
    a, b, order, lower, by_direction = children
    method, bound, details = aux
    return tuple.__new__(cls, (a, b, method, bound, order, details.value, lower,
                               by_direction))
  return build


for _cls in (EpsilonResult, DeltaResult):
  jax.tree_util.register_pytree_node(_cls, _flatten, _unflatten(_cls))
