"""The store refuses before it opens (issue 67 item 1).

Every kind of file a store folder can hold, put where a kernel's entry goes:
a FIFO (which a plain ``open`` waits on until a writer appears: anyone who can
create a file in a shared store would stall every call), a unix socket, a
device node, a symbolic link to a device, a folder, a 64 GiB sparse file
(which must not be read), an entry whose JSON header is nested deeper than
Python's recursion limit, and a file of another user. Each is refused by
``store.read_entry`` within a bounded time (a thread with a timeout: a hang
fails the test instead of stalling the suite) and the kernel's call answers
exactly as ``jax.jit`` does; the entry is then replaced by a loadable one
(``os.replace`` over it), or, a folder, left alone.
"""

import json
import os
import socket
import stat
import struct
import threading

import jax
import numpy as np
import pytest

from jaxacct._core import compiled, store

TIMEOUT = 30.0     # seconds; a refusal takes milliseconds


def _bounded(fn, release=None):
  """``fn()`` on a thread, failing the test if it takes over :data:`TIMEOUT`
  (``release()`` then unblocks the thread)."""
  out = {}

  def run():
    try:
      out["value"] = fn()
    except BaseException as e:   # noqa: BLE001 -- re-raised below
      out["error"] = e

  th = threading.Thread(target=run, daemon=True)
  th.start()
  th.join(TIMEOUT)
  if th.is_alive():
    if release is not None:
      release()
    th.join(5.0)
    pytest.fail(f"blocked for over {TIMEOUT:.0f} s")
  if "error" in out:
    raise out["error"]
  return out["value"]


def _x64(fn, x):
  with jax.enable_x64(True):
    return np.asarray(fn(x))


def _deep_header(key):
  """An entry whose JSON header nests 100,000 lists (under the 1 MiB header cap)."""
  h = b"[" * 100_000 + b"]" * 100_000
  return store.MAGIC + struct.pack(">I", len(h)) + h


def _mknod(path, target):
  try:
    os.mknod(path, 0o600 | stat.S_IFCHR, os.stat(target).st_rdev)
  except (PermissionError, AttributeError, OSError) as e:
    pytest.skip(f"cannot create a device node here ({e})")


def _socket(path):
  # a unix socket's path is limited to ~108 bytes: bind the short name from its folder
  s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  cwd = os.getcwd()
  os.chdir(path.parent)
  try:
    s.bind(path.name)
  finally:
    os.chdir(cwd)
  return s


def _other_owner(path, good):
  if not hasattr(os, "geteuid") or os.geteuid() != 0:
    pytest.skip("giving a file to another user needs root")
  path.write_bytes(good)
  os.chmod(path, 0o600)
  os.chown(path, os.geteuid() + 4242, -1)


def _sparse(path, good):
  with open(path, "wb") as f:
    f.write(good)
    f.truncate(64 << 30)            # 64 GiB, sparse: nothing but `good` is on disk


def _symlink_device(path, good):
  path.symlink_to("/dev/zero")      # read whole, it would never end


def _fifo(path, good):
  os.mkfifo(path, 0o600)


