"""Accelerator benchmark (issue 45 item 3): every array door, GPU vs the same machine's CPU.

Usage:
  python bench/bench_gpu.py [--out DIR] [--only NAME ...] [--budget SECONDS] [--quick]
                            [--sides gpu,cpu]
  python bench/bench_gpu.py --child NAME --side gpu|cpu --limit S --npz PATH [--quick]

One command, at most ``--budget`` seconds (default 390) on one H100/H200 (16
CPU cores); ``bench/gpu_laws.py`` checks the laws program alone per layout
variant (at most 90 s) and ``bench/gpu_profile.py`` profiles one cold sweep
(at most 60 s there), so ``bench/device_call.sh`` runs the three as the one
device call, under 9 minutes. Each row is one question over many lanes (sigmas, (sigma, t) grids,
(n, eps0) grids, epsilon targets). For each row and side the parent starts a
FRESH ``python`` (in series) with every compilation cache off
(``JAXACCT_COMPILATION_CACHE=0``, ``JAX_ENABLE_COMPILATION_CACHE=false``, no
cache directory): cold = import + first answer, compilation included; warm =
the same question again in the same process, best of up to 3 (2 with
``--quick``; as many as the row's time limit allows). Sides:

- ``gpu``: JAX's default backend with ``JAXACCT_LAYOUT=accelerator``. On a
  machine without an accelerator this is the CPU backend with the accelerator
  layout forced; the results' header says so (device kind, backend, layout
  come from the child processes).
- ``cpu``: ``JAX_PLATFORMS=cpu`` and the default layout (``JAXACCT_LAYOUT``
  removed), for the ratio cpu_warm / gpu_warm.

Every row has its own time limit: its nominal limit, cut to its share of what
is left of ``--budget`` (total seconds, default 390); rows are not started
when the budget is spent ("skipped (budget)"). A row past its limit is killed
and recorded as "timeout after N s" (its cold answer is kept if it came back);
the larger sizes of the same question on that side are then "skipped" (also
after an error, "unsupported" or "out of memory": a CPU-backend child may use
``CPU_MEMORY_FRACTION`` of the RAM, so a batch-sized intermediate fails its
allocation instead of the machine). Each
child prints its phases as they end, and the parent rewrites
``<out>/results_gpu.json`` and ``.md`` after every row and side, so a killed
run still leaves results. Values: the GPU side's uppers against the CPU
side's (max relative difference; issue 45 asks <= 1e-9), and whether every
bracket is certified (lower <= upper). Imports nothing but jaxacct, jax,
numpy, scipy (the parent only the standard library and NumPy, so it never
holds the accelerator). Exit status 1 on an error, a value check over 1e-9
or an uncertified bracket; timeouts, skips, "unsupported" and "out of memory"
are results, not failures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MARK = "BENCH_GPU_JSON "
CACHE_ENV = ("JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE",
             "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
             "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "JAXACCT_COMPILATION_CACHE_DIR",
             "JAXACCT_CACHE_DIR")
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
VALUE_RTOL = 1e-9          # issue 45: GPU uppers within 1e-9 relative of the CPU backend's
MIN_START_S = 8.0          # no row is started with less budget left than this
CPU_MEMORY_FRACTION = 0.6  # a CPU-backend child may use this much of the RAM (RLIMIT_DATA)
DELTA = 1e-5


# --------------------------------------------------------------------- rows --
# name: (title, family, size rank, {"full": size, "quick": size}, (gpu, cpu) nominal limits, s).
# Rows of one family at growing rank: a timeout at a smaller rank skips the larger ones.
def _sweep_rows(t, E):
  fam = f"sweep_t{t}_E{E}"
  out = {}
  # (gpu, cpu) limits: the GPU rows get what a cold start (compile included) and
  # warm runs need; the CPU side answers the 1e3 row (the ratio) and is given
  # a short look at the larger ones
  for rank, (tag, full, quick, lim) in enumerate((("1e3", 1_000, 8, (45, 30)),
                                                  ("1e4", 10_000, 12, (60, 10)),
                                                  ("1e5", 100_000, 16, (90, 10)))):
    out[f"{fam}_{tag}"] = (f"tight allocation PLD, sigmas geometric in [0.5, 5], t={t}, E={E}, "
                           f"delta=1e-5", fam, rank, {"full": full, "quick": quick}, lim)
  return out


ROWS = {
    **_sweep_rows(234, 10),
    **_sweep_rows(1000, 1),
    "grid_1000x100": ("tight allocation PLD, (sigma, t) grid: sigmas geometric in [0.5, 5] x t "
                      "geometric in [10, 1000] (rounded), E=1, delta=1e-5", "grid", 0,
                      {"full": (1000, 100), "quick": (4, 2)}, (60, 10)),
    "poisson_rdp_1e5": ("poisson.epsilon(method='rdp'), q=0.01, T=1e4, delta=1e-5, sigmas in "
                        "[0.5, 5]", "poisson_rdp", 0, {"full": 100_000, "quick": 64}, (20, 20)),
    "poisson_pld_1e5": ("poisson.epsilon(method='pld'), q=0.01, T=1e4, delta=1e-5, sigmas in "
                        "[0.5, 5]", "poisson_pld", 0, {"full": 100_000, "quick": 2}, (40, 15)),
    "allocation_rdp_1000x100": ("allocation.allocation_rdp curve, orders 2..64, direction both, "
                                "sigma x t grid as grid_1000x100", "allocation_rdp", 0,
                                {"full": (1000, 100), "quick": (3, 2)}, (30, 15)),
    "shuffle_100x100": ("shuffle.clone_epsilon (FMT'21 clone pair, any eps0-LDP randomizer), "
                        "n geometric in [1e3, 1e6] x eps0 in [0.1, 8], delta=1e-6", "shuffle", 0,
                        {"full": (100, 100), "quick": (3, 3)}, (40, 30)),
    "calibrate_1000": ("jaxacct.calibrate of RandomAllocationDpEvent(sigma, t=1000) to epsilon "
                       "targets in [0.2, 2], delta=1e-6, bracket (0.4, 5)", "calibrate", 0,
                       {"full": 1000, "quick": 8}, (40, 20)),
}
SIDES = ("gpu", "cpu")
HEADLINE = ("sweep_t234_E10_1e3", "sweep_t1000_E1_1e3")
QUICK_LIMIT_S = 60.0       # --quick: every row's nominal limit (compilation dominates there)
QUICK_DEVICE_MEMORY = 512 << 20   # --quick on a CPU with the accelerator layout: 8-lane chunks
QUICK_BUDGET_S = 900.0     # --quick: the default budget (2 CPU cores: ~24 compiles)
BUDGET_S = 390.0           # the default budget: with gpu_laws.py's 90 s and gpu_profile.py's 60 s, one call under 9 minutes


def lanes_of(size):
  return size if isinstance(size, int) else size[0] * size[1]


# -------------------------------------------------------------------- child --

def _question(name, quick):
  """(fn, lanes, quantity, describe): fn() -> (upper, lower or None), host arrays."""
  import numpy as np
  _, fam, _, sizes, _ = ROWS[name]
  size = sizes["quick" if quick else "full"]

  def grid(shape):
    s, nt = shape
    return (np.geomspace(0.5, 5.0, s)[:, None],
            np.round(np.geomspace(10, 1000, nt)).astype(np.int64)[None, :])

  if fam.startswith("sweep_"):
    from jaxacct.allocation import pld
    t, E = (int(x) for x in fam[len("sweep_t"):].split("_E"))
    sig = np.geomspace(0.5, 5.0, size)

    def fn():
      r = pld.allocation_pld_epsilon(sigma=sig, steps_per_epoch=t, num_epochs=E, delta=DELTA)
      return np.asarray(r.epsilon), np.asarray(r.lower)
    return fn, size, "epsilon", f"{size} sigmas"
  if fam == "grid":
    from jaxacct.allocation import pld
    sig, ts = grid(size)

    def fn():
      r = pld.allocation_pld_epsilon(sigma=sig, steps_per_epoch=ts, num_epochs=1, delta=DELTA)
      return np.asarray(r.epsilon), np.asarray(r.lower)
    return fn, size[0] * size[1], "epsilon", f"{size[0]} sigmas x {size[1]} t"
  if fam in ("poisson_rdp", "poisson_pld"):
    from jaxacct import poisson
    sig = np.geomspace(0.5, 5.0, size)

    def fn():
      r = poisson.epsilon(q=0.01, sigma=sig, num_steps=10_000, delta=DELTA, method=fam[-3:])
      return np.asarray(r.epsilon), None if r.lower is None else np.asarray(r.lower)
    return fn, size, "epsilon", f"{size} sigmas"
  if fam == "allocation_rdp":
    from jaxacct import allocation
    sig, ts = grid(size)

    def fn():
      _, rdp = allocation.allocation_rdp(sigma=sig, steps_per_epoch=ts, direction="both",
                                         max_order=64)
      return np.asarray(rdp), None
    return fn, size[0] * size[1], "rdp", f"{size[0]} sigmas x {size[1]} t x 63 orders"
  if fam == "shuffle":
    from jaxacct import shuffle
    nn, ne = size
    n, e0 = np.meshgrid(np.round(np.logspace(3, 6 if not quick else 4, nn)),
                        np.linspace(0.1, 8.0, ne), indexing="ij")

    def fn():
      return np.asarray(shuffle.clone_epsilon(1e-6, n=n, eps0=e0).epsilon), None
    return fn, nn * ne, "epsilon", f"{nn} n in [1,000, {int(n.max()):,}] x {ne} eps0"
  if fam == "calibrate":
    import jaxacct
    from jaxacct.accounting import events as ev
    targets = np.linspace(0.2, 2.0, size)

    def fn():
      s = jaxacct.calibrate(lambda x: ev.RandomAllocationDpEvent(noise_multiplier=x, steps_per_epoch=1000),
                            targets, 1e-6, bracket=(0.4, 5.0), progress=False)
      return np.asarray(s, dtype=np.float64), None
    return fn, size, "sigma", f"{size} targets"
  raise KeyError(name)


def _summary(upper, lower):
  import numpy as np
  u = np.asarray(upper, dtype=np.float64)
  fin = np.isfinite(u)
  out = {"shape": list(u.shape), "finite": int(fin.sum()), "size": int(u.size),
         "min": float(u[fin].min()) if fin.any() else None,
         "max": float(u[fin].max()) if fin.any() else None}
  if lower is not None:
    lo = np.broadcast_to(np.asarray(lower, dtype=np.float64), u.shape)
    both = fin & np.isfinite(lo)
    bad = both & (lo > u)
    out["certified"] = bool(not bad.any())
    out["uncertified_lanes"] = int(bad.sum())
    pos = both & (lo > 0)
    out["widest_bracket"] = float(np.max(u[pos] / lo[pos])) if pos.any() else None
  return out


def _cap_memory(fraction):
  try:
    import resource
    cap = int(fraction * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    if hard != resource.RLIM_INFINITY:
      cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
  except (ImportError, ValueError, OSError):   # not on every platform
    pass


def _emit(rec):
  print(MARK + json.dumps(rec, default=float), flush=True)


def child(name, side, limit, npz, quick):
  t_start = time.perf_counter()
  for k in CACHE_ENV:           # every cache off, whatever the caller's environment
    os.environ.pop(k, None)
  os.environ.update(JAX_ENABLE_COMPILATION_CACHE="false", JAXACCT_COMPILATION_CACHE="0")
  compiles = []

  def on_span(event, start, end, **kw):
    if event == COMPILE_EVENT:
      compiles.append(end - start)

  import jax
  jax.monitoring.register_event_time_span_listener(on_span)
  import numpy as np
  import jaxacct  # noqa: F401
  from jaxacct._core import batching
  fn, lanes, quantity, describe = _question(name, quick)
  dev = jax.devices()[0]   # backend start-up (CUDA on a GPU) counts as import
  import_s = time.perf_counter() - t_start
  if dev.platform == "cpu":   # host memory is the device's: fail an allocation, not the machine
    _cap_memory(CPU_MEMORY_FRACTION)
    if quick and batching.accelerator_layout():
      # the accelerator layout pads every batch to the device's chunk: a small
      # "device" keeps the quick rows' chunks at 8 lanes on a CPU
      # (the Poisson PLD's one-lane block at T = 1e4 needs ~0.94 GiB: a 4 GiB device)
      quick_memory = 4 << 30 if ROWS[name][1] == "poisson_pld" else QUICK_DEVICE_MEMORY
      os.environ.setdefault("JAXACCT_DEVICE_MEMORY", str(quick_memory))
  _emit({"phase": "meta", "import_s": import_s, "backend": jax.default_backend(),
         "device_kind": dev.device_kind, "devices": [str(d) for d in jax.devices()],
         "layout": batching.layout(), "jax": jax.__version__, "lanes": lanes,
         "quantity": quantity, "describe": describe})
  t0 = time.perf_counter()
  try:
    upper, lower = fn()
  except Exception as e:   # noqa: BLE001 - recorded, not raised: the run goes on
    msg = f"{type(e).__name__}: {e}"
    if isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in msg or "Out of memory" in msg:
      kind = "out of memory"
    elif isinstance(e, NotImplementedError) or (isinstance(e, (ValueError, TypeError))
                                                 and "scalar" in str(e)):
      kind = "unsupported"
    else:
      kind = "error"
    _emit({"phase": "error", "kind": kind, "message": msg[-1500:]})
    return
  first_s = time.perf_counter() - t0
  tmp = npz[:-len(".npz")] + ".part.npz"   # a child killed while saving leaves no npz
  np.savez(tmp, upper=upper, **({} if lower is None else {"lower": lower}))
  os.replace(tmp, npz)
  _emit({"phase": "cold", "first_s": first_s, "cold_s": import_s + first_s,
         "compile_s": float(sum(compiles)), "programs": len(compiles),
         "summary": _summary(upper, lower)})
  warm = []
  while len(warm) < (2 if quick else 3):
    left = limit - (time.perf_counter() - t_start)
    if warm and left < 1.2 * min(warm) + 0.5:
      break
    n0 = len(compiles)
    t0 = time.perf_counter()
    fn()
    warm.append(time.perf_counter() - t0)
    _emit({"phase": "warm", "s": warm[-1], "programs": len(compiles) - n0})
  _emit({"phase": "done"})


# ------------------------------------------------------------------- parent --

def side_env(side):
  env = {k: v for k, v in os.environ.items() if k not in CACHE_ENV}
  env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in env.get("PYTHONPATH", "").split(
      os.pathsep) if p])
  env.update(JAX_ENABLE_COMPILATION_CACHE="false", JAXACCT_COMPILATION_CACHE="0")
  if side == "gpu":
    env["JAXACCT_LAYOUT"] = "accelerator"   # the default on an accelerator; forced on a CPU
  else:
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("JAXACCT_LAYOUT", None)
  return env


def nominal_limit(name, side, quick):
  return QUICK_LIMIT_S if quick else float(ROWS[name][4][SIDES.index(side)])


def row_limit(name, side, quick, left, rest):
  """A row's time limit: its share of the budget left (``rest``: the nominal limits of the
  rows still to run, this one included), at most its nominal limit and what is left; the
  headline rows (the 1,000-sigma sweeps, the issue's targets) keep their nominal limit."""
  nominal = nominal_limit(name, side, quick)
  floor = nominal if name in HEADLINE else MIN_START_S
  return min(nominal, max(left * nominal / rest, floor), left)


def run_child(name, side, limit, npz, quick):
  """Runs one row on one side in a fresh process; returns its side record."""
  cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--side", side,
         "--limit", f"{limit:.3f}", "--npz", npz] + (["--quick"] if quick else [])
  t0 = time.perf_counter()
  p = subprocess.Popen(cmd, env=side_env(side), cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, start_new_session=True)
  killed = False
  try:
    out, err = p.communicate(timeout=limit)
  except subprocess.TimeoutExpired:
    killed = True
    try:
      os.killpg(p.pid, signal.SIGKILL)   # the child's own process group (start_new_session)
    except ProcessLookupError:
      pass
    out, err = p.communicate()
  wall = time.perf_counter() - t0
  rec = {"limit_s": round(limit, 1), "process_s": wall}
  warm = []
  for ln in out.splitlines():
    if not ln.startswith(MARK):
      continue
    d = json.loads(ln[len(MARK):])
    ph = d.pop("phase")
    if ph == "meta":
      rec.update(d)
    elif ph == "cold":
      rec.update(d)
    elif ph == "warm":
      warm.append(d)
    elif ph == "error":
      rec["status"] = f"{d['kind']}: {d['message']}"
    elif ph == "done":
      rec["status"] = "ok"
  if warm:
    rec["warm_s"] = min(w["s"] for w in warm)
    rec["warm_all_s"] = [w["s"] for w in warm]
    rec["warm_programs"] = sum(w["programs"] for w in warm)
    if rec.get("lanes"):
      rec["lanes_per_s"] = rec["lanes"] / max(rec["warm_s"], 1e-12)
  if killed and "status" in rec:   # killed after its last line (interpreter shutdown)
    rec["killed_after_end"] = True
  elif killed:
    phase = "warm" if "first_s" in rec else ("first answer" if "import_s" in rec else "import")
    rec["status"] = f"timeout after {limit:.0f} s"
    rec["timeout_in"] = phase
    rec["timed_out"] = True
    if warm:
      rec["status"] += f" (warm run {len(warm) + 1})"
  elif "status" not in rec:
    rec["status"] = f"error: exit {p.returncode}: " + (err or out).strip()[-1500:]
  if rec["status"].startswith("error"):
    rec["stderr_tail"] = (err or "")[-1500:]
  return rec


