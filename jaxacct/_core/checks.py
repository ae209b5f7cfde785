"""Eager input validation.

Each check is a no-op on tracers (under ``jit``/``vmap`` there are no
concrete values to check: invalid lanes become NaN through ``jnp.where`` in
the kernels, as documented in each kernel). On concrete input a check raises
``ValueError`` naming the parameter, its valid range and the offending value.
"""

from __future__ import annotations

import math
from typing import Any

import jax

import numpy as np

_DIRECTIONS = ("add", "remove", "both")
# RDP -> (eps, delta) conversions (``jaxacct._core.conversion``).
CONVERSIONS = ("tight", "classic")
#: The largest count a check accepts: 2**63 - 1024, the largest int64 that
#: float64 holds exactly (counts are compared as float64).
MAX_INT = 2**63 - 1024


def is_concrete(x: Any) -> bool:
  """True unless ``x`` (or a leaf of it) is a JAX tracer."""
  leaves = jax.tree_util.tree_leaves(x)
  return not any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)


def _values(x, name: str = "value") -> np.ndarray:
  """float64 view of a numeric input; strings (and non-numbers) are refused.

  ``np.asarray("1e-5", float64)`` would silently parse the string, so text
  (str, bytes, or arrays/lists holding text) is rejected before conversion.
  """
  check_not_text(name, x)
  if x is None:
    raise ValueError(f"{name} must be a number; got None.")
  check_not_bool(name, x)
  try:
    arr = np.asarray(x, dtype=np.float64)
  except (TypeError, ValueError, OverflowError) as err:
    raise ValueError(f"{name} must be numeric; got {_short(x)}.") from err
  if arr.size == 0:
    raise ValueError(f"{name} must not be empty; got an array of shape {arr.shape}.")
  return arr


def _short(x) -> str:
  text = repr(x)
  return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"


def _is_bool(x) -> bool:
  if isinstance(x, (bool, np.bool_)):
    return True
  if isinstance(x, (list, tuple)):
    return any(_is_bool(v) for v in x)
  dtype = getattr(x, "dtype", None)
  return dtype is not None and np.dtype(dtype) == np.bool_


def check_not_bool(name: str, x) -> None:
  """Raises ``ValueError`` when ``x`` is (or holds) a boolean: ``True`` is not the number 1."""
  if _is_bool(x):
    raise ValueError(f"{name} must be a number, not a boolean; got {_short(x)}.")


def _has_text(x) -> bool:
  if isinstance(x, (str, bytes, np.str_, np.bytes_)):
    return True
  if isinstance(x, np.ndarray):
    if x.dtype.kind in "USa":
      return True
    return x.dtype.kind == "O" and any(_has_text(v) for v in x.flat)
  if isinstance(x, (list, tuple)):
    return any(_has_text(v) for v in x)
  return False


def check_not_text(name: str, x) -> None:
  """Raises ``ValueError`` when ``x`` is (or holds) a string: strings are not numbers."""
  if _has_text(x):
    raise ValueError(f"{name} must be a number, not a string; got {x!r}.")


def _first_bad(arr: np.ndarray, bad: np.ndarray):
  return arr[bad].flat[0] if arr.ndim else arr.item()


class WindowTooLarge(ValueError):
  """A PLD question whose composed window (FFT length, in grid points) is over
  what the PLD engines run (``jaxacct.pld``'s ``MAX_WINDOW``): raised before any
  allocation; the doors restate it naming the user's argument (``num_steps``,
  ``count``, ...). ``points`` is the window the question needs."""

  def __init__(self, message: str, points: float):
    super().__init__(message)
    self.points = float(points)


class OneStepTooLarge(WindowTooLarge):
  """A :class:`WindowTooLarge` of one step's grid alone (a noise too small, or a
  loss too wide, for the step): no count helps, so its message (naming the
  parameter of that step) reaches the user as it is."""


