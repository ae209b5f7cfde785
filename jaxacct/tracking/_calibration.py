"""The accountant of a calibrated training run (:func:`accountant_for`) of :mod:`jaxacct.tracking`.

Calibrate sigma with :func:`jaxacct.dpsgd.calibrate_noise_multiplier` (the
adapter over :func:`jaxacct.calibrate`), then ``accountant_for(scheme,
noise_multiplier=sigma, ...)`` returns the accountant whose table is the
bound that calibration met. Bound: upper.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from jaxacct import dpsgd
from jaxacct._core import checks
from jaxacct._core.progress import check_progress_arg, progress
from jaxacct.tracking._accountants import (AllocationAccountant, GaussianAccountant,
                                           PoissonAccountant, rdp_table)

SCHEMES = {"poisson": "poisson", "allocation": "balls_in_bins", "gaussian": "shuffle"}


def accountant_for(scheme: str, *, noise_multiplier, num_examples: int, num_epochs: int,
                   batch_size=None, num_selected: int = 1, progress: Optional[bool] = None):
  """The tracking accountant of a training run, its table the tight bound.

  The bound :func:`jaxacct.dpsgd.calibrate_noise_multiplier` calibrates on,
  step by step, for :func:`track_privacy` (``num_steps`` = the run's
  ``dpsgd.schedule(...).total_steps``; ``epsilon_table(acc, num_steps=T,
  delta=d)[-1]`` is ``dpsgd.epsilon`` of the run):

  * ``"allocation"`` (balls-in-bins, ``sampling="balls_in_bins"``): ``t =
    (num_selected * num_examples) // batch_size`` steps per epoch; the tight
    allocation PLD epoch by epoch (Feldman & Shenfeld, arXiv:2602.17284v1;
    k > 1 through Lemma 3.2), computed once per (epochs, delta).
  * ``"poisson"`` (``sampling="poisson"``): rate q = batch_size /
    num_examples, ``ceil(num_epochs / q)`` steps; a
    :class:`PoissonAccountant` with ``pld_every`` = the steps of one epoch
    (RDP per step, the tight PLD at every epoch end; its table computed once).
  * ``"gaussian"`` (full batch, one step per epoch; ``sampling="shuffle"``
    with ``batch_size=num_examples``): :class:`GaussianAccountant`, exact.

  Args:
    scheme: ``"poisson"``, ``"allocation"`` or ``"gaussian"``.
    noise_multiplier: sigma > 0 (e.g. from ``dpsgd.calibrate_noise_multiplier``).
    num_examples: n >= 1. num_epochs: >= 1.
    batch_size: (expected) batch size in [1, n]; unused for ``"gaussian"``.
    num_selected: k for ``"allocation"``.
    progress: None (global switch), True or False: progress output while
      tabulating (seconds to minutes).

  Returns:
    the accountant (:class:`PoissonAccountant`, :class:`AllocationAccountant`
    or :class:`GaussianAccountant` subclass).

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
  if scheme == "gaussian":
    return GaussianAccountant(sigma=sigma)
  if batch_size is None:
    raise ValueError(f"batch_size is required for scheme={scheme!r}.")
  sched = dpsgd.schedule(num_examples=n, batch_size=int(batch_size), num_epochs=E,
                         sampling=SCHEMES[scheme], num_selected=int(num_selected))
  if scheme == "poisson":
    return _MemoPoissonAccountant(q=sched.sampling_rate, sigma=sigma,
                                  pld_every=-(-sched.total_steps // E), schedule=sched,
                                  progress=progress)
  return _TightAllocationAccountant(sigma=sigma, num_steps=sched.steps_per_epoch,
                                    num_selected=int(num_selected), schedule=sched,
                                    progress=progress)


class _MemoPoissonAccountant(PoissonAccountant):
  """:class:`PoissonAccountant` (RDP per step, tight PLD at every
  ``pld_every`` steps: the same table) for :func:`accountant_for`: the PLD
  values come from :func:`jaxacct.dpsgd.epsilon` (memoised there, so the
  calibration's last evaluation is reused), the table is computed once per
  (num_blocks, delta) -- by the first epsilon_table -- and reused by
  :func:`track_privacy`, with progress.

  Bound: upper.
  """

  def __init__(self, *, q, sigma, pld_every, schedule, progress=None):
    super().__init__(q=q, sigma=sigma, pld_every=pld_every)
    self._schedule, self._progress, self._memo = schedule, progress, {}

  def _block_table(self, num_blocks, delta):
    key = (int(num_blocks), float(delta))
    if key not in self._memo:
      tab = rdp_table(self.orders, self.rdp_per_step(), np.arange(num_blocks + 1), delta)
      b, sched = self.pld_every, self._schedule
      starts = range(0, num_blocks, b)
      with progress(total=len(starts), enabled=self._progress,
                    desc=f"jaxacct.tracking epsilon table ({len(starts)} PLD blocks)") as bar:
        for start in starts:
          end = min(start + b, num_blocks)
          e = dpsgd.epsilon(noise_multiplier=self.sigma, num_examples=sched.num_examples,
                            batch_size=sched.batch_size, total_steps=end, delta=delta,
                            sampling="poisson", progress=False).epsilon
          tab[start + 1:end + 1] = np.minimum(tab[start + 1:end + 1], e)
          bar.update(1)
      self._memo[key] = np.array(tab, np.float64)
    return self._memo[key].copy()


class _TightAllocationAccountant(AllocationAccountant):
  """:class:`AllocationAccountant` whose epoch-``e`` epsilon is the tight
  allocation PLD bound of :func:`jaxacct.dpsgd.epsilon` (balls_in_bins, both
  directions in one composition, min with no amplification) -- the bound
  :func:`jaxacct.dpsgd.calibrate_noise_multiplier` calibrates on -- instead of the front door's min over
  methods per direction (same PLD, computed twice there). Table memoised.

  Bound: upper.
  """

  def __init__(self, *, sigma, num_steps, num_selected=1, schedule, progress=None):
    super().__init__(sigma=sigma, num_steps=num_steps, num_selected=num_selected)
    self._schedule, self._progress, self._memo = schedule, progress, {}

  def epoch_epsilon(self, num_epochs: int, delta: float) -> float:
    """Tight allocation PLD upper bound after ``num_epochs`` epochs (float):
    :func:`jaxacct.dpsgd.epsilon` of this run, balls_in_bins."""
    sched = self._schedule
    return float(dpsgd.epsilon(
        noise_multiplier=self.sigma, num_examples=sched.num_examples,
        batch_size=int(sched.batch_size), num_epochs=int(num_epochs), delta=delta,
        sampling="balls_in_bins", num_selected=self.k, progress=False).epsilon)

  def _block_table(self, num_blocks, delta):
    memo = self._memo
    key = (int(num_blocks), float(delta))
    if key not in memo:
      out = [0.0]
      with progress(total=num_blocks, enabled=self._progress,
                    desc=f"jaxacct.tracking epsilon table ({num_blocks} epochs)") as bar:
        for e in range(1, num_blocks + 1):
          out.append(self.epoch_epsilon(e, delta))
          bar.update(1)
      memo[key] = np.array(out, np.float64)
    return memo[key].copy()