def _rel_diff(a, b):
  """Max relative difference of a and b (equal infs and NaNs count as equal)."""
  import numpy as np
  a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
  same = (a == b) | (np.isnan(a) & np.isnan(b))
  fin = np.isfinite(a) & np.isfinite(b)
  if np.any(~same & ~fin):
    return float("inf")
  d = np.abs(a[fin] - b[fin]) / np.maximum(np.abs(b[fin]), 1e-300)
  return float(d.max()) if d.size else 0.0


def compare(row, npz):
  """GPU vs CPU values of one row (both sides' cold answers)."""
  import numpy as np
  g, c = npz.get("gpu"), npz.get("cpu")
  if not (g and c and os.path.exists(g) and os.path.exists(c)):
    return
  try:
    with np.load(g) as zg, np.load(c) as zc:
      if zg["upper"].shape != zc["upper"].shape:
        row["max_rel_diff_upper"] = None
        row["value_check"] = f"shapes differ: {zg['upper'].shape} vs {zc['upper'].shape}"
        return
      row["max_rel_diff_upper"] = _rel_diff(zg["upper"], zc["upper"])
      if "lower" in zg.files and "lower" in zc.files:
        row["max_rel_diff_lower"] = _rel_diff(zg["lower"], zc["lower"])
  except (OSError, ValueError, KeyError) as e:
    row["max_rel_diff_upper"] = None
    row["value_check"] = f"values unreadable: {e}"
    return
  row["value_check"] = "ok" if row["max_rel_diff_upper"] <= VALUE_RTOL else "FAILED"