def _scalar_values(x, name: str, scalar: bool) -> np.ndarray:
  arr = _values(x, name)
  if scalar and arr.ndim:
    raise ValueError(f"{name} must be a single number, not a list or an array; got "
                     f"{_short(x)}.")
  return arr


def check_finite(name: str, x, *, scalar: bool = False) -> None:
  if not is_concrete(x):
    return
  arr = _scalar_values(x, name, scalar)
  bad = ~np.isfinite(arr)
  if np.any(bad):
    raise ValueError(f"{name} must be finite; got {_first_bad(arr, bad)}.")


def check_range(name: str, x, lo: float = -np.inf, hi: float = np.inf, *,
                lo_open: bool = False, hi_open: bool = False,
                allow_inf: bool = False, scalar: bool = False) -> None:
  """Checks ``lo <= x <= hi`` (open ends as requested), elementwise.

  Every check here refuses booleans (``True`` is not the number 1), text,
  None and empty arrays, naming ``name``; ``scalar=True`` also refuses a list
  or an array where one number goes (a count, a noise multiplier).
  """
  if not is_concrete(x):
    return
  arr = _scalar_values(x, name, scalar)
  bad = np.isnan(arr)
  if not allow_inf:
    bad |= np.isinf(arr)
  bad |= (arr <= lo) if lo_open else (arr < lo)
  bad |= (arr >= hi) if hi_open else (arr > hi)
  if np.any(bad):
    # an infinite end that is refused is written open: "(0, inf)", never "(0, inf]; got inf"
    left = "(" if lo_open or (lo == -np.inf and not allow_inf) else "["
    right = ")" if hi_open or (hi == np.inf and not allow_inf) else "]"
    raise ValueError(
        f"{name} must be in {left}{lo:g}, {hi:g}{right}; got "
        f"{_first_bad(arr, bad)}.")


def check_positive(name: str, x, *, allow_inf: bool = False, scalar: bool = False) -> None:
  check_range(name, x, 0.0, np.inf, lo_open=True, allow_inf=allow_inf, scalar=scalar)


def check_probability(name: str, x, *, open_lo: bool = False,
                      open_hi: bool = False, scalar: bool = False) -> None:
  check_range(name, x, 0.0, 1.0, lo_open=open_lo, hi_open=open_hi, scalar=scalar)


def check_delta(x, name: str = "delta", *, scalar: bool = False) -> None:
  check_range(name, x, 0.0, 1.0, lo_open=True, hi_open=True, scalar=scalar)


def check_int(name: str, x, *, min_value: int = 1,
              max_value: float = np.inf, scalar: bool = False) -> None:
  """Checks that ``x`` holds integers in ``[min_value, max_value]``.

  ``max_value`` is at most :data:`MAX_INT` (about 2**63): a count beyond it has
  no machine integer, so it is refused here rather than wrapped or overflowed.
  """
  if not is_concrete(x):
    return
  arr = _scalar_values(x, name, scalar)
  max_value = min(max_value, MAX_INT)
  bad = ~np.isfinite(arr) | (arr != np.round(arr)) | (arr < min_value) | (
      arr > max_value)
  if np.any(bad):
    hi = f"{int(max_value)}"
    raise ValueError(
        f"{name} must be an integer in [{min_value}, {hi}]; got "
        f"{_first_bad(arr, bad)}.")


#: The largest local epsilon the shuffle doors account (e^eps0 is finite in float64);
#: above it shuffling amplifies nothing measurable: eps0 itself is the bound.
EPS0_MAX = 700.0
#: Above this a Gaussian noise multiplier is accounted at it: the privacy loss is 0
#: to float64 precision there, and more noise is a post-processing of less, so the
#: answer at SIGMA_MAX is a valid upper bound for every larger sigma (no overflow).
SIGMA_MAX = 1e100
#: The one-step Gaussian grids reach this many standard deviations into the tail
#: (1e-20 of mass beyond): the extent :func:`accountable_sigma` checks.
TAIL_SD = 9.4


