"""jaxacct's own persistent store of compiled kernels (jaxacct._core.compiled).

A second process answers from the store: the kernels it compiled in the first
process are loaded, not compiled (counted with jax.monitoring backend-compile
events, one per XLA compilation), and the answer is bit-identical. The user's
JAX configuration is untouched: JAX's own persistent cache stays unset and the
user's own programs are not written to jaxacct's directory.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxacct._core import compiled
from jaxacct._core.cache import default_cache_dir
from support import COUNT_COMPILES

_CHILD = COUNT_COMPILES + r"""
import os
import numpy as np
import jaxacct
# two lanes: one lane (a scalar, or a one-element array) is answered on the host and
# compiles nothing (jaxacct._core.namespace.for_inputs); the PLD door answers arrays
# on the host too on the CPU layout, so it runs with the accelerator layout forced
# (its block programs)
sig = np.array([1.0, 1.1])
r1 = jaxacct.poisson.epsilon(q=0.01, sigma=sig, num_steps=10000, delta=1e-5)
if "pld" in sys.argv:
  os.environ["JAXACCT_LAYOUT"] = "accelerator"   # read at each call
  r2 = jaxacct.poisson.epsilon(q=0.01, sigma=sig, num_steps=10000, delta=1e-5, method="pld")
else:
  r2 = r1
user = jax.jit(lambda x: x * 3.0 + 1.0)(jax.numpy.ones(7))   # the user's own program
from jaxacct._core.compiled import CachedJit
kernels = {f"jit({o.__name__})" for m in list(sys.modules.values())
           if getattr(m, "__name__", "").startswith("jaxacct")
           for o in list(vars(m).values()) if isinstance(o, CachedJit)}
print(json.dumps({"rdp": float(np.ravel(r1.epsilon)[0]), "pld": float(np.ravel(r2.epsilon)[0]), "counts": counts,
                  "kernels": {f: n for f, n in counts.items() if f in kernels},
                  "jax_cache_dir": jax.config.jax_compilation_cache_dir}))
