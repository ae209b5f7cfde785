"""``python -m jaxacct.sweep`` checks everything before touching a file (issue 54 items 6, 8).

The bad-input table runs the command in this process (``runpy``, as
``python -m`` runs it): every row exits with status 2 and one error line that
names what the user typed, before any worker starts. Inputs and an earlier
result survive every failure: a refused command, and a worker that fails
after starting (a door's ValueError).
"""

import json
import os
import runpy
import subprocess
import sys
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _sweep(monkeypatch, capsys, *argv):
  """Runs ``python -m jaxacct.sweep ARGV`` here; (exit status, stderr)."""
  monkeypatch.setattr(sys, "argv", ["python -m jaxacct.sweep", *argv])
  with pytest.raises(SystemExit) as e:
    runpy.run_module("jaxacct.sweep", run_name="__main__", alter_sys=True)
  return e.value.code, capsys.readouterr().err


@pytest.fixture
def files(tmp_path):
  np.savez(tmp_path / "g.npz", sigma=np.linspace(1.0, 2.0, 4))
  (tmp_path / "g.json").write_text('{"sigma": [1.0, 2.0], "q": 0.01}')
  (tmp_path / "garbage.npz").write_bytes(b"\x80\x04garbage, not a zip")
  (tmp_path / "trunc.npz").write_bytes((tmp_path / "g.npz").read_bytes()[:60])
  np.savez(tmp_path / "objects.npz", sigma=np.array([{"a": 1}], dtype=object))
  np.savez(tmp_path / "words.npz", sigma=np.array(["a", "b"]))
  np.save(tmp_path / "plain.npy", np.ones(3))
  (tmp_path / "list.json").write_text("[1, 2]")
  (tmp_path / "ragged.json").write_text('{"sigma": [1, [2, 3]]}')
  (tmp_path / "text.json").write_text('{"sigma": ["a"]}')
  (tmp_path / "broken.json").write_text('{"sigma": [1,')
  np.savez(tmp_path / "badname.npz", **{"not a name": np.ones(2)})
  (tmp_path / "dir.npz").mkdir()
  os.mkfifo(tmp_path / "fifo.npz")   # issue 67: opening it blocked the launcher for ever
  (tmp_path / "deep.json").write_text('{"sigma": ' + "[" * 100000 + "]" * 100000 + "}")
  np.savez(tmp_path / "none.npz")   # no arrays: was "worker exit status 1"
  (tmp_path / "none.json").write_text("{}")
  (tmp_path / "result.npz").write_bytes(b"an earlier result")   # --out's default below
  (tmp_path / "result.json").write_bytes(b'{"complete": true}')
  return tmp_path


