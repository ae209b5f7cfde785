"""The batched calibrator and the sweep's lane padding on the accelerator layout.

``jaxacct.calibrate`` over many targets evaluates every target in one call of
the allocation PLD door per search round; on the accelerator layout that call
runs the sweep's chunk programs, whose lane count is the device's chunk for
every batch. Checked here: every round carries all the targets, the number of
rounds does not grow with the number of targets (a stand-in door: the
Gaussian-DP model's epsilon, no compute), every batch pads to a multiple of
the one chunk, and (slow) the calibrated values equal the CPU layout's.
"""

import numpy as np
import pytest
from scipy.stats import norm

import jaxacct
from jaxacct import calibrator
from jaxacct._core import batching
from jaxacct._core.results import EpsilonResult
from jaxacct.accounting.events import RandomAllocationDpEvent
from jaxacct import allocation
from jaxacct.allocation import pld

DELTA = 1e-5


def _event(s):
  return RandomAllocationDpEvent(noise_multiplier=s, steps_per_epoch=234, num_epochs=10)


def _calibrate(targets):
  return jaxacct.calibrate(_event, targets, DELTA, bracket=(0.3, 10.0), progress=False)


def _gdp_epsilon(mu, delta):
  """Epsilon of mu-GDP at delta (Dong-Roth-Su, arXiv:1905.02383v3, Cor. 2.13), by bisection."""
  lo, hi = np.zeros_like(mu), np.full_like(mu, 200.0)
  for _ in range(200):
    e = 0.5 * (lo + hi)
    d = norm.cdf(-e / mu + mu / 2) - np.exp(e) * norm.cdf(-e / mu - mu / 2)
    lo, hi = np.where(d > delta, e, lo), np.where(d > delta, hi, e)
  return hi


@pytest.mark.parametrize("targets", [16, 1000])
def test_every_round_carries_every_target(targets, monkeypatch):
  """One door call per round with all the targets (closed lanes ride along at
  their last point: one compiled shape), and at most 12 rounds for 16 or 1,000
  targets (the model search's 8 and the host search's closing steps)."""
  calls = []

  def stand_in(*, sigma, delta, steps_per_epoch, num_selected, num_epochs, **kw):
    calls.append(np.shape(sigma))
    mu = np.sqrt(num_epochs * np.expm1(1.0 / np.asarray(sigma) ** 2) / steps_per_epoch * num_selected)
    return EpsilonResult(epsilon=_gdp_epsilon(mu, delta), delta=delta, method="stand-in",
                         bound="upper")

  monkeypatch.setattr(pld, "allocation_pld_epsilon", stand_in)
  eps = np.geomspace(0.5, 8.0, targets)
  with jaxacct.set_layout("accelerator"):
    sig = _calibrate(eps)
  assert sig.shape == (targets,) and np.all(np.isfinite(sig))
  assert calls and set(calls) == {(targets,)} and len(calls) <= 12, calls


def test_accelerator_batches_pad_to_the_chunk():
  """The accelerator layout pads every batch (above the host's few lanes) to a
  multiple of the device's chunk (64 lanes on a CPU's fixed 4 GiB budget):
  one chunk program serves 5 or 100 lanes. The CPU layout pads to the next
  power of two (its chunks are 128 lanes, run by one core each)."""
  with jaxacct.set_layout("accelerator"):
    chunk = batching.lanes_for_memory(16 << 20)   # the sweep's lane size
    assert chunk == 64
    assert [batching.padded_lanes(n, chunk) for n in (5, 8, 64, 65, 1000)] == [
        64, 64, 64, 128, 1024]
    assert batching.padded_lanes(3, chunk, host=True) == 4
  with jaxacct.set_layout("cpu"):
    assert [batching.padded_lanes(n, 128) for n in (1, 5, 100, 1000)] == [1, 8, 128, 1024]


