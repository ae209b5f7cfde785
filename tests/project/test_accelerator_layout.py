"""The accelerator layout, forced on the CPU (issue 45, items 1-2).

What XLA:GPU pays for is counted on the compiled programs here (no GPU
needed): while loops without a known trip count (each trip a host round trip
there), loop trips executed per sweep (nested loops multiplied out), and
whether a program's loops or shapes grow with the number of lanes. Values:
the accelerator layout computes the CPU layout's formula (re-associated sums of
nonnegative terms), held equal here.
"""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxacct
from jaxacct._core import batching, compiled
from jaxacct._core.batching import set_layout
from jaxacct.allocation import pld, sum_law

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import hlo_loops  # noqa: E402


def test_switch_env_and_context():
  code = ("import jaxacct; from jaxacct._core.batching import layout; print(layout());"
          "s = jaxacct.set_layout('cpu'); print(layout());"
          "\nwith jaxacct.set_layout('accelerator') as l: print(l)\nprint(layout())")
  env = dict(os.environ, JAXACCT_LAYOUT="accelerator", JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       check=True).stdout.split()
  assert out == ["accelerator", "cpu", "accelerator", "cpu"]
  env["JAXACCT_LAYOUT"] = "gpu"
  bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  assert bad.returncode != 0 and "JAXACCT_LAYOUT must be one of" in bad.stderr
  with pytest.raises(ValueError, match="name must be one of"):
    set_layout("tpu")
  assert batching.layout() == "cpu"          # the default on a CPU machine
  with set_layout("accelerator"):
    assert batching.lanes_per_block(8) == 8
  assert batching.lanes_per_block(8) == 1


def test_block_size_is_a_function_of_the_device():
  # the CPU's fixed 4 GiB budget: a quarter of it, 16 MB a lane (a sweep's chunk)
  assert batching.lanes_for_memory(16 << 20) == 64
  # past the budget the block keeps its floor of 8 lanes while 8 lanes fit the
  # device (2 GiB of 4); beyond the device it is refused before anything runs
  assert batching.lanes_for_memory(256 << 20) == 8 and batching.lanes_for_memory(1) == 1 << 16
  with pytest.raises(ValueError, match="sigmas is too large for this device"):
    batching.lanes_for_memory(1e12, name="sigmas")


def _laws(D, n, rng):
  A = sum_law.UpperLaw(jnp.asarray(rng.random(n) * np.exp(-np.linspace(0, 10, n))),
                  jnp.float64(0.01), jnp.float64(0.0))
  B = sum_law.UpperLaw(jnp.asarray(rng.random(n)), jnp.float64(0.02), jnp.float64(0.0))
  fa, fb = (1 + rng.random(n) * np.expm1(D) for _ in range(2))
  LA = sum_law.LowerLaw(A.p, A.p * fa, jnp.float64(0.01))
  LB = sum_law.LowerLaw(B.p, B.p * fb, jnp.float64(0.02))
  return A, B, LA, LB


@pytest.mark.parametrize("D", [0.2, 0.029, 0.005])
def test_pairwise_sums_equal_across_layouts(D, x64):
  """A + B and X + X, upper and lower (full resolution), near band and far
  field: the two layouts agree to rounding (1e-13 relative; measured <= 1e-15)."""
  n = 256
  A, B, LA, LB = _laws(D, n, np.random.default_rng(0))
  out = {}
  for lay in ("cpu", "accelerator"):
    with set_layout(lay):
      up = jax.jit(lambda A, B, D: [sum_law.conv_upper(A, B, D, n, False, 4),
                                    sum_law.conv_upper(A, A, D, n, True, 4)])
      lo = jax.jit(lambda A, B, D: [sum_law.conv_lower(A, B, D, n, False, 4, coarsen=1),
                                    sum_law.conv_lower(A, A, D, n, True, 4, coarsen=1)])
      (C, o1), (S, o2) = up(A, B, jnp.float64(D))
      (C2, o3), (S2, o4) = lo(LA, LB, jnp.float64(D))
      out[lay] = [np.asarray(x) for x in (S.p, C.p, S2.a, S2.g, C2.a, C2.g, o1, o3)]
  for a, b in zip(out["cpu"], out["accelerator"]):
    np.testing.assert_allclose(b, a, rtol=1e-13, atol=0)


