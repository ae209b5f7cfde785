"""The allocation RDP and shuffle clone array doors on the accelerator layout,
forced on the CPU (issue 45).

Concrete arrays run as one block program of a fixed lane count (from the
device's memory and the per-lane size: the orders, the quadrature grid, the
shuffle window), called once per block by ``run_blocks``. Checked here: the
two layouts give the same values (the same per-lane formula; the CPU layout
answers the shuffle doors' arrays on the host, lane by lane), 1e3 and 1e5
lanes reach the block programs as calls of one shape (a stand-in
``run_blocks`` that computes nothing), and the compiled block programs'
while loops.
"""

import os
import sys

import jax
import numpy as np
import pytest

import jaxacct
from jaxacct import allocation, shuffle
from jaxacct._core import batching, compiled

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import hlo_loops  # noqa: E402

SIGMAS = np.array([0.5, 1.3, 4.0])[:, None]
STEPS = np.array([1, 100, 5000])[None, :]
# (n, eps0) lanes of one shuffle window (eps(delta) groups lanes by window)
N = np.array([1_000.0, 1_500.0])[:, None]
EPS0 = np.array([1.0, 1.5])[None, :]


@pytest.fixture(scope="module")
def values():
  """Each door on both layouts: ``{name: (cpu, accelerator)}``. The process's held
  programs are dropped first: the counts below are this module's programs, not
  those another module's shapes left in the same test worker."""
  compiled.clear_memory()
  doors = {
      "remove": lambda: allocation.allocation_rdp(sigma=SIGMAS, steps_per_epoch=STEPS,
                                                  direction="remove", max_order=16)[1],
      # the default quadrature grid: one lane a block on the CPU's budget
      "add": lambda: allocation.allocation_rdp(sigma=SIGMAS, steps_per_epoch=STEPS,
                                               direction="add", max_order=16)[1],
      "clone_epsilon": lambda: shuffle.clone_epsilon(1e-6, n=N, eps0=EPS0).epsilon,
      "clone_delta": lambda: shuffle.clone_delta(
          np.array([0.15, 0.2]), n=N, eps0=EPS0).delta,
      "delta_lower_bound": lambda: allocation.delta_lower_bound(
          sigma=SIGMAS, steps_per_epoch=STEPS, epsilon=np.array([0.5, 2.0])[:, None, None],
          num_epochs=2),
  }
  out = {}
  for name, fn in doors.items():
    got = {}
    for lay in ("cpu", "accelerator"):
      with jaxacct.set_layout(lay):
        got[lay] = np.asarray(fn())
    out[name] = (got["cpu"], got["accelerator"])
  return out


@pytest.mark.parametrize("name,shape", [("remove", (3, 3, 15)), ("add", (3, 3, 15)),
                                        ("clone_epsilon", (2, 2)), ("clone_delta", (2, 2)),
                                        ("delta_lower_bound", (2, 3, 3))])
def test_layouts_equal(values, name, shape):
  """The same per-lane formula on both layouts (the shuffle windows too; the
  cut mass there by a loop of known trip count: rounding of a mass
  < 1e-20). Measured: allocation within 7e-14, shuffle 2e-15."""
  cpu, acc = values[name]
  assert acc.shape == shape and acc.dtype == np.float64
  assert np.all(np.isfinite(acc) & (acc >= 0))
  if name == "delta_lower_bound":   # a probability difference: 0 where no C separates
    assert 0 < acc.max() < 1 and acc.min() == 0
  else:
    assert np.all(acc > 0)
  if name == "clone_delta":
    assert np.all((acc > 1e-9) & (acc < 1e-2))
  # the CPU layout answers the shuffle doors' arrays on the host (lane by lane):
  # delta within the host-vs-kernel tolerance (tests/shuffle/test_shuffle_host.py:
  # XLA's lgamma in jax's betainc; measured 2.9e-11 here)
  np.testing.assert_allclose(acc, cpu, rtol=1e-8 if name == "clone_delta" else 1e-12, atol=0)