OK = ["--set", "q=0.01", "--set", "num_steps=100", "--set", "delta=1e-5"]
# (arguments after the door, what the error line must contain)
BAD = [
    (["--axis", "sigma=lin:1:2"], "--axis sigma=lin:1:2: lin needs lin:a:b:n"),
    (["--axis", "sigma=log:0:1:5"], "--axis sigma=log:0:1:5: log:a:b:n needs a > 0"),
    (["--axis", "sigma=range:1:2:0"], "--axis sigma=range:1:2:0: the step"),
    (["--axis", "sigma=lin:1:2:-5"], "--axis sigma=lin:1:2:-5: the count n"),
    (["--axis", "sigma=log:1:10:2.5"], "--axis sigma=log:1:10:2.5: the count n"),
    (["--axis", "sigma=lin:1:2:0"], "--axis sigma=lin:1:2:0: the count n"),
    (["--axis", "sigma=lin:1:nan:5"], "--axis sigma=lin:1:nan:5: lin: takes finite numbers"),
    (["--axis", "sigma=lin:a:2:5"], "--axis sigma=lin:a:2:5: lin: takes finite numbers"),
    (["--axis", "sigma=range:5:1"], "--axis sigma=range:5:1: range:5:1 has no values"),
    (["--axis", "sigma=range:1"], "--axis sigma=range:1: range needs range:a:b"),
    (["--axis", "sigma=range:0:1e12:1e-3"], "has 1000000000000000 values"),
    (["--axis", "sigma=1,,2"], "--axis sigma=1,,2: an empty value"),
    (["--axis", "sigma=a,b"], "--axis sigma=a,b: axis values must be numbers"),
    (["--axis", "sigma="], "--axis sigma=: no value"),
    (["--axis", "sigma"], "--axis expects NAME=VALUE; got 'sigma'"),
    (["--axis", "3x=1,2"], "'3x' is not an argument name"),
    (["--axis", "devices=1,2"], "'devices' is not an argument name"),
    (["--axis", "sigma=1,2", "--axis", "sigma=3,4"],
     "--axis sigma=3,4: sigma is already given by --axis sigma=1,2"),
    (["--set", "sigma=7", "--axis", "sigma=1,2"], "sigma is already given by --axis sigma=1,2"),
    (["--axis", "sigma=1,2", "--set", "sigma=7"], "--set sigma=7: sigma is already given"),
    (["--set", "delta=1e-5", "--set", "delta=1e-6", "--axis", "sigma=1"],
     "--set delta=1e-6: delta is already given"),
    (["--axis", "sigma=lin:1:2:50000", "--axis", "num_steps=lin:1:9:50000"],
     "the grid has 2500000000 points"),
    (["--grid", "{d}/g.npz", "--axis", "sigma=1,2"],
     "--axis sigma=1,2: sigma is already given by --grid"),
    (["--grid", "{d}/g.npz", "--axis", "q=1,2,3"], "do not broadcast"),
    (["--grid", "{d}/garbage.npz"], "garbage.npz is not a valid grid"),
    (["--grid", "{d}/trunc.npz"], "trunc.npz is not a valid grid"),
    (["--grid", "{d}/objects.npz"], "Python objects, which are never loaded"),
    (["--grid", "{d}/words.npz"], "array 'sigma' has dtype <U1, not numbers"),
    (["--grid", "{d}/plain.npy"], "plain.npy is not a valid grid"),
    (["--grid", "{d}/list.json"], "the top level is not an object"),
    (["--grid", "{d}/ragged.json"], "'sigma' is not a number or a rectangular list"),
    (["--grid", "{d}/text.json"], "'sigma' is not a number or a list of numbers"),
    (["--grid", "{d}/broken.json"], "broken.json is not a valid grid"),
    (["--grid", "{d}/badname.npz"], "'not a name' is not an argument name"),
    (["--grid", "{d}/missing.npz"], "--grid {d}/missing.npz: no such file"),
    (["--grid", "{d}/dir.npz"], "--grid {d}/dir.npz: cannot be read"),
    (["--grid", "{d}/fifo.npz"], "--grid {d}/fifo.npz: cannot be read: it is a FIFO"),
    (["--grid", "{d}/deep.json"], "deep.json is not a valid grid"),
    (["--grid", "{d}/none.npz"], "none.npz is not a valid grid (.npz of named numeric "
                                 "arrays, or .json of name -> number or list of numbers): "
                                 "it holds no arrays"),
    (["--grid", "{d}/none.json"], "none.json is not a valid grid"),
    (["--grid", "{d}/g.npz", "--out", "{d}/g"], "would overwrite the input --grid"),
    (["--grid", "{d}/g.json", "--out", "{d}/g.json"], "would overwrite the input --grid"),
    (["--grid", "{d}/g.npz", "--out", "{d}/../{b}/g.npz"], "would overwrite the input"),
    (["--axis", "sigma=1,2", "--out", "{d}/"], "give a file name"),
    (["--axis", "sigma=1,2", "--out", "{d}/.npz"], "give a file name"),
    (["--axis", "sigma=1,2", "--out", "{d}/none/x"], "the folder {d}/none does not exist"),
    (["--axis", "sigma=1,2", "--out", "{d}/dir"], "{d}/dir.npz is a folder"),
    (["--axis", "sigma=1,2", "--coordinator", "localhost"],
     "--coordinator must be HOST:PORT"),
    (["--axis", "sigma=1,2", "--coordinator", "localhost:0"], "--coordinator must be HOST:PORT"),
    (["--axis", "sigma=1,2", "--coordinator", "localhost:99999"], "a port in [1, 65535]"),
    (["--axis", "sigma=1,2", "--coordinator", ":1234"], "--coordinator must be HOST:PORT"),
    (["--axis", "sigma=1,2", "--coordinator", "h:1", "--coordinator-bind", "0.0.0.0"],
     "--coordinator-bind must be HOST:PORT"),
    (["--axis", "sigma=1,2", "--coordinator-bind", "0.0.0.0:1"], "needs --coordinator"),
    (["--axis", "sigma=1,2", "--heartbeat-timeout", "-5"],
     "argument --heartbeat-timeout: expected a whole number >= 1; got '-5'"),
    (["--axis", "sigma=1,2", "--heartbeat-timeout", "0"], "--heartbeat-timeout"),
    (["--axis", "sigma=1,2", "--join-timeout", "1.5"], "--join-timeout"),
    (["--axis", "sigma=1,2", "--repeat", "0"], "--repeat"),
    (["--axis", "sigma=1,2", "--num-processes", "0", "--coordinator", "h:1"],
     "--num-processes"),
    (["--axis", "sigma=1,2", "--num-processes", "2"], "--num-processes needs --coordinator"),
    (["--axis", "sigma=1,2", "--coordinator", "h:1", "--process-id", "1"],
     "--process-id must be in [0, 1)"),
    ([], "give the grid"),
]


