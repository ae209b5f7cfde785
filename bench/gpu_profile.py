"""Where a cold first sweep's seconds go: compile, run, and the rest (a profiled fresh process).

Usage (repository root): ``python bench/gpu_profile.py [--out DIR] [--limit S] [--quick]``.

The headline sweep of ``bench/bench_gpu.py`` (1,000 sigmas in [0.5, 5], t=234,
E=10, delta=1e-5; ``--quick``: 64 sigmas) in ONE fresh process with every
compilation cache off, on JAX's default backend with the accelerator layout
(on a machine without an accelerator: the CPU backend with that layout forced;
the header says which). The child records:

* ``import_s``, ``first_s`` (the cold call) and ``warm_s`` (the same call again);
* every ``jax.monitoring`` compile event of the cold call (trace, lowering,
  backend compile) with its function and its end time, and the union of their
  spans (``compile_union_s``);
* ``unexplained_s = first_s - compile_union_s - warm_s``: neither compiling nor
  the warm computation (on an H200 it was about 5 s of a 12 s first answer:
  loading the kernels, FFT plans, host work);
* the cold call's cProfile: the 25 functions with the most own time and the 25
  with the most cumulative time (native calls included: loading an executable,
  waiting on the device), which name that remainder.

Results: ``DIR/gpu_profile.json`` and ``.md`` (default ``bench/results``). One
child, killed at ``--limit`` seconds (default 150); a killed child leaves the
phases it printed.
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
MARK = "GPU_PROFILE_JSON "
CACHE_ENV = ("JAX_COMPILATION_CACHE_DIR", "JAXACCT_COMPILATION_CACHE_DIR", "JAXACCT_CACHE_DIR")

CHILD = r'''
import cProfile, io, json, pstats, sys, time
MARK, lanes = sys.argv[1], int(sys.argv[2])
def emit(**kw):
  print(MARK + json.dumps(kw), flush=True)
t0 = time.perf_counter()
import numpy as np, jax
import jaxacct
from jaxacct.allocation import pld
emit(phase="import", import_s=time.perf_counter() - t0, backend=jax.default_backend(),
     device=str(jax.devices()[0].device_kind), jax=jax.__version__)
events = []
def listen(name, secs, **kw):
  if name.startswith("/jax/core/compile/"):
    events.append((name.rsplit("/", 1)[-1], kw.get("fun_name"), float(secs), time.perf_counter()))
jax.monitoring.register_event_duration_secs_listener(listen)
sig = np.geomspace(0.5, 5.0, lanes)
ask = lambda: pld.allocation_pld_epsilon(sigma=sig, steps_per_epoch=234, num_epochs=10,
                                         delta=1e-5)
prof = cProfile.Profile()
t1 = time.perf_counter()
prof.enable()
r = ask()
prof.disable()
t2 = time.perf_counter()
spans = sorted((end - secs, end) for _, _, secs, end in events if t1 <= end <= t2 + 1e-3)
union, cur = 0.0, None
for a, b in spans:
  if cur is None or a > cur[1]:
    union += 0.0 if cur is None else cur[1] - cur[0]
    cur = [a, b]
  else:
    cur[1] = max(cur[1], b)
union += 0.0 if cur is None else cur[1] - cur[0]
def top(key):
  s = io.StringIO()
  st = pstats.Stats(prof, stream=s)
  st.sort_stats(key)
  rows = []
  for (fn, line, name), (cc, nc, tt, ct, _) in sorted(
      st.stats.items(), key=lambda kv: -kv[1][2 if key == "tottime" else 3])[:25]:
    rows.append([f"{fn.rsplit('/', 1)[-1]}:{line}({name})", nc, round(tt, 4), round(ct, 4)])
  return rows
emit(phase="cold", first_s=t2 - t1, compile_union_s=union,
     compiles=[[k, f, round(s, 3), round(e - t1, 3)] for k, f, s, e in events],
     top_own=top("tottime"), top_cumulative=top("cumulative"),
     value=float(np.max(np.asarray(r.epsilon) / np.asarray(r.lower))))
t3 = time.perf_counter()
ask()
emit(phase="warm", warm_s=time.perf_counter() - t3)
'''


def run(lanes: int, limit: float) -> dict:
  env = {k: v for k, v in os.environ.items() if k not in CACHE_ENV}
  env.update(JAX_ENABLE_COMPILATION_CACHE="false", JAXACCT_COMPILATION_CACHE="0",
             JAXACCT_LAYOUT="accelerator", TQDM_DISABLE="1",
             PYTHONPATH=os.pathsep.join([ROOT] + [p for p in env.get("PYTHONPATH", "").split(
                 os.pathsep) if p]))
  rec: dict = {"lanes": lanes, "status": "ok"}
  t0 = time.perf_counter()
  try:
    p = subprocess.run([sys.executable, "-c", CHILD, MARK, str(lanes)], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=limit)
    out, err = p.stdout, p.stderr
    if p.returncode != 0:
      rec["status"] = f"exit {p.returncode}"
  except subprocess.TimeoutExpired as e:
    out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    rec["status"] = f"timeout after {limit:g} s"
  for line in out.splitlines():
    if line.startswith(MARK):
      rec.update(json.loads(line[len(MARK):]))
  rec["process_s"] = time.perf_counter() - t0
  if rec["status"] != "ok":
    rec["stderr_tail"] = err[-3000:]
  if all(k in rec for k in ("first_s", "compile_union_s", "warm_s")):
    rec["unexplained_s"] = rec["first_s"] - rec["compile_union_s"] - rec["warm_s"]
  return rec


def markdown(rec: dict) -> str:
  f = lambda k: f"{rec[k]:.3f}" if isinstance(rec.get(k), float) else "-"  # noqa: E731
  lines = [f"Cold sweep profile, {rec['date']}, {rec.get('device', '?')} "
           f"({rec.get('backend', '?')} backend, accelerator layout), jax {rec.get('jax', '?')}, "
           f"{rec['lanes']} sigmas, t=234, E=10; status {rec['status']}", "",
           "| import s | first s | compile (union) s | warm s | unexplained s | process s |",
           "|---|---|---|---|---|---|",
           f"| {f('import_s')} | {f('first_s')} | {f('compile_union_s')} | {f('warm_s')} "
           f"| {f('unexplained_s')} | {f('process_s')} |", ""]
  if rec.get("compiles"):
    lines += ["Compile events of the cold call (kind, function, seconds, ended at s):", ""]
    lines += [f"- {k} {fn} {s} @ {e}" for k, fn, s, e in rec["compiles"]] + [""]
  for key, title in (("top_own", "own time"), ("top_cumulative", "cumulative time")):
    if rec.get(key):
      lines += [f"Cold call, top functions by {title}:", "", "| function | calls | own s | cum s |",
                "|---|---|---|---|"]
      lines += [f"| {n} | {c} | {t} | {ct} |" for n, c, t, ct in rec[key]] + [""]
  return "\n".join(lines) + "\n"


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", default=os.path.join(HERE, "results"))
  p.add_argument("--limit", type=float, default=150.0, help="seconds for the one child")
  p.add_argument("--quick", action="store_true", help="64 sigmas (a CPU smoke test)")
  a = p.parse_args()
  if a.limit <= 0:
    raise SystemExit("--limit must be a positive number of seconds")
  rec = run(64 if a.quick else 1000, a.limit)
  rec["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  os.makedirs(a.out, exist_ok=True)
  with open(os.path.join(a.out, "gpu_profile.json"), "w") as fh:
    json.dump(rec, fh, indent=1)
  text = markdown(rec)
  with open(os.path.join(a.out, "gpu_profile.md"), "w") as fh:
    fh.write(text)
  print(text)
  return 0 if rec["status"] == "ok" else 1


if __name__ == "__main__":
  sys.exit(main())