"""


def _run(tmp_path, *argv, **env_extra):
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("JAX_COMPILATION_CACHE", "JAXACCT_COMPILATION_CACHE",
                              "JAXACCT_CACHE_DIR"))}
  env["JAX_ENABLE_COMPILATION_CACHE"] = "false"      # JAX's own cache off: count real compiles
  env["JAXACCT_CACHE_DIR"] = str(tmp_path / "cache")
  env.update(env_extra)
  out = subprocess.run([sys.executable, "-c", _CHILD, *argv], env=env, capture_output=True,
                       text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def _entries(tmp_path):
  root = tmp_path / "cache" / "executables"
  return sorted(p.name for p in root.rglob("*.jaxexe")) if root.exists() else []


def test_second_process_loads_instead_of_compiling(tmp_path):
  first = _run(tmp_path, "pld", JAXACCT_COMPILATION_CACHE="1")
  stored = _entries(tmp_path)
  assert len(stored) >= 3                       # rdp kernel + pld kernels at least
  assert first["kernels"]      # the first process compiled its kernels
  second = _run(tmp_path, "pld", JAXACCT_COMPILATION_CACHE="1")
  # bit-identical answers, and no kernel compiled again (all loaded from the store)
  assert second["rdp"] == first["rdp"] and second["pld"] == first["pld"]
  assert second["kernels"] == {}, second["counts"]
  assert sum(second["counts"].values()) < sum(first["counts"].values())
  assert _entries(tmp_path) == stored           # nothing new written
  # the user's JAX config is untouched, and the user's program is not stored
  assert first["jax_cache_dir"] is None and second["jax_cache_dir"] is None
  assert second["counts"].get("jit(<lambda>)") == 1


def test_switched_off_writes_nothing(tmp_path):
  out = _run(tmp_path, JAXACCT_COMPILATION_CACHE="0")
  assert _entries(tmp_path) == []
  assert out["kernels"]


def test_damaged_entry_is_compiled_again(tmp_path):
  first = _run(tmp_path, JAXACCT_COMPILATION_CACHE="1")
  for p in (tmp_path / "cache").rglob("*.jaxexe"):
    p.write_bytes(b"not an executable")
  second = _run(tmp_path, JAXACCT_COMPILATION_CACHE="1")
  assert second["rdp"] == first["rdp"] and second["pld"] == first["pld"]
  assert second["kernels"]     # compiled again ...
  third = _run(tmp_path, JAXACCT_COMPILATION_CACHE="1")
  assert third["kernels"] == {}  # ... and rewritten


def test_in_process_store_and_traced_calls(tmp_path, monkeypatch, compile_counter):
  """Concrete calls go through the store, traced ones to jax.jit; same values."""
  monkeypatch.setenv("JAXACCT_COMPILATION_CACHE", "1")
  monkeypatch.delenv("JAXACCT_COMPILATION_CACHE_DIR", raising=False)
  monkeypatch.setenv("JAXACCT_CACHE_DIR", str(tmp_path / "cache"))

  def f(x, n, *, mode):
    return jnp.cumsum(x)[:n] * (2.0 if mode == "a" else 3.0)

  k = compiled.jit(f, static_argnums=1, static_argnames="mode")
  with jax.enable_x64(True):
    x, x1 = jnp.arange(6.0), jnp.arange(1.0, 7.0)
    a = k(x, 3, mode="a")
    with compile_counter as c:
      b = k(x1, 3, mode="a")              # new value, same shapes: no compile
    assert c.count == 0
    np.testing.assert_array_equal(np.asarray(a), [0.0, 2.0, 6.0])
    np.testing.assert_array_equal(np.asarray(b), [2.0, 6.0, 12.0])
    traced = jax.jit(lambda y: k(y, 3, mode="b"))(x)
    np.testing.assert_array_equal(np.asarray(traced), [0.0, 3.0, 9.0])
    v = jax.vmap(lambda y: k(y, 2, mode="a"))(jnp.stack([x, x1]))
    np.testing.assert_array_equal(np.asarray(v), [[0.0, 2.0], [2.0, 6.0]])
  assert len(_entries(tmp_path)) == 1          # one concrete signature stored
  compiled.clear_memory()
  with jax.enable_x64(True), compile_counter as c:
    again = k(x, 3, mode="a")                  # from disk
  assert c.count == 0
  np.testing.assert_array_equal(np.asarray(again), np.asarray(a))


def test_precompile_from_shapes_serves_later_calls(tmp_path, monkeypatch, compile_counter):
  """``precompile`` with ``jax.ShapeDtypeStruct``s compiles once, runs nothing
  and writes nothing with the store off; calls of that key then run the
  executable (no compile), other keys still compile, values as jax.jit's."""
  monkeypatch.setenv("JAXACCT_COMPILATION_CACHE", "0")
  monkeypatch.delenv("JAXACCT_COMPILATION_CACHE_DIR", raising=False)
  monkeypatch.setenv("JAXACCT_CACHE_DIR", str(tmp_path / "cache"))

  def f(x, *, mode):
    return jnp.cumsum(x) * (2.0 if mode == "a" else 3.0)

  k = compiled.jit(f, static_argnames="mode")
  with jax.enable_x64(True):
    with compile_counter as c:
      assert k.precompile(jax.ShapeDtypeStruct((5,), jnp.float64), mode="a") is None
    assert c.count == 1
    x = jnp.arange(5.0)
    with compile_counter as c:
      a = k(x, mode="a")
    assert c.count == 0
    np.testing.assert_array_equal(np.asarray(a), np.asarray(jax.jit(f, static_argnames="mode")(
        x, mode="a")))
    with compile_counter as c:
      k(x, mode="b")                   # a key nobody precompiled: compiled as jax.jit does
      k(jnp.arange(6.0), mode="a")
    assert c.count == 2
  assert not (tmp_path / "cache").exists()


