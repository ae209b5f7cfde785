"""``jit``: ``jax.jit`` plus jaxacct's own persistent store of compiled kernels.

Most users ask one question per process (a script, a notebook after a restart,
CI, the command line), and there the first answer is mostly XLA compilation.
Every module-level kernel of jaxacct is jitted with :func:`jit` instead of
``jax.jit``: a call with concrete arguments looks the executable up by a key
(the kernel, its static arguments, the shapes/dtypes of the others, the x64
mode, the backend and device, the jax/jaxlib versions, ``XLA_FLAGS``, the CPU,
and a hash of jaxacct's own source), first in memory, then on disk; a miss is
compiled once (``lower().compile()``) and written to disk, so the next process
loads it instead of compiling it again.

Scope. JAX's own persistent cache (``jax_compilation_cache_dir``) is one
object per process, created at the first compilation with the directory
configured then, and it serves every later compilation in the process, the
user's too: entering the setting only around jaxacct's calls would still send
the user's own programs to jaxacct's directory. So this store is separate: it
holds only jaxacct's kernels, it changes no JAX setting, and JAX's cache, if
the user configured one, keeps working for everything else (our misses are
compiled through it as usual).

Settings (environment, read at each call; the one place that lists them is
the docs' "Caches" section, docs/how-to/sweeps.md):

* ``JAXACCT_COMPILATION_CACHE=0`` (or ``false``/``off``/``no``) turns the store
  off: kernels are plain ``jax.jit`` functions (the benchmarks and cold-start
  checks run so).
* ``JAXACCT_CACHE_DIR``: jaxacct's cache folder; the store is its
  ``executables/`` (default ``~/.cache/jaxacct/executables``;
  :mod:`jaxacct._core.store`, which also checks every entry before loading it).
* ``JAXACCT_COMPILATION_CACHE_MAX_BYTES``: size cap (default 2 GiB); the
  oldest entries are removed when a write passes it.

Traced arguments (a call inside the user's ``jit``/``vmap``/``grad``) go to
the plain ``jax.jit`` function, as do static arguments that have no stable
text form (anything but None, bool, int, float, str, tuples of those and
module-level functions): those calls are cached by JAX in memory only. An
entry that is missing, refused or cannot be loaded is compiled again and
replaced; a directory that cannot be written leaves the store in memory only,
silently.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import platform
import sys
import threading
from typing import Any, Callable, Optional

import jax
import numpy as np

from jaxacct._core import store
from jaxacct._core.batching import layout
from jaxacct._core.sharding import device_key, float64_placement

_OFF = ("0", "false", "off", "no")
#: XLA options of the large vmapped kernels. XLA:GPU's fusion autotuner times
#: Triton candidates of every large fusion while compiling, which makes a large
#: block's compilation far longer (bench/results has the measurement): off here.
#: Given per kernel (top-level calls only); the CPU backend ignores it.
ACCELERATOR_OPTIONS = {"xla_gpu_experimental_enable_fusion_autotuner": False}
_DEFAULT_MAX_BYTES = 2 * 2**30
_LOCK = threading.Lock()
# JAX persistent-cache hits seen by each thread (see _count_hit): JAX records
# the event in the thread that compiles, and another thread's hit (a tracking
# table computed in the background) says nothing of this thread's compile.
_JAX_CACHE_HITS = threading.local()
_UNVERIFIED = set()        # keys whose executable came from disk and has not run yet
_REFUSED: list = []        # (entry path, why) of entries found on disk and not loaded


def _count_hit(event: str, **kwargs) -> None:
  if event == "/jax/compilation_cache/cache_hits":
    _JAX_CACHE_HITS.count = _cache_hits() + 1


def _cache_hits() -> int:
  return getattr(_JAX_CACHE_HITS, "count", 0)


jax.monitoring.register_event_listener(_count_hit)
_MEMORY: dict = {}   # full key -> loaded executable (all CachedJit objects)
_FINGERPRINT: list = []


def cache_enabled() -> bool:
  """Whether the on-disk store is on (``JAXACCT_COMPILATION_CACHE``, default on)."""
  return os.environ.get("JAXACCT_COMPILATION_CACHE", "1").strip().lower() not in _OFF


def cache_dir() -> str:
  """The store's directory (``$JAXACCT_CACHE_DIR/executables``, :mod:`jaxacct._core.store`)."""
  return store.executables_dir()


