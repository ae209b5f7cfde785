r"""The shuffle sampler: a fresh permutation each epoch, cut into batches of B (no
amplification claimed)."""

from __future__ import annotations

from jaxacct import pld as jpld
from jaxacct import accounting
from jaxacct.accounting import evaluator
from jaxacct.allocation import pld as apld
from jaxacct.dpsgd.samplers._registry import Sampler, epoch_schedule, gaussian, register


def _schedule(req):
  return epoch_schedule("shuffle", req, lambda B: req.num_examples // B)


def _event(sched, sigma):
  ev = accounting.events   # loads on first use: dp_accounting comes with the events
  step, E = gaussian(sigma), int(sched.num_epochs)
  return step if E == 1 else ev.SelfComposedDpEvent(step, E)


def _block(sched, sigma):
  """One epoch (t steps) of one Gaussian step: no amplification."""
  return gaussian(sigma), {"block_size": sched.steps_per_epoch}


def _lower_known(sched):
  """A dataset of zero gradients makes shuffled batches 1-of-t allocation when B | N."""
  return sched.num_examples % int(sched.batch_size) == 0


def _lower(sched, sigma, delta):
  """The 1-of-t allocation lower over E epochs (zero-gradient dataset: shuffled batches
  are random allocation), the evaluator's bracket of that event."""
  if not _lower_known(sched):
    return None, "none: B does not divide N"
  ev = accounting.events
  allocation = [ev.RandomAllocationDpEvent(noise_multiplier=float(s),
                                           steps_per_epoch=sched.steps_per_epoch,
                                           num_epochs=int(sched.num_epochs)) for s in sigma]
  try:
    lo = evaluator.bracket(allocation, delta).lower
  except ValueError as err:   # t or E beyond the allocation door: no lower bound
    return None, f"none: the allocation lower bound refused ({err})"
  return lo, ("allocation.pld lower, 1-of-t over E epochs (zero-gradient dataset: shuffled "
              "batches = random allocation)")


def _risk(sched, sigma, want_lower):
  # no upper PLD (the upper is the exact Gaussian); the lower is 1-of-t allocation's
  if not (want_lower and _lower_known(sched)):
    return None, None
  r = apld.allocation_plds(sigma=sigma, steps_per_epoch=sched.steps_per_epoch,
                           num_selected=1, num_epochs=int(sched.num_epochs))
  return None, jpld.PairPLD(r.remove_lower, r.add_lower)


SAMPLER = register(Sampler(
    name="shuffle",
    label="shuffle (no amplification)",
    text=("sampler shuffle: a fresh uniformly random permutation each epoch, cut "
          "into t = floor(N/B) batches of exactly B examples (the last N - tB "
          "dropped); T = t E steps; no amplification is claimed from shuffling "
          "(each example is in exactly one batch per epoch)"),
    schedule=_schedule, event=_event, event_lower=False, lower=_lower, block=_block,
    risk=_risk,
    no_amplification=lambda s: int(s.num_epochs), gdp_rate=None,
    relations=("add_remove", "replace_one"), in_default_plot=True,
    # add_remove keeps N and every batch: one example replaced by a zero-gradient one
    relation_names={"add_remove": "zero_out"}))
