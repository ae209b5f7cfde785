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
from jaxacct._core import batching
from jaxacct.allocation import _pld_laws, _pld_query, pld
from jaxacct.allocation import _sum_law as sl
from jaxacct.allocation._one_step import one_steps

sys.path.insert(0, os.path.dirname(__file__))
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
    jaxacct.set_layout("tpu")
  assert batching.layout() == "cpu"          # the default on a CPU machine
  with jaxacct.set_layout("accelerator"):
    assert batching.lanes_per_block(8) == 8
  assert batching.lanes_per_block(8) == 1


def test_block_size_is_a_function_of_the_device():
  with jaxacct.set_layout("accelerator"):
    b = pld.sweep_chunk()
    # CPU: a fixed 4 GiB budget, a quarter of it, 16 MB a lane
    assert b == batching.lanes_for_memory(pld.LANE_BYTES) == 64
  assert pld.sweep_chunk() == pld.SWEEP_CHUNK


def _laws(D, n, rng):
  A = sl.UpperLaw(jnp.asarray(rng.random(n) * np.exp(-np.linspace(0, 10, n))),
                  jnp.float64(0.01), jnp.float64(0.0))
  B = sl.UpperLaw(jnp.asarray(rng.random(n)), jnp.float64(0.02), jnp.float64(0.0))
  fa, fb = (1 + rng.random(n) * np.expm1(D) for _ in range(2))
  LA = sl.LowerLaw(A.p, A.p * fa, jnp.float64(0.01))
  LB = sl.LowerLaw(B.p, B.p * fb, jnp.float64(0.02))
  return A, B, LA, LB


@pytest.mark.parametrize("D", [0.2, 0.029, 0.005])
def test_pairwise_sums_equal_across_layouts(D, x64):
  """Both sums of a level (X + X and A + B), upper and lower (full resolution),
  near band and far field: the two layouts agree to rounding (1e-13 relative;
  measured <= 1e-15)."""
  n = 256
  A, B, LA, LB = _laws(D, n, np.random.default_rng(0))
  out = {}
  for lay in ("cpu", "accelerator"):
    with jaxacct.set_layout(lay):
      S, C, o = jax.jit(lambda X, A, B, D: sl.conv_upper_pair(X, A, B, D, n, 4))(
          A, A, B, jnp.float64(D))
      S2, C2, o2 = jax.jit(lambda X, A, B, D: sl.conv_lower_pair(X, A, B, D, n, 4, coarsen=1))(
          LA, LA, LB, jnp.float64(D))
      out[lay] = [np.asarray(x) for x in (S.p, C.p, S2.a, S2.g, C2.a, C2.g, o, o2)]
  for a, b in zip(out["cpu"], out["accelerator"]):
    np.testing.assert_allclose(b, a, rtol=1e-13, atol=0)


def test_round_laws_equal_across_layouts(x64):
  """The laws program of a sweep (8 lanes, t = 50, grid 256) on both layouts:
  the final laws' arrays agree to 1e-12 relative (upper and lower), and the
  log positions near 0 to 1e-14 absolute (their ulp scale is that of the whole
  axis; measured 1.3e-15)."""
  sig = np.linspace(0.6, 4.0, 8)
  tail = np.full(8, 1e-12)
  args = (*one_steps("gaussian", sig, tail, 256), sig, np.full(8, 50, np.int32), tail)
  out = {}
  for lay in ("cpu", "accelerator"):
    with jaxacct.set_layout(lay):
      out[lay] = [np.asarray(x) for x in _pld_laws.steps_laws_batch(*args, n=256, lower=True)]
  for a, b in zip(out["cpu"], out["accelerator"]):
    np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


