r"""Batch samplers that form batches exactly as jaxacct's accountants assume.

Each sampler yields :class:`Batch` objects: example indices padded to a fixed
length with a 0/1 mask, so that a ``jit``-compiled training step sees one
shape and compiles once. Padded slots hold index 0 (a valid row) and mask 0:
pass the mask to :func:`jaxacct.tracking.dp_aggregate` (or multiply
per-example gradients by it: a clipped zero gradient stays zero), and nothing
outside the batch influences the step.

Proofs and sources: docs/bounds/dpsgd.md ("Bounds and proofs /
DP-SGD: schedule, samplers, statement, risk").
"""

from __future__ import annotations

import math
import warnings
from typing import Iterator, List, NamedTuple, Optional, Union

import numpy as np

from jaxacct import accounting, allocation, dpsgd, poisson, tracking
from jaxacct._core import checks, units
from jaxacct.dpsgd import samplers

# ``pad_size_for`` (the legacy capacity from the dataset size n) is internal: it is
# what ``expected_batch_size=None`` does; :func:`capacity_for` is the public rule.
__all__ = ["Batch", "BallsInBinsSampler", "PoissonSampler", "capacity_for"]

# The neighbouring relation both samplers (and their accountants) assume.
NEIGHBOURING = "add_remove"


class Batch(NamedTuple):
  """One training step's batch.

  Attributes:
    indices: int32 array of shape (pad,) (pad = the sampler's ``pad_size``,
      or a multiple of it on overflow): the example indices, then 0-padding.
    mask: float32 array of shape (pad,): 1.0 for real examples, 0.0 for pads.
    step: global step index (0-based, over all epochs).
    epoch: epoch index (0-based; Poisson: ``step // steps_per_epoch``).
    size: number of real examples (``int(mask.sum())``).
  """
  indices: np.ndarray
  mask: np.ndarray
  step: int
  epoch: int
  size: int


