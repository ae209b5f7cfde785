"""The worker of ``python -m jaxacct.sweep``: one process of a sweep (see :mod:`jaxacct.sweep`)."""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import os
import platform
import sys
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

from jaxacct import poisson, shuffle
from jaxacct import sweep as cli
from jaxacct._core.batching import set_layout
from jaxacct._core.compiled import source_hash
from jaxacct._core.progress import set_progress
from jaxacct._core.units import deprecated_aliases
from jaxacct._core.version import __version__
from jaxacct.allocation import allocation_rdp
from jaxacct.allocation import pld as apld

DOORS = {"poisson.epsilon": poisson.epsilon, "poisson.delta": poisson.delta,
         "allocation.pld.epsilon": apld.allocation_pld_epsilon,
         "allocation.pld.delta": apld.allocation_pld_delta,
         "allocation.rdp": allocation_rdp,
         "shuffle.clone_epsilon": shuffle.clone_epsilon,
         "shuffle.clone_delta": shuffle.clone_delta}
#: Doors whose first argument is positional (the query value).
POSITIONAL = {"shuffle.clone_epsilon": "delta", "shuffle.clone_delta": "eps"}


class SweepError(Exception):
  """A sweep that must not run (its message is the user's error line)."""


def outputs(door: str, res) -> dict:
  """The result's arrays: ``(orders, rdp)`` of ``allocation.rdp``; else the
  value (``epsilon`` or ``delta``), ``lower`` and ``order`` where present."""
  if door == "allocation.rdp":
    return {"orders": np.asarray(res[0]), "rdp": np.asarray(res[1])}
  out = {res._fields[0]: np.asarray(res[0])}
  for name in ("lower", "order"):
    v = getattr(res, name)
    if v is not None:
      out[name] = np.asarray(v)
  return out


def _check_names(door: str, names) -> None:
  params = inspect.signature(DOORS[door]).parameters
  if any(p.kind == p.VAR_KEYWORD for p in params.values()):
    return
  # a deprecated spelling still works (the door warns, naming the new one)
  unknown = sorted(set(names) - set(params) - set(deprecated_aliases(DOORS[door])))
  if unknown:
    raise SweepError(f"{door} takes no argument {', '.join(unknown)} (its arguments: "
                     f"{', '.join(n for n in params if n != 'devices')})")
  given = set(names) | {new for old, new in deprecated_aliases(DOORS[door]).items()
                        if old in names}
  missing = [n for n, p in params.items()
             if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
             and n not in given]
  if missing:
    raise SweepError(f"{door} needs {', '.join(missing)}: give each with --grid FILE, "
                     "--axis NAME=SPEC or --set NAME=VALUE")


# ---------------------------------------------------------------------------
# the processes agree on their inputs
# ---------------------------------------------------------------------------

def summary(args, arrays: dict, fixed: dict, sources: dict) -> dict:
  """What every process must agree on: door, layout, versions, fixed values,
  and each grid array's shape, dtype and SHA-256 (and, for messages only,
  the flag that gave it)."""
  def digest(k, a):
    a = np.ascontiguousarray(a)
    return [list(a.shape), str(a.dtype), hashlib.sha256(a.tobytes()).hexdigest()[:32],
            sources.get(k, "")]
  return {"door": args.door, "layout": args.layout,
          "versions": {"jaxacct": __version__, "jaxacct source": source_hash()[:32],
                       "jax": jax.__version__, "numpy": np.__version__,
                       "python": platform.python_version()},
          "fixed": {k: json.dumps(v, sort_keys=True) for k, v in sorted(fixed.items())},
          "arrays": {k: digest(k, a) for k, a in sorted(arrays.items())}}


def _allgather_bytes(raw: bytes) -> list:
  """Every process's ``raw`` (any length): the lengths first, then the bytes
  padded to the longest."""
  sizes = np.asarray(multihost_utils.process_allgather(np.array([len(raw)], np.int32)))
  sizes = sizes.reshape(jax.process_count()).tolist()
  buf = np.zeros(max(sizes), np.uint8)
  buf[:len(raw)] = np.frombuffer(raw, np.uint8)
  rows = np.asarray(multihost_utils.process_allgather(buf)).reshape(jax.process_count(), -1)
  return [bytes(row[:n]) for row, n in zip(rows, sizes)]


def agree(mine: dict) -> None:
  """All-gathers every process's summary; ``SweepError`` naming what differs
  from process 0's (every process raises the same)."""
  every = [json.loads(raw) for raw in _allgather_bytes(cli.agreement(mine))]
  bad = []
  for p, s in enumerate(every[1:], start=1):
    diff = cli.differences(every[0], s)
    if diff:
      bad.append(f"process {p} differs from process 0 in " + "; ".join(diff))
  if bad:
    raise SweepError("the processes were given different inputs (every process must get "
                     "the same arguments except --process-id): " + " | ".join(bad)
                     + "; nothing computed, no result written")


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------