@pytest.mark.parametrize("extra,expected", BAD, ids=[" ".join(a) or "none" for a, _ in BAD])
def test_bad_input_table(files, monkeypatch, capsys, extra, expected):
  d = str(files)
  extra = [a.format(d=d, b=os.path.basename(d)) for a in extra]
  argv = ["poisson.epsilon", *extra]
  if "--out" not in extra:
    argv += ["--out", os.path.join(d, "result")]
  before = {p: p.read_bytes() for p in files.iterdir() if p.is_file()}
  code, err = _sweep(monkeypatch, capsys, *argv)
  assert code == 2, err
  lines = [line for line in err.strip().splitlines() if "error:" in line]
  assert len(lines) == 1 and expected.format(d=d) in lines[0], err
  assert "pickled data" not in err and "Traceback" not in err
  assert {p: p.read_bytes() for p in files.iterdir() if p.is_file()} == before
  assert sorted(p.name for p in files.iterdir()) == sorted(
      [p.name for p in before] + ["dir.npz", "fifo.npz"])


def test_unwritable_out_folder_is_refused(files, monkeypatch, capsys):
  def refuse(*args, **kwargs):
    raise OSError(30, "Read-only file system")

  monkeypatch.setattr(tempfile, "mkstemp", refuse)
  code, err = _sweep(monkeypatch, capsys, "poisson.epsilon", *OK, "--axis", "sigma=1,2",
                     "--out", str(files / "r"))
  assert code == 2 and "cannot write in" in err and "Read-only file system" in err, err


