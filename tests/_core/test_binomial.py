"""Binomial tails (jaxacct._core.binomial): on the host, bit for bit scipy.stats.binom's.

The truncated Poisson pair's truncation probabilities are these tails on the host
(so a truncated question does not import scipy.stats). Source of truth:
scipy.stats.binom.sf / cdf, live, compared with ``==``.
"""

import jax
import numpy as np
import pytest
from scipy import special, stats

from jaxacct._core import binomial

# (k, n, q): P(Bin(n, q) > k); the README run's tails (N = 60,000, q = 256/N, cap 300)
# and edges: k < 0, k >= n, n = 0, q near 0 and 1
CASES = [(299, 59_999, 256 / 60_000), (300, 60_000, 256 / 60_000), (299, 60_000, 256 / 60_000),
         (0, 1, 0.5), (-1, 5, 0.3), (5, 5, 0.3), (7, 5, 0.3), (0, 0, 0.4), (3, 10, 1e-12),
         (3, 10, 1.0 - 1e-12), (18, 19, 0.9), (19, 20, 0.9), (10, 10**7, 1e-6),
         (4_900, 10**6, 5e-3), (1, 2, 1.0), (1, 2, 0.0)]


@pytest.mark.parametrize("k,n,q", CASES)
def test_host_tail_is_scipy_stats_bit_for_bit(k, n, q):
  got = float(binomial.binom_sf(k + 1, n, q, xp=np, betainc=special.betainc))
  assert got == float(stats.binom.sf(k, n, q))


def test_host_tail_random_cases_bit_for_bit():
  rng = np.random.default_rng(0)
  for _ in range(2_000):
    n = int(rng.integers(1, 10 ** int(rng.integers(1, 7))))
    k = int(rng.integers(-2, n + 2))
    q = float(10 ** rng.uniform(-8, 0))
    got = float(binomial.binom_sf(k + 1, n, q, xp=np, betainc=special.betainc))
    assert got == float(stats.binom.sf(k, n, q)), (k, n, q)


def test_jitted_tail_agrees_with_the_host():
  # jax's betainc differs from SciPy's in the last digits (float64 continued fraction)
  with jax.enable_x64(True):
    k = np.array([299.0, 0.0, 4.0, 9.0])
    n = np.array([59_999.0, 1.0, 10.0, 9.0])
    q = np.array([256 / 60_000, 0.5, 0.3, 0.2])
    got = np.asarray(jax.jit(binomial.binom_sf)(k + 1, n, q))
  want = stats.binom.sf(k, n, q)
  np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)


def test_host_law_is_scipy_stats_bit_for_bit():
  # the truncated instance lower's count law (pmf, cdf, sf) without scipy.stats:
  # random (k, n, q) and the support's edges, scalars and arrays, compared with ==
  pmf, cdf, sf = binomial.host_law()
  rng = np.random.default_rng(3)
  cases = [(k, n, q) for k, n, q in CASES if n >= 1 and 0.0 < q < 1.0]
  for _ in range(1_000):
    n = int(rng.integers(1, 10 ** int(rng.integers(1, 7))))
    cases.append((rng.integers(-2, n + 3, size=6), n, float(10 ** rng.uniform(-8, -1e-9))))
  for k, n, q in cases:
    for ours, theirs in ((pmf, stats.binom.pmf), (cdf, stats.binom.cdf), (sf, stats.binom.sf)):
      got, want = ours(k, n, q), theirs(k, n, q)
      assert np.shape(got) == np.shape(want)
      assert np.array_equal(got, want), (ours, k, n, q)
  # off the support: the values scipy.stats gives
  assert (pmf(-1, 5, 0.3), pmf(6, 5, 0.3), cdf(-1, 5, 0.3), cdf(5, 5, 0.3), sf(-1, 5, 0.3),
          sf(5, 5, 0.3)) == (0.0, 0.0, 0.0, 1.0, 1.0, 0.0)
