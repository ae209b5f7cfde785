"""jaxacct's caches on disk: where they live, and the entries of the executable store.

One setting, ``JAXACCT_CACHE_DIR`` (default ``$XDG_CACHE_HOME/jaxacct``, i.e.
``~/.cache/jaxacct``), holds both: the store of compiled kernels
(:mod:`jaxacct._core.compiled`) in ``executables/`` and JAX's persistent cache,
where one is enabled (:func:`jaxacct.enable_compilation_cache`, the ``jaxacct``
command), in ``jax/``. ``JAXACCT_COMPILATION_CACHE_DIR`` still names the store's
folder, with a ``DeprecationWarning``.

An entry is code, so nothing in one is trusted before it is checked:
a fixed header (magic, then a JSON object: the entry's full key, the SHA-256
and length of the payload, its argument/result tree structures and device ids),
then the payload (``jax.experimental.serialize_executable`` bytes). The path is
``lstat``-ed before it is opened, and opened non-blocking without following a
link: a FIFO, socket, device, folder or link is refused without being opened,
as is a file of another user, one others can write, or one over
:data:`MAX_ENTRY` bytes (nothing is read). An entry is loaded only if its key
is the one asked for and its payload hashes to the header's digest; the
payload is then unpickled with only the JAX classes an executable is made of
(:data:`ALLOWED`). Anything else, any error while parsing included, is
refused, and the caller compiles again and replaces the entry (a new file,
then ``os.replace``). Folders are created 0700; orphaned temporary files are
removed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import stat
import struct
import sys
import tempfile
import time
import warnings
from typing import Optional

import jax

try:
  from jax.experimental.serialize_executable import _JaxPjrtUnpickler as _BaseUnpickler
  from jax.experimental.serialize_executable import serialize as _serialize
except ImportError:   # a jax without them: the store stays in memory
  _BaseUnpickler, _serialize = pickle.Unpickler, None

CACHE_ENV = "JAXACCT_CACHE_DIR"
DEPRECATED_ENV = "JAXACCT_COMPILATION_CACHE_DIR"
MAGIC = b"JAXACCT-EXECUTABLE\x00"
FORMAT = 3
SUFFIX = ".jaxexe"
TMP_PREFIX = ".entry-"
TMP_SUFFIX = ".tmp"
#: A temporary file older than this (seconds) is an orphan of a killed writer.
ORPHAN_AGE = 600.0
_MAX_HEADER = 1 << 20
#: The largest entry read (bytes): a larger file is refused unread, and an
#: executable that would be larger is not written. Far above any kernel of
#: jaxacct's (their entries are well under a MiB).
MAX_ENTRY = 256 << 20
#: The only globals an entry's payload may name: what a single-program
#: ``serialize_executable`` payload is made of (jax 0.10). Any other global
#: (``os.system``, ``builtins.eval``, ...) refuses the entry; an executable
#: whose payload names one is not written.
ALLOWED = frozenset({
    ("jax", "P"),
    ("jax._src.core", "ManualAxisType"),
    ("jax._src.core", "MemorySpace"),
    ("jax._src.core", "ShapedArray"),
    ("jax._src.interpreters.pxla", "AllArgsInfo"),
    ("jax._src.interpreters.pxla", "UnloadedMeshExecutable"),
    ("jax._src.layout", "Layout"),
    ("jax._src.linear_util", "DebugInfo"),
    ("jax._src.mesh", "AbstractMesh"),
    ("jax._src.named_sharding", "_unpickle_named_sharding"),
    ("jax._src.sharding_impls", "_unpickle_single_device_sharding"),
    ("jax._src.stages", "ArgInfo"),
    ("jaxlib._jax", "DeviceList"),
    ("numpy", "dtype"),
})
_WARNED: set = set()


# ---------------------------------------------------------------------------
# where the caches live
# ---------------------------------------------------------------------------

def cache_root() -> str:
  """``$JAXACCT_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxacct`` (``~/.cache/jaxacct``)."""
  env = os.environ.get(CACHE_ENV)
  if env:
    return os.path.abspath(os.path.expanduser(env))
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "jaxacct")


def executables_dir() -> str:
  """The executable store's folder: ``cache_root()/executables``
  (``$JAXACCT_COMPILATION_CACHE_DIR``, deprecated, where it alone is set)."""
  old = os.environ.get(DEPRECATED_ENV)
  if old:
    own = not os.environ.get(CACHE_ENV)
    if (old, own) not in _WARNED:
      _WARNED.add((old, own))
      warnings.warn(
          f"{DEPRECATED_ENV} is deprecated: set {CACHE_ENV} instead (jaxacct keeps its "
          f"compiled kernels in $" f"{CACHE_ENV}/executables)"
          + ("." if own else f"; {DEPRECATED_ENV} is ignored because {CACHE_ENV} is set."),
          DeprecationWarning, stacklevel=3)
    if own:
      return os.path.abspath(os.path.expanduser(old))
  return os.path.join(cache_root(), "executables")


def jax_cache_dir() -> str:
  """JAX's persistent cache, where jaxacct enables one: ``cache_root()/jax``."""
  return os.path.join(cache_root(), "jax")