def test_settings(monkeypatch, tmp_path):
  """One folder setting (issue 55): JAXACCT_CACHE_DIR holds the store
  (executables/) and JAX's opt-in cache (jax/); the old
  JAXACCT_COMPILATION_CACHE_DIR still names the store, with a
  DeprecationWarning naming the new variable (ignored when both are set)."""
  for name in ("JAXACCT_CACHE_DIR", "JAXACCT_COMPILATION_CACHE_DIR"):
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert compiled.cache_dir() == os.path.join(str(tmp_path / "xdg"), "jaxacct", "executables")
  assert default_cache_dir() == os.path.join(str(tmp_path / "xdg"), "jaxacct", "jax")
  monkeypatch.setenv("JAXACCT_CACHE_DIR", str(tmp_path / "c"))
  assert compiled.cache_dir() == str(tmp_path / "c" / "executables")
  assert default_cache_dir() == str(tmp_path / "c" / "jax")
  monkeypatch.delenv("JAXACCT_CACHE_DIR")
  monkeypatch.setenv("JAXACCT_COMPILATION_CACHE_DIR", str(tmp_path / "old"))
  with pytest.warns(DeprecationWarning, match="JAXACCT_CACHE_DIR"):
    assert compiled.cache_dir() == str(tmp_path / "old")
  monkeypatch.setenv("JAXACCT_CACHE_DIR", str(tmp_path / "c"))
  with pytest.warns(DeprecationWarning, match="ignored because JAXACCT_CACHE_DIR is set"):
    assert compiled.cache_dir() == str(tmp_path / "c" / "executables")
  for off in ("0", "false", "OFF", "no"):
    monkeypatch.setenv("JAXACCT_COMPILATION_CACHE", off)
    assert not compiled.cache_enabled()
  monkeypatch.setenv("JAXACCT_COMPILATION_CACHE", "1")
  assert compiled.cache_enabled()


def test_jax_cache_hits_are_not_restored(tmp_path):
  """With JAX's own persistent cache on (a user's setting, or the CLI's opt-in),
  an executable JAX loaded from it re-serialises without its object code on
  XLA:CPU (it loads in the next process and fails with 'NOT_FOUND: Function
  ... not found'). Such executables are never written to jaxacct's store, so a
  later process without JAX's cache still answers, bit-identically."""
  jax_cache = {"JAX_ENABLE_COMPILATION_CACHE": "true",
               "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jaxcache"),
               "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
               "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
  first = _run(tmp_path, JAXACCT_COMPILATION_CACHE="0", **jax_cache)   # fills JAX's cache
  assert _entries(tmp_path) == []
  _run(tmp_path, JAXACCT_COMPILATION_CACHE="1", **jax_cache)          # JAX's cache hits
  third = _run(tmp_path, JAXACCT_COMPILATION_CACHE="1")               # JAX's cache off
  assert third["rdp"] == first["rdp"]


def test_entry_that_loads_but_cannot_run_is_compiled_again(tmp_path, monkeypatch):
  monkeypatch.setenv("JAXACCT_COMPILATION_CACHE", "1")
  monkeypatch.delenv("JAXACCT_COMPILATION_CACHE_DIR", raising=False)
  monkeypatch.setenv("JAXACCT_CACHE_DIR", str(tmp_path / "cache"))
  k = compiled.jit(lambda x: jnp.cumsum(x) * 2.0, name="test.broken_entry")
  with jax.enable_x64(True):
    x = jnp.arange(4.0)
    expected = np.asarray(k(x))
    assert len(_entries(tmp_path)) == 1
    compiled.clear_memory()

    def broken(*args, **kwargs):
      raise RuntimeError("NOT_FOUND: Function broadcast_minimum_fusion not found")

    monkeypatch.setattr(compiled, "_read", lambda *a: broken)
    np.testing.assert_array_equal(np.asarray(k(x)), expected)   # compiled again, answered
    monkeypatch.undo()
  assert len(_entries(tmp_path)) == 1     # the bad entry was replaced by a good one