def _g(x, nd=3):
  if x is None:
    return ""
  if isinstance(x, float):
    if x == 0:
      return "0"
    return f"{x:.{nd}f}" if 0.01 <= abs(x) < 1e5 else f"{x:.2e}"
  return str(x)


def _cell_times(s):
  if not s:
    return ["", "", ""]
  if "cold_s" not in s:
    return [s.get("status", ""), "", ""]
  cold = f"{s['cold_s']:.2f} ({s['import_s']:.1f} + {s['first_s']:.2f})"
  if "warm_s" in s:
    warm = f"{s['warm_s']:.3g} (best of {len(s['warm_all_s'])})"
  else:
    warm = s.get("status", "") if s.get("timed_out") else "-"
  return [cold, warm, _g(s.get("lanes_per_s"), 1)]


def _values(s):
  sm = (s or {}).get("summary")
  if not sm:
    return ""
  v = f"{s.get('quantity', 'value')} {_g(sm['min'], 5)} .. {_g(sm['max'], 5)}"
  if sm["finite"] < sm["size"]:
    v += f" ({sm['size'] - sm['finite']} non-finite)"
  if sm.get("widest_bracket") is not None:
    v += f"; widest bracket {sm['widest_bracket']:.6g}"
  return v


def _certified(s):
  sm = (s or {}).get("summary") or {}
  if "certified" not in sm:
    return "n/a" if sm else ""
  return "yes" if sm["certified"] else f"NO ({sm['uncertified_lanes']} lanes)"


