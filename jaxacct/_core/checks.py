"""Eager input validation.

Each check is a no-op on tracers (under ``jit``/``vmap`` there are no
concrete values to check: invalid lanes become NaN through ``jnp.where`` in
the kernels, as documented in each kernel). On concrete input a check raises
``ValueError`` naming the parameter, its valid range and the offending value.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

_DIRECTIONS = ("add", "remove", "both")


def is_concrete(x: Any) -> bool:
  """True unless ``x`` (or a leaf of it) is a JAX tracer."""
  leaves = jax.tree_util.tree_leaves(x)
  return not any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)


def _values(x) -> np.ndarray:
  return np.asarray(x, dtype=np.float64)


def _first_bad(arr: np.ndarray, bad: np.ndarray):
  return arr[bad].flat[0] if arr.ndim else arr.item()


def check_finite(name: str, x) -> None:
  if not is_concrete(x):
    return
  arr = _values(x)
  bad = ~np.isfinite(arr)
  if np.any(bad):
    raise ValueError(f"{name} must be finite; got {_first_bad(arr, bad)}.")


def check_range(name: str, x, lo: float = -np.inf, hi: float = np.inf, *,
                lo_open: bool = False, hi_open: bool = False,
                allow_inf: bool = False) -> None:
  """Checks ``lo <= x <= hi`` (open ends as requested), elementwise."""
  if not is_concrete(x):
    return
  arr = _values(x)
  bad = np.isnan(arr)
  if not allow_inf:
    bad |= np.isinf(arr)
  bad |= (arr <= lo) if lo_open else (arr < lo)
  bad |= (arr >= hi) if hi_open else (arr > hi)
  if np.any(bad):
    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    raise ValueError(
        f"{name} must be in {left}{lo:g}, {hi:g}{right}; got "
        f"{_first_bad(arr, bad)}.")


def check_positive(name: str, x, *, allow_inf: bool = False) -> None:
  check_range(name, x, 0.0, np.inf, lo_open=True, allow_inf=allow_inf)


def check_probability(name: str, x, *, open_lo: bool = False,
                      open_hi: bool = False) -> None:
  check_range(name, x, 0.0, 1.0, lo_open=open_lo, hi_open=open_hi)


def check_delta(x, name: str = "delta") -> None:
  check_range(name, x, 0.0, 1.0, lo_open=True, hi_open=True)


def check_int(name: str, x, *, min_value: int = 1,
              max_value: float = np.inf) -> None:
  """Checks that ``x`` holds integers in ``[min_value, max_value]``."""
  if not is_concrete(x):
    return
  arr = _values(x)
  bad = ~np.isfinite(arr) | (arr != np.round(arr)) | (arr < min_value) | (
      arr > max_value)
  if np.any(bad):
    hi = "inf" if max_value == np.inf else f"{int(max_value)}"
    raise ValueError(
        f"{name} must be an integer in [{min_value}, {hi}]; got "
        f"{_first_bad(arr, bad)}.")


def check_orders(orders, *, integer: bool = False, min_order: float = 1.0,
                 open_min: bool = True) -> np.ndarray:
  """Validates a 1-D array of Renyi orders; returns it as float64 numpy."""
  arr = np.atleast_1d(_values(orders))
  if arr.ndim != 1 or arr.size == 0:
    raise ValueError(f"orders must be a non-empty 1-D array; got shape {arr.shape}.")
  if integer:
    check_int("orders", arr, min_value=int(np.ceil(min_order)))
  else:
    check_range("orders", arr, min_order, np.inf, lo_open=open_min)
  return arr


def check_direction(direction: str) -> str:
  if direction not in _DIRECTIONS:
    raise ValueError(
        f"direction must be one of {_DIRECTIONS}; got {direction!r}.")
  return direction


def check_choice(name: str, value, choices) -> None:
  if value not in choices:
    raise ValueError(f"{name} must be one of {tuple(choices)}; got {value!r}.")
