"""The tilted-FFT engine (jaxacct._core.tilted_fft) against direct references.

References: NumPy's direct convolution of non-negative arrays (every output a
sum of non-negative products: relative error <= n u per point, so it resolves
tail masses far below the FFT's absolute round-off) and scipy's binomial pmf.
"""

import math

import numpy as np
import pytest
from scipy import special, stats

from jaxacct._core import tilted_fft as tf
from jaxacct._core.namespace import host_call


def test_cpow_matches_integer_powers_and_zero_count():
  z = np.array([0.3 + 0.4j, -0.9 + 0.1j, 0.0 + 0.0j, 1.0 + 0.0j])
  for c in (0, 1, 2, 7, 100):
    got = tf.cpow(z, np.float64(c), np)
    want = z ** c
    # polar power: relative error ~ c u (module docstring); 0**0 = 1
    np.testing.assert_allclose(got, want, rtol=4e-16 * (c + 4), atol=1e-300)


def test_ipow_is_the_exact_power_within_its_bound_on_host_and_jitted():
  """Binary powering (the allocation composition's spectra): within
  (c - 1) sqrt(5) u (first order; a factor 2 of slack here) of the power in
  exact arithmetic (mpmath, 60 digits), on the host and under jit with a
  traced count; z**0 = 1, 0**c = 0."""
  import jax
  import jax.numpy as jnp
  import mpmath
  from jaxacct._core.namespace import HOST, JAX
  mpmath.mp.dps = 60
  rng = np.random.default_rng(1)
  z = rng.uniform(-1, 1, 64) + 1j * rng.uniform(-1, 1, 64)
  z = z / np.maximum(np.abs(z), 1.0)                       # |z| <= 1
  z = np.r_[z, 0.0, 1.0, -1.0, 1j]
  run = jax.jit(lambda z, c: tf.ipow(z, c, JAX))
  with jax.enable_x64(True):
    for c in (0, 1, 2, 3, 10, 37, 1000, (1 << 20) - 1):
      exact = np.array([complex(mpmath.mpc(x.real, x.imag) ** c) for x in z])
      bound = max(c - 1, 0) * math.sqrt(5) * np.finfo(np.float64).eps * 2
      for got in (tf.ipow(z, np.float64(c), HOST), np.asarray(run(jnp.asarray(z),
                                                                  jnp.float64(c)))):
        err = np.abs(got - exact)
        assert np.all(err <= bound * np.abs(exact) + 1e-300), (c, np.max(err / np.abs(exact)))
      if c == 0:
        np.testing.assert_array_equal(tf.ipow(z, 0.0, HOST), np.ones_like(z))


def test_wrap_and_ring_fold_mod_n():
  x = np.arange(1.0, 11.0)[None, :]
  np.testing.assert_array_equal(tf.wrap(x, 4, np)[0], [1 + 5 + 9, 2 + 6 + 10, 3 + 7, 4 + 8])
  np.testing.assert_array_equal(tf.wrap(x, 12, np)[0], np.r_[x[0], 0.0, 0.0])
  idx = np.array([-1, 0, 3, 4, 9])
  v = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])
  np.testing.assert_array_equal(host_call(tf.ring, idx, v, 4), [[2.0 + 4.0, 5.0, 0.0, 1.0 + 3.0]])


def test_convolve_powers_is_the_direct_convolution():
  rng = np.random.default_rng(0)
  a, b = rng.random(9), rng.random(5)
  a, b = a / a.sum(), b / b.sum()
  want = np.convolve(np.convolve(np.convolve(a, a), a), b)      # a^3 * b: 29 points
  n = 32
  got = tf.convolve_powers([tf.wrap(a[None], n, np), tf.wrap(b[None], n, np)],
                           [np.float64(3.0), np.float64(1.0)], n, np)[0]
  # FFT round-off: absolute, <= the engine's certified bound (c = 4, n = 32)
  bound = math.exp(tf.log_fft_bound(4.0, n, np))
  assert np.max(np.abs(got[:want.size] - want)) <= bound
  assert np.max(np.abs(got[want.size:])) <= bound


def test_lines_min_is_the_minimum_over_lines():
  rng = np.random.default_rng(1)
  mu = np.sort(rng.normal(size=40)) * 10
  b = rng.normal(size=(3, 40)) * 50
  x = np.linspace(-30, 30, 501)
  got = host_call(tf.lines_min, b, mu, x)
  want = np.min(b[:, None, :] + mu[None, None, :] * x[None, :, None], axis=2)
  np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("lam", [-50.0, -1.0, 0.0, 0.5, 30.0, 1e4])
def test_log_mgf_lattice_is_the_log_sum_exp(lam):
  rng = np.random.default_rng(2)
  p = rng.random(700)
  p[:13] = 0.0
  p[-40:] = 0.0
  p /= p.sum()
  step, ref = 1e-2, 500
  got = host_call(tf.log_mgf_lattice, p, step, np.array([lam]), ref)[0]
  j = np.arange(p.size)
  pos = p > 0
  want = special.logsumexp(np.log(p[pos]) + lam * (j[pos] - ref) * step)
  assert got == pytest.approx(want, rel=1e-13, abs=1e-12)


@pytest.mark.parametrize("lams", [[0.5, 30.0, 1e4], [-50.0, -1.0], [-50.0, 0.0, 30.0]])
def test_log_mgf_lattice_batches_of_one_sign_and_both(lams):
  # a batch of orders of one sign reads one side of the lattice only (the
  # host skips the other); each entry is still the log-sum-exp
  rng = np.random.default_rng(3)
  p = rng.random(900)
  p[:21] = 0.0
  p[-9:] = 0.0
  p /= p.sum()
  step, ref = 1e-2, 450
  got = host_call(tf.log_mgf_lattice, p, step, np.array(lams), ref)
  j = np.arange(p.size)
  pos = p > 0
  want = [special.logsumexp(np.log(p[pos]) + lam * (j[pos] - ref) * step) for lam in lams]
  np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-12)


def test_compose_atoms_binomial_tails_within_certified_error():
  # Bernoulli(0.3) composed 200 times is Binomial(200, 0.3): pmf from 1 down
  # to 2.7e-105 (k = 200). The tilts reach both tails; every point's value is
  # within its certified error bound e of the exact pmf, and that bound is
  # relative where the tilts reach (a plain FFT: 1e-16 absolute only).
  p, c, n, h = 0.3, 200, 256, 0.1
  blocks = [(np.array([0, 1], np.int64), np.log(np.array([1 - p, p])))]
  muk = np.array([0.0, -28.0, -15.0, 8.5, 20.0, 38.0, 60.0])
  mu = np.unique(np.concatenate([np.sinh(np.linspace(-math.asinh(1e4), math.asinh(1e4), 383)),
                                 [0.0, 1.0]]))
  val, err, err_fft, _ = host_call(tf.compose_atoms, blocks, [np.float64(c)], h, np.int64(0), n,
                                   muk, np.float64(c), mu)
  k = np.arange(n)
  want = np.where(k <= c, stats.binom.pmf(np.minimum(k, c), c, p), 0.0)
  assert np.all(np.abs(val - want) <= err)
  assert np.all(err_fft <= err)
  # measured: max relative error 9.2e-12 (k = 176) and max relative bound 6.4e-7
  assert np.max(np.abs(val[:c + 1] / want[:c + 1] - 1.0)) < 1e-10
  assert np.max(err[:c + 1] / want[:c + 1]) < 1e-5
