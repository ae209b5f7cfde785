"""The worker of ``python -m jaxacct.sweep``: one process of a sweep (see :mod:`jaxacct.sweep`)."""

from __future__ import annotations

import json
import os
import platform
import sys
import time

import jax
import numpy as np

from jaxacct import poisson, shuffle
from jaxacct import sweep as cli
from jaxacct._core.batching import set_layout
from jaxacct._core.progress import set_progress
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


def _number(tok: str):
  tok = tok.strip()
  try:
    return int(tok)
  except ValueError:
    pass
  try:
    return float(tok)
  except ValueError:
    return tok


def _values(spec: str):
  """The values of an ``--axis``/``--set`` spec (see :mod:`jaxacct.sweep`)."""
  kind, _, rest = spec.partition(":")
  if kind in ("lin", "log", "range") and rest:
    parts = [_number(x) for x in rest.split(":")]
    if kind == "range":
      return np.arange(*parts)
    a, b, n = parts
    return (np.linspace if kind == "lin" else np.geomspace)(float(a), float(b), int(n))
  vals = [_number(x) for x in spec.split(",")]
  return np.asarray(vals) if len(vals) > 1 else vals[0]


def grid(args):
  """``(arrays, fixed)``: the grid's broadcast arrays by name, and the fixed arguments."""
  arrays = {}
  if args.grid:
    if args.grid.endswith(".json"):
      with open(args.grid) as f:
        arrays = {k: np.asarray(v) for k, v in json.load(f).items()}
    else:
      with np.load(args.grid) as z:
        arrays = {k: z[k] for k in z.files}
  axes = [item.split("=", 1) for item in args.axis]
  vals = [np.atleast_1d(_values(v)) for _, v in axes]
  mesh = np.meshgrid(*vals, indexing="ij") if vals else []
  arrays.update({name: m for (name, _), m in zip(axes, mesh)})
  names = list(arrays)
  arrays = dict(zip(names, np.broadcast_arrays(*arrays.values()))) if names else {}
  fixed = {}
  for item in args.set:
    name, v = item.split("=", 1)
    x = _values(v)
    fixed[name] = list(x.tolist()) if isinstance(x, np.ndarray) else x
  return arrays, fixed


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


def _write_atomic(path: str, write) -> None:
  """``write(file)`` to ``path.tmp``, renamed to ``path`` only once it is whole."""
  tmp = path + ".tmp"
  with open(tmp, "wb" if path.endswith(".npz") else "w") as f:
    write(f)
  os.replace(tmp, path)


def run(args) -> int:
  """One process of the sweep; returns the exit status."""
  if args.coordinator:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(args.coordinator, num_processes=args.num_processes,
                               process_id=args.process_id,
                               heartbeat_timeout_seconds=int(args.heartbeat_timeout))
  if args.quiet:
    set_progress(False)
  me = jax.process_index()
  npz, js = cli.output_paths(args.out)
  if me == 0:
    for path in (npz, js, npz + ".tmp", js + ".tmp"):
      if os.path.exists(path):
        os.remove(path)
  arrays, fixed = grid(args)
  shape = np.broadcast_shapes(*(a.shape for a in arrays.values())) if arrays else ()
  devices = jax.devices()
  kw = {**fixed, **arrays, "devices": devices}
  pos = POSITIONAL.get(args.door)
  call_args = (kw.pop(pos),) if pos in kw else ()
  print(f"jaxacct.sweep: process {me} of {jax.process_count()}: {args.door} over "
        f"{int(np.prod(shape))} points on {len(devices)} devices", file=sys.stderr, flush=True)
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
  _write_atomic(npz, lambda f: np.savez(f, **payload))
  summary = {
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
      "jaxacct": __version__, "jax": jax.__version__, "python": platform.python_version(),
  }
  _write_atomic(js, lambda f: json.dump(summary, f, indent=1))
  print(f"jaxacct.sweep: wrote {npz} and {js} ({times[0]:.2f} s)", file=sys.stderr, flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(run(cli.parser().parse_args(sys.argv[1:])))
