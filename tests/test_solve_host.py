"""Host-side solvers of jaxacct._core.solve: feasible side kept, failures explicit."""

import math

import pytest

from jaxacct._core import solve


def test_invert_decreasing_host_keeps_feasible_end():
  fn = lambda x: math.exp(-x)                      # decreasing
  x = solve.invert_decreasing_host(fn, 1e-3, 1.0)
  assert fn(x) <= 1e-3
  assert x == pytest.approx(math.log(1e3), rel=1e-12)
  assert solve.invert_decreasing_host(fn, 2.0, 1.0) == 0.0        # met at 0
  # not met below hi_max: +inf, never the infeasible end
  assert solve.invert_decreasing_host(lambda x: 1.0, 0.5, 1.0, hi_max=8.0) == math.inf


def test_first_feasible_on_ladder_host():
  x = solve.first_feasible_on_ladder_host(lambda v: v >= 1.05, 1.0, factor=1.001, shift=1e-9,
                                          max_steps=50)
  assert x >= 1.05 and x / 1.001 < 1.05
  assert solve.first_feasible_on_ladder_host(lambda v: v >= 2.0, 1.0, factor=1.001,
                                             shift=0.0, max_steps=50) == math.inf
  assert solve.first_feasible_on_ladder_host(lambda v: True, math.inf, factor=1.001,
                                             shift=0.0, max_steps=50) == math.inf


def test_search_from_hint_host():
  f = lambda x: 2.0 / x - 1.0                      # feasible iff x >= 2
  for hint in (0.5, 1.9, 2.0, 2.3, 40.0):
    x = solve.search_from_hint_host(f, hint, 1.0, 100.0, rtol=1e-9, error="no x")
    assert f(x) <= 0 and x == pytest.approx(2.0, rel=1e-8)
  # the floor is returned only where it is feasible (hint within factor of it)
  x = solve.search_from_hint_host(f, 2.1, 1.9, 100.0, rtol=1e-9, error="no x")
  assert f(x) <= 0 and x == pytest.approx(2.0, rel=1e-8)
  assert solve.search_from_hint_host(f, 3.0, 2.5, 100.0, rtol=1e-9, error="no x") == 2.5
  with pytest.raises(ValueError, match="no x"):
    solve.search_from_hint_host(f, 1.0, 0.5, 1.5, rtol=1e-9, error="no x")