def _calls(monkeypatch, run):
  """``run()`` on the accelerator layout with a stand-in ``run_blocks``:
  ``{program name: {(lanes, call shapes)}}`` and the number of calls (no
  compute: each call returns zeros of the program's output shape)."""
  seen, count, shapes = {}, [0], {}
  real = batching.run_blocks

  def stand_in(program, args, lanes):
    name = program.func.__qualname__
    static = repr(sorted(program.keywords.items()))

    def fake(*blocks):
      count[0] += 1
      key = (name, static, tuple(b.shape for b in blocks))
      seen.setdefault(name, set()).add((lanes, key[2]))
      if key not in shapes:
        shapes[key] = jax.eval_shape(program, *blocks)
      return jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes[key])

    return real(fake, args, lanes)

  with jaxacct.set_layout("accelerator"), monkeypatch.context() as m:
    m.setattr(batching, "run_blocks", stand_in)
    with jax.enable_x64(True):
      run()
  return seen, count[0]


# (the shuffle eps(delta) doors run member_epsilon_slots: test_one_eps_program_for_every_window)
DOORS = ["allocation_rdp", "clone_delta", "stronger_clone_delta", "delta_lower_bound"]


@pytest.mark.parametrize("door", DOORS)
def test_block_calls_do_not_depend_on_the_batch(door, monkeypatch):
  """1e3 and 1e5 lanes (the same value range) reach the block programs as
  calls of one shape each, the lane count of the block: one program, one
  peak memory, whatever the batch; the number of calls grows with it."""
  def run(lanes):
    if door == "allocation_rdp":
      sig = np.linspace(0.5, 5.0, lanes)
      return lambda: allocation.allocation_rdp(sigma=sig, steps_per_epoch=100, max_order=64)
    if door == "delta_lower_bound":
      sig = np.linspace(0.5, 5.0, lanes)
      return lambda: allocation.delta_lower_bound(sigma=sig, steps_per_epoch=100, epsilon=1.0)
    n = np.round(np.geomspace(1e3, 1e5, lanes))
    fn = getattr(shuffle, door)
    return lambda: fn(0.1, n=n, eps0=1.0)

  small, calls_small = _calls(monkeypatch, run(1_000))
  large, calls_large = _calls(monkeypatch, run(100_000))
  assert small == large and calls_large > calls_small
  expect = {"allocation_rdp": {"remove_rdp_block", "add_rdp_block"},
            "delta_lower_bound": {"lower_bound_block"}}.get(door, {"member_block"})
  assert set(small) == expect
  for shapes in small.values():
    for lanes, args in shapes:
      assert all(a == (lanes,) for a in args)
  assert all(len(s) == 1 for s in small.values())


def _programs(name):
  texts = [t for k, t in compiled.programs(name).items() if "accelerator" in k]
  assert texts, f"no compiled {name} program"
  return texts


def test_block_programs_loops(values):
  """No while loop of run-time trip count in the compiled block programs
  (issue 53): the allocation RDP programs' powering has bit_length(max t)
  static rounds, the Lambert-W Newton 30; the shuffle programs' incomplete
  betas (cut mass and block anchors) run at most 599 trips, in chunks of 64
  run while an element moves, and the eps programs' safeguarded Newton
  chunks of 8 steps run while a lane moves (was: jax's while loops, one
  test a trip)."""
  unknown = lambda t: sum(n is None for _, n in hlo_loops.while_loops(t))
  for name in ("remove_rdp_block", "add_rdp_block", "member_block", "member_epsilon_slots"):
    assert all(unknown(t) == 0 for t in _programs(name))
  assert len(_programs("member_block")) == 1   # clone_delta's window
  assert len(_programs("member_epsilon_slots")) == 1


@pytest.mark.parametrize("name", ["remove_rdp_block", "add_rdp_block", "member_block",
                                  "member_epsilon_slots", "lower_bound_block"])