# name: (make(path, good entry bytes), what read_entry says, replaced by the call)
CASES = {
    "fifo": (_fifo, "not a regular file (a FIFO)", True),
    "socket": (lambda p, g: _socket(p), "not a regular file (a socket)", True),
    "device": (lambda p, g: _mknod(p, "/dev/zero"), "not a regular file (a device)", True),
    "symlink to a device": (_symlink_device, "not a regular file (a symbolic link)", True),
    "symlink to a good entry": (None, "not a regular file (a symbolic link)", True),
    "folder": (lambda p, g: p.mkdir(), "not a regular file (a folder)", False),
    "huge sparse file": (_sparse, f"too large ({64 << 30} bytes", True),
    "deep JSON header": (lambda p, g: p.write_bytes(_deep_header(None)), "bad header", True),
    "other owner": (_other_owner, "not by this user", True),
    "group-writable": (lambda p, g: (p.write_bytes(g), os.chmod(p, 0o660)),
                       "writable by other users", True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_kind_of_file_is_refused_promptly(kernel, tmp_path, case):
  x = np.arange(5.0)
  value = _x64(kernel, x)
  np.testing.assert_array_equal(value, _x64(kernel.plain, x))    # the first, compiled answer
  (path,) = (tmp_path / "cache" / "executables").rglob("*" + store.SUFFIX)
  good = path.read_bytes()
  key = json.loads(good[len(store.MAGIC) + 4:len(store.MAGIC) + 4 + struct.unpack(
      ">I", good[len(store.MAGIC):len(store.MAGIC) + 4])[0]])["key"]
  path.unlink()
  make, expected, replaced = CASES[case]
  held = []
  if make is None:                   # a link to a valid entry of this user's: still refused
    real = tmp_path / "elsewhere.jaxexe"
    real.write_bytes(good)
    os.chmod(real, 0o600)
    path.symlink_to(real)
  else:
    held.append(make(path, good))
  before = os.lstat(path)

  def release():                     # the old store blocked in open(): give it a writer
    if stat.S_ISFIFO(before.st_mode):
      os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

  device = jax.devices()[0]
  exe, why = _bounded(lambda: store.read_entry(str(path), key, device), release)
  assert exe is None and why is not None and expected in why, why
  assert os.lstat(path).st_ino == before.st_ino         # read_entry changes nothing

  compiled.clear_memory()
  n_refused = len(compiled.refused())
  v = _bounded(lambda: _x64(kernel, x), release)        # the call: refused, compiled again
  np.testing.assert_array_equal(v, value)
  assert [w for p, w in compiled.refused()[n_refused:] if p == str(path)] == [why]
  after = os.lstat(path)
  if replaced:                       # a regular entry of this user's now, loadable
    assert stat.S_ISREG(after.st_mode) and after.st_uid == os.geteuid()
    compiled.clear_memory()
    exe, why = store.read_entry(str(path), key, device)
    assert why is None
    np.testing.assert_array_equal(_x64(exe, x), value)
  else:                              # left as it was; every call still answers
    assert after.st_ino == before.st_ino and stat.S_IFMT(after.st_mode) == stat.S_IFMT(
        before.st_mode)
  if make is None:
    assert real.read_bytes() == good                    # the link's target is untouched
  for s in held:
    if isinstance(s, socket.socket):
      s.close()


@pytest.mark.parametrize("error", [RecursionError, MemoryError, KeyError, TypeError])
def test_any_error_while_parsing_is_a_refusal(kernel, tmp_path, monkeypatch, error):
  """A header with the right key and checksum whose argument tree the decoder
  cannot handle (a tree nested past the recursion limit, ...): whatever it
  raises is a refusal, and the call compiles again and replaces the entry."""
  x = np.arange(5.0)
  value = _x64(kernel, x)
  (path,) = (tmp_path / "cache" / "executables").rglob("*" + store.SUFFIX)
  blob = path.read_bytes()
  n = len(store.MAGIC)
  key = json.loads(blob[n + 4:n + 4 + struct.unpack(">I", blob[n:n + 4])[0]])["key"]

  def decoder(obj):
    raise error("in the tree decoder")

  with monkeypatch.context() as m:
    m.setattr(store, "decode_tree", decoder)
    exe, why = store.read_entry(str(path), key, jax.devices()[0])
    assert exe is None and error.__name__ in why, why
    compiled.clear_memory()
    np.testing.assert_array_equal(_x64(kernel, x), value)
  assert compiled.refused()[-1] == (str(path), why)


def test_a_file_over_the_cap_is_not_read(tmp_path, monkeypatch):
  """The size cap holds before any read: not one ``os.read`` of a file over it."""
  p = tmp_path / "big.jaxexe"
  p.write_bytes(store.MAGIC + b"\0" * 100)
  os.chmod(p, 0o600)
  monkeypatch.setattr(store, "MAX_ENTRY", 64)
  reads = []
  real_read = os.read
  monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
  exe, why = store.read_entry(str(p), "k", jax.devices()[0])
  assert exe is None and why == "too large (119 bytes, over 64)" and reads == []


def test_largest_real_entry_is_far_under_the_cap(kernel, tmp_path):
  """The cap against a real entry (this kernel's, a few hundred KB at most;
  the largest of jaxacct's CPU kernels measured about 400 KB)."""
  _x64(kernel, np.arange(5.0))
  (path,) = (tmp_path / "cache" / "executables").rglob("*" + store.SUFFIX)
  assert 1000 < path.stat().st_size < store.MAX_ENTRY / 100


def test_entry_that_cannot_run_is_replaced_not_deleted(kernel, tmp_path, monkeypatch):
  """An entry that loads but fails at its first run is compiled again and
  replaced by ``os.replace``: it is never removed first (a process reading it
  meanwhile finds the old file or the new one)."""
  x = np.arange(5.0)
  value = _x64(kernel, x)
  (path,) = (tmp_path / "cache" / "executables").rglob("*" + store.SUFFIX)
  inode = path.stat().st_ino
  compiled.clear_memory()

  def broken(*args, **kwargs):
    raise RuntimeError("NOT_FOUND: Function fusion not found")

  removed = []
  real_remove = os.remove
  with monkeypatch.context() as m:
    m.setattr(compiled, "_read", lambda *a: broken)
    m.setattr(os, "remove", lambda p, *a, **k: (removed.append(str(p)), real_remove(p, *a, **k)))
    np.testing.assert_array_equal(_x64(kernel, x), value)
  assert str(path) not in removed and path.stat().st_ino != inode
  blob, n = path.read_bytes(), len(store.MAGIC)
  key = json.loads(blob[n + 4:n + 4 + struct.unpack(">I", blob[n:n + 4])[0]])["key"]
  exe, why = store.read_entry(str(path), key, jax.devices()[0])    # the new entry loads
  assert why is None
