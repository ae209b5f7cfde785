"""Lanes over several devices and hosts: one 1-D ``"lanes"`` mesh, one place.

Every array door's programs take fixed-size blocks of lanes (the block
programs of :func:`jaxacct._core.batching.run_blocks`, the allocation sweep's
chunks, :func:`jaxacct.allocation.pld._query.run_chunks`). A door called with
``devices=`` (a sequence of jax devices or a ``jax.sharding.Mesh``) enters
:func:`use_devices`, which sets the lanes mesh of this context (a
``contextvars`` variable: a door called inside another door with
``devices=None`` keeps the outer one). The runners then hand their blocks to
:func:`run_items`: block ``i`` runs on mesh device ``i mod D``, each device's
blocks in threads of their own, as the very program one device runs
(compiled for that device: the kernels' executable keys name it), so a
sharded sweep is bitwise the unsharded one. (``jax.shard_map`` over a
``NamedSharding(mesh, P("lanes"))`` was tried first: XLA's SPMD pipeline
rewrites some divisions differently, ~1e-14 relative apart on the Poisson
RDP quadrature.)

Where the float64 programs run (:func:`float64_device`): the default device,
unless its platform cannot run float64 and complex128 (a TPU, or a platform
the user declares so), then the host's CPU; or the backend the user names
(:func:`set_backend`, ``JAXACCT_BACKEND``). Decided at each door and each
compiled call (:func:`float64_placement`), never by changing the user's JAX
config or moving the user's arrays to the accelerator.

Across hosts (``jax.distributed.initialize``: the user's own, or
``python -m jaxacct.sweep``) every process runs the same door with the same
inputs over a mesh of the global devices; each process computes the blocks of
its own devices, and one all-gather (``process_allgather``) gives every
process the whole result.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import queue
import threading
from typing import Callable, Optional, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh

from jaxacct._core.parallel import cores

AXIS = "lanes"
_MESH: contextvars.ContextVar = contextvars.ContextVar("jaxacct_lanes_mesh", default=None)

#: Platforms without float64/complex128 ("Element type C128 is not supported
#: on TPU"); ``JAXACCT_FLOAT32_BACKENDS`` (comma-separated) adds others.
FLOAT32_PLATFORMS = ("tpu",)
_BACKEND: list = []   # [name] once set_backend was called; else the environment decides


def float32_platforms() -> frozenset:
  """Platforms whose devices jaxacct treats as unable to run float64."""
  return _float32(os.environ.get("JAXACCT_FLOAT32_BACKENDS", ""))


@functools.lru_cache(maxsize=16)
def _float32(extra: str) -> frozenset:
  return frozenset(FLOAT32_PLATFORMS) | {p.strip().lower() for p in extra.split(",")
                                         if p.strip()}


def _check_backend(name, what):
  if not isinstance(name, str) or not name.strip():
    raise ValueError(f"{what} must be 'auto' or a JAX platform name ('cpu', 'gpu', ...); "
                     f"got {name!r}.")
  name = name.strip().lower()
  if name in float32_platforms():
    raise ValueError(f"{what} must name a backend that runs float64; {name!r} has no "
                     "float64/complex128 (jaxacct runs its programs on the CPU there).")
  return name


def backend() -> str:
  """The backend setting in force: ``"auto"`` or a platform name (:func:`set_backend`)."""
  if _BACKEND:
    return _BACKEND[0]
  raw = os.environ.get("JAXACCT_BACKEND", "auto")
  if raw == "auto":
    return raw
  return _check_backend(raw or "auto", "JAXACCT_BACKEND")


def set_backend(name: Optional[str] = "auto"):
  """Where jaxacct runs its float64 programs, for this process.

  ``"auto"`` (default): JAX's default device, unless its platform cannot run
  float64 and complex128 (a TPU; or a platform listed in the environment
  variable ``JAXACCT_FLOAT32_BACKENDS``), then the host's CPU. A platform
  name (``"cpu"``, ``"gpu"``, ``"cuda"``, ...): that backend's first device
  (the default device where it is of that platform). The user's arrays are
  read where they are (a copy goes to that device, never to the
  accelerator) and no JAX setting changes. Also usable as a context manager;
  the environment variable ``JAXACCT_BACKEND`` sets the starting value.

  Raises ``ValueError`` naming ``name`` for a platform without float64.
  """
  name = "auto" if name is None else _check_backend(name, "name")
  before = list(_BACKEND)
  _BACKEND[:] = [name]
  return _BackendRestorer(before)


class _BackendRestorer:
  """The value of :func:`set_backend`: ignorable, or a context manager that undoes it."""

  def __init__(self, before):
    self._before = before

  def __enter__(self):
    return backend()

  def __exit__(self, *exc):
    _BACKEND[:] = self._before
    return False


@functools.lru_cache(maxsize=None)
def _first_local(platform=None):
  return jax.local_devices(backend=platform)[0]


def _default_device():
  d = jax.config.jax_default_device
  if isinstance(d, jax.Device):
    return d
  return _first_local(d if isinstance(d, str) else None)


def _devices_of(platform, what):
  try:
    return jax.local_devices(backend=platform)
  except RuntimeError as e:
    raise RuntimeError(
        f"jaxacct runs its float64 programs on the {platform!r} backend ({what}), which "
        "this process has not started (JAX_PLATFORMS, or jaxlib without it): add "
        f"{platform!r} to JAX_PLATFORMS, or choose another with jaxacct.set_backend.") from e


def float64_device() -> jax.Device:
  """The device jaxacct's float64 programs run on now (:func:`set_backend`).

  The default device in force (a ``jax.default_device`` context or the
  ``jax_default_device`` setting; else the first device) when it can run
  float64 and the setting allows it; else the host's first CPU device (the
  CPU always runs float64), or the named backend's first device.
  """
  return _float64_device(_default_device())


def _float64_device(d):
  name = backend()
  if name == "auto":
    if d.platform not in float32_platforms():
      return d
    return _devices_of("cpu", "the default device has no float64")[0]
  if d.platform == name:
    return d
  return _devices_of(name, f"jaxacct.set_backend({name!r})")[0]


class _Placement:
  """The context of :func:`float64_placement` (entered once)."""

  __slots__ = ("dev", "ctx")

  def __init__(self, dev):
    self.dev = dev
    self.ctx = None if dev is None else jax.default_device(dev)

  def __enter__(self):
    if self.ctx is not None:
      self.ctx.__enter__()
    return self.dev

  def __exit__(self, *exc):
    return False if self.ctx is None else self.ctx.__exit__(*exc)


_STAY = _Placement(None)


def float64_placement():
  """A context that runs its block under ``jax.default_device(float64_device())``
  where that is not the default device in force (a thread-local JAX context:
  the user's setting is untouched); it yields that device, or None (no change)."""
  d = _default_device()
  dev = _float64_device(d)
  return _STAY if dev == d else _Placement(dev)


def to_device(tree, dev):
  """``tree`` with its concrete jax arrays that are not on ``dev`` copied to
  ``dev`` (the user's own arrays stay where they are); None: ``tree``."""
  if dev is None:
    return tree

  def put(x):
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) \
        and x.devices() != {dev}:
      return jax.device_put(x, dev)
    return x

  return jax.tree_util.tree_map(put, tree)


