"""Runs every benchmark in bench/ and writes bench/results/results.{json,md}.

Usage: python bench/run_all.py [--only NAME ...] [--out DIR]
Each bench_<name>.py exposes run() -> list of row dicts (see _common.row),
except the per-process benchmarks in PER_PROCESS (run them directly:
``python bench/bench_cold_start.py``; each of its cells is a fresh process).
Timings: compile+first run and steady state (best of a few) are reported
separately; peers are timed in the same process, one call each.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PER_PROCESS = {"cold_start"}   # no run(): one fresh subprocess per question
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def _meta():
  import jax
  try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                            capture_output=True, text=True).stdout.strip()
  except Exception:
    commit = "unknown"
  return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
          "cpu_count": os.cpu_count(), "platform": platform.platform(), "commit": commit}


def _fmt(v, nd=4):
  if v is None:
    return ""
  if isinstance(v, float):
    return f"{v:.{nd}g}"
  return str(v)


def main(argv=None):
  p = argparse.ArgumentParser()
  p.add_argument("--only", nargs="*")
  p.add_argument("--out", default=os.path.join(HERE, "results"))
  args = p.parse_args(argv)
  names = sorted(f[6:-3] for f in os.listdir(HERE) if f.startswith("bench_") and f.endswith(".py")
                 and f[6:-3] not in PER_PROCESS)
  if args.only:
    names = [n for n in names if n in args.only]
  meta = _meta()
  results = {"meta": meta, "rows": [], "errors": {}}
  def _write(final):
    os.makedirs(args.out, exist_ok=True)
    tag = "gpu" if any("cuda" in d.lower() or "gpu" in d.lower() for d in meta["devices"]) else "cpu"
    with open(os.path.join(args.out, f"results_{tag}.json"), "w") as f:
      json.dump(results, f, indent=1, default=float)
    lines = [f"# jaxacct benchmarks ({tag})", "",
             f"{meta['date']}, jax {meta['jax']}, devices {meta['devices']}, "
             f"{meta['cpu_count']} CPUs, commit {meta['commit']}", "",
             "| suite | benchmark | ours (s) | ours compile+run (s) | peer | peer (s) | speed-up | ours value | peer value | notes |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
      lines.append("| " + " | ".join(_fmt(r.get(k)) for k in (
          "suite", "benchmark", "ours_s", "ours_compile_plus_run_s", "peer", "peer_s",
          "speedup", "ours_value", "peer_value", "notes")) + " |")
    if results["errors"]:
      lines += ["", "Errors: " + ", ".join(results["errors"])]
    with open(os.path.join(args.out, f"results_{tag}.md"), "w") as f:
      f.write("\n".join(lines) + "\n")
    if final:
      print("\n".join(lines))

  for name in names:
    print(f"== bench_{name}", flush=True)
    try:
      mod = importlib.import_module(f"bench_{name}")
      for r in mod.run():
        r["suite"] = name
        results["rows"].append(r)
        print("  ", {k: _fmt(v) for k, v in r.items()}, flush=True)
    except Exception:
      results["errors"][name] = traceback.format_exc()
      print(results["errors"][name], flush=True)
    _write(False)   # partial results survive an interrupted run
  _write(True)
  return 1 if results["errors"] else 0


if __name__ == "__main__":
  sys.exit(main())
