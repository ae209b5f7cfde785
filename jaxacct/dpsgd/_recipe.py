r"""The DP-SGD recipe: a configuration -> its schedule, its event, its certified epsilon,
and the calibrated noise multiplier (see :mod:`jaxacct.dpsgd`)."""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np

from jaxacct import accounting, calibrator
from jaxacct import poisson as poisson_door
from jaxacct._core import checks
from jaxacct._core.checks import WindowTooLarge
from jaxacct._core import progress as _progress
from jaxacct._core.progress import check_progress_arg
from jaxacct._core.results import EpsilonResult

# the values ``sampling=`` accepts (the statement and the command line read them)
SAMPLINGS = ("balls_in_bins", "poisson", "shuffle")
_SIGMA_MIN, _SIGMA_MAX = 1e-2, 1e4   # calibration search range


class Schedule(NamedTuple):
  """Step counts implied by a DP-SGD configuration (see :func:`schedule`).

  Attributes:
    sampling: "balls_in_bins", "poisson" or "shuffle".
    num_examples: N. batch_size: B (expected batch size for Poisson).
    num_epochs: E (a float for Poisson given ``total_steps``).
    num_selected: k (balls_in_bins; 1 otherwise).
    steps_per_epoch: t (balls_in_bins, shuffle); None for Poisson (its steps
      are independent; an epoch is N/B steps on average).
    total_steps: T, the number of noisy updates.
    sampling_rate: q = B/N for Poisson; None otherwise.
  """
  sampling: str
  num_examples: int
  batch_size: float
  num_epochs: float
  num_selected: int
  steps_per_epoch: Optional[int]
  total_steps: int
  sampling_rate: Optional[float]


def schedule(*, num_examples, batch_size, num_epochs=None, sampling: str = "balls_in_bins",
             num_selected: int = 1, total_steps=None) -> Schedule:
  """Step counts of a DP-SGD run: ``steps_per_epoch`` (t) and ``total_steps`` (T).

  * balls_in_bins: t = floor(k N / B) steps per epoch (each example in k of
    them; expected batch k N / t >= B), T = t E.
  * poisson: q = B / N, T = ceil(E N / B) (or ``total_steps`` as given; then
    E = T B / N).
  * shuffle: t = floor(N / B) fixed-size batches per epoch, T = t E.

  Args:
    num_examples: N >= 1 (int).
    batch_size: B in [1, N]; an int, except for Poisson where it is the
      expected batch size (real, > 0).
    num_epochs: E >= 1 (int); for Poisson any real > 0. Give exactly one of
      ``num_epochs`` and ``total_steps``.
    sampling: "balls_in_bins" (default), "poisson" or "shuffle".
    num_selected: k >= 1, steps per epoch each example joins (balls_in_bins
      only; for the others count passes in ``num_epochs``).
    total_steps: T >= 1 (Poisson only: the number of noisy updates).

  Returns:
    :class:`Schedule`.
  """
  checks.check_choice("sampling", sampling, SAMPLINGS)
  _check_number("num_examples", num_examples)
  checks.check_int("num_examples", num_examples, min_value=1)
  n = int(num_examples)
  _check_number("batch_size", batch_size)
  _check_number("num_selected", num_selected)
  checks.check_int("num_selected", num_selected, min_value=1)
  k = int(num_selected)
  if sampling != "balls_in_bins" and k != 1:
    raise ValueError(f"num_selected applies to sampling='balls_in_bins' only; got "
                     f"num_selected={num_selected!r} with sampling={sampling!r} (count "
                     "passes over the data in num_epochs instead).")
  if (num_epochs is None) == (total_steps is None):
    raise ValueError("give exactly one of num_epochs (epochs E) and total_steps "
                     f"(noisy updates T); got num_epochs={num_epochs!r}, "
                     f"total_steps={total_steps!r}.")
  if sampling == "poisson":
    checks.check_range("batch_size", batch_size, 0.0, n, lo_open=True)
    q = float(batch_size) / n
    if total_steps is not None:
      _check_number("total_steps", total_steps)
      checks.check_int("total_steps", total_steps, min_value=1)
      T = int(total_steps)
      E = T * q
    else:
      _check_number("num_epochs", num_epochs)
      checks.check_positive("num_epochs", num_epochs)
      E = float(num_epochs)
      T = int(math.ceil(E / q - 1e-9))
    return Schedule(sampling, n, float(batch_size), E, 1, None, max(T, 1), q)
  if total_steps is not None:
    raise ValueError(f"total_steps applies to sampling='poisson' only; with "
                     f"sampling={sampling!r} give num_epochs (T = steps_per_epoch * "
                     f"num_epochs); got total_steps={total_steps!r}.")
  checks.check_int("batch_size", batch_size, min_value=1, max_value=n)
  _check_number("num_epochs", num_epochs)
  checks.check_int("num_epochs", num_epochs, min_value=1)
  B, E = int(batch_size), int(num_epochs)
  t = (k * n) // B if sampling == "balls_in_bins" else n // B
  if t < k:
    raise ValueError(f"num_selected must be <= steps_per_epoch = floor(k N / B) = {t}; "
                     f"got num_selected={k}.")
  return Schedule(sampling, n, float(B), float(E), k, int(t), int(t) * E, None)


