r"""DP-SGD accounting from the quantities ML users know.

One recipe from a training configuration -- dataset size N (``num_examples``),
batch size B (``batch_size``), epochs E (``num_epochs``), noise multiplier
sigma (``noise_multiplier``), ``delta`` and the batch ``sampling`` -- to a
certified epsilon (:func:`epsilon`), and back: the smallest certified noise
multiplier for target (epsilon, delta) pairs (:func:`calibrate_noise_multiplier`).
:func:`schedule` shows the step counts each sampling implies; the two step
counts have names that cannot be confused: ``steps_per_epoch`` (t) and
``total_steps`` (T).

Samplings (clipping norm C; the noise multiplier is noise std / C):

=================  ===================================  ==========================
``sampling``       batches                              bound returned
=================  ===================================  ==========================
``balls_in_bins``  each example joins k of the t =      tight random-allocation
                   floor(kN/B) steps of every epoch,    PLD (Feldman & Shenfeld,
                   uniformly at random (expected batch  arXiv:2602.17284v1;
                   kN/t >= B); T = tE                   ``allocation.pld``):
                                                        upper and lower
``poisson``        each example joins each step         tight PLD of the
                   independently with probability       Poisson-subsampled
                   q = B/N; T = ceil(E N / B)           Gaussian (``poisson``,
                                                        method "pld"): upper
``shuffle``        a fresh random permutation per       NO amplification: each
                   epoch cut into t = floor(N/B)        example is in exactly one
                   fixed-size batches (drop_last);      batch per epoch, so E
                   T = tE                               Gaussian steps: exact
                                                        Gaussian with sigma/sqrt(E)
=================  ===================================  ==========================

Why shuffling gets no amplification here: no tight (or even nearly tight)
amplification bound is known for the Gaussian mechanism over shuffled
fixed-size batches. Shuffling amplification theorems (Feldman, McMillan &
Talwar, arXiv:2012.12803v4) hold for one example per step with an eps0-DP
local randomizer, and pay an extra sqrt(log 1/delta) through the conversion
of the Gaussian to (eps0, delta0)-DP (Feldman & Shenfeld, arXiv:2502.08202v3,
Sec. 1 and App. C); random allocation's analysis does not transfer (in a
shuffle the other examples' batches depend on the target's), and Chua et al.
(NeurIPS 2024, "Scalable DP-SGD: Shuffling vs. Poisson subsampling") show
lower bounds for shuffled batches well above the Poisson/allocation epsilon.
The honest certified number is therefore the no-amplification one, which is
valid for *any* batching that uses each example at most once per epoch. The
``lower`` of a shuffle result is the tight allocation lower bound (k = 1,
when B divides N): a dataset whose other examples have zero gradients makes
shuffled batches exactly 1-of-t random allocation, so the true shuffled
epsilon is at least that. Use ``balls_in_bins`` to train with shuffle-like
batches *and* a Poisson-like guarantee.

Neighbouring datasets: add/remove of one example, with the "null element"
convention of Feldman & Shenfeld (arXiv:2502.08202v3, Sec. 2; "zero-out" in
jax_privacy): the dataset size N and the batch layout are public and the
removed example contributes a zero gradient. Under replace-one adjacency the
sensitivity doubles: pass ``noise_multiplier / 2``.

From other libraries' configurations (all with clipping norm C and
``noise_multiplier`` = noise std / C):

* jax_privacy ``DpParams(noise_multipliers=s, num_samples=N, batch_size=B,
  delta=d)`` with ``DpsgdTrainingAccountant(...).compute_epsilon(num_updates=T,
  ...)`` (Poisson, q = B/N, T updates): ``epsilon(noise_multiplier=s,
  num_examples=N, batch_size=B, total_steps=T, delta=d, sampling="poisson")``.
  Its ``SamplingMethod.FIXED_BATCH_SIZE`` is Poisson at ``s / 2`` (replace
  adjacency): pass ``noise_multiplier=s / 2``.
* Opacus ``make_private_with_epsilon(epochs=E, target_epsilon=e,
  target_delta=d)`` (Poisson with q = 1/len(data_loader) and
  ``int(E / q)`` steps; len(data_loader) = ceil(N/B) for the usual
  ``drop_last=False``): ``calibrate_noise_multiplier(epsilon=e, delta=d,
  num_examples=N, batch_size=N / len(data_loader), total_steps=E *
  len(data_loader), sampling="poisson")``.
* TensorFlow Privacy ``compute_dp_sgd_privacy_statement(number_of_examples=N,
  batch_size=B, num_epochs=E, noise_multiplier=s, delta=d)`` (Poisson, q =
  B/N, ceil(E N / B) steps): ``epsilon(noise_multiplier=s, num_examples=N,
  batch_size=B, num_epochs=E, delta=d, sampling="poisson")``.

Example (N = 60,000, B = 256, E = 10, delta = 1e-5)::

  >>> import jaxacct
  >>> r = jaxacct.dpsgd_epsilon(noise_multiplier=0.7341, num_examples=60_000,
  ...                           batch_size=256, num_epochs=10, delta=1e-5)
  >>> sigma = jaxacct.dpsgd_calibrate_noise_multiplier(
  ...     epsilon=3.0, delta=1e-5, num_examples=60_000, batch_size=256,
  ...     num_epochs=10)       # about 0.684 (balls_in_bins)
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import jax
import numpy as np

from jaxacct._core import checks
from jaxacct._core.dtype import x64_boundary
from jaxacct._core.gaussian import gaussian_epsilon_kernel
from jaxacct._core import progress as _progress
from jaxacct._core.progress import check_progress_arg
from jaxacct._core.results import EpsilonResult
from jaxacct._core.solve import largest_feasible_int_host, search_decreasing_host
from jaxacct._core.compiled import jit

__all__ = ["SAMPLINGS", "Schedule", "schedule", "epsilon", "calibrate_noise_multiplier",
           "calibrate_num_epochs", "statement", "PrivacyStatement"]

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


# ---------------------------------------------------------------------------
# the certified functions (one per sampling); arrays in, numpy arrays out
# ---------------------------------------------------------------------------

@jit
def _gauss_eps(sigma, delta):
  return gaussian_epsilon_kernel(sigma, delta)


def _local(sig, dl, m):
  """No amplification: m Gaussian steps of sensitivity 1 = one Gaussian with
  sigma / sqrt(m) (exact; Dong, Roth & Su, arXiv:1905.02383v3, Cor. 3.3)."""
  return np.asarray(_gauss_eps(np.asarray(sig) / math.sqrt(m), np.asarray(dl)), np.float64)


def _local_lower(sig, dl, m):
  """A lower bound on the exact epsilon of :func:`_local` (NumPy, nothing compiled).

  With mu = sqrt(m) / sigma the privacy loss under P is N(mu^2/2, mu^2) and
  dP >= e^{x + s} dQ on {loss > x + s}, so delta(x) >= (1 - e^{-s})
  P(loss > x + s): the epsilon at delta exceeds x_s = mu^2/2 - s - mu
  Phi^{-1}(delta / (1 - e^{-s})) for every s > 0 (best of a few s, less a
  float margin of 1e-9 relative).
  """
  from scipy.special import ndtri
  mu = math.sqrt(m) / np.asarray(sig, np.float64)
  d = np.asarray(dl, np.float64) * (1 + 1e-9)
  best = np.full(np.broadcast(mu, d).shape, -np.inf)
  for s in (0.05, 0.2, 0.5, 1.0, 2.0):
    r = d / -math.expm1(-s)
    with np.errstate(invalid="ignore", divide="ignore"):
      x = np.where(r < 1, mu**2 / 2 - s - mu * ndtri(np.minimum(r, 1.0)), -np.inf)
    best = np.maximum(best, np.where(np.isfinite(x), x, -np.inf))
  return best - 1e-9 * (1 + np.abs(best))


def _min_local(up, sig, dl, m, exact):
  """``min(up, _local(sig, dl, m))``; without ``exact`` the Gaussian kernel
  runs only where :func:`_local_lower` does not already show ``_local >= up``
  (same value, and no compile where it cannot win)."""
  if not exact and np.all(_local_lower(sig, dl, m) >= up):
    return up, None
  loc = _local(sig, dl, m)
  return np.minimum(up, loc), loc


@functools.lru_cache(maxsize=512)
def _alloc_scalar(sigma, delta, t, k, E):
  """One allocation.pld evaluation, memoised (a calibration's last feasible
  sigma is evaluated again by the epsilon table of calibrate_noise)."""
  from jaxacct.allocation import pld as apld
  r = apld.allocation_pld_epsilon(sigma=sigma, delta=delta, num_steps=t, num_selected=k,
                                  num_epochs=E)
  return float(r.upper), float(r.lower)


@functools.lru_cache(maxsize=512)
def _poisson_scalar(q, sigma, T, delta):
  from jaxacct import poisson
  return float(poisson.epsilon(q=q, sigma=sigma, num_steps=T, delta=delta,
                               method="pld").epsilon)


def _alloc_pld(sig, dl, t, k, E, bar=None):
  """allocation.pld upper and lower on flat arrays (one vectorised call)."""
  from jaxacct.allocation import pld as apld
  kw = dict(num_steps=int(t), num_selected=int(k), num_epochs=int(E))
  if sig.size == 1:
    u, l_ = _alloc_scalar(float(sig[0]), float(dl[0]), int(t), int(k), int(E))
    if bar is not None:
      bar.update(1)
    return np.array([u]), np.array([l_])
  r = apld.allocation_pld_epsilon(sigma=sig, delta=dl, **kw)
  up, lo = np.asarray(r.upper, np.float64), np.asarray(r.lower, np.float64)
  if bar is not None:
    bar.update(sig.size)
  return np.broadcast_to(up, sig.shape).copy(), np.broadcast_to(lo, sig.shape).copy()


@x64_boundary
def _upper_lower(sched: Schedule, sig, dl, *, want_lower: bool, bar=None):
  """(upper, lower or None, method, details) on flat float64 arrays.

  ``want_lower=False`` (calibration): the upper only (same value); the
  no-amplification Gaussian is then evaluated only where it may be smaller.
  """
  if sched.sampling == "balls_in_bins":
    t, k, E = sched.steps_per_epoch, sched.num_selected, int(sched.num_epochs)
    up_pld, lo_pld = _alloc_pld(sig, dl, t, k, E, bar)
    up, loc = _min_local(up_pld, sig, dl, k * E, exact=want_lower)
    # k > 1: allocation.pld goes through Lemma 3.2 (blocks of 1-of-floor(t/k));
    # its lower bounds the reduced object only, not k-of-t allocation.
    lo = lo_pld if k == 1 else None
    method = "allocation.pld (tight PLD, Feldman-Shenfeld arXiv:2602.17284v1)"
    if k > 1:
      method += " via Lemma 3.2 (k > 1)"
    details = {"pld_upper": up_pld, "pld_lower": lo_pld, "local": loc}
    return up, lo, method, details
  if sched.sampling == "poisson":
    from jaxacct import poisson
    if sig.size == 1:
      up = np.array([_poisson_scalar(float(sched.sampling_rate), float(sig[0]),
                                     int(sched.total_steps), float(dl[0]))])
    else:
      up = np.asarray(poisson.epsilon(q=sched.sampling_rate, sigma=sig,
                                      num_steps=sched.total_steps, delta=dl,
                                      method="pld").epsilon, np.float64)
      up = np.broadcast_to(up, sig.shape).copy()
    if bar is not None:
      bar.update(sig.size)
    return up, None, "poisson.pld (tight PLD of the Poisson-subsampled Gaussian)", {}
  # shuffle
  E = int(sched.num_epochs)
  up = _local(sig, dl, E)
  if bar is not None:
    bar.update(sig.size)
  lo = None
  details = {}
  if want_lower and sched.num_examples % int(sched.batch_size) == 0:
    _, lo = _alloc_pld(sig, dl, sched.steps_per_epoch, 1, E, bar)
    lo = np.minimum(lo, up)
    details["lower_source"] = ("allocation.pld lower, 1-of-t over E epochs (zero-gradient "
                               "dataset: shuffled batches = random allocation)")
  return up, lo, "no amplification (exact Gaussian, sigma/sqrt(E))", details


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


@x64_boundary
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
  with _progress_bar(sched, sig.size, "epsilon", progress) as bar:
    up, lo, method, details = _upper_lower(sched, sig, dl, want_lower=True, bar=bar)
  details = {k: (_out(v, shape) if isinstance(v, np.ndarray) else v)
             for k, v in details.items()}
  details["schedule"] = sched
  return _result(_out(up, shape), delta, method, None if lo is None else _out(lo, shape),
                 details)


def _progress_bar(sched, size, what, enabled):
  desc = f"jaxacct.dpsgd {what} ({sched.sampling}, E={sched.num_epochs:g})"
  return _progress.progress(total=size, desc=desc, enabled=enabled)


# ---------------------------------------------------------------------------
# calibration
# ---------------------------------------------------------------------------

def _hint(sched: Schedule, eps, dl, rtol):
  """A starting sigma per target and whether it comes from a tight calibrator
  (then the bracket starts within a few rtol of it)."""
  if sched.sampling == "shuffle":   # exact Gaussian: the classic formula as a start
    E = sched.num_epochs
    return np.sqrt(E) * np.sqrt(2 * np.log(1.25 / dl)) / np.maximum(eps, 1e-3) * 0.6, False
  if sched.sampling == "balls_in_bins":
    from jaxacct.allocation import pld as apld
    t, k, E = sched.steps_per_epoch, sched.num_selected, int(sched.num_epochs)
    kw = {} if (k == 1 and E == 1) else {"num_selected": k, "num_epochs": E}
    kw.update(rtol=min(max(rtol, 1e-6), 0.1), sigma_lo=_SIGMA_MIN, sigma_hi=_SIGMA_MAX)
    try:
      h = np.asarray(apld.allocation_pld_calibrate_sigma(
          epsilon=eps, delta=dl, steps_per_epoch=t, **kw), np.float64)
      if np.all(np.isfinite(h)):
        return h, True
    except ValueError:
      pass
    q, T = k / t, t * E
  else:
    q, T = sched.sampling_rate, sched.total_steps
  from jaxacct import poisson
  if sched.sampling == "poisson":
    try:
      return np.asarray(poisson.calibrate_sigma(q=q, num_steps=T, epsilon=eps, delta=dl,
                                                method="pld"), np.float64), True
    except ValueError:
      pass
  try:   # Poisson RDP at rate k/t: within ~10 % of the tight allocation sigma
    return np.asarray(poisson.calibrate_sigma(q=q, num_steps=T, epsilon=eps, delta=dl),
                      np.float64), False
  except ValueError:
    return np.full(eps.shape, 1.0), False


@x64_boundary
def calibrate_noise_multiplier(*, epsilon, delta, num_examples, batch_size, num_epochs=None,
                               sampling: str = "balls_in_bins", num_selected: int = 1,
                               total_steps=None, rtol: float = 2.5e-4,
                               progress: Optional[bool] = None):
  """Smallest certified noise multiplier meeting each (epsilon, delta) target.

  For each target, a sigma whose certified upper epsilon (the one
  :func:`epsilon` returns, same ``sampling``) is <= the target, while
  ``sigma / (1 + rtol)`` is evaluated infeasible: the smallest certified
  sigma to relative tolerance ``rtol``. A tight calibrator of the scheme
  (``allocation.pld.allocation_pld_calibrate_sigma``, or
  ``poisson.calibrate_sigma(method="pld")`` where available), else the Poisson
  RDP calibration, gives the starting bracket; the answer is then checked and
  refined host-side with the certified function itself (so that
  ``epsilon(noise_multiplier=sigma, ...).epsilon <= target`` holds exactly).

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
  checks.check_range("rtol", rtol, 0.0, 0.1, lo_open=True)
  shape, e, d = _flat_pair(epsilon, delta)
  desc = (f"jaxacct.dpsgd calibrating noise_multiplier ({sched.sampling}, "
          f"E={sched.num_epochs:g}, {e.size} target{'s' if e.size > 1 else ''})")
  with _progress.progress(total=None, desc=desc, enabled=progress) as bar:
    hint, tight = _hint(sched, e, d, float(rtol))
    hint = np.asarray(hint, np.float64)
    known = None
    if tight and sched.sampling == "balls_in_bins":
      # allocation_pld_calibrate_sigma evaluated the hint feasible with the
      # programs of allocation_pld_epsilon (PLD upper <= target (1 - 1e-10)),
      # and the upper here is min(PLD upper, Gaussian) <= that: not evaluated
      # again (the value below only steers a secant step, if one is needed).
      known = (hint[None], e[None] * (1 - 1e-10))

    def upper_fn(s, idx):
      up, _, _, _ = _upper_lower(sched, np.asarray(s, np.float64), d[idx], want_lower=False)
      bar.update(1)
      return up

    sig = search_decreasing_host(upper_fn, e, hint, tight_hint=tight, rtol=float(rtol),
                                 bounds=(_SIGMA_MIN, _SIGMA_MAX), name="noise_multiplier",
                                 bar=bar, known=known)
  return _out(sig, shape)


