r"""Training samplers of the registered samplers beyond balls-in-bins and Poisson.

Each class forms the batches of one registered sampler
(:mod:`jaxacct.dpsgd.samplers`) and reads everything it accounts from that
sampler's record: the run's schedule (:func:`jaxacct.dpsgd.schedule`), its
event and epsilon (:func:`jaxacct.dpsgd.event`, :func:`jaxacct.dpsgd.epsilon`)
and the tracker's block (``Sampler.block``). :func:`loader` builds the training
sampler of any registered name.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from jaxacct import dpsgd, tracking
from jaxacct._core import checks
from jaxacct.dpsgd import samplers
from jaxacct.sampling._allocation import BallsInBinsSampler
from jaxacct.sampling._batches import (Batch, capacity_for, check_declared,
                                       delta_with_overflow_of, dp_transform_of, make_batch,
                                       StepBatches, overflow_bound_of)
from jaxacct.sampling._poisson import PoissonSampler


class RegistryLoader(StepBatches):
  """A training sampler whose accounting is its registered sampler's (base class).

  Subclasses set ``sampling`` (the registered name) and ``members(step)``
  (the example indices of a step) and may set the capacity.

  Attributes:
    schedule: the run's :class:`jaxacct.dpsgd.Schedule`. num_steps: T, the
      total number of steps. steps_per_epoch: t (fixed-step samplers) or
      ``round(N / B)`` (rate samplers: it only labels ``Batch.epoch``).
    pad_size: the fixed batch length. expected_batch_size: the declared
      divisor of :func:`jaxacct.tracking.dp_aggregate` (B).
    overflow_bound: bound on the probability that some batch of the run
      exceeds ``pad_size`` (0 where no batch can).
    neighbouring: the relation the record accounts (``Sampler.accounted``).
  """

  sampling: str = ""

  def __init__(self, *, seed: int, **config):
    checks.check_int("seed", seed, min_value=0, scalar=True)
    self.seed = int(seed)
    self.config = {k: v for k, v in config.items() if v is not None}
    self.schedule = dpsgd.schedule(sampling=self.sampling, **self.config)
    s = self.schedule
    self.n, self.num_steps = int(s.num_examples), int(s.total_steps)
    self.steps_per_epoch = (int(s.steps_per_epoch) if s.steps_per_epoch
                            else max(1, int(round(s.num_examples / s.batch_size))))
    self.expected_batch_size = float(s.batch_size)
    self.pad_size = int(s.batch_size)
    self.overflow_bound = 0.0

  @property
  def record(self):
    """The registered sampler (:func:`jaxacct.dpsgd.samplers.names`) this loader draws."""
    return samplers.get(self.sampling)

  @property
  def neighbouring(self) -> str:
    return self.record.accounted

  def members(self, step: int) -> np.ndarray:
    raise NotImplementedError

  def batch(self, step: int) -> Batch:
    """The batch of global step ``step`` (0-based)."""
    checks.check_int("step", step, min_value=0, max_value=self.num_steps - 1, scalar=True)
    members = np.asarray(self.members(int(step)), np.int32)
    return make_batch(members, self.pad_size, step, int(step) // self.steps_per_epoch)

  def delta_with_overflow(self, *, epsilon: float, delta: float) -> float:
    """As :meth:`jaxacct.sampling.BallsInBinsSampler.delta_with_overflow`."""
    return delta_with_overflow_of(epsilon, delta, self.overflow_bound)

  def epsilon(self, *, noise_multiplier, delta):
    """Certified epsilon of the whole run: ``jaxacct.dpsgd.epsilon`` of its configuration
    (EpsilonResult; Bound: upper)."""
    return dpsgd.epsilon(noise_multiplier=noise_multiplier, delta=delta, progress=False,
                         sampling=self.sampling, **self.config)

  def event(self, *, noise_multiplier):
    """The DpEvent of the whole run (``jaxacct.dpsgd.event`` of its configuration)."""
    return dpsgd.event(noise_multiplier=noise_multiplier, sampling=self.sampling,
                       **self.config)

  def accountant(self, *, noise_multiplier, delta: Optional[float] = None, **kwargs):
    """The :class:`jaxacct.tracking.EventAccountant` of the record's block (``Sampler.block``:
    the event of one block and its options); ``kwargs`` go to the accountant (``delta``
    is unused). Its table after ``num_steps`` updates is :meth:`epsilon`'s."""
    del delta
    checks.check_sigma("noise_multiplier", noise_multiplier, scalar=True)
    rec = self.record
    if rec.block is None:
      raise ValueError(f"sampling={self.sampling!r} has no tracker block registered "
                       "(jaxacct.dpsgd.samplers.Sampler.block is None).")
    block, options = rec.block(self.schedule, float(noise_multiplier))
    return tracking.EventAccountant(block, **{**options, **kwargs}).declare(
        noise_multiplier=noise_multiplier, expected_batch_size=self.expected_batch_size)

  def dp_transform(self, *, l2_norm_clip: float, noise_multiplier: float, delta: float, key,
                   max_epsilon: Optional[float] = None, on_budget: str = "stop"):
    """As :meth:`jaxacct.sampling.BallsInBinsSampler.dp_transform`: ``dp_aggregate``
    (divisor B) chained with ``track_privacy`` of :meth:`accountant`."""
    return dp_transform_of(self, l2_norm_clip, noise_multiplier, delta, key, max_epsilon,
                           on_budget)


