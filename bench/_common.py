"""Shared helpers for the benchmarks: timing with compile separated."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict


def block(x):
  try:
    import jax
    return jax.block_until_ready(x)
  except Exception:  # non-jax result
    return x


def timed(fn: Callable[[], Any], repeats: int = 3) -> Dict[str, Any]:
  """Runs fn once (compile + run), then `repeats` times; returns timings."""
  t0 = time.perf_counter()
  out = block(fn())
  first = time.perf_counter() - t0
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = block(fn())
    best = min(best, time.perf_counter() - t0)
  return {"first_s": first, "steady_s": best, "value": out}


def bracket(r):
  """``(r.upper, r.lower)`` as a tuple (``r[:2]`` is ``(epsilon, delta)``)."""
  return (r.upper, r.lower)


def timed_once(fn: Callable[[], Any]) -> Dict[str, Any]:
  t0 = time.perf_counter()
  out = fn()
  return {"steady_s": time.perf_counter() - t0, "value": out}


def row(benchmark: str, ours: Dict[str, Any], peer_name: str = "",
        peer: Dict[str, Any] | None = None, ours_value=None, peer_value=None,
        notes: str = "") -> Dict[str, Any]:
  r = {"benchmark": benchmark, "ours_compile_plus_run_s": ours.get("first_s"),
       "ours_s": ours["steady_s"], "peer": peer_name,
       "peer_s": None if peer is None else peer["steady_s"],
       "speedup": None if peer is None else peer["steady_s"] / max(ours["steady_s"], 1e-12),
       "ours_value": ours_value, "peer_value": peer_value, "notes": notes}
  return r


def install_bytecode(root: str) -> str:
  """Byte-compiles the jaxacct sources under ``root`` into their ``__pycache__``
  (git-ignored), as an install does: pip compiles a package's modules when it
  installs them, and an editable install writes them at its first import. Under
  ``PYTHONDONTWRITEBYTECODE=1`` (some sandboxes and CI images) every fresh
  process would otherwise compile jaxacct's sources again (part of its
  import), a cost the peers, installed with their bytecode, never pay.
  Returns what was done, for a benchmark's header."""
  import compileall
  ok = compileall.compile_dir(os.path.join(root, "jaxacct"), quiet=1)
  return "jaxacct byte-compiled as installed" if ok else "jaxacct byte-compile FAILED"