def capacity_for(*, expected_batch_size: float, num_steps: int,
                 overflow_prob: float = 1e-6, multiple: int = 8) -> int:
  """Padded batch capacity from declared public numbers only (never the dataset size).

  The smallest multiple B of ``multiple`` with B >= m + 1 and
  ``num_steps * P(Poisson(m + 1) > B) <= overflow_prob``, m =
  ``expected_batch_size``. For every dataset with n p <= m + 1 (the declared
  one, n p = m, and each add/remove neighbour) a step's batch size
  Bin(n, p) exceeds B with probability <= P(Poisson(m + 1) > B)
  (Anderson & Samuels 1967: binomial upper tail <= Poisson upper tail of the
  same mean at j >= np + 1; the Poisson tail increases with its mean), so no
  batch of the run overflows with probability >= 1 - overflow_prob (union
  bound over steps).

  Args:
    expected_batch_size: m > 0, the declared expected batch size (the
      divisor of :func:`jaxacct.tracking.dp_aggregate`).
    num_steps: steps in the run, >= 1 (the union bound is over them).
    overflow_prob: in (0, 1).
    multiple: B is a multiple of this, >= 1.

  Returns:
    int B.

  Bound: upper on the overflow probability (Poisson tail, ``scipy.stats.poisson``).

  Example::

    >>> capacity_for(expected_batch_size=64, num_steps=1000)
    120
  """
  from scipy.stats import poisson
  checks.check_positive("expected_batch_size", expected_batch_size)
  checks.check_int("num_steps", num_steps, min_value=1)
  checks.check_range("overflow_prob", overflow_prob, 0.0, 1.0, lo_open=True, hi_open=True)
  checks.check_int("multiple", multiple, min_value=1)
  lam = float(expected_batch_size) + 1.0
  target = float(overflow_prob) / int(num_steps)
  b = max(int(math.ceil(lam)), int(poisson.isf(target, lam)))
  while poisson.sf(b, lam) > target:      # isf up to float rounding: re-check
    b += 1
  while b - 1 >= lam and poisson.sf(b - 1, lam) <= target:
    b -= 1
  m = int(multiple)
  return -(-b // m) * m


def _overflow_bound(pad, n, p, num_steps, declared):
  """num_steps * (bound on P(one step's batch > pad)), capped at 1."""
  from scipy.stats import binom, poisson
  if pad >= n:
    return 0.0
  if declared is None:
    tail = float(binom.sf(pad, n, p))
  else:
    lam = float(declared) + 1.0
    tail = float(poisson.sf(pad, lam)) if pad >= lam else 1.0
  return min(1.0, num_steps * tail)


def pad_size_for(*, num_examples: int, sampling_rate: float, num_steps: int,
                 overflow_prob: float = 1e-6, multiple: int = 8) -> int:
  """Smallest multiple of ``multiple`` B with num_steps * P(Bin(n, p) > B) <= overflow_prob.

  Legacy capacity: it reads the dataset size n, which add/remove neighbours
  do not share; prefer :func:`capacity_for` (declared expected batch size).

  Args:
    num_examples: n >= 1. sampling_rate: p in (0, 1], the probability that
      an example is in a given step (k/t for balls-in-bins, q for Poisson).
    num_steps: number of steps in the run (>= 1); the union bound is over them.
    overflow_prob: in (0, 1).
    multiple: B is rounded up to a multiple of this (>= 1).

  Returns:
    int B in [1, n rounded up to ``multiple``].

  Bound: exact binomial tail (scipy), union bound over steps.
  """
  from scipy.stats import binom
  checks.check_int("num_examples", num_examples, min_value=1)
  checks.check_range("sampling_rate", sampling_rate, 0.0, 1.0, lo_open=True)
  checks.check_int("num_steps", num_steps, min_value=1)
  checks.check_range("overflow_prob", overflow_prob, 0.0, 1.0, lo_open=True, hi_open=True)
  checks.check_int("multiple", multiple, min_value=1)
  n, p = int(num_examples), float(sampling_rate)
  target = float(overflow_prob) / int(num_steps)
  # binom.isf gives the smallest b with sf(b) <= target (up to float rounding: re-check)
  b = int(binom.isf(target, n, p)) if p < 1.0 else n
  b = max(0, min(b, n))
  while b < n and binom.sf(b, n, p) > target:
    b += 1
  while b > 0 and binom.sf(b - 1, n, p) <= target:
    b -= 1
  m = int(multiple)
  return max(m, -(-max(b, 1) // m) * m)


def _check_declared(expected_batch_size, n, p):
  if expected_batch_size is None:
    return None
  checks.check_positive("expected_batch_size", expected_batch_size)
  m = float(expected_batch_size)
  if n * p > m + 1.0:
    raise ValueError(
        f"expected_batch_size must be >= num_examples * inclusion probability - 1 = "
        f"{n * p - 1.0:g} (the capacity's overflow bound assumes n p <= m + 1); got {m:g}.")
  return m


def _resolve_pad(pad_size, n, p, num_steps, overflow_prob, multiple, declared=None):
  if pad_size is None:
    if declared is not None:
      return capacity_for(expected_batch_size=declared, num_steps=num_steps,
                          overflow_prob=overflow_prob, multiple=multiple)
    return pad_size_for(num_examples=n, sampling_rate=p, num_steps=num_steps,
                        overflow_prob=overflow_prob, multiple=multiple)
  if isinstance(pad_size, str):
    checks.check_choice("pad_size", pad_size, ("max",))
    return -(-n // int(multiple)) * int(multiple)
  checks.check_int("pad_size", pad_size, min_value=1)
  return int(pad_size)


def _make_batch(members: np.ndarray, pad: int, step: int, epoch: int) -> Batch:
  size = int(members.size)
  width = pad if size <= pad else -(-size // pad) * pad
  if size > pad:
    warnings.warn(
        f"jaxacct.sampling: step {step} has {size} examples > pad_size {pad}; padded to "
        f"{width} (no example dropped; dp_aggregate's divisor, the declared "
        "expected_batch_size, and the update's accounting are unchanged; the batch length "
        "reveals the overflow: see delta_with_overflow; the jitted step compiles once "
        "more for this shape).", RuntimeWarning, stacklevel=3)
  idx = np.zeros(width, np.int32)
  idx[:size] = members
  mask = np.zeros(width, np.float32)
  mask[:size] = 1.0
  return Batch(idx, mask, int(step), int(epoch), size)


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

  def __init__(self, *, num_examples: int, steps_per_epoch: Optional[int] = None,
               num_epochs: int, num_selected: int = 1, fresh_each_epoch: bool = True,
               seed: int = 0, expected_batch_size: Optional[float] = None,
               pad_size: Union[None, int, str] = None, overflow_prob: float = 1e-6,
               multiple: int = 8, batch_size: Optional[int] = None):
    checks.check_int("num_examples", num_examples, min_value=1)
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
    checks.check_int("steps_per_epoch", steps_per_epoch, min_value=1)
    checks.check_int("num_epochs", num_epochs, min_value=1)
    checks.check_int("num_selected", num_selected, min_value=1, max_value=int(steps_per_epoch))
    if not isinstance(fresh_each_epoch, (bool, np.bool_)):
      raise ValueError(f"fresh_each_epoch must be a bool; got {fresh_each_epoch!r}.")
    checks.check_int("seed", seed, min_value=0)
    self.n, self.t, self.E = int(num_examples), int(steps_per_epoch), int(num_epochs)
    self.k, self.fresh_each_epoch, self.seed = int(num_selected), bool(fresh_each_epoch), int(seed)
    self.num_steps = self.t * self.E
    p = self.k / self.t
    self.expected_batch_size = _check_declared(expected_batch_size, self.n, p)
    self.pad_size = _resolve_pad(pad_size, self.n, p, self.num_steps, overflow_prob,
                                 multiple, self.expected_batch_size)
    self.overflow_bound = _overflow_bound(self.pad_size, self.n, p, self.num_steps,
                                          self.expected_batch_size)

  def delta_with_overflow(self, *, epsilon: float, delta: float) -> float:
    """delta + (1 + e^epsilon) * overflow_bound: the run's delta when batch lengths
    (an overflow's extra padding) are observable as well as the updates.

    The updates alone are (epsilon, delta) (docs/bounds/dpsgd.md: overflow pads,
    the divisor is constant); capped at 1.
    """
    return _delta_with_overflow(epsilon, delta, self.overflow_bound)

  def assignment(self, epoch: int) -> np.ndarray:
    """(n, k) int array: the steps (within the epoch, 0..t-1) of each example."""
    checks.check_int("epoch", epoch, min_value=0, max_value=self.E - 1)
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
    return [_make_batch(members[bounds[s]:bounds[s + 1]], self.pad_size,
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
    checks.check_positive("noise_multiplier", noise_multiplier)
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
    checks.check_positive("noise_multiplier", noise_multiplier)
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
    checks.check_positive("noise_multiplier", noise_multiplier)
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
    checks.check_delta(delta)
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
    return _dp_transform(self, l2_norm_clip, noise_multiplier, delta, key, max_epsilon,
                         on_budget)


def _delta_with_overflow(epsilon, delta, bound):
  checks.check_range("epsilon", epsilon, 0.0, np.inf, allow_inf=True)
  checks.check_delta(delta)
  return min(1.0, float(delta) + (1.0 + math.exp(min(float(epsilon), 700.0))) * bound)


@units.renamed_in("epsilon", "event", "accountant", sigma="noise_multiplier")
class PoissonSampler:
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

  @units.renamed(sampling_rate="sampling_probability")
  def __init__(self, *, num_examples: int, sampling_probability: Optional[float] = None,
               num_steps: Optional[int] = None, seed: int = 0,
               expected_batch_size: Optional[float] = None,
               pad_size: Union[None, int, str] = None,
               overflow_prob: float = 1e-6, multiple: int = 8,
               steps_per_epoch: Optional[int] = None, batch_size: Optional[float] = None,
               num_epochs: Optional[int] = None):
    checks.check_int("num_examples", num_examples, min_value=1)
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
    checks.check_probability("sampling_probability", sampling_probability, open_lo=True)
    checks.check_int("num_steps", num_steps, min_value=1)
    checks.check_int("seed", seed, min_value=0)
    self.n, self.q, self.num_steps, self.seed = (int(num_examples), float(sampling_probability),
                                                 int(num_steps), int(seed))
    self.steps_per_epoch = (max(1, int(round(1.0 / self.q))) if steps_per_epoch is None
                            else int(steps_per_epoch))
    self.expected_batch_size = _check_declared(expected_batch_size, self.n, self.q)
    self.pad_size = _resolve_pad(pad_size, self.n, self.q, self.num_steps, overflow_prob,
                                 multiple, self.expected_batch_size)
    self.overflow_bound = _overflow_bound(self.pad_size, self.n, self.q, self.num_steps,
                                          self.expected_batch_size)

  def delta_with_overflow(self, *, epsilon: float, delta: float) -> float:
    """As :meth:`BallsInBinsSampler.delta_with_overflow`."""
    return _delta_with_overflow(epsilon, delta, self.overflow_bound)

  def batch(self, step: int) -> Batch:
    """The batch of global step ``step`` (0-based)."""
    checks.check_int("step", step, min_value=0, max_value=self.num_steps - 1)
    rng = np.random.default_rng((self.seed, int(step)))
    members = np.nonzero(rng.random(self.n) < self.q)[0].astype(np.int32)
    return _make_batch(members, self.pad_size, step, int(step) // self.steps_per_epoch)

  def __iter__(self) -> Iterator[Batch]:
    for s in range(self.num_steps):
      yield self.batch(s)

  def __len__(self) -> int:
    return self.num_steps

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
    checks.check_positive("noise_multiplier", noise_multiplier)
    checks.check_delta(delta)
    return samplers.get(self.sampling).result(self._schedule(), noise_multiplier, delta)

  def event(self, *, noise_multiplier):
    """The DpEvent of the whole run: ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
    GaussianDpEvent(noise_multiplier)), T)`` (for the accountant and :func:`jaxacct.calibrate`:
    ``jaxacct.calibrate(lambda s: sampler.event(noise_multiplier=s), epsilon, delta,
    bracket=(0.01, 1e4))``)."""
    checks.check_positive("noise_multiplier", noise_multiplier)
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
    checks.check_positive("noise_multiplier", noise_multiplier)
    step, options = samplers.get(self.sampling).block(self._schedule(), float(noise_multiplier))
    kwargs = {**options, "evaluate_every": self.steps_per_epoch, **kwargs}
    return tracking.EventAccountant(step, **kwargs).declare(
        noise_multiplier=noise_multiplier, expected_batch_size=self.expected_batch_size)

  def dp_transform(self, *, l2_norm_clip: float, noise_multiplier: float, delta: float, key,
                   max_epsilon: Optional[float] = None, on_budget: str = "stop"):
    """As :meth:`BallsInBinsSampler.dp_transform`."""
    return _dp_transform(self, l2_norm_clip, noise_multiplier, delta, key, max_epsilon,
                         on_budget)


def _dp_transform(sampler, l2_norm_clip, noise_multiplier, delta, key, max_epsilon, on_budget):
  import optax
  if sampler.expected_batch_size is None:
    raise ValueError("dp_transform needs the sampler's expected_batch_size (give batch_size= "
                     "or expected_batch_size= when building the sampler): it is the "
                     "aggregate's divisor.")
  checks.check_positive("noise_multiplier", noise_multiplier)
  agg = tracking.dp_aggregate(l2_norm_clip=l2_norm_clip, noise_multiplier=noise_multiplier,
                              expected_batch_size=sampler.expected_batch_size, key=key)
  hook = tracking.track_privacy(sampler.accountant(noise_multiplier=noise_multiplier, delta=delta),
                                num_steps=sampler.num_steps, delta=delta,
                                max_epsilon=max_epsilon, on_budget=on_budget)
  return optax.chain(agg, hook)
