"""The store tests' kernel: a program of its own per test, so that JAX's persistent
cache (the suite's, see tests/conftest.py) holds no executable of it and the store
writes its entry (the store skips executables that JAX loaded from its own cache)."""

import time

import jax
import jax.numpy as jnp
import pytest

from jaxacct._core import compiled


def _program(salt):
  def f(x):
    return jnp.cumsum(x) * 2.0 + jnp.sin(x) + salt
  return f


@pytest.fixture
def kernel(tmp_path, monkeypatch, request):
  """A ``compiled.jit`` kernel storing into ``tmp_path / "cache"``; ``kernel.plain``
  is the same function under ``jax.jit`` (the reference answer)."""
  monkeypatch.setenv("JAXACCT_COMPILATION_CACHE", "1")
  monkeypatch.delenv("JAXACCT_COMPILATION_CACHE_DIR", raising=False)
  monkeypatch.setenv("JAXACCT_CACHE_DIR", str(tmp_path / "cache"))
  compiled.clear_memory()
  f = _program(float(time.time_ns() % 1_000_003))
  k = compiled.jit(f, name=f"tests.{request.module.__name__}.{tmp_path.name}")
  k.plain = jax.jit(f)
  yield k
  compiled.clear_memory()
