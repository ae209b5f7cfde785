"""Lower PLDs built on first use, or started beside the upper (a bracket's)."""

from __future__ import annotations

import contextlib
import contextvars

from jaxacct._core.dtype import beside

#: True while a bracket's one component is built (:func:`lowers_ahead`)
_AHEAD = contextvars.ContextVar("jaxacct_lowers_ahead", default=False)


@contextlib.contextmanager
def lowers_ahead(ahead: bool = True):
  """Within (``ahead`` true), a lower made by :meth:`Lazy.ahead` starts at once on
  a helper thread (:func:`jaxacct._core.dtype.beside`), beside the upper built
  after it: for a bracket query of one event, whose lower will be asked."""
  token = _AHEAD.set(bool(ahead))
  try:
    yield
  finally:
    _AHEAD.reset(token)


class Lazy:
  """A value computed on first use (lower PLDs: only bracket queries need them),
  or started at once beside the caller's work (:meth:`ahead`)."""

  def __init__(self, fn, *, start: bool = False):
    self._fn, self._value, self._done = fn, None, False
    self._later = beside(fn) if start else None

  @classmethod
  def ahead(cls, fn) -> "Lazy":
    """A lower that starts at once within :func:`lowers_ahead`: for a component
    whose bracket always asks its lower (no closed form answers it instead)."""
    return cls(fn, start=_AHEAD.get())

  def get(self):
    if not self._done:
      self._value = self._fn() if self._later is None else self._later.result()
      self._done, self._later = True, None
    return self._value


def resolve(x):
  """``x.get()`` for a :class:`Lazy`, else ``x``."""
  return x.get() if isinstance(x, Lazy) else x