def header(meta, rows):
  seen = {}
  for r in rows:
    for side in SIDES:
      s = r.get(side) or {}
      if "backend" in s and side not in seen:
        seen[side] = s
  lines = [f"Accelerator benchmark (issue 45), {meta['date']}, commit {meta['commit']} "
           f"(jaxacct code sha256 {meta.get('code_sha256', '?')}), "
           f"{meta['cpu_count']} CPUs, {meta['platform']}, Python {meta['python']}"
           f"{', --quick (tiny sizes)' if meta['quick'] else ''}; budget {meta['budget']:g} s, "
           f"elapsed {meta.get('elapsed_s', 0):.0f} s"
           f"{'' if meta.get('finished') else ' (RUN NOT FINISHED)'}."]
  g = seen.get("gpu")
  if g:
    lines.append(f"GPU side: {g['device_kind']} (backend {g['backend']}, layout {g['layout']}, "
                 f"jax {g['jax']}).")
    if g["backend"] == "cpu":
      lines.append("No accelerator on this machine: the 'GPU' side is the CPU backend with the "
                   "accelerator layout forced (JAXACCT_LAYOUT=accelerator).")
  c = seen.get("cpu")
  if c:
    lines.append(f"CPU side: {c['device_kind']} (backend {c['backend']}, layout {c['layout']}, "
                 f"JAX_PLATFORMS=cpu).")
  lines.append("Each cell: a fresh process, caches off; cold = import (backend start-up "
               "included) + first answer "
               "(compile included), warm = the same question again in that process (best of "
               "up to 3, 2 with --quick). Values: the GPU side's (the CPU side's where the GPU side has none).")
  return " ".join(lines[:1]) + "\n\n" + "\n".join("- " + x for x in lines[1:])


