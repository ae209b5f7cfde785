"""Per-thread scratch buffers of the repeated-event engine (:mod:`._powers`).

A table's chunks alternate FFT lengths; a fresh buffer of tens of MB costs its
page faults again at every chunk, so each thread keeps flat buffers, grown as
needed, and drops them after a query where they hold more than ``KEEP_BYTES``.
"""

from __future__ import annotations

import threading

import numpy as np

#: Bytes of scratch a thread keeps after a query (larger ones are released).
KEEP_BYTES = 256 << 20

_LOCAL = threading.local()


def scratch(name: str, count: int, dtype) -> np.ndarray:
  """This thread's flat buffer ``name``: ``count`` elements of ``dtype``,
  uninitialised (a view of one grown as needed, never shrunk)."""
  memo = getattr(_LOCAL, "memo", None)
  if memo is None:
    _LOCAL.memo = memo = {}
  buf = memo.get(name)
  if buf is None or buf.dtype != np.dtype(dtype) or buf.size < count:
    memo[name] = buf = np.empty(int(count), dtype)
  return buf[:int(count)]


def release() -> None:
  """Drops this thread's buffers where together they are over ``KEEP_BYTES``."""
  memo = getattr(_LOCAL, "memo", None)
  if memo and sum(b.nbytes for b in memo.values()) > KEEP_BYTES:
    memo.clear()
