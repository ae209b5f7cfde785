"""Tight sigma calibration of k-of-t random allocation over E epochs (private).

The host-side driver behind
:func:`jaxacct.allocation.pld.allocation_pld_calibrate_sigma`. It compiles
nothing of its own: every sigma it tries is evaluated by the epsilon front
door's own jitted programs (``laws_batch`` and ``query_batch``, same static
arguments, one lane per target), so a calibration after an epsilon question
at the same setting compiles nothing, and a cold one compiles what the
epsilon question compiles.

1. A model (NumPy): the composed rounds as Gaussian DP with the CLT
   parameter mu^2 = sum_i c_i min((e^{1/sigma^2} - 1) / f_i, 1 / sigma^2)
   (c_i rounds of 1-of-f_i; Poisson-like rate 1/f_i, capped by one Gaussian
   step), inverted for the target: the first sigma per target.
2. One front-door evaluation there; the model's epsilon is rescaled by the
   measured ratio and inverted again, a little past the root (so that the two
   points usually bracket it): a second evaluation.
3. :func:`jaxacct._core.solve.search_decreasing_host` from those two points
   (bracket, then Illinois on log sigma with probes shifted across the root)
   until the bracket is within ``rtol``.

Feasible means ``upper epsilon <= target * (1 - SAFETY)``, the upper epsilon
computed by the front door's programs; the returned sigma was evaluated
feasible and sigma / (1 + rtol) lies at or below a sigma evaluated infeasible.
The model only steers: a poor model costs evaluations, never validity.
"""

from __future__ import annotations

import math

import numpy as np

from jaxacct._core.solve import search_decreasing_host

BATCH = 4         # lanes per block of the maps on accelerators (~12 MB a lane)
SAFETY = 1e-10    # a calibrated sigma's epsilon is <= target * (1 - SAFETY)
_OVERSHOOT = 0.2  # the second point aims past the model root by this share of the step


def _bisect_log(f, lo, hi, iters=64):
  """x in [lo, hi] (log scale, vectorised) with f(x) changing sign from <= 0 to > 0."""
  a, b = np.log(lo), np.log(hi)
  for _ in range(iters):
    m = 0.5 * (a + b)
    up = f(np.exp(m)) > 0
    a, b = np.where(up, a, m), np.where(up, m, b)
  return np.exp(0.5 * (a + b))


def _gdp_mu(eps, delta):
  """mu with delta(eps) = delta for mu-Gaussian DP (Dong, Roth & Su, Cor. 2.13)."""
  from scipy.special import log_ndtr

  def excess(mu):   # log delta(eps; mu) - log delta, increasing in mu
    la, lb = log_ndtr(-eps / mu + mu / 2), log_ndtr(-eps / mu - mu / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
      return la + np.log(-np.expm1(np.minimum(eps + lb - la, 0.0))) - np.log(delta)
  return _bisect_log(excess, np.full(eps.shape, 1e-8), np.full(eps.shape, 1e3))


def model_sigma(eps, delta, rounds):
  """The model's sigma per target (``rounds``: [(count c_i, steps f_i)])."""
  mu = _gdp_mu(eps, delta)

  def mu2(s):
    with np.errstate(over="ignore"):
      return sum(c * np.minimum(np.expm1(1.0 / s**2) / f, 1.0 / s**2) for c, f in rounds if c)
  return _bisect_log(lambda s: mu**2 - mu2(s), np.full(eps.shape, 1e-3),
                     np.full(eps.shape, 1e6))


def calibrate(evaluate, eps, delta, *, rounds, lo, hi, rtol, mechanism):
  """Smallest sigma per target with evaluate(sigma) <= eps (1 - SAFETY), to rtol (host).

  Args:
    evaluate: ``evaluate(sigma)`` -> upper epsilons (max over directions) of
      every target at ``sigma`` (1-D arrays of the targets' length; the
      front door's computation).
    eps, delta: 1-D targets.
    rounds: [(c_i, f_i)]: the composed rounds (Lemma 3.2), for the model.
    lo, hi: the sigma bracket; rtol: relative tolerance.
    mechanism: "gaussian" or "laplace" (the model reads a Laplace scale as
      a Gaussian sigma: a rougher start).

  Returns:
    float64 array: sigma per target, evaluated feasible.

  Raises:
    ValueError: from :func:`search_decreasing_host` (a target not met at
      ``hi``).
  """
  del mechanism   # the Gaussian model steers both mechanisms
  target = eps * (1.0 - SAFETY)
  s0 = np.clip(model_sigma(target, delta, rounds), lo, hi)
  e0 = np.asarray(evaluate(s0), np.float64)
  # rescale the model by the measured ratio and aim a little past its root
  ok = np.isfinite(e0) & (e0 > 0)
  ratio = np.where(ok, e0, target) / np.maximum(eps_model(s0, delta, rounds), 1e-300)
  s1 = model_sigma(target / np.where(ok, ratio, 1.0), delta, rounds)
  step = np.log(s1 / s0)
  s1 = np.where(ok, s0 * np.exp(step * (1.0 + _OVERSHOOT) + np.sign(step) * math.log1p(rtol)),
                s0 * 2.0)
  s1 = np.clip(s1, lo, hi)
  e1 = np.asarray(evaluate(s1), np.float64)
  park = s1.copy()

  def upper_fn(s, idx):   # all lanes each time (one compiled shape); idx's are read
    full = park.copy()
    full[idx] = s
    return np.asarray(evaluate(full), np.float64)[idx]

  return search_decreasing_host(upper_fn, target, s1, tight_hint=False, rtol=rtol,
                                bounds=(lo, hi), name="sigma",
                                known=(np.stack([s0, s1]), np.stack([e0, e1])))


def eps_model(sigma, delta, rounds):
  """The model's epsilon at ``sigma`` (vectorised)."""
  from scipy.special import log_ndtr
  with np.errstate(over="ignore"):
    mu = np.sqrt(sum(c * np.minimum(np.expm1(1.0 / sigma**2) / f, 1.0 / sigma**2)
                     for c, f in rounds if c))

  def excess(e):   # log delta(e) - log delta, decreasing in e: feasible when <= 0
    la, lb = log_ndtr(-e / mu + mu / 2), log_ndtr(-e / mu - mu / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
      return la + np.log(-np.expm1(np.minimum(e + lb - la, 0.0))) - np.log(delta)
  hi = mu**2 / 2 + mu * np.sqrt(2 * np.log(1 / delta)) + 1.0
  return _bisect_log(lambda e: -excess(e), np.full(np.shape(mu), 1e-12), hi)
