r"""The balls-in-bins sampler: each example joins k of the t steps of an epoch."""

from __future__ import annotations

from jaxacct import pld as jpld
from jaxacct import accounting
from jaxacct.allocation import pld as apld
from jaxacct.dpsgd.samplers._registry import Sampler, epoch_schedule, register


def _schedule(req):
  k, n = req.num_selected, req.num_examples
  return epoch_schedule("balls_in_bins", req, lambda B: (k * n) // B, k)


def _event(sched, sigma):
  ev = accounting.events   # loads on first use: dp_accounting comes with the events
  return ev.RandomAllocationDpEvent(noise_multiplier=sigma,
                                    steps_per_epoch=sched.steps_per_epoch,
                                    num_selected=sched.num_selected,
                                    num_epochs=int(sched.num_epochs))


def _block(sched, sigma):
  """One epoch: 1 event per t steps (k-of-t allocation)."""
  ev = accounting.events
  return (ev.RandomAllocationDpEvent(noise_multiplier=sigma,
                                     steps_per_epoch=sched.steps_per_epoch,
                                     num_selected=sched.num_selected),
          {"block_size": sched.steps_per_epoch})


def _risk(sched, sigma, want_lower):
  k = sched.num_selected
  r = apld.allocation_plds(sigma=sigma, steps_per_epoch=sched.steps_per_epoch,
                           num_selected=k, num_epochs=int(sched.num_epochs))
  # k > 1: the Lemma 3.2 reduction is an upper bound only; its lower PLDs
  # bound the reduced object, not k-of-t allocation: no lower then.
  lo = jpld.PairPLD(r.remove_lower, r.add_lower) if (want_lower and k == 1) else None
  return jpld.PairPLD(r.remove_upper, r.add_upper), lo


SAMPLER = register(Sampler(
    name="balls_in_bins",
    label="balls-in-bins (tight allocation PLD)",
    text=("sampler balls_in_bins: each epoch, every example joins one of the "
          "t = floor(k N/B) steps (k = 1: floor(N/B)) chosen uniformly at random, independently of "
          "the other examples (batch sizes vary; expected batch N/t >= B); "
          "T = t E steps"),
    schedule=_schedule, event=_event, block=_block, risk=_risk,
    no_amplification=lambda s: s.num_selected * int(s.num_epochs),
    gdp_rate=lambda s: s.num_selected / s.steps_per_epoch,
    options=("num_selected",), steps_rule="floor(k N / B)", in_default_plot=True))
