"""Where the float64 programs run: the host CPU where the default device has none.

A TPU has neither float64 nor complex128 ("Element type C128 is not supported
on TPU", jax-ml/jax#10158). ``jaxacct._core.sharding.float64_device`` names the
device jaxacct's float64 programs run on: the default device, unless its
platform cannot run float64 (a TPU, or one listed in
``JAXACCT_FLOAT32_BACKENDS``), then the host's CPU; or the backend named by
``jaxacct.set_backend`` / ``JAXACCT_BACKEND``. Checked without a TPU: in a
subprocess with two forced host devices, the user's default device is
``cpu:1`` (the "accelerator") and the CPU platform is declared float32-only;
every door answers with the values of a plain CPU run, its results and
programs on ``cpu:0``, no program compiled for ``cpu:1`` holds f64 or c128
(every compile is recorded with its device assignment), and the user's
config (x64 off, default device ``cpu:1``) and arrays are left as they were.
"""

import json
import os
import subprocess
import sys

import jax
import pytest

import jaxacct
from jaxacct._core import batching, sharding

_SCRIPT = r"""
import json, os, re, sys
import numpy as np
import jax
from jax._src import compiler

seen = []                    # (program, devices, holds f64/c128) of every compile
_orig = compiler.backend_compile_and_load


def _hook(backend, module, devices, options, host_callbacks):
  seen.append((str(module.operation.attributes["sym_name"]),
               sorted(str(d) for d in devices),
               bool(re.search(r"\bf64\b|complex<f64>", str(module)))))
  return _orig(backend, module, devices, options, host_callbacks)


compiler.backend_compile_and_load = _hook
from jaxacct import poisson, shuffle, tracking
from jaxacct.accounting import events as ev
from jaxacct.allocation import pld

d = jax.devices()
user = jax.device_put(np.array([1.0, 2.0], np.float32), d[1])  # the user's array there
calls = {
    "poisson_pld": lambda: poisson.epsilon(q=0.01, sigma=1.0, num_steps=100, delta=1e-5,
                                           method="pld"),
    "poisson_rdp": lambda: poisson.epsilon(q=0.01, sigma=user, num_steps=100, delta=1e-5),
    "shuffle": lambda: shuffle.epsilon(n=10000, eps0=1.0, delta=1e-6),
    "table": lambda: tracking.epsilon_table(tracking.EventAccountant(
        ev.PoissonSampledDpEvent(0.01, ev.GaussianDpEvent(1.0))), num_steps=40, delta=1e-5),
    "allocation_sweep": lambda: pld.allocation_pld_epsilon(
        sigma=np.linspace(0.8, 3.0, 5), steps_per_epoch=20, num_epochs=2, delta=1e-5,
        grid_size=64),
    "poisson_pld_array": lambda: poisson.epsilon(q=0.01, sigma=np.array([0.8, 1.5]),
                                                 num_steps=100, delta=1e-5, method="pld"),
}
doors = sys.argv[1].split(",")


def answers():
  res, devs = {}, set()
  for k in doors:
    r = calls[k]()
    for x in ([r] if isinstance(r, np.ndarray) else [r.epsilon, getattr(r, "lower", None)]):
      if x is not None:
        devs |= {str(v) for v in x.devices()} if isinstance(x, jax.Array) else set()
        res.setdefault(k, []).append(np.asarray(x).tolist())
  return res, devs


jax.config.update("jax_default_device", d[1])     # the user's "accelerator"
os.environ["JAXACCT_FLOAT32_BACKENDS"] = "cpu"    # declared without float64
forced, fdevs = answers()
fseen = list(seen)
after = [bool(jax.config.jax_enable_x64), str(jax.config.jax_default_device),
         sorted(str(v) for v in user.devices())]
jax.config.update("jax_default_device", None)    # a plain CPU run
del os.environ["JAXACCT_FLOAT32_BACKENDS"]
with jax.default_device(d[0]):
  ref, _ = answers()
print(json.dumps({"forced": forced, "ref": ref, "devices": sorted(fdevs), "after": after,
                  "f64_on_accelerator": [s for s in fseen if s[1] != ["cpu:0"] and s[2]],
                  "on_accelerator": [s[0] for s in fseen if s[1] != ["cpu:0"]],
                  "f64_on_cpu0": sum(s[2] for s in fseen if s[1] == ["cpu:0"])}))
"""