def table(rows):
  head = ["row", "lanes", "GPU cold s (import + first)", "GPU warm s", "GPU lanes/s",
          "CPU cold s (import + first)", "CPU warm s", "CPU lanes/s", "CPU warm / GPU warm",
          "max rel diff of uppers (GPU vs CPU)", "values", "certified", "notes"]
  out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    g, c = r.get("gpu"), r.get("cpu")
    notes = []
    for side in SIDES:
      s = r.get(side)
      if s and (s.get("status") != "ok"):
        st = s["status"].splitlines()[0][:160] if s.get("status") else ""
        notes.append(f"{side}: {st}")
      if s and s.get("programs") is not None:
        notes.append(f"{side} compile {s['compile_s']:.2f} s ({s['programs']} programs)")
    if r.get("max_rel_diff_lower") is not None:
      notes.append(f"lowers GPU vs CPU: max rel diff {r['max_rel_diff_lower']:.2e}")
    diff = r.get("max_rel_diff_upper")
    dcell = "" if diff is None else f"{diff:.2e} ({r['value_check']})"
    if diff is None and r.get("value_check"):
      dcell = r["value_check"]
    lanes = f"{r.get('lanes', '')}" + (f" ({r['describe']})" if r.get("describe") else "")
    cells = ([f"{r['name']}", lanes]
             + _cell_times(g) + _cell_times(c)
             + [_g(r.get("ratio_cpu_over_gpu_warm"), 2), dcell, _values(g if g and g.get(
                 "summary") else c), _certified(g if g and g.get("summary") else c),
                "; ".join(notes)])
    out.append("| " + " | ".join(x.replace("|", "/") for x in cells) + " |")
  return "\n".join(out)


