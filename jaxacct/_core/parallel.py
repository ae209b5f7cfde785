"""Independent host work spread over the CPU cores (private).

NumPy's FFTs and its ufuncs on large arrays release the GIL, so a few
independent NumPy computations (the two directions of a pair PLD, say) run
side by side on threads; XLA programs on the CPU backend likewise run one lane
after another on one core per call. Background producers are stopped and
joined at the interpreter's exit (:func:`stop_at_exit`).
"""

from __future__ import annotations

import atexit
import contextvars
import os
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