def _forced(doors):
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAXACCT_COMPILATION_CACHE="0",
             XLA_FLAGS=(os.environ.get("XLA_FLAGS", "")
                        + " --xla_force_host_platform_device_count=2").strip())
  env.pop("JAXACCT_FLOAT32_BACKENDS", None)
  env.pop("JAXACCT_BACKEND", None)
  out = subprocess.run([sys.executable, "-c", _SCRIPT, ",".join(doors)], env=env,
                       capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def _check(got, doors):
  assert sorted(got["forced"]) == sorted(doors)
  assert got["forced"] == got["ref"]                    # bit for bit (JSON floats)
  assert got["devices"] in ([], ["cpu:0"]), got["devices"]
  assert got["f64_on_accelerator"] == [] and got["on_accelerator"] == [], got
  assert got["after"] == [False, "cpu:1", ["cpu:1"]], got["after"]


def test_doors_run_on_the_host_cpu_where_the_default_device_has_no_float64():
  """Poisson PLD (a scalar: the host formula) and RDP (the user's float32
  array committed to the "accelerator": read there, answered on cpu:0 by the
  jitted kernel), the shuffle bound and the hook's table: the values of a
  plain CPU run, bit for bit, and every program they compile on cpu:0."""
  doors = ["poisson_pld", "poisson_rdp", "shuffle", "table"]
  got = _forced(doors)
  _check(got, doors)
  assert got["devices"] == ["cpu:0"] and got["f64_on_cpu0"] >= 1


@pytest.mark.slow
def test_array_sweeps_run_on_the_host_cpu_where_the_default_device_has_no_float64():
  """The allocation PLD epsilon sweep (5 lanes: its law and query programs)
  and the Poisson PLD over an array of sigmas, as above (measured: 3 programs
  of the sweep, all on cpu:0, 0 on the "accelerator")."""
  doors = ["allocation_sweep", "poisson_pld_array"]
  got = _forced(doors)
  _check(got, doors)
  assert got["f64_on_cpu0"] >= 3


def test_backend_setting(monkeypatch):
  """``jaxacct.set_backend`` / ``JAXACCT_BACKEND``: "auto" follows the
  default device; a platform name picks that backend's first device; a
  platform without float64 is refused (ValueError naming the setting), and
  a backend this process has not started raises naming it."""
  monkeypatch.delenv("JAXACCT_BACKEND", raising=False)
  monkeypatch.delenv("JAXACCT_FLOAT32_BACKENDS", raising=False)
  cpu = jax.devices("cpu")[0]
  assert sharding.backend() == "auto" and sharding.float64_device() == cpu
  with jaxacct.set_backend("cpu") as name:
    assert name == "cpu" and sharding.float64_device() == cpu
    with sharding.float64_placement() as moved:
      assert moved is None                   # already the default device
  assert sharding.backend() == "auto"
  for bad in ("tpu", "TPU", "", 3):
    with pytest.raises(ValueError, match="name must"):
      jaxacct.set_backend(bad)
  monkeypatch.setenv("JAXACCT_BACKEND", "tpu")
  with pytest.raises(ValueError, match="JAXACCT_BACKEND must name a backend that runs float64"):
    sharding.float64_device()
  monkeypatch.setenv("JAXACCT_BACKEND", "auto")
  monkeypatch.setenv("JAXACCT_FLOAT32_BACKENDS", "metal, cpu")
  assert sharding.float32_platforms() == {"tpu", "metal", "cpu"}
  assert sharding.float64_device() == cpu    # the host CPU runs float64
  assert batching.layout() == "cpu"
  monkeypatch.delenv("JAXACCT_FLOAT32_BACKENDS")
  if not any(d.platform == "gpu" for d in jax.devices()):
    with jaxacct.set_backend("gpu"):
      with pytest.raises(RuntimeError, match="'gpu' backend"):
        sharding.float64_device()


def test_hook_update_in_the_users_jit_is_float32_clean():
  """The tracking hook's in-training part (its ``update`` under the user's
  ``jit``, x64 off): its optimised HLO holds no f64, c128, s64 or u64, so it
  runs on a TPU beside the user's step (the float64 table is computed when
  the hook is built, on the float64 device)."""
  import re

  import jax.numpy as jnp

  from jaxacct import tracking
  from jaxacct.accounting import events as ev
  assert not jax.config.jax_enable_x64
  acc = tracking.EventAccountant(ev.PoissonSampledDpEvent(0.01, ev.GaussianDpEvent(1.0)))
  tx = tracking.track_privacy(acc, num_steps=40, delta=1e-5)
  params = {"w": jnp.ones(3)}
  state = tx.init(params)
  step = jax.jit(lambda u, s: tx.update(u, s, params))
  text = step.lower(params, state).compile().as_text()
  assert re.findall(r"\b(?:f64|c128|s64|u64)\[", text) == []
  updates, state = step(params, state)
  assert updates["w"].dtype == jnp.float32 and int(state.count) == 1
