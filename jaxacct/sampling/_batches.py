r"""Padded batches and their capacity, shared by the training samplers of :mod:`jaxacct.sampling`.

:class:`Batch` (example indices padded to a fixed length with a 0/1 mask), the
capacity rules (:func:`capacity_for`, :func:`pad_size_for`), the overflow
bound, and the one ``dp_transform`` every sampler returns.
"""

from __future__ import annotations

import math
import warnings
from typing import Iterator, NamedTuple

import numpy as np

from jaxacct import tracking
from jaxacct._core import checks
from jaxacct._core.solve import largest_feasible_int_host

# The neighbouring relation both samplers (and their accountants) assume.
NEIGHBOURING = "add_remove"
#: The largest declared expected batch size a capacity is computed for: a batch's
#: example indices are int32 (``Batch.indices``), so no batch holds more examples.
MAX_BATCH = 2**31 - 1


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


class StepBatches:
  """A loader's iteration (mixin): ``batch(s)`` for each global step s of its
  ``num_steps`` (the whole run); ``len`` is that count."""

  def __iter__(self) -> Iterator[Batch]:
    for s in range(self.num_steps):
      yield self.batch(s)

  def __len__(self) -> int:
    return self.num_steps


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
    expected_batch_size: m in (0, 2**31 - 1], the declared expected batch
      size (the divisor of :func:`jaxacct.tracking.dp_aggregate`).
    num_steps: steps in the run, >= 1 (the union bound is over them).
    overflow_prob: in (0, 1).
    multiple: B is a multiple of this, >= 1.

  Returns:
    int B.

  Bound: upper on the overflow probability (Poisson tail: ``scipy.stats.poisson``'s
  values, from :func:`scipy.special.pdtrc`).

  Example::

    >>> capacity_for(expected_batch_size=64, num_steps=1000)
    120
  """
  checks.check_range("expected_batch_size", expected_batch_size, 0.0, MAX_BATCH, lo_open=True,
                     scalar=True)
  checks.check_int("num_steps", num_steps, min_value=1, scalar=True)
  checks.check_range("overflow_prob", overflow_prob, 0.0, 1.0, lo_open=True, hi_open=True,
                     scalar=True)
  checks.check_int("multiple", multiple, min_value=1, scalar=True)
  lam = float(expected_batch_size) + 1.0
  target = float(overflow_prob) / int(num_steps)
  q = _poisson_isf(target, lam)
  if np.isfinite(q):
    b = max(int(math.ceil(lam)), int(q))
  else:                                   # isf is inf where 1 - target rounds to 1
    b = _first_below(lambda j: _poisson_sf(j, lam), int(math.ceil(lam)), target)
  while _poisson_sf(b, lam) > target:     # isf up to float rounding: re-check
    b += 1
  while b - 1 >= lam and _poisson_sf(b - 1, lam) <= target:
    b -= 1
  m = int(multiple)
  return -(-b // m) * m


def _poisson_sf(k, lam):
  """``scipy.stats.poisson.sf(k, lam)`` for an integer k >= 0, bit for bit (its
  ``_sf``: ``pdtrc(floor(k), lam)``), without importing scipy.stats (slow to import)."""
  from scipy import special
  return special.pdtrc(np.floor(k), lam)


def _poisson_isf(q, lam):
  """``scipy.stats.poisson.isf(q, lam)`` for q in (0, 1), bit for bit (its
  ``_ppf(1 - q)``), without importing scipy.stats."""
  from scipy import special
  p = 1.0 - q
  vals = np.ceil(special.pdtrik(p, lam))
  vals1 = np.maximum(vals - 1, 0)
  return np.where(special.pdtr(vals1, lam) >= p, vals1, vals)


def _first_below(sf, lo: int, target: float) -> int:
  """The smallest int b >= lo with ``sf(b) <= target``, for ``sf`` non-increasing in b
  (a tail): doubling steps from lo to a b that meets it, then the core's integer
  bisection (:func:`jaxacct._core.solve.largest_feasible_int_host` on ``sf > target``)."""
  if sf(lo) <= target:
    return lo
  hi, step = lo + 1, 1
  while sf(hi) > target:
    hi, step = hi + 2 * step, 2 * step
  above = lambda bs, idx: np.array([sf(int(b)) > target for b in bs])
  return int(largest_feasible_int_host(above, lo, hi, 1, name="b")[0]) + 1


def overflow_bound_of(pad, n, p, num_steps, declared):
  """num_steps * (bound on P(one step's batch > pad)), capped at 1."""
  if pad >= n:
    return 0.0
  if declared is None:
    from scipy.stats import binom
    tail = float(binom.sf(pad, n, p))
  else:
    lam = float(declared) + 1.0
    tail = float(_poisson_sf(pad, lam)) if pad >= lam else 1.0
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
  checks.check_int("num_examples", num_examples, min_value=1, scalar=True)
  checks.check_range("sampling_rate", sampling_rate, 0.0, 1.0, lo_open=True, scalar=True)
  checks.check_int("num_steps", num_steps, min_value=1, scalar=True)
  checks.check_range("overflow_prob", overflow_prob, 0.0, 1.0, lo_open=True, hi_open=True,
                     scalar=True)
  checks.check_int("multiple", multiple, min_value=1, scalar=True)
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


def check_declared(expected_batch_size, n, p):
  if expected_batch_size is None:
    return None
  checks.check_positive("expected_batch_size", expected_batch_size, scalar=True)
  m = float(expected_batch_size)
  if n * p > m + 1.0:
    raise ValueError(
        f"expected_batch_size must be >= num_examples * inclusion probability - 1 = "
        f"{n * p - 1.0:g} (the capacity's overflow bound assumes n p <= m + 1); got {m:g}.")
  return m


def resolve_pad(pad_size, n, p, num_steps, overflow_prob, multiple, declared=None):
  if pad_size is None:
    if declared is not None:
      return capacity_for(expected_batch_size=declared, num_steps=num_steps,
                          overflow_prob=overflow_prob, multiple=multiple)
    return pad_size_for(num_examples=n, sampling_rate=p, num_steps=num_steps,
                        overflow_prob=overflow_prob, multiple=multiple)
  if isinstance(pad_size, str):
    checks.check_choice("pad_size", pad_size, ("max",))
    checks.check_int("multiple", multiple, min_value=1, scalar=True)
    return -(-n // int(multiple)) * int(multiple)
  checks.check_int("pad_size", pad_size, min_value=1, scalar=True)
  return int(pad_size)


def make_batch(members: np.ndarray, pad: int, step: int, epoch: int) -> Batch:
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


def delta_with_overflow_of(epsilon, delta, bound):
  """delta + (1 + e^epsilon) * bound, capped at 1 (a sampler's ``delta_with_overflow``)."""
  checks.check_range("epsilon", epsilon, 0.0, np.inf, allow_inf=True, scalar=True)
  checks.check_delta(delta, scalar=True)
  return min(1.0, float(delta) + (1.0 + math.exp(min(float(epsilon), 700.0))) * bound)


def dp_transform_of(sampler, l2_norm_clip, noise_multiplier, delta, key, max_epsilon, on_budget):
  """``optax.chain(dp_aggregate(...), track_privacy(sampler.accountant(...), ...))``: what
  is trained and what is accounted from one set of settings (a sampler's ``dp_transform``)."""
  import optax   # optax loads with the hook
  if sampler.expected_batch_size is None:
    raise ValueError("dp_transform needs the sampler's expected_batch_size (give batch_size= "
                     "or expected_batch_size= when building the sampler): it is the "
                     "aggregate's divisor.")
  checks.check_sigma("noise_multiplier", noise_multiplier, scalar=True)
  agg = tracking.dp_aggregate(l2_norm_clip=l2_norm_clip, noise_multiplier=noise_multiplier,
                              expected_batch_size=sampler.expected_batch_size, key=key)
  hook = tracking.track_privacy(sampler.accountant(noise_multiplier=noise_multiplier, delta=delta),
                                num_steps=sampler.num_steps, delta=delta,
                                max_epsilon=max_epsilon, on_budget=on_budget)
  return optax.chain(agg, hook)
