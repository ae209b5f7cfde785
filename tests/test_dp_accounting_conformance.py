"""dp_accounting's own accountant tests, run against jaxacct's PLDAccountant.

dp_accounting 0.6.0 ships ``dp_accounting/pld/pld_privacy_accountant_test.py``
(and its base class ``privacy_accountant_test.PrivacyAccountantTest``). This
module imports that installed test module and runs every test in it with
``pld_privacy_accountant.PLDAccountant`` (and ``NeighborRel``) replaced by
jaxacct's: their code is not copied here, and their semantics are ours (0 for
an empty or no-op ledger, inf for a non-private one, ValueError for a
non-positive count, UnsupportedEventError naming the relation). One case
(truncated subsampled Gaussian) pins a value looser than ours: it is checked
to fail only there, with ours below theirs (``_TIGHTER``).
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


def _name(case):
  """The test method's name (with parameterized's index suffix), no parameter repr."""
  prefix = f"{type(case).__module__}.{type(case).__qualname__}."
  return case.id()[len(prefix):].split(" ", 1)[0]


def _truncated_is_tighter(result):
  """dp_accounting's truncated-subsampled-Gaussian value is loose; ours is tighter.

  Their test pins epsilon 17.904330 at delta 1e-6 (within 1e-6) for
  3 x (n=4) + 2 x (n=3) events (q = 0.5, b = 2, sigma = 1). Their pair puts
  the *replace-one* subsampled Gaussian at sigma/2 in the truncated branch
  (their comment: "a (slightly loose) upper bound"); ours puts the
  add/remove pair there at the worst revealed count of other records,
  q b/(b+1) (``jaxacct.accounting.mixtures.truncated_poisson_gaussian``
  derives it), and here that is smaller than theirs. The case must fail
  only on that value check, and ours must lie between our certified lower
  bound and their value.
  """
  from dp_accounting import dp_event
  assert not result.errors and len(result.failures) == 1, result.errors
  assert "17.90433" in result.failures[0][1] or "1e-06" in result.failures[0][1]
  acc = PLDAccountant()
  acc.compose(dp_event.TruncatedSubsampledGaussianDpEvent(4, 0.5, 2, 1.0), 3)
  acc.compose(dp_event.TruncatedSubsampledGaussianDpEvent(3, 0.5, 2, 1.0), 2)
  r = acc.get_epsilon_bounds(1e-6)
  assert r.lower <= r.epsilon < 17.904330   # 17.904330: dp_accounting's own test


# cases whose expected value is looser than ours, with the check that replaces theirs
_TIGHTER = {"test_truncated_subsampled_gaussian_basic": _truncated_is_tighter}


def test_all_cases_collected():
  # dp_accounting 0.6.0's module has 68 test cases (parameterized expanded)
  assert len(_CASES) == 68
  assert len({_name(c) for c in _CASES}) == 68


# the two cases whose ledgers build large PLD grids (tens of seconds each) run
# under -m slow; the events themselves are covered in the default suite by
# tests/test_accounting_events_more.py
_SLOW = {"test_mixture_of_gaussians_basic", "test_truncated_subsampled_gaussian_basic"}


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.slow) if _name(c) in _SLOW else c for c in _CASES],
    ids=[f"{_name(c)}-{i}" for i, c in enumerate(_CASES)])
def test_dp_accounting_case(case):
  result = unittest.TestResult()
  case.run(result)
  if _name(case) in _TIGHTER:
    _TIGHTER[_name(case)](result)
    return
  problems = result.failures + result.errors
  assert not problems, problems[0][1]
  assert not result.skipped or result.skipped[0][1]