def as_mesh(devices) -> Optional[Mesh]:
  """The 1-D ``"lanes"`` mesh of ``devices`` (None: None).

  ``devices``: a non-empty sequence of distinct jax devices of one platform,
  or a ``jax.sharding.Mesh`` (its devices in order, whatever its axes).
  Raises ``ValueError`` naming ``devices`` for anything else.
  """
  if devices is None:
    return None
  if isinstance(devices, Mesh):
    devs = list(np.asarray(devices.devices).ravel())
  elif isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
    devs = None
  else:
    devs = list(devices)
  if (not devs or not all(isinstance(d, jax.Device) for d in devs)
      or len({d.id for d in devs}) != len(devs) or len({d.platform for d in devs}) != 1):
    raise ValueError("devices must be None, a non-empty sequence of distinct jax devices of "
                     f"one platform, or a jax.sharding.Mesh; got {devices!r}.")
  if devs[0].platform.lower() in float32_platforms() and devs[0].platform != "cpu":
    raise ValueError(f"devices must run float64; {devs[0].platform!r} devices have no "
                     f"float64/complex128 (leave devices=None: the host CPU); got {devices!r}.")
  if isinstance(devices, Mesh) and devices.axis_names == (AXIS,):
    return devices
  return Mesh(np.asarray(devs, dtype=object), (AXIS,))


@contextlib.contextmanager
def use_devices(devices):
  """Runs the block programs of the array doors on ``devices`` inside the block.

  ``None`` keeps the setting in force (the default: one device, the JAX
  default); otherwise see :func:`as_mesh`.
  """
  mesh = as_mesh(devices)
  if mesh is None:
    yield _MESH.get()
    return
  token = _MESH.set(mesh)
  try:
    yield mesh
  finally:
    _MESH.reset(token)


def current_mesh() -> Optional[Mesh]:
  """The lanes mesh in force (None: the default device, unsharded)."""
  return _MESH.get()


def active() -> bool:
  """Whether a lanes mesh is in force (the doors then take their block programs)."""
  return _MESH.get() is not None


def device_key():
  """The device a program called now runs on, for the kernels' executable keys
  (:mod:`jaxacct._core.compiled`): None for the default device of a
  single-process run (unsharded calls keep their keys), else
  ``(platform, id)`` (processes of one ``jax.distributed`` run on one machine
  share the on-disk store without loading each other's executables)."""
  d = jax.config.jax_default_device
  if isinstance(d, str):
    return d
  first = jax.local_devices()[0]
  d = first if d is None else d
  if d == first and jax.process_count() == 1:
    return None
  return (d.platform, d.id)


