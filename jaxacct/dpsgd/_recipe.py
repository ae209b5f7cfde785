r"""The DP-SGD recipe: a configuration -> its schedule, its event, its certified epsilon,
and the calibrated noise multiplier (see :mod:`jaxacct.dpsgd`)."""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from jaxacct import calibrator
from jaxacct._core import checks
from jaxacct._core.dtype import HOST_ONLY, OUTSIDE_JIT, HostDoor, host_door
from jaxacct._core.checks import OneStepTooLarge, WindowTooLarge
from jaxacct._core import progress as _progress
from jaxacct._core.progress import check_progress_arg
from jaxacct._core.results import EpsilonResult
from jaxacct.dpsgd import samplers
from jaxacct.dpsgd.samplers import Schedule
from jaxacct.dpsgd.samplers._registry import check_number

#: DP-SGD's doors run host code; inside jit/vmap, the jittable curves
_ON_HOST = HostDoor(
    f"{OUTSIDE_JIT}; inside jit/vmap use jaxacct.poisson.epsilon (Poisson sampling, "
    "method='rdp') or, for balls-in-bins sampling, jaxacct.allocation.allocation_rdp with "
    "jaxacct.mechanisms.rdp_to_epsilon.")


#: calibrate_noise_multiplier's search bracket for sigma and its default rtol
SIGMA_BRACKET, DEFAULT_RTOL = (1e-2, 1e4), 2.5e-4


@host_door(HOST_ONLY)
def schedule(*, num_examples, batch_size, num_epochs=None, sampling: str = "balls_in_bins",
             num_selected: int = 1, total_steps=None, **settings) -> Schedule:
  """Step counts of a DP-SGD run: ``steps_per_epoch`` (t) and ``total_steps`` (T).

  Each sampler's rule (:mod:`jaxacct.dpsgd.samplers`), e.g.:

  * balls_in_bins: t = floor(k N / B) steps per epoch (each example in k of
    them; expected batch k N / t >= B), T = t E.
  * poisson, truncated_poisson: q = B / N, T = ceil(E N / B) (or
    ``total_steps`` as given; then E = T B / N).
  * shuffle, fixed_size, fixed_size_with_replacement: t = floor(N / B)
    batches of exactly B per epoch, T = t E.

  Args:
    num_examples: N >= 1 (int).
    batch_size: B in [1, N]; an int, except for rate samplers (Poisson)
      where it is the expected batch size (real, > 0).
    num_epochs: E >= 1 (int); for rate samplers any real > 0. Give exactly
      one of ``num_epochs`` and ``total_steps``.
    sampling: a registered sampler's name (:func:`jaxacct.dpsgd.samplers.names`;
      default "balls_in_bins").
    num_selected: k >= 1, steps per epoch each example joins (balls_in_bins
      only; for the others count passes in ``num_epochs``).
    total_steps: T >= 1 (rate samplers only: the number of noisy updates).
    **settings: the sampler's own options, the fields of its settings
      dataclass (:attr:`jaxacct.dpsgd.samplers.Sampler.settings`), e.g.
      truncated_poisson's batch cap, cyclic_poisson's ``cycle_length``.

  Returns:
    :class:`Schedule`.
  """
  rec = samplers.get(sampling)
  for name, v in (("num_examples", num_examples), ("batch_size", batch_size),
                  ("num_epochs", num_epochs), ("num_selected", num_selected),
                  ("total_steps", total_steps)):
    if v is not None:
      checks.check_not_bool(name, v)
      checks.check_finite(name, v, scalar=True)
  check_number("num_examples", num_examples)
  checks.check_int("num_examples", num_examples, min_value=1)
  n = int(num_examples)
  check_number("batch_size", batch_size)
  check_number("num_selected", num_selected)
  checks.check_int("num_selected", num_selected, min_value=1)
  k = int(num_selected)
  if "num_selected" not in rec.options and k != 1:
    raise ValueError(f"num_selected applies to sampling='balls_in_bins' only; got "
                     f"num_selected={num_selected!r} with sampling={sampling!r} (count "
                     "passes over the data in num_epochs instead).")
  if (num_epochs is None) == (total_steps is None):
    raise ValueError("give exactly one of num_epochs (epochs E) and total_steps "
                     f"(noisy updates T); got num_epochs={num_epochs!r}, "
                     f"total_steps={total_steps!r}.")
  return rec.schedule(samplers.Request(n, batch_size, num_epochs, total_steps, k,
                                      _settings(rec, settings)))


