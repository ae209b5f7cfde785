r"""The truncated Poisson sampler: Poisson sampling at rate q = B/N, a batch over the cap
``max_batch_size`` cut down to the cap. Docs: docs/how-to/samplers.md."""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxacct import accounting
from jaxacct._core import checks
from jaxacct._core.lazy import LazyModule

# loaded with the first truncated question (scipy and dp_accounting come with them)
truncated_cap = LazyModule("jaxacct.accounting.truncated_cap")
truncated_lower = LazyModule("jaxacct.accounting.truncated_lower")
from jaxacct.dpsgd.samplers._registry import (Sampler, check_number, rate_block,
                                              rate_schedule, register, run_of)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TruncatedPoissonSettings:
  """Options of ``sampling="truncated_poisson"`` (jax_privacy's ``truncated_batch_size``).

  Attributes:
    max_batch_size: the batch cap b, an int >= 1: a Poisson batch of more than
      b examples keeps a uniformly random b of them.
  """
  max_batch_size: int = dataclasses.field(
      default=None, metadata={"help": "the batch cap b: a Poisson batch "
                                      "of more than b examples keeps b of them"})

  def __post_init__(self):
    if self.max_batch_size is None:
      raise ValueError("max_batch_size is required with sampling='truncated_poisson' (the "
                       "batch cap b: a Poisson batch of more than b examples keeps b of "
                       "them); got max_batch_size=None.")
    check_number("max_batch_size", self.max_batch_size)
    checks.check_int("max_batch_size", self.max_batch_size, min_value=1)


def _schedule(req):
  cap = req.settings.max_batch_size
  checks.check_int("max_batch_size", cap, min_value=1, max_value=req.num_examples)
  return rate_schedule("truncated_poisson", req)


def _step(sched, sigma):
  checks.check_sigma("noise_multiplier", sigma)   # dp_accounting's event does not
  return accounting.events.TruncatedSubsampledGaussianDpEvent(
      dataset_size=sched.num_examples, sampling_probability=sched.sampling_probability,
      truncated_batch_size=int(sched.settings.max_batch_size), noise_multiplier=sigma)


def _event(sched, sigma):
  return run_of(_step(sched, sigma), sched.total_steps)


def _lower(sched, sigma, delta):
  """The worst exact instance found (target e1, the others orthogonal to it), for one
  question (seconds of host work; arrays keep the accountant's lower)."""
  if sigma.size != 1:
    return None, "the accountant's (instance lowers: one question at a time)"
  try:
    lo = truncated_lower.truncated_poisson_lower(
        sched.num_examples, sched.sampling_probability, int(sched.settings.max_batch_size),
        float(sigma[0]), sched.total_steps, float(delta[0]))
  except ValueError as err:    # an instance too large at this noise multiplier
    return None, f"the accountant's (no instance lower: {err})"
  return np.array([lo]), ("an exact instance, the others orthogonal to the target "
                          "(jaxacct.accounting.truncated_lower; docs/bounds/truncated_poisson.md)")


def _rdp_poisson(sched):
  """T Poisson steps at rate q and noise multiplier sigma / 2 dominate the run: each
  step's upper pair, ``(1 - t) PG(sigma, q) + t PG(sigma / 2, q_t)`` with ``q_t <= q b /
  (b + 1) < q`` (``jaxacct.accounting.mixtures.truncated_poisson_gaussian``), mixes two
  pairs each dominated by PG(sigma / 2, q) (more noise and a lower rate are
  post-processings), so by joint convexity it is too (docs/bounds/truncated_poisson.md)."""
  return sched.sampling_probability, 2, sched.total_steps


def _caps(sched, sigma, delta):
  """The smallest caps within 1 % and 10 % of untruncated Poisson's certified epsilon."""
  r = truncated_cap.smallest_caps(sched.num_examples, sched.sampling_probability,
                                  float(sigma), sched.total_steps, float(delta))
  return tuple((gap, int(r[gap])) for gap in (0.01, 0.1))


SAMPLER = register(Sampler(
    name="truncated_poisson",
    label="truncated Poisson (PLD)",
    text=("sampler truncated_poisson: every example joins every step independently with "
          "probability q = B/N, and a batch of more than b = max_batch_size examples keeps "
          "a uniformly random b of them (dp_accounting's TruncatedSubsampledGaussianDpEvent, "
          "arXiv:2508.15089); T = ceil(E N / B) steps; steps_per_epoch is the expected N/B"),
    schedule=_schedule, event=_event, lower=_lower, caps=_caps, block=rate_block(_step),
    gdp_rate=lambda s: s.sampling_probability,
    settings=TruncatedPoissonSettings, options=("total_steps",),
    rdp_poisson=_rdp_poisson))
