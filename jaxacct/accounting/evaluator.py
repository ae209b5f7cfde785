r"""The evaluator: the one desk that answers "what is the certified epsilon of this event?".

:func:`bracket` takes events and deltas and returns the certified upper epsilon, the
certified lower where one exists, and the method. One table (``DESKS``, :mod:`jaxacct.accounting._scheme_doors`) maps an
event family (:func:`jaxacct._core.events.family`) to its vectorised door, its final
rule and the source of its lower bound. A single question is the accountant's: the
scheme door it would ask (asked here directly for a leaf the door answers whole), else
the accountant itself; lanes of one family and key run the family's door together. dpsgd, calibrate, risk,
tracking and the data loaders ask here. Docs: docs/bounds/dpsgd.md.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, Optional

import numpy as np

from jaxacct._core import checks
from jaxacct._core.checks import WindowTooLarge
from jaxacct._core.lazy import LazyModule
from jaxacct import accounting, poisson
from jaxacct import pld as jpld
from jaxacct.accounting._final_rule import is_host, local_epsilon

if TYPE_CHECKING:
  from jaxacct._core import events
  from jaxacct.accounting import _scheme_doors as desks
else:   # imported at the first event: dp_accounting (when installed) comes with the events
  events = LazyModule("jaxacct._core.events")
  desks = LazyModule("jaxacct.accounting._scheme_doors")   # the desks (DESKS)


class Bracket(NamedTuple):
  """The evaluator's answer on flat float64 arrays, one entry per event.

  Attributes:
    upper: certified upper epsilon.
    lower: certified lower epsilon of the event's mechanism, or None where no
      lane has one (NaN for a lane without one).
    method: what computed ``upper``.
    details: per-family extras (``"lower_scope"``, ``"pld_upper"``, ...).
  """
  upper: np.ndarray
  lower: Optional[np.ndarray]
  method: str
  details: dict


def noise_scale(event):
  """``(family, key, sigma)`` when a desk answers ``event`` in lanes (Gaussian noise
  sigma), else None: the calibrator's lanes of one family and key."""
  f = events.family(event)
  if f.name not in desks.DESKS or f.sigma is None or (f.name == "allocation"
                                                and f.mechanism != "gaussian"):
    return None
  return f.name, f.key, f.sigma


def clt_rounds(family, key):
  """The desk's Gaussian-DP (CLT) model rounds (``Desk.rounds``)."""
  return desks.DESKS[family].rounds(key)


def rdp_upper(events_, delta) -> np.ndarray:
  """``poisson.epsilon(method="rdp")`` of Poisson-subsampled or plain Gaussian events,
  all lanes in one compiled call (looser than :func:`bracket`, faster for many)."""
  fams = [events.family(e) for e in events_]
  if any(f.name not in ("poisson", "gaussian") for f in fams):
    raise ValueError("accountant='rdp' takes Poisson-subsampled or plain Gaussian events "
                     "only; use accountant='pld' for the others.")
  q = np.array([f.key[0] if f.name == "poisson" else 1.0 for f in fams])
  T = np.array([f.key[1] if f.name == "poisson" else 1 for f in fams], np.float64)
  sig = np.array([f.sigma for f in fams])
  return np.asarray(poisson.epsilon(q=q, sigma=sig, num_steps=T, delta=delta).epsilon,
                    np.float64)


def upper(events_, delta, *, accountant: str = "pld", host=None, refused=None) -> np.ndarray:
  """Certified upper epsilon of each event: :func:`bracket`'s (``accountant="rdp"``:
  :func:`rdp_upper`). ``refused``: the value of a lane the PLD refuses
  (``WindowTooLarge``: a noise too small for its grid, or too many steps at it),
  for a search that reads it as infeasible (+inf); None raises the refusal."""
  if accountant == "rdp":
    return rdp_upper(events_, delta)
  try:
    return bracket(events_, delta, with_lower=False, host=host).upper
  except WindowTooLarge:
    if refused is None:
      raise
    if len(events_) == 1:
      return np.full(1, float(refused))
  return np.concatenate([upper([e], delta[i:i + 1], host=host, refused=refused)
                         for i, e in enumerate(events_)])