@pytest.mark.slow
def test_layouts_calibrate_alike():
  """Calibrated sigmas of 8 targets on both layouts: the uppers agree to ~1e-11,
  so the search takes the same steps (equal to 1e-9), and each meets its
  target (certified)."""
  eps = np.geomspace(0.5, 8.0, 8)
  got = {}
  for lay in ("cpu", "accelerator"):
    with jaxacct.set_layout(lay):
      got[lay] = _calibrate(eps)
  np.testing.assert_allclose(got["accelerator"], got["cpu"], rtol=1e-9)
  assert np.all(calibrator.upper_epsilon([_event(s) for s in got["accelerator"]], DELTA) <= eps)


@pytest.mark.parametrize("delta", [1e-12, 1e-3])
def test_accelerator_upper_at_extremes_is_certified(delta, monkeypatch):
  """Small sigma (down to 0.1) and tiny delta on the accelerator layout (one
  8-lane chunk: a 512 MiB "device"): each upper is at least the CPU layout's
  certified lower and at least the epsilon that the max-test lower bound
  (``allocation.delta_lower_bound``, an independent provable lower bound on
  delta) forces, and equals the CPU layout's upper to 1e-9."""
  monkeypatch.setenv("JAXACCT_DEVICE_MEMORY", str(512 << 20))
  sig = np.array([0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 4.0])   # > 4 lanes: not the host
  kw = dict(sigma=sig, steps_per_epoch=10, delta=delta)
  with jaxacct.set_layout("cpu"):
    cpu = pld.allocation_pld_epsilon(**kw)
  with jaxacct.set_layout("accelerator"):
    acc = pld.allocation_pld_epsilon(**kw)
  up, lo = np.asarray(acc.epsilon), np.asarray(cpu.lower)
  assert np.all(np.isfinite(up)) and np.all(up >= lo)
  np.testing.assert_allclose(up, np.asarray(cpu.epsilon), rtol=1e-9)
  # the max test: delta_LB(eps) > delta proves epsilon(delta) > eps; at the
  # returned upper it must not exceed delta
  d_lb = np.asarray(allocation.delta_lower_bound(sigma=sig, steps_per_epoch=10, epsilon=up))
  assert np.all(d_lb <= delta * (1 + 1e-9)), (d_lb, delta)



def test_gaussian_targets_one_program_every_round(compile_counter):
  """``jaxacct.calibrate`` of Gaussian events (``GaussianDpEvent``: the exact
  Gaussian epsilon kernel, every target in each round) on the accelerator
  layout: all rounds of 16 targets compile at most one program (the
  kernel at 16 lanes), and other targets of the same count none; that
  program holds no scatter wider than 64 bits and no while loop of unknown
  trip count (tests/hlo_loops.census). The calibrated sigmas meet their
  targets: the exact Gaussian epsilon (Balle and Wang, arXiv:1805.06530,
  Thm 8) at each is at most the target, and within 1 % of it."""
  import os
  import sys
  import dp_accounting
  import jax
  from jaxacct._core.gaussian import gaussian_epsilon, gaussian_epsilon_jit
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  import hlo_loops

  def run(eps):
    return jaxacct.calibrate(dp_accounting.GaussianDpEvent, eps, DELTA, bracket=(0.3, 20.0),
                             progress=False)

  eps = np.geomspace(0.5, 4.0, 16)
  with jaxacct.set_layout("accelerator"):
    with compile_counter as first:
      sig = run(eps)
    with compile_counter as again:
      run(eps * 1.1)
    with jax.enable_x64(True):
      text = gaussian_epsilon_jit.lower(sig, np.full(16, DELTA)).compile().as_text()
  assert first.count <= 1 and again.count == 0, (first.count, again.count)
  c = hlo_loops.census(text, 99)
  assert c["wide_scatters"] == c["expanded_trips"] == c["unknown_loops"] == 0, c
  got = np.asarray(gaussian_epsilon(sig, DELTA).epsilon, np.float64)
  assert np.all(got <= eps) and np.all(got >= 0.99 * eps), got / eps
