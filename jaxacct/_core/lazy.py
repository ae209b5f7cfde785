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
"""

import importlib


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
