"""Sweeps across processes (issue 43): ``python -m jaxacct.sweep`` on 127.0.0.1.

Two processes join one ``jax.distributed`` runtime (gloo collectives on the
CPU); each computes the blocks of its own device and process 0 writes the
gathered result. Checked: the gathered ``.npz`` equals a single-process run
bit for bit; a process killed mid-run makes the other exit non-zero within
the heartbeat timeout, with an error naming the lost process and no output
file; (issue 54) processes given different grids refuse to compute, naming
what differs; the coordinator listens on the given host only; a process whose
peer never starts fails within the join timeout, naming the peer; a second
warm-store two-process allocation sweep answers as the first. Every process
runs under a hard timeout.
"""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRID = ["poisson.epsilon", "--axis", "sigma=lin:0.5:5:96", "--set", "q=0.01",
        "--set", "num_steps=1000", "--set", "delta=1e-5", "--set", "orders=1.5,2,3,8",
        "--layout", "accelerator", "--quiet"]
# small blocks (8 lanes): the 96 lanes are 12 blocks, shared by the processes
ENV = dict(os.environ, JAXACCT_DEVICE_MEMORY="1e6", PYTHONPATH=ROOT)
ENV.pop("XLA_FLAGS", None)


def _port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _launch(out, *extra):
  base = GRID if "--axis" not in extra else GRID[:1] + GRID[3:]   # one --axis per name
  return subprocess.Popen([sys.executable, "-m", "jaxacct.sweep", *base, "--out", str(out),
                           *extra], env=ENV, cwd=ROOT, stderr=subprocess.PIPE, text=True)


def _distributed(port, pid, timeout=5, join=120):
  # a generous join timeout (default: the heartbeat timeout): on 2 shared
  # cores one process may import jax seconds after the other
  return ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id",
          str(pid), "--heartbeat-timeout", str(timeout)] + (
              ["--join-timeout", str(join)] if join else [])


def test_two_processes_equal_one(tmp_path):
  # the one-process run reads its grid from a file (the same sigmas)
  (tmp_path / "grid.json").write_text(json.dumps({"sigma": np.linspace(0.5, 5, 96).tolist()}))
  one = subprocess.Popen([sys.executable, "-m", "jaxacct.sweep", GRID[0], *GRID[3:], "--grid",
                          str(tmp_path / "grid.json"), "--out", str(tmp_path / "one")],
                         env=ENV, cwd=ROOT, stderr=subprocess.PIPE, text=True)
  port = _port()
  (tmp_path / "two.npz").write_bytes(b"an earlier result, replaced once the new one is whole")
  procs = [_launch(tmp_path / "two", *_distributed(port, pid)) for pid in (0, 1)]
  errs = [p.communicate(timeout=240)[1] for p in [one] + procs]
  assert [p.returncode for p in [one] + procs] == [0, 0, 0], errs
  a, b = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
  assert sorted(a.files) == sorted(b.files) == ["arg_sigma", "epsilon", "order"]
  for k in a.files:
    np.testing.assert_array_equal(a[k], b[k])
  summary = json.loads((tmp_path / "two.json").read_text())
  assert summary["complete"] and summary["processes"] == 2 and summary["devices"] == 2
  assert summary["points"] == 96
  assert summary["npz_sha256"] == hashlib.sha256((tmp_path / "two.npz").read_bytes()).hexdigest()
  assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
  assert json.loads((tmp_path / "one.json").read_text())["grid"].endswith("grid.json")


def test_killed_peer_fails_the_run(tmp_path):
  port = _port()
  grid = ["--axis", "sigma=lin:0.5:5:4000"]      # longer than the kill below
  p0 = _launch(tmp_path / "run", *_distributed(port, 0, timeout=3), *grid)
  p1 = _launch(tmp_path / "run", *_distributed(port, 1, timeout=3), *grid)
  try:
    deadline = time.time() + 120
    for line in p1.stderr:   # the worker has joined and starts computing
      if "points on" in line or time.time() > deadline:
        break
    os.kill(p1.pid, signal.SIGKILL)   # its worker dies with it (PR_SET_PDEATHSIG)
    killed = time.time()
    err = p0.communicate(timeout=90)[1]
    waited = time.time() - killed
  finally:
    for p in (p0, p1):
      if p.poll() is None:
        p.kill()
  assert p0.returncode not in (0, None), err[-2000:]
  assert "process 1 of 2 was lost" in err, err[-2000:]
  assert waited < 60, waited
  assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())   # no file claims a result