def test_round_laws_equal_across_layouts(x64):
  """The round laws of 8 lanes (t = 50, grid 256) on both layouts (the
  accelerator's program builds its one-step laws itself and re-associates
  the pairwise sums): every array of the final laws agrees to 1e-12 relative
  (measured 1.9e-13 on the upper masses, 5.9e-14 lower), the log positions
  near 0 to 1e-14 absolute (their ulp scale is that of the whole axis;
  measured 1.8e-15), and the round's epsilons, upper and lower, to 1e-13
  (measured 5.4e-15)."""
  sig = np.linspace(0.6, 4.0, 8)
  out, eps = {}, {}
  for lay in ("cpu", "accelerator"):
    with set_layout(lay):
      F = sum_law.laws_batch(sig, np.full(8, 50), np.full(8, 1e-12), n=256,
                             mechanism="gaussian")
      out[lay] = [np.asarray(x) for x in F]
      eps[lay] = [np.asarray(x) for x in sum_law.eps_batch(F, np.full(8, 1e-5))]
  for a, b in zip(out["cpu"], out["accelerator"]):
    np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
  for a, b in zip(eps["cpu"], eps["accelerator"]):
    np.testing.assert_allclose(b, a, rtol=1e-13, atol=0)


def test_door_equal_across_layouts():
  """The public door on both layouts, a small question in the default suite
  (5 lanes: more than the door answers on the host, t = 50, E = 1): uppers
  to 1e-11 relative (the epsilon solver's resolution), brackets certified on
  both, and the accelerator layout ran its laws program."""
  sig = np.array([0.6, 1.0, 1.5, 2.0, 4.0])
  before = set(compiled.programs("mechanism_laws_batch"))
  res = {}
  for lay in ("cpu", "accelerator"):
    with set_layout(lay):
      r = pld.allocation_pld_epsilon(sigma=sig, steps_per_epoch=50, num_epochs=1, delta=1e-6)
      res[lay] = (np.asarray(r.epsilon), np.asarray(r.lower))
  assert set(compiled.programs("mechanism_laws_batch")) - before
  np.testing.assert_allclose(res["accelerator"][0], res["cpu"][0], rtol=1e-11)
  for up, lo in res.values():
    assert np.all(lo <= up) and np.all(np.isfinite(up))


@pytest.mark.slow
def test_sweep_equal_across_layouts():
  """The public door on both layouts (16 lanes, t = 234, E = 10): uppers to
  1e-11 relative (the epsilon solver's resolution; measured 1.7e-12 at grid
  256), lowers to 1e-5 (the lower solver's resolution; measured 7e-7)."""
  sig = np.linspace(0.5, 5.0, 16)
  res = {}
  for lay in ("cpu", "accelerator"):
    with set_layout(lay):
      r = pld.allocation_pld_epsilon(sigma=sig, steps_per_epoch=234, num_epochs=10, delta=1e-5)
      res[lay] = (np.asarray(r.epsilon), np.asarray(r.lower))
  np.testing.assert_allclose(res["accelerator"][0], res["cpu"][0], rtol=1e-11)
  np.testing.assert_allclose(res["accelerator"][1], res["cpu"][1], rtol=1e-5)
  assert np.all(res["accelerator"][1] <= res["accelerator"][0])


def _sweep(lanes, epochs):
  return pld.allocation_pld_epsilon(sigma=np.geomspace(0.5, 5.0, lanes), steps_per_epoch=234,
                                    num_epochs=epochs, delta=1e-5)


#: a device of 1 GiB: chunks of 16 lanes (16 MB a lane, a quarter of the memory)
_SMALL_DEVICE = str(1 << 30)


@pytest.fixture(scope="module")
def accelerator_programs():
  """The compiled programs of a 16-lane sweep (t = 234, E = 10: the laws and
  the composition) on the accelerator layout with 16-lane chunks, then those
  a 5-lane sweep and a 32-lane sweep at E = 1 added (the direct query; its
  laws are the 16-lane program's, twice)."""
  old = os.environ.get("JAXACCT_DEVICE_MEMORY")
  os.environ["JAXACCT_DEVICE_MEMORY"] = _SMALL_DEVICE
  try:
    with set_layout("accelerator"):
      before = set(compiled.programs())
      _sweep(16, 10)
      first = {k: v for k, v in compiled.programs().items()
               if k not in before and "accelerator" in k}
      _sweep(5, 10)   # padded to the chunk: the 16-lane programs
      fewer = {k for k in compiled.programs() if k not in before and k not in first}
      _sweep(32, 1)
      more = {k: v for k, v in compiled.programs().items()
              if k not in before and k not in first}
  finally:
    if old is None:
      del os.environ["JAXACCT_DEVICE_MEMORY"]
    else:
      os.environ["JAXACCT_DEVICE_MEMORY"] = old
  pick = lambda progs, name: [v for k, v in progs.items() if name in k]
  return {"laws": pick(first, "laws_batch"), "composed": pick(first, "composed_batch"),
          "direct": pick(more, "direct_batch"), "added_by_32_lanes": sorted(more),
          "added_by_5_lanes": sorted(fewer)}


