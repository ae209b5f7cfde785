"""The float64 boundary.

jaxacct computes in float64 but never changes the user's global JAX config.

Policy (tested in ``tests/test_core_dtype.py``):

* Every *eager* public entry point (front doors such as ``poisson.epsilon``)
  is wrapped in :func:`x64_boundary`, which runs the body under
  ``jax.enable_x64(True)``. Users who run JAX in float32 get float64 results
  and their global setting is untouched.
* A front door handed traced input while x64 is off (a user's float32
  ``jit`` or ``vmap``) raises the :func:`require_x64` error: float64 cannot be
  switched on inside a trace.
* The *jittable kernels* (``*_rdp`` functions and the like) may be called
  inside a user's own ``jit``. There the body is traced with whatever x64
  setting is active, and a float32 trace would silently lose the precision
  the bounds need; so kernels call :func:`require_x64` at trace time, which
  raises a ``RuntimeError`` telling the user to enable x64 (globally, or with
  ``with jax.enable_x64(True):`` around their jitted call).
"""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

F = TypeVar("F", bound=Callable)


def x64_enabled() -> bool:
  """Whether float64 is active in the current JAX context."""
  return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def x64_boundary(fn: F) -> F:
  """Runs ``fn`` with float64 enabled; the user's global config is untouched."""

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    if x64_enabled():
      return fn(*args, **kwargs)
    if any(isinstance(leaf, jax.core.Tracer)
           for leaf in jax.tree_util.tree_leaves((args, kwargs))):
      # traced in the user's float32 context: float64 cannot be switched on
      # inside a trace, so say what to do instead of failing on mixed dtypes.
      require_x64(f"jaxacct.{fn.__module__.removeprefix('jaxacct.')}.{fn.__name__}")
    with jax.enable_x64(True):
      return fn(*args, **kwargs)

  return wrapper  # type: ignore[return-value]


def dispatch(kernel: Callable, args: tuple, validate: Callable[[], None]):
  """The one eager/traced dispatch of a jittable kernel.

  Concrete input is validated (``validate()`` raises ValueError naming the
  parameter) and run under :func:`x64_boundary`; traced input (inside the
  user's ``jit``) goes straight to ``kernel``, which calls
  :func:`require_x64` and maps invalid lanes to NaN.
  """
  if not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(args)):
    validate()
    return x64_boundary(kernel)(*args)
  return kernel(*args)


def require_x64(where: str = "this jaxacct kernel") -> None:
  """Raises ``RuntimeError`` if float64 is not active (call at trace time)."""
  if not x64_enabled():
    raise RuntimeError(
        f"{where} needs float64, but JAX x64 is disabled in this context. "
        "Call the eager jaxacct API (it enables x64 internally), or wrap your "
        "jitted call in `with jax.enable_x64(True):`, or set "
        "jax.config.update('jax_enable_x64', True).")


def as_f64(x):
  """Converts to a float64 jax array (must be called with x64 enabled)."""
  return jnp.asarray(x, dtype=jnp.float64)