#: the smallest noise multiplier (or scale) any door accounts (its square stays in float64)
SMALLEST_SIGMA = 1e-150


def check_accountable_noise(name: str, value) -> None:
  """ValueError naming ``name`` where a nonzero ``|value|`` is below
  :data:`SMALLEST_SIGMA` (the sign, and what is not a number, are checked elsewhere;
  traced input is not checked)."""
  if not is_concrete(value):
    return
  try:
    tiny = np.abs(np.asarray(value, np.float64))
  except (TypeError, ValueError):
    return
  tiny = tiny[(tiny > 0.0) & (tiny < SMALLEST_SIGMA)]
  if tiny.size:
    raise ValueError(
        f"{name} must be at least {SMALLEST_SIGMA:g}: below it one step's privacy loss "
        "is past float64's range and is not accounted (so little noise gives no "
        f"privacy); got {float(tiny[0]):g}.")


def check_sigma(name: str, x, **kw) -> None:
  """A noise multiplier (or scale): :func:`check_positive` and at least
  :data:`SMALLEST_SIGMA` (:func:`check_accountable_noise`)."""
  check_positive(name, x, **kw)
  check_accountable_noise(name, x)


def gaussian_loss_span(sigma, sensitivity: float = 1.0) -> float:
  """Loss range (nats) of a one-step Gaussian grid of mean shift ``sensitivity``:
  ``1 / (2 z^2) + TAIL_SD / z``, z = ``min(sigma, SIGMA_MAX) / sensitivity`` (inf
  where z underflows to 0)."""
  z = min(float(sigma), SIGMA_MAX) / sensitivity
  w = 1.0 / z if z > 0.0 else math.inf
  return 0.5 * w * w + TAIL_SD * w


def accountable_sigma(sigma, step, *, max_points: float, sensitivity: float = 1.0,
                      what: str = "the PLD", name: str = "noise_multiplier") -> float:
  """The noise multiplier a one-step Gaussian grid is built at: ``min(sigma, SIGMA_MAX)``.

  :class:`OneStepTooLarge` (a ``ValueError``) naming ``name``, with the smallest
  noise multiplier the grid holds at this ``step``, when the one-step privacy
  loss (mean shift ``sensitivity``: up to ``1 / (2 z^2) + TAIL_SD / z``, z =
  sigma / sensitivity) would span more than ``max_points`` grid points:
  refused before anything is allocated.
  """
  s = min(float(sigma), SIGMA_MAX)
  h = float(step)
  points = gaussian_loss_span(s, sensitivity) / h   # inf for sigma below ~1e-162: refused
  if points > max_points:
    # the smallest z with (1 / (2 z^2) + TAIL_SD / z) / h <= max_points: a root in 1/z
    smallest = sensitivity / (-TAIL_SD + np.sqrt(TAIL_SD**2 + 2.0 * max_points * h))
    raise OneStepTooLarge(
        f"{name} (sigma) {float(sigma):.6g} is too small for {what} at step {h:g}: one "
        f"step's privacy loss spans about {points:.3g} grid points, more than the PLD "
        f"engine runs ({int(max_points)}); noise multipliers >= {smallest:.3g} are "
        "accounted at this step. Use a larger noise multiplier or a coarser step "
        "(value_discretization_interval).", points)
  return s


def check_bracket(name: str, pair, *, lo: float = 0.0, lo_open: bool = True) -> None:
  """Checks a search bracket ``(a, b)`` of numbers with ``lo < a < b < inf``."""
  if not is_concrete(pair):
    return
  arr = _values(pair, name)
  if arr.shape != (2,):
    raise ValueError(f"{name} must be a pair (lo, hi); got {pair!r}.")
  check_range(name, arr, lo, np.inf, lo_open=lo_open)
  if not arr[0] < arr[1]:
    raise ValueError(f"{name} must have lo < hi; got {pair!r}.")


