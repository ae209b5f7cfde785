r"""DP-SGD accounting from the quantities ML users know.

One recipe from a training configuration -- dataset size N (``num_examples``),
batch size B (``batch_size``), epochs E (``num_epochs``), noise multiplier
sigma (``noise_multiplier``), ``delta`` and the batch ``sampling`` -- to a
certified epsilon (:func:`epsilon`), and back: the smallest certified noise
multiplier for target (epsilon, delta) pairs (:func:`calibrate_noise_multiplier`,
an adapter over :func:`jaxacct.calibrate`). :func:`event` is the run's DpEvent
(what the accountant and the calibrator take; other parameters, e.g. epochs,
calibrate as ``jaxacct.calibrate(lambda E: event(..., num_epochs=E), ...)``).
:func:`schedule` shows the step counts each sampling implies; the two step
counts have names that cannot be confused: ``steps_per_epoch`` (t) and
``total_steps`` (T).

Samplings (clipping norm C; the noise multiplier is noise std / C):

=================  ===================================  ==========================
``sampling``       batches                              bound returned
=================  ===================================  ==========================
``balls_in_bins``  each example joins k of the t =      tight random-allocation
                   floor(kN/B) steps of every epoch,    PLD (Feldman & Shenfeld,
                   uniformly at random (expected batch  arXiv:2602.17284v1;
                   kN/t >= B); T = tE                   ``allocation.pld``):
                                                        upper and lower
``poisson``        each example joins each step         tight PLD of the
                   independently with probability       Poisson-subsampled
                   q = B/N; T = ceil(E N / B)           Gaussian (``poisson``,
                                                        method "pld"): upper
``shuffle``        a fresh random permutation per       NO amplification: each
                   epoch cut into t = floor(N/B)        example is in exactly one
                   fixed-size batches (drop_last);      batch per epoch, so E
                   T = tE                               Gaussian steps: exact
                                                        Gaussian with sigma/sqrt(E)
=================  ===================================  ==========================

Why shuffling gets no amplification here: no tight (or even nearly tight)
amplification bound is known for the Gaussian mechanism over shuffled
fixed-size batches. Shuffling amplification theorems (Feldman, McMillan &
Talwar, arXiv:2012.12803v4) hold for one example per step with an eps0-DP
local randomizer, and pay an extra sqrt(log 1/delta) through the conversion
of the Gaussian to (eps0, delta0)-DP (Feldman & Shenfeld, arXiv:2502.08202v3,
Sec. 1 and App. C); random allocation's analysis does not transfer (in a
shuffle the other examples' batches depend on the target's), and Chua et al.
(NeurIPS 2024, "Scalable DP-SGD: Shuffling vs. Poisson subsampling") show
lower bounds for shuffled batches well above the Poisson/allocation epsilon.
The honest certified number is therefore the no-amplification one, which is
valid for *any* batching that uses each example at most once per epoch. The
``lower`` of a shuffle result is the tight allocation lower bound (k = 1,
when B divides N): a dataset whose other examples have zero gradients makes
shuffled batches exactly 1-of-t random allocation, so the true shuffled
epsilon is at least that. Use ``balls_in_bins`` to train with shuffle-like
batches *and* a Poisson-like guarantee.

Neighbouring datasets: add/remove of one example, with the "null element"
convention of Feldman & Shenfeld (arXiv:2502.08202v3, Sec. 2; "zero-out" in
jax_privacy): the dataset size N and the batch layout are public and the
removed example contributes a zero gradient. Under replace-one adjacency the
sensitivity doubles: pass ``noise_multiplier / 2``.

From other libraries' configurations (all with clipping norm C and
``noise_multiplier`` = noise std / C):

* jax_privacy ``DpParams(noise_multipliers=s, num_samples=N, batch_size=B,
  delta=d)`` with ``DpsgdTrainingAccountant(...).compute_epsilon(num_updates=T,
  ...)`` (Poisson, q = B/N, T updates): ``epsilon(noise_multiplier=s,
  num_examples=N, batch_size=B, total_steps=T, delta=d, sampling="poisson")``.
  Its ``SamplingMethod.FIXED_BATCH_SIZE`` is Poisson at ``s / 2`` (replace
  adjacency): pass ``noise_multiplier=s / 2``.
* Opacus ``make_private_with_epsilon(epochs=E, target_epsilon=e,
  target_delta=d)`` (Poisson with q = 1/len(data_loader) and
  ``int(E / q)`` steps; len(data_loader) = ceil(N/B) for the usual
  ``drop_last=False``): ``calibrate_noise_multiplier(epsilon=e, delta=d,
  num_examples=N, batch_size=N / len(data_loader), total_steps=E *
  len(data_loader), sampling="poisson")``.
* TensorFlow Privacy ``compute_dp_sgd_privacy_statement(number_of_examples=N,
  batch_size=B, num_epochs=E, noise_multiplier=s, delta=d)`` (Poisson, q =
  B/N, ceil(E N / B) steps): ``epsilon(noise_multiplier=s, num_examples=N,
  batch_size=B, num_epochs=E, delta=d, sampling="poisson")``.

Example (N = 60,000, B = 256, E = 10, delta = 1e-5)::

  >>> import jaxacct
  >>> r = jaxacct.dpsgd.epsilon(noise_multiplier=0.7341, num_examples=60_000,
  ...                           batch_size=256, num_epochs=10, delta=1e-5)
  >>> sigma = jaxacct.dpsgd.calibrate_noise_multiplier(
  ...     epsilon=3.0, delta=1e-5, num_examples=60_000, batch_size=256,
  ...     num_epochs=10)       # about 0.684 (balls_in_bins)
"""

from jaxacct._core.dtype import public_surface
from jaxacct.dpsgd._recipe import (SAMPLINGS, Schedule, calibrate_noise_multiplier, epsilon,
                                   event, schedule)
from jaxacct.dpsgd._statement import NEIGHBOURINGS, Comparison, PrivacyStatement, statement

# ``SAMPLINGS`` and ``NEIGHBOURINGS`` (the values ``sampling=`` and
# ``neighbouring=`` accept) and ``Comparison`` (the type of two of
# ``PrivacyStatement``'s fields, read, never built by a user) are importable
# for the command line, not listed.
__all__ = ["Schedule", "schedule", "event", "epsilon",
           "calibrate_noise_multiplier", "statement", "PrivacyStatement"]

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