def refused() -> list:
  """``(path, why)`` of each entry this process found on disk and refused
  (another key's entry, a bad checksum, another owner, ...): each was compiled
  again and replaced."""
  with _LOCK:
    return list(_REFUSED)


def clear_memory() -> None:
  """Forgets the executables loaded in this process (the disk store stays)."""
  with _LOCK:
    _MEMORY.clear()


@functools.lru_cache(maxsize=None)
def source_hash() -> str:
  """Hash of jaxacct's own .py files (a changed kernel never loads a stale entry)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  h = hashlib.sha256()
  for d, dirs, files in sorted(os.walk(root)):
    dirs.sort()
    for f in sorted(files):
      if f.endswith(".py"):
        p = os.path.join(d, f)
        h.update(os.path.relpath(p, root).encode())
        with open(p, "rb") as fh:
          h.update(fh.read())
  return h.hexdigest()


def _cpu_flags() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith(("flags", "Features")):
          return hashlib.sha256(line.encode()).hexdigest()[:16]
  except OSError:
    pass
  return platform.processor()


def _fingerprint() -> str:
  """What every key shares: versions, source, backend, device, flags, CPU."""
  if not _FINGERPRINT:
    from importlib import metadata
    try:
      jaxlib_version = metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
      jaxlib_version = "?"
    dev = jax.devices()[0]
    parts = (store.FORMAT, sys.version_info[:2], jax.__version__, jaxlib_version,
             source_hash(), jax.default_backend(), getattr(dev, "device_kind", ""),
             len(jax.devices()), jax.process_count(), os.environ.get("XLA_FLAGS", ""),
             platform.machine(), _cpu_flags())
    _FINGERPRINT.append(repr(parts))
  return _FINGERPRINT[0]


def _stable(v) -> Optional[str]:
  """A text form of a static value that is the same in every process, or None."""
  if v is None or isinstance(v, (bool, int, float, str)):
    return repr((type(v).__name__, v))
  if isinstance(v, (np.integer, np.floating, np.bool_)):
    return repr((type(v).__name__, v.item()))
  if isinstance(v, tuple):
    inner = [_stable(x) for x in v]
    return None if any(x is None for x in inner) else "(" + ",".join(inner) + ")"
  if callable(v):
    mod, qual = getattr(v, "__module__", None), getattr(v, "__qualname__", None)
    if mod and qual and "<" not in qual:
      return f"fn:{mod}.{qual}"
  return None


def _aval(x) -> Optional[tuple]:
  if isinstance(x, jax.core.Tracer):
    return None
  if isinstance(x, (bool, int, float, complex)):     # Python scalars: weakly typed
    return (type(x).__name__,)
  if hasattr(x, "shape") and hasattr(x, "dtype"):
    return (tuple(x.shape), str(x.dtype), bool(getattr(x, "weak_type", False)))
  return ("?", type(x).__name__)


class CachedJit:
  """A jitted kernel whose executables are stored on disk (see module docstring)."""

  def __init__(self, fun: Callable, static_argnames, static_argnums, jit_kwargs,
               name: Optional[str] = None):
    self._fun = fun
    # XLA options of this kernel's own compilations (a top-level program only:
    # a call inside the user's jit is compiled with the user's program)
    self._options = dict(jit_kwargs.pop("compiler_options", None) or {})
    sig = inspect.signature(fun)
    params = list(sig.parameters.values())
    names = set(static_argnames or ())
    for i in static_argnums or ():
      names.add(params[i].name)
    self._sig = sig
    self._positional = [p.name for p in params
                        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    self._static = frozenset(names)
    # one jax.jit object per layout (jaxacct._core.batching.layout): the
    # layout is read at trace time, and jax.jit's own trace cache knows
    # nothing of it, so a switched layout gets its own traces
    self._jit_args = (tuple(sorted(names)) or None, jit_kwargs)
    self._by_layout = {}
    self._varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    self._name = name or f"{fun.__module__}.{fun.__qualname__}"
    self._precompiled = False   # precompile() put an executable in _MEMORY
    functools.update_wrapper(self, fun)

  @property
  def _jitted(self):
    lay = layout()
    j = self._by_layout.get(lay)
    if j is None:
      names, kw = self._jit_args
      fun = self._fun
      # a function object of its own: JAX caches traces per function, across
      # jax.jit objects
      own = functools.wraps(fun)(lambda *a, **k: fun(*a, **k))
      j = self._by_layout.setdefault(lay, jax.jit(own, static_argnames=names, **kw))
    return j

  # the plain jax.jit object of the layout in force, for lowering/inspection
  # by tests and tools
  @property
  def jitted(self):
    return self._jitted

  def lower(self, *args, **kwargs):
    return self._jitted.lower(*args, **kwargs)

  def __getattr__(self, name):       # eval_shape, trace, ... of the jax.jit object
    if name.startswith("__") or name in ("_jitted", "_by_layout", "_fun", "_jit_args",
                                         "_options"):
      raise AttributeError(name)
    return getattr(self._jitted, name)

  def _key(self, args, kwargs):
    """``(key, dynamic args, dynamic kwargs)`` of a call, or None where the
    call has no stable key (traced arguments, unstable static values)."""
    try:
      bound = self._sig.bind(*args, **kwargs)
    except TypeError:
      return None
    statics = []
    for name in sorted(self._static):
      if name in bound.arguments:
        v = bound.arguments[name]
      elif name in kwargs:                     # a static caught by **kwargs
        v = kwargs[name]
      else:
        p = self._sig.parameters.get(name)
        v = None if p is None else p.default
      s = _stable(v)
      if s is None:
        return None
      statics.append((name, s))
    # the dynamic arguments in the caller's own form, as jax.jit sees them
    n_pos = len(self._positional)
    if len(args) > n_pos and not self._varargs:
      return None
    dyn_args = tuple(a for i, a in enumerate(args)
                     if i >= n_pos or self._positional[i] not in self._static)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static}
    leaves, tree = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
    avals = []
    for leaf in leaves:
      a = _aval(leaf)
      if a is None:                       # traced: the user's jit/vmap/grad
        return None
      avals.append(a)
    x64 = bool(jax.config.jax_enable_x64)
    parts = (self._name, statics, str(tree), avals, x64, layout(), sorted(self._options.items()))
    dev = device_key()    # a device of a lanes mesh (None: the default device)
    return (repr(parts if dev is None else parts + (dev,)), dyn_args, dyn_kwargs)

  def precompile(self, *args, **kwargs) -> None:
    """Compiles the program of a call with these arguments (arrays or
    ``jax.ShapeDtypeStruct``s, the static ones as values) without running it,
    into the in-process store: a later call of the same key runs it, with the
    disk store off too (and it is written to disk where the store is on). A
    sweep compiles its query program this way on one core while the other
    compiles and runs the laws (:func:`jaxacct.allocation.pld._query.run_chunks`).
    Arguments with no stable key compile nothing here."""
    with float64_placement():   # the float64 device (a TPU's host CPU), in any thread
      self._precompile(args, kwargs)

  def _precompile(self, args, kwargs):
    k = self._key(args, kwargs)
    if k is None or k[0] in _MEMORY:
      return
    self._load_or_compile(k[0], args, kwargs, use_disk=cache_enabled(), save=cache_enabled())
    self._precompiled = True

  def __call__(self, *args, **kwargs):
    with float64_placement():   # the float64 device (a TPU's host CPU), in any thread
      return self._call(args, kwargs)

  def _call(self, args, kwargs):
    enabled = cache_enabled()
    if not (enabled or self._precompiled or self._options):
      return self._jitted(*args, **kwargs)
    k = self._key(args, kwargs)
    if k is None:
      return self._jitted(*args, **kwargs)
    key, dyn_args, dyn_kwargs = k
    exe = _MEMORY.get(key)
    if exe is None:
      if not (enabled or self._options):   # a key nobody precompiled: the plain jitted call
        return self._jitted(*args, **kwargs)
      exe = self._load_or_compile(key, args, kwargs, use_disk=enabled, save=enabled)
    if key not in _UNVERIFIED:
      return exe(*dyn_args, **dyn_kwargs)
    # First run of an executable read from disk: an entry that loads but cannot
    # run (XLA:CPU can serialise an executable without its object code) is
    # dropped and compiled again, never surfaced to the user.
    try:
      out = exe(*dyn_args, **dyn_kwargs)
    except Exception:   # noqa: BLE001
      with _LOCK:
        _MEMORY.pop(key, None)
        _UNVERIFIED.discard(key)
      bad = _identity(self._path(key))
      exe = self._load_or_compile(key, args, kwargs, use_disk=False)   # replaces the entry
      if bad is not None and _identity(self._path(key)) == bad:
        self._forget(key)     # not replaced (a JAX cache hit is not stored): drop it
      return exe(*dyn_args, **dyn_kwargs)
    _UNVERIFIED.discard(key)
    return out

  def _path(self, key):
    return store.entry_path(cache_dir(), _fingerprint() + key)

  def _forget(self, key):
    try:
      os.remove(self._path(key))
    except OSError:
      pass

  def _load_or_compile(self, key, args, kwargs, use_disk=True, save=True):
    path = self._path(key) if (use_disk or save) else None
    exe = _read(path, _fingerprint() + key, _run_device()) if use_disk else None
    if exe is not None:
      _UNVERIFIED.add(key)
    else:
      hits = _cache_hits()
      compiled = self._jitted.lower(*args, **kwargs).compile(
          compiler_options=self._options or None)
      exe = compiled
      # An executable that JAX itself loaded from its own persistent cache (the
      # user's, or the CLI's opt-in) re-serialises without its object code on
      # XLA:CPU: it would load in the next process and fail to run. Only
      # executables compiled here are stored.
      if save and _cache_hits() == hits:
        _write(path, _fingerprint() + key, compiled)
    with _LOCK:
      _MEMORY[key] = exe
    return exe

  def __repr__(self):
    return f"jaxacct.jit({self._name})"


def _identity(path):
  """``(device, inode, mtime)`` of the file at ``path`` (None: none there)."""
  try:
    st = os.lstat(path)
  except OSError:
    return None
  return (st.st_dev, st.st_ino, st.st_mtime_ns)


def _run_device():
  """The device a call made now runs on (what its executable is compiled for)."""
  d = jax.config.jax_default_device
  if isinstance(d, jax.Device):
    return d
  return jax.local_devices(backend=d if isinstance(d, str) else None)[0]


def _read(path, full_key, device):
  """The executable of the entry at ``path`` (None: missing or refused)."""
  exe, why = store.read_entry(path, full_key, device)
  if why is not None and why != "missing":
    with _LOCK:
      _REFUSED.append((path, why))
  return exe


def _write(path, full_key, compiled) -> None:
  try:
    cap = int(os.environ.get("JAXACCT_COMPILATION_CACHE_MAX_BYTES", _DEFAULT_MAX_BYTES))
  except ValueError:
    cap = _DEFAULT_MAX_BYTES
  try:
    store.make_private_dir(cache_dir())
    if store.write_entry(path, full_key, compiled):
      store.prune(cache_dir(), cap)
  except Exception:   # read-only or full disk, unserialisable executable  # noqa: BLE001
    return


def programs(name: str = "") -> dict:
  """``{key: optimised HLO text}`` of the executables jaxacct's kernels hold in
  this process (compiled, precompiled or loaded from the store) whose kernel
  name contains ``name``; a key names the kernel, its statics, shapes and the
  layout. For tests and tools that count loops in compiled programs (calls
  that went to the plain ``jax.jit`` path are not here)."""
  with _LOCK:
    items = list(_MEMORY.items())
  return {k: exe.as_text() for k, exe in items if name in k}


def jit(fun: Optional[Callable] = None, *, static_argnames=None, static_argnums=None,
        name: Optional[str] = None, **jit_kwargs: Any):
  """``jax.jit`` with jaxacct's persistent executable store (module docstring).

  Use as ``@jit``, ``@functools.partial(jit, static_argnames=(...))`` or
  ``jit(f, static_argnums=3)``. ``static_argnums`` are turned into names.
  ``name`` identifies the kernel in the store's keys (default: the function's
  module and qualified name; a factory that jits a local function passes the
  name of what it wraps). ``compiler_options`` (XLA options, e.g. turning the
  GPU fusion autotuner off) apply to the kernel's own compilations, on
  concrete arguments; inside the user's ``jit``/``vmap`` the kernel is part
  of the user's program and compiled with its options (JAX accepts options on
  a top-level program only).
  """
  if fun is None:
    return functools.partial(jit, static_argnames=static_argnames,
                             static_argnums=static_argnums, name=name, **jit_kwargs)
  if isinstance(static_argnums, int):
    static_argnums = (static_argnums,)
  if isinstance(static_argnames, str):
    static_argnames = (static_argnames,)
  return CachedJit(fun, static_argnames, static_argnums, jit_kwargs, name)
