"""An epsilon table produced in step order on a background thread (:class:`LazyTable`).

The hook of :mod:`jaxacct.tracking` needs ``eps[c + 1]`` when update ``c + 1``
runs, not the whole run's table when it is built: the accountant's
segments (an accountant's ``step_segments``) are computed in step order on a
daemon thread, and a reader blocks only until the entry it needs is final
(with progress after 2 s). The values are the segments' own, so the table
equals the one computed in one go to the last bit. Bound: upper (the
accountant's).
"""

from __future__ import annotations

import threading
import time
from typing import Iterable, Optional

import jax
import numpy as np

from jaxacct._core.parallel import stop_at_exit
from jaxacct._core.progress import progress


class LazyTable:
  """float64 ``table[0..num_steps]`` (``table[0] = 0``), final entries first.

  Args:
    num_steps: n >= 1.
    segments: an iterable of 1-D float64 arrays, the entries ``1..n`` in
      order (consecutive pieces), consumed on a daemon thread under x64;
      or None with ``values``.
    values: the whole table (n + 1,), already computed (no thread).
    desc: progress label. enabled: the progress switch (None: global).

  Attributes:
    ready: entries ``[0, ready)`` are final.
  """

  def __init__(self, num_steps: int, segments: Optional[Iterable[np.ndarray]] = None, *,
               values: Optional[np.ndarray] = None, desc: str = "jaxacct.tracking epsilon table",
               enabled: Optional[bool] = None):
    self.num_steps = int(num_steps)
    self.desc, self.enabled = desc, enabled
    self._cond = threading.Condition()
    self._error: Optional[BaseException] = None
    self._stopped = False
    if segments is None:
      self.values = np.asarray(values, np.float64)
      self.ready = self.num_steps + 1
      self._thread = None
      return
    self.values = np.full(self.num_steps + 1, np.nan)
    self.values[0] = 0.0
    self.ready = 1
    self._thread = threading.Thread(target=self._run, args=(segments,), daemon=True,
                                    name="jaxacct-epsilon-table")
    stop_at_exit(self)   # no XLA work left running while the interpreter shuts down
    self._thread.start()

  @property
  def background(self) -> bool:
    """Whether the entries come from a producer thread (else computed at once)."""
    return self._thread is not None

  @property
  def done(self) -> bool:
    return self.ready > self.num_steps

  def _run(self, segments):
    try:
      with jax.enable_x64(True):       # thread-local: the user's setting is untouched
        for seg in segments:
          seg = np.asarray(seg, np.float64).ravel()
          with self._cond:
            if self._stopped:
              return
            stop = min(self.ready + seg.size, self.num_steps + 1)
            self.values[self.ready:stop] = seg[:stop - self.ready]
            self.ready = stop
            self._cond.notify_all()
          if self.done:
            break
      if not self.done:
        raise RuntimeError(f"the epsilon table ended at {self.ready - 1} of "
                           f"{self.num_steps} steps.")
    except BaseException as exc:   # noqa: BLE001 - handed to the reader
      with self._cond:
        self._error = exc
        self._cond.notify_all()

  def stop(self) -> None:
    """Stops the producer after its current piece (the table stays partial)."""
    with self._cond:
      self._stopped = True
      self._cond.notify_all()
    if self._thread is not None and self._thread is not threading.current_thread():
      self._thread.join(timeout=60.0)

  def wait(self, index: int) -> None:
    """Blocks until ``table[index]`` is final (progress after 2 s of waiting)."""
    index = min(int(index), self.num_steps)
    with self._cond:
      if self.ready > index:
        return
    with progress(total=self.num_steps, desc=self.desc, enabled=self.enabled) as bar:
      shown = 0
      with self._cond:
        while self.ready <= index:
          if self._error is not None:
            break
          if self._stopped:
            raise RuntimeError("the epsilon table was stopped (interpreter exit).")
          self._cond.wait(timeout=0.5)
          bar.update(self.ready - 1 - shown)
          shown = self.ready - 1
      time.sleep(0)
    if self._error is not None and self.ready <= index:
      raise self._error

  def get(self, lo: int, hi: int) -> np.ndarray:
    """``table[lo:hi]`` (copy), waiting until those entries are final."""
    self.wait(hi - 1)
    return self.values[lo:hi].copy()

  def full(self) -> np.ndarray:
    """The whole table (copy), waiting until it is final."""
    return self.get(0, self.num_steps + 1)
