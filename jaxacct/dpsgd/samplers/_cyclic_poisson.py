r"""The cyclic Poisson sampler (jax_privacy's ``CyclicPoissonSampling``): the data split
into b groups, step i Poisson-samples group i mod b. Docs: docs/how-to/samplers.md."""

from __future__ import annotations

import dataclasses
import math

from jaxacct import accounting
from jaxacct._core import checks
from jaxacct.dpsgd.samplers._registry import (Sampler, check_number, gaussian, rate_schedule,
                                              register, run_of)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CyclicPoissonSettings:
  """Options of ``sampling="cyclic_poisson"``.

  Attributes:
    cycle_length: b, an int >= 1 with b B <= N: the data are split into b
      groups; step i samples group i mod b at rate b B / N (b = 1: Poisson).
  """
  cycle_length: int = dataclasses.field(
      default=None, metadata={"help": "b: the data split into b groups, "
                                      "step i samples group i mod b at rate b B / N"})

  def __post_init__(self):
    if self.cycle_length is None:
      raise ValueError("cycle_length is required with sampling='cyclic_poisson' (b: the "
                       "data split into b groups); got cycle_length=None.")
    check_number("cycle_length", self.cycle_length)
    checks.check_int("cycle_length", self.cycle_length, min_value=1)


def _schedule(req):
  b = int(req.settings.cycle_length)
  if b * float(req.batch_size) > req.num_examples:
    raise ValueError(f"cycle_length * batch_size must be <= num_examples (the group rate b B "
                     f"/ N is a probability); got cycle_length={b}, batch_size="
                     f"{req.batch_size!r}, num_examples={req.num_examples}.")
  return rate_schedule("cyclic_poisson", req)


def _rate(sched):
  """The rate at which an example's group is sampled: b B / N."""
  return min(1.0, sched.settings.cycle_length * sched.sampling_probability)


def _step(sched, sigma):
  ev = accounting.events   # loads on first use: dp_accounting comes with the events
  rate = _rate(sched)
  step = gaussian(sigma)
  return ev.PoissonSampledDpEvent(rate, step) if rate < 1 else step


def _event(sched, sigma):
  """ceil(T / b) Poisson steps at rate b B / N: an example's group is sampled at
  most that often in T steps (group 0's count; the others' is at most it)."""
  return run_of(_step(sched, sigma), math.ceil(sched.total_steps / sched.settings.cycle_length))


def _block(sched, sigma):
  """One cycle (b steps) holds one step of the worst-placed group."""
  return _step(sched, sigma), {"block_size": int(sched.settings.cycle_length)}


SAMPLER = register(Sampler(
    name="cyclic_poisson",
    label="cyclic Poisson (tight PLD)",
    text=("sampler cyclic_poisson: the N examples split into b = cycle_length groups; step "
          "i samples every example of group i mod b independently with probability b B/N "
          "(batch sizes vary, expected B; jax_privacy's CyclicPoissonSampling); T = "
          "ceil(E N / B) steps, each example eligible in ceil(T / b) of them"),
    schedule=_schedule, event=_event, block=_block,
    gdp_rate=_rate, settings=CyclicPoissonSettings, options=("total_steps",),
    rdp_poisson=lambda s: (_rate(s), 1, math.ceil(s.total_steps / s.settings.cycle_length))))
