"""Two independent pieces of host work side by side (``jaxacct._core.parallel``,
``jaxacct._core.dtype.side_by_side`` and ``beside``), and the accountant's bracket
that uses them.

Counted, never timed: which thread ran what, the order of calls, JAX's compiled
programs (``_cache_size``) and values equal bit for bit to the serial ones (a
self-consistency check: the values themselves are checked against brute force,
mpmath and dp_accounting in tests/accounting).
"""

import contextlib
import contextvars
import threading
import time

import jax
import numpy as np
import pytest

from jaxacct._core import dtype, parallel

MARK = contextvars.ContextVar("test_parallel_mark", default="unset")


@pytest.fixture
def two_cores(monkeypatch):
  """The threaded path, whatever this machine's core count."""
  monkeypatch.setattr(parallel, "cores", lambda: 2)


def _alive_helpers():
  return [t for t in threading.enumerate() if t.name.startswith("jaxacct-beside")]


def test_side_by_side_runs_second_on_a_joined_helper_in_the_callers_context(two_cores):
  token = MARK.set("caller")
  entered = []

  @contextlib.contextmanager
  def enter():
    entered.append(threading.current_thread().name)
    yield

  try:
    here, there = parallel.side_by_side(
        lambda: (threading.current_thread().name, MARK.get()),
        lambda: (threading.current_thread().name, MARK.get()), enter=enter)
  finally:
    MARK.reset(token)
  assert here == (threading.current_thread().name, "caller")
  assert there[0].startswith("jaxacct-beside") and there[1] == "caller"
  assert entered == [there[0]]            # enter() ran on the helper, once
  assert not _alive_helpers()             # joined before returning


def _name():
  return threading.current_thread().name, threading.get_ident()


def test_helpers_are_at_most_cores_minus_one(two_cores):
  """Two cores: one helper. A pair asked on the helper while the caller is busy
  runs in turn there; once the caller waits (lending its core), it gets one."""
  done = threading.Event()

  def nested_while_busy():
    out = parallel.side_by_side(_name, _name)
    done.set()
    return out

  def busy():
    assert done.wait(30)        # busy until the helper's pair has run
    return _name()

  _, (a, b) = parallel.side_by_side(busy, nested_while_busy)
  assert a == b and a[0].startswith("jaxacct-beside")

  def nested_while_waiting():
    time.sleep(0.3)             # the caller has returned from first and waits
    return parallel.side_by_side(_name, _name)

  _, (a, b) = parallel.side_by_side(_name, nested_while_waiting)
  assert a[0].startswith("jaxacct-beside") and b[0].startswith("jaxacct-beside") and a != b
  assert parallel.helpers_running() == 0 and not _alive_helpers()


def test_one_core_runs_both_here_in_order(monkeypatch):
  monkeypatch.setattr(parallel, "cores", lambda: 1)
  calls = []
  me = threading.current_thread().name
  out = parallel.side_by_side(lambda: calls.append(("first", threading.current_thread().name)),
                              lambda: calls.append(("second", threading.current_thread().name)))
  assert out == (None, None)
  assert calls == [("first", me), ("second", me)]


def test_an_exception_in_first_is_raised_at_once_and_in_second_after_first(two_cores):
  ended = []

  def slow():
    time.sleep(0.2)
    ended.append("second")
    return 1

  def fails():
    raise ValueError("first failed")

  with pytest.raises(ValueError, match="first failed"):
    parallel.side_by_side(fails, slow)
  assert ended == []                      # raised at once, as in turn: not after second
  for t in _alive_helpers():              # the helper ends on its own
    t.join(10)
  assert ended == ["second"] and parallel.helpers_running() == 0

  def also_fails():
    raise KeyError("second failed")

  with pytest.raises(KeyError, match="second failed"):
    parallel.side_by_side(lambda: 0, also_fails)


def test_the_helper_gets_this_threads_float64_decision_and_the_same_programs(two_cores):
  """x64 and the default device are thread-local in JAX: the helper enters the
  caller's values, so it runs float64 and reuses the caller's compiled program
  (a different setting would be a different cache key: a second compile)."""
  f = jax.jit(lambda x: x * 2.0 + 1.0)
  cpu = jax.devices("cpu")[0]

  def ask():
    y = f(np.arange(4.0))
    return dtype.x64_enabled(), str(y.dtype), jax.config.jax_default_device

  assert not dtype.x64_enabled()          # the suite runs in JAX's float32 default
  with jax.enable_x64(True), jax.default_device(cpu):
    here, there = dtype.side_by_side(ask, ask)
  assert here == there == (True, "float64", cpu)
  assert f._cache_size() == 1
  # outside: the user's float32 default, in both threads
  assert dtype.side_by_side(ask, ask) == ((False, "float32", None),) * 2



