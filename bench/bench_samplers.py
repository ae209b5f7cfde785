"""The new samplers' first answers: one question per fresh process, caches off.

Usage:
  python bench/bench_samplers.py [--repeat N] [--vs-root DIR] [--out DIR]
  python bench/bench_samplers.py --child NAME

At the README's DP-SGD run (N = 60,000, B = 256, E = 10, delta = 1e-5), each in a
FRESH ``python`` with ``JAX_ENABLE_COMPILATION_CACHE=false`` and
``JAXACCT_COMPILATION_CACHE=0`` (as ``bench/bench_cold_start.py``):

* ``fixed_size_epsilon``: ``dpsgd.epsilon(noise_multiplier=1, sampling="fixed_size")``
  (upper and lower);
* ``fixed_size_calibrate``: ``dpsgd.calibrate_noise_multiplier(epsilon=3, ...)``;
* ``truncated_epsilon`` / ``truncated_calibrate``: the same with
  ``sampling="truncated_poisson", max_batch_size=300``;
* ``Y``: dp_accounting's import plus its first Poisson-PLD answer (``PLDAccountant``,
  q = 0.01, sigma = 1, T = 1e4, delta = 1e-5), the unit of issue 65's targets; each
  jaxacct question is judged by its own import (jax, jaxacct) plus its first answer,
  in units of Y. The stricter ratio of the first answers alone (bench_cold_start's Y,
  which leaves both imports out) is printed beside it.

A child times ``import jax, jaxacct`` (or ``dp_accounting``) and then the first answer;
for jaxacct the answer's window includes loading dp_accounting, which the events
bring. Each question runs ``--repeat`` times, in turn with the other questions (the
median by first answer is kept). ``--vs-root DIR`` runs every question a second
time against the jaxacct checkout in ``DIR`` (``PYTHONPATH=DIR``), alternating
with this one, and reports the ratios of the medians. Results:
``bench/results/samplers_<cpu|gpu>.json`` (+ ``.md``) with the load average.
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MARK = "SAMPLERS_JSON "
CACHE_ENV = ("JAX_COMPILATION_CACHE_DIR", "JAXACCT_COMPILATION_CACHE_DIR", "JAXACCT_CACHE_DIR")
RUN = dict(num_examples=60_000, batch_size=256, num_epochs=10, delta=1e-5, progress=False)
TRUNCATED = dict(sampling="truncated_poisson", max_batch_size=300)
QUESTIONS = ("Y", "fixed_size_epsilon", "fixed_size_calibrate", "truncated_epsilon",
             "truncated_calibrate")
TARGETS = {"fixed_size_epsilon": 1.0, "truncated_epsilon": 1.0,
           "fixed_size_calibrate": 3.0, "truncated_calibrate": 3.0}   # in Y


def _answer(name):
  from jaxacct import dpsgd
  kw = dict(RUN, **(TRUNCATED if name.startswith("truncated") else {"sampling": "fixed_size"}))
  if name.endswith("epsilon"):
    r = dpsgd.epsilon(noise_multiplier=1.0, **kw)
    return [float(r.epsilon), None if r.lower is None else float(r.lower)]
  return float(dpsgd.calibrate_noise_multiplier(epsilon=3.0, **kw))


def child(name):
  t0 = time.perf_counter()
  if name == "Y":
    import dp_accounting as dpa
  else:   # as bench_cold_start's jaxacct rows: jax, then jaxacct, in the import window
    for m in ("jax", "jaxacct"):
      importlib.import_module(m)
  import_s = time.perf_counter() - t0
  t1 = time.perf_counter()
  if name == "Y":
    acc = dpa.pld.PLDAccountant().compose(
        dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 10_000)
    value = acc.get_epsilon(1e-5)
  else:
    value = _answer(name)
  first_s = time.perf_counter() - t1
  mod = sys.modules.get("jaxacct")
  return {"question": name, "import_s": import_s, "first_s": first_s, "value": value,
          "jaxacct": None if mod is None else os.path.dirname(os.path.dirname(mod.__file__))}


def _env(root):
  env = {k: v for k, v in os.environ.items() if k not in CACHE_ENV}
  env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(
      os.pathsep) if p])
  env.update(JAX_ENABLE_COMPILATION_CACHE="false", JAXACCT_COMPILATION_CACHE="0")
  return env


def run_child(name, root, timeout=900):
  cmd = [sys.executable, os.path.abspath(__file__), "--child", name]
  t0 = time.perf_counter()
  p = subprocess.run(cmd, env=_env(root), capture_output=True, text=True, timeout=timeout,
                     cwd=root)
  lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
  if p.returncode != 0 or not lines:
    return {"question": name, "error": (p.stderr or p.stdout)[-2000:]}
  rec = json.loads(lines[-1][len(MARK):])
  rec["process_s"] = time.perf_counter() - t0
  return rec


def _median(runs):
  ok = sorted((r for r in runs if "error" not in r), key=lambda r: r["first_s"])
  if not ok:
    return runs[-1]
  rec = dict(ok[(len(ok) - 1) // 2])
  rec["first_all_s"] = [r["first_s"] for r in ok]
  return rec


def _commit(root):
  try:
    return subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, timeout=30).stdout.strip()
  except Exception:   # noqa: BLE001
    return "?"


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--child")
  ap.add_argument("--repeat", type=int, default=3)
  ap.add_argument("--vs-root", default=None)
  ap.add_argument("--out", default=os.path.join(HERE, "results"))
  a = ap.parse_args()
  if a.child:
    print(MARK + json.dumps(child(a.child)), flush=True)
    return
  import jax
  sides = {"new": ROOT} if a.vs_root is None else {"new": ROOT, "old": os.path.abspath(a.vs_root)}
  from _common import install_bytecode
  bytecode = {s: install_bytecode(root) for s, root in sides.items()}
  load0 = os.getloadavg()
  runs = {(s, q): [] for s in sides for q in QUESTIONS}
  for _ in range(a.repeat):
    for q in QUESTIONS:
      for s, root in sides.items():
        if q == "Y" and s != "new":
          continue
        runs[(s, q)].append(run_child(q, root))
  med = {k: _median(v) for k, v in runs.items() if v}
  y = med[("new", "Y")]["first_s"]
  y_whole = med[("new", "Y")]["import_s"] + y   # issue 65's Y: import plus first answer
  rows = []
  for q in QUESTIONS[1:]:
    row = {"question": q}
    for s in sides:
      r = med[(s, q)]
      row[s] = {k: r.get(k) for k in ("import_s", "first_s", "first_all_s", "value", "error",
                                      "process_s")}
      if "error" not in r:
        row[s]["first_in_Y"] = r["first_s"] / y
        row[s]["whole_in_Y"] = (r["import_s"] + r["first_s"]) / y_whole
    if "old" in sides and "error" not in med[("old", q)] and "error" not in med[("new", q)]:
      row["new_over_old"] = med[("new", q)]["first_s"] / med[("old", q)]["first_s"]
      row["values_equal"] = med[("new", q)]["value"] == med[("old", q)]["value"]
    row["target_Y"] = TARGETS[q]
    rows.append(row)
  meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
          "cpus": os.cpu_count(), "platform": platform.platform(),
          "load_average_start": load0, "load_average_end": os.getloadavg(),
          "commit": _commit(ROOT), "old": None if "old" not in sides else {
              "root": sides["old"], "commit": _commit(sides["old"])},
          "repeat": a.repeat, "bytecode": bytecode, "Y_s": y, "Y_import_s": med[("new", "Y")]["import_s"],
          "Y_value": med[("new", "Y")]["value"], "Y_whole_s": y_whole}
  kind = "gpu" if jax.default_backend() == "gpu" else "cpu"
  os.makedirs(a.out, exist_ok=True)
  with open(os.path.join(a.out, f"samplers_{kind}.json"), "w") as f:
    json.dump({"meta": meta, "rows": rows}, f, indent=1)
  lines = [f"Samplers' first answers ({kind}), {meta['date']}, jax {meta['jax']}, "
           f"{meta['cpus']} CPUs, load average {[round(v, 2) for v in load0]} at start, "
           f"{[round(v, 2) for v in meta['load_average_end']]} at end; commit {meta['commit']}"
           + ("" if "old" not in sides else f" vs {meta['old']['commit']}")
           + f"; one fresh process per cell, caches off, {bytecode['new']}; median of "
           f"{a.repeat}", "",
           f"Y (dp_accounting's import {meta['Y_import_s']:.2f} s + its first Poisson-PLD "
           f"answer {y:.3f} s) = {y_whole:.3f} s; a question's whole = its import (jax, "
           f"jaxacct) + its first answer; first / first: the first answers alone "
           f"(both imports left out)", ""]
  head = ("| question | side | import (s) | first answer (s) | whole / Y | target | met "
          "| first / first | value |")
  lines += [head, "|" + "---|" * 9]
  for row in rows:
    for s in sides:
      r = row[s]
      if r.get("error"):
        lines.append(f"| {row['question']} | {s} | | error | | | | | |")
        continue
      lines.append(f"| {row['question']} | {s} ({meta['commit'] if s == 'new' else meta['old']['commit']}) "
                   f"| {r['import_s']:.2f} | {r['first_s']:.2f} | {r['whole_in_Y']:.2f} | "
                   f"<= {row['target_Y']:g} Y | "
                   f"{'yes' if r['whole_in_Y'] <= row['target_Y'] else 'no'} | "
                   f"{r['first_in_Y']:.2f} | {r['value']} |")
  if "old" in sides:
    lines += ["", "new / old (medians of first answers): " + "; ".join(
        f"{r['question']} {r.get('new_over_old', float('nan')):.2f}"
        f" (values {'equal' if r.get('values_equal') else 'DIFFER'})" for r in rows)]
  text = "\n".join(lines) + "\n"
  with open(os.path.join(a.out, f"samplers_{kind}.md"), "w") as f:
    f.write(text)
  print(text)


if __name__ == "__main__":
  main()