def test_block_programs_census(values, name):
  """What XLA:GPU would execute (issue 53; the optimised HLO with the
  accelerator layout forced on the CPU, tests/hlo_loops.census): no scatter
  wider than 64 bits (XLA:GPU expands each into one serial trip per index),
  no while loop of unknown trip count, in every block program of the doors."""
  texts = [t for k, t in compiled.programs(name).items() if "accelerator" in k]
  if name == "lower_bound_block" and not texts:
    pytest.skip("lower_bound_block not compiled through the store in this process")
  assert texts, name
  for text in texts:
    assert hlo_loops.wide_scatters(text) == []
    c = hlo_loops.census(text, 99)
    assert c["wide_scatters"] == c["expanded_trips"] == c["unknown_loops"] == 0, c



# 6 (n, eps0) lanes whose eps(delta) windows are 256 to 4,096 cells (4 buckets)
SLOT_N = np.array([1e3, 1e4, 1e5])[:, None]
SLOT_EPS0 = np.array([0.5, 4.0])[None, :]
# eps at delta 1e-6 of these lanes, the CPU layout's per-window kernels at
# 3754a03 (clone (1e5, 4) is clone_epsilon's docstring regression, 0.169769747)
SLOT_CPU = {"clone": [0.07052346759790899, 3.9899635978756667, 0.02040145510400442,
                      0.6009087636516762, 0.005812548756124658, 0.1697697472705358],
            "stronger_clone": [0.0626865657306161, 1.8529065549238177, 0.018117406878413785,
                               0.41081229308071854, 0.005152729118468464,
                               0.11815306655738034]}


@pytest.mark.parametrize("door", ["clone", pytest.param("stronger_clone",
                                                        marks=pytest.mark.slow)])
def test_one_eps_program_for_every_window(door, monkeypatch):
  """The shuffle eps(delta) doors on the accelerator layout: the lanes of every
  window (here 256 to 4,096 cells: one program per window before, four
  here) are cut into blocks of 64 cells and packed into calls of one
  program of static shape (64 slots on a 96 MiB "device": 3 calls here),
  compiled once for both batches. Each lane keeps its window's cells, cut
  mass and rounding allowance, so the values equal the CPU layout's
  per-window kernels (measured within 1e-13; the issue's tolerance is
  1e-11), and each is certified: the host path's delta (SciPy's special
  functions) at the returned epsilon is at most the target."""
  monkeypatch.setenv("JAXACCT_DEVICE_MEMORY", str(96 << 20))
  eps_door, delta_door = getattr(shuffle, f"{door}_epsilon"), getattr(shuffle, f"{door}_delta")
  before = set(compiled.programs("member_epsilon_slots"))
  with jaxacct.set_layout("accelerator"):
    acc = np.asarray(eps_door(1e-6, n=SLOT_N, eps0=SLOT_EPS0).epsilon)
    acc2 = np.asarray(eps_door(1e-6, n=SLOT_N[1:], eps0=SLOT_EPS0[:, ::-1]).epsilon)
  new = [k for k in set(compiled.programs("member_epsilon_slots")) - before
         if "accelerator" in k]
  assert len(new) == 1, new   # one program for both batches' windows
  assert acc.shape == (3, 2) and np.all((acc > 0) & (acc < SLOT_EPS0))
  np.testing.assert_allclose(acc.ravel(), SLOT_CPU[door], rtol=1e-11, atol=0)
  # other calls, other companions in a call: the same values up to rounding
  np.testing.assert_allclose(acc2, acc[1:, ::-1], rtol=1e-12, atol=0)
  n, e0 = np.broadcast_arrays(SLOT_N, SLOT_EPS0)
  for a, nn, ee in zip(acc.ravel(), n.ravel(), e0.ravel()):   # one question: the host path
    assert float(delta_door(float(a), n=float(nn), eps0=float(ee)).delta) <= 1e-6 * (1 + 1e-9)
