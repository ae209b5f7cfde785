"""The executable store trusts nothing it loads (issue 54 item 1).

An entry of ``jaxacct._core.store`` is loaded only if it is a regular file of
this user that no one else can write, its header names the key asked for,
and its payload hashes to the header's SHA-256; the payload (JAX's
``serialize_executable`` bytes) is unpickled with an allow-list of JAX
classes. Checked here: a planted pickle runs nothing (its marker file is
never created), and a flipped bit, another key's entry, a foreign or
group-writable file are refused; the call compiles again, answers exactly as
``jax.jit`` does, and the entry is replaced. The bad-entry table calls
``read_entry`` directly on a corrupted copy of one real entry.
"""

import hashlib
import json
import os
import pickle
import stat
import struct
import time

import jax
import numpy as np
import pytest

from jaxacct import EpsilonResult
from jaxacct._core import compiled, store
from jaxacct._core.solve import BisectResult


def _entries(tmp_path):
  return sorted((tmp_path / "cache" / "executables").rglob("*.jaxexe"))


def _split(blob):
  n = len(store.MAGIC)
  (size,) = struct.unpack(">I", blob[n:n + 4])
  return json.loads(blob[n + 4:n + 4 + size]), blob[n + 4 + size:]


def _join(header, payload):
  h = json.dumps(header).encode()
  return store.MAGIC + struct.pack(">I", len(h)) + h + payload


class _Plant:
  """A pickle that, when loaded, creates ``path`` (``open(path, "w")``)."""

  def __init__(self, path):
    self.path = path

  def __reduce__(self):
    return (open, (self.path, "w"))


class _Shell(_Plant):
  """A pickle that, when loaded, runs ``touch path`` in a shell."""

  def __reduce__(self):
    return (os.system, ("touch " + self.path,))


def _x64(fn, *args):
  with jax.enable_x64(True):
    return np.asarray(fn(*args))


def _first_entry(kernel, tmp_path):
  """A real entry of ``kernel`` at x = arange(5.0): (path, value, header, payload)."""
  x = np.arange(5.0)
  value = _x64(kernel, x)
  np.testing.assert_array_equal(value, _x64(kernel.plain, x))
  (path,) = _entries(tmp_path)
  header, payload = _split(path.read_bytes())
  return path, value, header, payload


def _reload(kernel, monkeypatch):
  """The kernel's answer at arange(5.0) with the memory store cleared, and
  what each disk read said (None: loaded)."""
  compiled.clear_memory()
  reads = []
  read = store.read_entry

  def spy(*args):
    exe, why = read(*args)
    reads.append(why)
    return exe, why

  with monkeypatch.context() as m:
    m.setattr(store, "read_entry", spy)
    v = _x64(kernel, np.arange(5.0))
  return v, reads


def test_good_entry_loads(kernel, tmp_path, monkeypatch):
  path, value, header, _ = _first_entry(kernel, tmp_path)
  assert header["format"] == store.FORMAT and header["devices"] == [jax.devices()[0].id]
  v, reads = _reload(kernel, monkeypatch)
  np.testing.assert_array_equal(v, value)
  assert reads == [None] and not [p for p, _ in compiled.refused() if p == str(path)]
  # folders the store created are private (0700), entries 0600
  for d in (tmp_path / "cache", tmp_path / "cache" / "executables", path.parent):
    assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
  assert stat.S_IMODE(path.stat().st_mode) == 0o600


def _refused_and_replaced(kernel, monkeypatch, path, value, why):
  before = len(compiled.refused())
  v, reads = _reload(kernel, monkeypatch)
  np.testing.assert_array_equal(v, value)              # equal values, compiled again
  assert len(reads) == 1 and reads[0] is not None and why in reads[0], reads
  assert compiled.refused()[before:] == [(str(path), reads[0])]
  v, reads = _reload(kernel, monkeypatch)              # the entry was replaced: it loads
  np.testing.assert_array_equal(v, value)
  assert reads == [None]


