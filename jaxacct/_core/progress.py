"""Progress reporting for long computations (one place for the whole package).

A call that may run for more than a few seconds (a calibration, a sweep, the
CLI's rows, a composed shuffle) wraps its loop in :func:`progress`::

    with progress(total=n, desc="calibrating sigma", enabled=user_flag) as bar:
      for ...:
        ...
        bar.update(1, postfix="sigma in [0.68, 0.69]")

What the user sees:

* ``tqdm`` installed: a ``tqdm.auto`` bar (a widget in notebooks) on stderr.
  tqdm is optional: jaxacct never requires it.
* no tqdm, stderr a terminal: one self-overwriting line on stderr.
* otherwise (logs, batch jobs, notebooks without tqdm): ``logging`` records at
  INFO on the ``"jaxacct"`` logger (visible once the application configures
  logging, e.g. ``logging.basicConfig(level=logging.INFO)``).

Nothing is shown before ``delay`` seconds (default 2 s), so quick calls stay
silent; afterwards at most one line per ``interval`` seconds (terminal and
logging modes; tqdm throttles itself).

Silencing, from the most local to the most global:

* ``progress=False`` on any jaxacct function that takes it;
* ``jaxacct.set_progress(False)`` (returns the previous setting; restore
  it with ``jaxacct.set_progress(prev)``);
* the environment variable ``JAXACCT_PROGRESS=0`` (read at import).

``progress=True`` forces progress on even when the global switch is off.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import Optional

logger = logging.getLogger("jaxacct")

_ENABLED = os.environ.get("JAXACCT_PROGRESS", "1").strip().lower() not in (
    "0", "false", "no", "off", "")
_DELAY = 2.0       # seconds before anything is shown
_INTERVAL = 5.0    # seconds between two lines (terminal / logging modes)
_BACKEND = "auto"  # "auto" | "tqdm" | "terminal" | "logging"


def progress_enabled() -> bool:
  """The global switch (``set_progress`` / ``JAXACCT_PROGRESS``)."""
  return _ENABLED


def set_progress(enabled: bool) -> bool:
  """Turns progress reporting on or off globally; returns the previous setting."""
  global _ENABLED
  if not isinstance(enabled, bool):
    raise ValueError(f"enabled must be True or False; got {enabled!r}.")
  prev, _ENABLED = _ENABLED, enabled
  return prev


def configure_progress(*, delay: Optional[float] = None, interval: Optional[float] = None,
                       backend: Optional[str] = None) -> dict:
  """Sets the delay before the first line, the interval between lines and the
  backend (``"auto"``, ``"tqdm"``, ``"terminal"``, ``"logging"``).

  Returns:
    The previous settings as a dict (pass it back as ``**kwargs`` to restore).
  """
  global _DELAY, _INTERVAL, _BACKEND
  prev = {"delay": _DELAY, "interval": _INTERVAL, "backend": _BACKEND}
  if delay is not None:
    if not delay >= 0:
      raise ValueError(f"delay must be >= 0 seconds; got {delay!r}.")
    _DELAY = float(delay)
  if interval is not None:
    if not interval >= 0:
      raise ValueError(f"interval must be >= 0 seconds; got {interval!r}.")
    _INTERVAL = float(interval)
  if backend is not None:
    if backend not in ("auto", "tqdm", "terminal", "logging"):
      raise ValueError("backend must be one of ('auto', 'tqdm', 'terminal', 'logging'); "
                       f"got {backend!r}.")
    _BACKEND = backend
  return prev


def _tqdm():
  try:
    from tqdm.auto import tqdm
    return tqdm
  except ImportError:
    return None


def _is_terminal() -> bool:
  try:
    return sys.stderr.isatty()
  except (AttributeError, ValueError):
    return False


class _Null:
  """No-op progress (disabled)."""

  def update(self, n: int = 1, postfix: Optional[str] = None) -> None:
    del n, postfix

  def set_description(self, desc: str) -> None:
    del desc

  def write(self, msg: str) -> None:
    del msg

  def echo(self, msg: str) -> None:
    """Prints ``msg`` to stdout without garbling the progress display."""
    print(msg, flush=True)

  def close(self) -> None:
    pass


class _Tqdm(_Null):

  def __init__(self, tqdm, total, desc, delay):
    self._bar = tqdm(total=total, desc=desc, delay=delay, leave=False, file=sys.stderr,
                     dynamic_ncols=True)

  def update(self, n=1, postfix=None):
    if postfix is not None:
      self._bar.set_postfix_str(postfix, refresh=False)
    self._bar.update(n)

  def set_description(self, desc):
    self._bar.set_description(desc)

  def write(self, msg):
    self._bar.write(msg, file=sys.stderr)

  def echo(self, msg):
    self._bar.clear()
    print(msg, flush=True)
    self._bar.refresh()

  def close(self):
    self._bar.close()


class _Lines(_Null):
  """Terminal (one overwritten line) or logging (INFO records) progress."""

  def __init__(self, total, desc, delay, interval, terminal):
    self.total, self.desc, self.n = total, desc, 0
    self.delay, self.interval, self.terminal = delay, interval, terminal
    self.t0 = time.perf_counter()
    self.last = None     # time of the last line shown (None: nothing shown yet)
    self.postfix = None

  def _line(self):
    el = time.perf_counter() - self.t0
    count = f"{self.n}/{self.total}" if self.total else f"{self.n}"
    extra = f" {self.postfix}" if self.postfix else ""
    return f"{self.desc}: {count} [{el:.1f} s]{extra}"

  def _show(self, final=False):
    line = self._line() + (" done" if final else "")
    if self.terminal:
      sys.stderr.write("\r" + line[:150].ljust(80) + ("\n" if final else ""))
      sys.stderr.flush()
    else:
      logger.info(line)
    self.last = time.perf_counter()

  def update(self, n=1, postfix=None):
    self.n += n
    if postfix is not None:
      self.postfix = postfix
    now = time.perf_counter()
    if now - self.t0 < self.delay:
      return
    if self.last is None or now - self.last >= self.interval:
      self._show()

  def set_description(self, desc):
    self.desc = desc

  def write(self, msg):
    if self.terminal:
      sys.stderr.write("\r" + msg + "\n")
      sys.stderr.flush()
    else:
      logger.info(msg)

  def echo(self, msg):
    if self.terminal and self.last is not None:   # wipe the progress line first
      sys.stderr.write("\r" + " " * 80 + "\r")
      sys.stderr.flush()
      self.last = None
    print(msg, flush=True)

  def close(self):
    if self.last is not None:   # something was shown: close with a final line
      self._show(final=True)


def _process_zero() -> bool:
  """False in processes 1, 2, ... of a ``jax.distributed`` run: progress is
  reported once, by process 0 (``jaxacct.sweep``)."""
  jax = sys.modules.get("jax")
  if jax is None or not jax.distributed.is_initialized():
    return True
  return jax.process_index() == 0


@contextlib.contextmanager
def progress(*, total: Optional[int] = None, desc: str = "jaxacct",
             enabled: Optional[bool] = None):
  """Context manager yielding a progress handle with ``update(n, postfix=)``.

  Args:
    total: number of units of work, if known.
    desc: what is being computed (first words of each line).
    enabled: ``None`` follows the global switch; ``True``/``False`` override it.

  Yields:
    An object with ``update(n=1, postfix=None)``, ``set_description(desc)``,
    ``write(msg)`` (a message in the progress stream) and ``echo(msg)`` (a
    line on stdout that does not garble the display); no-ops (``echo`` still
    prints) when progress is off.
  """
  on = (_ENABLED if enabled is None else bool(enabled)) and _process_zero()
  if not on:
    yield _Null()
    return
  backend = _BACKEND
  tq = _tqdm() if backend in ("auto", "tqdm") else None
  if tq is not None:
    bar = _Tqdm(tq, total, desc, _DELAY)
  else:
    terminal = backend == "terminal" or (backend == "auto" and _is_terminal())
    bar = _Lines(total, desc, _DELAY, _INTERVAL, terminal)
  try:
    yield bar
  finally:
    bar.close()


def check_progress_arg(value) -> Optional[bool]:
  """Validates a ``progress=`` argument (None, True or False)."""
  if value is not None and not isinstance(value, bool):
    raise ValueError(f"progress must be None, True or False; got {value!r}.")
  return value
