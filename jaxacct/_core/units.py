"""Step counts that say their unit: ``steps_per_epoch`` versus total steps.

In ``jaxacct.allocation`` the step count of one epoch is ``steps_per_epoch``
(t); ``num_steps`` is always a whole run's count (T, as in ``jaxacct.poisson``).
:func:`per_epoch_steps` accepts ``num_steps`` as a deprecated alias of t for
one release, and loudly, because a total passed there without ``num_epochs``
would under-report epsilon:

* ``steps_per_epoch=t`` (with ``num_epochs=E``, default 1): no warning.
* ``num_steps=t`` together with an explicit ``num_epochs=E``: accepted with
  a ``DeprecationWarning`` naming ``steps_per_epoch`` (the caller thought about
  epochs, so ``num_steps`` is per epoch; passing a total here would
  over-report, never under-report).
* ``num_steps=x`` without ``num_epochs``: :class:`StepsUnitWarning` (a
  ``FutureWarning``, shown by default) saying that ``x`` is taken as steps
  *per epoch* for *one* epoch, and how to say otherwise.
* both ``steps_per_epoch`` and ``num_steps``: ``ValueError``.

Renamed public names (one vocabulary: docs/api/glossary.md) live
here too, in one place: :func:`renamed` (a keyword of a function) and
:func:`renamed_fields` (a field of an event) keep the old spelling working for
one release with a ``DeprecationWarning`` that names the new one
(:func:`warn_renamed`); the value passed is handed on unchanged. Error
messages are the function's own: they name the current keyword.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings

from jaxacct._core import checks


class StepsUnitWarning(FutureWarning):
  """``num_steps`` given to a per-epoch (allocation) function without ``num_epochs``."""


def public_module(module: str) -> str:
  """The public path that re-exports a function of ``module``: the module path up
  to its first private component (``jaxacct.allocation._front`` -> ``jaxacct.allocation``)."""
  parts = module.split(".")
  cut = next((i for i, p in enumerate(parts) if p.startswith("_")), len(parts))
  return ".".join(parts[:cut])


def user_stacklevel() -> int:
  """The ``stacklevel`` of a ``warnings.warn`` call that names the first caller
  outside jaxacct (the user's line), however many jaxacct frames lie between:
  the public door (``jaxacct._core.dtype``), decorators, doors calling doors.
  Call it inside the ``warnings.warn(...)`` call."""
  frame, level = inspect.currentframe().f_back, 1
  while frame is not None and (frame.f_globals.get("__name__") or "").split(".")[0] == "jaxacct":
    frame, level = frame.f_back, level + 1
  return level


def warn_renamed(where: str, old: str, new: str) -> None:
  """The one deprecation warning of a renamed public name: ``old`` still works
  for one release and means exactly ``new``."""
  warnings.warn(f"{where}: {old!r} is deprecated and will be removed in the next release; "
                f"use {new!r} (the same value).", DeprecationWarning,
                stacklevel=user_stacklevel())


def deprecated_aliases(fn) -> dict:
  """``{old: new}``: the deprecated keyword spellings ``fn`` still accepts."""
  return dict(getattr(fn, "__deprecated_aliases__", {}))


def _both(where, old, new, kwargs):
  return ValueError(f"{where}: pass {new} or its deprecated alias {old}, not both; got "
                    f"{new}={kwargs[new]!r}, {old}={kwargs[old]!r}.")


def renamed(**old_to_new):
  """Decorator: keyword ``old`` of a public function renamed ``new``.

  ``fn(old=x)`` calls ``fn(new=x)`` after a ``DeprecationWarning`` naming
  ``new``; both at once is a ``ValueError``. The signature shows only the new
  names; ``__deprecated_aliases__`` lists the old ones.
  """
  def deco(fn):
    where = f"{public_module(fn.__module__)}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
      for old in [o for o in old_to_new if o in kwargs]:
        new = old_to_new[old]
        if new in kwargs:
          raise _both(where, old, new, kwargs)
        warn_renamed(where, old, new)
        kwargs[new] = kwargs.pop(old)
      return fn(*args, **kwargs)

    wrapper.__deprecated_aliases__ = {**deprecated_aliases(fn), **old_to_new}
    return wrapper
  return deco


def renamed_in(*methods, **old_to_new):
  """Class decorator: :func:`renamed` on each of the class's ``methods``."""
  def deco(cls):
    for m in methods:
      setattr(cls, m, renamed(**old_to_new)(getattr(cls, m)))
    return cls
  return deco


def renamed_fields(**old_to_new):
  """Class decorator: field ``old`` of a frozen dataclass (an event) renamed ``new``.

  ``Cls(old=x)`` builds ``Cls(new=x)`` and reading ``obj.old`` reads
  ``obj.new``, each after a ``DeprecationWarning`` naming ``new``. Fields,
  equality, hashing and dp_accounting's NamedTuple round trip use the new names
  only. ``new`` is a field name, or ``f(get)`` choosing one from the other
  fields' values (``get(name)``) where the old field had two meanings.
  """
  def deco(cls):
    init = cls.__init__
    where = lambda: f"{public_module(cls.__module__)}.{cls.__qualname__}"   # (set later)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}

    def target(new, get):
      return new if isinstance(new, str) else new(get)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
      olds = [o for o in old_to_new if o in kwargs]
      if olds:
        rest = {k: v for k, v in kwargs.items() if k not in olds}
        bound = inspect.signature(init).bind_partial(self, *args, **rest).arguments
        get = lambda n: bound.get(n, defaults.get(n))
        for old in olds:
          new = target(old_to_new[old], get)
          if new in kwargs or new in bound:
            raise ValueError(f"{where()}: pass {new} or its deprecated alias {old}, not "
                             f"both; got {new}={get(new)!r}, {old}={kwargs[old]!r}.")
          warn_renamed(where(), old, new)
          kwargs[new] = kwargs.pop(old)
      init(self, *args, **kwargs)

    cls.__init__ = __init__
    for old, new in old_to_new.items():
      def read(self, _old=old, _new=new):
        name = target(_new, lambda n: getattr(self, n))
        warn_renamed(where(), _old, name)
        return getattr(self, name)
      label = getattr(new, "label", new)
      setattr(cls, old, property(read, doc=f"Deprecated alias of ``{label}``."))
    cls.__deprecated_aliases__ = {**deprecated_aliases(cls),
                                  **{o: getattr(n, "label", n) for o, n in old_to_new.items()}}
    return cls
  return deco


def _message(where, x):
  return (
      f"{where}: num_steps={x!r} is read as the number of steps PER EPOCH (t), for "
      "ONE epoch, because num_epochs was not given. (In jaxacct.poisson, num_steps "
      "is the TOTAL number of steps.) If that is your total over E epochs, pass "
      "steps_per_epoch=total // E and num_epochs=E; if it is one epoch, pass "
      f"steps_per_epoch={x!r} (and num_epochs=1) to silence this warning. "
      "num_steps is deprecated here in favour of steps_per_epoch.")


def per_epoch_steps(fn):
  """Decorator: ``num_steps``, the deprecated alias of ``steps_per_epoch`` (t).

  The wrapped function takes ``steps_per_epoch``; the wrapper hands
  ``num_steps`` on as ``steps_per_epoch`` and warns (see the module
  docstring). A deprecated ``num_steps`` that is not an integer >= 1 is refused
  naming ``num_steps``, as written. ``__deprecated_aliases__`` names the old
  spelling.
  """
  # the public path: private implementation modules (``allocation._front``) are not named
  where = f"{public_module(fn.__module__)}.{fn.__qualname__}"
  # one round of allocation has no epochs: num_steps there is only a spelling
  has_epochs = "num_epochs" in inspect.signature(fn).parameters

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    if "num_steps" in kwargs:
      x = kwargs.pop("num_steps")
      if kwargs.get("steps_per_epoch") is not None:
        raise ValueError(
            f"{where}: pass steps_per_epoch (steps per epoch) or its deprecated alias "
            f"num_steps, not both; got steps_per_epoch={kwargs['steps_per_epoch']!r}, "
            f"num_steps={x!r}.")
      if x is not None:
        if has_epochs and "num_epochs" not in kwargs:
          warnings.warn(_message(where, x), StepsUnitWarning, stacklevel=user_stacklevel())
        else:   # the unit is clear; the spelling is deprecated
          warn_renamed(where, "num_steps", "steps_per_epoch")
        checks.check_int("num_steps", x, min_value=1)
        kwargs["steps_per_epoch"] = x
    return fn(*args, **kwargs)

  wrapper.__deprecated_aliases__ = {**deprecated_aliases(fn), "num_steps": "steps_per_epoch"}
  note = ("\n\n  Steps: ``steps_per_epoch`` is t, the number of steps per epoch "
          "(``num_steps`` is its deprecated alias, a ``DeprecationWarning``; without "
          "``num_epochs`` it warns, :class:`jaxacct.StepsUnitWarning`; see "
          ":mod:`jaxacct._core.units`).\n")
  if wrapper.__doc__:
    wrapper.__doc__ = wrapper.__doc__.rstrip() + note
  return wrapper