def test_processes_given_different_grids_are_refused(tmp_path):
  """Issue 54 item 2: process 1's sigmas end at 6, process 0's at 5. Before,
  the run wrote a "complete" result with lanes of both grids; now both
  processes refuse before computing, naming the array and the flags."""
  port = _port()
  procs = [_launch(tmp_path / "run", *_distributed(port, pid), "--axis",
                   f"sigma=lin:0.5:{5 + pid}:200") for pid in (0, 1)]
  errs = [p.communicate(timeout=240)[1] for p in procs]
  assert [p.returncode for p in procs] == [1, 1], errs
  for err in errs:
    line = [x for x in err.splitlines() if "error:" in x]
    assert len(line) == 1, err
    assert ("process 1 differs from process 0 in grid array sigma (same shape (200,), "
            "different values: --axis sigma=lin:0.5:5:200 vs --axis sigma=lin:0.5:6:200)"
            in line[0]), err
  assert not list(tmp_path.iterdir())


def test_long_axis_lists_are_compared_whole(tmp_path):
  """Issue 67: an --axis of 10,000 listed values (a 90 kB flag) made the 64 kB
  summary the processes all-gather overflow and the run fail opaquely. Now
  what they gather has no length limit: two such lists that differ in their
  last value are refused, naming the array and both flags (shortened)."""
  port = _port()
  vals = [f"{0.5 + i / 10000:.6f}" for i in range(10000)]
  axes = [",".join(vals), ",".join(vals[:-1] + ["9.0"])]
  assert len(axes[0]) > 1 << 16
  procs = [_launch(tmp_path / "run", *_distributed(port, pid), "--axis", f"sigma={axes[pid]}")
           for pid in (0, 1)]
  errs = [p.communicate(timeout=240)[1] for p in procs]
  assert [p.returncode for p in procs] == [1, 1], errs
  for err in errs:
    line = [x for x in err.splitlines() if "error:" in x]
    assert len(line) == 1, err
    assert ("process 1 differs from process 0 in grid array sigma (same shape (10000,), "
            "different values: --axis sigma=0.500000,0.500100," in line[0]), err
    assert "90012 characters, sha256" in line[0] and len(line[0]) < 1200, line[0]
  assert not list(tmp_path.iterdir())


def _listening(port):
  """The local addresses (hex, as /proc/net/tcp{,6} writes them) listening on ``port``."""
  out = []
  for name in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
      lines = open(name).read().splitlines()[1:]
    except OSError:
      continue
    for line in lines:
      f = line.split()
      addr, p = f[1].split(":")
      if int(p, 16) == port and f[3] == "0A":
        out.append(addr)
  return out


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads /proc/net/tcp")
def test_coordinator_binds_its_host_and_a_missing_peer_fails_in_time(tmp_path):
  """Issue 54 items 5 and 8: with --coordinator 127.0.0.1:PORT the service
  listens on 127.0.0.1 only (before: every interface); process 1 never
  starts, and process 0 fails within the join timeout (default: the
  heartbeat timeout, 2 s here), naming process 1 (before: 306 s, then
  "another task died")."""
  port = _port()
  p0 = _launch(tmp_path / "run", *_distributed(port, 0, timeout=2, join=None))
  try:
    deadline = time.time() + 120
    for line in p0.stderr:
      if "joining" in line or time.time() > deadline:
        break
    joining = time.time()
    seen = []
    while not seen and p0.poll() is None and time.time() < joining + 30:
      seen = _listening(port)
      time.sleep(0.05)
    err = p0.communicate(timeout=60)[1]
    waited = time.time() - joining
  finally:
    if p0.poll() is None:
      p0.kill()
  loopback = {"0100007F", "0000000000000000FFFF00000100007F"}   # 127.0.0.1, ::ffff:127.0.0.1
  assert seen and set(seen) <= loopback, seen
  assert p0.returncode == 1, err
  assert "process 1 of 2 did not join within 2 s" in err, err
  assert waited < 2 + 10, waited
  assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_second_warm_allocation_sweep(tmp_path):
  """Issue 54 item 7: with jaxacct's executable store on, a second identical
  two-process allocation sweep crashed in both processes ("CopyArrays only
  supports destination device list of the same size": an entry of a
  one-device program was loaded onto every device of the runtime). Now it
  answers, bit for bit as the first (about 36 s, then 1 s, on 2 cores)."""
  env = dict(ENV, JAXACCT_COMPILATION_CACHE="1", JAXACCT_CACHE_DIR=str(tmp_path / "cache"))
  env.pop("JAXACCT_COMPILATION_CACHE_DIR", None)
  args = ["allocation.pld.epsilon", "--axis", "sigma=lin:0.8:3:8", "--set",
          "steps_per_epoch=20", "--set", "delta=1e-5", "--set", "grid_size=128", "--quiet"]
  for run in ("a", "b"):
    port = _port()
    procs = [subprocess.Popen([sys.executable, "-m", "jaxacct.sweep", *args, "--out",
                               str(tmp_path / run), *_distributed(port, pid, timeout=20)],
                              env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
             for pid in (0, 1)]
    errs = [p.communicate(timeout=500)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
  assert list((tmp_path / "cache" / "executables").rglob("*.jaxexe"))
  a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
  assert sorted(a.files) == sorted(b.files) == ["arg_sigma", "epsilon", "lower"]
  for k in a.files:
    np.testing.assert_array_equal(a[k], b[k])