@pytest.mark.slow
def test_sweep_equal_across_layouts():
  """The public door on both layouts (16 lanes, t = 234, E = 10): uppers to
  1e-11 relative (the epsilon solver's resolution; measured 1.7e-12 at grid
  256), lowers to 1e-5 (the lower solver's resolution; measured 7e-7)."""
  sig = np.linspace(0.5, 5.0, 16)
  res = {}
  for lay in ("cpu", "accelerator"):
    with jaxacct.set_layout(lay):
      r = pld.allocation_pld_epsilon(sigma=sig, num_steps=234, num_epochs=10, delta=1e-5)
      res[lay] = (np.asarray(r.epsilon), np.asarray(r.lower))
  np.testing.assert_allclose(res["accelerator"][0], res["cpu"][0], rtol=1e-11)
  np.testing.assert_allclose(res["accelerator"][1], res["cpu"][1], rtol=1e-5)
  assert np.all(res["accelerator"][1] <= res["accelerator"][0])


def _laws_program(lanes, t=234, n=1024):
  sig = np.linspace(0.5, 5.0, lanes)
  tail = np.full(lanes, 1e-12)
  args = (*one_steps("gaussian", sig, tail, n), sig, np.full(lanes, t, np.int32), tail)
  return _pld_laws.steps_laws_batch.lower(*args, n=n, lower=True).compile().as_text()


class _Stop(Exception):
  pass


@pytest.fixture(scope="module")
def accelerator_programs():
  """The compiled law programs of 64 and 128 lanes and the query programs of a
  64-lane sweep (t = 234; E = 10: the composition; E = 1: the direct query),
  accelerator layout. The query programs are caught at their call (their
  text recorded, the sweep stopped there)."""
  progs, saved = {}, (_pld_query.composed_batch, _pld_query.direct_batch)

  def catcher(orig, name):
    def call(*a, **k):
      progs[name] = orig.lower(*a, **k).compile().as_text()
      raise _Stop()
    call.precompile = lambda *a, **k: None
    return call

  _pld_query.composed_batch = catcher(saved[0], "composed_batch")
  _pld_query.direct_batch = catcher(saved[1], "direct_batch")
  try:
    with jax.enable_x64(True), jaxacct.set_layout("accelerator"):
      progs["laws64"], progs["laws128"] = _laws_program(64), _laws_program(128)
      sig = np.linspace(0.5, 5.0, 64)
      for e in (10, 1):
        with pytest.raises(_Stop):
          pld.allocation_pld_epsilon(sigma=sig, num_steps=234, num_epochs=e, delta=1e-5)
  finally:
    _pld_query.composed_batch, _pld_query.direct_batch = saved
  return progs


def test_at_most_two_loops_without_known_trip_count(accelerator_programs):
  """Each program of a sweep: at most 2 while loops whose trip count XLA does
  not know (the binary powering's levels, one per law: a handful of trips,
  log2 t); the CPU layout's law program has 18."""
  for name, text in accelerator_programs.items():
    unknown = [b for b, n in hlo_loops.while_loops(text) if n is None]
    assert len(unknown) <= 2, (name, unknown)
  with jax.enable_x64(True):
    cpu = _laws_program(64)
  assert sum(n is None for _, n in hlo_loops.while_loops(cpu)) > 10


def test_loops_do_not_grow_with_lanes(accelerator_programs):
  """The laws' loops and trip counts are the same at 64 and 128 lanes: no map
  or scan over lanes (the CPU layout's scan over lanes has trip count = lanes)."""
  a = sorted(n or 0 for _, n in hlo_loops.while_loops(accelerator_programs["laws64"]))
  b = sorted(n or 0 for _, n in hlo_loops.while_loops(accelerator_programs["laws128"]))
  assert a == b


def test_sweep_trips_bounded(accelerator_programs):
  """A 64-lane sweep executes at most 1,000 sequential loop trips (laws and
  query, nested loops multiplied out, each unknown loop counted at the level
  count of t = 234 plus one). The CPU layout executes ~95,000 for its laws."""
  levels = int(234).bit_length() + 1
  total = sum(hlo_loops.sequential_trips(accelerator_programs[k], levels)
              for k in ("laws64", "composed_batch"))
  assert total <= 1000, total
  assert hlo_loops.sequential_trips(accelerator_programs["direct_batch"], levels) <= 1000