def relation_of(event) -> str:
  """The neighbouring relation ``event`` is accounted under: ``"REPLACE_ONE"``
  when a leaf is a fixed-size batch (the dataset size cannot change; the
  accountant refuses add/remove for it), else ``"ADD_OR_REMOVE_ONE"``."""
  k = events.kind(event)
  if k in ("without_replacement", "with_replacement"):
    return "REPLACE_ONE"
  subs = list(getattr(event, "events", None) or ()) if k == "composed" else (
      [event.event] if k == "self_composed" else [])
  return next((r for r in map(relation_of, subs) if r == "REPLACE_ONE"), "ADD_OR_REMOVE_ONE")


def _step_pair(event):
  """``(q, sigma, n, cap)`` of one subsampled-Gaussian step repeated n times (the
  per-step pair of :func:`grid_step`; cap: the coarsest grid, None for Poisson),
  or None for any other event."""
  f = events.family(event)
  if f.name == "poisson":
    return float(f.key[0]), float(f.sigma), int(f.key[1]), None
  n, inner = 1, event
  if events.kind(inner) == "self_composed":
    n, inner = int(inner.count), inner.event
  k = events.kind(inner)
  if k in ("without_replacement", "with_replacement") and events.kind(inner.event) == "gaussian":
    q = float(inner.sample_size) / float(inner.source_dataset_size)
    sigma = float(inner.event.noise_multiplier) / 2.0
  elif k == "truncated":
    q, sigma = float(inner.sampling_probability), float(inner.noise_multiplier) / 2.0
  else:
    return None
  if not (0.0 < q < 1.0 and sigma > 0.0 and n >= 1):
    return None
  return q, sigma, n, jpld.DEFAULT_STEP


def grid_step(event) -> Optional[float]:
  """The loss grid step of :func:`accountant_for` ``event`` (its
  ``value_discretization_interval``), or None: the accountant's default (1e-4).

  One subsampled-Gaussian step repeated n times gets the Poisson door's grid
  (:func:`jaxacct.pld.default_step`) of its per-step pair at no more than 10^4
  steps: ``(q, sigma)`` for Poisson sampling; ``(m / N, sigma / 2)`` for a
  fixed-size batch, drawn with or without replacement (replace-one neighbours move
  the sum by 2); ``(q, sigma / 2)`` for truncated Poisson (its truncated branch's
  noise). Past 10^4 steps that is a tenth of one step's loss spread, where the run's
  own grid left the lower at 0 (docs/bounds/dpsgd.md, "The loss grid"). The last two
  are never coarser than 1e-4 (where one step's loss is too wide for 1e-4 they are
  refused as before; Poisson, like its door, coarsens its grid instead), nor finer
  than one step's whole Gaussian branch allows in 4e6 points. Any grid gives
  certified bounds.
  """
  pair = _step_pair(event)
  if pair is None:
    return None
  q, sigma, n, cap = pair
  # those two steps' PLDs hold a whole Gaussian (at sigma / 2 here), held in 4e6 points
  span = None if cap is None else checks.gaussian_loss_span(sigma)
  h = jpld.default_step(sigma=sigma, q=q, num_steps=n, span=span)
  return h if cap is None else min(h, cap)


