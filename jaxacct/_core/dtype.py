"""The float64 boundary.

jaxacct computes in float64 but never changes the user's global JAX config;
a door runs its float64 work on the device
:func:`jaxacct._core.sharding.float64_device` names (the host's CPU where the
default device has no float64, a TPU), decided once at its entry.

Proofs and sources: docs/bounds/numerics.md ("Bounds and proofs /
Numerics").
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from typing import Callable, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import parallel
from jaxacct._core.sharding import float64_placement, to_device
from jaxacct._core.units import public_module

F = TypeVar("F", bound=Callable)

#: True inside a door's concrete call (this thread): float64, the placement and
#: the host checks were decided at its entry, so a door it calls runs directly
_ENTERED = contextvars.ContextVar("jaxacct_door_entered", default=False)


def x64_enabled() -> bool:
  """Whether float64 is active in the current JAX context."""
  return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def _entry(fn: F, where: Callable[[], str], host: HostDoor | None = None) -> F:
  """``fn`` run with float64 enabled; a float32 trace raises :func:`require_x64` naming ``where()``.

  ``host`` (a host-side door, :func:`host_door`): a traced argument it needs
  concrete raises :class:`NotTraceableError` first (:func:`require_concrete`).
  """

  @functools.wraps(fn)
  def door(*args, **kwargs):
    if _ENTERED.get():
      return fn(*args, **kwargs)      # inside a door: decided at its entry
    if host is not None:
      require_concrete(fn, where(), host, args, kwargs)
    if traced((args, kwargs)):
      # traced in the user's float32 context: float64 cannot be switched on
      # inside a trace, so say what to do instead of failing on mixed dtypes.
      require_x64(where())
      return fn(*args, **kwargs)
    with decided((args, kwargs)) as (args, kwargs):
      return fn(*args, **kwargs)

  door.host_door = host   # its host_door declaration (None: the door traces)
  return door  # type: ignore[return-value]


@contextlib.contextmanager
def decided(tree):
  """A door's concrete call: float64 on, the float64 device in force
  (:func:`jaxacct._core.sharding.float64_placement`; ``tree``'s jax arrays that
  are elsewhere are copied there, and the copy is yielded) and the doors it
  calls marked as entered (they run directly). The user's config is untouched."""
  with contextlib.ExitStack() as stack:
    if not x64_enabled():
      stack.enter_context(jax.enable_x64(True))
    dev = stack.enter_context(float64_placement())
    token = _ENTERED.set(True)
    try:
      yield tree if dev is None else to_device(tree, dev)
    finally:
      _ENTERED.reset(token)


def _this_decision():
  """A context-manager factory that enters, on another thread, the float64
  decision in force on this one: JAX's x64 mode and default device are
  thread-local, so a helper thread enters this thread's values (the same ones,
  so the same compiled programs); the door marker is a context variable and
  comes with the copied context."""
  x64, dev = x64_enabled(), jax.config.jax_default_device

  @contextlib.contextmanager
  def enter():
    with contextlib.ExitStack() as stack:
      if x64:
        stack.enter_context(jax.enable_x64(True))
      if dev is not None:
        stack.enter_context(jax.default_device(dev))
      yield

  return enter


def side_by_side(first: Callable, second: Callable):
  """``(first(), second())``, ``second`` on a helper thread
  (:func:`jaxacct._core.parallel.side_by_side`) under this thread's float64
  decision."""
  return parallel.side_by_side(first, second, enter=_this_decision())


