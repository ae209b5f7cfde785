"""Step counts that say their unit: ``steps_per_epoch`` versus total steps.

``num_steps`` means *steps per epoch* (t) in ``jaxacct.allocation`` and *total*
steps (T) in ``jaxacct.poisson``. Passing the total to an allocation function
and leaving out ``num_epochs`` silently under-reports epsilon (main at 3819184:
``allocation.epsilon(sigma=..., num_steps=2340, delta=1e-5)`` for 10 epochs of
234 steps returned 0.0713 instead of 0.8815). :func:`per_epoch_steps` gives an
allocation function the keyword ``steps_per_epoch`` and makes the ambiguous
spelling loud:

* ``steps_per_epoch=t`` (with ``num_epochs=E``, default 1): the unit is in
  the name; no warning.
* ``num_steps=t`` together with an explicit ``num_epochs=E``: accepted
  silently (the caller thought about epochs, so ``num_steps`` is per epoch;
  passing a total here would over-report, never under-report).
* ``num_steps=x`` without ``num_epochs``: :class:`StepsUnitWarning` (a
  ``FutureWarning``, shown by default) saying that ``x`` is taken as steps
  *per epoch* for *one* epoch, and how to say otherwise.
* both ``steps_per_epoch`` and ``num_steps``: ``ValueError``.

Errors name what the user passed: a ``ValueError`` of the function about its
``num_steps`` reads ``steps_per_epoch`` when that is the keyword given.
"""

from __future__ import annotations

import functools
import inspect
import re
import warnings


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


def _message(where, x):
  return (
      f"{where}: num_steps={x!r} is read as the number of steps PER EPOCH (t), for "
      "ONE epoch, because num_epochs was not given. (In jaxacct.poisson, num_steps "
      "is the TOTAL number of steps.) If that is your total over E epochs, pass "
      "steps_per_epoch=total // E and num_epochs=E; if it is one epoch, pass "
      f"steps_per_epoch={x!r} (and num_epochs=1) to silence this warning. "
      "num_steps is deprecated here in favour of steps_per_epoch.")


_NUM_STEPS = re.compile(r"\bnum_steps\b")


def per_epoch_steps(fn):
  """Decorator: adds ``steps_per_epoch`` (an alias of the per-epoch ``num_steps``).

  The wrapped function keeps its ``num_steps`` parameter (steps per epoch);
  the wrapper maps ``steps_per_epoch`` onto it and warns on the ambiguous
  spelling (see the module docstring). Its signature shows
  ``steps_per_epoch`` first and ``num_steps`` as a deprecated alias.
  """
  # the public path: private implementation modules (``allocation._front``) are not named
  where = public_module(fn.__module__)
  where = f"{where}.{fn.__qualname__}"

  @functools.wraps(fn)
  def wrapper(*args, steps_per_epoch=None, **kwargs):
    if steps_per_epoch is not None:
      if "num_steps" in kwargs and kwargs["num_steps"] is not None:
        raise ValueError(
            f"{where}: pass steps_per_epoch (steps per epoch) or its deprecated alias "
            f"num_steps, not both; got steps_per_epoch={steps_per_epoch!r}, "
            f"num_steps={kwargs['num_steps']!r}.")
      kwargs["num_steps"] = steps_per_epoch
      try:
        return fn(*args, **kwargs)
      except ValueError as e:   # the function's checks name its own parameter
        if type(e) is not ValueError or not _NUM_STEPS.search(str(e)):
          raise
        raise ValueError(_NUM_STEPS.sub("steps_per_epoch", str(e))) from None
    elif kwargs.get("num_steps") is not None:
      if "num_epochs" not in kwargs:
        warnings.warn(_message(where, kwargs["num_steps"]), StepsUnitWarning,
                      stacklevel=user_stacklevel())
    else:
      raise TypeError(f"{where}() missing the keyword argument 'steps_per_epoch' "
                      "(steps per epoch t).")
    return fn(*args, **kwargs)

  try:
    sig = inspect.signature(fn)
    params = []
    for p in sig.parameters.values():
      if p.name == "num_steps":
        params.append(inspect.Parameter("steps_per_epoch", inspect.Parameter.KEYWORD_ONLY,
                                        default=None))
        params.append(p.replace(default=None))
      else:
        params.append(p)
    wrapper.__signature__ = sig.replace(parameters=params)
  except (TypeError, ValueError):  # pragma: no cover - exotic callables
    pass
  note = ("\n\n  Steps: ``steps_per_epoch`` is t, the number of steps per epoch "
          "(``num_steps`` is its deprecated alias; without ``num_epochs`` it "
          "warns, :class:`jaxacct.StepsUnitWarning`; see "
          ":mod:`jaxacct._core.units`).\n")
  if wrapper.__doc__:
    wrapper.__doc__ = wrapper.__doc__.rstrip() + note
  return wrapper
