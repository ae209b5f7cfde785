r"""Balls-in-bins inside an epoch: the released prefix of a 1-of-t allocation.

After s of the t steps of an epoch of 1-of-t random allocation (each example
in one uniformly random step, independently), the released outputs are those
of steps 1..s. Conditioned on the others' assignments, with
``P0 = N(0, sigma^2 I_s)`` (the example absent) and
``A_s = (1/s) sum_{i<=s} N(e_i, sigma^2 I_s)`` (1-of-s allocation), the
prefix pair is ``(1 - s/t) P0 + (s/t) A_s``.

Derivations and sources: docs/bounds/tracking.md ("Bounds and proofs /
Tracking during training").
"""

from __future__ import annotations

import math

import jax
import numpy as np

from jaxacct import pld as jpld
from jaxacct._core.compiled import jit
from jaxacct.allocation import pld as apld
from jaxacct.pld import law, pair_epsilons


def _laws(sigma, num_steps, mechanism):
  return apld.allocation_pld_laws(sigma, num_steps, mechanism=mechanism)


_laws_jit = jit(_laws, static_argnames=("mechanism",))


def prefix_pair(sigma, s: int, t: int, *, step: float, mechanism: str = "gaussian"):
  """``PairPLD`` (pessimistic) of the first ``s`` of ``t`` steps of 1-of-t allocation.

  Args:
    sigma: noise multiplier (Laplace scale for ``mechanism="laplace"``), > 0.
    s, t: ints, 1 <= s <= t.
    step: loss grid step.
    mechanism: ``"gaussian"`` or ``"laplace"``.

  Bound: upper (dominating pair of the prefix; see the module docstring).
  """
  with jax.enable_x64(True):
    f = jax.tree.map(lambda a: np.asarray(a, np.float64),
                     _laws_jit(np.float64(sigma), np.int64(s), mechanism=mechanism))
  gamma = s / t
  rel, eta = float(f.rel), float(f.eta)
  fu = (1.0 + rel) * math.exp(eta)
  keep = f.up_p > 0
  loss, q = f.up_loss[keep], f.up_p[keep]
  # remove: ratios rounded up (e^eta), Q-masses (1 + rel) q
  r_up = (1.0 - gamma) + gamma * np.exp(loss + eta)
  q_up = (1.0 + rel) * q
  q0 = float(f.up_q0) * fu
  losses, masses = np.log(r_up), q_up * r_up
  if gamma < 1.0 and q0 > 0:
    losses = np.concatenate([losses, [math.log1p(-gamma)]])
    masses = np.concatenate([masses, [q0 * (1.0 - gamma)]])
  remove = jpld.from_losses(losses, masses, step=step, pessimistic=True,
                            inf_mass=min(1.0, gamma * float(f.up_minf_t) * fu))
  # add: ratios rounded down (e^-eta), Q-masses (1 + rel) e^eta q
  r_dn = (1.0 - gamma) + gamma * np.exp(loss - eta)
  losses, masses, inf = -np.log(r_dn), q * fu, 0.0
  if gamma < 1.0:
    losses = np.concatenate([losses, [-math.log1p(-gamma)]])
    masses = np.concatenate([masses, [q0]])
  else:
    inf = min(1.0, q0)
  add = jpld.from_losses(losses, masses, step=step, pessimistic=True, inf_mass=inf)
  return jpld.PairPLD(remove, add)


def allocation_steps(event, epoch_eps, *, delta: float, step: float, tail_mass: float,
                     max_prefixes: int = 64) -> np.ndarray:
  """Epsilons after each step of ``E`` epochs of 1-of-t allocation, float64 (E t + 1,).

  ``epoch_eps[e]`` (e = 0..E) is the accountant's epsilon after e whole
  epochs, kept at the epoch ends; step ``(e - 1) t + s`` (0 < s < t) gets
  ``min(epoch_eps[e], eps(prefix_s after e - 1 epochs))``, the prefix
  composed after ``e - 1`` copies of the whole epoch's pair (:mod:`._powers`).
  At most ``max_prefixes`` prefix lengths are evaluated (all of them when
  ``t - 1 <= max_prefixes``); a step between two is charged the next one (a
  shorter prefix is a post-processing of a longer one: an upper bound).

  Bound: upper.
  """
  t, sigma, mech = int(event.steps_per_epoch), float(event.sigma), event.mechanism
  n_ep = len(epoch_eps) - 1
  eps = np.asarray(epoch_eps, np.float64)
  out = np.repeat(eps[1:], t)                    # whole epoch charged (the default)
  grid = np.arange(1, t)
  if t - 1 > max_prefixes:
    grid = np.unique(np.round(np.linspace(1, t - 1, max_prefixes)).astype(np.int64))
  whole = law(prefix_pair(sigma, t, t, step=step, mechanism=mech)) if n_ep > 1 else None
  val = np.empty((grid.size, n_ep))
  for i, s in enumerate(grid):
    pre = prefix_pair(sigma, int(s), t, step=step, mechanism=mech)
    val[i, 0] = float(jpld.epsilon(pre, delta))
    if n_ep > 1:
      val[i, 1:] = pair_epsilons(whole, np.arange(1, n_ep), delta, factor=pre,
                                 tail_mass=tail_mass)
  val = np.minimum(val, eps[None, 1:])
  # step s of an epoch: the first evaluated prefix >= s
  pick = np.searchsorted(grid, np.arange(1, t), side="left")
  for e in range(n_ep):
    part = np.where(pick < grid.size, val[np.minimum(pick, grid.size - 1), e], eps[e + 1])
    out[e * t: e * t + t - 1] = part
  return np.maximum.accumulate(np.concatenate([[0.0], out]))