def beside(fn: Callable) -> parallel.Later:
  """``fn()`` started on a helper thread (:func:`jaxacct._core.parallel.beside`)
  under this thread's float64 decision; its ``result()`` waits for it."""
  return parallel.beside(fn, enter=_this_decision())


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
  public path) in the :func:`require_x64` error of a float32 trace; a
  host-side door (declared by :func:`host_door`) refuses traced arguments
  (:func:`require_concrete`).

  Anything but a plain function (a class, a module, a constant, a jitted
  callable) is returned as it is, and so is a door. ``functools.wraps``
  keeps ``fn``'s name, docstring and signature (``inspect.signature`` and
  ``help`` show the real door; ``__wrapped__`` is ``fn``).
  """
  if not inspect.isfunction(fn) or is_public_door(fn):
    return fn
  if fn not in _DOORS:
    _DOORS[fn] = _entry(fn, lambda: where, getattr(fn, "host_door", None))
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


class NotTraceableError(TypeError):
  """A public door that runs host-side code was handed a traced argument.

  Raised at the door's entry, before any work, when an argument the door needs
  concrete is a ``jax.core.Tracer`` (inside the user's ``jit``, ``vmap`` or
  ``grad``). The message names the door, the parameter and what to call
  instead (:func:`host_door`).
  """


class HostDoor(NamedTuple):
  """A public door that runs host-side code and so cannot be traced.

  Attributes:
    instead: what to call instead (the jittable kernel, or the door itself
      outside ``jit`` on concrete arrays); the error message ends with it.
    params: the parameters that must be concrete; ``None``: every one.
    when: ``((parameter, value), ...)``: only calls with these argument values
      (defaults applied) run on the host, e.g. ``(("method", "pld"),)``.
  """
  instead: str
  params: tuple | None = None
  when: tuple = ()


#: The first words of a :class:`HostDoor`'s advice: where the door itself works.
OUTSIDE_JIT = "Call it outside jit/vmap, on concrete values"
#: A host-side door with no jittable twin to name.
HOST_ONLY = HostDoor(f"{OUTSIDE_JIT}.")


def host_door(spec: HostDoor) -> Callable[[F], F]:
  """Declares, where a public door is defined, that it runs host-side code
  (NumPy on its arguments, Python loops over lanes, a host root search) and
  cannot be traced::

      @host_door(HostDoor("Inside jit/vmap use ...", params=("num_steps",)))
      def door(...): ...

  Its :func:`public_door` (under every public path that lists it) then refuses
  a traced argument at its entry with a :class:`NotTraceableError` naming what
  to call instead (``spec.instead``). Every other door traces (its values
  under jit/vmap equal the eager ones: ``tests/project/test_traced_doors.py``).
  A door that becomes jittable loses its declaration.
  """
  def declare(fn: F) -> F:
    fn.host_door = spec
    return fn
  return declare


def require_concrete(fn: Callable, where: str, host: HostDoor, args: tuple,
                     kwargs: dict) -> None:
  """Raises :class:`NotTraceableError` when the call ``fn(*args, **kwargs)`` of the
  host-side door ``where`` hands a tracer to a parameter ``host`` needs
  concrete; names the first such parameter and what to call instead."""
  if not traced((args, kwargs)):
    return
  try:
    bound = inspect.signature(fn).bind_partial(*args, **kwargs)
  except TypeError:
    return            # a wrong call: the door's own error says so
  bound.apply_defaults()
  values = bound.arguments
  if not all(isinstance(values.get(k), str) and values[k] == v for k, v in host.when):
    return
  for name, value in values.items():
    if (host.params is None or name in host.params) and traced(value):
      what = ", ".join(f"{k}={v!r}" for k, v in host.when)
      raise NotTraceableError(
          f"{where}{f' ({what})' if what else ''} runs host-side code and cannot be traced "
          f"(jax.jit, jax.vmap, jax.grad): its argument {name!r} is a tracer. "
          f"{host.instead}")


def dispatch(kernel: Callable, args: tuple, validate: Callable[[], None] | None = None, *,
             eager: Callable | None = None, where: str | None = None):
  """The one entry of a public kernel: the eager/traced fork lives here only.

  Concrete ``args``: ``validate()`` raises ``ValueError`` naming the
  parameter; then, under float64 (``jax.enable_x64``), ``(eager or
  kernel)(*args)``: ``eager`` is the door's concrete path (a host formula
  chosen by :func:`jaxacct._core.namespace.for_inputs`, or an eager driver of
  the kernel), else the module-level jitted kernel.

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
  with decided(args) as args:
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
