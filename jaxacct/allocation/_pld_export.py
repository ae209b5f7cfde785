"""Eager export of the allocation PLD as jaxacct.pld PLDs.

k-of-t over E epochs by converting each Lemma 3.2 block's laws to
``jaxacct.pld`` PLDs (upper: connect-the-dots, lower: rounded down) and
composing them with the FFT engine (``compose_many``):
:func:`jaxacct.allocation.pld.allocation_plds`, the PLDs the accountant composes
with other events and ``jaxacct.risk`` reads. The epsilon/delta queries compose
the same round laws in-jit (:mod:`jaxacct.allocation._pld_compose`); the tests
hold the two against each other (tests/test_allocation_pld_compose.py). Eager,
scalar.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct import pld as jpld
from jaxacct.allocation._pld_input import pld_final_laws
from jaxacct.allocation._pld_laws import laws_batch

def components(t, k):
  """Lemma 3.2 blocks: [(t', count)] with (k - rho) x 1-of-floor(t/k) and
  rho x 1-of-(floor(t/k) + 1), rho = t mod k."""
  f, rho = divmod(int(t), int(k))
  if f < 1:
    raise ValueError(f"num_selected must be <= num_steps; got {k} > {t}.")
  comps = [(f, k - rho)]
  if rho:
    comps.append((f + 1, rho))
  return comps


class AllocationPLDs(NamedTuple):
  """PLDs (``jaxacct.pld.PLD``) of one round / the composition.

  Attributes:
    remove_upper, add_upper: pessimistic (dominating) PLDs.
    remove_lower, add_lower: optimistic (dominated; for k > 1 of the reduced
      object) PLDs.
    tail_mass: aliasing allowance of the FFT composition (lower side).
  """
  remove_upper: Any
  add_upper: Any
  remove_lower: Any
  add_lower: Any
  tail_mass: float = 0.0


def laws_to_plds(F, step):
  """Four engine PLDs of one 1-of-t' round from its final laws (numpy side).

  Remove: losses ln(x/t), P-mass q x/t (+ minf/t at +inf). Add: losses
  -ln(x/t), P-mass (= Q^t-mass) q (+ q0 at +inf). The float ledger is folded
  in: upper losses + eta, masses (1 + rel) e^eta; lower mirrored.
  """
  F = jax.tree.map(lambda a: np.asarray(a, np.float64), F)
  rel, eta = float(F.rel), float(F.eta)
  ku, kl = F.up_p > 0, F.lo_a > 0
  lu, pu = F.up_loss[ku], F.up_p[ku]
  ll, pl = F.lo_loss[kl], F.lo_a[kl]
  fu = (1.0 + rel) * math.exp(eta)
  fl = (1.0 - rel) * math.exp(-eta)
  ru = jpld.from_losses(lu + eta, pu * np.exp(lu) * fu, step=step, pessimistic=True,
                     inf_mass=min(1.0, float(F.up_minf_t) * fu))
  au = jpld.from_losses(-lu + eta, pu * fu, step=step, pessimistic=True,
                     inf_mass=min(1.0, float(F.up_q0) * fu))
  rl = jpld.from_losses(ll - eta, pl * np.exp(ll) * fl, step=step, pessimistic=False,
                     inf_mass=min(1.0, float(F.lo_inf) * fl))
  al = jpld.from_losses(-ll - eta, pl * fl, step=step, pessimistic=False,
                     inf_mass=min(1.0, float(F.lo_q0) * fl))
  return ru, au, rl, al


def composed_plds(param, t, k, E_, *, grid_size, tail, step, mechanism, tail_mass):
  comps = components(t, k)
  per = []
  for tt, c in comps:
    if isinstance(mechanism, str):
      F = laws_batch(jnp.asarray([float(param)]), jnp.asarray([tt], jnp.int32),
                      jnp.asarray([tail]), n=int(grid_size), mechanism=mechanism)
      F = jax.tree.map(lambda a: a[0], F)
      per.append((laws_to_plds(F, step), c * E_))
    else:   # mechanism: the one-step laws of a PLD mechanism (pld_mechanism_laws)
      Fr, Fa = pld_final_laws(mechanism, np.asarray([tt]), np.asarray([tail]), grid_size)
      pr = laws_to_plds(jax.tree.map(lambda a: a[0], Fr), step)
      pa = pr if Fa is Fr else laws_to_plds(jax.tree.map(lambda a: a[0], Fa), step)
      per.append(((pr[0], pa[1], pr[2], pa[3]), c * E_))
  out = []
  for which in range(4):
    plds = [p[which] for p, _ in per]
    counts = [c for _, c in per]
    if len(plds) == 1 and counts[0] == 1:
      out.append(plds[0])
    else:
      out.append(jpld.compose_many(plds, counts, tail_mass=tail_mass))
  return AllocationPLDs(*out, tail_mass=tail_mass)
