"""The suite's loadscope scheduler (tests/xdist_scope.py) survives a crashed worker.

A small project, run with the suite's own options (``-n 2 --dist loadscope
--reruns 1 --rerun-except .``): one test kills its worker the first time it
runs. xdist 3.8.0's own loadscope hangs on it or reports it failed; ours reruns
it once on a new worker and finishes with every test passed.
"""

import os
import subprocess
import sys
import textwrap

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFTEST = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {TESTS!r})
    import pytest

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(config, log):
      if config.getoption("dist") == "loadscope":
        from xdist_scope import CrashSafeLoadScope
        return CrashSafeLoadScope(config, log)
""")

MODULE = "def test_{0}_{1}():\n  assert {1} >= 0\n"

CRASH = textwrap.dedent("""
    import os

    def test_a_crash_once(request):
      mark = os.path.join(os.environ["CRASH_MARK"], "crashed")
      if not os.path.exists(mark):
        open(mark, "w").close()
        # rerunfailures sends this test's rerun budget to the controller at
        # setup, without waiting for a reply; a read on the same connection
        # returns only once it has landed. A real crash comes seconds into a
        # test; one in the first microseconds could outrun the message.
        request.config.failures_db.get_test_reruns(request.node.nodeid)
        os._exit(3)

    def test_b_after_crash():
      assert True
""")


def _project(root):
  (root / "conftest.py").write_text(CONFTEST)
  for m in range(6):
    (root / f"test_m{m}.py").write_text("".join(MODULE.format(m, i) for i in range(4)))
  (root / "test_z_crash.py").write_text(CRASH)


def test_crashed_worker_is_rerun_not_hung(tmp_path):
  proj = tmp_path / "proj"
  proj.mkdir()
  _project(proj)
  env = dict(os.environ, CRASH_MARK=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
  env.pop("PYTEST_XDIST_WORKER", None)
  r = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadscope", "--reruns", "1",
       "--rerun-except", ".", "-p", "no:cacheprovider", "-o", "addopts=", str(proj)],
      cwd=proj, env=env, capture_output=True, text=True, timeout=120)
  out = r.stdout + r.stderr
  assert os.path.exists(tmp_path / "crashed"), out[-3000:]
  assert "node down" in out, out[-3000:]
  assert r.returncode == 0, out[-3000:]
  assert "26 passed, 1 rerun" in out, out[-3000:]


def test_longest_modules_first_name_modules_of_the_suite():
  """The scheduler's list of long modules (dealt first) names test modules that
  exist, once each: a renamed module would silently fall back to xdist's order."""
  sys.path.insert(0, TESTS)
  from xdist_scope import LONGEST_FIRST
  root = os.path.dirname(TESTS)
  assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST) >= 1
  for scope in LONGEST_FIRST:
    assert os.path.isfile(os.path.join(root, scope)), scope
