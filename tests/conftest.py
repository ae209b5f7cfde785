"""Test configuration.

The library never flips the global x64 flag; the tests don't either, so that
the float32-user situation is exercised too. Tests that call jittable kernels
directly wrap them in ``jax.enable_x64(True)`` (fixture ``x64``).
"""

import os
import sys

import jax
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


@pytest.fixture
def x64():
  with jax.enable_x64(True):
    yield


class CompileCounter:
  """Counts XLA backend compilations while active (``jax.monitoring`` events)."""

  def __init__(self):
    self.count = 0
    self.active = False

  def _listener(self, name, duration, **kwargs):
    if self.active and name == "/jax/core/compile/backend_compile_duration":
      self.count += 1

  def __enter__(self):
    self.count = 0
    self.active = True
    return self

  def __exit__(self, *exc):
    self.active = False
    return False


_COUNTER = CompileCounter()
jax.monitoring.register_event_duration_secs_listener(_COUNTER._listener)


@pytest.fixture
def compile_counter():
  """Context manager counting backend compilations: ``with compile_counter as c: ...``."""
  return _COUNTER
