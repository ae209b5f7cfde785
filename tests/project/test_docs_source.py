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


# ----------------------------------------------------------------------------
# issue 67 item 8: the docs as a new user reads them, in the sources too

def _doc_sources():
  """README and every Markdown page of docs/ (not the build, not the copied notebooks)."""
  pages = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md")]
  for path in sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)):
    rel = os.path.relpath(path, os.path.join(ROOT, "docs"))
    if not rel.startswith(("_build", "tutorials", "jupyter_execute")):
      pages.append(path)
  return pages


def test_links_resolve_in_the_markdown_sources():
  # Markdown links [text](path) and {doc}`path` roles name files that exist in the
  # repository, relative to the page (the tutorial links named docs/tutorials/, a
  # folder only the build makes)
  dead = []
  for page in _doc_sources():
    text = open(page, encoding="utf-8").read()
    here = os.path.dirname(page)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
      path = target.split("#")[0]
      if not path or re.match(r"[a-z]+:", path):    # an anchor, a URL, mailto:
        continue
      if not os.path.exists(os.path.join(here, path)):
        dead.append(f"{os.path.relpath(page, ROOT)}: ({target})")
    for role in re.findall(r"\{doc\}`([^`]+)`", text):
      target = re.sub(r".*<(.+)>$", r"\1", role)
      base = os.path.join(ROOT, "docs") if target.startswith("/") else here
      stem = os.path.join(base, target.lstrip("/"))
      if not any(os.path.exists(stem + ext) for ext in (".md", ".ipynb", ".rst")):
        dead.append(f"{os.path.relpath(page, ROOT)}: {{doc}}`{role}`")
  assert not dead, "links that do not resolve in the sources:\n" + "\n".join(dead)


def _help(argv):
  import contextlib
  import io

  from jaxacct.__main__ import main
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    try:
      main(argv)
    except SystemExit:
      pass
  return buf.getvalue()


def test_docs_use_only_flags_that_help_shows():
  # the docs used `--epochs`, which --help hides (its old spelling)
  from jaxacct import sweep
  shown = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", "".join(
      [_help([]), _help(["dpsgd", "--help"]), _help(["table", "--help"]),
       sweep.parser().format_help()])))
  assert {"--num-epochs", "--brief", "--sigma", "--axis"} <= shown
  pages = _doc_sources() + sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
  bad = []
  for page in pages:
    if page.endswith("glossary.md") or page.endswith("CHANGELOG.md"):
      continue   # the glossary lists the hidden spellings as such; the changelog, history
    text = open(page, encoding="utf-8").read().replace('\\"', '"')
    cmds = re.findall(r"jaxacct (?:dpsgd|table)\b[^`\n;|]*", text)
    cmds += re.findall(r"\[\s*\"jaxacct\",[^\]]*\]", text, re.S)
    cmds += re.findall(r"-m jaxacct\.sweep\b[^`\n]*", text)
    for flag in sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", " ".join(cmds)))):
      if flag not in shown:
        bad.append(f"{os.path.relpath(page, ROOT)}: {flag}")
  assert not bad, "flags the docs use that --help does not show:\n" + "\n".join(bad)


def test_privacy_statement_page_covers_every_sampler():
  from jaxacct.dpsgd import samplers
  text = open(os.path.join(ROOT, "docs", "how-to", "privacy_statement.md"),
              encoding="utf-8").read()
  rows = re.findall(r"^\| `(\w+)`", text, re.M)
  assert set(samplers.names()) <= set(rows), sorted(set(samplers.names()) - set(rows))
  assert "shuffle only" not in text and "zero_out" in text
  assert "--epochs" not in text.replace("--num-epochs", "")


def test_changelog_claims_no_release_that_does_not_exist():
  # it linked a package-index release of 0.1.0 that was never published
  text = open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8").read()
  assert "pypi.org/project/jaxacct" not in text
  versions = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?(.*)$", text, re.M)
  assert versions, "no version heading"
  for version, rest in versions:
    assert "not released" in rest, (version, rest)
