"""Every notebook in notebooks/ runs end to end (nbclient, CPU) from a copy
outside the repository, prints no ``nan`` and no float32-truncation warning,
and is stored with its outputs and plots (so that it reads on GitHub and in the
documentation), produced by the current API (no warning, no error).

The notebooks are part of the documentation: a newcomer runs them, so a
broken cell is a broken release. Each one asserts its own key numbers against
an independent computation (a peer, a paper value, or another jaxacct method
with a documented relation), so executing it is a test.

Each notebook is executed once (01-04 under ``-m slow``), from a temporary
directory (a notebook must not import from the checkout by relative path). ``PYTHONPATH`` points at the
checkout under test, as an installed package would be found. For the notebooks
in ``STORED_EQUALS_FRESH`` the printed text of that execution must equal the
stored one (times masked). To store a notebook: execute it with
``nbclient.NotebookClient(nb, kernel_name="python3").execute()`` from a copy
outside the checkout (``PYTHONPATH`` at it, ``MPLBACKEND=Agg``) and write it back
with ``nbformat.write``.
"""

import glob
import os
import re
import shutil

import pytest
from support import attribute_chains

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
NB_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(glob.glob(os.path.join(NB_DIR, "*.ipynb")))

_NAN = re.compile(r"\bnan\b", re.IGNORECASE)
_F32 = "truncated to dtype float32"


def test_there_are_notebooks():
  names = {os.path.basename(p) for p in NOTEBOOKS}
  assert len(names) >= 4, names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_is_stored_with_outputs(path):
  """Re-execute and store: ``python -m nbclient``-style, see docs (Tutorials)."""
  nb = nbformat.read(path, as_version=4)
  name = os.path.basename(path)
  code = [c for c in nb.cells if c.cell_type == "code"]
  assert all(c.execution_count is not None for c in code), f"{name}: not executed"
  counts = [c.execution_count for c in code]
  assert counts == sorted(counts), f"{name}: cells executed out of order"
  outputs = [o for c in code for o in c.outputs]
  assert any(o.output_type == "stream" for o in outputs), f"{name}: no printed output"
  for o in outputs:
    assert o.output_type != "error", f"{name}: stored output holds an error"
    text = o.get("text", "") if o.output_type == "stream" else ""
    assert "Warning" not in text, f"{name}: stored output holds a warning:\n{text}"
  texts = "".join(c.source for c in nb.cells)
  if "plt.show()" in texts:
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{name}: plots not stored"
  assert not re.search(r"[Ii]ssue \d+|[Dd]igest", texts), f"{name}: cites project history"


def _texts(nb):
  for i, cell in enumerate(nb.cells):
    if cell.cell_type != "code":
      continue
    for out in cell.outputs:
      if out.output_type == "stream":
        yield i, out.text
      elif out.output_type in ("execute_result", "display_data"):
        yield i, str(out.get("data", {}).get("text/plain", ""))


# Executing a notebook costs 40-180 s of fresh-kernel compilation on 2 cores;
# the default suite executes the fastest one and checks every notebook's code
# statically (test_notebook_code_resolves); ``-m slow`` executes them all.
FAST_NOTEBOOKS = {"05_dp_accounting.ipynb"}


# Notebooks whose printed text (stdout, timings masked) is compared with a fresh
# execution: a stored number that no longer reproduces fails the test.
STORED_EQUALS_FRESH = {"05_dp_accounting.ipynb"}
_SECONDS = re.compile(r"\b\d+(?:\.\d+)? s\b")


def _printed(nb):
  """Each code cell's stdout, the streams joined (a kernel may split one
  cell's prints into several), times in seconds masked."""
  return [_SECONDS.sub("<t> s", "".join(o.text for o in c.outputs
                                         if o.output_type == "stream" and o.name == "stdout"))
          for c in nb.cells if c.cell_type == "code"]


def _exec_params():
  for p in NOTEBOOKS:
    name = os.path.basename(p)
    marks = () if name in FAST_NOTEBOOKS else (pytest.mark.slow,)
    yield pytest.param(p, id=name, marks=marks)


def _code(path):
  nb = nbformat.read(path, as_version=4)
  return [c.source for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_code_resolves(path):
  """Every code cell parses, and every ``alias.attr...`` chain rooted at a
  jaxacct import (``import jaxacct``, ``from jaxacct.x import y as z``)
  names something that exists: an API rename breaks this test, not a reader.
  """
  import ast
  import importlib
  aliases = {}
  trees = []
  for i, src in enumerate(_code(path)):
    lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    tree = ast.parse("\n".join(lines), filename=f"{os.path.basename(path)}[{i}]")
    trees.append(tree)
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        for a in node.names:
          if a.name.split(".")[0] == "jaxacct":
            aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "jaxacct"
      elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxacct"):
        for a in node.names:
          aliases[a.asname or a.name] = f"{node.module}.{a.name}"
  checked = 0
  for tree in trees:
    for node, root, chain in attribute_chains(tree, aliases):
      target = aliases[root]
      mod, _, last = target.rpartition(".")
      try:
        obj = importlib.import_module(target)
      except ImportError:
        obj = getattr(importlib.import_module(mod), last)
      for name in chain:
        if not hasattr(obj, name) and isinstance(obj, type(importlib)):
          try:
            obj = importlib.import_module(f"{obj.__name__}.{name}")
            continue
          except ImportError:
            pass
        if not hasattr(obj, name):
          if not (callable(obj) or isinstance(obj, type(importlib))):
            break            # an attribute of a value (a result's field): not checked
          raise AssertionError(f"{os.path.basename(path)}: {root}.{'.'.join(chain)}"
                               f" -- {target} has no {name!r}")
        obj = getattr(obj, name)
      checked += 1
  assert checked >= 3, f"{os.path.basename(path)}: only {checked} jaxacct references found"


@pytest.mark.parametrize("path", list(_exec_params()))
def test_notebook_executes_outside_repo(path, tmp_path, monkeypatch):
  monkeypatch.setenv("MPLBACKEND", "Agg")
  monkeypatch.setenv("JAXACCT_NOTEBOOK_TEST", "1")
  monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  copy = tmp_path / os.path.basename(path)
  shutil.copy(path, copy)                    # nothing else of the repo is there
  nb = nbformat.read(str(copy), as_version=4)
  client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                   resources={"metadata": {"path": str(tmp_path)}})
  client.execute()
  for i, text in _texts(nb):
    assert not _NAN.search(text), f"{os.path.basename(path)} cell {i} prints nan:\n{text}"
    assert _F32 not in text, f"{os.path.basename(path)} cell {i}: float32 warning:\n{text}"
  if os.path.basename(path) in STORED_EQUALS_FRESH:   # what a reader sees is what runs
    stored = _printed(nbformat.read(path, as_version=4))
    assert stored == _printed(nb), (
        f"{os.path.basename(path)}: the stored outputs are not what it executes to now "
        "(re-execute and store it, see the module docstring):\n"
        f"stored {stored}\nfresh  {_printed(nb)}")