def test_planted_pickle_runs_nothing(kernel, tmp_path, monkeypatch):
  """The old format (a bare pickle) and a well-formed entry whose payload is
  a pickle calling ``open``: neither creates its marker file."""
  path, value, header, _ = _first_entry(kernel, tmp_path)
  marker = tmp_path / "planted_ran"
  path.write_bytes(pickle.dumps(_Plant(str(marker))))
  _refused_and_replaced(kernel, monkeypatch, path, value, "bad magic")
  assert not marker.exists()
  evil = pickle.dumps(_Plant(str(marker)))
  forged = dict(header, bytes=len(evil), sha256=hashlib.sha256(evil).hexdigest())
  path.write_bytes(_join(forged, evil))       # right key, right checksum
  _refused_and_replaced(kernel, monkeypatch, path, value,
                        "is not allowed in an entry")
  assert not marker.exists()


@pytest.mark.parametrize("where", [0, 30, 200, -1, -5000])
def test_flipped_bit_recompiles(kernel, tmp_path, monkeypatch, where):
  """One flipped bit anywhere (magic, header, payload start/end) refuses the entry."""
  path, value, _, _ = _first_entry(kernel, tmp_path)
  blob = bytearray(path.read_bytes())
  blob[where] ^= 0x10
  path.write_bytes(bytes(blob))
  _refused_and_replaced(kernel, monkeypatch, path, value, "")


def test_entry_of_another_key_recompiles(kernel, tmp_path, monkeypatch):
  """A valid entry of the same kernel for another shape, put under this key."""
  path, value, _, _ = _first_entry(kernel, tmp_path)
  _x64(kernel, np.arange(7.0))
  (other,) = [p for p in _entries(tmp_path) if p != path]
  path.write_bytes(other.read_bytes())
  _refused_and_replaced(kernel, monkeypatch, path, value, "key mismatch")


def test_foreign_and_shared_entries_are_refused(kernel, tmp_path, monkeypatch):
  path, value, _, _ = _first_entry(kernel, tmp_path)
  me = os.geteuid()
  with monkeypatch.context() as m:
    m.setattr(os, "geteuid", lambda: me + 1)      # the entry is now someone else's
    v, reads = _reload(kernel, monkeypatch)
  np.testing.assert_array_equal(v, value)
  assert len(reads) == 1 and "not by this user" in reads[0], reads
  os.chmod(path, 0o666)
  _refused_and_replaced(kernel, monkeypatch, path, value,
                        "writable by other users")


def test_orphaned_temporary_files_are_pruned(kernel, tmp_path):
  path, _, _, _ = _first_entry(kernel, tmp_path)
  old = path.parent / (store.TMP_PREFIX + "killed" + store.TMP_SUFFIX)
  fresh = path.parent / (store.TMP_PREFIX + "writing" + store.TMP_SUFFIX)
  for p in (old, fresh):
    p.write_bytes(b"half an entry")
  t = time.time() - store.ORPHAN_AGE - 60
  os.utime(old, (t, t))
  _x64(kernel, np.arange(9.0))                  # a write prunes the store
  assert not old.exists() and fresh.exists()


# ---------------------------------------------------------------------------
# the bad-entry table: read_entry on corrupted copies of one real entry
# ---------------------------------------------------------------------------

