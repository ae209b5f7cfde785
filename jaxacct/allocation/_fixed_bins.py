r"""Random allocation with *fixed* bins across epochs (jax_privacy's balls-in-bins).

Two samplers share the name "balls-in-bins" and the same per-epoch batches,
but not the same privacy:

* **fresh** (``fresh_each_epoch=True``, jaxacct's default and
  :class:`jaxacct.sampling.BallsInBinsSampler`): every epoch each example
  draws a *new* uniformly random set of k of the t steps, independently of
  earlier epochs. Accounted as the E-fold composition of k-of-t allocation.
* **fixed** (``fresh_each_epoch=False``): the k-set is drawn once and reused
  in every epoch (the example sits in the same bins, at the same positions,
  every cycle). This is jax_privacy 2.0's
  ``BallsInBinsSampling(iterations=t * E, cycle_length=t)`` (example 7 at
  steps 78, 312, 546 for t = 234) and
  ``jaxacct.sampling.BallsInBinsSampler(fresh_each_epoch=False)``.
  Accounting it as fresh draws *under-reports* epsilon (sigma = 1, t = 100,
  E = 3, delta = 1e-6: fresh 1.181, fixed 4.660).

Result (this module's; Bound: exact reduction)
----------------------------------------------
Fixed bins over E epochs with a one-step dominating pair (P, Q) is *exactly*
one epoch of k-of-t allocation with the one-step pair (P^E, Q^E) (the E-fold
composition), in both directions and for every k >= 1. For the Gaussian
mechanism (P, Q) = (N(1, s^2), N(0, s^2)), (P^E, Q^E) is equivalent to
(N(1, s^2/E), N(0, s^2/E)), so

.. math:: \delta^{\mathrm{fixed}}_{t,k,E}(\varepsilon;\sigma)
          = \delta^{\mathrm{alloc}}_{t,k,1}(\varepsilon;\sigma/\sqrt{E})
          \quad\text{(remove and add)}.

Derivation.

1. *Reduction to a randomizer.* Feldman & Shenfeld, "Privacy amplification
   by random allocation", arXiv:2502.08202v3, Thm 3.1, bound the adaptive
   t-step algorithm by its non-adaptive randomizer R (dominating pair
   (R(*), R(bot)) = (P, Q)). The proof conditions on the allocation of the
   other n - 1 examples (quasi-convexity of the hockey stick) and then maps
   the randomizer's outputs to the algorithm's step by step with randomized
   post-processings phi_{v^{i-1}} (Lemma 2.10); it uses only that the target's
   participation pattern is drawn independently of the data. It therefore
   applies verbatim to the E t-step algorithm whose pattern is the set of
   steps {(e, j) : j in S, e = 1..E} with S a uniform k-subset of [t], drawn
   once. The dominating pair of fixed bins is the mixture over S of
   prod_{e,j} (P if j in S else Q) against Q^{E t} (remove; add = swapped).
2. *Regrouping by position.* Reordering coordinates is a bijection (a
   post-processing both ways), so group the E observations at each position
   j: block j is P^E if j in S, Q^E otherwise. The pair is then
   (mean_S prod_j (P^E if j in S else Q^E), (Q^E)^t): k-of-t allocation of
   the one-step pair (P^E, Q^E), one epoch. This holds for any mechanism.
3. *Gaussian.* (N(1_E, s^2 I_E), N(0, s^2 I_E)) and (N(1, s^2/E), N(0, s^2/E))
   are equivalent pairs (each a post-processing of the other, with the same
   kernel under both hypotheses): forward, w = mean of the E coordinates;
   backward, y = w 1_E + s (I - 1 1^T / E)^{1/2} z with fresh z ~ N(0, I_E),
   which restores the exact law (the mean is a sufficient statistic for the
   location family and the residual is ancillary). Equivalently the
   likelihood ratio of the fixed-bin pair,
   ``L(y) = C(t,k)^{-1} sum_S prod_{j in S} exp(z_j / s^2 - E / (2 s^2))``,
   ``z_j = sum_e y_{e,j}``, depends on y only through w = z / E, where it
   equals the k-of-t allocation ratio at s' = s / sqrt(E):
   ``exp(E w / s^2 - E/(2 s^2)) = exp(w / s'^2 - 1/(2 s'^2))``. Allocation
   maps equivalent one-step pairs to equivalent pairs (each coordinate is
   post-processed by the same kernel), so every hockey-stick divergence, of
   both directions and at every epsilon (including epsilon < 0), coincides.
   Nothing in 1-3 uses k = 1.
4. *Mechanisms given as PLDs (and Laplace).* By step 2 the fixed-bin scheme
   is 1 epoch of k-of-t allocation of the E-fold self-composition.
   :func:`self_composed` builds it with ``jaxacct.pld.compose``: the
   composition of pessimistic PLDs is pessimistic (a convex-order increase of
   the Q-law of the likelihood ratio: FFT composition, tail charges to
   +inf), which is what ``allocation.pld`` needs for its upper bound; the
   composition of optimistic PLDs keeps every atom's P-mass at a loss no
   larger than the true one (up to the composition's 1e-30 aliasing mass),
   the contract of ``allocation.pld``'s lower path. The Laplace mechanism
   ("laplace") goes through ``jaxacct.pld.laplace`` the same way.

Checked (tests/test_fixed_bins.py): exact quadrature of the *raw* E t-
dimensional pair (t = 2, E = 2 and 3, no use of the reduction) against the
allocation PLD at sigma / sqrt(E); a raw Monte Carlo at t = 100, E = 3; the
Gaussian through the PLD route (``compose(gaussian(sigma), E)``) against
sigma / sqrt(E); and fresh-draw accounting shown to under-report.

Public API (``jaxacct.allocation``): :func:`fixed_bins_pld_epsilon`,
:func:`fixed_bins_pld_delta` (certified upper and lower, ``AllocationPLDBounds``);
their steps :func:`equivalent_sigma` and :func:`self_composed` are not public. The RDP front doors take
``fresh_each_epoch=False`` (``jaxacct.allocation.epsilon``/``delta``/
``calibrate_sigma``), which is the Gaussian identity above.
"""

