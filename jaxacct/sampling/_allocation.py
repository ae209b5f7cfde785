r"""The balls-in-bins training sampler (:class:`BallsInBinsSampler`): each example joins
k of the t steps of every epoch."""

from __future__ import annotations

import math
from typing import Iterator, List, Optional, Union

import numpy as np

from jaxacct import accounting, allocation, dpsgd, tracking
from jaxacct._core import checks, units
from jaxacct.dpsgd import samplers
from jaxacct.sampling._batches import (NEIGHBOURING, Batch, check_declared,
                                       delta_with_overflow_of, dp_transform_of, make_batch,
                                       overflow_bound_of, resolve_pad)


def _random_subsets(rng: np.random.Generator, n: int, t: int, k: int) -> np.ndarray:
  """(n, k) int array: row i is a uniformly random k-subset of range(t) (ascending),
  rows independent. Sequential selection: the j-th pick is uniform over the t - j
  values not yet taken (mapped to the r-th free value), which makes every ordered
  k-tuple of distinct values equally likely; O(n k^2)."""
  chosen = np.empty((n, k), np.int64)
  for j in range(k):
    r = rng.integers(0, t - j, size=n)
    prev = np.sort(chosen[:, :j], axis=1)
    for c in range(j):                 # r-th free value: skip taken values <= it
      r = r + (prev[:, c] <= r)
    chosen[:, j] = r
  return np.sort(chosen, axis=1)


