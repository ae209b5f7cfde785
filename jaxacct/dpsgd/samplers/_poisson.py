r"""The Poisson sampler: every example joins every step independently at rate q = B/N."""

from __future__ import annotations

from jaxacct import pld as jpld
from jaxacct import accounting
from jaxacct.dpsgd.samplers._registry import (Sampler, gaussian, rate_block, rate_schedule,
                                              register, run_of)


def _schedule(req):
  return rate_schedule("poisson", req)


def _step(sched, sigma):
  """One step: the Gaussian step sampled at q (the Gaussian step itself at q = 1)."""
  ev = accounting.events   # loads on first use: dp_accounting comes with the events
  step = gaussian(sigma)
  return ev.PoissonSampledDpEvent(sched.sampling_probability, step) if sched.sampling_probability < 1 else step


def _event(sched, sigma):
  return run_of(_step(sched, sigma), sched.total_steps)


def _risk(sched, sigma, want_lower):
  kw = dict(sigma=sigma, q=sched.sampling_probability, num_steps=sched.total_steps)
  up = jpld.poisson_gaussian_composed(**kw)
  lo = jpld.poisson_gaussian_composed(**kw, pessimistic=False) if want_lower else None
  return up, lo


SAMPLER = register(Sampler(
    name="poisson",
    label="Poisson (tight PLD)",
    text=("sampler poisson: every example joins every step independently with "
          "probability q = B/N (batch sizes vary, expected B); T = ceil(E N / B) "
          "steps; steps_per_epoch is the expected N/B"),
    schedule=_schedule, event=_event, block=rate_block(_step), risk=_risk,
    gdp_rate=lambda s: s.sampling_probability, options=("total_steps",),
    comparison_is_run=True, in_default_plot=True,
    rdp_poisson=lambda s: (s.sampling_probability, 1, s.total_steps)))
