"""The float64 boundary.

jaxacct computes in float64 but never changes the user's global JAX config.

Policy (tested in ``tests/test_core_dtype.py``): float64 is entered ONCE per
call into jaxacct, where the call crosses the public surface, and it is
entered there by construction, not door by door:

* every plain function a public module or package lists in ``__all__`` is a
  *public door* (:func:`public_door`): its body runs under
  ``jax.enable_x64(True)``. A public module (``jaxacct.poisson``, ...) or an
  eager package (``jaxacct.allocation``, ...) ends with
  ``public_surface(globals())``, which binds its ``__all__`` functions (read
  then) to their doors; a lazy package (``jaxacct``, ``jaxacct.accounting``,
  ``jaxacct.mechanisms``) passes ``float64=True`` to
  ``jaxacct._core.lazy.lazy_exports``, which binds each such name to its door
  on first access. One door per function (a re-export is the same object);
  ``functools.wraps`` keeps the name, docstring and signature.
* Implementation modules carry no boundary: their functions run inside a
  public door, inside the accountant (a class whose public methods are
  entered so, :func:`x64_boundary`'s class form: classes are not wrapped by
  the surface), or through :func:`dispatch`, which enters float64 for the
  kernels (validate eagerly, then the module-level jitted kernel or its
  NumPy host twin) and is what a kernel called from inside jaxacct uses.
  Internal callers reach another package's doors through its public names.
* Users who run JAX in float32 get float64 results from every public door,
  and their global setting is untouched (``tests/test_core_dtype.py`` checks
  that every function in every public ``__all__`` is a door and calls every
  public callable once with x64 off). Public callables that work in the
  user's dtype (the optax transforms of ``jaxacct.tracking``) are not doors:
  ``jaxacct.tracking`` and ``jaxacct.sampling`` do not enter the surface
  (their functions reach float64 through the public doors they call).
* A door handed traced input while x64 is off (a user's float32 ``jit`` or
  ``vmap``) raises the :func:`require_x64` error naming the door by its
  public path: float64 cannot be switched on inside a trace.
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


def _entry(fn: F, where: Callable[[], str]) -> F:
  """``fn`` run with float64 enabled; a float32 trace raises :func:`require_x64` naming ``where()``."""

  @functools.wraps(fn)
  def door(*args, **kwargs):
    if x64_enabled():
      return fn(*args, **kwargs)
    if traced((args, kwargs)):
      # traced in the user's float32 context: float64 cannot be switched on
      # inside a trace, so say what to do instead of failing on mixed dtypes.
      require_x64(where())
    with jax.enable_x64(True):
      return fn(*args, **kwargs)

  return door  # type: ignore[return-value]


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
  return _entry(fn, lambda: f"{public_module(fn.__module__)}.{fn.__qualname__}")


# plain function -> its public door (one door per function: a function listed
# by two public modules is the same object in both)
_DOORS: dict = {}


def public_door(fn, where: str):
  """``fn`` as a public door: entered under float64, named ``where`` (its
  public path) in the :func:`require_x64` error of a float32 trace.

  Anything but a plain function (a class, a module, a constant, a jitted
  callable) is returned as it is, and so is a door. ``functools.wraps``
  keeps ``fn``'s name, docstring and signature (``inspect.signature`` and
  ``help`` show the real door; ``__wrapped__`` is ``fn``).
  """
  if not inspect.isfunction(fn) or is_public_door(fn):
    return fn
  if fn not in _DOORS:
    _DOORS[fn] = _entry(fn, lambda: where)
  return _DOORS[fn]


def is_public_door(fn) -> bool:
  """Whether ``fn`` is a door made by :func:`public_door`."""
  return any(fn is d for d in _DOORS.values())


def public_surface(namespace: dict) -> None:
  """Enters float64 at a public module's surface, once, by construction.

  Called at the end of a public module or package (``public_surface(globals())``):
  every plain function its ``__all__`` lists (read now) is replaced in
  ``namespace`` by its :func:`public_door`, so implementation modules carry no
  boundary and no public door can forget it. A package whose names load
  lazily gets the same doors from ``jaxacct._core.lazy.lazy_exports``.
  """
  module = namespace["__name__"]
  for name in namespace.get("__all__", ()):
    if name in namespace:
      namespace[name] = public_door(namespace[name], f"{module}.{name}")


def traced(args) -> bool:
  """Whether a leaf of the pytree ``args`` is a JAX tracer (inside a trace)."""
  return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(args))


def dispatch(kernel: Callable, args: tuple, validate: Callable[[], None] | None = None, *,
             host: Callable | None = None, eager: Callable | None = None,
             where: str | None = None):
  """The one entry of a public kernel: the eager/traced fork lives here only.

  Concrete ``args``: ``validate()`` raises ``ValueError`` naming the
  parameter; then, under float64 (``jax.enable_x64``), ``host(*args)``
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
  if x64_enabled():
    return _concrete_call(kernel, host, eager, *args)
  with jax.enable_x64(True):
    return _concrete_call(kernel, host, eager, *args)


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
