"""Issue 67's worker abort: the kernel's cap on a process's memory mappings.

Each compiled XLA:CPU program holds memory mappings while it lives; past
``vm.max_map_count`` LLVM's JIT linker cannot map the next program and aborts the
process. ``tests/map_guard.py`` drops a worker's compiled programs at a module
boundary once it holds a third of the cap. Sources: /proc/self/maps (counted
directly), and a child process brought near the cap by filler mappings, which
aborts without the guard and finishes with it."""

import gc
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

import map_guard

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/maps"),
                                reason="needs Linux's /proc/self/maps")
HERE = os.path.dirname(os.path.abspath(__file__))


def test_dropping_programs_frees_their_mappings():
  # earlier tests' garbage is collected first, and none during the count (a collection
  # in the loop can free their programs' mappings and make the count fall)
  gc.collect()
  gc.disable()
  try:
    before = map_guard.mappings()
    for i in range(40):
      jax.jit(lambda x, i=i: jnp.sort(jnp.sin(x * (i + 1.0))).sum())(jnp.ones(5 + i))
    grown = map_guard.mappings()
  finally:
    gc.enable()
  assert grown - before >= 40, (before, grown)        # at least one mapping a program
  assert not map_guard.drop_programs_if_crowded(limit=grown + 10**6)
  assert map_guard.drop_programs_if_crowded(limit=before)
  assert map_guard.mappings() <= grown - (grown - before) // 2   # most of them freed


_CHILD = textwrap.dedent(r'''
    import ctypes, sys
    sys.path.insert(0, sys.argv[2])
    import jax, jax.numpy as jnp
    import map_guard
    guard = sys.argv[1] == "guard"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    cap = map_guard.cap()
    x = jnp.ones(16)
    jax.jit(lambda v: v + 1)(x)
    # filler: 8 KiB maps, the second page PROT_NONE, so no two merge (2 mappings each)
    while map_guard.mappings() < cap - 1600:
      for _ in range(max(1, (cap - 1500 - map_guard.mappings()) // 2 - 50)):
        p = libc.mmap(None, 8192, 3, 0x22, -1, 0)
        assert p not in (None, ctypes.c_void_p(-1).value)
        libc.mprotect(p + 4096, 4096, 0)
    keep = []
    for k in range(400):
      keep.append(jax.jit(lambda v, k=k: jnp.sort(jnp.sin(v * (k + 1.0))).sum() + k).lower(x)
                  .compile())
      if guard and map_guard.drop_programs_if_crowded(limit=cap - 800):
        keep.clear()
        map_guard.drop_programs()
    print("done", len(keep), flush=True)
''')


@pytest.mark.slow
@pytest.mark.parametrize("guard", ["none", "guard"])
def test_near_the_cap_the_guard_is_what_keeps_the_process_alive(guard):
  """Without the guard the child aborts once its programs pass the cap (the suite's
  abort); with it, the same 400 compiles finish. About 30 s each on 2 cores."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_ENABLE_COMPILATION_CACHE="false")
  p = subprocess.run([sys.executable, "-c", _CHILD, guard, os.path.dirname(HERE)],
                     capture_output=True, text=True, timeout=600, env=env)
  if guard == "guard":
    assert p.returncode == 0 and "done" in p.stdout, p.stderr[-2000:]
  else:
    assert p.returncode != 0, p.stdout[-500:]
    assert "Cannot allocate memory" in p.stderr or p.returncode < 0, p.stderr[-2000:]