def make_private_dir(path: str) -> None:
  """Creates ``path`` (and missing parents); folders created here are 0700.
  An existing folder keeps its mode (a shared one is the user's choice: the
  entries in it are checked one by one)."""
  parent = os.path.dirname(path)
  if parent and not os.path.isdir(parent):
    make_private_dir(parent)
  try:
    os.mkdir(path, 0o700)
  except FileExistsError:
    if not os.path.isdir(path):
      raise


def entry_path(root: str, full_key: str) -> str:
  """Where the entry of ``full_key`` lives under ``root``."""
  digest = hashlib.sha256(full_key.encode()).hexdigest()
  return os.path.join(root, digest[:2], digest + SUFFIX)


# ---------------------------------------------------------------------------
# tree structures as JSON (no pickle)
# ---------------------------------------------------------------------------

def encode_tree(tree) -> object:
  """A JSON form of a ``PyTreeDef`` of tuples, lists, str-keyed dicts, None
  and jaxacct's NamedTuples; ``ValueError`` for anything else."""
  nd = tree.node_data()
  if nd is None:
    return "*"
  typ, aux = nd
  kids = [encode_tree(c) for c in tree.children()]
  if typ is type(None):
    return None
  if typ is tuple:
    return {"tuple": kids}
  if typ is list:
    return {"list": kids}
  if typ is dict and all(isinstance(k, str) for k in aux):
    return {"dict": list(aux), "values": kids}
  mod, qual = getattr(typ, "__module__", ""), getattr(typ, "__qualname__", "")
  if (issubclass(typ, tuple) and aux is None and len(getattr(typ, "_fields", ())) == len(kids)
      and mod.startswith("jaxacct.") and "<" not in qual):
    return {"namedtuple": f"{mod}:{qual}", "values": kids}
  raise ValueError(f"tree node {typ!r} has no JSON form")


def tree_form(tree) -> object:
  """:func:`encode_tree`, checked to decode to ``tree`` (``ValueError`` if not:
  a custom node that merely looks like a NamedTuple)."""
  form = encode_tree(tree)
  if decode_tree(form) != tree:
    raise ValueError(f"tree {tree} has no faithful JSON form")
  return form


def _example(obj):
  """A pytree with leaves 0 whose structure ``obj`` describes."""
  if obj == "*":
    return 0
  if obj is None:
    return None
  if not isinstance(obj, dict):
    raise ValueError("bad tree")
  if set(obj) == {"tuple"}:
    return tuple(_example(c) for c in obj["tuple"])
  if set(obj) == {"list"}:
    return [_example(c) for c in obj["list"]]
  if set(obj) == {"dict", "values"} and len(obj["dict"]) == len(obj["values"]):
    return {k: _example(c) for k, c in zip(obj["dict"], obj["values"])}
  if set(obj) == {"namedtuple", "values"}:
    mod, _, qual = str(obj["namedtuple"]).partition(":")
    cls = sys.modules.get(mod) if mod.startswith("jaxacct.") else None   # loaded ones only
    for part in qual.split("."):
      cls = getattr(cls, part, None)
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")
            and len(cls._fields) == len(obj["values"])):
      raise ValueError(f"unknown NamedTuple {obj['namedtuple']!r}")
    return cls(*(_example(c) for c in obj["values"]))
  raise ValueError("bad tree")


