"""Scratch buffers of the repeated-event engine (:mod:`._powers`), shared by its threads.

A table's chunks alternate FFT lengths, and its blocks run on short-lived
threads; a fresh buffer of tens of MB costs its page faults again each time.
So a thread takes a set of flat buffers from a shared free list on first use,
grows them as needed, and hands the set back after each block (``release``);
the sets longest unused are dropped while it holds more than ``KEEP_BYTES``.
"""

from __future__ import annotations

import threading

import numpy as np

#: Bytes of scratch the free list keeps after a block (more are released).
KEEP_BYTES = 256 << 20

_LOCAL = threading.local()
_FREE: list[dict] = []
_LOCK = threading.Lock()


def scratch(name: str, count: int, dtype) -> np.ndarray:
  """This thread's flat buffer ``name``: ``count`` elements of ``dtype``,
  uninitialised (a view of one grown as needed, never shrunk)."""
  memo = getattr(_LOCAL, "memo", None)
  if memo is None:
    with _LOCK:
      memo = _FREE.pop() if _FREE else {}
    _LOCAL.memo = memo
  buf = memo.get(name)
  if buf is None or buf.dtype != np.dtype(dtype) or buf.size < count:
    memo[name] = buf = np.empty(int(count), dtype)
  return buf[:int(count)]


def release() -> None:
  """Hands this thread's buffers back to the free list (no view of them may be
  used after), which drops its sets longest unused while over ``KEEP_BYTES``."""
  memo = getattr(_LOCAL, "memo", None)
  _LOCAL.memo = None
  with _LOCK:
    if memo:
      _FREE.append(memo)
    while sum(b.nbytes for m in _FREE for b in m.values()) > KEEP_BYTES:
      _FREE.pop(0)     # the longest unused set first