from __future__ import annotations

import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import checks
from jaxacct.allocation.pld import allocation_pld_delta, allocation_pld_epsilon

_COMPOSE_TAIL = 1e-30


def equivalent_sigma(sigma, num_epochs):
  """Noise multiplier of the one-epoch allocation equal to E fixed-bin epochs.

  Fixed bins over ``num_epochs`` = E epochs at noise ``sigma`` is exactly one
  epoch of k-of-t allocation at ``sigma / sqrt(E)`` (module docstring, both
  directions, any k). Works on arrays (broadcasts).

  Bound: exact (an identity of dominating pairs).
  """
  checks.check_positive("sigma", sigma)
  checks.check_int("num_epochs", num_epochs, min_value=1)
  return np.asarray(sigma, np.float64) / np.sqrt(np.asarray(num_epochs, np.float64))


def _compose(pld, E):
  if isinstance(pld, jpld.PairPLD):
    return jpld.PairPLD(_compose(pld.remove, E), _compose(pld.add, E))
  if isinstance(pld, jpld.PLD):
    return jpld.compose(pld, int(E), tail_mass=_COMPOSE_TAIL)
  raise ValueError("mechanism must be 'gaussian', 'laplace', a jaxacct.pld.PLD, a PairPLD "
                   f"or a tuple (upper, lower) of them; got {type(pld).__name__}.")


def self_composed(mechanism, num_epochs, *, scale=None, step: float = 1e-4):
  """The one-step mechanism of fixed-bin allocation: the E-fold self-composition.

  Fixed bins over E epochs = one epoch of k-of-t allocation of (P^E, Q^E)
  (module docstring, step 2). Returns it in the form
  ``jaxacct.allocation.pld.allocation_pld_epsilon(mechanism=...)`` takes.

  Args:
    mechanism: ``"laplace"`` (then ``scale`` = Laplace scale b > 0, and the
      result is ``(compose(laplace(b), E), compose(laplace(b, optimistic), E))``),
      a pessimistic ``jaxacct.pld.PLD``, a ``PairPLD(remove, add)`` or a
      tuple ``(upper, lower)`` of them (each element composed E times).
      ``"gaussian"`` is refused here: use :func:`equivalent_sigma` (exact,
      no grid).
    num_epochs: E >= 1.
    scale: Laplace scale (only for ``"laplace"``).
    step: loss-grid step of the Laplace PLDs.

  Returns:
    A PLD, PairPLD or ``(upper, lower)`` tuple (upper pessimistic; lower
    optimistic).

  Bound: upper element dominates (P^E, Q^E); lower element is dominated.
  """
  checks.check_int("num_epochs", num_epochs, min_value=1)
  checks.check_positive("step", step)
  if scale is not None:
    checks.check_positive("scale", scale)
  E = int(num_epochs)
  if isinstance(mechanism, str):
    checks.check_choice("mechanism", mechanism, ("laplace",))
    if scale is None:
      raise ValueError("scale (the Laplace scale b > 0) is required for mechanism='laplace'.")
    up = jpld.laplace(float(scale), step=float(step), pessimistic=True)
    lo = jpld.laplace(float(scale), step=float(step), pessimistic=False)
    return (_compose(up, E), _compose(lo, E)) if E > 1 else (up, lo)
  if E == 1:
    return mechanism
  if isinstance(mechanism, (jpld.PLD, jpld.PairPLD)):   # NamedTuples: test first
    return _compose(mechanism, E)
  if isinstance(mechanism, (tuple, list)):
    if len(mechanism) != 2:
      raise ValueError(f"a mechanism tuple must be (upper, lower); got {len(mechanism)} items.")
    return (_compose(mechanism[0], E), _compose(mechanism[1], E))
  return _compose(mechanism, E)