def _write_results(npz: str, js: str, payload: dict, summary_: dict) -> str:
  """Writes both files under temporary names, then renames them over any
  earlier result: ``OUT.npz`` first, ``OUT.json`` (which holds the SHA-256 of
  ``OUT.npz``) last. A failure removes the temporary files and keeps the old
  result. Returns the SHA-256 of ``OUT.npz``."""
  buf = io.BytesIO()
  np.savez(buf, **payload)
  data = buf.getvalue()
  sha = hashlib.sha256(data).hexdigest()
  text = json.dumps(dict(summary_, npz_sha256=sha), indent=1)
  tmps = [cli.temp_path(npz, os.getpid()), cli.temp_path(js, os.getpid())]
  try:
    with open(tmps[0], "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    with open(tmps[1], "w") as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmps[0], npz)
    os.replace(tmps[1], js)
  except OSError as e:
    for t in tmps:
      try:
        os.remove(t)
      except OSError:
        pass
    raise SweepError(f"cannot write --out: {e}; an earlier result is kept") from None
  return sha


def run(args) -> int:
  """One process of the sweep; returns the exit status."""
  try:
    return _run(args)
  except (SweepError, ValueError) as e:
    print(f"jaxacct.sweep: error: {e}", file=sys.stderr, flush=True)
    return 1


def _run(args) -> int:
  sources = {}
  arrays, fixed = cli.grid(args, sources)   # checked by the launcher; the same result here
  _check_names(args.door, list(arrays) + list(fixed))
  if args.coordinator:
    host, port = cli.host_port(args.coordinator, "--coordinator")
    bind = args.coordinator_bind or (f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    wait = args.join_timeout or args.heartbeat_timeout
    print(f"jaxacct.sweep: joining: process {args.process_id} of {args.num_processes} at "
          f"{args.coordinator} (waiting up to {wait} s for the others)", file=sys.stderr,
          flush=True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(args.coordinator, num_processes=args.num_processes,
                               process_id=args.process_id,
                               heartbeat_timeout_seconds=int(args.heartbeat_timeout),
                               initialization_timeout=int(wait),
                               coordinator_bind_address=bind if args.process_id == 0 else None)
    print(f"jaxacct.sweep: joined: process {args.process_id}", file=sys.stderr, flush=True)
  if args.quiet:
    set_progress(False)
  me = jax.process_index()
  mine = summary(args, arrays, fixed, sources)
  if jax.process_count() > 1:
    agree(mine)
  npz, js = cli.output_paths(args.out)
  shape = np.broadcast_shapes(*(a.shape for a in arrays.values())) if arrays else ()
  devices = jax.devices()
  kw = {**fixed, **arrays, "devices": devices}
  pos = POSITIONAL.get(args.door)
  call_args = (kw.pop(pos),) if pos in kw else ()
  print(f"jaxacct.sweep: process {me} of {jax.process_count()}: {args.door} over "
        f"{int(np.prod(shape))} points on {len(devices)} "
        f"device{'' if len(devices) == 1 else 's'}", file=sys.stderr, flush=True)
  times = []
  with set_layout(args.layout):
    for _ in range(max(int(args.repeat), 1)):
      start = time.perf_counter()
      result = outputs(args.door, DOORS[args.door](*call_args, **kw))
      times.append(time.perf_counter() - start)
  seconds = min(times)
  if me != 0:
    return 0
  payload = {**{f"arg_{k}": v for k, v in arrays.items()}, **result}
  meta = {
      "complete": True, "door": args.door, "shape": list(shape),
      "points": int(np.prod(shape)), "fixed": fixed, "axes": args.axis, "grid": args.grid,
      "processes": jax.process_count(), "devices": len(devices),
      "device_kind": devices[0].device_kind, "backend": jax.default_backend(),
      "layout": args.layout, "seconds": seconds, "seconds_first": times[0],
      "lanes_per_second": int(np.prod(shape)) / seconds if seconds > 0 else None,
      "results": {k: {"shape": list(v.shape),
                      "min": float(np.nanmin(v)) if v.size and np.isfinite(v).any() else None,
                      "max": float(np.nanmax(v)) if v.size and np.isfinite(v).any() else None,
                      "nan": int(np.isnan(v).sum())}
                  for k, v in result.items()},
      "inputs": mine,
      "jaxacct": __version__, "jax": jax.__version__, "python": platform.python_version(),
  }
  _write_results(npz, js, payload, meta)
  print(f"jaxacct.sweep: wrote {npz} and {js} ({times[0]:.2f} s)", file=sys.stderr, flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(run(cli.parser().parse_args(sys.argv[1:])))