def _settings(rec, given: dict):
  """The sampler's settings value built from ``given`` (None values: not given;
  ValueError naming a keyword that is no option of the sampler, and the samplers it
  belongs to)."""
  given = {k: v for k, v in given.items() if v is not None}
  fields = () if rec.settings is None else tuple(f.name for f in dataclasses.fields(rec.settings))
  for key, value in given.items():
    if key not in fields:
      owners = [n for n in samplers.names() if key in samplers.get(n).options]
      where = (f"applies to sampling={' or '.join(map(repr, owners))} only" if owners
               else "is no parameter of jaxacct.dpsgd")
      raise ValueError(f"{key} {where}; got {key}={value!r} with sampling={rec.name!r}.")
  return None if rec.settings is None else rec.settings(**given)


@host_door(HOST_ONLY)
def event(*, noise_multiplier, num_examples, batch_size, num_epochs=None,
          sampling: str = "balls_in_bins", num_selected: int = 1, total_steps=None,
          **settings):
  """The DpEvent of a DP-SGD run, for the accountant and :func:`jaxacct.calibrate`.

  The sampler's own event (:attr:`jaxacct.dpsgd.samplers.Sampler.event`), e.g.

  * balls_in_bins: ``RandomAllocationDpEvent(sigma, steps_per_epoch=t,
    num_selected=k, num_epochs=E)``;
  * poisson: ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
    GaussianDpEvent(sigma)), T)``;
  * shuffle (no amplification): ``SelfComposedDpEvent(GaussianDpEvent(sigma), E)``
  (a count of 1 gives the inner event).

  Args:
    noise_multiplier: sigma > 0 (scalar).
    num_examples, batch_size, num_epochs, sampling, num_selected, total_steps,
      **settings: the configuration, as in :func:`schedule`.

  Returns:
    DpEvent (:mod:`jaxacct.accounting.events`).
  """
  sched = schedule(num_examples=num_examples, batch_size=batch_size, num_epochs=num_epochs,
                   sampling=sampling, num_selected=num_selected, total_steps=total_steps,
                   **settings)
  check_number("noise_multiplier", noise_multiplier)
  checks.check_scalar("jaxacct.dpsgd.event", noise_multiplier=noise_multiplier)
  checks.check_finite("noise_multiplier", noise_multiplier)   # its sign: the sampler's event
  return samplers.get(sched.sampling).event(sched, float(noise_multiplier))


def _given(sched: Schedule) -> str:
  """The configuration as the user gave it (what an error names)."""
  rec = samplers.get(sched.sampling)
  if sched.sampling_probability is not None:
    run = f"num_epochs={sched.num_epochs:g} (or total_steps={sched.total_steps})"
  else:   # epochs of a fixed schedule are whole
    run = f"num_epochs={int(sched.num_epochs)}"
  k = f", num_selected={sched.num_selected}" if "num_selected" in rec.options else ""
  return (f"num_examples={sched.num_examples}, batch_size={sched.batch_size:g}{k}, {run} "
          f"(sampling={sched.sampling!r})")


