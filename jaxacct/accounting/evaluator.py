r"""The evaluator: certified epsilon of one run, by the doors and one final rule.

Upper and lower epsilon of the runs the DP-SGD samplers build (allocation,
Poisson, Gaussian without amplification, or any event through the
accountant) on flat float64 arrays, with the final rule of each: the
minimum with no amplification where a run is a post-processing of full-batch
Gaussian steps, and the fallbacks where a door gives no finite bound. Used
by :mod:`jaxacct.calibrator`, :mod:`jaxacct.dpsgd` and :mod:`jaxacct.risk`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from jaxacct._core.lazy import LazyModule
from jaxacct import accounting, poisson
# the final rule of an allocation run and its Gaussian doors (one place, below the
# accountant's scheme door too); read here as the evaluator's (the calibrator's doors)
from jaxacct.accounting._final_rule import (gaussian_upper, is_host, local_epsilon,
                                            min_no_amplification)
from jaxacct.allocation import pld as apld

if TYPE_CHECKING:
  from jaxacct._core import events
else:   # imported at the first event: dp_accounting (when installed) comes with the events
  events = LazyModule("jaxacct._core.events")


@functools.lru_cache(maxsize=512)
def _allocation_scalar(sigma, delta, t, k, E):
  """One allocation.pld evaluation, memoised (a calibration's last feasible
  sigma is evaluated again by the epsilon of the same run)."""
  r = apld.allocation_pld_epsilon(sigma=sigma, delta=delta, steps_per_epoch=t, num_selected=k,
                                  num_epochs=E)
  return float(r.epsilon), float(r.lower)


@functools.lru_cache(maxsize=512)
def _allocation_scalar_upper(sigma, delta, t, k, E):
  """One allocation.pld upper evaluation without the certified lower (a
  third of the host work), memoised."""
  return float(apld.allocation_pld_epsilon(sigma=sigma, delta=delta, steps_per_epoch=t,
                                           num_selected=k, num_epochs=E,
                                           with_lower=False).epsilon)


def allocation_upper(sigma, delta, t, k, E, host=None):
  """allocation.pld upper epsilon of k-of-t allocation over E epochs, flat arrays
  (the lower is skipped; arrays run the jitted programs)."""
  if is_host(sigma, delta) if host is None else host:
    return np.array([_allocation_scalar_upper(float(sigma[0]), float(delta[0]), int(t),
                                              int(k), int(E))])
  r = apld.allocation_pld_epsilon(sigma=sigma, delta=delta, steps_per_epoch=int(t),
                                  num_selected=int(k), num_epochs=int(E), with_lower=False)
  return np.broadcast_to(np.asarray(r.epsilon, np.float64), sigma.shape).copy()


def allocation_upper_lower(sigma, delta, t, k, E, host=None):
  """allocation.pld (upper, lower) of k-of-t allocation over E epochs, flat arrays."""
  if is_host(sigma, delta) if host is None else host:
    u, l_ = _allocation_scalar(float(sigma[0]), float(delta[0]), int(t), int(k), int(E))
    return np.array([u]), np.array([l_])
  r = apld.allocation_pld_epsilon(sigma=sigma, delta=delta, steps_per_epoch=int(t),
                                  num_selected=int(k), num_epochs=int(E))
  up, lo = (np.broadcast_to(np.asarray(a, np.float64), sigma.shape).copy()
            for a in (r.epsilon, r.lower))
  return up, lo


@functools.lru_cache(maxsize=512)
def _poisson_scalar(q, sigma, T, delta):
  return float(poisson.epsilon(q=q, sigma=sigma, num_steps=T, delta=delta,
                               method="pld").epsilon)


def poisson_upper(sigma, delta, q, T, host=None):
  """Tight Poisson PLD upper epsilon (``poisson.epsilon(method="pld")``), flat arrays."""
  if is_host(sigma, delta) if host is None else host:
    return np.array([_poisson_scalar(float(q), float(sigma[0]), int(T), float(delta[0]))])
  up = poisson.epsilon(q=float(q), sigma=sigma, num_steps=int(T), delta=delta,
                       method="pld").epsilon
  return np.broadcast_to(np.asarray(up, np.float64), sigma.shape).copy()


# ---------------------------------------------------------------------------
# one run: the final rule of each kind (upper, lower or None, method, details)
# ---------------------------------------------------------------------------

ALLOCATION_METHOD = "allocation.pld (tight PLD, Feldman-Shenfeld arXiv:2602.17284v1)"
POISSON_METHOD = "poisson.pld (tight PLD of the Poisson-subsampled Gaussian)"


def allocation_run(sigma, delta, t, k, E):
  """k-of-t allocation over E epochs: the allocation PLD, and no amplification.

  The upper is the smaller of the allocation PLD and k E exact Gaussian
  steps (the run is a post-processing of k E full-batch steps); where the
  PLD cannot certify (+inf or NaN: its lattice cannot hold the loss at this
  noise) no amplification stands. The lower is the PLD's (k = 1 only: for k > 1 the
  PLD goes through Lemma 3.2 and its lower bounds the reduced object).
  """
  host = is_host(sigma, delta)   # decided once for the question
  up_pld, lo_pld = allocation_upper_lower(sigma, delta, t, k, E, host)
  up, loc = min_no_amplification(up_pld, sigma, delta, k * E, exact=True, host=host)
  failed = ~np.isfinite(np.asarray(up_pld, np.float64))
  lo = lo_pld if k == 1 else None
  method = ALLOCATION_METHOD
  if k > 1:
    method += " via Lemma 3.2 (k > 1)"
  details = {"pld_upper": up_pld, "pld_lower": lo_pld, "local": loc}
  if np.all(failed):
    method = (f"no amplification (k E = {k * E} exact Gaussian steps): the allocation PLD "
              "could not certify at this noise (inf), its lower bound stands")
  elif np.any(failed):
    method += "; no amplification where the PLD could not certify (details['pld_upper'] inf)"
  return up, lo, method, details


def poisson_run(sigma, delta, q, T, host=None):
  """T Poisson-subsampled Gaussian steps at rate q: the tight PLD, and RDP
  where the PLD's grid holds no finite bound (RDP is an upper too)."""
  up = poisson_upper(sigma, delta, q, T, host)
  method, details = POISSON_METHOD, {}
  inf = ~np.isfinite(up)
  if np.any(inf):
    rdp = poisson.epsilon(q=q, sigma=sigma[inf], num_steps=T, delta=delta[inf], method="rdp")
    details["pld_upper"] = up.copy()
    up = up.copy()
    up[inf] = np.minimum(up[inf], np.asarray(rdp.epsilon, np.float64))
    method += ("; poisson.rdp (Mironov, Talwar & Zhang, arXiv:1908.10530v1) where the PLD "
               "gives no finite bound (details['pld_upper'] inf)")
  return up, None, method, details


