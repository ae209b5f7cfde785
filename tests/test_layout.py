"""The layout shows the architecture (issue 16): checked statically.

* no private name crosses a module boundary (``from a import _x``, ``a._x``,
  or a private module imported from another package);
* ``_core`` imports no scheme; no scheme imports another scheme (shared
  kernels live in ``_core`` or ``pld``);
* no module over ``MAX_LINES`` lines unless it is listed with its reason;
* one log-binomial pmf.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxacct"
SCHEMES = ("poisson", "allocation", "shuffle")
MAX_LINES = 600
# Uniform catalogues or modules still to be split (each with its reason).
LONG_OK = {}


def _modules():
  for f in sorted(ROOT.rglob("*.py")):
    rel = f.relative_to(ROOT.parent).with_suffix("")
    name = ".".join(rel.parts)
    if name.endswith(".__init__"):
      name = name[: -len(".__init__")]
    yield name, f


def _package(name):
  """jaxacct.<top> for a module name (the unit that may share privates)."""
  parts = name.split(".")
  return ".".join(parts[:2])


def _private(s):
  return s.startswith("_") and not s.startswith("__")


def _imports(tree):
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module:
      yield node.lineno, node.module, [a.name for a in node.names]
    elif isinstance(node, ast.Import):
      for a in node.names:
        yield node.lineno, a.name, []


def test_no_private_names_cross_modules():
  bad = []
  for name, f in _modules():
    tree = ast.parse(f.read_text())
    for line, mod, names in _imports(tree):
      if not mod.startswith("jaxacct"):
        continue
      for n in names:
        sibling = (ROOT.parent / mod.replace(".", "/") / (n + ".py")).exists()
        if _private(n) and not (sibling and _package(mod) == _package(name)):
          bad.append(f"{name}:{line} imports {mod}.{n}")
      last = mod.split(".")[-1]
      if _private(last) and last != "_core" and _package(mod) != _package(name):
        bad.append(f"{name}:{line} imports private module {mod}")
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and _private(node.attr)
          and isinstance(node.value, ast.Name) and node.value.id not in ("self", "cls")
          and node.attr not in ("_replace", "_asdict", "_fields", "_make")):
        bad.append(f"{name}:{node.lineno} reaches {node.value.id}.{node.attr}")
  assert not bad, "\n".join(bad)


def test_schemes_do_not_import_each_other_and_core_imports_no_scheme():
  bad = []
  for name, f in _modules():
    here = name.split(".")[1] if "." in name else ""
    for line, mod, _ in _imports(ast.parse(f.read_text())):
      parts = mod.split(".")
      if parts[0] != "jaxacct" or len(parts) < 2:
        continue
      other = parts[1]
      if here == "_core" and other in SCHEMES + ("pld", "tracking", "accounting"):
        bad.append(f"{name}:{line} (_core) imports {mod}")
      if here in SCHEMES and other in SCHEMES and other != here:
        bad.append(f"{name}:{line} (scheme) imports {mod}")
  assert not bad, "\n".join(bad)


def test_module_sizes():
  long = {name: len(f.read_text().splitlines()) for name, f in _modules()}
  bad = {n: k for n, k in long.items() if k > MAX_LINES and n not in LONG_OK}
  assert not bad, bad


def test_one_log_binomial_pmf():
  defs = []
  for name, f in _modules():
    for node in ast.walk(ast.parse(f.read_text())):
      if isinstance(node, ast.FunctionDef) and "binom" in node.name and (
          "logpmf" in node.name or "log_pmf" in node.name or "pmf" in node.name):
        defs.append(f"{name}.{node.name}")
  assert defs == ["jaxacct._core.logmath.log_binom_pmf"], defs


def test_tests_use_public_names():
  """Tests reach jaxacct through public names: no ``_private`` function,
  attribute or module of jaxacct (the numerics layer ``jaxacct._core`` is
  unit-tested directly in test_core.py and used for oracles; that is the one
  private package tests may import)."""
  bad = []
  for f in sorted((ROOT.parent / "tests").glob("test_*.py")):
    tree = ast.parse(f.read_text())
    ours = set()   # local names bound to jaxacct modules or objects
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jaxacct"):
        parts = [p for p in node.module.split(".") if p not in ("_core", "__main__")]
        bad += [f"{f.name}:{node.lineno} imports module {node.module}"
                for p in parts if _private(p)]
        for a in node.names:
          if _private(a.name):
            bad.append(f"{f.name}:{node.lineno} imports {node.module}.{a.name}")
          ours.add(a.asname or a.name)
      elif isinstance(node, ast.Import):
        for a in node.names:
          if a.name.startswith("jaxacct"):
            ours.add((a.asname or a.name).split(".")[0])
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and _private(node.attr)
          and isinstance(node.value, ast.Name) and node.value.id in ours
          and node.attr not in ("_replace", "_asdict", "_fields", "_make", "_core")):
        bad.append(f"{f.name}:{node.lineno} reaches {node.value.id}.{node.attr}")
  assert not bad, "\n".join(bad)
