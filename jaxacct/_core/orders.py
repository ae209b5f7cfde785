"""Renyi order grids.

``DEFAULT_ORDERS`` is chosen so that the grid is never the reason a bound is
loose: ``alpha - 1`` geometric from 0.01 to 11 with ratio 1.1 (74 orders),
1.1..10.9 in steps of 0.1 (dp-accounting's default fractional orders),
every integer 2..256, then a geometric integer grid (ratio ~1.03) up to 1024
(integer orders up to 1024 use the exact binomial expansion in ``poisson``).
Near the optimum epsilon(alpha) is quadratic; with relative spacing r of
``alpha - 1`` the loss is about (r/2)^2/4 of epsilon, i.e. below 0.1 % here
(tested against a 10x denser grid in ``tests/test_core_conversion.py``).
"""

from __future__ import annotations

import numpy as np

from jaxacct._core import checks


def _default_orders() -> np.ndarray:
  frac = np.round(1.0 + np.geomspace(0.01, 11.0, 74), 4)
  # dp-accounting 0.6.0's default fractional orders, so that our default grid
  # contains theirs and our epsilon is never above theirs for the same RDP.
  dp_grid = np.round(1.0 + np.arange(1, 100) / 10.0, 1)
  ints = np.arange(2, 257, dtype=np.float64)
  geo = np.unique(np.round(np.geomspace(257, 1024, 48)))
  return np.unique(np.concatenate([frac, dp_grid, ints, geo])).astype(np.float64)


DEFAULT_ORDERS: np.ndarray = _default_orders()
DEFAULT_ORDERS.setflags(write=False)


def integer_orders(max_order: int = 256, min_order: int = 2) -> np.ndarray:
  """Integer orders ``min_order..max_order`` as float64."""
  checks.check_int("min_order", min_order, min_value=2)
  checks.check_int("max_order", max_order, min_value=2)
  if int(max_order) < int(min_order):
    raise ValueError(
        f"max_order must be >= {min_order}; got {max_order}.")
  return np.arange(int(min_order), int(max_order) + 1, dtype=np.float64)


DEFAULT_INTEGER_ORDERS: np.ndarray = np.unique(np.concatenate([
    np.arange(2, 257, dtype=np.float64),
    np.round(np.geomspace(257, 1024, 40))]))
DEFAULT_INTEGER_ORDERS.setflags(write=False)