@units.renamed_in("epsilon", "event", "accountant", sigma="noise_multiplier")
class BallsInBinsSampler:
  r"""Balls-in-bins (random allocation) batches: each example in exactly k of the t
  steps of every epoch, the k-subset uniformly random.

  ``fresh_each_epoch=True`` (default) draws a new subset every epoch,
  independently: the scheme accounted by ``jaxacct.allocation.epsilon(...,
  num_epochs=E)`` (Feldman & Shenfeld, arXiv:2502.08202v3). ``False`` keeps
  epoch 0's subsets for every epoch (fixed bins, as jax_privacy 2.0's
  ``BallsInBinsSampling``), accounted by ``fresh_each_epoch=False``.

  Args:
    num_examples: n >= 1.
    batch_size: B, the batch size you plan (the user's words): t = (k n) // B
      steps per epoch (as :func:`jaxacct.dpsgd.schedule`), and
      ``expected_batch_size`` B unless given. Give this or ``steps_per_epoch``.
    steps_per_epoch: t >= 1 (steps per epoch, not total).
    num_epochs: E >= 1.
    num_selected: k in [1, t] (steps each example joins per epoch).
    fresh_each_epoch: see above.
    seed: int seed (numpy ``default_rng((seed, epoch))``).
    expected_batch_size: m > 0, declared (public) expected batch size, or
      None. Given: the capacity is :func:`capacity_for` (no n in it) and m
      must satisfy n k / t <= m + 1. None (legacy): the binomial quantile of
      n (docs/bounds/dpsgd.md). Pass the same m to
      :func:`jaxacct.tracking.dp_aggregate` as its divisor.
    pad_size: None (from ``expected_batch_size``/``overflow_prob``, module
      docstring), ``"max"`` (n) or an int.

      The trade: every step pays for ``pad_size`` rows of per-example
      gradients; a step whose batch overflows is padded to a multiple of
      ``pad_size`` (its rows twice, one more compile of the jitted step; no
      example dropped, the update's accounting unchanged) and its length
      shows the overflow (``delta_with_overflow``: delta + (1 + e^eps) x
      the bound). :func:`capacity_for` keeps the whole run's overflow
      probability below ``overflow_prob`` (union over the steps, Poisson
      tail at m + 1), so small batches get wide pads: m = 50 over 1,000
      steps pads to 104 at 1e-6, 88 at 1e-3, 80 at 0.1; m = 256 over
      2,344 steps to 368, 344, 328. Where batch lengths are not observed,
      a larger ``overflow_prob`` (or an int ``pad_size`` near m + 2 sqrt(m))
      costs a doubled step now and then and saves ~25-50 % of every step's
      gradient work; where they are, keep it small and report
      ``delta_with_overflow``.
    overflow_prob: declared bound on the probability of any overflow in the
      run (pad_size=None), in (0, 1).
    multiple: pad sizes are multiples of this.

  Attributes:
    pad_size: the fixed batch length (capacity) B. num_steps: t * E (total
    steps). expected_batch_size: the declared m or None. overflow_bound:
    bound on the probability that some batch of the run exceeds B (<=
    overflow_prob when B was derived from it). neighbouring: ``"add_remove"``.

  Example::

    >>> s = BallsInBinsSampler(num_examples=1000, steps_per_epoch=10, num_epochs=2, seed=0)
    >>> b = next(iter(s)); b.indices.shape == (s.pad_size,), b.step, b.epoch
    (True, 0, 0)
  """

  neighbouring = NEIGHBOURING
  #: the registered sampler (:mod:`jaxacct.dpsgd.samplers`) whose event, block and rule this is
  sampling = "balls_in_bins"

  @property
  def record(self):
    """The registered sampler (its record) this sampler draws."""
    return samplers.get(self.sampling)

  def __init__(self, *, num_examples: int, steps_per_epoch: Optional[int] = None,
               num_epochs: int, num_selected: int = 1, fresh_each_epoch: bool = True,
               seed: int = 0, expected_batch_size: Optional[float] = None,
               pad_size: Union[None, int, str] = None, overflow_prob: float = 1e-6,
               multiple: int = 8, batch_size: Optional[int] = None):
    checks.check_int("num_examples", num_examples, min_value=1, scalar=True)
    if (batch_size is None) == (steps_per_epoch is None):
      raise ValueError("give exactly one of batch_size (B: t = (num_selected * "
                       "num_examples) // B steps per epoch, as jaxacct.dpsgd.schedule) and "
                       f"steps_per_epoch; got batch_size={batch_size!r}, "
                       f"steps_per_epoch={steps_per_epoch!r}.")
    if batch_size is not None:
      steps_per_epoch = dpsgd.schedule(num_examples=num_examples, batch_size=batch_size,
                                       num_epochs=num_epochs, num_selected=num_selected,
                                       sampling=self.sampling).steps_per_epoch
      if expected_batch_size is None:
        expected_batch_size = float(batch_size)
    checks.check_int("steps_per_epoch", steps_per_epoch, min_value=1, scalar=True)
    checks.check_int("num_epochs", num_epochs, min_value=1, scalar=True)
    checks.check_int("num_selected", num_selected, min_value=1, max_value=int(steps_per_epoch),
                     scalar=True)
    if not isinstance(fresh_each_epoch, (bool, np.bool_)):
      raise ValueError(f"fresh_each_epoch must be a bool; got {fresh_each_epoch!r}.")
    checks.check_int("seed", seed, min_value=0, scalar=True)
    self.n, self.t, self.E = int(num_examples), int(steps_per_epoch), int(num_epochs)
    self.k, self.fresh_each_epoch, self.seed = int(num_selected), bool(fresh_each_epoch), int(seed)
    self.num_steps = self.t * self.E
    p = self.k / self.t
    self.expected_batch_size = check_declared(expected_batch_size, self.n, p)
    self.pad_size = resolve_pad(pad_size, self.n, p, self.num_steps, overflow_prob,
                                 multiple, self.expected_batch_size)
    self.overflow_bound = overflow_bound_of(self.pad_size, self.n, p, self.num_steps,
                                          self.expected_batch_size)

  def delta_with_overflow(self, *, epsilon: float, delta: float) -> float:
    """delta + (1 + e^epsilon) * overflow_bound: the run's delta when batch lengths
    (an overflow's extra padding) are observable as well as the updates.

    The updates alone are (epsilon, delta) (docs/bounds/dpsgd.md: overflow pads,
    the divisor is constant); capped at 1.
    """
    return delta_with_overflow_of(epsilon, delta, self.overflow_bound)

  def assignment(self, epoch: int) -> np.ndarray:
    """(n, k) int array: the steps (within the epoch, 0..t-1) of each example."""
    checks.check_int("epoch", epoch, min_value=0, max_value=self.E - 1, scalar=True)
    e = int(epoch) if self.fresh_each_epoch else 0
    rng = np.random.default_rng((self.seed, e))
    if self.k == 1:
      return rng.integers(0, self.t, size=(self.n, 1))
    return _random_subsets(rng, self.n, self.t, self.k)

  def epoch_batches(self, epoch: int) -> List[Batch]:
    """The t batches of ``epoch`` (0-based), in step order."""
    a = self.assignment(epoch)
    flat = a.ravel()
    ex = np.repeat(np.arange(self.n, dtype=np.int32), self.k)
    order = np.argsort(flat, kind="stable")          # examples ascending within a step
    bounds = np.concatenate([[0], np.cumsum(np.bincount(flat, minlength=self.t))])
    members = ex[order]
    return [make_batch(members[bounds[s]:bounds[s + 1]], self.pad_size,
                        int(epoch) * self.t + s, epoch) for s in range(self.t)]

  def __iter__(self) -> Iterator[Batch]:
    for e in range(self.E):
      yield from self.epoch_batches(e)

  def __len__(self) -> int:
    return self.num_steps

  def accounting_kwargs(self) -> dict:
    """Keyword arguments of ``jaxacct.allocation.epsilon``/``delta`` for this sampler."""
    return dict(steps_per_epoch=self.t, num_selected=self.k, num_epochs=self.E,
                fresh_each_epoch=self.fresh_each_epoch)

  def _schedule(self, num_epochs):
    """The registry's schedule of ``num_epochs`` epochs of this sampler."""
    return samplers.Schedule(self.sampling, self.n, self.n * self.k / self.t,
                             float(num_epochs), self.k, self.t, self.t * int(num_epochs), None)

  def epsilon(self, *, noise_multiplier, delta, **kwargs):
    """Certified epsilon of the whole run (EpsilonResult; Bound: upper, with a lower).

    The one final rule of the run, as ``jaxacct.dpsgd.epsilon(sampling=
    "balls_in_bins")``: the tight allocation PLD or k E Gaussian steps
    without amplification, the smaller (:mod:`jaxacct.accounting.evaluator`).
    Fixed bins: the same at one epoch and ``noise_multiplier / sqrt(E)`` (:meth:`event`).
    ``kwargs`` (``methods=...``, ...) ask ``jaxacct.allocation.epsilon``'s
    minimum over the methods named instead.
    """
    if kwargs:
      return allocation.epsilon(sigma=noise_multiplier, delta=delta, **self.accounting_kwargs(),
                                **kwargs)
    checks.check_sigma("noise_multiplier", noise_multiplier)
    checks.check_delta(delta)
    record = samplers.get(self.sampling)
    if self.fresh_each_epoch:
      return record.result(self._schedule(self.E), noise_multiplier, delta)
    return record.result(self._schedule(1),
                         np.asarray(noise_multiplier, np.float64) / math.sqrt(self.E), delta)

  def event(self, *, noise_multiplier):
    """The DpEvent of the whole run, for the accountant and :func:`jaxacct.calibrate`.

    Fresh draws: ``RandomAllocationDpEvent(noise_multiplier, steps_per_epoch=t, num_selected=k,
    num_epochs=E)``; fixed bins: the same event for one epoch at
    ``noise_multiplier / sqrt(E)`` (exactly the fixed-bin run, module
    :func:`jaxacct.allocation.fixed_bins_pld_epsilon`). Noise calibration:
    ``jaxacct.calibrate(lambda s: sampler.event(noise_multiplier=s), epsilon, delta,
    bracket=(0.01, 1e4))``.
    """
    checks.check_sigma("noise_multiplier", noise_multiplier, scalar=True)
    record = samplers.get(self.sampling)
    if self.fresh_each_epoch:
      return record.event(self._schedule(self.E), float(noise_multiplier))
    return record.event(self._schedule(1), float(noise_multiplier) / math.sqrt(self.E))

  def accountant(self, *, noise_multiplier, delta: Optional[float] = None, **kwargs):
    """The ``jaxacct.tracking`` accountant that matches this sampler.

    Fresh: ``tracking.EventAccountant(RandomAllocationDpEvent(noise_multiplier,
    steps_per_epoch=t, num_selected=k), block_size=t)``: one event per epoch,
    e epochs accounted as :meth:`event` for E = e (``kwargs`` go to the
    ``EventAccountant``; ``delta`` is unused). Fixed bins: after e epochs the
    run is one epoch at noise_multiplier / sqrt(e), not a composition: an
    ``EpsilonTableAccountant`` (block = one epoch) holding
    ``accounting.PLDAccountant().compose(event).get_epsilon(delta)`` of that
    event for e = 1..E, which needs ``delta``.
    """
    checks.check_sigma("noise_multiplier", noise_multiplier, scalar=True)
    record = samplers.get(self.sampling)
    if self.fresh_each_epoch:
      del delta
      epoch, options = record.block(self._schedule(self.E), float(noise_multiplier))
      return tracking.EventAccountant(epoch, **options, **kwargs).declare(
          noise_multiplier=noise_multiplier, expected_batch_size=self.expected_batch_size)
    if delta is None:
      raise ValueError("delta is required for the fixed-bin accountant (an epsilon table).")
    if kwargs:
      raise ValueError(f"fixed bins take no EventAccountant options; got {sorted(kwargs)}.")
    checks.check_delta(delta, scalar=True)
    one = self._schedule(1)
    eps = np.array([0.0] + [accounting.PLDAccountant().compose(record.event(
        one, float(noise_multiplier) / math.sqrt(e))).get_epsilon(float(delta))
        for e in range(1, self.E + 1)])
    # the first e epochs are a post-processing of the first e' >= e: a bound for e'
    # also holds for e (keeps the table non-decreasing)
    eps = np.minimum.accumulate(eps[::-1])[::-1]
    return tracking.EpsilonTableAccountant(epsilons=eps, delta=delta,
                                           block_size=self.t).declare(
        noise_multiplier=noise_multiplier, expected_batch_size=self.expected_batch_size)

  def dp_transform(self, *, l2_norm_clip: float, noise_multiplier: float, delta: float, key,
                   max_epsilon: Optional[float] = None, on_budget: str = "stop"):
    """What is trained and what is accounted, from one set of settings.

    ``optax.chain(dp_aggregate(l2_norm_clip, noise_multiplier,
    expected_batch_size=m, key), track_privacy(self.accountant(
    noise_multiplier=noise_multiplier), num_steps=self.num_steps, delta=delta, ...))``: the
    aggregate divides by this sampler's declared expected batch size m (the
    ``batch_size`` given) and adds the noise the accountant accounts. Pass
    each :class:`Batch`'s ``mask`` as the ``mask`` extra argument.
    Requires ``expected_batch_size`` (or ``batch_size``).

    Returns:
      ``optax.GradientTransformationExtraArgs``.
    """
    return dp_transform_of(self, l2_norm_clip, noise_multiplier, delta, key, max_epsilon,
                         on_budget)


