"""The allocation laws program alone, per layout variant: compile, warm, temporaries, big fusions.

Usage (repository root): ``python bench/gpu_laws.py [--out DIR] [--lanes N] [--quick]``.

One fresh process per variant (every cache off), each with its own time limit
(``--limit``, cut to its share of what is left of ``--budget``: the whole call
at most 90 s, so that the one device call ``bench/device_call.sh`` stays
under 9 minutes on one H100/H200). A variant is the number of
diagonals of every block summed per loop trip of the accelerator layout's
pairwise sums (``DIAGONALS_PER_TRIP``: 8, the default; 64, one gather-
reduction with no loop). For each: the laws program for one chunk of lanes at
t=234 and t=1000 (grid 1024), compiled (seconds), run on sigmas in [0.5, 5]
(first and best warm seconds), its ``memory_analysis`` temporaries, and the
fusions of its optimised HLO that write more than 64 MB (XLA materialising the
gathers instead of fusing them into their reductions), with the census of
``tests/hlo_loops.py`` (executed kernels, wide scatters, unknown-trip loops).
Results: ``DIR/gpu_laws.json`` and ``.md`` (default ``bench/results``),
rewritten after each variant.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MARK = "GPU_LAWS_JSON "
VARIANTS = (8, 64)   # 16 was 4x slower than 8 on an H200 (bench/results/gpu_laws.md)
BUDGET_S = 90.0   # the whole call, seconds
BIG_FUSION_BYTES = 64 << 20
_BYTES = {"f64": 8, "s64": 8, "u64": 8, "c128": 16, "f32": 4, "s32": 4, "u32": 4, "pred": 1,
          "c64": 8, "s8": 1, "u8": 1}

CHILD = r'''
import json, re, sys, time
import numpy as np, jax
jax.config.update("jax_enable_x64", True)   # this process only: the program's float64 inputs
sys.path.insert(0, sys.argv[4])
import hlo_loops
import jaxacct
from jaxacct.allocation import sum_law
from jaxacct.allocation.pld import _diagonal_blocks
U, lanes, t = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
_diagonal_blocks.DIAGONALS_PER_TRIP = U
jaxacct.set_layout("accelerator")
sig = np.geomspace(0.5, 5.0, lanes)
args = (sig, np.full(lanes, t, np.int32), np.full(lanes, 1e-12))
t0 = time.perf_counter()
c = sum_law.laws_batch(*args, n=1024, mechanism="gaussian", aot="executable")
compile_s = time.perf_counter() - t0
text = c.as_text()
big = []
for line in text.splitlines():
  m = re.match(r"\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*([a-z0-9]+)\[([\d,]*)\]\S*\s+fusion\(", line)
  if m:
    size = 1
    for d in m.group(3).split(","):
      size *= int(d) if d else 1
    b = size * BYTES.get(m.group(2), 8)
    if b > BIG:
      big.append([m.group(1), m.group(2) + "[" + m.group(3) + "]", b])
runs = []
for i in range(3):
  t0 = time.perf_counter()
  jax.block_until_ready(c(*args))
  runs.append(time.perf_counter() - t0)
print(MARK + json.dumps(dict(U=U, lanes=lanes, t=t, device=jax.devices()[0].device_kind,
      backend=jax.default_backend(), compile_s=compile_s, first_s=runs[0], warm_s=min(runs[1:]),
      temp_bytes=c.memory_analysis().temp_size_in_bytes, census=hlo_loops.census(text, 99),
      big_fusions=sorted(big, key=lambda x: -x[2])[:10], n_big_fusions=len(big))), flush=True)
'''


def run(U, lanes, t, limit):
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("JAX_COMPILATION_CACHE", "JAXACCT_COMPILATION_CACHE",
                              "JAXACCT_CACHE"))}
  env.update(JAXACCT_COMPILATION_CACHE="0", JAX_ENABLE_COMPILATION_CACHE="false",
             PYTHONPATH=os.pathsep.join([ROOT, env.get("PYTHONPATH", "")]))
  code = (CHILD.replace("MARK", repr(MARK)).replace("BYTES", repr(_BYTES))
          .replace("BIG", str(BIG_FUSION_BYTES)))
  t0 = time.perf_counter()
  try:
    p = subprocess.run([sys.executable, "-c", code, str(U), str(lanes), str(t),
                        os.path.join(ROOT, "tests")], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=limit)
    out, err = p.stdout, p.stderr if p.returncode else ""
    status = "ok" if p.returncode == 0 else f"error: exit {p.returncode}"
  except subprocess.TimeoutExpired as e:
    out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    err, status = "", f"timeout after {limit:.0f} s"
  lines = [ln for ln in out.splitlines() if ln.startswith(MARK)]
  rec = json.loads(lines[-1][len(MARK):]) if lines else {"U": U, "lanes": lanes, "t": t}
  rec.update(status=status, process_s=time.perf_counter() - t0)
  if err:
    rec["stderr_tail"] = err[-1500:]
  return rec


def table(recs):
  head = ["diagonals a trip", "t", "lanes", "compile s", "first s", "warm s", "temporaries MB",
          "MB a lane", "kernels", "wide scatters", "unknown loops", "fusions > 64 MB", "status"]
  out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in recs:
    c = r.get("census", {})
    tb = r.get("temp_bytes")
    cells = [r["U"], r["t"], r["lanes"], f"{r['compile_s']:.2f}" if "compile_s" in r else "",
             f"{r['first_s']:.3f}" if "first_s" in r else "",
             f"{r['warm_s']:.4f}" if "warm_s" in r else "",
             "" if tb is None else f"{tb / 1e6:.0f}",
             "" if tb is None else f"{tb / 1e6 / r['lanes']:.2f}",
             c.get("kernels", ""), c.get("wide_scatters", ""), c.get("unknown_loops", ""),
             r.get("n_big_fusions", ""), r["status"]]
    out.append("| " + " | ".join(str(x) for x in cells) + " |")
  return "\n".join(out)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--out", default=os.path.join(HERE, "results"))
  p.add_argument("--lanes", type=int, default=None,
                 help="lanes of the chunk (default 1024; 8 with --quick)")
  p.add_argument("--quick", action="store_true", help="8 lanes, t=234 only (a CPU smoke test)")
  p.add_argument("--limit", type=float, default=50.0, help="seconds per variant and t")
  p.add_argument("--budget", type=float, default=BUDGET_S,
                 help=f"total seconds of the call (default {BUDGET_S:g}): each variant gets "
                      "at most its share of what is left")
  args = p.parse_args(argv)
  if args.budget <= 0 or args.limit <= 0:
    p.error("--budget and --limit must be > 0")
  if args.lanes is not None and args.lanes < 1:
    p.error(f"--lanes must be >= 1; got {args.lanes}")
  lanes = args.lanes or (8 if args.quick else 1024)
  recs = []
  os.makedirs(args.out, exist_ok=True)
  todo = [(t, U) for t in ((234,) if args.quick else (234, 1000)) for U in VARIANTS]
  t_run = time.perf_counter()
  for i, (t, U) in enumerate(todo):
    left = args.budget - (time.perf_counter() - t_run)
    if left < 5.0:
      recs.append({"U": U, "lanes": lanes, "t": t,
                   "status": f"skipped (budget: {max(left, 0):.0f} s left)"})
    else:   # a variant may use 1.5 times its even share: a quick one leaves time over
      recs.append(run(U, lanes, t, min(args.limit, 1.5 * left / (len(todo) - i), left)))
    print(json.dumps(recs[-1])[:600], flush=True)
    for ext, payload in (("json", json.dumps(recs, indent=1)), ("md", table(recs) + "\n")):
      path = os.path.join(args.out, f"gpu_laws.{ext}")
      with open(path + ".tmp", "w") as f:
        f.write(payload)
      os.replace(path + ".tmp", path)
  print(table(recs))
  return 0 if all(r["status"] == "ok" for r in recs) else 1


if __name__ == "__main__":
  sys.exit(main())
