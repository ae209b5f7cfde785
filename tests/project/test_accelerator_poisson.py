"""The Poisson doors on the accelerator layout, forced on the CPU (issue 45).

Array questions run as one compiled block program of a fixed lane count (set
by the orders and the device's memory), called once per block: the same
program, compile time and peak memory for 1e3 and 1e5 lanes. Checked here:
the two layouts give the same values (the same kernel: RDP to 1e-12, measured
bitwise), the door cuts 1e3 and 1e5 lanes into blocks of one shape, and that
block program's largest intermediate and loops (compiled HLO) do not depend
on the lane count.
"""

import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxacct
from jaxacct import poisson
from jaxacct._core import compiled
from jaxacct._core import subsampled_gaussian as sg
from jaxacct._core.orders import DEFAULT_ORDERS

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import hlo_loops  # noqa: E402

SIGMAS = np.linspace(0.4, 6.0, 50)
# a few orders of each kind (fractional <= 16, integer <= 256 and above):
# a small program, compiled in ~1 s
FEW_ORDERS = (1.5, 2.0, 3.0, 4.5, 8.0, 20.0, 300.0)


def _both(fn):
  out = {}
  for lay in ("cpu", "accelerator"):
    with jaxacct.set_layout(lay):
      out[lay] = fn()
  return out["cpu"], out["accelerator"]


def test_rdp_epsilon_layouts_equal():
  cpu, acc = _both(lambda: poisson.epsilon(q=0.01, sigma=SIGMAS, num_steps=10_000,
                                           delta=1e-5))
  assert acc.epsilon.shape == (50,) and acc.epsilon.dtype == np.float64
  np.testing.assert_allclose(acc.epsilon, cpu.epsilon, rtol=1e-12, atol=0)
  np.testing.assert_array_equal(acc.order, cpu.order)


def test_rdp_delta_layouts_equal_q_and_sigma_arrays():
  q = np.geomspace(1e-4, 0.9, 10)[:, None]
  sigma = np.linspace(0.5, 4.0, 5)[None, :]
  cpu, acc = _both(lambda: poisson.delta(q=q, sigma=sigma, num_steps=np.array([[100], [1000]])
                                         .repeat(5, 0), epsilon=2.0, orders=FEW_ORDERS))
  assert acc.delta.shape == (10, 5)
  np.testing.assert_allclose(acc.delta, cpu.delta, rtol=1e-12, atol=0)
  np.testing.assert_array_equal(acc.order, cpu.order)


def test_rdp_curve_layouts_equal():
  q = np.geomspace(1e-5, 0.5, 7)
  cpu, acc = _both(lambda: poisson.poisson_gaussian_rdp(FEW_ORDERS, q=q, sigma=0.9))
  assert acc.shape == (7, len(FEW_ORDERS))
  np.testing.assert_allclose(acc, cpu, rtol=1e-12, atol=0)


def test_traced_input_is_one_program_of_the_whole_batch():
  """Under the user's jit the door traces the whole batch, as on the CPU layout."""
  f = jax.jit(lambda s: poisson.epsilon(q=0.01, sigma=s, num_steps=100, delta=1e-5,
                                        orders=FEW_ORDERS).epsilon)
  with jax.enable_x64(True), jaxacct.set_layout("accelerator"):
    assert f.lower(jnp.asarray(SIGMAS)).as_text().count("tensor<50x") > 0
    traced = np.asarray(f(jnp.asarray(SIGMAS)))
  eager = poisson.epsilon(q=0.01, sigma=SIGMAS, num_steps=100, delta=1e-5, orders=FEW_ORDERS)
  np.testing.assert_allclose(traced, eager.epsilon, rtol=1e-12)


