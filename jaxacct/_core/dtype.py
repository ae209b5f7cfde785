"""The float64 boundary.

jaxacct computes in float64 but never changes the user's global JAX config.

Policy (tested in ``tests/test_core_dtype.py``): float64 is entered ONCE per
call into jaxacct, where the call crosses the public surface.

* :func:`dispatch` enters it for the public kernels (validate eagerly, then
  the module-level jitted kernel or its NumPy host twin).
* A public door that does float64 work of its own -- eager ``jnp`` ops, a
  direct call of a jitted kernel, arrays built with ``jnp`` -- is wrapped in
  :func:`x64_boundary`, which runs the body under ``jax.enable_x64(True)``.
* A door that only validates, works in NumPy on the host and calls
  :func:`dispatch` or other public doors needs no boundary of its own: each
  door it calls enters float64 itself (doors calling doors add none). A
  boundary nested in another one costs one flag check; the boundary is kept
  where a door's own body needs float64, not to shorten its callers' paths.
* Users who run JAX in float32 get float64 results from every public door,
  and their global setting is untouched (``tests/test_core_dtype.py`` calls
  every public callable once with x64 off).
* A door handed traced input while x64 is off (a user's float32 ``jit`` or
  ``vmap``) raises the :func:`require_x64` error: float64 cannot be switched
  on inside a trace. Doors that need concrete input (host doors) may instead
  fail on the tracer's conversion to a Python number.
* The *jittable kernels* (``*_rdp`` functions and the like) may be called
  inside a user's own ``jit``. There the body is traced with whatever x64
  setting is active, and a float32 trace would silently lose the precision
  the bounds need; so kernels call :func:`require_x64` at trace time, which
  raises a ``RuntimeError`` telling the user to enable x64 (globally, or with
  ``with jax.enable_x64(True):`` around their jitted call).

The entry template of a public kernel (issue 29): validate eagerly, then one
module-level jitted kernel that owns its shape buckets, through
:func:`dispatch` -- the one place that forks on concrete vs traced input
(with an optional NumPy host path for one concrete question). Static sizes
that depend on concrete values (summation windows, numbers of terms) come
from :func:`static_size`.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core.units import public_module

F = TypeVar("F", bound=Callable)


def x64_enabled() -> bool:
  """Whether float64 is active in the current JAX context."""
  return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def x64_boundary(fn: F) -> F:
  """Runs ``fn`` with float64 enabled; the user's global config is untouched.

  On a class (an accountant: one entry for its methods), every public method
  defined in the class body (a plain function whose name does not start with
  ``_``; not properties, static or class methods, nor inherited methods) is
  wrapped so; the class itself is returned.
  """
  if isinstance(fn, type):
    for name, attr in list(vars(fn).items()):
      if not name.startswith("_") and inspect.isfunction(attr):
        setattr(fn, name, x64_boundary(attr))
    return fn

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    if x64_enabled():
      return fn(*args, **kwargs)
    if any(isinstance(leaf, jax.core.Tracer)
           for leaf in jax.tree_util.tree_leaves((args, kwargs))):
      # traced in the user's float32 context: float64 cannot be switched on
      # inside a trace, so say what to do instead of failing on mixed dtypes.
      module = public_module(fn.__module__)
      require_x64(f"{module}.{fn.__qualname__}")
    with jax.enable_x64(True):
      return fn(*args, **kwargs)

  return wrapper  # type: ignore[return-value]


def traced(args) -> bool:
  """Whether a leaf of the pytree ``args`` is a JAX tracer (inside a trace)."""
  return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(args))


def dispatch(kernel: Callable, args: tuple, validate: Callable[[], None] | None = None, *,
             host: Callable | None = None, eager: Callable | None = None,
             where: str | None = None):
  """The one entry of a public kernel: the eager/traced fork lives here only.

  Concrete ``args``: ``validate()`` raises ``ValueError`` naming the
  parameter; then, under float64 (:func:`x64_boundary`), ``host(*args)``
  answers when given and not ``None`` (one question in NumPy on the host: no
  compiled program), else ``(eager or kernel)(*args)`` (the module-level
  jitted kernel, or an eager driver of it).

  Traced ``args`` (the user's ``jit``/``vmap``): ``kernel(*args)``, after
  :func:`require_x64` naming ``where`` when given (else the kernel calls it);
  the checks do nothing on tracers and the kernel maps invalid lanes to NaN.
  """
  if traced(args):
    if where is not None:
      require_x64(where)
    return kernel(*args)
  if validate is not None:
    validate()
  return x64_boundary(_concrete_call)(kernel, host, eager, *args)


def _concrete_call(kernel, host, eager, *args):
  if host is not None:
    out = host(*args)
    if out is not None:
      return out
  return (eager or kernel)(*args)


def host_scalar(x, cast: Callable):
  """``cast(x)`` (``int``, ``float``) of a concrete value, ``x`` itself when traced:
  a result field that is a Python scalar on the host and stays traced under jit."""
  return x if traced(x) else cast(x)


def static_size(values, size: Callable[[], int], *, bound: Callable[[], int] | None = None,
                default: int | None = None, need: str = "max_n",
                message: str | None = None) -> int:
  """A static size (a summation window, a number of terms) of a jitted kernel.

  ``bound()`` when the caller declared a static bound (``bound`` given);
  else ``size()`` from the values when no leaf of ``values`` is traced; else
  ``default``; with none of them a ``ValueError`` asks for the static
  keyword ``need`` (or says ``message``).
  """
  if bound is not None:
    return bound()
  if not traced(values):
    return size()
  if default is not None:
    return default
  if message is not None:
    raise ValueError(message)
  raise ValueError(
      f"an input is traced: pass the static keyword {need} (an upper bound on n) "
      "so the summation window can be sized.")


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