def _restate(sched: Schedule, err: ValueError, what: str = "") -> ValueError:
  """A door's refusal of a count dpsgd derived (``steps_per_epoch`` or the total
  ``num_steps``), restated naming the arguments the user passed."""
  if isinstance(err, OneStepTooLarge):   # one step's own grid: already names its parameter
    return err
  if isinstance(err, WindowTooLarge) and sched.sampling_probability is None:
    return WindowTooLarge(
        f"{what}{_given(sched)} give T = {sched.total_steps} steps: too many for the PLD "
        f"accountant at this noise_multiplier ({err}) Use fewer epochs or a larger "
        "noise_multiplier.", points=err.points)
  if isinstance(err, WindowTooLarge):
    rdp = samplers.get(sched.sampling).rdp_poisson
    if rdp is None:
      also = ""
    else:
      q, div, steps = rdp(sched)
      sigma = "noise_multiplier" if div == 1 else f"noise_multiplier / {div}"
      also = (f", or jaxacct.poisson.epsilon(method='rdp', q={q:.6g}, sigma={sigma}, "
              f"num_steps={steps}, delta=...): a valid upper bound at any number of steps"
              + ("" if div == 1 else f" (the run is dominated by Poisson sampling at the "
                 f"same q with 1/{div} of the noise multiplier)"))
    return WindowTooLarge(
        f"{what}{_given(sched)} give T = {sched.total_steps} steps: too many for the PLD at "
        f"this noise_multiplier ({err}) Use fewer epochs, a larger noise_multiplier{also}.",
        points=err.points)
  if not str(err).startswith(("num_steps", "steps_per_epoch")):
    return err
  t = sched.steps_per_epoch
  rule = samplers.get(sched.sampling).steps_rule
  return ValueError(
      f"{_given(sched)} give {t} steps per epoch ({rule}), more than the "
      f"allocation bound supports ({err}) Use fewer examples per batch step (a larger "
      "batch_size or smaller num_examples).")


def _front_door(progress, name, value, delta, *, sign_checked_later=False, **sched_kw):
  """Shared checks of :func:`epsilon` and :func:`calibrate_noise_multiplier`.

  Checks ``progress``, builds the :class:`Schedule` from ``sched_kw``, then
  checks ``value`` (a positive number called ``name``; only a finite number with
  ``sign_checked_later``: the noise multiplier, whose sign the sampler's event
  checks, once) and ``delta``.
  """
  check_progress_arg(progress)
  sched = schedule(**sched_kw)
  check_number(name, value)
  if sign_checked_later:
    checks.check_finite(name, value)
    checks.check_accountable_noise(name, value)
  else:
    checks.check_positive(name, value)
  checks.check_delta(delta)
  return sched


@host_door(_ON_HOST)
def epsilon(*, noise_multiplier, num_examples, batch_size, delta, num_epochs=None,
            sampling: str = "balls_in_bins", num_selected: int = 1, total_steps=None,
            progress: Optional[bool] = None, **settings) -> EpsilonResult:
  r"""Certified epsilon at ``delta`` of a DP-SGD run (upper, with a lower where known).

  The evaluator's bracket of the run's event (:func:`jaxacct.dpsgd.event`,
  :func:`jaxacct.accounting.evaluator.bracket`: the accountant's for one
  question, so ``evaluator.accountant_for(event).get_epsilon_bounds(delta)`` gives
  the same upper, and a lower at least as large where
  :func:`~jaxacct.accounting.evaluator.lower_grid_step` reads it on a finer grid
  too), with the sampler's own lower bound beside it: the tight
  allocation PLD (Feldman & Shenfeld, arXiv:2602.17284v1) or no
  amplification, the smaller, for ``"balls_in_bins"``; the tight Poisson PLD
  (RDP where it gives no finite bound) for ``"poisson"`` and
  ``"cyclic_poisson"``; no amplification for ``"shuffle"``; the accountant's
  PLD of the event for the others (``fixed_size``,
  ``fixed_size_with_replacement``, ``truncated_poisson``).

  Args:
    noise_multiplier: sigma > 0 (noise std / clipping norm); scalar or array,
      broadcast with ``delta``.
    num_examples: N. batch_size: B. num_epochs: E. num_selected: k.
      total_steps: T (rate samplers only). **settings: the sampler's own
      options (its settings' fields). See :func:`schedule`.
    delta: in (0, 1).
    sampling: a registered sampler's name (default "balls_in_bins").
    progress: None (global switch), True or False: progress on long work.

  Returns:
    ``EpsilonResult(epsilon, delta, method, bound="upper", lower=..., details)``:
    ``epsilon`` the certified upper bound (float, or numpy array for array
    input); ``lower`` a certified lower bound on the true epsilon of the
    sampling (balls_in_bins with k = 1; shuffle when B divides N), else None;
    ``details["schedule"]`` the :class:`Schedule`.

  Bound: upper (``epsilon``) and lower (``lower``).
  """
  sched = _front_door(progress, "noise_multiplier", noise_multiplier, delta, sign_checked_later=True,
                      num_examples=num_examples, batch_size=batch_size,
                      num_epochs=num_epochs, sampling=sampling, num_selected=num_selected,
                      total_steps=total_steps, **settings)
  size = np.broadcast(np.asarray(noise_multiplier), np.asarray(delta)).size
  given = f"T={sched.total_steps}" if total_steps is not None else None
  with _progress_bar(sched, size, "epsilon", progress, given) as bar:
    try:
      res = samplers.get(sched.sampling).result(sched, noise_multiplier, delta)
      bar.update(size)
    except ValueError as err:
      raise _restate(sched, err, f"noise_multiplier={noise_multiplier!r} with ") from None
  return res


