"""Declared runtime dependencies match what the package imports (issue 19:
chex was declared but never imported; scipy was imported but missing from the
README's list)."""

import ast
import os
import re
import sys
import tomllib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
_IMPLICIT = {"jaxlib"}          # installed with jax; declared to pin its version
# optional: imported inside one function only, shipped in an extra
# (dp_accounting: jaxacct.pld.to_dp_accounting and the accounting package;
# attr: dp_accounting's events are attrs classes (accounting.state), installed
# with dp-accounting; tqdm: progress bars, plain-text fallback without it;
# matplotlib: jaxacct.plot, extra "plot")
_OPTIONAL = {"dp_accounting": "dp-accounting", "attr": "dp-accounting", "tqdm": "tqdm",
             "matplotlib": "matplotlib", "jax_privacy": "jax-privacy"}


def _runtime_imports():
  found = set()
  for dirpath, _, files in os.walk(os.path.join(ROOT, "jaxacct")):
    for f in files:
      if f.endswith(".py"):
        tree = ast.parse(open(os.path.join(dirpath, f)).read())
        for node in ast.walk(tree):
          if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
          elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
  return {m for m in found if m not in sys.stdlib_module_names and m != "jaxacct"}


def _declared():
  deps = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]["dependencies"]
  return {re.split(r"[<>=!~ \[]", d, maxsplit=1)[0].lower() for d in deps}


def test_pyproject_dependencies_are_the_runtime_imports():
  assert _declared() - _IMPLICIT == _runtime_imports() - set(_OPTIONAL)
  extras = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"][
      "optional-dependencies"]
  in_extras = {re.split(r"[<>=!~ \[]", d, maxsplit=1)[0] for v in extras.values() for d in v}
  assert set(_OPTIONAL.values()) <= in_extras


def test_readme_lists_the_runtime_dependencies():
  text = open(os.path.join(ROOT, "README.md")).read()
  m = re.search(r"runtime deps: ([^)]*)\)", text)
  assert m, "README must list the runtime deps"
  listed = {x.strip() for x in m.group(1).split(",")}
  assert listed == _declared()