def test_loops_have_known_trip_counts(accelerator_programs):
  """No program of a sweep has a while loop whose trip count XLA does not know:
  the laws program's binary powering runs a static level count (the bit
  length of t), the composition's a static count of masked levels (the bit
  length of the doors' cap on k E; before: one loop of a per-lane run-time
  count, "any lane below its count"), the direct query none (gpu-path digest:
  the CPU layout's law program has 18)."""
  for k in ("laws", "composed", "direct"):
    assert len(accelerator_programs[k]) == 1
    assert [n for _, n in hlo_loops.while_loops(accelerator_programs[k][0])
            if n is None] == [], k


def test_programs_do_not_grow_with_lanes(accelerator_programs):
  """A 5-lane sweep compiles nothing after the 16-lane one (every batch is
  padded to a multiple of the device's chunk), and a 32-lane sweep compiles
  no new law program (only the direct query of its new round type): the
  chunk (16 lanes here, from the device's memory) is the programs' lane
  count, so their loops, shapes and largest intermediates are the same for
  any batch."""
  assert accelerator_programs["added_by_5_lanes"] == []   # 5 lanes: the 16-lane programs
  added = accelerator_programs["added_by_32_lanes"]
  assert len(added) == 1 and "direct_batch" in added[0], added
  assert "f64[16," in accelerator_programs["laws"][0]


def test_sweep_trips_bounded(accelerator_programs):
  """A sweep executes at most 1,000 sequential loop trips (laws and query,
  nested loops multiplied out, each unknown loop counted at the level count
  of t = 234 plus one). The CPU layout's law program runs ~95,000."""
  levels = int(234).bit_length() + 1
  laws = hlo_loops.sequential_trips(accelerator_programs["laws"][0], levels)
  for q in ("composed", "direct"):
    assert laws + hlo_loops.sequential_trips(accelerator_programs[q][0], levels) <= 1000


def test_sweep_programs_have_no_wide_scatter(accelerator_programs):
  """No program of a sweep holds a scatter wider than 64 bits: XLA:GPU
  expands each into a loop of one trip per lane (gpu-path digest: 416 such
  scatters in the laws program at t = 234, 425,984 serial trips at 1,024
  lanes before the float64 rows)."""
  for k in ("laws", "composed", "direct"):
    for text in accelerator_programs[k]:
      assert hlo_loops.wide_scatters(text) == []
      assert hlo_loops.census(text, 9)["expanded_trips"] == 0


@pytest.fixture(scope="module")
def eight_lane_programs():
  """The programs of the 16-lane fixture's sweeps (E = 10: the composition;
  E = 1: the direct query) in chunks of 8 lanes (a device of 512 MiB)."""
  old = os.environ.get("JAXACCT_DEVICE_MEMORY")
  os.environ["JAXACCT_DEVICE_MEMORY"] = str(1 << 29)
  try:
    with set_layout("accelerator"):
      before = set(compiled.programs())
      _sweep(8, 10)
      _sweep(8, 1)
      new = {k: v for k, v in compiled.programs().items()
             if k not in before and "accelerator" in k}
  finally:
    if old is None:
      del os.environ["JAXACCT_DEVICE_MEMORY"]
    else:
      os.environ["JAXACCT_DEVICE_MEMORY"] = old
  return {name: [v for k, v in new.items() if f"{name}_batch" in k]
          for name in ("laws", "composed", "direct")}


def test_sweep_programs_census(accelerator_programs, eight_lane_programs):
  """Every program an allocation sweep compiles on the accelerator layout (the
  laws, the composition, the direct query; tests/hlo_loops.census on the
  optimised HLO) in chunks of 8 and of 16 lanes: no loop of unknown trip
  count, no scatter wider than 64 bits, and the same loop trips and kernels
  executed inside loops at both lane counts (measured at t = 234, E = 10:
  composition 162 trips, 1,782 loop kernels, 1,976 / 1,974 kernels in all;
  before its static levels, 1 loop of unknown trip count). XLA:CPU splits
  one straight-line reduction differently at 8 and at 16 lanes (2 kernels
  run once): totals within 8."""
  for k in ("laws", "composed", "direct"):
    assert len(eight_lane_programs[k]) == 1, k
    c8, c16 = (hlo_loops.census(p[k][0], 99)
               for p in (eight_lane_programs, accelerator_programs))
    for c in (c8, c16):
      assert c["unknown_loops"] == 0 and c["wide_scatters"] == 0, (k, c)
      assert c["expanded_trips"] == 0, (k, c)
    assert c8["loop_trips"] == c16["loop_trips"], (k, c8, c16)
    assert c8["loop_kernels"] == c16["loop_kernels"], (k, c8, c16)
    assert abs(c8["kernels"] - c16["kernels"]) <= 8, (k, c8, c16)


