r"""Random allocation with *fixed* bins across epochs (jax_privacy's balls-in-bins).

Two samplers share the name "balls-in-bins" and the same per-epoch batches,
but not the same privacy:

Proofs and sources: docs/bounds/fixed_bins.md ("Bounds and proofs /
Fixed bins").
"""

from __future__ import annotations

import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import checks
from jaxacct._core.dtype import HOST_ONLY, host_door
from jaxacct._core.units import per_epoch_steps
from jaxacct.allocation.pld import allocation_pld_delta, allocation_pld_epsilon

_COMPOSE_TAIL = 1e-30


def equivalent_sigma(sigma, num_epochs):
  """Noise multiplier of the one-epoch allocation equal to E fixed-bin epochs.

  Fixed bins over ``num_epochs`` = E epochs at noise ``sigma`` is exactly one
  epoch of k-of-t allocation at ``sigma / sqrt(E)`` (module docstring, both
  directions, any k). Works on arrays (broadcasts).

  Bound: exact (an identity of dominating pairs).
  """
  checks.check_sigma("sigma", sigma)
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
  checks.check_int("num_epochs", num_epochs, min_value=1, scalar=True)
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


@host_door(HOST_ONLY)
@per_epoch_steps
def fixed_bins_pld_epsilon(*, sigma=None, delta, steps_per_epoch, num_selected=1, num_epochs=1,
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
    delta: in (0, 1). steps_per_epoch: t (steps per epoch). num_selected: k.
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

    >>> r = fixed_bins_pld_epsilon(sigma=1.0, delta=1e-6, steps_per_epoch=100, num_epochs=3)
    >>> round(float(r.upper), 2)   # fresh draws would give 1.18
    4.66
  """
  s, mech = _route(sigma, num_epochs, mechanism, laplace_step)
  return allocation_pld_epsilon(sigma=s, delta=delta, steps_per_epoch=steps_per_epoch,
                                num_selected=num_selected, num_epochs=1,
                                direction=direction, mechanism=mech, **pld_kwargs)


@host_door(HOST_ONLY)
@per_epoch_steps
def fixed_bins_pld_delta(*, sigma=None, epsilon, steps_per_epoch, num_selected=1, num_epochs=1,
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
  return allocation_pld_delta(sigma=s, epsilon=epsilon, steps_per_epoch=steps_per_epoch,
                              num_selected=num_selected, num_epochs=1,
                              direction=direction, mechanism=mech, **pld_kwargs)
