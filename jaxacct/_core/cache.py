"""JAX's persistent compilation cache (opt-in) and compile-time measurement.

jaxacct's kernels are module-level jitted functions with static shapes, so
their compiled executables can be stored on disk and reused by the next
process: :func:`enable_compilation_cache` turns JAX's persistent compilation
cache on (``jax_compilation_cache_dir`` and the two thresholds that decide
which executables are written). It is opt-in for library users (it writes to
disk) and on by default in the ``jaxacct`` command line. Processes that share
the folder never see a file being written: each writes a folder of its own,
seeded with links to the published entries, and publishes its new entries
with ``os.rename`` when it restores the setting or exits.

:func:`compile_timer` measures, for a block of code, how much wall time JAX
spent tracing, lowering and compiling (or loading a compiled executable from
the persistent cache): the union of the time spans of JAX's
``/jax/core/compile/*`` monitoring events, so nested traces are not counted
twice. The rest of the block's wall time is run time.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from typing import Optional

import jax

from jaxacct._core.store import jax_cache_dir, make_private_dir

_KEYS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
         "jax_persistent_cache_min_entry_size_bytes", "jax_enable_compilation_cache",
         "jax_compilation_cache_max_size", "jax_persistent_cache_enable_xla_caches")
#: This process's own cache folders (see :func:`enable_compilation_cache`),
#: published at exit where ``restore()`` has not published them.
_PRIVATE_PREFIX = ".process-"
_ENTRY_SUFFIX = "-cache"          # how JAX names an entry file
_ORPHAN_AGE = 86400.0             # seconds: a folder of another host's process
_LIVE: dict = {}                  # private folder -> (published folder, pid)


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


def _own_regular(st) -> bool:
  """A regular file of this user's that no one else can write (the store's rule)."""
  return (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
          and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _prune_private(path: str) -> None:
  """Removes the private folders of processes that are gone (this host's, by
  process id) or old (another host's)."""
  host = socket.gethostname()
  try:
    names = os.listdir(path)
  except OSError:
    return
  for name in names:
    if not name.startswith(_PRIVATE_PREFIX):
      continue
    d = os.path.join(path, name)
    owner_host, _, rest = name[len(_PRIVATE_PREFIX):].rpartition("@")
    pid = rest.split("-")[0]
    try:
      if owner_host == host and pid.isdigit():
        if int(pid) == os.getpid():
          continue
        try:
          os.kill(int(pid), 0)
          continue                   # alive
        except ProcessLookupError:
          pass
        except PermissionError:
          continue                   # alive, another user's
      elif os.lstat(d).st_mtime > time.time() - _ORPHAN_AGE:
        continue
    except OSError:
      continue
    shutil.rmtree(d, ignore_errors=True)


def _private_dir(path: str) -> str:
  """A new folder of this process's own under ``path``, holding hard links
  to the entries published there (regular files of this user's only)."""
  _prune_private(path)
  d = tempfile.mkdtemp(prefix=f"{_PRIVATE_PREFIX}{socket.gethostname()}@{os.getpid()}-",
                       dir=path)
  for name in os.listdir(path):
    if not name.endswith(_ENTRY_SUFFIX):
      continue
    src = os.path.join(path, name)
    try:
      if _own_regular(os.lstat(src)):
        os.link(src, os.path.join(d, name), follow_symlinks=False)
    except OSError:     # no hard links here, or gone meanwhile: a miss, compiled again
      pass
  _LIVE[d] = (path, os.getpid())
  return d


def _publish(private: str) -> None:
  """Moves the entries this process wrote (not the linked ones) from its
  folder into the published one, each with one ``os.rename`` (a reader sees
  the whole file or none), then removes its folder."""
  path, pid = _LIVE.pop(private, (None, None))
  if path is None or pid != os.getpid():     # a forked child leaves its parent's folder
    return
  try:
    names = os.listdir(private)
  except OSError:
    names = []
  for name in names:
    src, dst = os.path.join(private, name), os.path.join(path, name)
    try:
      st = os.lstat(src)
      if (name.endswith(_ENTRY_SUFFIX) and _own_regular(st) and st.st_nlink == 1
          and not os.path.lexists(dst)):
        os.rename(src, dst)
    except OSError:
      pass
  shutil.rmtree(private, ignore_errors=True)


@atexit.register
def _publish_all() -> None:
  for d in list(_LIVE):
    _publish(d)


class CompilationCacheSetting:
  """The previous cache configuration; ``restore()`` puts it back.

  Also a context manager: ``with jaxacct.enable_compilation_cache(path):``
  enables the cache inside the block only.
  """

  def __init__(self, previous: dict, path: str, private: Optional[str] = None):
    self.previous = previous
    self.path = path
    self.private = private

  def restore(self) -> None:
    """Puts the previous settings back and publishes this setting's new entries."""
    for k, v in self.previous.items():
      jax.config.update(k, v)
    _reset_jax_cache()
    if self.private is not None:
      _publish(self.private)

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
  Processes may share the directory: this one compiles into a folder of its
  own inside it (``jax_compilation_cache_dir`` names that folder), which
  starts with links to the entries published so far, and its new entries are
  moved into ``path`` (one ``os.rename`` each) by ``restore()`` or at exit.
  JAX's GPU autotuning cache (``jax_persistent_cache_enable_xla_caches``) is
  off meanwhile.

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
  private = _private_dir(path)
  previous = {k: getattr(jax.config, k) for k in _KEYS if hasattr(jax.config, k)}
  if "jax_enable_compilation_cache" in previous:
    jax.config.update("jax_enable_compilation_cache", True)
  if "jax_compilation_cache_max_size" in previous:   # no eviction in a folder of one's own
    jax.config.update("jax_compilation_cache_max_size", -1)
  if "jax_persistent_cache_enable_xla_caches" in previous:
    # XLA's own caches (GPU autotuning) would put the folder's path into every
    # program's cache key, and write the folder from C++ outside this scheme
    jax.config.update("jax_persistent_cache_enable_xla_caches", "")
  jax.config.update("jax_compilation_cache_dir", private)
  jax.config.update("jax_persistent_cache_min_compile_time_secs",
                    float(min_compile_time_secs))
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", int(min_entry_size_bytes))
  _reset_jax_cache()
  return CompilationCacheSetting(previous, path, private)


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
