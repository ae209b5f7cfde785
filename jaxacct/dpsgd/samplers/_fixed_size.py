r"""Fixed-size samplers: every step draws exactly B of the N examples, independently
of the other steps, without replacement (``fixed_size``) or with replacement
(``fixed_size_with_replacement``). Docs: docs/how-to/samplers.md."""

from __future__ import annotations

from jaxacct import accounting
from jaxacct.dpsgd.samplers._registry import (Sampler, epoch_schedule, gaussian, register,
                                              run_of)

_COMMON = ("; t = floor(N/B) steps per epoch, T = t E steps; an example may join several "
           "steps of an epoch or none; neighbouring datasets have the same size N (one "
           "example replaced): the accounting is replace-one")


def _schedule_of(name):
  def schedule(req):
    return epoch_schedule(name, req, lambda B: req.num_examples // B)
  return schedule


def _run(sched, step):
  return run_of(step, sched.total_steps)


def _without_replacement(sched, sigma, run=True):
  ev = accounting.events   # loads on first use: dp_accounting comes with the events
  step = ev.SampledWithoutReplacementDpEvent(sched.num_examples, int(sched.batch_size),
                                             gaussian(sigma))
  return _run(sched, step) if run else step


def _with_replacement(sched, sigma, run=True):
  ev = accounting.events
  step = ev.SampledWithReplacementDpEvent(sched.num_examples, int(sched.batch_size),
                                          gaussian(sigma))
  return _run(sched, step) if run else step


def _block_of(step):
  def block(sched, sigma):
    """One step; the tracker's cheaper mode evaluates every epoch end (t steps)."""
    return step(sched, sigma, run=False), {"evaluate_every": sched.steps_per_epoch}
  return block


def _rate(sched):
  return sched.batch_size / sched.num_examples


SAMPLER = register(Sampler(
    name="fixed_size",
    label="fixed size, without replacement (PLD, replace-one)",
    text=("sampler fixed_size: every step draws exactly B of the N examples uniformly "
          "without replacement, independently of the other steps" + _COMMON),
    schedule=_schedule_of("fixed_size"), event=_without_replacement,
    block=_block_of(_without_replacement), gdp_rate=_rate,
    relations=("replace_one",), accounted="replace_one"))

WITH_REPLACEMENT = register(Sampler(
    name="fixed_size_with_replacement",
    label="fixed size, with replacement (PLD, replace-one)",
    text=("sampler fixed_size_with_replacement: every step draws B examples uniformly "
          "with replacement (an example may be drawn more than once; its gradient then "
          "counts once per draw), independently of the other steps" + _COMMON),
    schedule=_schedule_of("fixed_size_with_replacement"), event=_with_replacement,
    block=_block_of(_with_replacement), gdp_rate=_rate, relations=("replace_one",), accounted="replace_one"))