def _progress_bar(sched, size, what, enabled, given=None):
  """Progress on long work, labelled with the count the caller gave (``given``,
  e.g. ``"T=2340"``; default the epochs E), never a derived E = T B / N."""
  given = given or f"E={sched.num_epochs:g}"
  desc = f"jaxacct.dpsgd {what} ({sched.sampling}, {given})"
  return _progress.progress(total=size, desc=desc, enabled=enabled)


# ---------------------------------------------------------------------------
# calibration: a thin adapter over jaxacct.calibrate
# ---------------------------------------------------------------------------

@host_door(calibrator.CALIBRATE_ON_HOST)
def calibrate_noise_multiplier(*, epsilon, delta, num_examples, batch_size, num_epochs=None,
                               sampling: str = "balls_in_bins", num_selected: int = 1,
                               total_steps=None, rtol: float = DEFAULT_RTOL,
                               progress: Optional[bool] = None, **settings):
  """Smallest certified noise multiplier meeting each (epsilon, delta) target.

  ``jaxacct.calibrate(lambda s: event(noise_multiplier=s, ...), epsilon,
  delta, bracket=(1e-2, 1e4))``: for each target, a sigma whose certified
  upper epsilon (the one :func:`epsilon` returns, same ``sampling``) is <= the
  target, while ``sigma / (1 + rtol)`` is evaluated infeasible (or refused:
  a sigma too small for the PLD's grid, or with too many steps at it,
  counts as infeasible, so the search goes on above it). Other
  parameters (epochs, steps, batch size) calibrate the same way, e.g. the
  largest number of epochs at sigma ``s``: ``jaxacct.calibrate(lambda E:
  event(noise_multiplier=s, num_epochs=E, ...), epsilon, delta, bracket=(1,
  1000), discrete=True, increasing=True)``.

  Args:
    epsilon: target(s) > 0; array broadcast with ``delta``.
    delta: in (0, 1).
    num_examples, batch_size, num_epochs, sampling, num_selected, total_steps,
      **settings: the configuration, as in :func:`schedule`.
    rtol: relative tolerance on sigma, in (0, 0.1] (default 2.5e-4).
    progress: None (global switch), True or False.

  Returns:
    float (scalar targets) or float64 numpy array of the broadcast shape.

  Raises:
    ValueError: invalid input, or a target that needs sigma > 1e4.

  Bound: upper (each returned sigma is certified sufficient; conservative).
  """
  sched = _front_door(progress, "epsilon", epsilon, delta, num_examples=num_examples,
                      batch_size=batch_size, num_epochs=num_epochs, sampling=sampling,
                      num_selected=num_selected, total_steps=total_steps, **settings)
  check_number("rtol", rtol)
  make_event = samplers.get(sched.sampling).event
  try:
    return calibrator.calibrate(lambda s: make_event(sched, s), epsilon, delta,
                                bracket=SIGMA_BRACKET, increasing=False,
                                rtol=rtol, name="noise_multiplier", progress=progress)
  except ValueError as err:
    raise _restate(sched, err, f"epsilon={epsilon!r} (a noise_multiplier the search "
                   "tried) with ") from None
