"""Prose in its place: short module docstrings, no history in the source, a
README a newcomer reads in two minutes, and README examples that run.

* every module docstring under jaxacct/ is at most 40 lines (derivations live
  in docs/bounds/);
* no date (YYYY-MM-DD) and no "issue N" in jaxacct/ (history belongs in git and
  bench/results/);
* README.md is at most 150 lines, and its Python examples (doctest form)
  print exactly what they show.
"""

import ast
import doctest
import glob
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCES = sorted(glob.glob(os.path.join(ROOT, "jaxacct", "**", "*.py"), recursive=True))
_DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
_ISSUE = re.compile(r"\b[Ii]ssues?[ -]#?\d+")


def test_module_docstrings_are_short():
  long = []
  for path in SOURCES:
    doc = ast.get_docstring(ast.parse(open(path, encoding="utf-8").read()), clean=False)
    if doc and len(doc.splitlines()) > 40:
      long.append(f"{os.path.relpath(path, ROOT)}: {len(doc.splitlines())} lines")
  assert not long, "module docstrings over 40 lines (move the essay to docs/bounds/):\n" + \
      "\n".join(long)


def test_source_has_no_dates_or_issue_numbers():
  found = []
  for path in SOURCES:
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
      if _DATE.search(line) or _ISSUE.search(line):
        found.append(f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()}")
  assert not found, "\n".join(found)


def test_readme_is_a_front_page():
  lines = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().splitlines()
  assert len(lines) <= 150, len(lines)
  assert not any(_DATE.search(ln) for ln in lines), "README holds a date"


def test_readme_examples_print_what_they_show(monkeypatch):
  pytest.importorskip("dp_accounting")
  monkeypatch.setenv("JAXACCT_PROGRESS", "0")
  result = doctest.testfile(os.path.join(ROOT, "README.md"), module_relative=False,
                            optionflags=doctest.NORMALIZE_WHITESPACE, verbose=False,
                            report=True)
  assert result.attempted >= 10, result
  assert result.failed == 0, result


def test_readme_quick_start_table_is_what_the_cli_prints(monkeypatch):
  """The README's table summarises the main job (``jaxacct dpsgd ...
  --target-epsilon 3 --sampling S``): the same statements, at the printed
  precision."""
  import jaxacct
  monkeypatch.setenv("JAXACCT_PROGRESS", "0")
  text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
  rows = re.findall(r"^\| `(\w+)` \([^|]*\) \| ([\d.]+) \| ([^|]*) \|$", text, re.MULTILINE)
  assert [r[0] for r in rows] == ["balls_in_bins", "poisson", "shuffle"], rows
  for sampling, sigma, eps in rows:
    d = jaxacct.dpsgd.statement(num_examples=60_000, batch_size=256, num_epochs=10,
                                delta=1e-5, target_epsilon=3.0, sampling=sampling).to_dict()
    assert f"{d['noise_multiplier']:.6g}" == sigma, (sampling, d["noise_multiplier"])
    shown = [float(x) for x in re.findall(r"[\d.]+", eps)]
    upper, lower = d["epsilon"]["upper"], d["epsilon"].get("lower")
    if len(shown) == 2:
      assert [f"{lower:.5g}", f"{upper:.6g}"] == [f"{shown[0]:.5g}", f"{shown[1]:.6g}"], d
    else:
      assert f"{upper:.6g}" == f"{shown[0]:.6g}", d