def test_a_failing_worker_keeps_inputs_and_the_earlier_result(files):
  """The worker starts and the door refuses q=2: exit status 1, one error line
  naming q, no temporary file left, the grid and the earlier result intact."""
  old = {files / "out.npz": b"earlier result", files / "out.json": b'{"complete": true}'}
  for p, b in old.items():
    p.write_bytes(b)
  grid = (files / "g.npz").read_bytes()
  env = dict(os.environ, PYTHONPATH=ROOT, JAXACCT_PROGRESS="0")
  out = subprocess.run([sys.executable, "-m", "jaxacct.sweep", "poisson.epsilon", "--grid",
                        str(files / "g.npz"), "--set", "q=2", "--set", "num_steps=10",
                        "--set", "delta=1e-5", "--out", str(files / "out"), "--quiet"],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode == 1, out.stderr
  errors = [line for line in out.stderr.splitlines() if "error:" in line]
  assert len(errors) == 1 and "q" in errors[0] and "Traceback" not in out.stderr, out.stderr
  assert {p: p.read_bytes() for p in old} == old
  assert (files / "g.npz").read_bytes() == grid
  assert not list(files.glob(".*.tmp"))
  # a door argument the door does not take is refused before anything runs
  out = subprocess.run([sys.executable, "-m", "jaxacct.sweep", "poisson.epsilon", "--grid",
                        str(files / "g.npz"), *OK, "--set", "num_epochs=3",
                        "--out", str(files / "out"), "--quiet"],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode == 1 and "poisson.epsilon takes no argument num_epochs" in out.stderr
  assert {p: p.read_bytes() for p in old} == old


def test_one_process_sweep_says_one_device(files):
  """A plain one-process sweep (1.8 s): its status line reads "on 1 device"
  (was "on 1 devices"), and the values are the door's own."""
  env = dict(os.environ, PYTHONPATH=ROOT, JAXACCT_PROGRESS="0")
  out = subprocess.run([sys.executable, "-m", "jaxacct.sweep", "poisson.epsilon", "--grid",
                        str(files / "g.npz"), *OK, "--out", str(files / "out")],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr
  assert "over 4 points on 1 device\n" in out.stderr, out.stderr
  from jaxacct import poisson
  got = np.load(files / "out.npz", allow_pickle=False)
  ref = poisson.epsilon(q=0.01, sigma=np.linspace(1.0, 2.0, 4), num_steps=100, delta=1e-5)
  np.testing.assert_array_equal(got["epsilon"], np.asarray(ref.epsilon))


def _summary(axis_source, fixed=None):
  """A process's inputs summary as the worker builds it (door, layout, versions,
  fixed values as JSON text, arrays as [shape, dtype, sha256, source])."""
  return {"door": "poisson.epsilon", "layout": "auto",
          "versions": {"jaxacct": "1", "jax": "2"},
          "fixed": fixed or {"delta": "1e-05"},
          "arrays": {"sigma": [[20000], "float64", "ab" * 16, axis_source]}}


def test_agreement_has_no_length_limit():
  """Issue 67: a 2-process sweep with a long --axis list failed, its 64 KB
  summary cut. What is all-gathered now shortens every long text to its head
  and SHA-256: 20,000 axis values (a 160 kB flag) give under 1 kB, equal
  inputs equal bytes, and a difference in a long value is still named."""
  from jaxacct import sweep
  values = ",".join(str(1.0 + i / 1e4) for i in range(20000))
  flag = f"--axis sigma={values}"
  assert len(flag) > 1 << 17
  raw = sweep.agreement(_summary(flag))
  assert len(raw) < 1000
  a, b = json.loads(raw), json.loads(sweep.agreement(_summary(flag)))
  assert a == b and sweep.differences(a, b) == []
  long_set = json.dumps(list(range(30000)))
  c = json.loads(sweep.agreement(_summary(flag, {"delta": long_set})))
  d = json.loads(sweep.agreement(_summary(flag, {"delta": long_set.replace("29999", "29998")})))
  diff = sweep.differences(c, d)
  assert len(diff) == 1 and diff[0].startswith("--set delta ([0, 1, 2,"), diff
  assert len(diff[0]) < 600


def test_a_door_argument_missing_is_named(files):
  """A grid and --set that leave a door argument out: one error line naming it
  (was a worker traceback and "worker exit status 1")."""
  env = dict(os.environ, PYTHONPATH=ROOT, JAXACCT_PROGRESS="0")
  out = subprocess.run([sys.executable, "-m", "jaxacct.sweep", "poisson.epsilon", "--grid",
                        str(files / "g.npz"), "--set", "q=0.01", "--set", "delta=1e-5",
                        "--out", str(files / "out"), "--quiet"],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode == 1, out.stderr
  errors = [line for line in out.stderr.splitlines() if "error:" in line]
  assert errors == ["jaxacct.sweep: error: poisson.epsilon needs num_steps: give each with "
                    "--grid FILE, --axis NAME=SPEC or --set NAME=VALUE"], out.stderr
  assert "Traceback" not in out.stderr and "exit status" not in out.stderr
