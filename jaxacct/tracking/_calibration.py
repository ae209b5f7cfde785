"""The accountant of a calibrated training run (:func:`accountant_for`) of :mod:`jaxacct.tracking`.

Calibrate sigma with :func:`jaxacct.dpsgd.calibrate_noise_multiplier` (the
adapter over :func:`jaxacct.calibrate`), then ``accountant_for(scheme,
noise_multiplier=sigma, ...)`` returns the :class:`EventAccountant` of the
event the calibration evaluated (:func:`jaxacct.dpsgd.event`), one block at
a time. Bound: upper.
"""

from __future__ import annotations

from typing import Optional

from jaxacct import dpsgd
from jaxacct.dpsgd import samplers
from jaxacct._core import checks
from jaxacct._core.progress import check_progress_arg
from jaxacct.tracking._accountants import EventAccountant

#: tracking's scheme names -> the registered sampler (:mod:`jaxacct.dpsgd.samplers`)
#: whose block event (``Sampler.block``) the accountant composes
SCHEMES = {"poisson": "poisson", "allocation": "balls_in_bins", "gaussian": "shuffle"}


def accountant_for(scheme: str, *, noise_multiplier, num_examples: int, num_epochs: int,
                   batch_size=None, num_selected: int = 1, progress: Optional[bool] = None):
  """The tracking accountant of a training run: the calibrated event, block by block.

  An :class:`EventAccountant` of the event whose run
  :func:`jaxacct.dpsgd.calibrate_noise_multiplier` calibrates on
  (:func:`jaxacct.dpsgd.event`), for :func:`track_privacy` (``num_steps`` =
  the run's ``dpsgd.schedule(...).total_steps``; ``epsilon_table(acc,
  num_steps=T, delta=d)[-1]`` is ``dpsgd.epsilon`` of the run):

  * ``"allocation"`` (balls-in-bins, ``sampling="balls_in_bins"``):
    ``RandomAllocationDpEvent(sigma, steps_per_epoch=t, num_selected=k)`` per
    epoch (``block_size=t``, t = ``(num_selected * num_examples) //
    batch_size``): the tight allocation PLD (Feldman & Shenfeld,
    arXiv:2602.17284v1; k > 1 through Lemma 3.2) after each epoch, and for
    k = 1 the released prefix's bound at the steps inside an epoch
    (:func:`epsilon_table`).
    (``dpsgd.epsilon`` also takes the min with no amplification, k E
    Gaussian steps; where that wins, rare, the table is larger.)
  * ``"poisson"`` (``sampling="poisson"``): ``PoissonSampledDpEvent(q,
    GaussianDpEvent(sigma))`` per step, q = batch_size / num_examples,
    ``ceil(num_epochs / q)`` steps, every step evaluated
    (``evaluate_every``, the epoch length, serves the cheaper
    ``max_evaluations`` grid only).
  * ``"gaussian"`` (no amplification, ``sampling="shuffle"``):
    ``GaussianDpEvent(sigma)`` per epoch (``block_size`` = ``num_examples //
    batch_size`` steps, 1 without ``batch_size``: full batch), exact.

  The table is computed once per (steps, delta) and reused.

  Args:
    scheme: ``"poisson"``, ``"allocation"`` or ``"gaussian"``.
    noise_multiplier: sigma > 0 (e.g. from ``dpsgd.calibrate_noise_multiplier``).
    num_examples: n >= 1. num_epochs: >= 1.
    batch_size: (expected) batch size in [1, n]; optional for ``"gaussian"``.
    num_selected: k for ``"allocation"``.
    progress: None (global switch), True or False: progress output while
      tabulating (seconds to minutes).

  Returns:
    :class:`EventAccountant`.

  Bound: upper.
  """
  checks.check_choice("scheme", scheme, tuple(SCHEMES))
  checks.check_int("num_examples", num_examples, min_value=1)
  checks.check_int("num_epochs", num_epochs, min_value=1)
  checks.check_positive("noise_multiplier", noise_multiplier)
  checks.check_int("num_selected", num_selected, min_value=1)
  if batch_size is not None:
    checks.check_int("batch_size", batch_size, min_value=1, max_value=int(num_examples))
  check_progress_arg(progress)
  n, E, sigma = int(num_examples), int(num_epochs), float(noise_multiplier)
  if batch_size is None and scheme != "gaussian":
    raise ValueError(f"batch_size is required for scheme={scheme!r}.")
  # full batch (no batch_size, "gaussian" only): one step an epoch
  record = samplers.get(SCHEMES[scheme])
  k = int(num_selected) if "num_selected" in record.options else 1
  sched = dpsgd.schedule(num_examples=n, batch_size=n if batch_size is None else int(batch_size),
                         num_epochs=E, sampling=record.name, num_selected=k)
  block, options = record.block(sched, sigma)
  return EventAccountant(block, progress=progress, **options).declare(
      noise_multiplier=sigma, expected_batch_size=batch_size)
