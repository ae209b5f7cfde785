"""Independent host work spread over the CPU cores (private).

NumPy's FFTs and its ufuncs on large arrays release the GIL, so a few
independent NumPy computations (the two directions of a pair PLD, say) run
side by side on threads; XLA programs on the CPU backend likewise run one lane
after another on one core per call. Independent pieces of one answer run side
by side (:func:`side_by_side`, :func:`beside`) on at most ``cores() - 1`` helper
threads at a time. Background producers are stopped and joined at the
interpreter's exit (:func:`stop_at_exit`).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor


def cores() -> int:
  """The CPU cores this process may run on (its affinity mask where known)."""
  n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  return max(1, int(n or 1))


def host_map(fn, items) -> list:
  """``[fn(x) for x in items]``, on ``min(len(items), cores())`` threads.

  Results come back in the order of ``items``; each is what a serial call
  returns (the items share nothing). Each call runs in a copy of the
  caller's context (NumPy's ``errstate`` lives in a context variable). One
  core or one item: no thread. An exception in any call is raised here.
  """
  items = list(items)
  workers = min(len(items), cores())
  if workers < 2:
    return [fn(x) for x in items]
  ctx = contextvars.copy_context()
  with ThreadPoolExecutor(workers) as ex:
    return list(ex.map(lambda x: ctx.copy().run(fn, x), items))


#: helper threads running jaxacct work, less the callers lending their core while
#: they wait for one (:meth:`Later.join`); at most ``cores() - 1`` at a time
_BUSY = [0]
_BUSY_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
  """A forked child has none of its parent's threads: no helper is running there
  (and the lock may have been held at the fork)."""
  global _BUSY_LOCK
  _BUSY_LOCK = threading.Lock()
  _BUSY[0] = 0


if hasattr(os, "register_at_fork"):
  os.register_at_fork(after_in_child=_after_fork_in_child)


def helpers_running() -> int:
  """Helper threads now running (less the callers lending their core): 0 when idle."""
  with _BUSY_LOCK:
    return _BUSY[0]


def _take_slot() -> bool:
  with _BUSY_LOCK:
    if _BUSY[0] < cores() - 1:
      _BUSY[0] += 1
      return True
    return False


def _move_slots(n: int) -> None:
  with _BUSY_LOCK:
    _BUSY[0] += n


class Later:
  """``fn()``'s value, computed on a helper thread started now (:func:`beside`).

  :meth:`result` waits for it (and raises what ``fn`` raised); :meth:`join` waits
  only, lending the waiting caller's core to the helper's own helpers. The
  helper is a non-daemon thread (the interpreter waits for it at exit, never
  finalising under it). Helpers are at most ``cores() - 1`` at a time (the
  caller runs on the last core): with none free (one core, or all busy) there
  is no thread, and ``fn`` runs at the first :meth:`result`, on the caller's
  thread.
  """

  def __init__(self, fn, enter):
    self._fn, self._value, self._error, self._thread = fn, None, None, None
    if not _take_slot():
      return
    ctx = contextvars.copy_context()

    def run():
      try:
        with enter():
          self._value = fn()
      except BaseException as err:   # noqa: BLE001 -- raised again by result()
        self._error = err
      finally:
        _move_slots(-1)

    self._thread = threading.Thread(target=ctx.run, args=(run,), name="jaxacct-beside")
    self._thread.start()

  def join(self) -> None:
    if self._thread is None or not self._thread.is_alive():
      return
    _move_slots(-1)       # this caller waits: its core is free meanwhile
    try:
      self._thread.join()
    finally:
      _move_slots(1)

  def result(self):
    if self._thread is None:
      if self._fn is not None:    # no helper: here, once
        fn, self._fn = self._fn, None
        self._value = fn()
      return self._value
    self.join()
    if self._error is not None:
      raise self._error
    return self._value


def beside(fn, *, enter=contextlib.nullcontext) -> Later:
  """Starts ``fn()`` on a helper thread where one is free (:class:`Later`), in a
  copy of the caller's context and inside ``enter()`` (a context-manager factory
  for what a thread does not inherit: JAX's thread-local settings); its value is
  the returned :class:`Later`'s ``result()``. Each result is what a serial call
  returns (``fn`` must share nothing with the caller's work in between)."""
  return Later(fn, enter)


def side_by_side(first, second, *, enter=contextlib.nullcontext):
  """``(first(), second())``: ``second`` on a helper thread (:func:`beside`) while
  ``first`` runs here; with no helper free, in turn (``first`` then ``second``).

  An exception in ``first`` is raised at once, as a serial call would (a helper
  still running ends on its own, its value unused; the interpreter waits for it
  at exit); one in ``second`` is raised after ``first`` has returned.
  """
  later = beside(second, enter=enter)
  here = first()
  return here, later.result()


_AT_EXIT: "weakref.WeakSet" = weakref.WeakSet()


def stop_at_exit(producer):
  """Registers ``producer`` (a background thread's owner whose ``stop()`` stops
  it after its current piece and joins it): at the interpreter's exit every
  live producer is stopped. A daemon thread still inside XLA when the
  interpreter finalises aborts the process ("FATAL: exception not rethrown")
  after a run that succeeded. Returns ``producer``."""
  _AT_EXIT.add(producer)
  return producer


@atexit.register
def _stop_producers():
  for producer in list(_AT_EXIT):
    producer.stop()
