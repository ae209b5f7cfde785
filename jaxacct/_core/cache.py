"""JAX's persistent compilation cache (opt-in) and compile-time measurement.

jaxacct's kernels are module-level jitted functions with static shapes, so
their compiled executables can be stored on disk and reused by the next
process: :func:`enable_compilation_cache` turns JAX's persistent compilation
cache on (``jax_compilation_cache_dir`` and the two thresholds that decide
which executables are written). It is opt-in for library users (it writes to
disk) and on by default in the ``jaxacct`` command line.

:func:`compile_timer` measures, for a block of code, how much wall time JAX
spent tracing, lowering and compiling (or loading a compiled executable from
the persistent cache): the union of the time spans of JAX's
``/jax/core/compile/*`` monitoring events, so nested traces are not counted
twice. The rest of the block's wall time is run time.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Optional

import jax

from jaxacct._core.store import jax_cache_dir, make_private_dir

_KEYS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
         "jax_persistent_cache_min_entry_size_bytes", "jax_enable_compilation_cache")


def default_cache_dir() -> str:
  """``$JAXACCT_CACHE_DIR/jax`` (default ``~/.cache/jaxacct/jax``; :mod:`jaxacct._core.store`)."""
  return jax_cache_dir()


def _reset_jax_cache():
  """Makes JAX re-read the cache settings at the next compilation (the cache
  object is created once per process, at the first compilation)."""
  try:
    from jax._src import compilation_cache as cc
    cc.reset_cache()
  except (ImportError, AttributeError):  # older/newer jax without it: settings
    pass                                 # still apply to a fresh process


class CompilationCacheSetting:
  """The previous cache configuration; ``restore()`` puts it back.

  Also a context manager: ``with jaxacct.enable_compilation_cache(path):``
  enables the cache inside the block only.
  """

  def __init__(self, previous: dict, path: str):
    self.previous = previous
    self.path = path

  def restore(self) -> None:
    for k, v in self.previous.items():
      jax.config.update(k, v)
    _reset_jax_cache()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.restore()
    return False

  def __repr__(self):
    return f"CompilationCacheSetting(path={self.path!r})"


def enable_compilation_cache(path: Optional[str] = None, *,
                             min_compile_time_secs: float = 0.0,
                             min_entry_size_bytes: int = 0) -> CompilationCacheSetting:
  """Turns on JAX's persistent compilation cache for this process.

  Wraps ``jax.config.update("jax_compilation_cache_dir", path)`` and the
  thresholds ``jax_persistent_cache_min_compile_time_secs`` (only executables
  that took at least this long to compile are written; jax's default is 1 s)
  and ``jax_persistent_cache_min_entry_size_bytes``. A later process that
  enables the same directory loads jaxacct's compiled kernels instead of
  compiling them again (the cache key includes the jax/jaxlib version, the
  backend and the compile options, so a stale entry is never used).

  Args:
    path: cache directory (created if missing); default
      :func:`default_cache_dir`: ``jax/`` in jaxacct's cache folder
      (``$JAXACCT_CACHE_DIR``, default ``~/.cache/jaxacct``).
    min_compile_time_secs: >= 0 (default 0: cache every jaxacct kernel; jax's own
      default is 1 s).
    min_entry_size_bytes: >= 0.

  Returns:
    :class:`CompilationCacheSetting` holding the previous settings:
    ``.restore()`` undoes this call; usable as a context manager.
  """
  if not min_compile_time_secs >= 0:
    raise ValueError(f"min_compile_time_secs must be >= 0; got {min_compile_time_secs!r}.")
  if int(min_entry_size_bytes) != min_entry_size_bytes or min_entry_size_bytes < 0:
    raise ValueError(f"min_entry_size_bytes must be an integer >= 0; got "
                     f"{min_entry_size_bytes!r}.")
  if path is None:
    path = default_cache_dir()
  if not isinstance(path, (str, os.PathLike)):
    raise ValueError(f"path must be a directory path (str) or None; got {path!r}.")
  path = os.path.abspath(os.path.expanduser(os.fspath(path)))
  make_private_dir(path)     # a folder created here is 0700 (it holds executables)
  previous = {k: getattr(jax.config, k) for k in _KEYS if hasattr(jax.config, k)}
  if "jax_enable_compilation_cache" in previous:
    jax.config.update("jax_enable_compilation_cache", True)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs",
                    float(min_compile_time_secs))
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", int(min_entry_size_bytes))
  _reset_jax_cache()
  return CompilationCacheSetting(previous, path)


# ---------------------------------------------------------------------------
# compile-time measurement
# ---------------------------------------------------------------------------

_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")


class CompileTime:
  """Result of :func:`compile_timer` (filled when the block exits).

  Attributes:
    total: wall seconds of the block.
    compile: wall seconds during which JAX was tracing, lowering or compiling
      (or loading from the persistent cache); union of the event spans.
    run: ``total - compile``.
    num_compiles: number of backend compilations (cache loads included).
  """

  def __init__(self):
    self.total = self.compile = self.run = 0.0
    self.num_compiles = 0

  def __repr__(self):
    return (f"CompileTime(total={self.total:.3f}, compile={self.compile:.3f}, "
            f"run={self.run:.3f}, num_compiles={self.num_compiles})")


def _union_length(spans):
  tot, cur_s, cur_e = 0.0, None, None
  for s, e in sorted(spans):
    if cur_e is None or s > cur_e:
      if cur_e is not None:
        tot += cur_e - cur_s
      cur_s, cur_e = s, e
    else:
      cur_e = max(cur_e, e)
  if cur_e is not None:
    tot += cur_e - cur_s
  return tot


@contextlib.contextmanager
def compile_timer():
  """Context manager: how much of a block's wall time went to JAX compilation.

  Uses ``jax.monitoring`` time-span events (JAX >= 0.4.36); the listener is
  removed on exit. Only compilations on the calling thread are counted.

  Yields:
    :class:`CompileTime`, filled on exit.
  """
  from jax import monitoring
  out = CompileTime()
  spans = []
  me = threading.get_ident()

  def listener(event, start, end, **kwargs):
    del kwargs
    if event in _COMPILE_EVENTS and threading.get_ident() == me:
      spans.append((start, end))
      if event == _COMPILE_EVENTS[2]:
        out.num_compiles += 1

  register = getattr(monitoring, "register_event_time_span_listener", None)
  unregister = getattr(monitoring, "unregister_event_time_span_listener", None)
  if register is not None:
    register(listener)
  t0 = time.time()
  try:
    yield out
  finally:
    out.total = time.time() - t0
    if unregister is not None and register is not None:
      unregister(listener)
    out.compile = min(_union_length(spans), out.total)
    out.run = out.total - out.compile
