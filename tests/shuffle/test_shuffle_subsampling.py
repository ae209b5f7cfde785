"""Shuffling m of n users sampled without replacement (jaxacct.shuffle.subsampled_*).

Oracle: exact enumeration of the shuffled-and-subsampled binary randomized
response (all datasets up to symmetry, all m-subsets, both directions).
"""

import itertools
import math

import numpy as np
import pytest
from jaxacct import shuffle as sh



def _rr_count_pmf(bits, eps0):
  """Law of the number of 1-reports of binary RR applied to ``bits``."""
  p1 = math.exp(eps0) / (math.exp(eps0) + 1.0)
  pmf = np.array([1.0])
  for b in bits:
    q = p1 if b else 1.0 - p1
    pmf = np.convolve(pmf, [1.0 - q, q])
  return pmf


def _subsampled_law(data, m, eps0):
  n = len(data)
  out = np.zeros(m + 1)
  subsets = list(itertools.combinations(range(n), m))
  for s in subsets:
    out += _rr_count_pmf([data[i] for i in s], eps0)
  return out / len(subsets)


def _exact_delta(n, m, eps0, eps):
  """max over datasets (user 0 flips) and both directions of H_{e^eps}."""
  best = 0.0
  for ones in range(n):  # number of 1s among users 1..n-1
    rest = [1] * ones + [0] * (n - 1 - ones)
    p = _subsampled_law([1] + rest, m, eps0)
    q = _subsampled_law([0] + rest, m, eps0)
    for a, b in ((p, q), (q, p)):
      best = max(best, float(np.sum(np.maximum(a - math.exp(eps) * b, 0.0))))
  return best


def test_amplify_formula_and_errors():
  r = sh.amplify_epsilon_delta(1.0, 1e-6, 0.1)
  eps, dl = r.epsilon, r.delta
  assert eps == pytest.approx(math.log1p(0.1 * math.expm1(1.0)), rel=1e-15)
  assert dl == pytest.approx(1e-7, rel=1e-15)
  # huge eps: no overflow, -> eps + log(rate)
  big = sh.amplify_epsilon_delta(1000.0, 0.0, 0.5).epsilon
  assert big == pytest.approx(1000.0 + math.log(0.5), rel=1e-15)
  with pytest.raises(ValueError, match="rate"):
    sh.amplify_epsilon_delta(1.0, 1e-6, 0.0)
  with pytest.raises(ValueError, match="epsilon"):
    sh.amplify_epsilon_delta(-1.0, 1e-6, 0.5)
  with pytest.raises(ValueError, match="m must be"):
    sh.subsampled_epsilon(n=5, m=6, eps0=1.0, delta=1e-6)
  with pytest.raises(ValueError, match="delta \\* n / m"):
    sh.subsampled_epsilon(n=100, m=1, eps0=1.0, delta=0.02)


@pytest.mark.parametrize("n,m,eps0", [(6, 3, 1.0), (7, 5, 2.0), (5, 5, 0.5)])
def test_upper_bound_vs_exact_enumeration(n, m, eps0):
  """Every amplified upper bound >= the exact subsampled-shuffled profile."""
  for eps in (0.05, 0.3, 0.8):
    truth = _exact_delta(n, m, eps0, eps)
    for rnd in ("generic", "binary_rr"):
      got = sh.subsampled_delta(n=n, m=m, eps0=eps0, epsilon=eps,
                                 randomizer=rnd).delta
      assert got >= truth - 1e-12, (n, m, eps0, eps, rnd, got, truth)
  # with the exact inner profile (binary RR, n = m small) and m = n the
  # amplification is the identity
  if m == n:
    for eps in (0.05, 0.3):
      got = sh.subsampled_delta(n=n, m=m, eps0=eps0, epsilon=eps,
                                 randomizer="binary_rr").delta
      assert got == pytest.approx(_exact_delta(n, m, eps0, eps), abs=1e-10)


def test_epsilon_consistent_with_delta():
  r = sh.subsampled_epsilon(n=10_000, m=1_000, eps0=1.0, delta=1e-7)
  assert r.bound == "upper" and r.method.startswith("subsampled:")
  d = sh.subsampled_delta(n=10_000, m=1_000, eps0=1.0, epsilon=r.epsilon)
  assert d.delta <= 1e-7 * (1 + 1e-6)
  # subsampling at 10% beats shuffling the 1,000 sampled users alone
  from jaxacct import shuffle
  alone = shuffle.epsilon(n=1_000, eps0=1.0, delta=1e-7).epsilon
  assert r.epsilon < alone
