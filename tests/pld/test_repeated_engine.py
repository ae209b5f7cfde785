"""The repeated-event engine (``jaxacct.pld.pair_epsilons``, the accountant's
general path) at the README's Poisson run, against an independent FFT composition.

Oracle: one 2^20-point window (ten times the engine's) centred on the tilted
mean, at two tilts of our choosing, the powers taken in polar form, untilted
on the points above loss 0.5 and queried by ``jaxacct.pld.epsilon``, the larger of
the two directions. The
engine picks its own window, tilt and FFT length per block of 32 counts (and
a refined fold bound since 2026-11-27, which took the lead direction here from
131,072 to 98,304 points). The engine rounds its epsilons up by 1e-12
relative, over its round-off (measured up to 4.4e-13 before that rounding):
it must not fall below the oracle beyond the oracle's own round-off (its two
tilts agree to 2e-13), nor exceed it by more than 3e-12.
"""

import math

import numpy as np
import pytest

from jaxacct import pld as jpld
from jaxacct.accounting import PLDAccountant, events as ev


def _long_window_epsilon(p, n, delta, lam, length=1 << 20):
  """Epsilon at ``delta`` of n copies of the direction ``p``, composed as above."""
  probs, h = np.asarray(p.probs, np.float64), float(p.step)
  j = np.arange(probs.size) * h
  with np.errstate(divide="ignore"):
    logt = np.log(probs) + lam * j
  log_m = float(np.logaddexp.reduce(logt[np.isfinite(logt)]))
  t = np.exp(logt - log_m)
  mean = float(np.sum(t * j)) * n                       # tilted mean (relative loss)
  z = np.fft.rfft(t, length)
  mag = np.abs(z)
  zn = np.where(mag > 0, np.exp(n * np.log(np.where(mag > 0, mag, 1.0)))
                * np.exp(1j * (n * np.angle(z))), 0.0)
  y = np.fft.irfft(zn, length)
  k0 = int(math.floor(mean / h)) - length // 2           # the window [k0, k0 + length)
  read = max(int((0.5 - n * int(p.offset) * h) / h), k0)   # relative index of loss 0.5
  k = np.arange(read, k0 + length)
  masses = np.maximum(y[k % length], 0.0) * np.exp(n * log_m - lam * k * h)
  inf = -math.expm1(n * math.log1p(-float(p.inf_mass)))
  return float(jpld.epsilon(jpld.PLD(masses, n * int(p.offset) + read, h, inf, True), delta))


@pytest.mark.parametrize("n", [1000, 2335])
def test_poisson_epsilon_is_a_long_window_fft(x64, n):
  event = ev.PoissonSampledDpEvent(256 / 60000, ev.GaussianDpEvent(1.0))
  acc = PLDAccountant(None, 1e-4, shortcuts=False)    # the general path: the engine
  got = acc.copy().compose(event, n).get_epsilon(1e-5)
  pair = acc.copy().compose(event).composed_plds()[0]
  for lam in (3.0, 7.5):
    ref = max(_long_window_epsilon(p, n, 1e-5, lam) for p in (pair.remove, pair.add))
    # never below the oracle (its round-off: 2e-13), within the rounding up (1e-12)
    assert ref * (1 - 2e-13) <= got <= ref * (1 + 3e-12), (got, ref)


def _gaussian_epsilon(mu, delta):
  """Exact epsilon of the Gaussian mechanism of sensitivity/noise ``mu`` (Balle and
  Wang 2018, Theorem 8), solved in log space (``log_ndtr``) by bisection."""
  from scipy import optimize, special
  def gap(e):
    a, b = special.log_ndtr(-e / mu + mu / 2), special.log_ndtr(-e / mu - mu / 2)
    return a + math.log1p(-math.exp(e + b - a)) - math.log(delta)
  return optimize.brentq(gap, mu * mu / 2, 100 * mu * mu + 100, xtol=1e-12, rtol=1e-15)


