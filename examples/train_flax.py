"""Train a small Flax MLP with DP-SGD and track epsilon with jaxacct.

Synthetic data (no downloads), CPU, seconds::

    python examples/train_flax.py --scheme allocation --epochs 5   # first run compiles ~1 min
    python examples/train_flax.py --scheme poisson --epochs 5

Batches are formed exactly as the accountant assumes:

* ``allocation`` (balls-in-bins): every epoch each example picks one of the
  ``t`` steps uniformly at random, independently;
* ``poisson``: every step each example joins with probability ``q``.

Each step computes per-example gradients for the whole (small) dataset and
multiplies them by the 0/1 batch mask, so the compiled step has one shape
and no example outside the batch influences it. The optimizer chain is
``differentially_private_aggregate`` (clip, sum, add N(0, (sigma C)^2)),
then the jaxacct tracker (right after the noise, so a budget stop keeps new
data out of everything downstream), then SGD. The noise multiplier comes
from ``jaxacct.tracking.calibrate_noise``.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax.training import train_state

from jaxacct import tracking


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


def main(scheme: str = "poisson", *, num_epochs: int = 5, n: int = 512,
         batch_size: int = 64, epsilon: float = 4.0, delta: float = 1e-5,
         max_epsilon=None, l2_norm_clip: float = 1.0, lr: float = 0.5,
         seed: int = 0, verbose: bool = True):
  """Trains; returns a list of dicts (epoch, step, eps, loss, exhausted)."""
  x, y = make_data(n, 16, seed)
  cal = tracking.calibrate_noise(scheme, dataset_size=n, batch_size=batch_size,
                                 num_epochs=num_epochs, epsilon=epsilon, delta=delta)
  sigma = cal.noise_multiplier
  steps_per_epoch = cal.num_steps // num_epochs
  tx = optax.chain(
      optax.contrib.differentially_private_aggregate(
          l2_norm_clip=l2_norm_clip, noise_multiplier=sigma,
          key=jax.random.key(seed)),
      tracking.track_privacy(cal.accountant, num_steps=cal.num_steps, delta=delta,
                             max_epsilon=max_epsilon),
      optax.scale(n / batch_size),   # dp_aggregate divides by n (mask width)
      optax.sgd(lr))
  model = MLP()
  params = model.init(jax.random.key(seed), x[:1])
  state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

  def loss_fn(p, xi, yi):
    return optax.sigmoid_binary_cross_entropy(model.apply(p, xi[None]), yi[None]).mean()

  @jax.jit
  def step(state, mask):
    grads = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))(state.params, x, y)
    grads = jax.tree.map(lambda g: g * mask.reshape((-1,) + (1,) * (g.ndim - 1)), grads)
    state = state.apply_gradients(grads=grads)
    loss = jax.vmap(loss_fn, in_axes=(None, 0, 0))(state.params, x, y).mean()
    return state, loss, tracking.privacy_spent(state.opt_state)[0]

  rng = np.random.default_rng(seed + 1)
  history = []
  for epoch in range(1, num_epochs + 1):
    if scheme == "allocation":
      slot = rng.integers(0, steps_per_epoch, size=n)   # balls-in-bins
      masks = [(slot == s).astype(np.float32) for s in range(steps_per_epoch)]
    else:
      q = batch_size / n
      masks = [(rng.random(n) < q).astype(np.float32) for _ in range(steps_per_epoch)]
    for m in masks:
      state, loss, eps = step(state, jnp.asarray(m))
    pts = optax.tree.get(state.opt_state, "PrivacyTrackerState")
    rec = dict(epoch=epoch, step=int(pts.count), eps=float(eps), loss=float(loss),
               exhausted=bool(pts.budget_exhausted))
    history.append(rec)
    if verbose:
      print(f"epoch {epoch}: steps {rec['step']}, loss {rec['loss']:.4f}, "
            f"epsilon {rec['eps']:.4f} at delta {delta:g} (sigma {sigma:.4f}, "
            f"{scheme}){' [budget exhausted]' if rec['exhausted'] else ''}")
  return history


if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--scheme", default="poisson", choices=["allocation", "poisson"])
  ap.add_argument("--epochs", type=int, default=5)
  ap.add_argument("--epsilon", type=float, default=4.0)
  ap.add_argument("--max-epsilon", type=float, default=None)
  args = ap.parse_args()
  main(args.scheme, num_epochs=args.epochs, epsilon=args.epsilon,
       max_epsilon=args.max_epsilon)
