"""jaxacct._core.parallel.ahead: in order, at most depth + 1 at once, errors raised,
nothing started after an early close."""

import threading
import time

import pytest

from jaxacct._core import parallel


def _recorder(delays):
  state = {"now": 0, "most": 0, "started": []}
  lock = threading.Lock()

  def fn(i):
    with lock:
      state["now"] += 1
      state["most"] = max(state["most"], state["now"])
      state["started"].append(i)
    time.sleep(delays[i])
    with lock:
      state["now"] -= 1
    return 10 * i
  return fn, state


def test_in_order_and_one_ahead(monkeypatch):
  monkeypatch.setattr(parallel, "cores", lambda: 2)
  delays = [0.05, 0.01, 0.03, 0.0, 0.02, 0.01]
  fn, state = _recorder(delays)
  assert list(parallel.ahead(fn, range(6))) == [0, 10, 20, 30, 40, 50]
  assert state["most"] == 2          # the next item runs beside this one, never more


def test_an_error_is_raised_in_order(monkeypatch):
  monkeypatch.setattr(parallel, "cores", lambda: 2)

  def fn(i):
    if i == 2:
      raise ValueError("item 2")
    time.sleep(0.02)
    return 10 * i
  got = parallel.ahead(fn, range(4))
  assert next(got) == 0 and next(got) == 10     # item 2 failed meanwhile: raised in its turn
  with pytest.raises(ValueError, match="item 2"):
    next(got)


def test_an_early_close_starts_nothing_more(monkeypatch):
  monkeypatch.setattr(parallel, "cores", lambda: 2)
  fn, state = _recorder([0.0] + [0.05] * 9)
  got = parallel.ahead(fn, range(10))
  assert next(got) == 0
  got.close()
  time.sleep(0.2)
  assert len(state["started"]) <= 3    # item 0, and at most the two submitted after it


def test_one_core_is_serial_and_lazy(monkeypatch):
  monkeypatch.setattr(parallel, "cores", lambda: 1)
  fn, state = _recorder([0.0] * 4)
  got = parallel.ahead(fn, range(4))
  assert next(got) == 0 and state["started"] == [0]
  assert list(got) == [10, 20, 30] and state["most"] == 1
