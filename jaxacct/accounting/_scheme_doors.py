r"""Ledgers that one scheme's own door answers: the accountant's scheme shortcuts (private).

One builder per scheme serves both its front door and the accountant, so the
two return the same number for the same event:

* a ledger that is ONE random-allocation event composed once is
  :func:`jaxacct.allocation.pld.allocation_pld_epsilon` / ``_delta`` (its
  upper, certified lower and directions) under the run's final rule
  (:mod:`jaxacct.accounting._final_rule`, the evaluator's too);
* a ledger that is ONE Poisson-subsampled Gaussian event (add/remove
  neighbours, ``0 < q < 1``, noise > 0) composed ``T`` times is
  the Poisson door (``jaxacct.poisson.epsilon`` / ``delta(method="pld")``,
  whose builder is ``jaxacct.pld._doors``) on the accountant's grid
  (``step = value_discretization_interval``): the door's per-step truncation
  and composition (its own tail masses; the accountant's ``tail_mass`` is for
  the general path), on the host for a scalar question (no compiled program).
  The door on its own grid reports it in ``details["step"]``; an accountant on
  that grid returns the same epsilon. The door gives no lower bound: the accountant's bracket
  takes its lower side from the general path.

Anything else (and ``shortcuts=False``) takes the general FFT path of
:mod:`jaxacct.accounting._accountant`. A ledger of several events is composed
from their PLDs without the final rule: no amplification is a property of one
run (its k E full-batch steps), so there the accountant's upper may sit above
the smaller rule at low noise, never below a certified bound.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

from jaxacct import pld as jpld
from jaxacct._core.events import family
from jaxacct.accounting import _composition, _final_rule
from jaxacct.allocation.pld import allocation_pld_delta, allocation_pld_epsilon


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


def scheme_door(live, relation, step: float) -> Optional[SchemeDoor]:
  """The door that answers the ledger ``live`` (``[(leaf event, count)]``,
  validated leaves) exactly, or None (see the module)."""
  if len(live) != 1:
    return None
  event, n = live[0][0], int(live[0][1])
  f = family(event, n)
  if f.name == "allocation" and n == 1:
    kw = dict(sigma=event.scale if event.mechanism == "laplace" else event.noise_multiplier,
              steps_per_epoch=int(event.steps_per_epoch),
              num_selected=int(event.num_selected), num_epochs=int(event.num_epochs),
              mechanism=event.mechanism)
    det = {"components": [(str(event), 1)],
           "lower_scope": "mechanism" if int(event.num_selected) == 1 else "reduction"}

    steps = int(event.num_selected) * int(event.num_epochs)

    def ask_allocation(quantity, value, with_lower=True):
      fn = allocation_pld_epsilon if quantity == "epsilon" else allocation_pld_delta
      r = fn(**{"delta" if quantity == "epsilon" else "epsilon": value}, **kw,
             with_lower=bool(with_lower))
      if kw["mechanism"] != "gaussian":
        return r
      return _no_amplification(r, quantity, value, float(event.noise_multiplier), steps)
    return SchemeDoor("allocation_pld", ask_allocation, True, det)
  if (f.name == "poisson" and n >= 1
      and _composition.relation_name(relation) == "ADD_OR_REMOVE_ONE"):
    qs = (f.key[0], f.sigma)
    kw = dict(sigma=qs[1], q=qs[0], num_steps=n, step=float(step))

    def ask_poisson(quantity, value, with_lower=True):   # upper only (lower: the caller's)
      if quantity == "epsilon":
        return jpld.poisson_gaussian_epsilon(delta=value, **kw)
      return jpld.poisson_gaussian_delta(epsilon=value, **kw)
    det = {"components": [(f"poisson_gaussian(q={qs[0]:g}, sigma={qs[1]:g})", n)],
           "neighboring_relation": "ADD_OR_REMOVE_ONE", "step": float(step)}
    def at_counts(counts, delta):
      return jpld.poisson_gaussian_epsilons(sigma=qs[1], q=qs[0], counts=counts, delta=delta,
                                            step=float(step))
    return SchemeDoor("poisson_pld", ask_poisson, False, det, at_counts)
  return None