BAD = {
    # name: (header, payload) -> bytes of the file, or None for a special case
    "empty": (lambda h, p: b"", "bad magic"),
    "truncated header": (lambda h, p: _join(h, p)[:len(store.MAGIC) + 10], "bad header"),
    "header length huge": (lambda h, p: store.MAGIC + b"\xff\xff\xff\xff" + p,
                           "bad header length"),
    "header not JSON": (lambda h, p: store.MAGIC + struct.pack(">I", 3) + b"{x}" + p,
                        "bad header"),
    "header a list": (lambda h, p: store.MAGIC + struct.pack(">I", 2) + b"[]" + p,
                      "bad header"),
    "other format": (lambda h, p: _join(dict(h, format=2), p), "bad header"),
    "other key": (lambda h, p: _join(dict(h, key=h["key"] + " "), p), "key mismatch"),
    "no key": (lambda h, p: _join({k: v for k, v in h.items() if k != "key"}, p),
               "key mismatch"),
    "bad sha256": (lambda h, p: _join(dict(h, sha256="0" * 64), p), "checksum mismatch"),
    "payload cut": (lambda h, p: _join(h, p[:-1]), "checksum mismatch"),
    "payload grown": (lambda h, p: _join(h, p + b"\0"), "checksum mismatch"),
    "other device": (lambda h, p: _join(dict(h, devices=[h["devices"][0] + 7]), p),
                     "compiled for other devices"),
    "two devices": (lambda h, p: _join(dict(h, devices=h["devices"] * 2), p),
                    "compiled for other devices"),
    "bad in_tree": (lambda h, p: _join(dict(h, in_tree={"set": []}), p), "payload refused"),
    "unknown NamedTuple": (lambda h, p: _join(dict(h, out_tree={
        "namedtuple": "os:stat_result", "values": []}), p), "unknown NamedTuple"),
    "garbage payload": (lambda h, p: _join(dict(h, bytes=5, sha256=hashlib.sha256(
        b"xxxxx").hexdigest()), b"xxxxx"), "payload refused"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_entry_table(kernel, tmp_path, case):
  path, value, header, payload = _first_entry(kernel, tmp_path)
  device = jax.devices()[0]
  exe, why = store.read_entry(str(path), header["key"], device)   # the good entry loads
  assert why is None
  np.testing.assert_array_equal(_x64(exe, np.arange(5.0)), value)
  make, expected = BAD[case]
  path.write_bytes(make(header, payload))
  exe, why = store.read_entry(str(path), header["key"], device)
  assert exe is None and expected in why, why


def test_bad_entry_table_files(kernel, tmp_path, monkeypatch):
  """File-level refusals: symlink, folder, missing, group-writable, other owner,
  a payload naming a global outside the allow-list."""
  path, _, header, payload = _first_entry(kernel, tmp_path)
  device = jax.devices()[0]
  key = header["key"]
  good = path.read_bytes()
  real = tmp_path / "elsewhere.jaxexe"
  real.write_bytes(good)
  path.unlink()
  path.symlink_to(real)
  assert store.read_entry(str(path), key, device)[1] == "not a regular file (a symbolic link)"
  path.unlink()
  path.mkdir()
  assert store.read_entry(str(path), key, device)[0] is None
  path.rmdir()
  assert store.read_entry(str(path), key, device) == (None, "missing")
  path.write_bytes(good)
  os.chmod(path, 0o620)
  assert store.read_entry(str(path), key, device)[1] == "writable by other users"
  os.chmod(path, 0o600)
  with monkeypatch.context() as m:
    m.setattr(os, "geteuid", lambda: os.stat(path).st_uid + 1)
    assert "not by this user" in store.read_entry(str(path), key, device)[1]
  marker = tmp_path / "ran"
  for evil in (pickle.dumps(_Plant(str(marker))), pickle.dumps(_Shell(str(marker)))):
    path.write_bytes(_join(dict(header, bytes=len(evil),
                                sha256=hashlib.sha256(evil).hexdigest()), evil))
    exe, why = store.read_entry(str(path), key, device)
    assert exe is None and "is not allowed in an entry" in why, why
  assert not marker.exists()


def test_tree_forms_round_trip():
  """Argument/result structures are stored as JSON (no pickle): tuples, lists,
  str-keyed dicts, None and jaxacct's NamedTuples round-trip; others are not stored."""
  trees = [1, None, (1, 2), [1, (None, 2)], {"a": 1, "b": [2, 3]}, (), {},
           BisectResult(*range(len(BisectResult._fields)))]
  for t in trees:
    td = jax.tree_util.tree_structure(t)
    assert store.decode_tree(json.loads(json.dumps(store.tree_form(td)))) == td
  # a dict with int keys; a custom node that is a NamedTuple subclass with aux data
  for t in ({1: 2}, EpsilonResult(1.0, 2.0, "m", "upper")):
    with pytest.raises(ValueError, match="JSON form"):
      store.tree_form(jax.tree_util.tree_structure(t))


def test_another_threads_jax_cache_hits_do_not_stop_the_write(kernel, tmp_path):
  """A compile of this thread is stored even while another thread (a tracking
  table in the background) reports JAX persistent-cache hits: the store skips
  only executables that JAX loaded for the compiling thread itself."""
  import threading
  stop = threading.Event()

  def hits():
    while not stop.is_set():
      jax.monitoring.record_event("/jax/compilation_cache/cache_hits")

  th = threading.Thread(target=hits, daemon=True)
  th.start()
  try:
    value = _x64(kernel, np.arange(5.0))
  finally:
    stop.set()
    th.join()
  np.testing.assert_array_equal(value, np.asarray(_x64(kernel.plain, np.arange(5.0))))
  assert len(_entries(tmp_path)) == 1
