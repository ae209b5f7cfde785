r"""Choosing the batch cap of truncated Poisson sampling.

:func:`smallest_caps`: for a run (N, q = B/N, T steps, sigma, delta), the
smallest cap whose certified epsilon (the accountant's upper bound of
``TruncatedSubsampledGaussianDpEvent``, the value ``jaxacct.dpsgd.epsilon``
reports) is within a given fraction of the untruncated Poisson run's
certified epsilon on the same accountant. Docs: docs/bounds/truncated_poisson.md.
"""

from __future__ import annotations

import math

from scipy import stats

from jaxacct._core import checks
from jaxacct._core.dtype import public_surface
from jaxacct._core.events import (GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent,
                                  TruncatedSubsampledGaussianDpEvent)
from jaxacct.accounting._accountant import NeighboringRelation, PLDAccountant

__all__ = ["smallest_caps"]


def _upper(event, steps: int, delta: float) -> float:
  acc = PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE)
  acc.compose(event if steps == 1 else SelfComposedDpEvent(event, steps))
  return float(acc.get_epsilon(delta))


def smallest_caps(num_examples: int, sampling_probability: float, noise_multiplier: float,
                  total_steps: int, delta: float, within=(0.01, 0.10)):
  r"""``{fraction: cap}``: the smallest cap whose certified epsilon is within ``fraction``.

  For each ``fraction`` in ``within``: the smallest integer cap b with
  ``eps_trunc(b) <= (1 + fraction) eps_poisson``, where ``eps_trunc(b)`` is
  the certified (upper) epsilon of T steps of
  ``TruncatedSubsampledGaussianDpEvent(N, q, b, sigma)`` and
  ``eps_poisson`` that of T steps of the Poisson-subsampled Gaussian at q,
  both from ``PLDAccountant`` (add/remove). A bisection over b between the
  expected batch q N and the cap whose truncation probability is below
  1e-15 (where the two runs agree); it assumes ``eps_trunc`` does not
  increase with b (it holds on the bisection's path: a cap found is checked,
  and its predecessor too). Returns also ``"poisson"``: eps_poisson.

  Raises:
    ValueError naming the parameter.
  """
  checks.check_int("num_examples", num_examples, min_value=1)
  n = int(num_examples)
  q = float(sampling_probability)
  checks.check_range("sampling_probability", q, 0.0, 1.0, lo_open=True)
  checks.check_sigma("noise_multiplier", noise_multiplier)
  checks.check_int("total_steps", total_steps, min_value=1)
  checks.check_delta(delta)
  fracs = sorted(float(f) for f in within)
  for f in fracs:
    checks.check_positive("within", f)
  sigma, steps, delta = float(noise_multiplier), int(total_steps), float(delta)
  ref = _upper(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps, delta)
  memo = {}

  def eps(b):
    if b not in memo:
      memo[b] = _upper(TruncatedSubsampledGaussianDpEvent(
          dataset_size=n, sampling_probability=q, truncated_batch_size=int(b),
          noise_multiplier=sigma), steps, delta)
    return memo[b]

  # no truncation is possible at either neighbour beyond N + 1; the event's
  # bound agrees with Poisson's once P(Bin(N, q) >= b) is negligible
  top = int(min(n + 1, stats.binom.isf(1e-15, n, q) + 2))
  out = {"poisson": ref}
  lo = max(1, int(math.floor(q * n)))
  for f in fracs:                   # ascending: a larger fraction needs no larger cap
    goal = (1.0 + f) * ref
    a, b = lo, top                  # invariant: eps(b) <= goal (or b = top)
    if eps(a) <= goal:
      out[f] = a
      continue
    while b - a > 1:
      mid = (a + b) // 2
      if eps(mid) <= goal:
        b = mid
      else:
        a = mid
    out[f] = b
    top = b
  return out


public_surface(globals())