def decode_tree(obj):
  """The ``PyTreeDef`` of :func:`encode_tree`'s form."""
  return jax.tree_util.tree_structure(_example(obj))


# ---------------------------------------------------------------------------
# payloads: JAX's bytes, unpickled with an allow-list
# ---------------------------------------------------------------------------

class _Unpickler(_BaseUnpickler):
  """JAX's executable unpickler, naming only :data:`ALLOWED` globals."""

  def find_class(self, module, name):
    if (module, name) not in ALLOWED:
      raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in an entry")
    return super().find_class(module, name)


class _DryUnpickler(_Unpickler):
  """Checks a payload's globals without loading its XLA executable."""

  def persistent_load(self, pid):
    if pid and pid[0] == "exec":
      return None
    return super().persistent_load(pid)


def _load_payload(payload: bytes, in_tree, out_tree, device):
  backend = device.client
  unloaded, args_info_flat, no_kwargs = _Unpickler(io.BytesIO(payload), backend,
                                                   [device]).load()
  args_info = in_tree.unflatten(args_info_flat)
  return jax.stages.Compiled(unloaded.load(), [], args_info, out_tree, no_kwargs=no_kwargs)


# ---------------------------------------------------------------------------
# entries
# ---------------------------------------------------------------------------

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def _trusted(st) -> Optional[str]:
  """Why a file with this ``os.lstat``/``os.fstat`` result may not be read (None: it may)."""
  if not stat.S_ISREG(st.st_mode):
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "of an unknown kind")
    return f"not a regular file ({kind})"
  if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
    return f"owned by uid {st.st_uid}, not by this user"
  if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
    return "writable by other users"
  if st.st_size > MAX_ENTRY:
    return f"too large ({st.st_size} bytes, over {MAX_ENTRY})"
  return None


_OPEN_FLAGS = os.O_RDONLY | sum(getattr(os, f, 0) for f in (
    "O_NOFOLLOW", "O_NONBLOCK", "O_NOCTTY", "O_CLOEXEC"))


def _read_file(path: str):
  """``(bytes, None)`` of the file at ``path``, or ``(None, why)`` without
  reading (or, where it is not a regular file, opening) anything refused."""
  try:
    st = os.lstat(path)
  except FileNotFoundError:
    return None, "missing"
  except OSError as e:
    return None, f"unreadable ({e.strerror or e})"
  why = _trusted(st)
  if why:
    return None, why
  try:     # non-blocking, no link: a file swapped in since the lstat cannot stall us
    fd = os.open(path, _OPEN_FLAGS)
  except FileNotFoundError:
    return None, "missing"
  except OSError as e:
    return None, f"unreadable ({e.strerror or e})"
  try:
    now = os.fstat(fd)
    why = _trusted(now)
    if why:
      return None, why
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
      return None, "replaced while being opened"
    chunks, left = [], MAX_ENTRY + 1
    while left > 0:
      chunk = os.read(fd, min(left, 1 << 20))
      if not chunk:
        break
      chunks.append(chunk)
      left -= len(chunk)
    if left <= 0:
      return None, f"too large (over {MAX_ENTRY} bytes)"
    return b"".join(chunks), None
  except OSError as e:     # EAGAIN and the like
    return None, f"unreadable ({e.strerror or e})"
  finally:
    os.close(fd)


def read_entry(path: str, full_key: str, device):
  """``(executable, None)``, or ``(None, why)`` where the entry at ``path``
  is missing or refused (see the module docstring); ``device`` is the device
  the call runs on (the entry must have been compiled for it). Never raises
  for what the file holds, and never blocks on what it is."""
  if _serialize is None:
    return None, "this jax has no executable serialisation"
  blob, why = _read_file(path)
  if why:
    return None, why
  try:
    return _parse(blob, full_key, device)
  except Exception as e:   # noqa: BLE001 -- RecursionError, MemoryError, ...: a refusal
    return None, f"bad entry ({type(e).__name__})"