def _route(sigma, num_epochs, mechanism, laplace_step):
  """(sigma, mechanism) of the equivalent one-epoch allocation."""
  checks.check_int("num_epochs", num_epochs, min_value=1)
  checks.check_positive("laplace_step", laplace_step)
  E = int(num_epochs)
  if isinstance(mechanism, str):
    checks.check_choice("mechanism", mechanism, ("gaussian", "laplace"))
    if sigma is None:
      raise ValueError(f"sigma is required for mechanism={mechanism!r}.")
    if mechanism == "gaussian" or E == 1:
      return (equivalent_sigma(sigma, E) if mechanism == "gaussian" else sigma), mechanism
    if np.ndim(sigma):
      raise ValueError("mechanism='laplace' with fixed bins takes a scalar sigma (the "
                       f"Laplace scale); got shape {np.shape(sigma)}.")
    return None, self_composed("laplace", E, scale=float(sigma), step=laplace_step)
  if sigma is not None:
    raise ValueError("sigma must be None when the mechanism is given as a PLD.")
  return None, self_composed(mechanism, E)


def fixed_bins_pld_epsilon(*, sigma=None, delta, num_steps, num_selected=1, num_epochs=1,
                           direction: str = "both", mechanism="gaussian",
                           laplace_step: float = 1e-4, **pld_kwargs):
  r"""Epsilon of k-of-t allocation with fixed bins over E epochs: certified bracket.

  Module docstring (derivation from Feldman & Shenfeld, arXiv:2502.08202v3,
  Thm 3.1): equals one epoch of k-of-t allocation of the E-fold composed
  one-step pair; Gaussian: sigma / sqrt(E). Computed by
  :func:`jaxacct.allocation.pld.allocation_pld_epsilon` with
  ``num_epochs=1`` (so for k > 1 its Lemma 3.2 reduction applies as there,
  and ``lower`` bounds the reduced object).

  .. math:: \varepsilon^{\mathrm{fixed}}_{t,k,E}(\delta;\sigma)
            = \varepsilon^{\mathrm{alloc}}_{t,k,1}(\delta;\sigma/\sqrt E)

  Matches: jax_privacy 2.0 ``BallsInBinsSampling(iterations=t*E,
  cycle_length=t)``; ``jaxacct.sampling.BallsInBinsSampler(
  fresh_each_epoch=False)``. (The fresh sampler is accounted by
  ``allocation_pld_epsilon(num_epochs=E)``.)

  Args:
    sigma: Gaussian noise multiplier (or Laplace scale for
      ``mechanism="laplace"``), > 0; arrays allowed for the Gaussian with
      k = 1. None when ``mechanism`` is given as PLDs.
    delta: in (0, 1). num_steps: t (steps per epoch). num_selected: k.
    num_epochs: E >= 1 (E = 1: identical to fresh).
    direction: "remove", "add" or "both".
    mechanism: "gaussian", "laplace", or PLDs as in ``allocation_pld_epsilon``
      (the one-step pair; it is composed E times by :func:`self_composed`).
    laplace_step: loss-grid step of the Laplace PLD (``"laplace"``, E > 1).
    **pld_kwargs: passed to ``allocation_pld_epsilon`` (``grid_size``,
      ``tail``, ``composition_step``, ...).

  Returns:
    ``AllocationPLDBounds(upper, lower, remove, add)`` as
    ``allocation_pld_epsilon``.

  Bound: upper (``upper``) and lower (``lower``), exactly as the
  allocation PLD of the equivalent one-epoch scheme.

  Example::

    >>> r = fixed_bins_pld_epsilon(sigma=1.0, delta=1e-6, num_steps=100, num_epochs=3)
    >>> round(float(r.upper), 2)   # fresh draws would give 1.18
    4.66
  """
  s, mech = _route(sigma, num_epochs, mechanism, laplace_step)
  return allocation_pld_epsilon(sigma=s, delta=delta, num_steps=num_steps,
                                num_selected=num_selected, num_epochs=1,
                                direction=direction, mechanism=mech, **pld_kwargs)


def fixed_bins_pld_delta(*, sigma=None, epsilon, num_steps, num_selected=1, num_epochs=1,
                         direction: str = "both", mechanism="gaussian",
                         laplace_step: float = 1e-4, **pld_kwargs):
  r"""Delta of k-of-t allocation with fixed bins over E epochs: certified bracket.

  As :func:`fixed_bins_pld_epsilon`, through
  :func:`jaxacct.allocation.pld.allocation_pld_delta` with ``num_epochs=1``.

  .. math:: \delta^{\mathrm{fixed}}_{t,k,E}(\varepsilon;\sigma)
            = \delta^{\mathrm{alloc}}_{t,k,1}(\varepsilon;\sigma/\sqrt E)

  Returns:
    ``AllocationPLDBounds`` of deltas.

  Bound: upper and lower.
  """
  s, mech = _route(sigma, num_epochs, mechanism, laplace_step)
  return allocation_pld_delta(sigma=s, epsilon=epsilon, num_steps=num_steps,
                              num_selected=num_selected, num_epochs=1,
                              direction=direction, mechanism=mech, **pld_kwargs)
