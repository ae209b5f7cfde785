"""dp_accounting's own accountant tests, run against jaxacct's PLDAccountant.

dp_accounting 0.6.0 ships ``dp_accounting/pld/pld_privacy_accountant_test.py``
(and its base class ``privacy_accountant_test.PrivacyAccountantTest``). This
module imports that installed test module and runs every test in it with
``pld_privacy_accountant.PLDAccountant`` (and ``NeighborRel``) replaced by
jaxacct's: their code is not copied here, and their semantics are ours (0 for
an empty or no-op ledger, inf for a non-private one, ValueError for a
non-positive count, UnsupportedEventError naming the relation).
"""

import importlib
import sys
import unittest

import pytest

pytest.importorskip("dp_accounting")
pytest.importorskip("absl.testing.absltest")

from jaxacct.accounting import NeighboringRelation, PLDAccountant  # noqa: E402


def _swapped_module():
  """The installed dp_accounting test module, with our accountant swapped in."""
  import dp_accounting.pld.pld_privacy_accountant as theirs
  mod = importlib.import_module("dp_accounting.pld.pld_privacy_accountant_test")

  class _Shim:                       # what the test module reads from `theirs`
    PLDAccountant = PLDAccountant
    NeighborRel = NeighboringRelation

  mod.pld_privacy_accountant = _Shim
  assert theirs.PLDAccountant is not PLDAccountant
  return mod


def _cases():
  mod = _swapped_module()
  loader = unittest.TestLoader()
  suite = loader.loadTestsFromTestCase(mod.PldPrivacyAccountantTest)
  out = []

  def flatten(s):
    for t in s:
      if isinstance(t, unittest.TestSuite):
        flatten(t)
      else:
        out.append(t)

  flatten(suite)
  return out


_CASES = _cases()


def test_all_cases_collected():
  # dp_accounting 0.6.0's module has 68 test cases (parameterized expanded)
  assert len(_CASES) == 68


@pytest.mark.parametrize("case", _CASES, ids=[c.id().rsplit(".", 1)[-1] for c in _CASES])
def test_dp_accounting_case(case):
  result = unittest.TestResult()
  case.run(result)
  problems = result.failures + result.errors
  assert not problems, problems[0][1]
  assert not result.skipped or result.skipped[0][1]
