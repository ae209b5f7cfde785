r"""The desks: event family -> its door for lanes, final rule, lower source and the
accountant's door for a one-event ledger (private; :mod:`jaxacct.accounting.evaluator`
is the public face).

One table (:data:`DESKS`) serves both layouts of each formula: the accountant's
scalar door (:func:`scheme_door`: one random-allocation event composed once is
:func:`jaxacct.allocation.pld.event_epsilon` under the run's final rule,
:mod:`jaxacct.accounting._final_rule`; one Poisson-subsampled Gaussian event composed
T times is the Poisson door on the accountant's grid) and the evaluator's jitted lanes.
Any other ledger takes the accountant's general FFT path. A ledger of several events
gets no final rule: no amplification is a property of one run.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import numpy as np

from jaxacct import pld as jpld
from jaxacct import poisson
from jaxacct._core.events import family
from jaxacct.accounting import _composition, _final_rule
from jaxacct.accounting._final_rule import gaussian_upper, min_no_amplification
from jaxacct.allocation import pld as apld


def _no_amplification(r, quantity, value, sigma, m):
  """``r`` (the allocation PLD's answer) under the run's final rule
  (:mod:`jaxacct.accounting._final_rule`: the smaller of it and m = k E exact
  Gaussian steps without amplification, the Gaussian where the PLD is NaN).
  Lowers are kept below the upper."""
  local = _final_rule.local_epsilon if quantity == "epsilon" else _final_rule.local_delta
  g = float(local(sigma, value, m))
  up = float(getattr(r, quantity))
  fin = float(_final_rule.smaller(up, g))
  if fin == up:
    return r
  byd = {d: (float(_final_rule.smaller(u, g)), min(lo, g))
         for d, (u, lo) in r.by_direction.items()}
  return r._replace(**{quantity: fin}, lower=min(float(r.lower), fin), by_direction=byd,
                    method=f"no amplification ({m} exact Gaussian steps) < {r.method}")


class SchemeDoor(NamedTuple):
  """A scheme's door for a whole ledger: ``ask(quantity, value, with_lower)``
  returns the door's ``EpsilonResult`` / ``DeltaResult``; ``with_lower``: whether
  it carries a certified ``lower`` and ``by_direction`` (else the upper per
  direction is in ``details``); asked ``with_lower=False`` it builds the upper
  side only (the allocation door: no lower laws, the same upper to the last
  bit); ``counts``, where given, the door's epsilon after each of several
  counts of the ledger's event, bitwise ``ask``'s."""
  method: str
  ask: Callable
  with_lower: bool
  details: dict
  counts: Optional[Callable] = None   # (counts, delta) -> epsilon after each count


def _allocation_door(event, n, f, relation, step):
  """One random-allocation event composed once: the allocation PLD door under the
  run's final rule."""
  if n != 1:
    return None
  det = {"components": [(str(event), 1)],
         "lower_scope": "mechanism" if int(event.num_selected) == 1 else "reduction"}
  steps = int(event.num_selected) * int(event.num_epochs)

  def ask_allocation(quantity, value, with_lower=True):
    fn = apld.event_epsilon if quantity == "epsilon" else apld.event_delta
    r = fn(event, **{"delta" if quantity == "epsilon" else "epsilon": value},
           with_lower=bool(with_lower))
    if not (isinstance(event.mechanism, str) and event.mechanism == "gaussian"):
      return r
    return _no_amplification(r, quantity, value, float(event.noise_multiplier), steps)
  return SchemeDoor("allocation_pld", ask_allocation, True, det)


def _poisson_door(event, n, f, relation, step):
  """One Poisson-subsampled Gaussian event composed n times (add/remove): the Poisson
  door on the accountant's grid (upper only; the lower is the caller's)."""
  if n < 1 or _composition.relation_name(relation) != "ADD_OR_REMOVE_ONE":
    return None
  qs = (f.key[0], f.sigma)
  kw = dict(sigma=qs[1], q=qs[0], num_steps=n, step=float(step))

  def ask_poisson(quantity, value, with_lower=True):
    if quantity == "epsilon":
      return jpld.poisson_gaussian_epsilon(delta=value, **kw)
    return jpld.poisson_gaussian_delta(epsilon=value, **kw)
  det = {"components": [(f"poisson_gaussian(q={qs[0]:g}, sigma={qs[1]:g})", n)],
         "neighboring_relation": "ADD_OR_REMOVE_ONE", "step": float(step)}

  def at_counts(counts, delta):
    return jpld.poisson_gaussian_epsilons(sigma=qs[1], q=qs[0], counts=counts, delta=delta,
                                          step=float(step))
  return SchemeDoor("poisson_pld", ask_poisson, False, det, at_counts)


def scheme_door(live, relation, step: float) -> Optional[SchemeDoor]:
  """The door that answers the ledger ``live`` (``[(leaf event, count)]``,
  validated leaves) exactly, or None (see the module): its family's desk's."""
  if len(live) != 1:
    return None
  event, n = live[0][0], int(live[0][1])
  f = family(event, n)
  desk = DESKS.get(f.name)
  return None if desk is None or desk.door is None else desk.door(event, n, f, relation, step)


# ---------------------------------------------------------------------------
# the desks: event family -> door for lanes, final rule, lower source, accountant door
# ---------------------------------------------------------------------------

class Desk(NamedTuple):
  """One family's door for lanes: ``lanes(key, sigma, delta, with_lower) -> (upper,
  lower or None, method, details)`` on flat arrays, the family's final rule applied;
  ``door``: the accountant's door for a one-event ledger of the family (its
  scalar layout of the same formula); ``rounds(key)``: its Gaussian-DP (CLT) model, ``[(count, 1 / rate)]``, where
  mu^2 = sum count min((e^{1/s^2} - 1) rate, 1 / s^2) starts a calibration."""
  method: str
  lanes: Callable
  lower_source: str
  rounds: Callable
  door: Optional[Callable] = None   # (event, n, family, relation, step) -> SchemeDoor or None
  #: whether ``door`` answers a leaf event composed once, upper and lower, on its
  #: own (no grid step, no lower of the accountant's): the evaluator asks it so
  leaf_door: bool = False


ALLOCATION_METHOD = "allocation.pld (tight PLD, Feldman-Shenfeld arXiv:2602.17284v1)"
POISSON_METHOD = "poisson.pld (tight PLD of the Poisson-subsampled Gaussian)"
GAUSSIAN_METHOD = "no amplification (exact Gaussian, sigma/sqrt(E))"


def _allocation_lanes(key, sigma, delta, with_lower):
  """k-of-t allocation over E epochs: the allocation PLD, and no amplification
  (the final rule); the PLD's lower for k = 1 (for k > 1 it bounds the reduction)."""
  t, k, E = key
  r = apld.allocation_pld_epsilon(sigma=sigma, delta=delta, steps_per_epoch=int(t),
                                  num_selected=int(k), num_epochs=int(E),
                                  with_lower=bool(with_lower))
  up_pld = np.broadcast_to(np.asarray(r.epsilon, np.float64), sigma.shape).copy()
  up = min_no_amplification(up_pld, sigma, delta, k * E, host=False)[0]
  lo = None
  if with_lower and k == 1:
    lo = np.minimum(np.broadcast_to(np.asarray(r.lower, np.float64), sigma.shape), up)
  method = ALLOCATION_METHOD + (" via Lemma 3.2 (k > 1)" if k > 1 else "")
  failed = ~np.isfinite(up_pld)
  if np.all(failed):
    method = (f"no amplification (k E = {k * E} exact Gaussian steps): the allocation PLD "
              "could not certify at this noise (inf)")
  elif np.any(failed):
    method += "; no amplification where the PLD could not certify (details['pld_upper'] inf)"
  return up, lo, method, {"pld_upper": up_pld,
                          "lower_scope": "mechanism" if k == 1 else "reduction"}


def _poisson_lanes(key, sigma, delta, with_lower):
  """T Poisson-subsampled Gaussian steps at rate q: the tight PLD, RDP where the
  PLD's grid holds no finite bound (RDP is an upper too). Lanes carry no lower."""
  q, T = key
  up = np.broadcast_to(np.asarray(poisson.epsilon(q=float(q), sigma=sigma, num_steps=int(T),
                                                  delta=delta, method="pld").epsilon,
                                  np.float64), sigma.shape).copy()
  method, details = POISSON_METHOD, {}
  inf = ~np.isfinite(up)
  if np.any(inf):
    rdp = poisson.epsilon(q=q, sigma=sigma[inf], num_steps=T, delta=delta[inf], method="rdp")
    details["pld_upper"] = up.copy()
    up[inf] = np.minimum(up[inf], np.asarray(rdp.epsilon, np.float64))
    method += ("; poisson.rdp (Mironov, Talwar & Zhang, arXiv:1908.10530v1) where the PLD "
               "gives no finite bound (details['pld_upper'] inf)")
  return up, None, method, details


def _gaussian_lanes(key, sigma, delta, with_lower):
  """One Gaussian of noise sigma (sigma / sqrt(count) of a composed one): exact."""
  up = gaussian_upper(sigma, delta, host=False)
  return up, (up.copy() if with_lower else None), GAUSSIAN_METHOD, {"lower_scope": "mechanism"}


#: event family -> its door for lanes, final rule and lower source; any other
#: family is the accountant's, lane by lane
def _allocation_rounds(key):
  t, k, E = key
  f, rho = divmod(t, k)
  return [((k - rho) * E, f), (rho * E, f + 1)]


DESKS = {
    "allocation": Desk(ALLOCATION_METHOD, _allocation_lanes, "the allocation PLD's (k = 1)",
                       _allocation_rounds, _allocation_door, leaf_door=True),
    "poisson": Desk(POISSON_METHOD, _poisson_lanes, "the accountant's, one question at a time",
                    lambda key: [(key[1], 1.0 / key[0])], _poisson_door),
    "gaussian": Desk(GAUSSIAN_METHOD, _gaussian_lanes, "exact", lambda key: [(1, 1.0)]),
}
