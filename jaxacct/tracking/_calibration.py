"""The accountant of a calibrated training run (:func:`accountant_for`) of :mod:`jaxacct.tracking`.

Calibrate sigma with :func:`jaxacct.dpsgd.calibrate_noise_multiplier` (the
adapter over :func:`jaxacct.calibrate`), then ``accountant_for(sampling,
noise_multiplier=sigma, ...)`` returns the :class:`EventAccountant` of the
event the calibration evaluated (:func:`jaxacct.dpsgd.event`), one block at
a time (the registered sampler's ``block``). Bound: upper.
"""

from __future__ import annotations

from typing import Optional

from jaxacct import dpsgd
from jaxacct.dpsgd import samplers
from jaxacct._core import checks
from jaxacct._core.progress import check_progress_arg
from jaxacct._core.units import renamed, warn_renamed
from jaxacct.accounting import evaluator
from jaxacct.tracking._accountants import EventAccountant

#: the scheme words of the previous release -> (the registered sampler they meant,
#: whether a missing batch_size means full batch); deprecated, for one release
OLD_WORDS = {"allocation": ("balls_in_bins", False), "gaussian": ("shuffle", True)}


@renamed(scheme="sampling")
def accountant_for(sampling: str, *, noise_multiplier, num_examples: int, num_epochs=None,
                   batch_size=None, progress: Optional[bool] = None, **options):
  """The tracking accountant of a training run: the calibrated event, block by block.

  An :class:`EventAccountant` of the registered sampler's block event
  (``jaxacct.dpsgd.samplers.Sampler.block``: one epoch or one step, with its
  options), for the run :func:`jaxacct.dpsgd.calibrate_noise_multiplier`
  calibrates on (:func:`jaxacct.dpsgd.event`); for :func:`track_privacy`
  (``num_steps`` = the run's ``dpsgd.schedule(...).total_steps``;
  ``epsilon_table(acc, num_steps=T, delta=d)[-1]`` is ``dpsgd.epsilon`` of the
  run). For example:

  * ``"balls_in_bins"``: ``RandomAllocationDpEvent(sigma, steps_per_epoch=t,
    num_selected=k)`` per epoch (``block_size=t``): the tight allocation PLD
    after each epoch, and for k = 1 the released prefix's bound at the steps
    inside an epoch (:func:`epsilon_table`);
  * ``"poisson"``: ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`` per
    step, every step evaluated;
  * ``"shuffle"`` (no amplification): ``GaussianDpEvent(sigma)`` per epoch
    (``block_size = num_examples // batch_size`` steps), exact;
  * the others (``fixed_size``, ``truncated_poisson``, ...): their own block.

  The table is computed once per (steps, delta) and reused.

  Args:
    sampling: a registered sampler's name (:func:`jaxacct.dpsgd.samplers.names`).
      The words of the previous release, ``"allocation"`` (balls_in_bins) and
      ``"gaussian"`` (shuffle; without ``batch_size``: full batch), and its
      keyword ``scheme=``, still work for one release with a ``DeprecationWarning``.
    noise_multiplier: sigma > 0 (e.g. from ``dpsgd.calibrate_noise_multiplier``).
    num_examples: N >= 1. num_epochs: E (as :func:`jaxacct.dpsgd.schedule`).
    batch_size: the (expected) batch size B, as :func:`jaxacct.dpsgd.schedule`.
    progress: None (global switch), True or False: progress output while
      tabulating.
    options: the sampler's other settings, as :func:`jaxacct.dpsgd.schedule`
      takes them (``num_selected``, ``total_steps`` and its settings' fields).

  Returns:
    :class:`EventAccountant`.

  Bound: upper.
  """
  # one run per call: a list where one number goes is refused before the schedule reads it
  checks.check_scalar("accountant_for", "(one run per call)", noise_multiplier=noise_multiplier,
                      num_examples=num_examples, num_epochs=num_epochs, batch_size=batch_size)
  checks.check_accountable_noise("noise_multiplier", noise_multiplier)
  declared = batch_size
  if isinstance(sampling, str) and sampling in OLD_WORDS:
    new, full_batch = OLD_WORDS[sampling]
    warn_renamed("jaxacct.tracking.accountant_for", sampling, new)
    if batch_size is None and full_batch:
      checks.check_int("num_examples", num_examples, min_value=1, scalar=True)
      batch_size = num_examples        # full batch: one step an epoch
    sampling = new
  rec = samplers.get(sampling)         # ValueError naming sampling
  check_progress_arg(progress)
  if batch_size is None:
    raise ValueError(f"batch_size is required for sampling={sampling!r}; got batch_size=None.")
  sched = dpsgd.schedule(num_examples=num_examples, batch_size=batch_size,
                         num_epochs=num_epochs, sampling=rec.name, **options)
  checks.check_sigma("noise_multiplier", noise_multiplier, scalar=True)
  if rec.block is None:
    raise ValueError(f"sampling={sampling!r} has no tracker block registered "
                     "(jaxacct.dpsgd.samplers.Sampler.block is None).")
  sigma = float(noise_multiplier)
  block, opts = rec.block(sched, sigma)
  # the grid dpsgd.epsilon's accountant uses for the whole run: the table's last
  # entry is its number (finer than 1e-4 where the run's privacy loss is narrow)
  h = evaluator.grid_step(rec.event(sched, sigma))
  if h is not None:
    opts = dict(opts, value_discretization_interval=h)
  return EventAccountant(block, progress=progress, **opts).declare(
      noise_multiplier=sigma, expected_batch_size=declared)
