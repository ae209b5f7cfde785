"""The lower convex hull (jaxacct._core.hull): the plain monotone chain's indices, run fast.

Source of truth: the plain chain written out here (every point tested, the same
float64 operations), compared with ``==``; the hull's value at a point, exactly,
in rationals (``fractions.Fraction``). The from_profile check holds the pairs it
builds bit for bit equal with the shortcut on and off (the README's truncated run).
"""

from fractions import Fraction

import numpy as np
import pytest

from jaxacct._core import hull


def plain_chain(x, y):
  """Andrew's monotone chain, lower half: pop while cross <= 0 (Python floats)."""
  x, y = np.asarray(x, np.float64).tolist(), np.asarray(y, np.float64).tolist()
  idx = []
  for i in range(len(x)):
    while len(idx) >= 2:
      a, b = idx[-2], idx[-1]
      if (x[b] - x[a]) * (y[i] - y[a]) - (y[b] - y[a]) * (x[i] - x[a]) <= 0:
        idx.pop()
      else:
        break
    idx.append(i)
  return np.asarray(idx, int)


def _cases(seed, count):
  rng = np.random.default_rng(seed)
  for t in range(count):
    n = int(rng.integers(0, 50))
    kind = t % 7
    if kind == 0:      # noise
      x, y = np.sort(rng.random(n)), rng.random(n)
    elif kind == 1:    # integer grid: ties in x, collinear triples, flat runs
      x, y = np.sort(rng.integers(0, 8, n).astype(float)), rng.integers(0, 4, n).astype(float)
    elif kind == 2:    # convex with ulp-size bumps
      x = np.sort(rng.random(n))
      y = (x - 0.5) ** 2 + rng.integers(0, 3, n) * 1e-17
    elif kind == 3:    # the staircase 1 - x of tiny x (the profile's add side)
      x = np.sort(rng.random(n) * 1e-15)
      y = 1.0 - x
    elif kind == 4:    # a non-increasing step function (flat runs, a flat tail)
      x = np.sort(rng.random(n))
      y = np.minimum.accumulate(np.round(rng.random(n) * 3) / 3) if n else np.zeros(0)
    elif kind == 5:    # runs of equal y that rise and fall
      x = np.sort(rng.random(n))
      y = np.repeat(rng.random(n // 4 + 1), 4)[:n]
    else:              # non-finite values
      x = np.sort(np.concatenate([rng.random(n), [np.inf] * (t % 2)]))
      y = np.concatenate([rng.integers(0, 3, n).astype(float), [0.0] * (t % 2)])
      if n and t % 3 == 0:
        y[rng.integers(0, n)] = np.nan
      if n and t % 5 == 0:
        y[rng.integers(0, n)] = np.inf
    yield x, y


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_indices_are_the_plain_chains(seed):
  with np.errstate(invalid="ignore"):
    for x, y in _cases(seed, 3000):
      np.testing.assert_array_equal(hull.lower_hull_indices(x, y), plain_chain(x, y))


def test_indices_on_profile_shapes():
  """The shapes from_profile hands it: a convex curve (one run, no pop), a convex
  head with a long flat tail, and 1 - x with its float staircase near x = 0."""
  g = np.exp(np.arange(1, 200_000) * 1e-4)
  shapes = [(g, 1.0 / g), (g, np.maximum(0.3 - 1e-6 * g, 0.0)),
            (np.concatenate([[0.0], 1.0 / g[::-1]]), np.concatenate([[1.0], 1.0 - 1.0 / g[::-1]]))]
  for x, y in shapes:
    got = hull.lower_hull_indices(x, y)
    np.testing.assert_array_equal(got, plain_chain(x, y))
  assert got.size < g.size // 10           # the staircase: most points popped


def _exact_hull_at(x, y, at):
  """The lower convex hull at ``at``: the least chord over it (rationals)."""
  fx, fy, fa = [Fraction(float(v)) for v in x], [Fraction(float(v)) for v in y], Fraction(at)
  best = None
  for i in range(len(fx)):
    for j in range(len(fx)):
      if fx[i] < fa <= fx[j] or (fx[i] == fa == fx[j]):
        v = fy[j] if fx[i] == fx[j] else fy[i] + (fy[j] - fy[i]) * (fa - fx[i]) / (fx[j] - fx[i])
        best = v if best is None else min(best, v)
  return best


def test_certified_at_least_never_claims_above_the_exact_hull():
  rng = np.random.default_rng(7)
  claims = 0
  for t in range(400):
    n = int(rng.integers(3, 14))
    x = np.sort(np.concatenate([rng.random(n // 2), 1.0 + rng.random(n - n // 2) * 3.0]))
    y = 0.1 + (x - 1.0) ** 2 * rng.random() + rng.random(n) * (1e-16 if t % 2 else 1e-3)
    exact = _exact_hull_at(x, y, 1.0)
    for level in (float(exact) - 1e-12, float(exact) - 1e-16, float(exact), float(exact) + 1e-16):
      if hull.certified_at_least(x, y, 1.0, level):
        claims += 1
        assert exact >= Fraction(level), (x, y, level)
  assert claims > 100                      # it certifies where it can (not vacuous)


def test_certified_at_least_says_nothing_without_points_on_both_sides():
  x = np.array([1.0, 2.0, 3.0])
  assert not hull.certified_at_least(x, 1.0 / x, 1.0, 0.0)
  assert not hull.certified_at_least(x, 1.0 / x, 0.5, 0.0)
  assert not hull.certified_at_least(np.array([0.5, 0.5]), np.array([1.0, 1.0]), 1.0, 0.0)


def test_from_profile_pairs_are_the_same_with_and_without_the_shortcut(monkeypatch):
  """The README's truncated run (N = 60,000, q = 256 / N, cap 300) at sigma 1, 0.52, 0.1:
  the worse-of-two-neighbours pair, built with the hull's value at gamma = 1 skipped
  where it cannot change the total variation, equals the one built with it."""
  from jaxacct.accounting import mixtures
  real, taken = hull.certified_at_least, []

  def counted(*a):
    taken.append(real(*a))
    return taken[-1]

  for sigma, step in ((1.0, 1e-4), (0.52, 1e-4), (0.1, 1e-3)):
    kw = dict(n=60_000, q=256 / 60_000, b=300, sigma=sigma, step=step)
    monkeypatch.setattr(hull, "certified_at_least", lambda *a: False)
    off = mixtures.truncated_poisson_gaussian(**kw)
    monkeypatch.setattr(hull, "certified_at_least", counted)
    on = mixtures.truncated_poisson_gaussian(**kw)
    for a, b in ((off.remove, on.remove), (off.add, on.add)):
      np.testing.assert_array_equal(np.asarray(a.probs), np.asarray(b.probs))
      assert (a.offset, a.step, a.inf_mass) == (b.offset, b.step, b.inf_mass)
  assert taken                             # the shortcut was asked at each
  assert sum(taken) >= 2                   # and taken (not vacuous)
