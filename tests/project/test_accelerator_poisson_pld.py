"""The Poisson PLD door's program lengths on the accelerator layout
(jaxacct._core.window_cells): one query program per window whatever the
kept length, grid buffers every three octaves, and (the module's other
setting) windows rounded every three octaves into lengths they divide; a
window composed inside the longer ring
(decimated_powers) against exact circular convolutions and the window-length
FFT, under jit and vmap with a different window per lane. The door's values
through these programs: test_accelerator_poisson (layouts agree; slow:
pinned values)."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import tilted_fft
from jaxacct._core import window_cells as wc


def _fast_lens(lo, hi):
  """Every ``2^a`` and ``3 * 2^a`` in [lo, hi] (the window and grid lengths)."""
  out = {n for a in range(40) for n in (1 << a, 3 << a) if lo <= n <= hi}
  return np.array(sorted(out), np.int64)


def _all_windows():
  """Every window 2..2^25 (the engine's MAX_WINDOW) with every power-of-two
  kept length up to twice it; the mask of a sweep's: windows 2^12..2^21,
  kept lengths 2^10 up to the window (as 1,000 sigmas in [0.3, 30] at q 0.01
  and 1e3 steps give)."""
  w, k = [], []
  for n in _fast_lens(2, 1 << 25):
    kl = 1 << np.arange(0, int(np.log2(2 * n)) + 1)
    w.append(np.full(kl.size, n))
    k.append(kl)
  w, k = np.concatenate(w), np.concatenate(k)
  return w, k, (w >= 1 << 12) & (w <= 1 << 21) & (k <= w) & (k >= 1 << 10)


def _check_lengths(w, k, cells, kept):
  assert np.all(cells % w == 0)
  assert np.all(cells <= np.maximum(8 * w, 3 << 12))
  assert np.all((kept & (kept - 1)) == 0)
  assert np.all((kept >= k) & (kept <= np.maximum(cells, k)))


def test_window_cells_keep_windows_and_fold_kept_lengths():
  """The default: each program is one window's (a longer FFT moved an
  epsilon by 1.8e-11, see the next test), for every kept length up to it: a
  sweep's 138 (kept length, window) programs are 19."""
  w, k, sweep = _all_windows()
  cells, kept = wc.window_cells(w, k)
  _check_lengths(w, k, cells, kept)
  assert np.array_equal(cells, w)
  assert len(set(zip(w[sweep], k[sweep]))) == 138
  assert len(set(zip(cells[sweep], kept[sweep]))) == 19


def test_window_cells_rounded_every_three_octaves(monkeypatch):
  """Windows rounded every 3 octaves of each form from 2^12 (the module's
  other setting; each window divides its cells, at most 8x it): the sweep
  takes 10 programs, any windows at all at most 36."""
  monkeypatch.setattr(wc, "CELL_OCTAVES", 3)
  monkeypatch.setattr(wc, "CELL_FLOOR", 12)
  w, k, sweep = _all_windows()
  cells, kept = wc.window_cells(w, k)
  _check_lengths(w, k, cells, kept)
  assert len(set(zip(cells[sweep], kept[sweep]))) == 10
  assert len(set(zip(cells, kept))) <= 36


def test_grid_cells_few():
  """Grid buffers: at least the grid, under 8x it (or 2^12), 4 lengths for
  grids of 2^10..2^19 points (the sweep above; one per power of two before: 10)."""
  size = _fast_lens(2, 1 << 23)
  buf = wc.grid_cells(size)
  assert np.all(buf >= size) and np.all(buf < np.maximum(8 * size, 1 << 13))
  assert np.all((buf & (buf - 1)) == 0)
  sweep = (size >= 1 << 10) & (size <= 1 << 19)
  assert len(set(buf[sweep].tolist())) == 4


def _circular_power(p, c, n):
  """Exact-order oracle: ``p`` (any length) wrapped onto ``n`` cells and
  convolved with itself ``c`` times circularly, by direct sums (math.fsum)."""
  ring = np.zeros(n)
  np.add.at(ring, np.arange(p.size) % n, p)
  out = ring.copy()
  for _ in range(c - 1):
    nxt = np.array([math.fsum(out * ring[(i - np.arange(n)) % n]) for i in range(n)])
    out = nxt
  return out


def test_decimated_powers_match_window_ffts_under_jit_vmap():
  """Two programs (cells 3 * 2^9 and 2^9), two lanes each with their own
  window (r = 8 and 2; 4 and 1), one lane's input longer than its window
  (it wraps): the first ``period`` cells against the window-length FFT
  (tilted_fft.convolve_powers, NumPy) and the repeats beyond them equal to
  them, to 5e-16 x count of the peak (the FFTs' round-off scale,
  tilted_fft.log_fft_estimate: measured <= 1.4e-16 x count), and a 3-fold
  count against exact circular sums (math.fsum) to as much. The per-lane window is traced, as in the door's blocks."""
  rng = np.random.default_rng(7)
  for cells, periods in ((3 << 9, (3 << 6, 3 << 8)), (1 << 9, (1 << 7, 1 << 9))):
    lens = (periods[0] + 40, 100)           # lane 0 wraps onto its window
    x = np.zeros((2, cells))
    for lane, n in enumerate(lens):
      v = rng.uniform(size=n) * (rng.uniform(size=n) > 0.3)
      x[lane, :n] = v / v.sum()
    for count in (3.0, 37.0):
      with jax.enable_x64(True):
        f = jax.jit(jax.vmap(lambda r, per, c: wc.decimated_powers(
            (r[None, :],), (c,), cells, per, jnp)[0]))
        got = np.asarray(f(jnp.asarray(x), jnp.asarray(periods, jnp.int64),
                           jnp.full(2, count)))
      for lane, per in enumerate(periods):
        ring = tilted_fft.wrap(x[lane:lane + 1], per, np)
        ref = tilted_fft.convolve_powers((ring,), (count,), per, np)[0]
        tol = 5e-16 * count * ref.max()
        np.testing.assert_allclose(got[lane, :per], ref, rtol=0, atol=tol)
        reps = got[lane].reshape(-1, per)
        np.testing.assert_allclose(reps, np.broadcast_to(reps[0], reps.shape), rtol=0,
                                   atol=tol)
        if count == 3.0:
          exact = _circular_power(x[lane, :lens[lane]], 3, per)
          np.testing.assert_allclose(got[lane, :per], exact, rtol=0, atol=tol)
