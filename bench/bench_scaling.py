"""Lanes per second against the number of devices and processes (issue 43 item 4).

Usage:
  python bench/bench_scaling.py [--out DIR] [--devices 1,2,4] [--quick]
  python bench/bench_scaling.py --child WORKLOAD --devices-in-child D [--gpu]

Rows (each in a FRESH ``python``, every compilation cache off):

- forced host devices: ``XLA_FLAGS=--xla_force_host_platform_device_count=D``
  for D in ``--devices`` (default 1, 2, 4), the door called with
  ``devices=jax.devices()`` (and, at D = 1, with ``devices=None`` too: the
  unsharded baseline);
- processes: ``python -m jaxacct.sweep`` with 1 and 2 processes on 127.0.0.1
  (``jax.distributed``, gloo), one CPU device each, the same grid;
- GPU: where JAX's default backend is not the CPU, one row with one GPU and
  one with all of them (the same code path, ``devices=``).

Workloads: ``poisson_rdp`` (Poisson RDP epsilon over sigmas, the accelerator
layout's block programs, forced on a CPU: blocks of 64 lanes on the CPU
budget) and ``allocation_pld`` (the tight allocation PLD epsilon sweep,
t = 100, E = 1; on a CPU its own layout, chunks of 128 lanes). Cold = the first call (compilation included: each device
compiles the block programs once); warm = best of the next calls. Every row
checks its values against the D = 1 row (bitwise). On 2 CPU cores, forced
host devices share the same cores, so no speed-up is expected there; the
table reports it. Writes ``<out>/results_scaling.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MARK = "BENCH_SCALING_JSON "
WORKLOADS = {
    # name: (door for python -m jaxacct.sweep, grid args, layout)
    "poisson_rdp": ("poisson.epsilon", ["--axis", "sigma=lin:0.5:5:{lanes}", "--set", "q=0.01",
                                        "--set", "num_steps=1000", "--set", "delta=1e-5"],
                    "accelerator"),
    "allocation_pld": ("allocation.pld.epsilon",
                       ["--axis", "sigma=lin:0.8:4:{lanes}", "--set", "steps_per_epoch=100",
                        "--set", "num_epochs=1", "--set", "delta=1e-6"], "cpu"),
}
LANES = {"poisson_rdp": 4096, "allocation_pld": 2048}
QUICK_LANES = {"poisson_rdp": 512, "allocation_pld": 512}


def _env(devices=1, gpu=False):
  env = dict(os.environ, JAXACCT_COMPILATION_CACHE="0", JAX_ENABLE_COMPILATION_CACHE="false",
             JAXACCT_PROGRESS="0", PYTHONPATH=ROOT)
  for k in ("JAX_COMPILATION_CACHE_DIR", "JAXACCT_LAYOUT", "JAXACCT_DEVICE_MEMORY"):
    env.pop(k, None)
  env.pop("XLA_FLAGS", None)
  if not gpu:
    env["JAX_PLATFORMS"] = "cpu"
    if devices > 1:
      env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  return env


def _digest(arrays) -> str:
  h = hashlib.sha256()
  for a in arrays:
    h.update(a.tobytes())
  return h.hexdigest()[:16]


def child(workload: str, lanes: int, devices: int, gpu: bool, repeat: int) -> dict:
  """One row in this process: the door over ``lanes`` lanes on ``devices``."""
  import jax   # noqa: PLC0415 -- the parent never imports jax
  import numpy as np   # noqa: PLC0415
  import jaxacct   # noqa: PLC0415
  from jaxacct import poisson   # noqa: PLC0415
  from jaxacct.allocation import pld as apld   # noqa: PLC0415

  devs = jax.devices()[:devices] if devices else None
  if workload == "poisson_rdp":
    sig = np.linspace(0.5, 5.0, lanes)
    call = lambda: poisson.epsilon(q=0.01, sigma=sig, num_steps=1000, delta=1e-5,   # noqa: E731
                                   devices=devs).epsilon
    layout = "accelerator"
  else:
    sig = np.linspace(0.8, 4.0, lanes)
    call = lambda: apld.allocation_pld_epsilon(sigma=sig, delta=1e-6,   # noqa: E731
                                               steps_per_epoch=100, num_epochs=1,
                                               devices=devs).epsilon
    # the CPU's own layout on a CPU (chunks of 128 lanes; the accelerator
    # layout's vmapped chunks are ~50x slower there), the default elsewhere
    layout = "cpu" if jax.default_backend() == "cpu" else "auto"
  times = []
  with jaxacct.set_layout(layout):
    for _ in range(repeat):
      t0 = time.perf_counter()
      out = np.asarray(call())
      times.append(time.perf_counter() - t0)
  return {"cold_s": times[0], "warm_s": min(times[1:]) if len(times) > 1 else None,
          "digest": _digest([out]), "backend": jax.default_backend(),
          "device_kind": jax.devices()[0].device_kind, "devices": devices or 1,
          "jax": jax.__version__}


def _run_child(args_list, env, limit):
  t0 = time.perf_counter()
  try:
    r = subprocess.run([sys.executable, __file__, *args_list], env=env, capture_output=True,
                       text=True, timeout=limit, cwd=ROOT)
  except subprocess.TimeoutExpired:
    return {"error": f"timeout after {limit} s"}
  for line in r.stdout.splitlines():
    if line.startswith(MARK):
      res = json.loads(line[len(MARK):])
      res["wall_s"] = time.perf_counter() - t0
      return res
  return {"error": (r.stderr or r.stdout)[-600:]}


def _processes(workload, lanes, nproc, limit, repeat):
  """The launcher with ``nproc`` processes (one CPU device each)."""
  door, grid, layout = WORKLOADS[workload]
  grid = [g.format(lanes=lanes) for g in grid]
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "run")
    base = [sys.executable, "-m", "jaxacct.sweep", door, *grid, "--out", out, "--layout",
            layout, "--repeat", str(repeat), "--quiet"]
    if nproc > 1:
      import socket   # noqa: PLC0415
      with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
      cmds = [base + ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(nproc),
                      "--process-id", str(i)] for i in range(nproc)]
    else:
      cmds = [base]
    env = _env(1)
    procs = [subprocess.Popen(c, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for c in cmds]
    try:
      errs = [p.communicate(timeout=limit)[1] for p in procs]
    except subprocess.TimeoutExpired:
      for p in procs:
        p.kill()
      return {"error": f"timeout after {limit} s"}
    if any(p.returncode for p in procs):
      return {"error": "".join(errs)[-600:]}
    with open(out + ".json") as f:
      summary = json.load(f)
    import numpy as np   # noqa: PLC0415 -- the parent's only heavy import
    with np.load(out + ".npz") as z:
      digest = _digest([z["epsilon"]])
  return {"cold_s": summary["seconds_first"], "warm_s": summary["seconds"] if repeat > 1 else None,
          "digest": digest, "backend": summary["backend"],
          "device_kind": summary["device_kind"], "devices": summary["devices"]}


def _md(results) -> str:
  head = results["header"]
  lines = [f"# Lanes per second against devices and processes (issue 43)", "",
           f"{head['date']}, commit {head['commit']}, {head['machine']}, "
           f"{head['cores']} CPU cores, python {head['python']}; load average at the start "
           f"{', '.join(f'{x:.1f}' for x in head.get('load_average_at_start', []))}"
           + (f" ({head['note']})" if head.get("note") else "") + ".", "",
           "Cold: first call (every device compiles its block programs once); warm: best "
           "of the next calls. Same: values bitwise those of the 1-device row.", "",
           "| workload | lanes | setup | devices | cold s | warm s | lanes/s (warm) | "
           "speed-up | same |", "|---|---|---|---|---|---|---|---|---|"]
  for row in results["rows"]:
    r = row["result"]
    if "error" in r:
      lines.append(f"| {row['workload']} | {row['lanes']} | {row['setup']} | | | | "
                   f"{r['error'].splitlines()[-1][:60] if r['error'] else 'error'} | | |")
      continue
    warm = r.get("warm_s")
    rate = f"{row['lanes'] / warm:,.0f}" if warm else ""
    spd = f"{row['speedup']:.2f}x" if row.get("speedup") else ""
    lines.append(f"| {row['workload']} | {row['lanes']} | {row['setup']} | {r['devices']} | "
                 f"{r['cold_s']:.2f} | {warm:.3f} | {rate} | {spd} | "
                 f"{row.get('same', '')} |" if warm else
                 f"| {row['workload']} | {row['lanes']} | {row['setup']} | {r['devices']} | "
                 f"{r['cold_s']:.2f} | | | | {row.get('same', '')} |")
  lines += ["", "On 2 CPU cores the forced host devices and the processes share the same two "
            "cores: the rows show the cost of the spreading (threads, one compile per device, "
            "the all-gather), not a speed-up. A GPU machine adds the rows `gpu: 1 device` and "
            "`gpu: all devices` (the same code path)."]
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", default=os.path.join(HERE, "results"))
  p.add_argument("--devices", default="1,2,4")
  p.add_argument("--workloads", default="poisson_rdp,allocation_pld")
  p.add_argument("--quick", action="store_true")
  p.add_argument("--limit", type=int, default=600, help="seconds per row")
  p.add_argument("--child")
  p.add_argument("--devices-in-child", type=int, default=1)
  p.add_argument("--lanes", type=int, default=0)
  p.add_argument("--repeat", type=int, default=3)
  p.add_argument("--gpu", action="store_true")
  args = p.parse_args(argv)
  if args.child:
    res = child(args.child, args.lanes, args.devices_in_child, args.gpu, args.repeat)
    print(MARK + json.dumps(res), flush=True)
    return 0
  lanes_by = QUICK_LANES if args.quick else LANES
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=ROOT).stdout.strip()
  results = {"header": {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(
      timespec="seconds"), "commit": commit, "machine": platform.machine(),
      "cores": os.cpu_count(), "python": platform.python_version(),
      "load_average_at_start": list(os.getloadavg())}, "rows": []}
  os.makedirs(args.out, exist_ok=True)

  def save():
    with open(os.path.join(args.out, "results_scaling.json"), "w") as f:
      json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "results_scaling.md"), "w") as f:
      f.write(_md(results))

  def add(workload, lanes, setup, res, base):
    row = {"workload": workload, "lanes": lanes, "setup": setup, "result": res}
    if base is not None and "error" not in res and "error" not in base:
      row["same"] = res["digest"] == base["digest"]
      if res.get("warm_s") and base.get("warm_s"):
        row["speedup"] = base["warm_s"] / res["warm_s"]
    results["rows"].append(row)
    save()
    print(f"{workload:15s} {lanes:6d} {setup:28s} {json.dumps(res)[:160]}", flush=True)
    return res

  repeat = ["--repeat", str(args.repeat)]
  for workload in args.workloads.split(","):
    lanes = lanes_by[workload]
    common = ["--child", workload, "--lanes", str(lanes), *repeat]
    base = add(workload, lanes, "1 device, devices=None",
               _run_child([*common, "--devices-in-child", "0"], _env(1), args.limit), None)
    for d in (int(x) for x in args.devices.split(",")):
      add(workload, lanes, f"{d} forced host device{'s' if d > 1 else ''}",
          _run_child([*common, "--devices-in-child", str(d)], _env(d), args.limit), base)
    for nproc in (1, 2):
      add(workload, lanes, f"{nproc} process{'es' if nproc > 1 else ''} (jaxacct.sweep)",
          _processes(workload, lanes, nproc, args.limit, args.repeat), base)
    probe = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend(), "
                            "len(jax.devices()))"], capture_output=True, text=True,
                           env=_env(1, gpu=True)).stdout.split()
    if probe and probe[0] != "cpu":
      ngpu = int(probe[1])
      gbase = add(workload, lanes, "gpu: 1 device", _run_child(
          [*common, "--devices-in-child", "1", "--gpu"], _env(1, gpu=True), args.limit), None)
      if ngpu > 1:
        add(workload, lanes, f"gpu: {ngpu} devices", _run_child(
            [*common, "--devices-in-child", str(ngpu), "--gpu"], _env(1, gpu=True),
            args.limit), gbase)
  bad = [r for r in results["rows"] if r.get("same") is False or "error" in r["result"]]
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())
