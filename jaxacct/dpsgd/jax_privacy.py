r"""jax_privacy's batch selection as jaxacct's samplers: the event of a run, from the registry.

:func:`balls_in_bins_event` asks the ``balls_in_bins`` sampler
(:mod:`jaxacct.dpsgd.samplers`) for the event, as ``jaxacct.dpsgd`` does; the
accountant config jax_privacy plugs in is
:class:`jaxacct.accounting.jax_privacy.JaxacctPldAccountantConfig` (an
accountant: no event). Needs jax_privacy. Usage and limits: docs/how-to/jax_privacy.md.
"""

from __future__ import annotations

from jaxacct._core import checks
from jaxacct._core.dtype import public_surface
from jaxacct.accounting.jax_privacy import one_cycle
from jaxacct.dpsgd import samplers

__all__ = ["balls_in_bins_event"]


def balls_in_bins_event(strategy, *, noise_multiplier: float, num_epochs: int = 1):
  r"""jaxacct's event for one cycle of jax_privacy's ``BallsInBinsSampling`` + Gaussian noise.

  ``BallsInBinsSampling(iterations=T, cycle_length=t)`` puts every record in
  one of t bins uniformly at random (independently of the others) and uses
  it in the steps i with ``i % t`` equal to its bin. For ``T <= t`` (one
  cycle; an epoch when the expected batch is N / t) each record joins at
  most one step, chosen uniformly among t: random allocation, 1 of t
  (Feldman & Shenfeld, arXiv:2502.08202v3; "balls-and-bins", Chua et al.,
  arXiv:2412.16802v1), the ``balls_in_bins`` sampler's run. Steps t > T of
  the allocation that are never run only add outputs (post-processing), so
  the event has ``steps_per_epoch = t``.

  For ``T > t`` jax_privacy keeps each record's bin for every cycle: one
  random bin j for steps j, j + t, ... That is not E fresh allocations (the
  shared bin correlates the cycles; accounting it so would under-report), so
  it is refused with a ``ValueError``. To train E epochs, draw a fresh
  ``BallsInBinsSampling`` (new rng) per epoch with ``iterations =
  cycle_length`` and pass ``num_epochs=E``: the event of
  ``jaxacct.dpsgd.epsilon(sampling="balls_in_bins")`` with t = ``cycle_length``.

  Args:
    strategy: a ``jax_privacy.batch_selection.BallsInBinsSampling`` with
      ``1 <= iterations <= cycle_length``.
    noise_multiplier: sigma of the Gaussian noise (per unit clip norm), > 0.
    num_epochs: E >= 1, epochs each with a fresh ``strategy`` draw.

  Returns:
    The registered ``balls_in_bins`` sampler's event for t =
    ``cycle_length`` steps an epoch and E epochs (a
    ``jaxacct.accounting.events.RandomAllocationDpEvent``). Bound: as
    ``jaxacct.allocation.pld`` (upper, with a certified lower).
  """
  t, _ = one_cycle(strategy)
  checks.check_sigma("noise_multiplier", noise_multiplier)
  record = samplers.get("balls_in_bins")
  # the event depends on t and E only (the strategy does not carry N): the
  # schedule of t examples in batches of 1 has t = floor(N / B) steps an epoch
  sched = record.schedule(samplers.Request(t, 1, num_epochs, None, 1, None))
  return record.event(sched, float(noise_multiplier))


# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
