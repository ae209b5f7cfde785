"""The release artefacts: ``python -m build`` makes an sdist and a wheel that
``twine check`` accepts, both ship LICENSE and py.typed, and the wheel installed
in a fresh virtual environment answers the quick start.

Slow (a build, then a fresh venv that installs jax from the package index):
``pytest -m slow tests/project/test_docs_release.py``.
"""

import glob
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
  pytest.importorskip("build")
  out = tmp_path_factory.mktemp("dist")
  subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), ROOT], check=True,
                 capture_output=True, text=True, timeout=900)
  return out


def test_twine_check_accepts_sdist_and_wheel(dist):
  pytest.importorskip("twine")
  files = sorted(glob.glob(str(dist / "*")))
  assert any(f.endswith(".whl") for f in files) and any(f.endswith(".tar.gz") for f in files)
  run = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *files],
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stdout + run.stderr


def test_artefacts_ship_license_and_py_typed(dist):
  wheel = glob.glob(str(dist / "*.whl"))[0]
  names = zipfile.ZipFile(wheel).namelist()
  assert "jaxacct/py.typed" in names
  assert any(n.endswith("LICENSE") for n in names), names[-10:]
  sdist = glob.glob(str(dist / "*.tar.gz"))[0]
  members = tarfile.open(sdist).getnames()
  assert any(m.endswith("/LICENSE") for m in members)
  assert any(m.endswith("/jaxacct/py.typed") for m in members)


def test_wheel_answers_the_quick_start_in_a_fresh_venv(dist, tmp_path):
  wheel = glob.glob(str(dist / "*.whl"))[0]
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
  py = str(venv / "bin" / "python")
  subprocess.run([py, "-m", "pip", "install", "-q", wheel], check=True, timeout=1500)
  run = subprocess.run([str(venv / "bin" / "jaxacct"), "dpsgd", "--num-examples", "60000",
                        "--batch-size", "256", "--epochs", "10", "--delta", "1e-5",
                        "--target-epsilon", "3", "--quiet"],
                       capture_output=True, text=True, timeout=900, cwd=str(tmp_path))
  assert run.returncode == 0, run.stderr[-3000:]
  assert "noise multiplier sigma = 0.68" in run.stdout, run.stdout
