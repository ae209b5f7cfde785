"""Docstring examples run: every ``>>>`` example in the docstring of a public
name (a name in the ``__all__`` of a public jaxacct module) executes in its
module's namespace and prints what it shows, with no deprecation warning of
jaxacct's own (``StepsUnitWarning``)."""

import doctest
import importlib
import warnings

import pytest

import jaxacct

MODULES = ["jaxacct", "jaxacct.dpsgd", "jaxacct.accounting", "jaxacct.accounting.events",
           "jaxacct.accounting.fixed_size", "jaxacct.accounting.mixtures", "jaxacct.allocation",
           "jaxacct.allocation.pld", "jaxacct.allocation.sum_law", "jaxacct.poisson",
           "jaxacct.shuffle", "jaxacct.shuffle.bounds", "jaxacct.pld", "jaxacct.mechanisms",
           "jaxacct.tracking", "jaxacct.sampling", "jaxacct.risk", "jaxacct.plot",
           "jaxacct.calibrator", "jaxacct.experimental"]


def _doctests():
  finder = doctest.DocTestFinder(recurse=True)
  seen = set()
  for m in MODULES:
    mod = importlib.import_module(m)
    for name in mod.__all__:
      obj = getattr(mod, name)
      if isinstance(obj, type(mod)) or not callable(obj):
        continue
      for test in finder.find(obj, f"{m}.{name}"):
        key = (test.filename, test.lineno)
        if test.examples and key not in seen:
          seen.add(key)
          yield pytest.param(test, id=test.name)


DOCTESTS = list(_doctests())


def test_there_are_docstring_examples():
  assert len(DOCTESTS) >= 8, len(DOCTESTS)


@pytest.mark.parametrize("test", DOCTESTS)
def test_docstring_example(test, monkeypatch):
  monkeypatch.setenv("JAXACCT_PROGRESS", "0")
  runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
  report = []
  with warnings.catch_warnings():
    warnings.simplefilter("error", jaxacct.StepsUnitWarning)
    result = runner.run(test, out=report.append, clear_globs=True)
  assert result.failed == 0, "".join(report)