def test_pld_layouts_agree():
  """The PLD door's blocks (grid, truncation, window, composition, query on the
  device) against the CPU layout's lanes (grid and truncation on the host).
  Given the same grid the two give bitwise the same epsilon; the grid's
  special functions (XLA's against SciPy's) differ by ~1e-12 relative on the
  connect-the-dots split, which the composition moves by up to ~1e-9 relative
  (1e-13 noise on the host grid moved epsilon by 3e-9 at sigma 0.7, q 1e-3,
  2,000 steps); these sigmas share one bucket of each program."""
  sig = np.array([3.15, 3.3])
  cpu, acc = _both(lambda: poisson.epsilon(q=0.01, sigma=sig, num_steps=10_000, delta=1e-5,
                                           method="pld"))
  assert acc.epsilon.shape == (2,)
  np.testing.assert_allclose(acc.epsilon, cpu.epsilon, rtol=1e-9)


def _largest_array(text):
  """(elements, shape) of the largest array in optimised HLO text."""
  best = (0, ())
  for dims in re.findall(r"\b(?:f64|f32|s64|s32|pred|c128)\[([\d,]*)\]", text):
    shape = tuple(int(d) for d in dims.split(",") if d)
    best = max(best, (int(np.prod(shape)), shape))
  return best


def test_block_program_is_independent_of_the_batch(monkeypatch):
  """The door cuts 1e3 and 1e5 lanes into calls of one shape (counted by a
  stand-in program, no compute), and that program compiled has the same
  largest intermediate whatever the batch (it holds ~2^18 floats a lane;
  lanes x that at most the memory estimate) and no while loop."""
  calls = []

  def stand_in(*args, **static):
    calls.append((tuple(a.shape for a in args), tuple(sorted(static.items()))))
    return np.zeros(args[0].shape), np.zeros(args[0].shape)

  lanes = sg.rdp_block_lanes(DEFAULT_ORDERS)
  assert lanes == 64             # CPU: a fixed 4 GiB budget, a sixteenth of it
  with jaxacct.set_layout("accelerator"), monkeypatch.context() as m:
    m.setattr(sg, "poisson_rdp_block_jit", stand_in)
    seen = {}
    for n in (1_000, 100_000):
      calls.clear()
      r = poisson.epsilon(q=0.01, sigma=np.linspace(0.5, 5, n), num_steps=10_000, delta=1e-5)
      assert r.epsilon.shape == (n,)
      assert len(calls) == -(-n // lanes)
      seen[n] = set(calls)
  assert seen[1_000] == seen[100_000] and len(seen[1_000]) == 1
  (shapes, static), = seen[1_000]
  assert shapes == ((lanes,),) * 4
  arg = jax.ShapeDtypeStruct((lanes,), jnp.float64)
  with jax.enable_x64(True), jaxacct.set_layout("accelerator"):
    text = sg.poisson_rdp_block_jit.lower(arg, arg, arg, arg, **dict(static)).compile().as_text()
  size, shape = _largest_array(text)
  assert shape[0] == lanes and size <= lanes * 255 * 255, shape
  assert 8 * size <= lanes * sg.rdp_lane_bytes(DEFAULT_ORDERS)
  assert [n for _, n in hlo_loops.while_loops(text) if n is None] == []


def test_programs_census():
  """The Poisson doors' accelerator programs compiled by the tests above (RDP
  block; PLD scan and query blocks), counted as XLA:GPU would run them
  (issue 53, tests/hlo_loops.census on the optimised HLO): no scatter wider
  than 64 bits, no while loop of unknown trip count; the PLD query block's
  sequential trips do not grow with its FFT window."""
  names = ("poisson_rdp_block_jit", "_scan_block", "_query_block")
  if not all(any("accelerator" in k for k in compiled.programs(n)) for n in names):
    # a fresh worker (the crash-safe scheduler reruns a test in a new process):
    # the questions of the tests above compile them here
    with jaxacct.set_layout("accelerator"):
      poisson.epsilon(q=0.01, sigma=SIGMAS, num_steps=10_000, delta=1e-5)
      poisson.epsilon(q=0.01, sigma=np.array([3.15, 3.3]), num_steps=10_000, delta=1e-5,
                      method="pld")
  for name in names:
    texts = [t for k, t in compiled.programs(name).items() if "accelerator" in k]
    assert texts, name
    for text in texts:
      assert hlo_loops.wide_scatters(text) == []
      c = hlo_loops.census(text, 99)
      assert c["wide_scatters"] == c["expanded_trips"] == c["unknown_loops"] == 0, (name, c)
      if name == "_query_block":
        # the query's tables without the reverse scans (2 x window/256 trips:
        # 217 at a 24,576-point window, 4,126 at 524,288); left: the epsilon
        # search's and the grid's binary searches, ~log2 of the lengths
        assert c["loop_trips"] <= 64, c


# The accelerator layout's door values at d7a0a30 (one program per (kept
# length, window), query tables by reverse scans): _pld_values("accelerator").
_PINNED = np.array([
    13.360825684051957,
    1.4135654543551643,
    0.7210616553897982,
    0.488392037610233,
    0.36914271582688657,
    0.2962237791023481,
    0.24695538164764355,
    0.21143259278496837,
    0.35505088372449856,
    0.00044344003592230633,
    2.245298466987586e-08,
    3.9984696997899684e-14,
    9.620106811753938e-17,
    9.555741571305778e-17,
    9.607116623310917e-17,
    9.546456255529368e-17,
    38.6757122591592,
    8.07292006829363,
    4.082096413712401,
    2.6944199074008326,
    2.001501482439175,
    1.5876259132715378,
    1.3129579168810581,
    1.1176042626748535,
    0.8714709548659942,
    0.27217266523625466,
    0.0778626176267449,
    0.021667016237995596,
    0.005555557305592542,
    0.0012711742062034785,
    0.00025456974154123554,
    4.4056031353606695e-05])


def _pld_values(layout):
  """eps at delta 1e-5, then delta at eps 1, for 8 sigmas in [0.5, 5], at
  (q, T) = (0.01, 1000) then (0.2, 50), on one layout."""
  got = []
  sig = np.linspace(0.5, 5, 8)
  with jaxacct.set_layout(layout):
    for q, t in ((0.01, 1000), (0.2, 50)):
      e = poisson.epsilon(q=q, sigma=sig, num_steps=t, delta=1e-5, method="pld").epsilon
      d = poisson.delta(q=q, sigma=sig, num_steps=t, epsilon=1.0, method="pld").delta
      got.append(np.concatenate([e, d]))
  return np.concatenate(got)


@pytest.mark.slow
def test_pld_blocks_values_pinned():
  """The accelerator programs (loopless query tables; one query program per
  window, kept grids zero-padded, jaxacct._core.window_cells) against the
  pinned per-(kept length, window) programs and against the CPU layout run
  now. The same windows, grids and truncations: only round-off moves
  (measured at 16 sigmas in [0.5, 5], q 0.01, 1e3 steps: <= 6.3e-14
  relative of the programs before, either side; eps within 1.2e-13 of the
  CPU layout, deltas within 3.4e-11 of it at deltas <= 4e-14, from the
  grid's special functions as before). Within 1e-12 of the pinned values,
  eps within 1e-12 of the CPU layout, and no epsilon below either by more
  than the query's rounding allowance (1e-13 (1 + eps)), which covers the
  round-off."""
  got = _pld_values("accelerator")
  np.testing.assert_allclose(got, _PINNED, rtol=1e-12, atol=0)
  eps = np.r_[0:8, 16:24]
  cpu = _pld_values("cpu")
  np.testing.assert_allclose(got[eps], cpu[eps], rtol=1e-12, atol=0)
  np.testing.assert_allclose(got, cpu, rtol=1e-10, atol=0)
  for ref in (_PINNED, cpu):
    assert np.all(got[eps] >= ref[eps] - 1e-13 * (1 + ref[eps]))