def _parse(blob: bytes, full_key: str, device):
  n = len(MAGIC)
  if blob[:n] != MAGIC or len(blob) < n + 4:
    return None, "not an entry (bad magic)"
  (size,) = struct.unpack(">I", blob[n:n + 4])
  if size > _MAX_HEADER or len(blob) < n + 4 + size:
    return None, "bad header length"
  try:
    header = json.loads(blob[n + 4:n + 4 + size].decode("utf-8"))
  except (UnicodeDecodeError, ValueError, RecursionError):
    return None, "bad header"
  if not isinstance(header, dict) or header.get("format") != FORMAT:
    return None, "bad header"
  if header.get("key") != full_key:
    return None, "key mismatch (an entry of another key)"
  payload = blob[n + 4 + size:]
  if (header.get("bytes") != len(payload)
      or header.get("sha256") != hashlib.sha256(payload).hexdigest()):
    return None, "checksum mismatch"
  if header.get("devices") != [device.id]:
    return None, "compiled for other devices"
  try:
    in_tree, out_tree = decode_tree(header["in_tree"]), decode_tree(header["out_tree"])
    return _load_payload(payload, in_tree, out_tree, device), None
  except Exception as e:   # noqa: BLE001 -- a refused global, a stale layout
    return None, f"payload refused ({type(e).__name__}: {e})"


def write_entry(path: str, full_key: str, compiled) -> bool:
  """Writes ``compiled`` (a single-device ``jax.stages.Compiled``) as the
  entry of ``full_key`` (temporary file, then ``os.replace``); False where it
  cannot be stored (nothing written)."""
  if _serialize is None:
    return False
  payload, in_tree, out_tree = _serialize(compiled)
  devices = [d.id for d in compiled.runtime_executable().local_devices()]
  if len(devices) != 1:
    return False
  device = compiled.runtime_executable().local_devices()[0]
  _DryUnpickler(io.BytesIO(payload), device.client, [device]).load()   # loadable later
  header = json.dumps({
      "format": FORMAT, "key": full_key, "bytes": len(payload),
      "sha256": hashlib.sha256(payload).hexdigest(), "devices": devices,
      "in_tree": tree_form(in_tree), "out_tree": tree_form(out_tree),
      "jax": jax.__version__}).encode()
  if len(MAGIC) + 4 + len(header) + len(payload) > MAX_ENTRY:
    return False
  folder = os.path.dirname(path)
  make_private_dir(folder)
  fd, tmp = tempfile.mkstemp(dir=folder, prefix=TMP_PREFIX, suffix=TMP_SUFFIX)
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(MAGIC + struct.pack(">I", len(header)) + header + payload)
    os.replace(tmp, path)
  except BaseException:
    try:
      os.remove(tmp)
    except OSError:
      pass
    raise
  return True


def prune(root: str, cap: int) -> None:
  """Removes orphaned temporary files (older than :data:`ORPHAN_AGE`), and the
  oldest entries while the store is over ``cap`` bytes (down to 80 %)."""
  entries, total, now = [], 0, time.time()
  for d, _, files in os.walk(root):
    for f in files:
      p = os.path.join(d, f)
      try:
        st = os.lstat(p)
      except OSError:
        continue
      if f.startswith(TMP_PREFIX) and f.endswith(TMP_SUFFIX):
        if now - st.st_mtime > ORPHAN_AGE:
          try:
            os.remove(p)
          except OSError:
            pass
      elif f.endswith(SUFFIX):
        entries.append((st.st_mtime, st.st_size, p))
        total += st.st_size
  if total <= cap:
    return
  for _, size, p in sorted(entries):
    try:
      os.remove(p)
    except OSError:
      continue
    total -= size
    if total <= 0.8 * cap:
      return
