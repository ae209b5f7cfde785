"""Lazy re-exports for package ``__init__`` files (PEP 562).

A package lists what it re-exports as ``{public name: (module, attribute)}``
(attribute ``None``: the module itself) and gets a module ``__getattr__`` that
imports the module on first access, and a ``__dir__`` that lists the names;
``import jaxacct`` then costs only what the process uses.

With ``float64=True`` the package's public surface enters float64 here: a
plain function its ``__all__`` lists is bound, on first access, to its
``jaxacct._core.dtype.public_door`` (the lazy twin of
``dtype.public_surface``; ``dtype`` is imported then, with the module the
name comes from, so ``import jaxacct`` still loads no jax).

:func:`import_submodules` loads a few modules of a package whose own
``__init__`` is heavy, deferring that ``__init__`` to its first use.
"""

import importlib
import importlib.util
import sys
import threading
import types


def lazy_exports(package: str, names: dict, namespace: dict, *, float64: bool = False):
  """``(__getattr__, __dir__)`` for ``package`` re-exporting ``names`` lazily.

  Args:
    package: the package's ``__name__``.
    names: ``{public name: (module, attribute or None)}``; ``None`` binds the
      module itself.
    namespace: the package's ``globals()`` (a resolved name is stored there,
      so later lookups skip ``__getattr__``).
    float64: bind the functions listed in ``namespace["__all__"]`` (read at
      access) as public doors, entered under float64.
  """

  def __getattr__(name):
    if name not in names:
      raise AttributeError(f"module {package!r} has no attribute {name!r}")
    module, attr = names[name]
    value = importlib.import_module(module)
    if attr is not None:
      value = getattr(value, attr)
    if float64 and name in namespace.get("__all__", ()):
      value = importlib.import_module("jaxacct._core.dtype").public_door(value,
                                                                        f"{package}.{name}")
    namespace[name] = value
    return value

  def __dir__():
    return sorted(set(namespace) | set(names))

  return __getattr__, __dir__


class LazyModule:
  """A module imported on its first attribute access (for a module-level name).

  ``events = LazyModule("jaxacct._core.events")`` at the top of a module (with
  the real import under ``if TYPE_CHECKING:``, so readers and tools see the
  arrow) keeps a heavy dependency of that module (dp_accounting, with the
  events) out of the importer's cold start until it is used.
  """

  def __init__(self, name: str):
    self.__name = name

  def __getattr__(self, attr):
    return getattr(importlib.import_module(self.__name), attr)

  def __repr__(self):
    return f"<lazy module {self.__name!r}>"


class _DeferredPackage(types.ModuleType):
  """A package whose ``__init__`` runs on the first lookup of a name it defines."""

  def __getattr__(self, name):   # only for names not (yet) in the module
    spec = object.__getattribute__(self, "__spec__")
    if not name.startswith("__") and importlib.util.find_spec(f"{spec.name}.{name}"):
      return importlib.import_module(f"{spec.name}.{name}")   # a submodule: just that one
    with _DEFERRED_LOCK:
      if type(self) is _DeferredPackage:
        self.__class__ = types.ModuleType
        try:
          spec.loader.exec_module(self)
        except BaseException:
          self.__class__ = _DeferredPackage
          raise
    return getattr(self, name)


_DEFERRED_LOCK = threading.RLock()


def import_submodules(package: str, names):
  """``[package.name for name in names]`` imported without running ``package``'s
  ``__init__`` yet (where nothing has imported ``package`` so far).

  The package is registered as itself (its own spec, path and file), so its
  modules and classes are the ones a later ``import package`` sees; its
  ``__init__`` runs, in full, on the first lookup of a name the submodules
  did not define (``package.X``, ``from package import X``, ``*``). This
  keeps the package's heavy ``__init__`` imports (dp_accounting's: SciPy's
  optimize, signal and stats) out of a process that needs only a few light
  modules. Raises ``ImportError`` where the package is absent.
  """
  stub = None
  with _DEFERRED_LOCK:
    if package not in sys.modules:
      spec = importlib.util.find_spec(package)
      if spec is None or spec.submodule_search_locations is None:
        raise ImportError(f"No package named {package!r}", name=package)
      stub = importlib.util.module_from_spec(spec)
      stub.__class__ = _DeferredPackage
      sys.modules[package] = stub
  try:
    return [importlib.import_module(f"{package}.{name}") for name in names]
  except BaseException:
    # a package that cannot give its modules is not left half-registered: a later
    # ``import package`` fails (or succeeds) as it would have without us
    with _DEFERRED_LOCK:
      if stub is not None and sys.modules.get(package) is stub and \
          type(stub) is _DeferredPackage:
        del sys.modules[package]
    raise
