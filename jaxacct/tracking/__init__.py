r"""Optax hook: track (and enforce) the privacy spent while training.

:func:`track_privacy` returns an :class:`optax.GradientTransformation` that
passes updates through unchanged (as ``optax.snapshot`` does), counts the
*applied* updates and keeps the epsilon spent so far in its state::

    sampler = jaxacct.sampling.PoissonSampler(
        num_examples=n, sampling_rate=q, num_steps=num_steps, expected_batch_size=m)
    tx = optax.chain(
        jaxacct.tracking.dp_aggregate(
            l2_norm_clip=1.0, noise_multiplier=sigma, expected_batch_size=m,
            key=jax.random.key(0)),
        jaxacct.tracking.track_privacy(
            sampler.accountant(sigma=sigma), num_steps=num_steps, delta=1e-5,
            max_epsilon=8.0),
        optax.sgd(0.1))
    ...
    updates, opt_state = tx.update(per_example_grads, opt_state, params, mask=batch.mask)
    eps = optax.tree.get(opt_state, "eps")      # inside or outside jit

:func:`dp_aggregate` (clip, masked sum, noise, divide by the *declared*
expected batch size m) replaces ``optax.contrib.differentially_private_aggregate``,
which divides by the padded batch length: a number derived from the dataset
size (not public under the add/remove relation the accountants assume) and,
on overflow, from the sampled batch. With a constant divisor the released
update is exactly the accounted noisy sum, rescaled.

Neighbouring relation: each accountant names the one it assumes
(``accountant.neighbouring``: its ``PLDAccountant``'s relation,
``"add_remove"`` by default and for the samplers' accountants;
``"replace_one"`` for shuffling; ``None`` for a table the user supplies).
Schedule: the epsilon table and the budget stop hold for
a schedule fixed in advance (arXiv:2602.06756); :func:`track_privacy` and
:func:`dp_aggregate` refuse a change they can see mid-run
(:class:`PrivacyScheduleChanged`, see :func:`track_privacy`).

Design (the accounting is float64 and happens once, when the hook is built):

* One event accountant: :class:`EventAccountant` describes the run as one
  event per block (a dp_accounting or jaxacct event,
  :mod:`jaxacct.accounting.events`) composed by
  ``jaxacct.accounting.PLDAccountant``, the accountant behind
  :func:`jaxacct.calibrate` and :func:`jaxacct.dpsgd.epsilon`:

  - Poisson subsampling: ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``
    per step;
  - full batch: ``GaussianDpEvent(sigma)`` per step;
  - random allocation: ``RandomAllocationDpEvent(sigma=sigma,
    steps_per_epoch=t, num_selected=k)`` per epoch (``block_size=t``);
  - shuffling: ``ShuffleDpEvent(n, eps0)`` per round
    (``neighboring_relation=REPLACE_ONE``).

  :meth:`jaxacct.sampling.PoissonSampler.accountant`,
  :meth:`jaxacct.sampling.BallsInBinsSampler.accountant` and
  :func:`accountant_for` build it for their run. A table the user holds is
  an :class:`EpsilonTableAccountant`; an RDP curve (per step) becomes one
  through ``jaxacct.mechanisms.rdp_to_epsilon(orders, b * rdp, delta)`` for
  b = 0..num_blocks. ``eps[b]`` is an upper bound on epsilon at ``delta``
  after ``b`` blocks of ``block_size`` applied updates. It is computed under
  ``jax.enable_x64(True)``, so the table equals the offline numbers.
* Under ``jit`` the hook only does an integer lookup: ``count -> eps``. No
  float64 is needed in the user's program.
* Every block count is evaluated (issue 44): for a repeated event the b-fold
  compositions are powers of one characteristic function, evaluated for all b
  as batched inverse FFTs (about 5-9 s for 10,000 Poisson steps on 2 CPU
  cores), equal to the accountant to its own round-off; Gaussian ledgers by
  the accountant's closed form; allocation epochs by the accountant itself.
  A step inside a block is charged the whole block (the outputs so far are a
  post-processing of the whole block's output), except inside an epoch of
  1-of-t random allocation, where the released prefix of s steps (1-of-s
  allocation that holds the example with probability s/t) has its own,
  smaller bound (:func:`epsilon_table`). ``max_evaluations=`` keeps the old,
  cheaper grid of counts, which overstates epsilon between them.
* Past the table (``count > num_steps``) epsilon is ``+inf`` (no guarantee).

Float64 policy: with x64 enabled the state's ``eps`` is float64 and equals the
functional API. In a float32 program it is float32, rounded *up* (never below
the float64 value; relative excess < 1.2e-7). :func:`epsilon_table` gives the
float64 table for host-side reporting.

Gradient accumulation (``optax.MultiSteps``): put the hook *inside* the
wrapped optimizer. ``MultiSteps`` calls the inner update at every micro-step
but keeps the inner state only when it emits, so ``count`` counts applied
(logical-batch) updates, never micro-batches. (Note that
``differentially_private_aggregate`` itself must see whole per-example
gradients; optax warns it does not combine with ``MultiSteps``: use
:func:`clip_and_sum` per micro-batch *outside* ``MultiSteps`` and
:func:`gaussian_noise` inside it, see its docstring.)

Budget (``max_epsilon``): before applying the update that moves ``count`` to
``c + 1`` the hook checks, on the precomputed table, that
``eps[c + 1] <= max_epsilon``, the table's crossing being settled on the
accountant's own numbers (:meth:`EventAccountant.at_budget`: the stop fires
at the first step whose epsilon exceeds the budget, not earlier, not later).
If not, the update is replaced by zeros (as
``optax.transforms.conditionally_mask`` does), ``count`` stays, and the flag
``budget_exhausted`` is set: the spent epsilon never exceeds ``max_epsilon``.
Place the hook right after the noise, so that nothing downstream (momentum,
Adam moments) sees new data once the budget is spent. With
``on_budget="raise"`` the update is masked as well and, in addition, an error
is raised: directly (:class:`PrivacyBudgetExceeded`) when ``update`` runs
eagerly, and through ``jax.debug.callback`` under ``jit``/``vmap`` (JAX then
reports it as a runtime error whose message contains
``PrivacyBudgetExceeded``, when the step's result is materialised). Users who
prefer functional errors can instead wrap their step in
``jax.experimental.checkify.checkify`` and ``checkify.check`` on
``budget_exhausted`` themselves (the kernels stay free of ``checkify.check``,
which raises when staged without ``checkify``).

Bound: upper (each table entry is an upper bound of its accountant).
"""

