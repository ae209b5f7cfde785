"""Train a small Flax MLP with DP-SGD and track epsilon with jaxacct.

Synthetic data (no downloads), CPU; each run takes seconds (the first one in a fresh
process mostly compiles)::

    python examples/train_flax.py --scheme allocation --epochs 5
    python examples/train_flax.py --scheme poisson --epochs 5
    python examples/train_flax.py --scheme fixed_bins --epochs 5
    python examples/train_flax.py --scheme allocation --max-epsilon 2   # stops early

Batches come from :mod:`jaxacct.sampling`, formed exactly as the accountant
assumes; sigma is calibrated on the sampler's event (``sampler.event``,
``jaxacct.calibrate``) and the tracking accountant comes from the sampler
(``sampler.accountant``: the same event, one block at a time, through the
same PLD accountant), so the three cannot disagree:

* ``allocation`` (balls-in-bins, fresh): every epoch each example joins one of
  the ``t`` steps, drawn uniformly and anew each epoch
  (``BallsInBinsSampler``; ``RandomAllocationDpEvent`` per epoch);
* ``fixed_bins``: the step is drawn once and kept every epoch (jax_privacy's
  ``BallsInBinsSampling``; accounted with ``fresh_each_epoch=False``, i.e. one
  epoch at sigma / sqrt(E): more noise for the same epsilon);
* ``poisson``: every step each example joins with probability ``q``
  (``PoissonSampler``; ``PoissonSampledDpEvent`` per step).

What is trained is what is accounted. The expected batch size
``batch_size`` is *declared* (a number fixed before training) and is the only
divisor: the sampler's capacity (fixed batch length) is derived from it and a
declared overflow probability, never from the dataset size, and
``jaxacct.tracking.dp_aggregate`` clips, sums the real rows (the batch's 0/1
mask, passed as ``mask=``), adds N(0, (sigma C)^2) and divides by it. (optax's
``differentially_private_aggregate`` divides by the padded length instead: a
number that depends on the dataset size, not public under the add/remove
relation the accountants assume, and, on overflow, on the sampled batch.) So
the update of a dataset of n examples and of n + 1 examples is the same
function of the sampled examples. The jitted step sees one shape and
compiles once (an overflow, probability <= ``sampler.overflow_bound``, pads
further and compiles once more; the divisor does not change).

The chain is ``dp_aggregate``, then the jaxacct tracker (right after the
noise, so a budget stop keeps new data out of everything downstream), then
SGD. The loop stops as soon as the tracker reports the budget
(``max_epsilon``) spent; the budget and the schedule (sigma, batch size,
steps) are fixed before training (the hook refuses a change it can see).
"""

from __future__ import annotations

import argparse
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax.training import train_state

import jaxacct
from jaxacct import sampling, tracking


class MLP(nn.Module):
  hidden: int = 32

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(self.hidden)(x))
    return nn.Dense(1)(x)[..., 0]


def make_data(n: int, dim: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, dim)).astype(np.float32)
  w = rng.normal(size=dim).astype(np.float32)
  y = (x @ w + 0.5 * rng.normal(size=n) > 0).astype(np.float32)
  return jnp.asarray(x), jnp.asarray(y)