@pytest.fixture(scope="module")
def laws_programs():
  """The accelerator layout's laws program (t = 234, grid 1024) compiled for
  chunks of 8 and 16 lanes, not run."""
  with set_layout("accelerator"):
    return {b: sum_law.laws_batch(np.geomspace(0.5, 5.0, b), np.full(b, 234),
                                  np.full(b, 1e-12), n=1024, mechanism="gaussian",
                                  aot="executable") for b in (8, 16)}


@pytest.mark.parametrize("lanes", [8, 16])
def test_laws_program_census(laws_programs, lanes):
  """What XLA:GPU executes of the laws program (its optimised HLO, the
  accelerator layout forced on the CPU; tests/hlo_loops.census): no scatter
  wider than 64 bits and so no expanded trips (before: 416 scatters, 3,328
  trips at 8 lanes), no loop of unknown trip count (before: 2), and at most
  6,000 executed kernels with nested trips multiplied out (before: 12,385 at
  8 lanes counting the expanded trips; measured now 5,390), the same count
  at 8 and 16 lanes: nothing grows with the lanes."""
  c = hlo_loops.census(laws_programs[lanes].as_text(), 99)
  assert c["wide_scatters"] == 0 and c["expanded_trips"] == 0
  assert c["unknown_loops"] == 0
  assert c["kernels"] <= 6000, c
  assert c["kernels"] == hlo_loops.census(laws_programs[8].as_text(), 99)["kernels"]


def test_laws_program_temporaries_linear_in_lanes(laws_programs):
  """The laws program's temporaries (``memory_analysis``; the CPU's bound
  the GPU's from above, XLA:CPU materialising the gathers) grow linearly
  with the lanes and stay inside the per-lane budget the chunk sizing
  assumes (``LANE_BYTES`` of the sweep's chunks, 16 MB; measured 9.2 MB)."""
  LANE_BYTES = 16 << 20
  t8, t16 = (laws_programs[b].memory_analysis().temp_size_in_bytes for b in (8, 16))
  assert t16 <= 2.05 * t8 and t16 >= 1.9 * t8
  assert t16 / 16 <= LANE_BYTES


def test_pairwise_sums_have_no_slice_update(x64):
  """The accelerator layout's pairwise sums (upper and lower, near band and far
  field), vmapped over lanes, hold no dynamic slice update and no scatter but
  the float64 scatter-adds of their final fold (the zero atoms): their
  diagonals are gathered windows and reductions. The previous layout added
  each block's complex128 window at a lane-dependent offset: a c128 scatter
  under vmap (gpu-path digest)."""
  n = 256
  A, B, LA, LB = _laws(0.05, n, np.random.default_rng(1))
  D = jnp.linspace(0.01, 0.2, 4)
  lanes = lambda x: jax.tree.map(lambda v: jnp.broadcast_to(v, (4,) + jnp.shape(v)), x)
  found = []

  def walk(j):
    for e in j.eqns:
      if "scatter" in e.primitive.name or "update_slice" in e.primitive.name:
        found.append((e.primitive.name, str(e.outvars[0].aval.dtype)))
      for p in e.params.values():
        inner = getattr(p, "jaxpr", None)
        if inner is not None:
          walk(getattr(inner, "jaxpr", inner))

  with set_layout("accelerator"):
    walk(jax.make_jaxpr(jax.vmap(lambda A, B, D: [sum_law.conv_upper(A, B, D, n, False, 4),
                                                  sum_law.conv_upper(A, A, D, n, True, 4)]))(
        lanes(A), lanes(B), D).jaxpr)
    walk(jax.make_jaxpr(jax.vmap(lambda A, B, D: [
        sum_law.conv_lower(A, B, D, n, False, 4, coarsen=1),
        sum_law.conv_lower(A, A, D, n, True, 4, coarsen=1)]))(lanes(LA), lanes(LB), D).jaxpr)
  assert found and all(f == ("scatter-add", "float64") for f in found), found
