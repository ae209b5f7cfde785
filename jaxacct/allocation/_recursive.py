r"""Random allocation: truncated-Poisson (Thm 4.1) and recursive (Thm 4.2) bounds.

Feldman & Shenfeld, "Privacy amplification by random allocation",
arXiv:2502.08202v3, Lemma 4.3, Thm 4.1, Thm 4.2 (Gaussian randomizer,
sensitivity 1). k-out-of-t over E epochs is m = kE rounds of 1-out-of-t',
t' = floor(t/k) (Lemma 3.2). Each round satisfies Lemma 4.3,

Proofs and sources: docs/bounds/allocation_rdp.md ("Bounds and proofs /
Random allocation: RDP and analytic bounds").
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import checks
from jaxacct._core.gaussian import gaussian_epsilon_jit
from jaxacct._core.results import DeltaResult, EpsilonResult, host_f64
from jaxacct.allocation import _bounds as bounds
from jaxacct.allocation import pld as apld

DEFAULT_TAIL_FRACTIONS = (0.5, 0.9, 0.99)
_REC_FRACTIONS = (0.5, 0.1, 0.01)
_TAIL_MASS = 1e-16


# ----------------------------------------------------------- Poisson part

@functools.lru_cache(maxsize=64)
def _poisson_pld(sigma: float, q: float, n: int, direction: str, step):
  if step is None:
    step = bounds.poisson_composed_step(sigma, q, n)
  one = jpld.poisson_gaussian(sigma, q, direction=direction, step=step)
  return jpld.compose(jpld.truncate(one, min(jpld.DEFAULT_TAIL_MASS, _TAIL_MASS / n)), n)


def _poisson_eps(sigma, q, n, delta, direction, step=None):
  if delta <= 0:
    return math.inf
  return float(jpld.epsilon(_poisson_pld(float(sigma), float(q), int(n), direction, step),
                            float(delta)))


def _poisson_delta(sigma, q, n, eps, direction, step=None):
  return float(jpld.delta(_poisson_pld(float(sigma), float(q), int(n), direction, step),
                          float(eps)))


_BOOTSTRAPS = ("pld", "direct", "decomposition")


def _check_fractions(name, values):
  if values is not None:
    checks.check_range(name, values, 0.0, 1.0, lo_open=True, hi_open=True)


def _check_step(step):
  if step is not None:
    checks.check_positive("step", step)


def _dirs(direction):
  checks.check_direction(direction)
  return ("remove", "add") if direction == "both" else (direction,)


def _check(sigma, steps_per_epoch, num_selected, num_epochs):
  bounds.check_scheme(sigma, steps_per_epoch, num_selected, num_epochs)
  for name, v in (("sigma", sigma), ("steps_per_epoch", steps_per_epoch)):
    if np.ndim(v):
      raise ValueError(f"{name} must be a scalar here; got shape {np.shape(v)}.")
  t, m = bounds.split_rounds(steps_per_epoch, num_selected, num_epochs)
  return float(sigma), int(t), int(m)


# ------------------------------------------------------- Thm 4.1 (analytic)

def _eps0(sigma, delta0):
  """Gaussian epsilon at delta0 (the one jitted kernel)."""
  return np.asarray(gaussian_epsilon_jit(jnp.asarray(sigma, jnp.float64),
                                         jnp.asarray(delta0, jnp.float64)))


def _gamma(sigma, t, delta0, delta_b, azuma):
  e0 = _eps0(sigma, delta0)
  if azuma == "sinh":
    w, n = np.sinh(e0), max(t - 1, 0)
    return w * np.sqrt(2.0 * n * np.log(1.0 / delta_b)) / t
  return np.cosh(e0) * np.sqrt(2.0 * np.log(1.0 / delta_b) / t)


def truncated_poisson_rate(*, sigma, steps_per_epoch, delta0, delta_tail, azuma: str = "sinh"):
  r"""Truncation rate eta of Thm 4.1 for one round of 1-of-t allocation (Gaussian).

  Feldman & Shenfeld, arXiv:2502.08202v3, Thm 4.1 / Lemma 4.3:
  eta = 1/(t (1 - gamma)), gamma = sinh(eps0) sqrt(2 (t-1) ln(1/delta_tail))/t
  (``azuma="sinh"``, see the module docstring) or the paper's
  cosh(eps0) sqrt(2 ln(1/delta_tail)/t) (``"cosh"``), eps0 = the Gaussian's
  epsilon at delta0 (exact profile).

  Args:
    sigma: > 0. steps_per_epoch: t >= 1. delta0, delta_tail: in (0, 1); arrays
      broadcast. azuma: "sinh" or "cosh".

  Returns:
    float64 numpy array: eta, +inf where gamma >= 1 - 1/t (vacuous).

  Bound: a rate for which the round is within t delta0 + delta_tail of
  Poisson(eta) (upper-bound ingredient).
  """
  checks.check_sigma("sigma", sigma)
  checks.check_int("steps_per_epoch", steps_per_epoch, min_value=1)
  checks.check_probability("delta0", delta0)
  checks.check_probability("delta_tail", delta_tail)
  checks.check_choice("azuma", azuma, ("sinh", "cosh"))
  t = int(steps_per_epoch)
  g = _gamma(float(sigma), t, np.asarray(delta0, np.float64),
             np.asarray(delta_tail, np.float64), azuma)
  return np.where(g < 1.0 - 1.0 / t, 1.0 / (t * np.maximum(1.0 - g, 1e-300)), np.inf)


def _best_rate(sigma, t, m, rest, azuma, split):
  """Smallest eta with m (t delta0 + delta'') <= rest; (eta, delta0, delta'')."""
  if split == "authors":
    # rest = 0.995 delta: 0.99 delta to delta0, 0.005 delta to the tails
    d = rest / 0.995
    d0, db = 0.99 * d / (t * m), 0.005 * d / m
    eta = truncated_poisson_rate(sigma=sigma, steps_per_epoch=t, delta0=d0, delta_tail=db,
                                 azuma=azuma)
    return float(eta), d0, db
  theta = np.linspace(0.0, 1.0, 258)[1:-1]
  d0 = theta * rest / (t * m)
  db = (1.0 - theta) * rest / m
  eta = truncated_poisson_rate(sigma=sigma, steps_per_epoch=t, delta0=d0, delta_tail=db,
                               azuma=azuma)
  i = int(np.argmin(eta))
  return float(eta[i]), float(d0[i]), float(db[i])


def truncated_poisson_epsilon(*, sigma, steps_per_epoch, delta, num_selected=1, num_epochs=1,
                              direction: str = "both", azuma: str = "sinh",
                              split: str = "optimized", tail_fractions=None, step=None):
  r"""Epsilon upper bound of k-of-t allocation by truncated Poisson (Thm 4.1), both directions.

  Feldman & Shenfeld, "Privacy amplification by random allocation",
  arXiv:2502.08202v3, Thm 4.1 (via Lemma 4.3), Lemma 3.2 and a union bound
  over the m = kE rounds:

  .. math:: \delta \le \delta_{P^{(m)}_{t',\eta}}(\varepsilon) + m(t'\delta_0 + \delta''),
            \quad \eta = \frac{1}{t'(1-\gamma)}.

  Args:
    sigma: noise multiplier > 0 (scalar). steps_per_epoch: t >= 1. delta: (0, 1).
    num_selected: k in [1, t]. num_epochs: E >= 1.
    direction: "remove", "add" or "both" (max).
    azuma: "sinh" (default, verified range) or "cosh" (paper as printed).
    split: "optimized" (search; default) or "authors" (their code's fixed
      split 0.99 / 0.005 / 0.005, for comparison).
    tail_fractions: candidate fractions of delta spent outside the Poisson
      part (default (0.5, 0.9, 0.99)); one Poisson PLD per candidate.
    step: PLD grid step (default: ``jaxacct.pld``'s step for the Poisson pair).

  Returns:
    ``EpsilonResult(epsilon, delta, method="truncated_poisson",
    bound="upper")``; ``epsilon`` a ``np.float64``, +inf when
    gamma >= 1 - 1/t' for every candidate (vacuous; the usual case unless
    sigma and t are large).

  Bound: upper (the Poisson PLD is pessimistic).

  Numerical regimes: sigma >= ~1.5 and t >= ~1e5 at delta = 1e-10 for a
  finite value; each candidate costs an FFT composition of t' m steps.
  """
  sigma, t, m = _check(sigma, steps_per_epoch, num_selected, num_epochs)
  checks.check_delta(delta)
  checks.check_direction(direction)
  checks.check_choice("azuma", azuma, ("sinh", "cosh"))
  checks.check_choice("split", split, ("optimized", "authors"))
  _check_fractions("tail_fractions", tail_fractions)
  _check_step(step)
  fr = (0.995,) if split == "authors" else tuple(tail_fractions or DEFAULT_TAIL_FRACTIONS)
  out = []
  for d in _dirs(direction):
    best = math.inf
    for f in fr:
      eta, _, _ = _best_rate(sigma, t, m, f * delta, azuma, split)
      if not np.isfinite(eta) or eta >= 1.0:
        continue
      best = min(best, _poisson_eps(sigma, eta, t * m, (1.0 - f) * delta, d, step))
    out.append(best)
  return EpsilonResult(host_f64(float(max(out))), host_f64(delta),
                       method="truncated_poisson", bound="upper")


def truncated_poisson_delta(*, sigma, steps_per_epoch, epsilon, num_selected=1, num_epochs=1,
                            direction: str = "both", azuma: str = "sinh",
                            tail_budgets=None, step=None):
  r"""Delta upper bound at ``epsilon`` of k-of-t allocation by truncated Poisson (Thm 4.1).

  Same bound as :func:`truncated_poisson_epsilon`:
  delta = delta_{P^{(m)}_{t',eta}}(eps) + b, minimised over the tail budget
  b = m(t' delta0 + delta'') in ``tail_budgets`` (default 10^{-4..-16});
  for each b the delta0/delta'' split minimising eta.

  Args: as :func:`truncated_poisson_epsilon`, with ``epsilon`` >= 0.

  Returns: ``DeltaResult(delta, epsilon, method="truncated_poisson",
  bound="upper")``, ``delta`` a ``np.float64`` in [0, 1] (1 when vacuous).
  Bound: upper.
  """
  sigma, t, m = _check(sigma, steps_per_epoch, num_selected, num_epochs)
  checks.check_range("epsilon", epsilon, 0.0, np.inf)
  checks.check_direction(direction)
  checks.check_choice("azuma", azuma, ("sinh", "cosh"))
  _check_fractions("tail_budgets", tail_budgets)
  _check_step(step)
  budgets = tuple(tail_budgets or (1e-4, 1e-6, 1e-8, 1e-10, 1e-12, 1e-14, 1e-16))
  out = []
  for d in _dirs(direction):
    best = 1.0
    for b in budgets:
      if b >= best:
        continue
      eta, _, _ = _best_rate(sigma, t, m, b, azuma, "optimized")
      if not np.isfinite(eta) or eta >= 1.0:
        continue
      best = min(best, _poisson_delta(sigma, eta, t * m, epsilon, d, step) + b)
    out.append(best)
  return DeltaResult(host_f64(float(min(1.0, max(out)))), host_f64(epsilon),
                     method="truncated_poisson", bound="upper")


# ---------------------------------------------------------- Thm 4.2 (recursive)

@functools.lru_cache(maxsize=32)
def _pld_laws(sigma: float, t: int):
  return apld.allocation_pld_laws(sigma, t)


def _pld_add_upper(sigma, t, eps_grid):
  """Certified add-direction delta upper bound of 1-of-t allocation
  (``allocation.pld`` laws computed once, evaluated on the whole grid)."""
  F = _pld_laws(float(sigma), int(t))
  return np.asarray(apld.delta_one(F, jnp.asarray(eps_grid, jnp.float64), 1), np.float64)


def _add_profile(sigma, t, eps_grid, bootstrap):
  """Upper bound on the add-direction delta of one 1-of-t round on a grid of eps."""
  eps_grid = np.asarray(eps_grid, np.float64)
  vals = []
  for b in bootstrap:
    if b == "pld":
      vals.append(_pld_add_upper(sigma, t, eps_grid))
    elif b == "direct":
      vals.append(np.asarray(bounds.direct_add_delta(sigma=sigma, steps_per_epoch=t,
                                                     epsilon=eps_grid).delta, np.float64))
    elif b == "decomposition":
      if t < 2:
        continue
      vals.append(np.array([float(bounds.decomposition_delta(
          sigma=sigma, steps_per_epoch=t, epsilon=float(e), direction="add").delta)
          for e in eps_grid]))
  if not vals:
    return np.ones_like(eps_grid)
  return np.minimum(1.0, np.min(np.stack(vals), axis=0))


def _tau_factor(eps_p, direction):
  # remove: tau = 1/(e^e (e^e - 1)); add: tau e^{2e} = 1/(1 - e^{-e})
  if direction == "remove":
    return np.exp(-eps_p) / np.expm1(eps_p)
  return 1.0 / -np.expm1(-eps_p)


def recursive_tail(*, sigma, steps_per_epoch, eps_prime, num_selected=1, num_epochs=1,
                   direction: str = "remove", bootstrap=("pld", "direct")):
  r"""Second term of Thm 4.2 over m rounds: m tau delta_add_A(eps') (remove) or m tau e^{2 eps'} delta_add_A(eps') (add).

  Feldman & Shenfeld, arXiv:2502.08202v3, Thm 4.2, tau = 1/(e^{eps'}(e^{eps'}-1)).

  Args:
    sigma > 0, steps_per_epoch, num_selected, num_epochs: the scheme (scalars).
    eps_prime: > 0, array. direction: "remove" or "add".
    bootstrap: add-profile bounds of one round, minimum taken: any of
      "pld" (tight allocation PLD upper), "direct" (Thm 4.9),
      "decomposition" (Thm 4.6 on the Poisson RDP).

  Returns: float64 numpy array (shape of eps_prime). Bound: upper.
  """
  sigma, t, m = _check(sigma, steps_per_epoch, num_selected, num_epochs)
  checks.check_positive("eps_prime", eps_prime)
  checks.check_choice("direction", direction, ("remove", "add"))
  checks.check_choices("bootstrap", bootstrap, _BOOTSTRAPS)
  e = np.asarray(eps_prime, np.float64)
  return m * _tau_factor(e, direction) * _add_profile(sigma, t, e, tuple(bootstrap))


def _eps_grid(t):
  hi = 0.5 * math.log(t)
  return np.geomspace(min(1e-3, hi / 2), hi, 400) if t > 1 else np.array([])


def recursive_epsilon(*, sigma, steps_per_epoch, delta, num_selected=1, num_epochs=1,
                      direction: str = "both", bootstrap=("pld", "direct"),
                      tail_fractions=None, step=None):
  r"""Epsilon upper bound of k-of-t allocation by the recursive bound (Thm 4.2), both directions.

  Feldman & Shenfeld, "Privacy amplification by random allocation",
  arXiv:2502.08202v3, Thm 4.2 (+ Lemma 3.2, union bound over m = kE rounds):

  .. math:: \vec\delta \le \vec\delta_{P^{(m)}_{t',\eta}}(\varepsilon) + m\tau\,
            \overleftarrow\delta_{A_{t'}}(\varepsilon'),\quad
            \overleftarrow\delta \le \overleftarrow\delta_{P^{(m)}_{t',\eta}}(\varepsilon)
            + m\tau e^{2\varepsilon'}\overleftarrow\delta_{A_{t'}}(\varepsilon'),

  eta = e^{2 eps'}/t' <= 1, tau = 1/(e^{eps'}(e^{eps'}-1)).

  Args:
    sigma: > 0 (scalar). steps_per_epoch: t >= 2 (t' = floor(t/k) >= 2 for a
      finite value). delta: (0, 1). num_selected, num_epochs: k, E.
    direction: "remove", "add" or "both" (max).
    bootstrap: add-profile bounds for delta_A(eps') (see
      :func:`recursive_tail`); default ("pld", "direct").
    tail_fractions: fractions f of delta given to the tail (default
      (0.5, 0.1, 0.01)); eps' = smallest grid value with tail <= f delta.
    step: PLD grid step (default: ``jaxacct.pld``'s step for the Poisson pair).

  Returns:
    ``EpsilonResult(epsilon, delta, method="recursive", bound="upper")``;
    ``epsilon`` a ``np.float64`` (+inf if no candidate has eta <= 1).

  Bound: upper.

  Numerical regimes: tested for sigma in [0.6, 4], t in [100, 1e6],
  delta >= 1e-10; each candidate and direction costs an FFT composition.
  """
  sigma, t, m = _check(sigma, steps_per_epoch, num_selected, num_epochs)
  checks.check_delta(delta)
  checks.check_direction(direction)
  checks.check_choices("bootstrap", bootstrap, _BOOTSTRAPS)
  _check_fractions("tail_fractions", tail_fractions)
  _check_step(step)
  fr = tuple(tail_fractions or _REC_FRACTIONS)
  grid = _eps_grid(t)
  if grid.size == 0:
    return _rec_eps(math.inf, delta)
  prof = _add_profile(sigma, t, grid, tuple(bootstrap))
  out = []
  for d in _dirs(direction):
    tail = m * _tau_factor(grid, d) * prof
    best = math.inf
    for f in fr:
      ok = np.nonzero(tail <= f * delta)[0]
      if ok.size == 0:
        continue
      i = int(ok[0])
      eta = math.exp(2.0 * grid[i]) / t
      if eta > 1.0:
        continue
      best = min(best, _poisson_eps(sigma, eta, t * m, delta - float(tail[i]), d, step))
    out.append(best)
  return _rec_eps(float(max(out)), delta)


def _rec_eps(e, delta):
  return EpsilonResult(host_f64(e), host_f64(delta), method="recursive", bound="upper")


def _rec_delta(d, epsilon):
  return DeltaResult(host_f64(d), host_f64(epsilon), method="recursive", bound="upper")


def recursive_delta(*, sigma, steps_per_epoch, epsilon, num_selected=1, num_epochs=1,
                    direction: str = "both", bootstrap=("pld", "direct"),
                    eps_prime=None, step=None):
  r"""Delta upper bound at ``epsilon`` of k-of-t allocation by the recursive bound (Thm 4.2).

  Same bound as :func:`recursive_epsilon`, minimised over eps' in
  ``eps_prime`` (default: epsilon x (1/2, 1, 2, 4), clipped to
  (0, ln(t')/2]); one Poisson PLD per candidate and direction.

  Args: as :func:`recursive_epsilon`, with ``epsilon`` > 0.

  Returns: ``DeltaResult(delta, epsilon, method="recursive",
  bound="upper")``, ``delta`` a ``np.float64`` in [0, 1]. Bound: upper.
  """
  sigma, t, m = _check(sigma, steps_per_epoch, num_selected, num_epochs)
  checks.check_positive("epsilon", epsilon)
  checks.check_direction(direction)
  checks.check_choices("bootstrap", bootstrap, _BOOTSTRAPS)
  if eps_prime is not None:
    checks.check_positive("eps_prime", eps_prime)
  _check_step(step)
  if t < 2:
    return _rec_delta(1.0, epsilon)
  hi = 0.5 * math.log(t)
  if eps_prime is None:
    eps_prime = [min(c * float(epsilon), hi) for c in (0.5, 1.0, 2.0, 4.0)]
  ep = np.unique(np.asarray(eps_prime, np.float64))
  ep = ep[(ep > 0) & (ep <= hi)]
  if ep.size == 0:
    return _rec_delta(1.0, epsilon)
  prof = _add_profile(sigma, t, ep, tuple(bootstrap))
  out = []
  for d in _dirs(direction):
    tail = m * _tau_factor(ep, d) * prof
    best = 1.0
    for e_p, tl in zip(ep, tail):
      if tl >= best:
        continue
      best = min(best, _poisson_delta(sigma, math.exp(2 * e_p) / t, t * m, epsilon, d, step)
                 + float(tl))
    out.append(best)
  return _rec_delta(float(min(1.0, max(out))), epsilon)