def make_sampler(scheme: str, *, n: int, batch_size: int, num_epochs: int, seed: int = 0):
  """The sampler of ``scheme``: t = n // batch_size steps per epoch (balls-in-bins),
  or q = batch_size / n and ceil(num_epochs / q) steps (Poisson); the declared
  expected batch size is ``batch_size`` (capacity from it, not from n)."""
  if scheme in ("allocation", "fixed_bins"):
    return sampling.BallsInBinsSampler(num_examples=n, steps_per_epoch=n // batch_size,
                                       num_epochs=num_epochs, seed=seed,
                                       fresh_each_epoch=(scheme == "allocation"),
                                       expected_batch_size=batch_size)
  q = batch_size / n
  steps = int(math.ceil(num_epochs / q - 1e-9))
  return sampling.PoissonSampler(num_examples=n, sampling_probability=q, num_steps=steps,
                                 seed=seed, steps_per_epoch=max(1, steps // num_epochs),
                                 expected_batch_size=batch_size)


def calibrate(sampler, *, epsilon: float, delta: float) -> float:
  """Noise multiplier meeting (epsilon, delta) for the sampler's run (conservative):
  the one calibrator on the sampler's event (tight PLD)."""
  return float(jaxacct.calibrate(lambda s: sampler.event(noise_multiplier=s), epsilon, delta,
                                 bracket=(0.01, 1e4), rtol=2.5e-4, name="noise_multiplier"))


def main(scheme: str = "poisson", *, num_epochs: int = 5, n: int = 512,
         batch_size: int = 64, epsilon: float = 4.0, delta: float = 1e-5,
         max_epsilon=None, l2_norm_clip: float = 1.0, lr: float = 0.5,
         seed: int = 0, verbose: bool = True, noise_multiplier=None):
  """Trains; returns a list of dicts (epoch, step, eps, loss, exhausted), one per
  epoch (the last one possibly cut short by the budget).

  ``noise_multiplier``: use this sigma instead of calibrating to ``epsilon``.
  """
  x, y = make_data(n, 16, seed)
  sampler = make_sampler(scheme, n=n, batch_size=batch_size, num_epochs=num_epochs,
                         seed=seed + 1)
  sigma = (float(noise_multiplier) if noise_multiplier is not None else
           calibrate(sampler, epsilon=epsilon, delta=delta))
  # the event the calibration met, one block (step / epoch) at a time
  accountant = sampler.accountant(noise_multiplier=sigma, delta=delta)
  tx = optax.chain(
      tracking.dp_aggregate(           # divides by the declared batch_size, never by n
          l2_norm_clip=l2_norm_clip, noise_multiplier=sigma,
          expected_batch_size=sampler.expected_batch_size, key=jax.random.key(seed)),
      tracking.track_privacy(accountant, num_steps=sampler.num_steps, delta=delta,
                             max_epsilon=max_epsilon),
      optax.sgd(lr))
  model = MLP()
  params = model.init(jax.random.key(seed), x[:1])
  state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

  def loss_fn(p, xi, yi):
    return optax.sigmoid_binary_cross_entropy(model.apply(p, xi[None]), yi[None]).mean()

  @jax.jit
  def step(state, idx, mask):     # one shape (pad,) for the whole run: one compile
    xb, yb = x[idx], y[idx]
    grads = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))(state.params, xb, yb)
    # the mask goes to dp_aggregate (padding rows contribute exactly zero)
    updates, opt_state = state.tx.update(grads, state.opt_state, state.params, mask=mask)
    state = state.replace(step=state.step + 1, opt_state=opt_state,
                          params=optax.apply_updates(state.params, updates))
    pts = optax.tree.get(state.opt_state, "PrivacyTrackerState")
    return state, pts.eps, pts.count, pts.budget_exhausted

  @jax.jit
  def full_loss(params):
    return jax.vmap(loss_fn, in_axes=(None, 0, 0))(params, x, y).mean()

  history = []
  epoch, eps, count, exhausted = 0, 0.0, 0, False

  def record(ep):
    rec = dict(epoch=ep + 1, step=int(count), eps=float(eps),
               loss=float(full_loss(state.params)), exhausted=bool(exhausted))
    history.append(rec)
    if verbose:
      print(f"epoch {rec['epoch']}: steps {rec['step']}, loss {rec['loss']:.4f}, "
            f"epsilon {rec['eps']:.4f} at delta {delta:g} (sigma {sigma:.4f}, "
            f"{scheme}){' [budget exhausted: stopped]' if rec['exhausted'] else ''}")

  epoch_start = 0                   # updates applied before the current epoch
  for batch in sampler:
    if batch.epoch != epoch:
      record(epoch)
      epoch, epoch_start = batch.epoch, int(count)
    state, eps, count, exhausted = step(state, jnp.asarray(batch.indices),
                                        jnp.asarray(batch.mask))
    if bool(exhausted):             # the tracker masked this update: budget spent
      break
  if int(count) > epoch_start or not history:
    record(epoch)
  else:                             # stopped before any update of this epoch: the
    history[-1]["exhausted"] = True   # last record is the run's end, not a new epoch
    if verbose:
      print(f"budget exhausted before epoch {epoch + 1}: stopped after "
            f"{history[-1]['step']} steps")
  tracking.privacy_spent(state.opt_state)   # host-side: raises if the schedule changed
  return history


if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
  ap.add_argument("--scheme", default="poisson", choices=["allocation", "fixed_bins", "poisson"])
  ap.add_argument("--epochs", type=int, default=5)
  ap.add_argument("--epsilon", type=float, default=4.0)
  ap.add_argument("--max-epsilon", type=float, default=None)
  args = ap.parse_args()
  main(args.scheme, num_epochs=args.epochs, epsilon=args.epsilon,
       max_epsilon=args.max_epsilon)
