"""bench/bench_cold_start.py (issue 28, item 1): the child mode answers one
question in a fresh process with every compilation cache off and prints one
JSON record; checked on the cheapest question (Poisson RDP). No wall-time
assertions: only the record's fields, its value (equal to the in-process
``jaxacct.poisson.epsilon``) and that a cold process compiled something and
loaded nothing from a cache."""

import json
import os
import subprocess
import sys

import numpy as np

import jaxacct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "bench", "bench_cold_start.py")
MARK = "COLD_START_JSON "
# the caches this test session may have set up (tests/conftest.py)
CACHE_ENV = ("JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE",
             "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "JAXACCT_COMPILATION_CACHE_DIR",
             "JAXACCT_CACHE_DIR")


def _env():
  env = {k: v for k, v in os.environ.items() if k not in CACHE_ENV}
  env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
  env.update(JAX_ENABLE_COMPILATION_CACHE="false", JAXACCT_COMPILATION_CACHE="0")
  return env


def _run(*args, timeout=600):
  return subprocess.run([sys.executable, SCRIPT, *args], env=_env(), cwd=ROOT,
                        capture_output=True, text=True, timeout=timeout)


def test_child_poisson_rdp_record():
  p = _run("--child", "poisson_rdp")
  assert p.returncode == 0, p.stderr[-3000:]
  lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
  assert len(lines) == 1, p.stdout
  rec = json.loads(lines[0][len(MARK):])
  for k in ("import_s", "first_s", "trace_s", "lower_s", "compile_s", "run_s",
            "jax_compile_union_s"):
    assert isinstance(rec[k], float) and rec[k] >= 0.0, (k, rec[k])
  assert rec["question"] == "poisson_rdp" and rec["side"] == "ours" and rec["lib"] == "jaxacct"
  # run = first answer minus the union of the compile-event spans
  assert abs(rec["run_s"] + rec["jax_compile_union_s"] - rec["first_s"]) < 1e-9
  # a cold process answers the scalar Poisson RDP question on the host (issue 28: it
  # compiles no XLA program) and loads nothing from a cache
  assert isinstance(rec["compiles"], int) and rec["compiles"] == 0
  assert rec["cache_hits"] == 0
  assert rec["top_compile"] == []
  assert rec["devices"] and rec["jax"]
  # the same number as in this process (same code, same default orders)
  ref = float(np.asarray(jaxacct.poisson.epsilon(q=0.01, sigma=1.0, num_steps=10_000,
                                                 delta=1e-5).epsilon))
  np.testing.assert_allclose(rec["value"], ref, rtol=1e-12)


def test_child_accountant_mixed_compiles_nothing():
  # a PLDAccountant of Poisson, Gaussian and Laplace events: on the CPU layout its PLDs
  # are built, composed and queried on the host: no XLA program in a fresh process
  p = _run("--child", "accountant_mixed")
  assert p.returncode == 0, p.stderr[-3000:]
  rec = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith(MARK)][0][len(MARK):])
  assert rec["compiles"] == 0 and rec["top_compile"] == [], rec
  from jaxacct.accounting import PLDAccountant
  from dp_accounting import GaussianDpEvent, LaplaceDpEvent, PoissonSampledDpEvent
  acc = PLDAccountant()
  acc.compose(PoissonSampledDpEvent(256 / 60000, GaussianDpEvent(1.0)), 1000)
  acc.compose(GaussianDpEvent(20.0), 3)
  acc.compose(LaplaceDpEvent(10.0), 2)
  np.testing.assert_allclose(rec["value"], acc.get_epsilon(1e-5), rtol=1e-12)


def test_help():
  p = _run("--help", timeout=120)
  assert p.returncode == 0, p.stderr
  for flag in ("--only", "--repeat", "--with-slow-peers", "--cache-rows", "--out"):
    assert flag in p.stdout
  assert "poisson_rdp" in p.stdout and "door_shuffle_delta" in p.stdout


def test_doors_cover_the_contract_suite():
  """One door row per scheme of tests/project/test_contract.py (epsilon and delta)."""
  import ast
  tree = ast.parse(open(os.path.join(ROOT, "tests", "project", "test_contract.py")).read())
  doors = next(n.value for n in tree.body if isinstance(n, ast.Assign)
               and getattr(n.targets[0], "id", None) == "DOORS")
  contract = {k.value for k in doors.keys}
  p = _run("--help", timeout=120)
  for name in contract:
    for qty in ("epsilon", "delta"):
      assert f"door_{name}_{qty}" in p.stdout.replace("\n", " ").replace(" ", ""), name
