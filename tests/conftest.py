"""Test configuration.

The library never flips the global x64 flag; the tests don't either, so that
the float32-user situation is exercised too. Tests that call jittable kernels
directly wrap them in ``jax.enable_x64(True)`` (fixture ``x64``).
"""

import atexit
import os
import shutil
import sys
import tempfile

# jaxacct's own store of compiled kernels (jaxacct._core.compiled) is off for
# the suite: the compile counters below count XLA compilations, and the store
# would turn a kernel another test session compiled into a silent load.
# tests/_core/test_compiled_cache.py turns it on in its own subprocesses.
os.environ.setdefault("JAXACCT_COMPILATION_CACHE", "0")
# A worker that aborts inside XLA (issue 67: JAX's cache write, now and then) prints
# glibc's own message (a heap check, say) to stderr beside the Python stacks.
os.environ.setdefault("LIBC_FATAL_STDERR_", "1")

# One persistent compilation cache folder per test process: the controlling
# process creates the session's folder, empty, and each xdist worker (and the
# controller) compiles into a folder of its own inside it, which the
# subprocesses its tests start share. A kernel a worker compiled for some shapes
# is loaded, not compiled again, by its later tests and subprocesses. About 80 %
# of the suite's time is JAX compilation. A load is counted as a compilation by
# the compile counters below and by jaxacct.compile_timer (JAX reports it as
# the same backend-compile event), so the no-retrace checks keep their meaning.
# The folder is removed at exit; set JAX_COMPILATION_CACHE_DIR yourself to keep
# (or avoid) it.
# Workers do not share one folder: JAX writes an entry in place, so a process
# can read an entry another is still writing (see jax-ml/jax#22718). (The
# workers' aborts in JAX's cache write, issue 67, were not that: a worker that
# keeps thousands of compiled programs passes the kernel's cap on memory
# mappings; tests/map_guard.py and the teardown hook below.) Within a worker,
# JAX's file lock (a maximum size set, ``filelock`` installed: test extra)
# serialises the reads and writes of the subprocesses that run at once; without
# it the cache is off.
def _filelock_available():
  try:
    import filelock  # noqa: F401
  except ImportError:
    return False
  return True


_ROOT_ENV = "JAXACCT_TESTS_JAX_CACHE_ROOT"
if ("PYTEST_XDIST_WORKER" not in os.environ and "JAX_COMPILATION_CACHE_DIR" not in os.environ
    and _filelock_available()):
  _CACHE = tempfile.mkdtemp(prefix="jaxacct-tests-jit-")
  os.environ[_ROOT_ENV] = _CACHE
  os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(_CACHE, "main")
  os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(16 * 2**30)   # enables the lock
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
elif ("PYTEST_XDIST_WORKER" in os.environ and os.environ.get(_ROOT_ENV)
      and os.environ.get("JAX_COMPILATION_CACHE_DIR")
      == os.path.join(os.environ[_ROOT_ENV], "main")):
  # a worker: its own folder (the controller's setting is the one it inherited)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(
      os.environ[_ROOT_ENV], os.environ["PYTEST_XDIST_WORKER"])

# Expensive tables a test module builds once are session-scoped fixtures: a
# module-scoped one is rebuilt whenever xdist interleaves another module's
# tests on the same worker. pyproject.toml sets --dist loadscope, so one
# worker runs a whole module and builds its tables once (xdist 3.8's
# --dist loadgroup did not group by xdist_group marks under pytest 9.2 here).

import jax  # noqa: E402  (after the cache environment above)
import pytest  # noqa: E402

if os.environ.get(_ROOT_ENV) and os.environ.get("JAX_COMPILATION_CACHE_DIR", "").startswith(
    os.environ[_ROOT_ENV]):      # where jax was imported before this file set it
  jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
  """At each test module's end, drops the compiled programs of a process that holds
  over a third of the kernel's cap on memory mappings (:mod:`map_guard`; issue 67:
  past the cap LLVM aborts the worker)."""
  yield
  if nextitem is None or nextitem.module is not item.module:
    import map_guard
    map_guard.drop_programs_if_crowded()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  """``--dist loadscope`` that survives a crashed worker (:mod:`xdist_scope`)."""
  if config.getoption("dist") == "loadscope":
    from xdist_scope import CrashSafeLoadScope
    return CrashSafeLoadScope(config, log)
  return None


@pytest.fixture
def x64():
  with jax.enable_x64(True):
    yield


class CompileCounter:
  """Counts XLA backend compilations while active (``jax.monitoring`` events)."""

  def __init__(self):
    self.count = 0
    self.active = False

  def _listener(self, name, duration, **kwargs):
    if self.active and name == "/jax/core/compile/backend_compile_duration":
      self.count += 1

  def __enter__(self):
    self.count = 0
    self.active = True
    return self

  def __exit__(self, *exc):
    self.active = False
    return False


_COUNTER = CompileCounter()
jax.monitoring.register_event_duration_secs_listener(_COUNTER._listener)


@pytest.fixture
def compile_counter():
  """Context manager counting backend compilations: ``with compile_counter as c: ...``."""
  return _COUNTER


# Opt-in compile profile: JAXACCT_COMPILE_PROFILE=DIR writes one JSON line per
# JAX compile-stage event (test id, stage, function, seconds) to
# DIR/<worker>.jsonl. About 80 % of this suite's time is JAX compilation; this
# is how to see which kernels and tests pay it.
_PROFILE_DIR = os.environ.get("JAXACCT_COMPILE_PROFILE")
if _PROFILE_DIR:
  import json

  _STAGES = {"/jax/core/compile/jaxpr_trace_duration": "trace",
             "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
             "/jax/core/compile/backend_compile_duration": "compile"}
  _CURRENT = {"test": "<collection>"}
  os.makedirs(_PROFILE_DIR, exist_ok=True)
  _PROFILE_FILE = open(os.path.join(
      _PROFILE_DIR, os.environ.get("PYTEST_XDIST_WORKER", "main") + ".jsonl"), "a")

  def _profile_listener(name, duration, **kwargs):
    stage = _STAGES.get(name)
    if stage:
      _PROFILE_FILE.write(json.dumps({"test": _CURRENT["test"], "stage": stage,
                                      "fun": kwargs.get("fun_name", "?"),
                                      "secs": duration}) + "\n")

  jax.monitoring.register_event_duration_secs_listener(_profile_listener)

  @pytest.hookimpl(tryfirst=True)
  def pytest_runtest_setup(item):
    _CURRENT["test"] = item.nodeid