class ShuffleSampler(RegistryLoader):
  """Shuffled passes (``sampling="shuffle"``): each epoch a fresh uniformly random
  permutation (numpy ``default_rng((seed, epoch))``) cut into t = floor(N / B)
  batches of exactly B (the last N - t B dropped). Accounted without amplification.

  Args:
    num_examples: N. batch_size: B (int). num_epochs: E (int). seed: int >= 0.
  """

  sampling = "shuffle"

  def __init__(self, *, num_examples: int, batch_size: int, num_epochs: int, seed: int = 0):
    super().__init__(seed=seed, num_examples=num_examples, batch_size=batch_size,
                     num_epochs=num_epochs)
    self._perm = (-1, None)

  def permutation(self, epoch: int) -> np.ndarray:
    """The permutation of ``epoch`` (0-based)."""
    checks.check_int("epoch", epoch, min_value=0, scalar=True)
    if self._perm[0] != epoch:
      self._perm = (epoch, np.random.default_rng((self.seed, int(epoch))).permutation(self.n))
    return self._perm[1]

  def members(self, step):
    e, j = divmod(step, self.steps_per_epoch)
    B = self.pad_size
    return np.sort(self.permutation(e)[j * B:(j + 1) * B])


class FixedSizeSampler(RegistryLoader):
  """Exactly B distinct examples every step (``sampling="fixed_size"``): a uniform
  B-subset of the N, independently each step (numpy ``default_rng((seed, step))``).
  Accounted under replace-one neighbours.

  Args:
    num_examples: N. batch_size: B (int). num_epochs: E (int; t = floor(N / B)
      steps an epoch). seed: int >= 0.
  """

  sampling = "fixed_size"

  def __init__(self, *, num_examples: int, batch_size: int, num_epochs: int, seed: int = 0):
    super().__init__(seed=seed, num_examples=num_examples, batch_size=batch_size,
                     num_epochs=num_epochs)

  def members(self, step):
    rng = np.random.default_rng((self.seed, step))
    return np.sort(rng.choice(self.n, self.pad_size, replace=False))


class FixedSizeWithReplacementSampler(FixedSizeSampler):
  """B uniform draws with replacement every step (``sampling=
  "fixed_size_with_replacement"``): an example drawn twice fills two rows (its
  gradient counts once per draw, as accounted). Replace-one neighbours."""

  sampling = "fixed_size_with_replacement"

  def members(self, step):
    rng = np.random.default_rng((self.seed, step))
    return np.sort(rng.integers(0, self.n, size=self.pad_size))


class TruncatedPoissonSampler(RegistryLoader):
  """Poisson batches capped at ``max_batch_size`` (``sampling="truncated_poisson"``).

  Every step each example joins with probability q = B / N; a batch of more
  than b = ``max_batch_size`` examples keeps a uniformly random b of them (as
  jax_privacy's truncated Poisson sampling). Batches never exceed b: the pad is b.

  Args:
    num_examples: N. batch_size: B (expected, > 0). max_batch_size: b, an int.
    num_epochs or total_steps: E (T = ceil(E N / B)) or T. seed: int >= 0
      (numpy ``default_rng((seed, step))``).
  """

  sampling = "truncated_poisson"

  def __init__(self, *, num_examples: int, batch_size: float, max_batch_size: int,
               num_epochs: Optional[float] = None, total_steps: Optional[int] = None,
               seed: int = 0):
    super().__init__(seed=seed, num_examples=num_examples, batch_size=batch_size,
                     num_epochs=num_epochs, total_steps=total_steps,
                     max_batch_size=max_batch_size)
    self.q = float(self.schedule.sampling_probability)
    self.pad_size = int(max_batch_size)          # checked by the schedule

  def members(self, step):
    rng = np.random.default_rng((self.seed, step))
    drawn = np.nonzero(rng.random(self.n) < self.q)[0]
    if drawn.size > self.pad_size:
      drawn = np.sort(rng.choice(drawn, self.pad_size, replace=False))
    return drawn