def _check_number(name, x):
  if isinstance(x, (str, bytes)) or isinstance(x, bool):
    raise ValueError(f"{name} must be a number; got {x!r}.")


def _event(sched: Schedule, sigma):
  """The DpEvent of a run (see :func:`event`)."""
  ev = accounting.events   # loads on first use: dp_accounting comes with the events
  if sched.sampling == "balls_in_bins":
    return ev.RandomAllocationDpEvent(sigma=sigma, steps_per_epoch=sched.steps_per_epoch,
                                      num_selected=sched.num_selected,
                                      num_epochs=int(sched.num_epochs))
  if sched.sampling == "poisson":
    step = ev.PoissonSampledDpEvent(sched.sampling_rate, ev.GaussianDpEvent(sigma))
  else:
    step = ev.GaussianDpEvent(sigma)
  count = sched.total_steps if sched.sampling == "poisson" else int(sched.num_epochs)
  return step if count == 1 else ev.SelfComposedDpEvent(step, count)


def event(*, noise_multiplier, num_examples, batch_size, num_epochs=None,
          sampling: str = "balls_in_bins", num_selected: int = 1, total_steps=None):
  """The DpEvent of a DP-SGD run, for the accountant and :func:`jaxacct.calibrate`.

  * balls_in_bins: ``RandomAllocationDpEvent(sigma, steps_per_epoch=t,
    num_selected=k, num_epochs=E)``;
  * poisson: ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
    GaussianDpEvent(sigma)), T)``;
  * shuffle (no amplification): ``SelfComposedDpEvent(GaussianDpEvent(sigma), E)``
  (a count of 1 gives the inner event).

  Args:
    noise_multiplier: sigma > 0 (scalar).
    num_examples, batch_size, num_epochs, sampling, num_selected, total_steps:
      the configuration, as in :func:`schedule`.

  Returns:
    DpEvent (:mod:`jaxacct.accounting.events`).
  """
  sched = schedule(num_examples=num_examples, batch_size=batch_size, num_epochs=num_epochs,
                   sampling=sampling, num_selected=num_selected, total_steps=total_steps)
  _check_number("noise_multiplier", noise_multiplier)
  checks.check_scalar("jaxacct.dpsgd.event", noise_multiplier=noise_multiplier)
  checks.check_positive("noise_multiplier", noise_multiplier)
  return _event(sched, float(noise_multiplier))


