"""Every notebook in notebooks/ runs end to end (nbclient, CPU) and is stored
without outputs.

The notebooks are part of the documentation: a newcomer runs them, so a
broken cell is a broken release. Each one asserts its own key numbers against
an independent computation (a peer, a paper value, or another jaxacct method
with a documented relation), so executing it is a test.
"""

import glob
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

HERE = os.path.dirname(os.path.abspath(__file__))
NB_DIR = os.path.join(HERE, "..", "notebooks")
NOTEBOOKS = sorted(glob.glob(os.path.join(NB_DIR, "*.ipynb")))


def test_there_are_notebooks():
  names = {os.path.basename(p) for p in NOTEBOOKS}
  assert len(names) >= 4, names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_is_stored_without_outputs(path):
  nb = nbformat.read(path, as_version=4)
  for cell in nb.cells:
    if cell.cell_type == "code":
      assert not cell.outputs and cell.execution_count is None, (
          f"{os.path.basename(path)}: strip outputs before committing")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_executes(path, monkeypatch):
  monkeypatch.setenv("MPLBACKEND", "Agg")
  monkeypatch.setenv("JAXACCT_NOTEBOOK_TEST", "1")
  nb = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                   resources={"metadata": {"path": NB_DIR}})
  client.execute()