_certified_epsilon = epsilon   # reachable inside functions whose target is named epsilon


def calibrate_num_epochs(*, noise_multiplier, epsilon, delta, num_examples, batch_size,
                         sampling: str = "balls_in_bins", num_selected: int = 1,
                         max_epochs: int = 1000, progress: Optional[bool] = None) -> int:
  """Largest number of epochs E whose certified epsilon at ``delta`` meets ``epsilon``.

  "How long can I train at this noise?": the largest integer E in
  ``[1, max_epochs]`` with ``epsilon(noise_multiplier=..., num_epochs=E,
  ...).epsilon <= epsilon`` (the certified upper bound of :func:`epsilon`, same
  ``sampling``), by bisection on E (epsilon is non-decreasing in E);
  about ``log2(max_epochs)`` evaluations of :func:`epsilon`.

  Args:
    noise_multiplier: sigma > 0 (scalar).
    epsilon: target > 0 (scalar). delta: in (0, 1) (scalar).
    num_examples, batch_size, sampling, num_selected: as in :func:`schedule`.
    max_epochs: int >= 1, the upper end of the search (returned if it meets
      the target).
    progress: None (global switch), True or False.

  Returns:
    int E.

  Raises:
    ValueError: invalid input, or even one epoch exceeds the target (naming
      the range).

  Bound: upper (the returned E is certified within budget; E + 1 is not,
  unless E = max_epochs).
  """
  check_progress_arg(progress)
  for name, v in (("noise_multiplier", noise_multiplier), ("epsilon", epsilon),
                  ("delta", delta), ("max_epochs", max_epochs)):
    _check_number(name, v)
    checks.check_scalar("jaxacct.dpsgd", **{name: v})
  checks.check_positive("noise_multiplier", noise_multiplier)
  checks.check_positive("epsilon", epsilon)
  checks.check_delta(delta)
  checks.check_int("max_epochs", max_epochs, min_value=1)
  schedule(num_examples=num_examples, batch_size=batch_size, num_epochs=1,
           sampling=sampling, num_selected=num_selected)     # validates the rest
  target = float(epsilon)
  desc = f"jaxacct.dpsgd calibrating num_epochs ({sampling}, sigma={float(noise_multiplier):g})"
  with _progress.progress(total=None, desc=desc, enabled=progress) as bar:

    def feasible(E):
      r = _certified_epsilon(noise_multiplier=float(noise_multiplier),
                             num_examples=num_examples, batch_size=batch_size,
                             delta=float(delta), num_epochs=int(E), sampling=sampling,
                             num_selected=num_selected, progress=False)
      bar.update(1)
      return float(r.epsilon) <= target

    return largest_feasible_int_host(feasible, 1, int(max_epochs), name="num_epochs",
                                     target=f"epsilon <= {target:g} at delta={float(delta):g}")


from jaxacct.statement import PrivacyStatement, statement  # noqa: E402  (re-export)
