"""Host-side solvers of jaxacct._core.solve: feasible side kept, failures explicit."""

import math

import numpy as np
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



def test_largest_feasible_int_host_per_lane():
  # feasible iff n <= limit of the lane (limits 3, 7 and the range end 10)
  lim = np.array([3, 7, 12])
  x = solve.largest_feasible_int_host(lambda ns, idx: np.asarray(ns) <= lim[idx], 1, 10, 3,
                                      name="n")
  np.testing.assert_array_equal(x, [3, 7, 10])
  with pytest.raises(ValueError, match=r"no n in \[1, 10\]"):
    solve.largest_feasible_int_host(lambda ns, idx: np.asarray(ns) <= 0, 1, 10, 2, name="n")