def lower_grid_step(event) -> Optional[float]:
  """A finer grid for the lower of :func:`accountant_for` ``event``, or None (its
  own grid serves).

  The lower pair's outcomes are merged onto grid values that their losses reach
  (:func:`jaxacct.accounting.fixed_size.without_replacement_pair`). One step's
  smallest loss is about ``log(1 - q)``: where :func:`grid_step` is at least
  ``-log(1 - q)``, no outcome lies below the grid value under a step's bulk, so the
  bulk's group cannot be completed and rounds down a cell, and over many steps the
  lower falls towards 0 while the upper is fine. This is two thirds of ``-log(1 -
  q)`` there, never finer than :func:`grid_step`'s 4e6 points a step allow; None
  where those points keep it at least ``-log(1 - q)``, which would not help
  (docs/bounds/dpsgd.md, "The lower's grid").
  """
  pair, h = _step_pair(event), grid_step(event)
  if pair is None or h is None:
    return None
  q, sigma, n, cap = pair
  span = None if cap is None else checks.gaussian_loss_span(sigma)
  smallest = -math.log1p(-q)
  fine = jpld.default_step(sigma=sigma, q=q, num_steps=n, span=span, at_most=smallest / 1.5)
  # none where the grid is already finer than the smallest loss (the bulk's group then
  # completes), or where the 4e6 points keep it wider: no help there
  return fine if h >= smallest > fine else None


def accountant_for(event, *, step: Optional[float] = None):
  """A fresh ``PLDAccountant`` under :func:`relation_of` ``event``, with it composed,
  on :func:`grid_step` ``event`` (the Poisson door's own grid for a run of one
  subsampled-Gaussian step: finer than the accountant's default where the privacy
  loss is narrow), or on ``step``."""
  rel = accounting.NeighboringRelation[relation_of(event)]
  h = grid_step(event) if step is None else step
  kw = {} if h is None else {"value_discretization_interval": h}
  return accounting.PLDAccountant(rel, **kw).compose(event)


def _accountant_answer(event, delta, with_lower):
  """The accountant's answer to one question: ``(upper, lower or NaN, method, scope)``.
  The lower is also read on :func:`lower_grid_step` where that is finer (the larger
  of the two certified lowers; the upper is the run's grid's)."""
  acc = accountant_for(event)
  if not with_lower:
    return float(acc.get_epsilon(delta)), np.nan, "", ""
  r = acc.get_epsilon_bounds(delta)
  lo = np.nan if r.lower is None else float(r.lower)
  h = lower_grid_step(event)
  if h is not None and not lo >= r.epsilon:
    try:
      fine = accountant_for(event, step=h).get_epsilon_bounds(delta)
    except WindowTooLarge:   # past the engines' windows: the run's grid's lower stands
      fine = None
    if fine is not None and fine.lower is not None:
      lo = min(max(0.0 if np.isnan(lo) else lo, float(fine.lower)), float(r.epsilon))
  return float(r.epsilon), lo, str(r.method), str((r.details or {}).get("lower_scope", ""))


def _leaf_door(event, fam, delta):
  """The door the accountant would ask for ``event`` composed once, where it
  answers upper and lower itself (a leaf of a desk with ``leaf_door``, delta in
  (0, 1)): the same ``SchemeDoor``, asked here without building the accountant.
  None: ask the accountant."""
  desk = desks.DESKS.get(fam.name)
  if (desk is None or not desk.leaf_door or not 0.0 < delta < 1.0
      or events.kind(event) in ("composed", "self_composed")):
    return None
  rel = accounting.NeighboringRelation[relation_of(event)]
  door = desk.door(event, 1, fam, rel, None)
  return door if door is not None and door.with_lower else None


_ANSWERS = {}   # (event, delta, with_lower) -> a question's answer, the last 512


def _remembered(event, delta, with_lower):
  """A question asked before (a calibration's last feasible point is asked again
  by the epsilon of the same run; an upper-only question reuses a full
  answer): ``(answer or None, memo key)``; the key is None for an event that
  does not hash (asked afresh, not remembered)."""
  try:
    full = _ANSWERS.get((event, delta, True))
  except TypeError:   # an unhashable event: asked afresh
    return None, None
  key = (event, delta, bool(with_lower))
  return (full if full is not None else _ANSWERS.get(key)), key


