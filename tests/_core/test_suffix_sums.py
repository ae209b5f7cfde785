"""Loopless suffix sums (jaxacct._core.suffix_sums) of the PLD query's tables on
the accelerator layout: against exact sums (math.fsum over every
term), under jit and vmap as the door's blocks run them, and with no loop left
in the compiled program (the scans they replace ran n/256 trips)."""

import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxacct._core import suffix_sums

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import hlo_loops  # noqa: E402


def _exact(v, r, ks):
  """sum_{j > k} r^(j-k-1) v_j by math.fsum, at the indices ks."""
  n = len(v)
  return np.array([math.fsum(v[k + 1:] * r ** np.arange(n - k - 1.0)) for k in ks])


@pytest.mark.parametrize("n,log_r", [(200, -0.01), (3000, -2.56e-2), (70_000, -2.56e-3)])
def test_later_sum_exact_vmapped(n, log_r):
  """One, two and three levels (70,000 > 256^2): 1e-13 relative of fsum at
  sampled indices, two lanes of different r under jit and vmap; no while loop."""
  rng = np.random.default_rng(n)
  v = rng.uniform(size=(2, n)) * (rng.uniform(size=(2, n)) > 0.05)
  lr = np.array([log_r, 3 * log_r])
  ks = np.unique(np.r_[0, 1, 255, 256, 257, n // 2, n - 300, n - 2, n - 1])
  ks = ks[(ks >= 0) & (ks < n)]
  with jax.enable_x64(True):
    f = jax.jit(jax.vmap(lambda a, b: suffix_sums.later_sum(a, b, jnp)))
    args = (jnp.asarray(v), jnp.asarray(lr, jnp.float64))
    got = np.asarray(f(*args))
    text = f.lower(*args).compile().as_text()
  assert hlo_loops.while_loops(text) == []
  for lane in range(2):
    ex = _exact(v[lane], math.exp(lr[lane]), ks)
    np.testing.assert_allclose(got[lane, ks], ex, rtol=1e-13, atol=1e-300)
  assert np.all(got[:, -1] == 0.0)


def test_later_total_exact_vmapped():
  """r = 1 at 96 blocks and 2 lanes, the door's shape where the product form
  ran wrong (the last entry came out as the whole sum): exact to 1e-14 and
  the last entry 0."""
  rng = np.random.default_rng(1)
  v = rng.uniform(size=(2, 96))
  with jax.enable_x64(True):
    got = np.asarray(jax.jit(jax.vmap(lambda a: suffix_sums.later_total(a, jnp)))(
        jnp.asarray(v)))
  ex = np.array([[math.fsum(row[k + 1:]) for k in range(96)] for row in v])
  np.testing.assert_allclose(got, ex, rtol=1e-14, atol=0)
  assert np.all(got[:, -1] == 0.0)