def _upper_lower(sched: Schedule, sig, dl, *, bar=None):
  """(upper, lower or None, method, details) on flat float64 arrays.

  The upper is :func:`jaxacct.calibrator.upper_epsilon` of :func:`event` (the
  function :func:`calibrate_noise_multiplier` meets), by the same doors.
  """
  E = int(sched.num_epochs)
  if sched.sampling == "balls_in_bins":
    t, k = sched.steps_per_epoch, sched.num_selected
    up_pld, lo_pld = calibrator.allocation_upper_lower(sig, dl, t, k, E)
    up, loc = calibrator.min_no_amplification(up_pld, sig, dl, k * E, exact=True)
    # where the allocation PLD cannot certify (NaN: its grid cannot hold the
    # loss at this noise), no amplification (k E exact Gaussian steps) can:
    # the run is a post-processing of k E full-batch steps
    failed = np.isnan(np.asarray(up_pld, np.float64))
    up = np.where(failed, loc, up)
    # k > 1: allocation.pld goes through Lemma 3.2 (blocks of 1-of-floor(t/k));
    # its lower bounds the reduced object only, not k-of-t allocation.
    lo = lo_pld if k == 1 else None
    method = "allocation.pld (tight PLD, Feldman-Shenfeld arXiv:2602.17284v1)"
    if k > 1:
      method += " via Lemma 3.2 (k > 1)"
    details = {"pld_upper": up_pld, "pld_lower": lo_pld, "local": loc}
    if np.all(failed):
      method = (f"no amplification (k E = {k * E} exact Gaussian steps): the allocation PLD "
                "could not certify at this noise (NaN), its lower bound stands")
    elif np.any(failed):
      method += "; no amplification where the PLD could not certify (details['pld_upper'] NaN)"
    out = up, lo, method, details
  elif sched.sampling == "poisson":
    up = calibrator.poisson_upper(sig, dl, sched.sampling_rate, sched.total_steps)
    method, details = "poisson.pld (tight PLD of the Poisson-subsampled Gaussian)", {}
    inf = ~np.isfinite(up)
    if np.any(inf):   # the PLD's grid holds no finite bound here: RDP is an upper too
      rdp = poisson_door.epsilon(q=sched.sampling_rate, sigma=sig[inf],
                                 num_steps=sched.total_steps, delta=dl[inf], method="rdp")
      details["pld_upper"] = up.copy()
      up = up.copy()
      up[inf] = np.minimum(up[inf], np.asarray(rdp.epsilon, np.float64))
      method += ("; poisson.rdp (Mironov, Talwar & Zhang, arXiv:1908.10530v1) where the PLD "
                 "gives no finite bound (details['pld_upper'] inf)")
    out = up, None, method, details
  else:
    up = calibrator.gaussian_upper(sig / math.sqrt(E), dl)
    lo, details = None, {}
    if sched.num_examples % int(sched.batch_size) == 0:
      try:
        _, lo = calibrator.allocation_upper_lower(sig, dl, sched.steps_per_epoch, 1, E)
      except ValueError as err:   # t or E beyond the allocation door: no lower bound
        details["lower_source"] = f"none: the allocation lower bound refused ({err})"
      else:
        lo = np.minimum(lo, up)
        details["lower_source"] = ("allocation.pld lower, 1-of-t over E epochs (zero-"
                                   "gradient dataset: shuffled batches = random allocation)")
    out = up, lo, "no amplification (exact Gaussian, sigma/sqrt(E))", details
  if bar is not None:
    bar.update(sig.size)
  return out


def _given(sched: Schedule) -> str:
  """The configuration as the user gave it (what an error names)."""
  if sched.sampling == "poisson":
    run = f"num_epochs={sched.num_epochs:g} (or total_steps={sched.total_steps})"
  else:
    run = f"num_epochs={sched.num_epochs:g}"
  k = f", num_selected={sched.num_selected}" if sched.sampling == "balls_in_bins" else ""
  return (f"num_examples={sched.num_examples}, batch_size={sched.batch_size:g}{k}, {run} "
          f"(sampling={sched.sampling!r})")


def _restate(sched: Schedule, err: ValueError, what: str = "") -> ValueError:
  """A door's refusal of a count dpsgd derived (``num_steps``: steps per epoch or
  total steps), restated naming the arguments the user passed."""
  if isinstance(err, WindowTooLarge):
    return WindowTooLarge(
        f"{what}{_given(sched)} give T = {sched.total_steps} Poisson steps at q = "
        f"{sched.sampling_rate:.6g}: too many for the tight Poisson PLD at this "
        f"noise_multiplier ({err}) Use fewer epochs, a larger noise_multiplier, or "
        "jaxacct.poisson.epsilon(method='rdp', q=..., sigma=..., num_steps=T, delta=...) "
        "(a valid upper bound at any T).", points=err.points)
  if not str(err).startswith("num_steps"):
    return err
  t = sched.steps_per_epoch
  return ValueError(
      f"{_given(sched)} give {t} steps per epoch (floor(k N / B)"
      f"{'' if sched.sampling == 'balls_in_bins' else ' with k = 1'}), more than the "
      f"allocation bound supports ({err}) Use fewer examples per batch step (a larger "
      "batch_size or smaller num_examples).")


def _result(eps, delta, method, lower, details):
  kw = dict(epsilon=eps, delta=delta, method=method, bound="upper", details=details)
  if "lower" in EpsilonResult._fields:
    kw["lower"] = lower
  else:
    details["lower"] = lower
  return EpsilonResult(**kw)


def _out(a, shape):
  a = np.asarray(a, np.float64).reshape(shape)
  return float(a) if a.ndim == 0 else a


def _front_door(progress, name, value, delta, **sched_kw):
  """Shared checks of :func:`epsilon` and :func:`calibrate_noise_multiplier`.

  Checks ``progress``, builds the :class:`Schedule` from ``sched_kw``, then
  checks ``value`` (a positive number called ``name``) and ``delta``.
  """
  check_progress_arg(progress)
  sched = schedule(**sched_kw)
  _check_number(name, value)
  checks.check_positive(name, value)
  checks.check_delta(delta)
  return sched


def _flat_pair(a, b):
  """``(shape, a, b)``: float64 ``a, b`` broadcast together, flattened (copies)."""
  a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
  return a.shape, a.ravel().copy(), b.ravel().copy()