def _remember(memo, answer) -> None:
  if memo is not None:
    if len(_ANSWERS) >= 512:
      _ANSWERS.pop(next(iter(_ANSWERS)))
    _ANSWERS[memo] = answer


def _named(event, fam, delta, answer):
  """One event's answer on the host, named by the family's desk: ``(upper,
  lower, method, details)`` of one lane."""
  up, lo, acc_method, scope = answer
  desk = desks.DESKS.get(fam.name)
  if desk is None:
    method = f"PLDAccountant({relation_of(event)}) of the run's event (method {acc_method!r})"
  elif fam.name == "allocation" and fam.mechanism == "gaussian" and up == float(
      local_epsilon(fam.sigma, delta, fam.key[1] * fam.key[2], host=True)):
    method = (f"no amplification (k E = {fam.key[1] * fam.key[2]} exact Gaussian steps), "
              "below the allocation PLD (the run's final rule)")
  else:
    method = desk.method + (" via Lemma 3.2 (k > 1)"
                            if fam.name == "allocation" and fam.key[1] > 1 else "")
  if scope == "reduction":   # a lower of the Lemma 3.2 reduction, not of the mechanism
    lo = np.nan
  return np.array([up]), np.array([lo]), method, {"lower_scope": scope or "none"}


def bracket(events_, delta, *, with_lower: bool = True, host: Optional[bool] = None) -> Bracket:
  """Certified upper (and lower) epsilon of each event at its delta.

  Args:
    events_: a sequence of DpEvents (the lanes).
    delta: in (0, 1); scalar or one per event (checked by the caller).
    with_lower: also the certified lower (the upper alone is cheaper).
    host: the question's host-or-jit choice, made once by the caller
      (:func:`jaxacct.accounting._final_rule.is_host`; None: made here). The
      host answers one event at a time, by the accountant's scheme door.

  Returns:
    :class:`Bracket` of flat float64 arrays.

  Bound: upper (``upper``) and lower (``lower``).
  """
  evs = list(events_)
  d = np.broadcast_to(np.asarray(delta, np.float64), (len(evs),)).copy()
  host = is_host(d, None) if host is None else bool(host)
  fams = [events.family(e) for e in evs]
  up, lo = np.empty(len(evs)), np.full(len(evs), np.nan)
  groups = {}
  for i, f in enumerate(fams):
    desk = desks.DESKS.get(f.name)
    gaussian_noise = f.name != "allocation" or f.mechanism == "gaussian"
    lanes = desk is not None and gaussian_noise and f.sigma is not None and not host
    groups.setdefault((f.name, f.key) if lanes else ("one", i), []).append(i)
  methods, details = [], {}
  for (name, key), idx in groups.items():
    idx = np.asarray(idx)
    if name == "one":   # one question on the host: its leaf door, else the accountant
      ev, fam, dl = evs[idx[0]], fams[idx[0]], float(d[idx[0]])
      answer, memo = _remembered(ev, dl, with_lower)
      if answer is None:
        door = _leaf_door(ev, fam, dl)
        if door is None:
          answer = _accountant_answer(ev, dl, with_lower)
        else:
          r = door.ask("epsilon", dl, with_lower=with_lower)
          answer = (float(r.epsilon), float(r.lower) if with_lower else np.nan, door.method,
                    str(door.details.get("lower_scope", "")))
        _remember(memo, answer)
      u, l_, m, det = _named(ev, fam, dl, answer)
    else:
      sig = np.array([fams[i].sigma for i in idx], np.float64)
      u, l_, m, det = desks.DESKS[name].lanes(key, sig, d[idx].copy(), with_lower)
    up[idx] = u
    if l_ is not None:
      lo[idx] = l_
    methods.append(m)
    for k, v in det.items():
      details.setdefault(k, v)
  lower = None if not with_lower or np.all(np.isnan(lo)) else np.minimum(lo, up)
  method = methods[0] if len(set(methods)) == 1 else "; ".join(dict.fromkeys(methods))
  return Bracket(up, lower, method, details)