def check_orders(orders, *, integer: bool = False, min_order: float = 1.0,
                 open_min: bool = True) -> np.ndarray:
  """Validates a 1-D array of Renyi orders; returns it as float64 numpy."""
  arr = np.atleast_1d(_values(orders, "orders"))
  if arr.ndim != 1 or arr.size == 0:
    raise ValueError(f"orders must be a non-empty 1-D array; got shape {arr.shape}.")
  if integer:
    check_int("orders", arr, min_value=int(np.ceil(min_order)))
  else:
    check_range("orders", arr, min_order, np.inf, lo_open=open_min)
  return arr


def check_scalar(where: str, hint: str = "", **values) -> None:
  """Raises ``ValueError`` naming the first of ``values`` that is not a scalar.

  For front doors that take one setting per call; ``hint`` says where grids go.
  """
  for name, v in values.items():
    if np.ndim(v):
      raise ValueError(f"{where} takes a scalar {name}; got shape {np.shape(v)}."
                       + (f" {hint}" if hint else ""))


def check_direction(direction, allowed=_DIRECTIONS, name: str = "direction") -> str:
  """Checks a neighbouring-relation keyword ("add", "remove", "both")."""
  return check_choice(name, direction, allowed)


def check_choice(name: str, value, choices):
  """Checks that ``value`` is one of ``choices``; returns it.

  String choices accept only ``str`` values (so ``1``, ``None`` or an array
  never match by accident); other choices match by type and equality.
  Raises ``ValueError`` naming the parameter, the allowed values and the value.
  """
  choices = tuple(choices)
  if all(isinstance(c, str) for c in choices):
    ok = isinstance(value, str) and value in choices
  else:
    ok = False
    for c in choices:
      try:
        if value is c or (type(value) is type(c) and bool(value == c)):
          ok = True
          break
      except (TypeError, ValueError):
        continue
  if not ok:
    raise ValueError(f"{name} must be one of {choices}; got {value!r}.")
  return value


def check_choices(name: str, values, choices, *, allow_empty: bool = False) -> tuple:
  """Checks a sequence of choices (e.g. ``methods``); returns it as a tuple.

  A bare string is refused (``"rdp"`` is not ``("rdp",)``), as are unknown
  entries and, unless ``allow_empty``, an empty sequence.
  """
  choices = tuple(choices)
  if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
    raise ValueError(
        f"{name} must be a tuple of values from {choices}; got {values!r}.")
  for v in values:
    if not (isinstance(v, str) and v in choices):
      raise ValueError(f"{name} entries must be in {choices}; got {v!r}.")
  if not values and not allow_empty:
    raise ValueError(f"{name} must not be empty; allowed values: {choices}.")
  return tuple(values)


def check_static_bool(name: str, x) -> bool:
  """:func:`check_bool` of a static choice: ValueError when ``x`` is traced."""
  if not is_concrete(x):
    raise ValueError(f"{name} must be a concrete bool (not traced).")
  return check_bool(name, x)


def check_same_step(steps, rtol: float = 1e-12) -> None:
  """Checks that PLD grid steps agree (relative ``rtol``); tracers pass."""
  if not is_concrete(steps):
    return
  s0 = float(steps[0])
  for s in steps[1:]:
    if abs(float(s) - s0) > rtol * s0:
      raise ValueError(
          f"PLDs on different grids (step {s0} vs {float(s)}); rebuild them "
          "with one step (jaxacct.pld does not re-grid).")


def check_bool(name: str, x) -> bool:
  """Checks a flag: a Python/NumPy bool (or a concrete 0-d bool array); returns bool.

  Strings, numbers and None are refused (``"False"`` would be truthy).
  Tracers pass unchanged.
  """
  if not is_concrete(x):
    return x
  if isinstance(x, (bool, np.bool_)):
    return bool(x)
  if hasattr(x, "dtype") and np.shape(x) == () and np.asarray(x).dtype == np.bool_:
    return bool(np.asarray(x))
  raise ValueError(f"{name} must be True or False; got {x!r}.")
