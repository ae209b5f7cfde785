"""Allocation PLD: jitted epsilon sweeps with the default ``composition_size=None``.

A sweep (more than ``pld.HOST_LANES`` lanes) picks its composition lattice
from the ladder 2**11 .. 2**15 by k E and the window tail
(``pld.sweep_size``), and a coarser Chernoff grid
(issue 28 item 5). Both sides stay certified; the values move by at most
~1e-4 relative against the host settings (2**15 points, 4 tilts; measured
<= 3.5e-5 upper, 1.9e-5 lower on 128 sigmas in [0.5, 5] at t = 234, E = 10,
and <= 1.9e-4 at E = 100 on the 2**14 bucket ... 2**12 measured, 2026-11-25).
Tolerances below: 3e-4 relative between the two settings (with margin), and
exact crossing of each side's certified lower by the other's upper.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import jaxacct
from jaxacct.allocation import pld
from support import COUNT_COMPILES

_GRID = dict(grid_size=256)


def test_sweep_size_ladder():
  """c = k E rounds and the window tail tau pick the power of two (tau = 1e-12:
  N >= 1024 sqrt(c)), clipped to [2**11, cap]."""
  tau = np.full(3, 1e-12)
  assert pld.sweep_size(np.ones(3), tau) == 1 << 11
  assert pld.sweep_size(np.full(3, 10.0), tau) == 1 << 12        # 1024 sqrt(10) = 3238
  assert pld.sweep_size(np.array([1.0, 10.0, 50.0]), tau) == 1 << 13   # the chunk's max
  assert pld.sweep_size(np.full(3, 100.0), tau) == 1 << 14
  assert pld.sweep_size(np.full(3, 1e5), tau) == 1 << 15
  assert pld.sweep_size(np.full(3, 1e5), tau, cap=1 << 12) == 1 << 12
  # a smaller tail (wider window) asks for more points
  assert pld.sweep_size(np.full(3, 10.0), np.full(3, 1e-30)) == 1 << 13


# (t, k, E, delta) per lane group: one round type, two round types, many epochs
# (100, 10, 4) (~40 s) under -m slow: two round types are covered by (101, 2, 3)
_SETTINGS = [(234, 1, 10, 1e-5), pytest.param(101, 2, 3, 1e-8, marks=pytest.mark.slow),
             pytest.param(100, 10, 4, 1e-6, marks=pytest.mark.slow), (57, 1, 40, 1e-5)]


@pytest.mark.parametrize("t,k,E,delta", _SETTINGS)
def test_sweep_brackets_and_crosses_the_host_settings(t, k, E, delta):
  """8 sigmas in [0.5, 5]: the sweep's upper is >= the host settings' certified
  lower and vice versa, brackets <= SWEEP_BRACKET, uppers within 3e-4."""
  s = np.geomspace(0.5, 5.0, 8)
  kw = dict(sigma=s, steps_per_epoch=t, num_selected=k, num_epochs=E, delta=delta, **_GRID)
  sw = pld.allocation_pld_epsilon(**kw)
  ref = pld.allocation_pld_epsilon(**kw, composition_size=pld.DEFAULT_COMPOSITION_SIZE)
  for d in ("remove", "add"):
    su, sl = sw.by_direction[d]
    ru, rl = ref.by_direction[d]
    assert np.all(np.isfinite(su)) and np.all(sl > 0)
    assert np.all(su >= rl) and np.all(ru >= sl) and np.all(sl <= su)
    np.testing.assert_allclose(su, ru, rtol=3e-4)
    np.testing.assert_allclose(sl, rl, rtol=3e-4)
  # bracket: within SWEEP_BRACKET, else the chunk ran again with the host settings
  assert np.all((sw.epsilon <= pld.SWEEP_BRACKET * sw.lower) | (sw.epsilon == ref.epsilon))


def test_sweep_brackets_the_exact_gaussian():
  """t = 1 (one Gaussian step per round), E = 6: the composition is the
  Gaussian with sigma / sqrt(6), whose epsilon is exact (jaxacct.mechanisms.Gaussian(...).epsilon)."""
  s = np.geomspace(0.5, 5.0, 8)
  r = pld.allocation_pld_epsilon(sigma=s, steps_per_epoch=1, num_epochs=6, delta=1e-6, **_GRID)
  exact = np.array([float(jaxacct.mechanisms.Gaussian(x / np.sqrt(6)).epsilon(1e-6).epsilon)
                    for x in s])
  assert np.all(r.lower <= exact * (1 + 1e-12)) and np.all(exact <= r.epsilon)
  np.testing.assert_allclose(r.epsilon, exact, rtol=2e-3)


@pytest.mark.parametrize("E, delta", [(6, 1e-12), pytest.param(1000, 1e-10,
                                                               marks=pytest.mark.slow)])
def test_sweep_brackets_the_exact_gaussian_at_extremes(E, delta):
  """t = 1, E rounds at sigma / sqrt(E) in [0.12, 20] (epsilon 0.27 .. 90),
  tiny delta; E = 1000 raises each spectrum to the 1000th power (binary
  powering, ``tilted_fft.ipow``). Reference: the exact Gaussian epsilon
  (``mechanisms.Gaussian``, Balle-Wang's profile). Measured: uppers 3.9e-4 ..
  8.2e-4 above, lowers 1.7e-4 .. 3.5e-4 below (256 knots, 2026-11-26)."""
  s = np.geomspace(0.3, 50.0, 8) * np.sqrt(E / 6.0)
  r = pld.allocation_pld_epsilon(sigma=s, steps_per_epoch=1, num_epochs=E, delta=delta, **_GRID)
  exact = np.array([float(jaxacct.mechanisms.Gaussian(x / np.sqrt(E)).epsilon(delta).epsilon)
                    for x in s])
  assert np.all(r.lower <= exact * (1 + 1e-12)) and np.all(exact <= r.epsilon)
  np.testing.assert_allclose(r.epsilon, exact, rtol=2e-3)


def test_wide_bracket_chunk_runs_the_host_settings():
  """sigma = 50, t = 1e6, E = 3, delta = 1e-15 (epsilon ~4e-4, tiny against the
  window): the ladder's lattice gives a 10 % wider bracket, so the chunk runs
  again with the host settings and matches them."""
  kw = dict(sigma=np.full(pld.HOST_LANES + 1, 50.0), steps_per_epoch=1_000_000, num_epochs=3,
            delta=1e-15, **_GRID)
  sw = pld.allocation_pld_epsilon(**kw)
  ref = pld.allocation_pld_epsilon(**kw, composition_size=pld.DEFAULT_COMPOSITION_SIZE)
  np.testing.assert_array_equal(sw.epsilon, ref.epsilon)
  np.testing.assert_array_equal(sw.lower, ref.lower)


class _Count:
  def __init__(self):
    self.n, self.on = 0, False
    jax.monitoring.register_event_duration_secs_listener(self._listen)

  def _listen(self, name, duration, **kw):
    if self.on and name == "/jax/core/compile/backend_compile_duration":
      self.n += 1


_COUNT = _Count()


def test_new_sigma_delta_in_bucket_compiles_nothing(monkeypatch):
  """A sweep with new sigmas, delta and E inside the same ladder bucket
  (k E = 10 -> 12, 2**12) compiles nothing."""
  monkeypatch.setenv("JAXACCT_COMPILATION_CACHE", "0")
  s = np.geomspace(0.8, 3.0, 8)
  a = pld.allocation_pld_epsilon(sigma=s, steps_per_epoch=234, num_epochs=10, delta=1e-5,
                                 **_GRID)
  _COUNT.n, _COUNT.on = 0, True
  try:
    b = pld.allocation_pld_epsilon(sigma=s * 1.01, steps_per_epoch=200, num_epochs=12,
                                   delta=2e-5, **_GRID)
  finally:
    _COUNT.on = False
  assert _COUNT.n == 0
  assert np.all(np.isfinite(b.epsilon)) and np.all(a.epsilon != b.epsilon)


def test_chunked_sweep_equals_its_chunks():
  """384 sigmas (padded to 512 lanes: four chunks of 128, the last three on
  one thread per CPU core) give bit for bit the values of three 128-lane calls
  (one chunk each, no threads): a lane's laws and query depend on its chunk
  only, and the chunks come back in order. E = 1 (single rounds: no rerun with
  the host settings), 64 knots: cheap laws, the order is what is tested."""
  s = np.geomspace(0.5, 5.0, 384)
  kw = dict(steps_per_epoch=1000, num_epochs=1, delta=1e-5, grid_size=64)
  whole = pld.allocation_pld_epsilon(sigma=s, **kw)
  parts = [pld.allocation_pld_epsilon(sigma=s[i:i + 128], **kw) for i in range(0, 384, 128)]
  for d in ("remove", "add"):
    for j in range(2):
      np.testing.assert_array_equal(whole.by_direction[d][j],
                                    np.concatenate([p.by_direction[d][j] for p in parts]))
  assert np.all(np.isfinite(whole.epsilon)) and np.all(whole.lower > 0)


_FRESH = COUNT_COMPILES + r"""
import numpy as np
from jaxacct.allocation import pld
r = pld.allocation_pld_epsilon(**json.loads(sys.argv[1]), sigma=np.geomspace(0.8, 3.0, 256))
print(json.dumps({"counts": counts, "epsilon": r.epsilon.tolist(), "lower": r.lower.tolist()}))
"""


def test_fresh_sweep_compiles_each_program_once():
  """A sweep in a fresh process (jaxacct's store off) compiles its law program
  and its one query program (one round type: the one-block composition) once
  each, the query's from the laws' shapes on the other core before any chunk
  runs it (``run_chunks``' prepares); a chunk that called a program the
  prepare had not stored would compile it again. Values: bit for bit those of
  the same sweep in this process."""
  # two chunks of 128; the default grid (at 256 knots some chunk's bracket is
  # over SWEEP_BRACKET and reruns with the host settings: a third program)
  kw = dict(steps_per_epoch=234, num_epochs=10, delta=1e-5)
  env = dict(os.environ, JAXACCT_COMPILATION_CACHE="0")
  out = subprocess.run([sys.executable, "-c", _FRESH, json.dumps(kw)], capture_output=True,
                       text=True, env=env, check=True)
  got = json.loads(out.stdout.strip().splitlines()[-1])
  assert got["counts"] == {"jit(steps_laws_batch)": 1, "jit(composed_batch)": 1}, got["counts"]
  here = pld.allocation_pld_epsilon(**kw, sigma=np.geomspace(0.8, 3.0, 256))
  np.testing.assert_array_equal(got["epsilon"], here.epsilon)
  np.testing.assert_array_equal(got["lower"], here.lower)
