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
