r"""The Poisson training sampler (:class:`PoissonSampler`): every step each example joins
with probability q."""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from jaxacct import dpsgd, poisson, tracking
from jaxacct._core import checks, units
from jaxacct.dpsgd import samplers
from jaxacct.sampling._batches import (NEIGHBOURING, Batch, check_declared,
                                       delta_with_overflow_of, dp_transform_of, make_batch,
                                       overflow_bound_of, resolve_pad, StepBatches)


@units.renamed_in("epsilon", "event", "accountant", sigma="noise_multiplier")
class PoissonSampler(StepBatches):
  r"""Poisson-subsampled batches: every step each example joins with probability q.

  Accounted by ``jaxacct.poisson.epsilon(q=q, sigma=sigma, num_steps=T)``
  (Mironov, Talwar & Zhang, arXiv:1908.10530v1; PLD with ``method="pld"``).

  Args:
    num_examples: n >= 1.
    batch_size, num_epochs: B (expected batch size, the user's words) and E:
      q = B / n, T = ceil(E n / B) (as :func:`jaxacct.dpsgd.schedule`), and
      ``expected_batch_size`` B unless given. Give these or the next two.
    sampling_probability: q in (0, 1].
    num_steps: T >= 1 (total steps).
    seed: int seed (numpy ``default_rng((seed, step))``).
    expected_batch_size, pad_size, overflow_prob, multiple: as
      :class:`BallsInBinsSampler` (``n q <= m + 1``).
    steps_per_epoch: only labels ``Batch.epoch`` (default ``round(1/q)``).

  Attributes:
    pad_size, num_steps, q, expected_batch_size, overflow_bound, neighbouring
    (``"add_remove"``).
  """

  neighbouring = NEIGHBOURING
  #: the registered sampler (:mod:`jaxacct.dpsgd.samplers`) whose event, block and rule this is
  sampling = "poisson"

  @property
  def record(self):
    """The registered sampler (its record) this sampler draws."""
    return samplers.get(self.sampling)

  @units.renamed(sampling_rate="sampling_probability")
  def __init__(self, *, num_examples: int, sampling_probability: Optional[float] = None,
               num_steps: Optional[int] = None, seed: int = 0,
               expected_batch_size: Optional[float] = None,
               pad_size: Union[None, int, str] = None,
               overflow_prob: float = 1e-6, multiple: int = 8,
               steps_per_epoch: Optional[int] = None, batch_size: Optional[float] = None,
               num_epochs: Optional[int] = None):
    checks.check_int("num_examples", num_examples, min_value=1, scalar=True)
    if batch_size is not None or num_epochs is not None:
      if batch_size is None or num_epochs is None or sampling_probability is not None \
          or num_steps is not None:
        raise ValueError("give batch_size and num_epochs (q = B / N, T = ceil(E N / B), as "
                         "jaxacct.dpsgd.schedule), or sampling_probability and num_steps; got "
                         f"batch_size={batch_size!r}, num_epochs={num_epochs!r}, "
                         f"sampling_probability={sampling_probability!r}, num_steps={num_steps!r}.")
      sched = dpsgd.schedule(num_examples=num_examples, batch_size=batch_size,
                             num_epochs=num_epochs, sampling=self.sampling)
      sampling_probability, num_steps = sched.sampling_probability, sched.total_steps
      if expected_batch_size is None:
        expected_batch_size = float(batch_size)
    if sampling_probability is None or num_steps is None:
      raise ValueError("give sampling_probability and num_steps, or batch_size and num_epochs; got "
                       f"sampling_probability={sampling_probability!r}, num_steps={num_steps!r}.")
    checks.check_probability("sampling_probability", sampling_probability, open_lo=True,
                             scalar=True)
    checks.check_int("num_steps", num_steps, min_value=1, scalar=True)
    checks.check_int("seed", seed, min_value=0, scalar=True)
    if steps_per_epoch is not None:
      checks.check_int("steps_per_epoch", steps_per_epoch, min_value=1, scalar=True)
    self.n, self.q, self.num_steps, self.seed = (int(num_examples), float(sampling_probability),
                                                 int(num_steps), int(seed))
    self.steps_per_epoch = (max(1, int(round(1.0 / self.q))) if steps_per_epoch is None
                            else int(steps_per_epoch))
    self.expected_batch_size = check_declared(expected_batch_size, self.n, self.q)
    self.pad_size = resolve_pad(pad_size, self.n, self.q, self.num_steps, overflow_prob,
                                 multiple, self.expected_batch_size)
    self.overflow_bound = overflow_bound_of(self.pad_size, self.n, self.q, self.num_steps,
                                          self.expected_batch_size)

  def delta_with_overflow(self, *, epsilon: float, delta: float) -> float:
    """As :meth:`BallsInBinsSampler.delta_with_overflow`."""
    return delta_with_overflow_of(epsilon, delta, self.overflow_bound)

  def batch(self, step: int) -> Batch:
    """The batch of global step ``step`` (0-based)."""
    checks.check_int("step", step, min_value=0, max_value=self.num_steps - 1)
    rng = np.random.default_rng((self.seed, int(step)))
    members = np.nonzero(rng.random(self.n) < self.q)[0].astype(np.int32)
    return make_batch(members, self.pad_size, step, int(step) // self.steps_per_epoch)

  def accounting_kwargs(self) -> dict:
    """Keyword arguments of ``jaxacct.poisson.epsilon`` for this sampler."""
    return dict(q=self.q, num_steps=self.num_steps)

  def _schedule(self):
    """The registry's schedule of this sampler's run."""
    return samplers.Schedule(self.sampling, self.n, self.n * self.q, self.num_steps * self.q, 1,
                             None, self.num_steps, self.q)

  def epsilon(self, *, noise_multiplier, delta, **kwargs):
    """Certified epsilon of the whole run (EpsilonResult; Bound: upper).

    The one final rule of the run, as ``jaxacct.dpsgd.epsilon(sampling=
    "poisson")``: the tight Poisson PLD, RDP where it gives no finite bound
    (:mod:`jaxacct.accounting.evaluator`). ``kwargs`` (``method=...``) ask
    ``jaxacct.poisson.epsilon`` with them instead.
    """
    if kwargs:
      return poisson.epsilon(sigma=noise_multiplier, delta=delta, **self.accounting_kwargs(),
                             **kwargs)
    checks.check_sigma("noise_multiplier", noise_multiplier)
    checks.check_delta(delta)
    return samplers.get(self.sampling).result(self._schedule(), noise_multiplier, delta)

  def event(self, *, noise_multiplier):
    """The DpEvent of the whole run: ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
    GaussianDpEvent(noise_multiplier)), T)`` (for the accountant and :func:`jaxacct.calibrate`:
    ``jaxacct.calibrate(lambda s: sampler.event(noise_multiplier=s), epsilon, delta,
    bracket=(0.01, 1e4))``)."""
    checks.check_sigma("noise_multiplier", noise_multiplier)
    return samplers.get(self.sampling).event(self._schedule(), float(noise_multiplier))

  def accountant(self, *, noise_multiplier, delta: Optional[float] = None, **kwargs):
    """``tracking.EventAccountant(PoissonSampledDpEvent(q, GaussianDpEvent(noise_multiplier)))``.

    One event per step (``GaussianDpEvent(noise_multiplier)`` when q = 1), T of them
    being :meth:`event`: the bound ``jaxacct.calibrate`` of :meth:`event` and
    ``dpsgd.calibrate_noise_multiplier(sampling="poisson")`` calibrate on.
    Every step is evaluated exactly (the tracker's default table); in its
    cheaper ``max_evaluations`` mode every epoch end is evaluated too
    (``evaluate_every``). ``kwargs`` go to
    :class:`jaxacct.tracking.EventAccountant` (``delta`` is unused).
    """
    del delta
    checks.check_sigma("noise_multiplier", noise_multiplier)
    step, options = samplers.get(self.sampling).block(self._schedule(), float(noise_multiplier))
    kwargs = {**options, "evaluate_every": self.steps_per_epoch, **kwargs}
    return tracking.EventAccountant(step, **kwargs).declare(
        noise_multiplier=noise_multiplier, expected_batch_size=self.expected_batch_size)

  def dp_transform(self, *, l2_norm_clip: float, noise_multiplier: float, delta: float, key,
                   max_epsilon: Optional[float] = None, on_budget: str = "stop"):
    """As :meth:`BallsInBinsSampler.dp_transform`."""
    return dp_transform_of(self, l2_norm_clip, noise_multiplier, delta, key, max_epsilon,
                         on_budget)


