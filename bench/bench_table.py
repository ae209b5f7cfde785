"""The ``jaxacct`` table across epochs: seconds per row, as multiples of Y.

``jaxacct table --sigma 2 --num-steps 1000 --num-epochs E --delta 1e-6`` (the issue 55
setting) for E in 1, 2, 5, 10, each in a fresh process with the CLI's default
compilation caches: one untimed run fills them, the next is timed (the rows'
``first_call_s`` of ``--json``). Y is dp_accounting's import and first
Poisson-PLD answer (PLDAccountant, q = 0.01, sigma = 1, 10,000 steps, delta 1e-5,
as in ``bench_cold_start.py``), measured in a fresh process of the same run.
Target: every row <= 3 s on 2 cores.

Usage: ``python bench/bench_table.py [--epochs 1 2 5 10] [--out bench/results]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SETTING = ["--sigma", "2", "--num-steps", "1000", "--delta", "1e-6"]
TARGET_ROW_S = 3.0

_Y_CODE = """
import time
t0 = time.perf_counter()
import dp_accounting as dpa
acc = dpa.pld.PLDAccountant()
acc.compose(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 10_000)
eps = acc.get_epsilon(1e-5)
print(time.perf_counter() - t0, eps)
"""


def _env():
  env = dict(os.environ)
  env.setdefault("JAXACCT_PROGRESS", "0")
  return env


def measure_y():
  """Seconds of dp_accounting's import and first Poisson-PLD answer (fresh process)."""
  out = subprocess.run([sys.executable, "-c", _Y_CODE], capture_output=True, text=True,
                       env=_env(), cwd=ROOT, check=True)
  secs, eps = out.stdout.split()[-2:]
  return float(secs), float(eps)


def table(epochs, timeout=1800):
  """``(rows, process seconds)`` of one ``jaxacct --json`` run at ``epochs``."""
  t0 = time.perf_counter()
  out = subprocess.run([sys.executable, "-m", "jaxacct", "table", *SETTING, "--num-epochs", str(epochs),
                        "--json", "--quiet"], capture_output=True, text=True, env=_env(),
                       cwd=ROOT, timeout=timeout)
  wall = time.perf_counter() - t0
  if out.returncode != 0:
    raise RuntimeError(f"jaxacct exited {out.returncode}: {out.stderr[-2000:]}")
  return json.loads(out.stdout)["rows"], wall


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--epochs", type=int, nargs="+", default=[1, 2, 5, 10])
  p.add_argument("--out", default=os.path.join(HERE, "results"))
  args = p.parse_args(argv)
  load = [round(x, 2) for x in os.getloadavg()]
  y, y_eps = measure_y()
  runs = {}
  for e in args.epochs:
    table(e)                      # fills the compilation caches
    rows, wall = table(e)
    runs[e] = {"process_s": wall, "rows": rows}
  y_end, _ = measure_y()
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
  meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "commit": commit, "cpu_count": os.cpu_count(), "loadavg_start": load,
          "loadavg_end": [round(x, 2) for x in os.getloadavg()], "y_s": y, "y_end_s": y_end,
          "y_epsilon": y_eps, "setting": " ".join(SETTING), "target_row_s": TARGET_ROW_S}
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "table_epochs_cpu.json"), "w") as f:
    json.dump({"meta": meta, "runs": {str(k): v for k, v in runs.items()}}, f, indent=2)
  lines = [f"`jaxacct {' '.join(SETTING)} --num-epochs E` (warm caches), {meta['date']}, "
           f"commit {commit}, {meta['cpu_count']} CPUs, load {load} at start, "
           f"{meta['loadavg_end']} at end; Y = {y:.3f} s at start, {y_end:.3f} s at end "
           f"(dp_accounting import + first Poisson-PLD answer)", "",
           "| row | " + " | ".join(f"E={e} (s)" for e in runs) + " | " +
           " | ".join(f"E={e} / Y" for e in runs) + " |",
           "|---|" + "---|" * (2 * len(runs))]
  names = [f"{r['scheme']} / {r['method']}" for r in next(iter(runs.values()))["rows"]]
  for i, name in enumerate(names):
    secs = [runs[e]["rows"][i]["first_call_s"] for e in runs]
    lines.append(f"| {name} | " + " | ".join(f"{s:.2f}" for s in secs) + " | "
                 + " | ".join(f"{s / y:.2f}" for s in secs) + " |")
  tot = [sum(r["first_call_s"] for r in runs[e]["rows"]) for e in runs]
  lines.append("| **all rows** | " + " | ".join(f"{s:.2f}" for s in tot) + " | "
               + " | ".join(f"{s / y:.2f}" for s in tot) + " |")
  worst = {e: max(r["first_call_s"] for r in runs[e]["rows"]) for e in runs}
  lines += ["", "Slowest row per E: " + ", ".join(
      f"E={e}: {w:.2f} s ({'met' if w <= TARGET_ROW_S else 'NOT met'}: target <= "
      f"{TARGET_ROW_S:g} s)" for e, w in worst.items())]
  with open(os.path.join(args.out, "table_epochs_cpu.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines))


if __name__ == "__main__":
  main()