def write(out_dir, meta, rows, args):
  os.makedirs(out_dir, exist_ok=True)
  text = header(meta, rows) + "\n\n" + table(rows) + "\n"
  data = {"meta": meta, "args": args, "rows": rows}
  for ext, payload in (("json", json.dumps(data, indent=1, default=float)), ("md", text)):
    path = os.path.join(out_dir, f"results_gpu.{ext}")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
      f.write(payload)
    os.replace(tmp, path)
  return text


def code_identity():
  """``(commit, code_sha256)`` of the jaxacct that runs: the commit of the git
  checkout whose top is this repository ("+dirty" with uncommitted changes
  under jaxacct/; "not a git checkout" where the top is another repository's
  or none, as on a device machine given a copy of the tree), and a SHA-256 of
  jaxacct/'s Python files (paths and contents), which names the code either way."""
  import hashlib
  h = hashlib.sha256()
  pkg = os.path.join(ROOT, "jaxacct")
  for dirpath, dirs, files in os.walk(pkg):
    dirs[:] = sorted(d for d in dirs if d != "__pycache__")
    for f in sorted(files):
      if f.endswith(".py"):
        path = os.path.join(dirpath, f)
        h.update(os.path.relpath(path, ROOT).encode() + b"\0")
        with open(path, "rb") as fh:
          h.update(fh.read())
  git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
  try:
    top = git("rev-parse", "--show-toplevel")
    if top and os.path.realpath(top) == os.path.realpath(ROOT):
      commit = git("rev-parse", "--short", "HEAD")
      if git("status", "--porcelain", "--", "jaxacct"):
        commit += "+dirty"
    else:
      commit = "not a git checkout"
  except (OSError, subprocess.SubprocessError):
    commit = "unknown"
  return commit or "unknown", h.hexdigest()[:16]