def mesh_devices(mesh: Mesh) -> list:
  """The mesh's devices in lane order (block ``i`` runs on entry ``i mod D``)."""
  return list(np.asarray(mesh.devices).ravel())


def run_items(fn: Callable, items: Sequence, done: Optional[Callable] = None,
              ahead: bool = False) -> list:
  """``[fn(item) for item in items]`` over the lanes mesh in force.

  Item ``i`` runs on mesh device ``i mod D``, under ``jax.default_device``
  of it, in one thread per device of this process (a device's items in
  order; a CPU device gets ``cores // local devices`` threads, started once
  its first item, which compiles the programs, is done); each process computes its own devices' items and an all-gather
  gives every process every result. ``fn(item)`` returns a pytree of arrays
  of one structure and shape for every item. ``done(1)`` is called in the
  calling thread as each of this process's items finishes (a progress bar).
  The workers enter the caller's float64 setting. An exception in a worker
  stops the others and is raised here. Without a mesh: a plain loop.
  ``ahead``: each device's items are all dispatched before any result is
  read (asynchronous programs queue on the device; ``done`` then follows the
  reads).

  Returns:
    the results in item order, as NumPy pytrees.
  """
  mesh = _MESH.get()
  if mesh is None:
    out = []
    for it in items:
      out.append(jax.device_get(fn(it)))
      if done is not None:
        done(1)
    return out
  devs = mesh_devices(mesh)
  me = jax.process_index()
  n = len(items)
  owner = [devs[i % len(devs)] for i in range(n)]
  mine = {d: [i for i in range(n) if owner[i] == d] for d in devs if d.process_index == me}
  results: dict = {}
  errors: list = []
  finished: queue.Queue = queue.Queue()
  x64 = bool(jax.config.jax_enable_x64)

  default = jax.local_devices()[0] if jax.config.jax_default_device is None else None
  lock = threading.Lock()

  def worker(dev, todo, first_done, lead):
    # the process's default device runs as an unsharded call does (the same
    # compiled programs, no second compile); the others under default_device
    place = contextlib.nullcontext() if dev == default else jax.default_device(dev)
    mine_ = []
    try:
      if not lead:   # the device's first item compiles its programs alone
        first_done.wait()
      with jax.enable_x64(x64), place:
        while not errors:
          with lock:
            if not todo:
              break
            i = todo.pop(0)
          results[i] = fn(items[i]) if ahead else jax.device_get(fn(items[i]))
          if ahead:
            mine_.append(i)
          else:
            finished.put(i)
          first_done.set()
        for i in mine_:
          results[i] = jax.device_get(results[i])
          finished.put(i)
    except BaseException as e:   # noqa: BLE001 -- re-raised by the caller
      errors.append(e)
    finally:
      first_done.set()
      finished.put(None)

  # a CPU device is the whole CPU: several threads take its items (a CPU
  # layout program runs its lanes on one core); other devices: one thread
  local = [d for d, idx in mine.items() if idx]
  threads = []
  for d in local:
    per = max(1, min(len(mine[d]), cores() // len(local))) if d.platform == "cpu" else 1
    first_done = threading.Event()
    todo = list(mine[d])
    threads += [threading.Thread(target=worker, args=(d, todo, first_done, k == 0), daemon=True)
                for k in range(per)]
  for th in threads:
    th.start()
  live = len(threads)
  while live:
    i = finished.get()
    if i is None:
      live -= 1
    elif done is not None:
      done(1)
  for th in threads:
    th.join()
  if errors:
    raise errors[0]
  if jax.process_count() == 1:
    return [results[i] for i in range(n)]
  return _allgather(results, owner, fn, items)


def _allgather(results: dict, owner: list, fn, items) -> list:
  """Every process's items to every process (one ``process_allgather``)."""
  procs = jax.process_count()
  me = jax.process_index()
  by_proc = [[i for i, d in enumerate(owner) if d.process_index == p] for p in range(procs)]
  width = max(max(len(b) for b in by_proc), 1)
  mine = by_proc[me]
  # a process with no item of its own sends item 0's shape (computed here)
  template = results[mine[0]] if mine else jax.device_get(fn(items[0]))
  rows = [results[i] for i in mine]
  rows += [jax.tree.map(np.zeros_like, template)] * (width - len(rows))
  stacked = jax.tree.map(lambda *xs: np.stack(xs), *rows)
  allg = multihost_utils.process_allgather(stacked)     # leaves: (procs, width, ...)
  pos = {i: (p, k) for p in range(procs) for k, i in enumerate(by_proc[p])}
  return [jax.tree.map(lambda a, i=i: np.asarray(a[pos[i][0], pos[i][1]]), allg)
          for i in range(len(owner))]
