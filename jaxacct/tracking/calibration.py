"""Noise calibration for training runs (:func:`calibrate_noise`) of :mod:`jaxacct.tracking`.

Calibrates sigma on the tight bound (:func:`jaxacct.dpsgd.calibrate_noise_multiplier`)
and returns the accountant whose table is that bound. Bound: upper.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks
from jaxacct._core.dtype import x64_boundary
from jaxacct._core.gaussian import gaussian_epsilon_kernel
from jaxacct._core.solve import bisect, require_feasible
from jaxacct.tracking._accountants import (AllocationAccountant, GaussianAccountant,
                                           PoissonAccountant, epsilon_table, rdp_table)
from jaxacct._core.compiled import jit

__all__ = ["Calibration", "calibrate_noise"]


# --------------------------------------------------------------------------
# Calibration for training.
# --------------------------------------------------------------------------

class Calibration(NamedTuple):
  """Result of :func:`calibrate_noise`.

  Attributes:
    noise_multiplier: sigma (float) meeting the target; conservative.
    accountant: the accountant to pass to :func:`track_privacy`.
    num_steps: the number of updates the target was met for.
    epsilon: the accountant's epsilon after ``num_steps`` (<= target).
  """
  noise_multiplier: float
  accountant: Any
  num_steps: int
  epsilon: float


def calibrate_noise(scheme: str, *, dataset_size: int, num_epochs: int,
                    epsilon: float, delta: float, batch_size: Optional[int] = None,
                    num_selected: int = 1, progress: Optional[bool] = None) -> Calibration:
  """Smallest noise multiplier for a training run to meet (epsilon, delta), tight.

  Calibrates through the tight privacy loss distributions, via
  :func:`jaxacct.dpsgd.calibrate_noise_multiplier` (relative tolerance 2.5e-4
  on sigma; the returned sigma is certified):

  * ``"allocation"`` (balls-in-bins): ``t = (num_selected * dataset_size) //
    batch_size`` steps per epoch, each example in ``num_selected`` of them
    (for k = 1: ``t = dataset_size // batch_size``), ``num_steps = t *
    num_epochs``; tight allocation PLD over all epochs (Feldman & Shenfeld,
    arXiv:2602.17284v1; k > 1 through Lemma 3.2). The accountant's table is
    the same PLD bound, epoch by epoch (computed once, here, and reused by
    :func:`track_privacy` for the same delta).
  * ``"poisson"``: rate q = batch_size / dataset_size (expected batch size),
    ``num_steps = ceil(num_epochs / q)``; tight Poisson PLD. The accountant is
    a :class:`PoissonAccountant` with ``pld_every`` = the steps of one epoch
    (RDP per step, the PLD at every epoch end; its table is computed once).
  * ``"gaussian"``: full batch, one step per epoch; exact Gaussian profile
    (sigma = sqrt(num_epochs) * sigma_1, sigma_1 from the single-step
    calibration by bisection).

  Args:
    scheme: ``"poisson"``, ``"allocation"`` or ``"gaussian"``.
    dataset_size: n >= 1. num_epochs: >= 1.
    epsilon: target > 0. delta: in (0, 1).
    batch_size: (expected) batch size in [1, n]; unused for ``"gaussian"``.
    num_selected: k for ``"allocation"``.
    progress: None (global switch, ``jaxacct.set_progress``), True or False:
      progress output while calibrating and tabulating (seconds to minutes).

  Returns:
    :class:`Calibration`; its ``epsilon`` is the accountant's table value at
    ``num_steps`` (checked <= target).

  Bound: conservative (the returned sigma meets the target).
  """
  from jaxacct import dpsgd
  from jaxacct._core.progress import check_progress_arg
  checks.check_choice("scheme", scheme, ("poisson", "allocation", "gaussian"))
  checks.check_int("dataset_size", dataset_size, min_value=1)
  checks.check_int("num_epochs", num_epochs, min_value=1)
  checks.check_positive("epsilon", epsilon)
  checks.check_delta(delta)
  checks.check_int("num_selected", num_selected, min_value=1)
  if batch_size is not None:
    checks.check_int("batch_size", batch_size, min_value=1)
  check_progress_arg(progress)
  n, E = int(dataset_size), int(num_epochs)
  if scheme != "gaussian":
    if batch_size is None:
      raise ValueError(f"batch_size is required for scheme={scheme!r}.")
    checks.check_int("batch_size", batch_size, min_value=1, max_value=n)
  if scheme == "poisson":
    sched = dpsgd.schedule(num_examples=n, batch_size=int(batch_size), num_epochs=E,
                           sampling="poisson")
    steps = sched.total_steps
    sigma = float(dpsgd.calibrate_noise_multiplier(
        epsilon=epsilon, delta=delta, num_examples=n, batch_size=int(batch_size),
        num_epochs=E, sampling="poisson", progress=progress))
    acc = _MemoPoissonAccountant(q=sched.sampling_rate, sigma=sigma,
                                 pld_every=-(-steps // E), schedule=sched, progress=progress)
  elif scheme == "allocation":
    checks.check_int("num_selected", num_selected, min_value=1)
    sched = dpsgd.schedule(num_examples=n, batch_size=int(batch_size), num_epochs=E,
                           sampling="balls_in_bins", num_selected=int(num_selected))
    steps = sched.total_steps
    sigma = float(dpsgd.calibrate_noise_multiplier(
        epsilon=epsilon, delta=delta, num_examples=n, batch_size=int(batch_size),
        num_epochs=E, sampling="balls_in_bins", num_selected=int(num_selected),
        progress=progress))
    acc = _TightAllocationAccountant(sigma=sigma, num_steps=sched.steps_per_epoch,
                                     num_selected=int(num_selected), schedule=sched,
                                     progress=progress)
  else:
    steps = E
    sigma = float(_calibrate_gaussian(float(epsilon), float(delta))) * math.sqrt(E)
    acc = GaussianAccountant(sigma=sigma)
  eps = float(epsilon_table(acc, num_steps=steps, delta=delta)[-1])
  if not eps <= epsilon * (1 + 1e-9):
    raise ValueError(f"calibration failed: sigma={sigma:g} gives epsilon={eps:g} > "
                     f"target {epsilon:g} under the tracking accountant.")
  return Calibration(noise_multiplier=sigma, accountant=acc, num_steps=steps, epsilon=eps)


class _MemoPoissonAccountant(PoissonAccountant):
  """:class:`PoissonAccountant` (RDP per step, tight PLD at every
  ``pld_every`` steps: the same table) for :func:`calibrate_noise`: the PLD
  values come from :func:`jaxacct.dpsgd.epsilon` (memoised there, so the
  calibration's last evaluation is reused), the table is computed once per
  (num_blocks, delta) -- by calibrate_noise's check -- and reused by
  :func:`track_privacy`, with progress.

  Bound: upper.
  """

  def __init__(self, *, q, sigma, pld_every, schedule, progress=None):
    super().__init__(q=q, sigma=sigma, pld_every=pld_every)
    self._schedule, self._progress, self._memo = schedule, progress, {}

  def _block_table(self, num_blocks, delta):
    key = (int(num_blocks), float(delta))
    if key not in self._memo:
      from jaxacct import dpsgd
      from jaxacct._core.progress import progress
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
  :func:`calibrate_noise` calibrated -- instead of the front door's min over
  methods per direction (same PLD, computed twice there). Table memoised.

  Bound: upper.
  """

  def __init__(self, *, sigma, num_steps, num_selected=1, schedule, progress=None):
    super().__init__(sigma=sigma, num_steps=num_steps, num_selected=num_selected)
    self._schedule, self._progress, self._memo = schedule, progress, {}

  def epoch_epsilon(self, num_epochs: int, delta: float) -> float:
    """Tight allocation PLD upper bound after ``num_epochs`` epochs (float):
    :func:`jaxacct.dpsgd.epsilon` of this run, balls_in_bins."""
    from jaxacct import dpsgd
    sched = self._schedule
    return float(dpsgd.epsilon(
        noise_multiplier=self.sigma, num_examples=sched.num_examples,
        batch_size=int(sched.batch_size), num_epochs=int(num_epochs), delta=delta,
        sampling="balls_in_bins", num_selected=self.k, progress=False).epsilon)

  def _block_table(self, num_blocks, delta):
    memo = self._memo
    key = (int(num_blocks), float(delta))
    if key not in memo:
      from jaxacct._core.progress import progress
      out = [0.0]
      with progress(total=num_blocks, enabled=self._progress,
                    desc=f"jaxacct.tracking epsilon table ({num_blocks} epochs)") as bar:
        for e in range(1, num_blocks + 1):
          out.append(self.epoch_epsilon(e, delta))
          bar.update(1)
      memo[key] = np.array(out, np.float64)
    return memo[key].copy()


@jit
def _calibrate_gaussian_jit(eps_t, d):
  return bisect(lambda s: gaussian_epsilon_kernel(s, d) - eps_t, jnp.asarray(1e-3),
                jnp.asarray(1e4), increasing=False, num_iters=80, log_scale=True)


@x64_boundary
def _calibrate_gaussian(epsilon, delta):
  res = _calibrate_gaussian_jit(jnp.asarray(epsilon, jnp.float64),
                                jnp.asarray(delta, jnp.float64))
  return float(require_feasible(res, "sigma", 1e-3, 1e4,
                                target=f"epsilon={epsilon:g} at delta={delta:g}"))
