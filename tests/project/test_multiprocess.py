"""Sweeps across processes (issue 43): ``python -m jaxacct.sweep`` on 127.0.0.1.

Two processes join one ``jax.distributed`` runtime (gloo collectives on the
CPU); each computes the blocks of its own device and process 0 writes the
gathered result. Checked: the gathered ``.npz`` equals a single-process run
bit for bit, and a process killed mid-run makes the other exit non-zero
within the heartbeat timeout, with an error naming the lost process and no
output file. Every process runs under a hard timeout.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np

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
  return subprocess.Popen([sys.executable, "-m", "jaxacct.sweep", *GRID, "--out", str(out),
                           *extra], env=ENV, cwd=ROOT, stderr=subprocess.PIPE, text=True)


def _distributed(port, pid, timeout=5):
  return ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id",
          str(pid), "--heartbeat-timeout", str(timeout)]


def test_two_processes_equal_one(tmp_path):
  # the one-process run reads its grid from a file (the same sigmas)
  (tmp_path / "grid.json").write_text(json.dumps({"sigma": np.linspace(0.5, 5, 96).tolist()}))
  one = subprocess.Popen([sys.executable, "-m", "jaxacct.sweep", GRID[0], *GRID[3:], "--grid",
                          str(tmp_path / "grid.json"), "--out", str(tmp_path / "one")],
                         env=ENV, cwd=ROOT, stderr=subprocess.PIPE, text=True)
  port = _port()
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
  assert not list(tmp_path.glob("*.tmp"))
  assert json.loads((tmp_path / "one.json").read_text())["grid"].endswith("grid.json")


def test_killed_peer_fails_the_run(tmp_path):
  port = _port()
  grid = ["--axis", "sigma=lin:0.5:5:4000"]      # longer than the kill below
  p0 = _launch(tmp_path / "run", *_distributed(port, 0, timeout=3), *grid)
  p1 = _launch(tmp_path / "run", *_distributed(port, 1, timeout=3), *grid)
  try:
    deadline = time.time() + 120
    for line in p1.stderr:   # the worker has joined and starts computing
      if "process 1 of 2" in line or time.time() > deadline:
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