def epsilon(*, noise_multiplier, num_examples, batch_size, delta, num_epochs=None,
            sampling: str = "balls_in_bins", num_selected: int = 1, total_steps=None,
            progress: Optional[bool] = None) -> EpsilonResult:
  r"""Certified epsilon at ``delta`` of a DP-SGD run (upper, with a lower where known).

  The bound per ``sampling`` is in the module table: the tight allocation PLD
  (Feldman & Shenfeld, arXiv:2602.17284v1) for ``"balls_in_bins"``, the tight
  Poisson PLD for ``"poisson"``, no amplification for ``"shuffle"``.

  Args:
    noise_multiplier: sigma > 0 (noise std / clipping norm); scalar or array,
      broadcast with ``delta``.
    num_examples: N. batch_size: B. num_epochs: E. num_selected: k.
      total_steps: T (Poisson only). See :func:`schedule`.
    delta: in (0, 1).
    sampling: "balls_in_bins" (default), "poisson" or "shuffle".
    progress: None (global switch), True or False: progress on long work.

  Returns:
    ``EpsilonResult(epsilon, delta, method, bound="upper", lower=..., details)``:
    ``epsilon`` the certified upper bound (float, or numpy array for array
    input); ``lower`` a certified lower bound on the true epsilon of the
    sampling (balls_in_bins with k = 1; shuffle when B divides N), else None;
    ``details["schedule"]`` the :class:`Schedule`.

  Bound: upper (``epsilon``) and lower (``lower``).
  """
  sched = _front_door(progress, "noise_multiplier", noise_multiplier, delta,
                      num_examples=num_examples, batch_size=batch_size,
                      num_epochs=num_epochs, sampling=sampling, num_selected=num_selected,
                      total_steps=total_steps)
  shape, sig, dl = _flat_pair(noise_multiplier, delta)
  given = f"T={sched.total_steps}" if total_steps is not None else None
  with _progress_bar(sched, sig.size, "epsilon", progress, given) as bar:
    try:
      up, lo, method, details = _upper_lower(sched, sig, dl, bar=bar)
    except ValueError as err:
      raise _restate(sched, err, f"noise_multiplier={noise_multiplier!r} with ") from None
  details = {k: (_out(v, shape) if isinstance(v, np.ndarray) else v)
             for k, v in details.items()}
  details["schedule"] = sched
  return _result(_out(up, shape), delta, method, None if lo is None else _out(lo, shape),
                 details)


def _progress_bar(sched, size, what, enabled, given=None):
  """Progress on long work, labelled with the count the caller gave (``given``,
  e.g. ``"T=2340"``; default the epochs E), never a derived E = T B / N."""
  given = given or f"E={sched.num_epochs:g}"
  desc = f"jaxacct.dpsgd {what} ({sched.sampling}, {given})"
  return _progress.progress(total=size, desc=desc, enabled=enabled)


# ---------------------------------------------------------------------------
# calibration: a thin adapter over jaxacct.calibrate
# ---------------------------------------------------------------------------

def calibrate_noise_multiplier(*, epsilon, delta, num_examples, batch_size, num_epochs=None,
                               sampling: str = "balls_in_bins", num_selected: int = 1,
                               total_steps=None, rtol: float = 2.5e-4,
                               progress: Optional[bool] = None):
  """Smallest certified noise multiplier meeting each (epsilon, delta) target.

  ``jaxacct.calibrate(lambda s: event(noise_multiplier=s, ...), epsilon,
  delta, bracket=(1e-2, 1e4))``: for each target, a sigma whose certified
  upper epsilon (the one :func:`epsilon` returns, same ``sampling``) is <= the
  target, while ``sigma / (1 + rtol)`` is evaluated infeasible. Other
  parameters (epochs, steps, batch size) calibrate the same way, e.g. the
  largest number of epochs at sigma ``s``: ``jaxacct.calibrate(lambda E:
  event(noise_multiplier=s, num_epochs=E, ...), epsilon, delta, bracket=(1,
  1000), discrete=True, increasing=True)``.

  Args:
    epsilon: target(s) > 0; array broadcast with ``delta``.
    delta: in (0, 1).
    num_examples, batch_size, num_epochs, sampling, num_selected, total_steps:
      the configuration, as in :func:`schedule`.
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
                      num_selected=num_selected, total_steps=total_steps)
  _check_number("rtol", rtol)
  try:
    return calibrator.calibrate(lambda s: _event(sched, s), epsilon, delta,
                                bracket=(_SIGMA_MIN, _SIGMA_MAX), increasing=False,
                                rtol=rtol, name="noise_multiplier", progress=progress)
  except ValueError as err:
    raise _restate(sched, err, f"epsilon={epsilon!r} (a noise_multiplier the search "
                   "tried) with ") from None
