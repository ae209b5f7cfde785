"""Keeps a long-lived test process under the kernel's cap on memory mappings.

Every XLA:CPU program JAX compiles keeps its code in memory mappings (about 15-30 a
program here) for as long as the program lives, and JAX keeps every program a
process compiled. Linux caps a process's mappings (``vm.max_map_count``, 65,530 by
default). A worker of the whole suite compiles a few thousand programs, and the
next ``mmap`` past the cap fails inside LLVM's JIT linker: the process aborts
("LLVM compilation error: Cannot allocate memory", then SIGABRT or SIGSEGV), in a
compile or in the persistent-cache write's ``serialize()``, which links the
program's code (issue 67). :func:`drop_programs_if_crowded`, called at each test
module's end (``tests/conftest.py``), drops the compiled programs once the
process holds more than a third of the cap; later tests compile (or load from the
worker's cache folder) what they need again.
"""

import gc
import sys

SHARE = 1 / 3          # drop the programs above this share of the cap
DEFAULT_CAP = 65530    # Linux's default vm.max_map_count


def mappings() -> int:
  """This process's memory mappings (lines of /proc/self/maps); 0 where there is none."""
  try:
    with open("/proc/self/maps", "rb") as f:
      return f.read().count(b"\n")
  except OSError:
    return 0


def cap() -> int:
  """The kernel's cap on a process's mappings (``vm.max_map_count``)."""
  try:
    with open("/proc/sys/vm/max_map_count") as f:
      return int(f.read())
  except (OSError, ValueError):
    return DEFAULT_CAP


def drop_programs():
  """Forgets every compiled program of this process: JAX's caches and jaxacct's
  in-memory store (its disk store and JAX's cache folder stay)."""
  import jax
  jax.clear_caches()
  compiled = sys.modules.get("jaxacct._core.compiled")
  if compiled is not None:
    compiled.clear_memory()
  gc.collect()


def drop_programs_if_crowded(limit=None) -> bool:
  """Drops the compiled programs when this process holds more than ``limit``
  mappings (default: a third of the cap); whether it did."""
  limit = int(cap() * SHARE) if limit is None else limit
  if mappings() <= limit:
    return False
  drop_programs()
  return True