def _meta(args):
  commit, code = code_identity()
  if args.commit and commit in ("not a git checkout", "unknown"):
    # a copy of the tree without its .git (a device machine): the commit the
    # caller names, checked by the code's SHA-256 against that commit's files
    commit = f"{args.commit} (given; not a git checkout)"
  try:
    load = [round(x, 2) for x in os.getloadavg()]
  except (AttributeError, OSError):
    load = None
  return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "commit": commit, "code_sha256": code, "cpu_count": os.cpu_count(),
          "platform": platform.platform(), "python": platform.python_version(),
          "loadavg_start": load, "quick": args.quick, "budget": args.budget,
          "sides": list(args.sides), "finished": False}


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--out", default=os.path.join(HERE, "results"),
                 help="results folder (default bench/results)")
  p.add_argument("--only", nargs="+", metavar="NAME", help=f"rows: {', '.join(ROWS)}")
  p.add_argument("--budget", type=float, default=None,
                 help=f"total seconds for all rows (default {BUDGET_S:g}; {QUICK_BUDGET_S:g} with "
                      "--quick); each row gets a share")
  p.add_argument("--quick", action="store_true", help="tiny sizes (CPU smoke test)")
  p.add_argument("--sides", default="gpu,cpu", help="comma list of gpu, cpu (default both)")
  p.add_argument("--commit", default=None,
                 help="the commit of the tree, recorded where it is not a git checkout (a "
                      "copy on a device machine); the code's SHA-256 is recorded either way")
  p.add_argument("--child", choices=sorted(ROWS), help=argparse.SUPPRESS)
  p.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
  p.add_argument("--limit", type=float, default=600.0, help=argparse.SUPPRESS)
  p.add_argument("--npz", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.child:
    child(args.child, args.side, args.limit, args.npz, args.quick)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)   # skip the interpreter's (and the backend's) teardown: the answer is out
  sides = [s.strip() for s in args.sides.split(",") if s.strip()]
  if not sides or set(sides) - set(SIDES):
    p.error(f"--sides takes a comma list of {SIDES}; got {args.sides!r}")
  args.sides = [s for s in SIDES if s in sides]
  names = list(ROWS)
  if args.only:
    bad = sorted(set(args.only) - set(names))
    if bad:
      p.error(f"unknown row(s) {bad}; choose from {names}")
    names = [n for n in names if n in args.only]
  if args.budget is None:
    args.budget = QUICK_BUDGET_S if args.quick else BUDGET_S
  if args.budget <= 0:
    p.error("--budget must be > 0")

  t_run = time.perf_counter()
  meta = _meta(args)
  argd = {k: v for k, v in vars(args).items() if k not in ("child", "side", "limit", "npz")}
  rows = []
  for n in names:
    title, fam, rank, sizes, _ = ROWS[n]
    size = sizes["quick" if args.quick else "full"]
    rows.append({"name": n, "title": title, "family": fam, "rank": rank, "size": size,
                 "lanes": lanes_of(size)})
  tmp = tempfile.mkdtemp(prefix="jaxacct-bench-gpu-")
  timed_out = {s: set() for s in SIDES}   # families with a timeout, per side
  pending = [(r, s) for r in rows for s in args.sides]
  print(f"bench_gpu: {len(rows)} rows x sides {args.sides}, budget {args.budget:g} s"
        f"{', quick' if args.quick else ''}; results to {args.out}", flush=True)
  try:
    for i, (row, side) in enumerate(pending):
      left = args.budget - (time.perf_counter() - t_run)
      fam = row["family"]
      if fam in timed_out[side]:
        row[side] = {"status": "skipped (a smaller size timed out)"}
      elif left < MIN_START_S:
        row[side] = {"status": f"skipped (budget: {max(left, 0):.0f} s left)"}
      else:
        rest = sum(nominal_limit(r["name"], s, args.quick) for r, s in pending[i:]
                   if r["family"] not in timed_out[s])
        limit = row_limit(row["name"], side, args.quick, left, rest)
        npz = os.path.join(tmp, f"{row['name']}_{side}.npz")
        rec = run_child(row["name"], side, limit, npz, args.quick)
        row[side] = rec
        row.setdefault("npz", {})[side] = npz
        for k in ("lanes", "describe", "quantity"):
          if k in rec:
            row[k] = rec[k]
        if rec.get("timed_out") or rec["status"].startswith(("error", "unsupported", "out of")):
          timed_out[side].add(fam)
      s = row[side]
      print(f"  {row['name']:26s} {side}: {s['status'].splitlines()[0][:150]}"
            + (f"; cold {s['cold_s']:.2f} s" if "cold_s" in s else "")
            + (f", warm {s['warm_s']:.3g} s" if "warm_s" in s else ""), flush=True)
      if side == args.sides[-1]:
        g, c = row.get("gpu") or {}, row.get("cpu") or {}
        if "warm_s" in g and "warm_s" in c:
          row["ratio_cpu_over_gpu_warm"] = c["warm_s"] / max(g["warm_s"], 1e-12)
        compare(row, row.get("npz", {}))
      meta["elapsed_s"] = time.perf_counter() - t_run
      write(args.out, meta, [{k: v for k, v in r.items() if k != "npz"} for r in rows], argd)
  finally:
    for f in os.listdir(tmp):
      os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)
  meta["elapsed_s"] = time.perf_counter() - t_run
  meta["finished"] = True
  try:
    meta["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
  except (AttributeError, OSError):
    pass
  clean = [{k: v for k, v in r.items() if k != "npz"} for r in rows]
  text = write(args.out, meta, clean, argd)
  print("\n" + text)
  failed = [r["name"] for r in clean
            if any((r.get(s) or {}).get("status", "").startswith("error") for s in SIDES)
            or r.get("value_check") == "FAILED"
            or any(_certified(r.get(s)).startswith("NO") for s in SIDES)]
  if failed:
    print(f"FAILED rows (error, value check over {VALUE_RTOL:g}, or uncertified bracket): "
          f"{failed}")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
