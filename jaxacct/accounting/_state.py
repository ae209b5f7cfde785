"""JSON state of an accountant: its settings and the events it composed.

``state_dict(acc)`` returns plain JSON types (dicts, lists, str, float, int,
bool, None); ``decode_state(acc, sd)`` gives back the events, which
``PLDAccountant.load_state_dict`` composes again (the numbers are
recomputed, never stored).

Event encoding: ``{"event": "<module>.<class>", "fields": {...}}``.
jaxacct's events are dataclasses, dp_accounting's are attrs classes; both
are encoded field by field (nested events recursively). Tuples become
``{"tuple": [...]}``; a ``jaxacct.pld`` PLD ``{"pld": {...}}`` with its
probabilities as a list; a ``PairPLD`` ``{"pair_pld": [remove, add]}``.
Only event classes from ``jaxacct.`` or ``dp_accounting.`` modules that are
``DpEvent`` subclasses are rebuilt (loading never imports anything else).
"""

from __future__ import annotations

import dataclasses
import importlib
import math

import jax.numpy as jnp
import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import dp_bridge
from jaxacct.accounting import _composition

FORMAT = "jaxacct.accounting.state/1"
_ALLOWED_PREFIXES = ("jaxacct.", "dp_accounting.")
# modules that events were saved from and that have moved: where they are now
_MOVED = {"jaxacct.accounting._optional": "jaxacct.accounting.events"}   # stand-ins


def _fields(event):
  if dataclasses.is_dataclass(event):
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
  try:
    import attr   # here: dp_accounting's events are attrs classes; attr is optional
    if attr.has(type(event)):
      return {a.name: getattr(event, a.name) for a in attr.fields(type(event))}
  except ImportError:  # pragma: no cover
    pass
  raise ValueError(f"cannot serialise event of type {type(event).__name__} "
                   "(neither a dataclass nor an attrs class).")


def _encode(v):
  if isinstance(v, dp_bridge.DpEvent):
    return encode_event(v)
  if isinstance(v, jpld.PairPLD):
    return {"pair_pld": [_encode(v.remove), _encode(v.add)]}
  if isinstance(v, jpld.PLD):
    return {"pld": {"probs": np.asarray(v.probs, np.float64).tolist(),
                    "offset": int(v.offset), "step": float(v.step),
                    "inf_mass": float(v.inf_mass),
                    "pessimistic": bool(v.pessimistic)}}
  if isinstance(v, tuple):
    return {"tuple": [_encode(x) for x in v]}
  if isinstance(v, list):
    return [_encode(x) for x in v]
  if isinstance(v, (bool, np.bool_)):
    return bool(v)
  if isinstance(v, (int, np.integer)):
    return int(v)
  if isinstance(v, (float, np.floating)):
    f = float(v)
    return f if math.isfinite(f) else {"float": repr(f)}
  if v is None or isinstance(v, str):
    return v
  raise ValueError(f"cannot serialise a field value of type {type(v).__name__}.")


def encode_event(event) -> dict:
  """JSON form of an event (jaxacct's or dp_accounting's)."""
  cls = type(event)
  return {"event": f"{cls.__module__}.{cls.__qualname__}",
          "fields": {k: _encode(v) for k, v in _fields(event).items()}}


def _decode_pld(d):
  """A :class:`jaxacct.pld.PLD` from its encoded dict (float64 arrays)."""
  return jpld.PLD(jnp.asarray(np.asarray(d["probs"], np.float64)),
                  int(d["offset"]), float(d["step"]),
                  jnp.asarray(float(d["inf_mass"]), jnp.float64),
                  bool(d["pessimistic"]))


def _decode(v):
  if isinstance(v, list):
    return [_decode(x) for x in v]
  if isinstance(v, dict):
    if "event" in v:
      return decode_event(v)
    if "tuple" in v:
      return tuple(_decode(x) for x in v["tuple"])
    if "float" in v:
      return float(v["float"])
    if "pld" in v:
      return _decode_pld(v["pld"])
    if "pair_pld" in v:
      r, a = v["pair_pld"]
      return jpld.PairPLD(_decode(r), _decode(a))
    raise ValueError(f"unknown encoded value with keys {sorted(v)}.")
  return v


def decode_event(d: dict):
  """Rebuilds an event from :func:`encode_event`'s output."""
  name = d.get("event")
  if not isinstance(name, str) or "." not in name:
    raise ValueError(f"bad event entry: {d!r}.")
  mod, _, cls_name = name.rpartition(".")
  mod = _MOVED.get(mod, mod)
  if not mod.startswith(_ALLOWED_PREFIXES):
    raise ValueError(f"refusing to load event class {name!r}: only jaxacct "
                     "and dp_accounting events are rebuilt.")
  cls = getattr(importlib.import_module(mod), cls_name, None)
  if not (isinstance(cls, type) and issubclass(cls, dp_bridge.DpEvent)):
    raise ValueError(f"{name!r} is not a DpEvent class.")
  fields = {k: _decode(v) for k, v in d.get("fields", {}).items()}
  return cls(**fields)


def state_dict(acc) -> dict:
  """Settings and the composed (event, count) list of ``acc``, as JSON types."""
  return {
      "format": FORMAT,
      "accountant": type(acc).__name__,
      "neighboring_relation": _composition.relation_name(acc.neighboring_relation),
      "value_discretization_interval": acc.value_discretization_interval,
      "tail_mass": acc.tail_mass,
      "truncated": acc.truncated,
      "shortcuts": acc.shortcuts,
      "events": [{"event": encode_event(e), "count": int(n)}
                 for e, n in acc.events],
  }


def decode_state(acc, sd: dict):
  """The ``[(event, count)]`` of a state dict, checked against ``acc``'s settings.

  The settings (relation, grid step, tail mass, and where recorded the
  ``truncated`` and ``shortcuts`` switches) must equal ``acc``'s: a state is
  a ledger for one accountant configuration. A state written before the
  switches were recorded reads as the defaults ("jaxacct", True).
  """
  if not isinstance(sd, dict) or sd.get("format") != FORMAT:
    raise ValueError(f"not a {FORMAT} state dict.")
  rel = _composition.relation_name(acc.neighboring_relation)
  mine = (rel, float(acc.value_discretization_interval), float(acc.tail_mass))
  theirs = (sd.get("neighboring_relation"),
            float(sd.get("value_discretization_interval", float("nan"))),
            float(sd.get("tail_mass", float("nan"))))
  mine += (acc.truncated, bool(acc.shortcuts))
  theirs += (sd.get("truncated", "jaxacct"), bool(sd.get("shortcuts", True)))
  if mine != theirs:
    raise ValueError(f"state dict settings {theirs} differ from this "
                     f"accountant's {mine} (neighboring_relation, "
                     "value_discretization_interval, tail_mass, truncated, shortcuts).")
  return [(decode_event(item["event"]), int(item["count"]))
          for item in sd.get("events", [])]