from typing import TYPE_CHECKING

from jaxacct._core.lazy import lazy_exports as _lazy_exports

# Imported on first access (PEP 562): optax loads with the hook
# (``track_privacy`` and its helpers), not with the accountants.
_LAZY = {
    **{n: ("jaxacct.tracking._accountants", n)
       for n in ("EpsilonTableAccountant", "EventAccountant", "epsilon_table")},
    "accountant_for": ("jaxacct.tracking._calibration", "accountant_for"),
    **{n: ("jaxacct.tracking._hook", n)
       for n in ("PrivacyBudgetExceeded", "PrivacyScheduleChanged", "PrivacyTrackerState",
                 "clip_and_sum", "gaussian_noise", "privacy_spent", "track_privacy")},
    **{n: ("jaxacct.tracking._aggregate", n) for n in ("DPAggregateState", "dp_aggregate")},
}

if TYPE_CHECKING:
  from jaxacct.tracking._accountants import (EpsilonTableAccountant, EventAccountant,
                                             epsilon_table)
  from jaxacct.tracking._calibration import accountant_for
  from jaxacct.tracking._aggregate import DPAggregateState, dp_aggregate
  from jaxacct.tracking._hook import (PrivacyBudgetExceeded, PrivacyScheduleChanged,
                                      PrivacyTrackerState, clip_and_sum, gaussian_noise,
                                      privacy_spent, track_privacy)

# The optax states (``PrivacyTrackerState``, ``DPAggregateState``) are read by
# name (``optax.tree.get(state, "PrivacyTrackerState")``) or through
# :func:`privacy_spent`; importable here, not listed.
__all__ = [
    "PrivacyBudgetExceeded", "PrivacyScheduleChanged",
    "track_privacy", "dp_aggregate",
    "EventAccountant", "EpsilonTableAccountant",
    "epsilon_table", "privacy_spent", "accountant_for",
    "clip_and_sum", "gaussian_noise",
]

__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals())
