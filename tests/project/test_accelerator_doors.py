"""Every array door: bounded memory on the CPU layout, and the census of the
accelerator layout's programs (issue 53 items 2-3).

Memory: a batch whose lanes would hold more than a quarter of the device's
memory runs in the block programs on the CPU layout too (the values lane by
lane those of one whole-batch program), and a question one block of which
cannot fit says so in a ValueError naming the parameter before anything is
allocated. The device's memory is set small (``JAXACCT_DEVICE_MEMORY``) to
reach both cases with small batches; 1e5 Poisson RDP sigmas (one 135 GB
buffer before) are counted with a stand-in program, nothing computed.
"""

import numpy as np
import pytest

import jaxacct
from jaxacct import allocation, poisson, shuffle
from jaxacct._core import batching
from jaxacct._core import subsampled_gaussian as sg
from jaxacct._core.orders import DEFAULT_ORDERS


def _small_and_whole(monkeypatch, fn, small_bytes):
  """``fn()`` on the CPU layout with a device of ``small_bytes`` (blocks) and of
  1 TiB (one program), and the block calls the small one made."""
  calls = []
  real = batching.run_blocks

  def counting(program, args, lanes):
    calls.append(lanes)
    return real(program, args, lanes)

  with jaxacct.set_layout("cpu"), monkeypatch.context() as m:
    m.setattr(batching, "run_blocks", counting)
    m.setattr(sg, "run_blocks", counting)
    m.setenv("JAXACCT_DEVICE_MEMORY", str(small_bytes))
    small = np.asarray(fn())
    m.setenv("JAXACCT_DEVICE_MEMORY", str(1 << 40))
    n_small = len(calls)
    whole = np.asarray(fn())
  return small, whole, calls[:n_small], calls[n_small:]


def test_poisson_rdp_cpu_layout_blocks_when_the_batch_does_not_fit(monkeypatch):
  """40 sigmas at the default orders (2.7 MB a lane by the estimate) on a
  64 MiB device: blocks of 8 lanes (the least block), values those of the
  whole batch (the same kernel lane by lane; XLA vectorises a block of 8 and
  of 40 lanes apart: measured 1 ulp on one lane of 40); the epsilon and the
  curve doors alike."""
  sig = np.linspace(0.5, 5.0, 40)
  small, whole, calls, none = _small_and_whole(
      monkeypatch, lambda: poisson.epsilon(q=0.01, sigma=sig, num_steps=1000,
                                           delta=1e-5).epsilon, 64 << 20)
  assert calls and set(calls) == {8} and none == []
  np.testing.assert_allclose(small, whole, rtol=1e-14, atol=0)
  assert np.all(np.isfinite(small) & (small > 0))
  small, whole, calls, none = _small_and_whole(
      monkeypatch, lambda: poisson.poisson_gaussian_rdp(q=0.01, sigma=sig), 64 << 20)
  assert calls and none == [] and small.shape == (40, len(DEFAULT_ORDERS))
  np.testing.assert_allclose(small, whole, rtol=1e-14, atol=0)


def test_poisson_rdp_1e5_sigmas_never_one_program(monkeypatch):
  """1e5 sigmas on the CPU layout's fixed 4 GiB budget asked for one 135 GB
  buffer (one program of the whole batch); now they reach the block program
  as calls of 64 lanes (a stand-in: nothing computed), and that block's
  estimate is a sixteenth of the budget."""
  calls = []

  def stand_in(*args, **static):
    calls.append(args[0].shape)
    return np.zeros(args[0].shape), np.zeros(args[0].shape)

  def whole(*a, **k):
    raise AssertionError("the whole batch as one program")

  with jaxacct.set_layout("cpu"), monkeypatch.context() as m:
    m.setattr(sg, "poisson_rdp_block_jit", stand_in)
    m.setattr(sg, "poisson_rdp_query_jit", whole)
    r = poisson.epsilon(q=0.01, sigma=np.linspace(0.5, 5, 100_000), num_steps=10_000,
                        delta=1e-5)
  assert r.epsilon.shape == (100_000,)
  assert set(calls) == {(64,)} and len(calls) == -(-100_000 // 64)
  assert 64 * sg.rdp_lane_bytes(DEFAULT_ORDERS) <= batching.device_memory_bytes() / 16


def test_question_that_cannot_fit_is_a_value_error(monkeypatch):
  """A block of 8 lanes of the default orders is ~22 MB: on an 8 MiB device
  the door says so, naming ``orders``, before it computes anything."""
  monkeypatch.setenv("JAXACCT_DEVICE_MEMORY", str(8 << 20))
  for lay in ("cpu", "accelerator"):
    with jaxacct.set_layout(lay), pytest.raises(ValueError, match="orders is too large"):
      poisson.epsilon(q=0.01, sigma=np.linspace(0.5, 5, 300), num_steps=100, delta=1e-5)


def test_shuffle_cpu_layout_blocks_when_the_batch_does_not_fit(monkeypatch):
  """clone delta of 24 lanes of one window on a device that holds a few lanes
  a block: blocks, the whole batch's values to 2e-12 (measured 8.6e-13
  relative: the vmapped kernel's rounding depends on the batch it is
  compiled for, as between the layouts, test_accelerator_arrays). A static
  ``max_n`` sends the array to the jitted kernel (without it the CPU layout
  answers it on the host, lane by lane)."""
  n = np.array([2_000.0, 3_000.0])[:, None]
  e0 = np.linspace(0.8, 1.5, 12)[None, :]
  # the window is 256..1024 cells (98..393 kB a lane): a 4 MiB device holds
  # at most 10 lanes in a quarter, and a block of 8 in all of it
  small, whole, calls, none = _small_and_whole(
      monkeypatch, lambda: shuffle.clone_delta(0.2, n=n, eps0=e0, max_n=3_000).delta, 4 << 20)
  assert calls and none == [] and set(calls) == {8}
  np.testing.assert_allclose(small, whole, rtol=2e-12, atol=0)
  assert np.all((small > 0) & (small < 1))


def test_delta_lower_bound_cpu_layout_blocks(monkeypatch):
  """The max-test lower bound (4,001 thresholds, 256 kB a lane) of 64 lanes on
  an 8 MiB device: blocks, the whole batch's values (to rounding: 1e-14)."""
  sig = np.linspace(0.5, 3.0, 64)
  small, whole, calls, none = _small_and_whole(
      monkeypatch, lambda: allocation.delta_lower_bound(sigma=sig, steps_per_epoch=100,
                                                        epsilon=1.0), 8 << 20)
  assert calls and none == []
  np.testing.assert_allclose(small, whole, rtol=1e-14, atol=0)
  assert np.all(small >= 0) and small.max() > 0
