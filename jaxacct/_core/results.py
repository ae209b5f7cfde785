"""Result types returned by the eager front doors."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional


class EpsilonResult(NamedTuple):
  """An epsilon at a given delta, with where it came from.

  Attributes:
    epsilon: float64 array (or float).
    delta: the delta it holds at.
    method: name of the bound that produced it (e.g. ``"rdp_direct"``).
    bound: ``"exact"``, ``"upper"`` or ``"lower"``.
    order: the Renyi order that won, when an RDP method won (else None).
    details: optional dict of per-method values.
  """
  epsilon: Any
  delta: Any
  method: str
  bound: str
  order: Optional[Any] = None
  details: Optional[dict] = None


class DeltaResult(NamedTuple):
  """A delta at a given epsilon, with where it came from (see EpsilonResult)."""
  delta: Any
  epsilon: Any
  method: str
  bound: str
  order: Optional[Any] = None
  details: Optional[dict] = None
