"""Train a small Flax NNX model with DP-SGD and track epsilon with jaxacct.

The NNX counterpart of ``examples/train_flax.py`` (Flax linen): the same
balls-in-bins sampler, calibration and tracker, with an ``nnx.Module`` and
``nnx.Optimizer``. Synthetic data (no downloads), CPU, seconds::

    python examples/train_flax_nnx.py --num-epochs 3 --epsilon 4

* batches come from ``jaxacct.sampling.BallsInBinsSampler``: each epoch every
  example joins one of t = N // B steps, as the accountant assumes;
* sigma is calibrated on the sampler's own event (``jaxacct.calibrate``), and
  the tracker's accountant comes from the same sampler (``sampler.accountant``);
* per-example gradients: the model is split into its graph and parameters
  (``nnx.split``) and ``jax.vmap(jax.grad(...))`` runs over the batch;
* ``tracking.dp_aggregate`` clips each row, sums the real rows (``mask=``, passed
  through ``optimizer.update``), adds N(0, (sigma C)^2) and divides by the
  declared batch size B, never by the realised one; ``tracking.track_privacy``
  comes right after it, then SGD.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import jaxacct
from jaxacct import sampling, tracking


class MLP(nnx.Module):
  def __init__(self, dim: int, hidden: int, *, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(dim, hidden, rngs=rngs)
    self.out = nnx.Linear(hidden, 1, rngs=rngs)

  def __call__(self, x):
    return self.out(nnx.relu(self.hidden(x)))[..., 0]


def make_data(n: int, dim: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, dim)).astype(np.float32)
  w = rng.normal(size=dim).astype(np.float32)
  y = (x @ w + 0.5 * rng.normal(size=n) > 0).astype(np.float32)
  return jnp.asarray(x), jnp.asarray(y)


def main(*, num_epochs: int = 3, n: int = 512, batch_size: int = 64, epsilon: float = 4.0,
         delta: float = 1e-5, l2_norm_clip: float = 1.0, lr: float = 0.5, seed: int = 0,
         verbose: bool = True):
  """Trains; returns a list of dicts (epoch, step, eps, loss, sigma), one per epoch."""
  x, y = make_data(n, 16, seed)
  sampler = sampling.BallsInBinsSampler(num_examples=n, steps_per_epoch=n // batch_size,
                                        num_epochs=num_epochs, seed=seed + 1,
                                        expected_batch_size=batch_size)
  sigma = float(jaxacct.calibrate(lambda s: sampler.event(noise_multiplier=s), epsilon, delta,
                                  bracket=(0.01, 1e4), rtol=2.5e-4, name="noise_multiplier"))
  tx = optax.chain(
      tracking.dp_aggregate(l2_norm_clip=l2_norm_clip, noise_multiplier=sigma,
                            expected_batch_size=sampler.expected_batch_size,
                            key=jax.random.key(seed)),
      tracking.track_privacy(sampler.accountant(noise_multiplier=sigma, delta=delta),
                             num_steps=sampler.num_steps, delta=delta),
      optax.sgd(lr))
  model = MLP(16, 32, rngs=nnx.Rngs(seed))
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  graphdef, _, rest = nnx.split(model, nnx.Param, ...)

  def loss_fn(params, xi, yi):      # one example; the model rebuilt from its parameters
    m = nnx.merge(graphdef, params, rest)
    return optax.sigmoid_binary_cross_entropy(m(xi[None]), yi[None]).mean()

  @nnx.jit
  def step(model, optimizer, idx, mask):   # one shape for the whole run: one compile
    params = nnx.state(model, nnx.Param)
    grads = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))(params, x[idx], y[idx])
    optimizer.update(model, grads, mask=mask)    # mask: padding rows count zero

  def spent():
    pts = optax.tree.get(nnx.as_pure(optimizer.opt_state), "PrivacyTrackerState")
    return int(pts.count), float(pts.eps)

  history, epoch = [], 0

  def record(ep):
    count, eps = spent()
    loss = float(optax.sigmoid_binary_cross_entropy(model(x), y).mean())
    history.append(dict(epoch=ep + 1, step=count, eps=eps, loss=loss, sigma=sigma))
    if verbose:
      print(f"epoch {ep + 1}: steps {count}, loss {loss:.4f}, epsilon {eps:.4f} at delta "
            f"{delta:g} (sigma {sigma:.4f}, balls-in-bins)")

  for batch in sampler:
    if batch.epoch != epoch:
      record(epoch)
      epoch = batch.epoch
    step(model, optimizer, jnp.asarray(batch.indices), jnp.asarray(batch.mask))
  record(epoch)
  return history


if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
  ap.add_argument("--num-epochs", type=int, default=3)
  ap.add_argument("--epsilon", type=float, default=4.0)
  args = ap.parse_args()
  main(num_epochs=args.num_epochs, epsilon=args.epsilon)