@pytest.mark.parametrize("kind", ["fixed_size", "poisson"])
def test_the_accountants_bracket_is_the_serial_one_bit_for_bit(monkeypatch, kind):
  """The bracket's lower (the repeated-event engine on the lower pair) runs beside
  its upper (the engine, or the Poisson door): the same numbers as one thread."""
  from jaxacct.accounting import NeighboringRelation, PLDAccountant, events as ev
  step = ev.SampledWithoutReplacementDpEvent(1000, 50, ev.GaussianDpEvent(1.0)) \
      if kind == "fixed_size" else ev.PoissonSampledDpEvent(0.05, ev.GaussianDpEvent(1.0))
  relation = NeighboringRelation.REPLACE_ONE if kind == "fixed_size" \
      else NeighboringRelation.ADD_OR_REMOVE_ONE

  def bracket(n_cores):
    monkeypatch.setattr(parallel, "cores", lambda: n_cores)
    r = PLDAccountant(relation).compose(step, 200).get_epsilon_bounds(1e-5)
    d = PLDAccountant(relation).compose(step, 200).get_delta_bounds(1.0)
    return r.epsilon, r.lower, r.by_direction, d.delta, d.lower

  calls = []
  for name in ("side_by_side", "beside"):
    inner = getattr(parallel, name)
    monkeypatch.setattr(parallel, name,
                        lambda *a, _n=name, _f=inner, **k: calls.append(_n) or _f(*a, **k))
  serial = bracket(1)
  # the lower beside the upper; fixed_size's lower pair is also started before its
  # upper pair is built (lowers_ahead)
  # (then the lower's own pieces: the pair's two directions, side by side too)
  assert calls[0] == ("beside" if kind == "fixed_size" else "side_by_side"), calls
  threaded = bracket(2)
  assert threaded == serial                    # ==: bit for bit, both directions
  assert 0.0 < serial[1] <= serial[0]


def test_later_raises_what_its_function_raised_and_runs_once(two_cores, monkeypatch):
  later = parallel.beside(lambda: 1 / 0)
  with pytest.raises(ZeroDivisionError):
    later.result()
  assert not _alive_helpers()
  monkeypatch.setattr(parallel, "cores", lambda: 1)
  runs = []
  later = parallel.beside(lambda: runs.append(threading.current_thread().name) or 7)
  assert runs == []                           # one core: nothing until asked
  assert (later.result(), later.result()) == (7, 7)
  assert runs == [threading.current_thread().name]


def test_a_bracket_answered_in_closed_form_starts_no_lower(monkeypatch, two_cores):
  """m = n: the fixed-size step is the Gaussian, whose bracket is the closed form;
  its lower pair is never asked, so none is started ahead (no wasted helper)."""
  from jaxacct.accounting import NeighboringRelation, PLDAccountant, events as ev
  calls = []
  inner = parallel.beside
  monkeypatch.setattr(parallel, "beside", lambda *a, **k: calls.append(1) or inner(*a, **k))
  step = ev.SampledWithoutReplacementDpEvent(100, 100, ev.GaussianDpEvent(4.0))
  r = PLDAccountant(NeighboringRelation.REPLACE_ONE).compose(step, 10).get_epsilon_bounds(1e-5)
  assert r.method == "gaussian_exact" and r.lower == r.epsilon
  assert calls == []


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")   # JAX's: the child runs no JAX
def test_a_forked_child_starts_with_no_helper_counted(two_cores):
  """Forked while a helper runs: the child has no helper thread, so it counts
  none and can start its own."""
  import os
  gate = threading.Event()
  later = parallel.beside(lambda: gate.wait(30))
  assert parallel.helpers_running() == 1
  r, w = os.pipe()
  pid = os.fork()
  if pid == 0:      # the child: report the count and whether a helper starts
    ok = parallel.helpers_running() == 0 and parallel.side_by_side(_name, _name)[1][0].startswith(
        "jaxacct-beside")
    os.write(w, b"1" if ok else b"0")
    os._exit(0)
  os.close(w)
  got = os.read(r, 1)
  os.waitpid(pid, 0)
  gate.set()
  later.result()
  assert got == b"1"
  assert parallel.helpers_running() == 0


def test_a_ledger_too_long_is_refused_the_same_with_a_helper(monkeypatch):
  """A count past the PLD window: the same restated error (naming ``count``) with
  one core and with two, though the lower pair was started beside the upper."""
  from jaxacct._core.checks import WindowTooLarge
  from jaxacct.accounting import NeighboringRelation, PLDAccountant, events as ev
  step = ev.SampledWithoutReplacementDpEvent(1000, 50, ev.GaussianDpEvent(1.0))
  said = []
  for n_cores in (1, 2):
    monkeypatch.setattr(parallel, "cores", lambda n=n_cores: n)
    with pytest.raises(WindowTooLarge, match="^count: ") as err:
      PLDAccountant(NeighboringRelation.REPLACE_ONE).compose(step, 10**9).get_epsilon_bounds(
          1e-5)
    said.append(str(err.value))
  assert said[0] == said[1]
  for t in _alive_helpers():   # the lower started ahead ends on its own
    t.join(60)
  assert parallel.helpers_running() == 0
