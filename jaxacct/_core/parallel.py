"""Independent host work spread over the CPU cores (private).

NumPy's FFTs and its ufuncs on large arrays release the GIL, so a few
independent NumPy computations (the two directions of a pair PLD, say) run
side by side on threads; XLA programs on the CPU backend likewise run one lane
after another on one core per call.
"""

from __future__ import annotations

import contextvars
import os
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


def ahead(fn, items, depth: int = 1):
  """``fn(x)`` for each of ``items``, yielded in order, while up to ``depth``
  later items are computed on threads (the items share nothing): a producer
  whose pieces each leave a core idle part of the time keeps both busy.

  One core: computed one at a time, as they are asked for. Closing the
  generator early cancels the items not started.
  """
  items = list(items)
  if cores() < 2 or depth < 1 or len(items) < 2:
    for x in items:
      yield fn(x)
    return
  ctx = contextvars.copy_context()
  ex = ThreadPoolExecutor(depth + 1)
  try:
    futs = [ex.submit(ctx.copy().run, fn, x) for x in items[:depth + 1]]
    for k in range(len(items)):
      out = futs[k].result()
      if k + depth + 1 < len(items):
        futs.append(ex.submit(ctx.copy().run, fn, items[k + depth + 1]))
      yield out
  finally:
    ex.shutdown(wait=False, cancel_futures=True)