def gaussian_run(sigma, delta, m, host=None):
  """m full-batch Gaussian steps (no amplification): exact, sigma / sqrt(m)."""
  return (local_epsilon(sigma, delta, m, host), None,
          "no amplification (exact Gaussian, sigma/sqrt(E))", {})


#: leaf kinds defined for a fixed dataset size only (a fixed-size batch)
_REPLACE_ONLY = ("without_replacement", "with_replacement")


def relation_of(event) -> str:
  """The neighbouring relation ``event`` is accounted under: ``"REPLACE_ONE"``
  when a leaf is a fixed-size batch (the dataset size cannot change; the
  accountant refuses add/remove for it), else ``"ADD_OR_REMOVE_ONE"`` (the
  accountant's default)."""
  k = events.kind(event)
  if k in _REPLACE_ONLY:
    return "REPLACE_ONE"
  subs = list(getattr(event, "events", None) or ()) if k == "composed" else (
      [event.event] if k == "self_composed" else [])
  return next((r for r in map(relation_of, subs) if r == "REPLACE_ONE"), "ADD_OR_REMOVE_ONE")


def accountant_for(event):
  """A fresh ``PLDAccountant`` under :func:`relation_of` ``event``, with it composed."""
  rel = accounting.NeighboringRelation[relation_of(event)]
  return accounting.PLDAccountant(rel).compose(event)


def accountant_run(events, delta):
  """Any events through :func:`accountant_for`: its bracket, lane by lane (the
  accountant's own final rule; lower None where it has none)."""
  up, lo, method = np.empty(len(events)), np.empty(len(events)), ""
  for i, (e, d) in enumerate(zip(events, delta)):
    r = accountant_for(e).get_epsilon_bounds(float(d))
    up[i], method = float(r.epsilon), str(r.method)
    lo[i] = np.nan if r.lower is None else float(r.lower)
  rel = relation_of(events[0]) if events else "ADD_OR_REMOVE_ONE"
  return (up, (None if np.all(np.isnan(lo)) else lo),
          f"PLDAccountant({rel}) of the run's event (method {method!r})", {})