def _gaussian_pair(sigma, q, step):
  return jpld.PairPLD(*(jpld.poisson_gaussian(sigma, q, direction=d, step=step)
                        for d in ("remove", "add")))


@pytest.mark.parametrize("sigma, steps, delta, step", [
    (0.3, 300, 1e-12, 1e-3),      # the block's floor read from the window's start: > 700 nats
    (0.05, 60, 1e-5, 1e-2),       # epsilon grows 210 nats a step: 6,700 nats across its block
])
def test_epsilons_far_above_the_window_are_finite_and_tight(x64, sigma, steps, delta, step):
  # q = 1: the composed Gaussian, exact (mu = sqrt(T) / sigma). An epsilon over 700 nats
  # above the first point read overflows the query's e^loss: it is read again from below
  got = float(jpld.pair_epsilons(_gaussian_pair(sigma, 1.0, step), [steps], delta)[0])
  ref = _gaussian_epsilon(math.sqrt(steps) / sigma, delta)
  assert ref > 700.0
  # an upper bound, within the grid's discretisation (h = step: <= 1e-6 relative here)
  assert ref <= got <= ref * (1 + 1e-6), (got, ref)


def test_an_epsilon_read_alone_is_the_same_in_a_table(x64):
  # the count read alone from its own floor: the same number asked alone or with its block
  pair = _gaussian_pair(0.05, 1.0, 1e-2)
  alone = jpld.pair_epsilons(pair, [60], 1e-5)
  table = jpld.pair_epsilons(pair, np.arange(32, 64), 1e-5)
  assert np.all(np.isfinite(table))
  assert alone[0] == table[28]
  assert np.all(np.diff(table) > 0)


def test_a_column_row_below_the_first_is_read_again(x64):
  # a column's read floor is its first row's epsilon: a later, smaller row is read again
  # from its window's start (it raised TypeError indexing the rows' factors)
  pair = _gaussian_pair(1.0, 256 / 60000, 1e-4)
  weak = _gaussian_pair(2.0, 0.01, 1e-4)
  col = jpld.pair_column_epsilons(pair, 100, [pair, weak], 1e-5)
  alone = [float(jpld.pair_epsilons(pair, [100], 1e-5, factor=f)[0]) for f in (pair, weak)]
  assert col[1] < col[0]
  # the same compositions (shared tilt and length move round-off only)
  np.testing.assert_allclose(col, alone, rtol=1e-10)


def test_a_symmetric_pair_is_read_once_and_as_two_directions(x64):
  """A pair whose two directions are one PLD (a fixed-size step's, symmetrised) is
  read in one direction: the same numbers, bit for bit, as the two-direction path
  on an equal pair of two objects (counts past the 64 at which that path reads its
  second direction only at marks), with and without a factor."""
  p = jpld.poisson_gaussian(0.5, 0.05, direction="remove", step=1e-3, pessimistic=True)
  twin = jpld.PLD(np.array(p.probs), int(p.offset), float(p.step), float(p.inf_mass), True)
  counts = np.arange(1, 151)
  one = jpld.pair_epsilons(jpld.PairPLD(p, p), counts, 1e-6)
  two = jpld.pair_epsilons(jpld.PairPLD(p, twin), counts, 1e-6)
  np.testing.assert_array_equal(one, two)
  assert np.all(np.diff(one) >= 0) and one[0] > 0
  f = jpld.poisson_gaussian(1.0, 0.05, direction="remove", step=1e-3, pessimistic=True)
  ftwin = jpld.PLD(np.array(f.probs), int(f.offset), float(f.step), float(f.inf_mass), True)
  np.testing.assert_array_equal(
      jpld.pair_epsilons(jpld.PairPLD(p, p), counts[:40], 1e-6, factor=jpld.PairPLD(f, f)),
      jpld.pair_epsilons(jpld.PairPLD(p, twin), counts[:40], 1e-6, factor=jpld.PairPLD(f, ftwin)))