class CyclicPoissonSampler(RegistryLoader):
  """Cyclic Poisson batches (``sampling="cyclic_poisson"``, jax_privacy's
  ``CyclicPoissonSampling``).

  The examples are split once into b = ``cycle_length`` groups (a uniformly
  random partition of near-equal sizes, numpy ``default_rng(seed)``, fixed
  before training); step i Poisson-samples group i mod b at rate b B / N, so the
  expected batch is B and each example is eligible every b-th step.

  Args:
    num_examples: N. batch_size: B (expected). cycle_length: b >= 1.
    num_epochs or total_steps: the run (as :func:`jaxacct.dpsgd.schedule`).
    seed: int >= 0 (``default_rng((seed, step))`` per step).
    pad_size, overflow_prob, multiple: the capacity, as
      :class:`jaxacct.sampling.PoissonSampler` with ``expected_batch_size`` B.
  """

  sampling = "cyclic_poisson"

  def __init__(self, *, num_examples: int, batch_size: float, cycle_length: int,
               num_epochs: Optional[float] = None, total_steps: Optional[int] = None,
               seed: int = 0, pad_size: Union[None, int] = None, overflow_prob: float = 1e-6,
               multiple: int = 8):
    super().__init__(seed=seed, num_examples=num_examples, batch_size=batch_size,
                     num_epochs=num_epochs, total_steps=total_steps, cycle_length=cycle_length)
    b = int(cycle_length)
    self.cycle_length, self.q = b, min(1.0, b * self.expected_batch_size / self.n)
    perm = np.random.default_rng(self.seed).permutation(self.n)
    self.groups = [np.sort(g) for g in np.array_split(perm, b)]
    top = -(-self.n // b)                                  # the largest group
    check_declared(self.expected_batch_size, top, self.q)
    if pad_size is None:
      pad_size = capacity_for(expected_batch_size=self.expected_batch_size,
                              num_steps=self.num_steps, overflow_prob=overflow_prob,
                              multiple=multiple)
    checks.check_int("pad_size", pad_size, min_value=1, scalar=True)
    self.pad_size = int(pad_size)
    self.overflow_bound = overflow_bound_of(self.pad_size, top, self.q, self.num_steps,
                                            self.expected_batch_size)

  def members(self, step):
    group = self.groups[step % self.cycle_length]
    rng = np.random.default_rng((self.seed, step))
    return group[rng.random(group.size) < self.q]


#: the training sampler of each registered sampler, by its name
LOADERS = {cls.sampling: cls for cls in (
    BallsInBinsSampler, PoissonSampler, ShuffleSampler, FixedSizeSampler,
    FixedSizeWithReplacementSampler, TruncatedPoissonSampler, CyclicPoissonSampler)}


def loader(sampling: str, **kwargs):
  """The training sampler of a registered sampler (:func:`jaxacct.dpsgd.samplers.names`).

  ``loader("shuffle", num_examples=N, batch_size=B, num_epochs=E, seed=0)``:
  batches formed as the sampler's accounting assumes, with ``dp_transform``
  (``dp_aggregate`` + ``track_privacy``) whose epsilon after the run's
  ``num_steps`` updates is ``jaxacct.dpsgd.epsilon`` of the same configuration.

  ====================================  ===========================================
  sampling                              class (its keywords)
  ====================================  ===========================================
  ``balls_in_bins``                     :class:`BallsInBinsSampler`
  ``poisson``                           :class:`PoissonSampler`
  ``shuffle``                           ``ShuffleSampler`` (N, B, E)
  ``fixed_size``                        ``FixedSizeSampler`` (N, B, E)
  ``fixed_size_with_replacement``       ``FixedSizeWithReplacementSampler`` (N, B, E)
  ``truncated_poisson``                 ``TruncatedPoissonSampler`` (N, B,
                                        ``max_batch_size``, E or ``total_steps``)
  ``cyclic_poisson``                    ``CyclicPoissonSampler`` (N, B,
                                        ``cycle_length``, E or ``total_steps``)
  ====================================  ===========================================

  Args:
    sampling: a registered sampler's name.
    kwargs: the class's keywords (``num_examples``, ``batch_size``, ``num_epochs``, ...).

  Returns:
    the training sampler (iterable of :class:`Batch`).
  """
  rec = samplers.get(sampling)       # ValueError naming sampling for an unknown name
  if rec.name not in LOADERS:
    raise ValueError(f"sampling={sampling!r} is registered but has no training sampler in "
                     f"jaxacct.sampling (those with one: {sorted(LOADERS)}).")
  return LOADERS[rec.name](**kwargs)

