"""Cold start: one question per fresh process, every compilation cache off.

Usage:
  python bench/bench_cold_start.py [--only NAME ...] [--repeat N] [--with-slow-peers]
                                   [--cache-rows questions|all|none] [--out DIR]
  python bench/bench_cold_start.py --child NAME [--side ours|peer] [--cache-dir DIR]

Most users ask jaxacct one question per process, so what they wait for is
``import`` + the first answer, compilation included. For each question the
parent starts a FRESH ``python`` (in series, never in parallel) with
``JAX_ENABLE_COMPILATION_CACHE=false``, no ``JAX_COMPILATION_CACHE_DIR`` and
``JAXACCT_COMPILATION_CACHE=0``, for jaxacct and (where one exists) for the
peer (dp_accounting 0.6.0; PLD_accounting 2.0 with ``--with-slow-peers``;
jax_privacy 2.0 with either accountant plugged in). The child imports, asks,
and prints one JSON line: import seconds, first-answer seconds, the
trace / lower / compile seconds of the ``jax.monitoring`` events
(``/jax/core/compile/jaxpr_trace_duration``, ``.../jaxpr_to_mlir_module_duration``,
``.../backend_compile_duration``) during the answer, run = first answer minus
the union of those event spans, the number of XLA programs compiled (backend
compile events) and the top 3 functions by compile seconds.

A "cache" row runs the jaxacct question twice more with the jaxacct
persistent cache on in a fresh temporary directory
(``JAXACCT_COMPILATION_CACHE=1``, ``JAXACCT_CACHE_DIR=<tmp>``; the
CLI gets ``--cache-dir <tmp>``): the first run fills it, the second is shown.
Where jaxacct does not honour the variables the row simply shows no gain.

Y is dp_accounting's first Poisson-PLD answer in the same run (PLDAccountant,
q=0.01, sigma=1, T=1e4, delta=1e-5, default discretisation; always measured);
every jaxacct first answer is also printed as a multiple of Y, next to the
targets of issue 28. Results: a markdown table on stdout and
``bench/results/cold_start_<cpu|gpu>.json`` (+ ``.md``). Per-process, so
``bench/run_all.py`` does not run it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import importlib.util
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MARK = "COLD_START_JSON "
CACHE_ENV = ("JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE",
             "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
             "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "JAXACCT_COMPILATION_CACHE_DIR",
             "JAXACCT_CACHE_DIR")
EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile"}

# DP-SGD: N = 60,000, B = 256, E = 10; Poisson steps T = ceil(E N / B) = 2344.
N, B, E = 60_000, 256, 10
T_POISSON = -(-E * N // B)
# The contract suite's front doors (tests/project/test_contract.py DOORS), each at its
# row's middle noise, first step count, first delta (epsilon door) / first
# epsilon (delta door).
DOORS = {
    "poisson_rdp": ("poisson", dict(q=0.01, sigma=1.0, num_steps=100), 1e-7, 1.0),
    "poisson_pld": ("poisson", dict(q=0.01, sigma=1.0, num_steps=100, method="pld"), 1e-7, 1.0),
    "allocation_pld": ("allocation.pld", dict(sigma=1.0, steps_per_epoch=100, grid_size=256),
                       1e-7, 0.3),
    "allocation_pld_epochs": ("allocation.pld", dict(sigma=1.0, steps_per_epoch=100,
                                                     grid_size=256, num_epochs=3), 1e-7, 0.3),
    "allocation_rdp": ("allocation", dict(sigma=1.0, steps_per_epoch=100,
                                          methods=("rdp_direct", "rdp_add")), 1e-7, 0.3),
    "shuffle": ("shuffle", dict(eps0=1.5, n=1000), 1e-7, 0.3),
}
TARGETS = {"poisson_rdp": 0.5, "poisson_pld": 1.0, "shuffle": 1.0, "allocation_k10": 1.5,
           "calibrate": 3.0}
# issue 28 item 5: a 1,000-sigma sweep in <= 10 s on 2 cores (here: in a fresh process)
SECONDS_TARGETS = {"sweep_t234_E10": 10.0, "sweep_t1000_E1": 10.0}
IMPORT_TARGET = 1.2


# ----------------------------------------------------------------- questions --
# Each side: (modules imported in the timed import window, fn() -> answer).
# An answer is a float, (upper, lower), or {"value", "lower", "second": (label, fn)}.

def _f(x):
  import numpy as np
  return float(np.asarray(x))


def _dpa_poisson(kind, sigma=1.0, q=0.01, steps=10_000):
  import dp_accounting as dpa
  acc = dpa.rdp.RdpAccountant() if kind == "rdp" else dpa.pld.PLDAccountant()
  return acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps)


def _q_poisson_pld():
  import jaxacct
  one = lambda s: _f(jaxacct.poisson.epsilon(q=0.01, sigma=s, num_steps=10_000, delta=1e-5,  # noqa: E731
                                             method="pld").epsilon)
  return {"value": one(1.0), "second": ("new sigma=1.1", lambda: one(1.1))}


def _peer_poisson_pld():
  one = lambda s: _dpa_poisson("pld", s).get_epsilon(1e-5)  # noqa: E731
  return {"value": one(1.0), "second": ("new sigma=1.1", lambda: one(1.1))}


def _alloc(**kw):
  from jaxacct.allocation import pld
  r = pld.allocation_pld_epsilon(**kw)
  return _f(r.epsilon), None if r.lower is None else _f(r.lower)


def _sweep(t, E):
  """1,000 sigmas in one call (jitted laws and query, chunks on every core);
  the value is the widest bracket (upper / lower) over the lanes."""
  import numpy as np
  from jaxacct.allocation import pld
  r = pld.allocation_pld_epsilon(sigma=np.geomspace(0.5, 5.0, 1000), steps_per_epoch=t,
                                 num_epochs=E, delta=1e-5)
  ratio = np.asarray(r.epsilon) / np.asarray(r.lower)
  return {"value": float(np.max(ratio)),
          "note": f"value: widest bracket of 1,000 lanes; eps at sigma 1 ~ "
                  f"{float(np.interp(1.0, np.geomspace(0.5, 5.0, 1000), r.epsilon)):.5g}"}


#: the small grids (rows 11-12): a few settings in one call, as a notebook plots them
GRID_SIGMAS = (0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0)


def _grid_poisson_pld():
  import numpy as np
  import jaxacct
  r = jaxacct.poisson.epsilon(q=0.01, sigma=np.array(GRID_SIGMAS), num_steps=10_000,
                              delta=1e-5, method="pld")
  return {"value": float(np.asarray(r.epsilon)[2]), "note": "value: the lane at sigma 1"}


def _peer_grid_poisson_pld():
  return [_dpa_poisson("pld", s).get_epsilon(1e-5) for s in GRID_SIGMAS][2]


def _grid_shuffle():
  import numpy as np
  import jaxacct
  r = jaxacct.shuffle.clone_epsilon(1e-6, n=100_000, eps0=np.geomspace(0.5, 4.0, 8))
  return {"value": float(np.asarray(r.epsilon)[-1]), "note": "value: the lane at eps0 4"}


def _mixed_events():
  """A run of dp_accounting events of three kinds: Poisson DP-SGD steps, then a few
  Gaussian and Laplace releases (the accountant's general path: a composition of
  different PLDs)."""
  import dp_accounting as dpa
  return [(dpa.PoissonSampledDpEvent(B / N, dpa.GaussianDpEvent(1.0)), 1000),
          (dpa.GaussianDpEvent(20.0), 3), (dpa.LaplaceDpEvent(10.0), 2)]


def _mixed(make):
  acc = make()
  for event, count in _mixed_events():
    acc.compose(event, count)
  return acc.get_epsilon(1e-5)


def _peer_pld_accounting(**kw):
  import PLD_accounting as pa
  return tuple(pa.gaussian_allocation_epsilon_range(**kw))


def _peer_calibrate():
  import dp_accounting as dpa
  from dp_accounting import mechanism_calibration as mc
  return mc.calibrate_dp_mechanism(
      dpa.pld.PLDAccountant,
      lambda s: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(B / N, dpa.GaussianDpEvent(s)),
                                        T_POISSON),
      3.0, 1e-5)


def _jax_privacy(plug):
  from jax_privacy import accounting as jpa
  if plug == "jaxacct":   # the shipped adapter (jaxacct PLDAccountant, interval 1e-4)
    from jaxacct.accounting.jax_privacy import JaxacctPldAccountantConfig
    cfg = JaxacctPldAccountantConfig()
  else:
    cfg = jpa.PldAccountantConfig()   # dp_accounting PLDAccountant, interval 1e-4
  acct = jpa.DpsgdTrainingAccountant(cfg)
  params = jpa.DpParams(noise_multipliers=1.0, num_samples=N, batch_size=B, delta=1e-5)
  cal = lambda: jpa.calibrate_noise_multiplier(  # noqa: E731
      target_epsilon=3.0, accountant=acct, batch_sizes=B, num_updates=T_POISSON,
      num_samples=N, target_delta=1e-5)
  return {"value": float(acct.compute_epsilon(T_POISSON, params)),
          "second": ("calibrate_noise_multiplier(eps=3)", cal)}


def _cli(cache_dir):
  from jaxacct import __main__ as cli
  argv = ["table", "--quiet"] + (["--cache-dir", cache_dir] if cache_dir else ["--no-cache"])
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    status = cli.main(argv)
  rows = [ln for ln in buf.getvalue().splitlines()[4:] if ln.strip()]
  return {"value": float(len(rows)), "note": f"exit {status}, {len(rows)} table rows"}


def _door(name, quantity):
  mod, kw, delta, eps = DOORS[name]
  def ours():
    m = importlib.import_module("jaxacct." + mod)
    fn = getattr(m, {("allocation.pld", "epsilon"): "allocation_pld_epsilon",
                     ("allocation.pld", "delta"): "allocation_pld_delta"}.get((mod, quantity),
                                                                              quantity))
    r = fn(**kw, delta=delta) if quantity == "epsilon" else fn(**kw, epsilon=eps)
    return _f(getattr(r, quantity)), None if r.lower is None else _f(r.lower)
  peer = None
  if name.startswith("poisson"):
    def peer():
      acc = _dpa_poisson(name[-3:], kw["sigma"], kw["q"], kw["num_steps"])
      return acc.get_epsilon(delta) if quantity == "epsilon" else acc.get_delta(eps)
  desc = ", ".join(f"{k}={v}" for k, v in kw.items() if k != "methods")
  desc += f", delta={delta:g}" if quantity == "epsilon" else f", epsilon={eps:g}"
  return {"title": f"door {name}.{quantity} ({desc})",
          "ours": (["jaxacct", "jaxacct." + mod], ours),
          "peer": None if peer is None else (
              f"dp_accounting {'Rdp' if name.endswith('rdp') else 'PLD'}Accountant",
              ["dp_accounting"], peer)}


DPA = ["dp_accounting"]
QUESTIONS = {
    "poisson_rdp": {
        "title": "1. Poisson RDP epsilon (q=0.01, sigma=1, T=1e4, delta=1e-5)",
        "ours": (["jaxacct"], lambda: _f(__import__("jaxacct").poisson.epsilon(
            q=0.01, sigma=1.0, num_steps=10_000, delta=1e-5).epsilon)),
        "peer": ("dp_accounting RdpAccountant", DPA,
                 lambda: _dpa_poisson("rdp").get_epsilon(1e-5))},
    "poisson_pld": {
        "title": "2. Poisson PLD epsilon (same setting), then sigma=1.1",
        "ours": (["jaxacct"], _q_poisson_pld),
        "peer": ("dp_accounting PLDAccountant", DPA, _peer_poisson_pld)},
    "shuffle": {
        "title": "3. shuffle epsilon (n=1e5, eps0=1, delta=1e-6)",
        "ours": (["jaxacct"], lambda: _f(__import__("jaxacct").shuffle.epsilon(
            n=100_000, eps0=1.0, delta=1e-6).epsilon)),
        "peer": None},
    "allocation_t1e4": {
        "title": "4. allocation tight PLD (sigma=1, t=1e4, delta=1e-10)",
        "ours": (["jaxacct", "jaxacct.allocation.pld"],
                 lambda: _alloc(sigma=1.0, steps_per_epoch=10_000, delta=1e-10)),
        "peer": ("PLD_accounting 2.0", ["PLD_accounting"], lambda: _peer_pld_accounting(
            delta=1e-10, sigma=1.0, num_steps=10_000)), "slow_peer": True},
    "allocation_k10": {
        "title": "5. allocation tight PLD k=10 of t=100 (sigma=2, delta=1e-6)",
        "ours": (["jaxacct", "jaxacct.allocation.pld"],
                 lambda: _alloc(sigma=2.0, steps_per_epoch=100, num_selected=10, delta=1e-6)),
        "peer": ("PLD_accounting 2.0", ["PLD_accounting"], lambda: _peer_pld_accounting(
            delta=1e-6, sigma=2.0, num_steps=100, num_selected=10)), "slow_peer": True},
    "calibrate": {
        "title": (f"6. DP-SGD calibration eps=3, delta=1e-5, N=60k, B=256, E=10 (jaxacct: "
                  f"balls_in_bins; peer: Poisson q=B/N, T={T_POISSON} steps)"),
        "ours": (["jaxacct"], lambda: float(__import__("jaxacct").dpsgd.calibrate_noise_multiplier(
            epsilon=3.0, delta=1e-5, num_examples=N, batch_size=B, num_epochs=E))),
        "peer": ("dp_accounting calibrate_dp_mechanism + PLDAccountant", DPA, _peer_calibrate)},
    "jax_privacy": {
        "title": (f"7. jax_privacy 2.0 DpsgdTrainingAccountant.compute_epsilon(sigma=1, "
                  f"T={T_POISSON}), then calibrate_noise_multiplier(eps=3)"),
        "ours": (["jax_privacy.accounting", "jaxacct", "jaxacct.accounting.jax_privacy"],
                 lambda: _jax_privacy("jaxacct")),
        "peer": ("jax_privacy + dp_accounting PLDAccountant", ["jax_privacy.accounting"],
                 lambda: _jax_privacy("dp_accounting")),
        "needs": "jax_privacy"},
    "cli": {
        "title": "8. CLI table `python -m jaxacct` (whole process)",
        "ours": (["jaxacct", "jaxacct.__main__"], None), "peer": None},
    "sweep_t234_E10": {
        "title": "9. allocation tight PLD, 1,000 sigmas in [0.5, 5] in one call (t=234, E=10, "
                 "delta=1e-5), certified lower included",
        "ours": (["jaxacct", "jaxacct.allocation.pld"], lambda: _sweep(234, 10)), "peer": None},
    "sweep_t1000_E1": {
        "title": "10. the same sweep at t=1000, E=1",
        "ours": (["jaxacct", "jaxacct.allocation.pld"], lambda: _sweep(1000, 1)), "peer": None},
    "poisson_pld_grid": {
        "title": "11. Poisson PLD epsilon at 8 sigmas in [0.8, 3] in one call (q=0.01, T=1e4, "
                 "delta=1e-5)",
        "ours": (["jaxacct"], _grid_poisson_pld),
        "peer": ("dp_accounting PLDAccountant, one per sigma", DPA, _peer_grid_poisson_pld)},
    "shuffle_grid": {
        "title": "12. shuffle clone epsilon at 8 eps0 in [0.5, 4] in one call (n=1e5, "
                 "delta=1e-6)",
        "ours": (["jaxacct"], _grid_shuffle), "peer": None},
    "accountant_mixed": {
        "title": "13. PLDAccountant of mixed dp_accounting events (1,000 Poisson steps q=B/N "
                 "sigma=1, 3 Gaussian sigma=20, 2 Laplace b=10), delta=1e-5",
        "ours": (["dp_accounting", "jaxacct", "jaxacct.accounting"], lambda: _mixed(
            __import__("jaxacct.accounting", fromlist=["x"]).PLDAccountant)),
        "peer": ("dp_accounting PLDAccountant", DPA, lambda: _mixed(
            __import__("dp_accounting").pld.PLDAccountant))},
}
for _name in DOORS:
  for _qty in ("epsilon", "delta"):
    QUESTIONS[f"door_{_name}_{_qty}"] = _door(_name, _qty)
Y_QUESTION = "poisson_pld"


# --------------------------------------------------------------------- child --

def child(name, side, cache_dir=None):
  """Runs one question in this (fresh) process; returns the JSON-able record."""
  spec = QUESTIONS[name]
  if side == "ours":
    label, mods, fn = "jaxacct", *spec["ours"]
  else:
    label, mods, fn = spec["peer"]
  if name == "cli" and side == "ours":
    fn = lambda: _cli(cache_dir)  # noqa: E731
  spans, hits = [], [0]

  def on_span(event, start, end, **kw):
    if event in EVENTS:
      spans.append((EVENTS[event], start, end, str(kw.get("fun_name", "?"))))

  def on_event(event, **kw):
    if event == "/jax/compilation_cache/cache_hits":
      hits[0] += 1

  t0 = time.perf_counter()
  if side == "ours" or any(m.startswith("jax") for m in mods):
    import jax
    jax.monitoring.register_event_time_span_listener(on_span)
    jax.monitoring.register_event_listener(on_event)
  for m in mods:
    importlib.import_module(m)
  import_s = time.perf_counter() - t0
  n_import = len(spans)
  loaded = {m: m in sys.modules for m in ("jax", "dp_accounting", "scipy")}
  w0 = time.time()
  t1 = time.perf_counter()
  ans = fn()
  first_s = time.perf_counter() - t1
  w1 = time.time()
  rec = {"question": name, "side": side, "lib": label, "import_s": import_s,
         "first_s": first_s, "import_compiles": sum(s[0] == "compile" for s in spans[:n_import]),
         "loaded_by_import": loaded}
  rec.update(_split(spans[n_import:], w0, w1, first_s))
  if isinstance(ans, dict):
    rec["value"], rec["lower"], rec["note"] = ans["value"], ans.get("lower"), ans.get("note")
    if "second" in ans:
      lab, fn2 = ans["second"]
      k = len(spans)
      t2 = time.perf_counter()
      v2 = fn2()
      s2 = time.perf_counter() - t2
      rec["second"] = {"label": lab, "s": s2, "value": float(v2),
                       "compiles": sum(s[0] == "compile" for s in spans[k:])}
  elif isinstance(ans, tuple):
    rec["value"], rec["lower"] = ans[0], ans[1]
  else:
    rec["value"] = float(ans)
  rec["cache_hits"] = hits[0]
  if "jax" in sys.modules:
    import jax
    rec["jax"], rec["devices"] = jax.__version__, [str(d) for d in jax.devices()]
  return rec


def _union(iv):
  tot, cs, ce = 0.0, None, None
  for s, e in sorted(iv):
    if ce is None or s > ce:
      tot += 0.0 if ce is None else ce - cs
      cs, ce = s, e
    else:
      ce = max(ce, e)
  return tot + (0.0 if ce is None else ce - cs)


def _split(spans, w0, w1, first_s):
  out = {k: float(sum(e - s for st, s, e, _ in spans if st == k)) for k in ("trace", "lower", "compile")}
  out = {f"{k}_s": v for k, v in out.items()}
  comp = [(s, e) for st, s, e, _ in spans if st == "compile"]
  out["compiles"] = len(comp)
  out["traces"] = sum(st == "trace" for st, *_ in spans)
  jit_s = min(_union([(max(s, w0), min(e, w1)) for _, s, e, _ in spans if e > w0]), first_s)
  out["jax_compile_union_s"] = jit_s
  out["run_s"] = first_s - jit_s
  by_fun = {}
  for st, s, e, f in spans:
    if st == "compile":
      d = by_fun.setdefault(f, [0.0, 0])
      d[0] += e - s
      d[1] += 1
  out["top_compile"] = sorted(([f, round(v[0], 3), v[1]] for f, v in by_fun.items()),
                              key=lambda x: -x[1])[:3]
  return out


def child_main(name, side, cache_dir):
  if cache_dir:                       # jaxacct's persistent cache on, in cache_dir
    os.environ.pop("JAX_ENABLE_COMPILATION_CACHE", None)
    os.environ.update(JAXACCT_COMPILATION_CACHE="1", JAXACCT_CACHE_DIR=cache_dir)
  else:                               # every cache off, whatever the caller's env
    for k in CACHE_ENV:
      os.environ.pop(k, None)
    os.environ.update(JAX_ENABLE_COMPILATION_CACHE="false", JAXACCT_COMPILATION_CACHE="0")
  rec = child(name, side, cache_dir)
  print(MARK + json.dumps(rec, default=float), flush=True)


# -------------------------------------------------------------------- parent --

def clean_env(cache_dir=None):
  env = {k: v for k, v in os.environ.items() if k not in CACHE_ENV}
  env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in env.get("PYTHONPATH", "").split(
      os.pathsep) if p])
  if cache_dir:
    env.pop("JAX_ENABLE_COMPILATION_CACHE", None)
    env.update(JAXACCT_COMPILATION_CACHE="1", JAXACCT_CACHE_DIR=cache_dir)
  else:
    env.update(JAX_ENABLE_COMPILATION_CACHE="false", JAXACCT_COMPILATION_CACHE="0")
  return env


def run_child(name, side, cache_dir=None, timeout=1800):
  cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--side", side]
  if cache_dir:
    cmd += ["--cache-dir", cache_dir]
  t0 = time.perf_counter()
  p = subprocess.run(cmd, env=clean_env(cache_dir), capture_output=True, text=True,
                     timeout=timeout, cwd=ROOT)
  wall = time.perf_counter() - t0
  lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
  if p.returncode != 0 or not lines:
    return {"question": name, "side": side, "error": (p.stderr or p.stdout)[-2000:],
            "process_s": wall}
  rec = json.loads(lines[-1][len(MARK):])
  rec["process_s"] = wall
  return rec


def _median_run(runs):
  ok = [r for r in runs if "error" not in r]
  if not ok:
    return runs[-1]
  ok.sort(key=lambda r: r["first_s"])
  rec = dict(ok[(len(ok) - 1) // 2])
  rec["repeats"] = len(ok)
  rec["first_s_all"] = [r["first_s"] for r in runs if "error" not in r]
  return rec


def _meta():
  """Run metadata; the devices come from a fresh child process, so that this
  parent never initialises an accelerator the children need."""
  probe = subprocess.run([sys.executable, "-c", "import jax, json; print(json.dumps("
                          "[jax.__version__, [str(d) for d in jax.devices()]]))"],
                         env=clean_env(), capture_output=True, text=True, cwd=ROOT)
  try:
    jax_version, devices = json.loads(probe.stdout.strip().splitlines()[-1])
  except (ValueError, IndexError):
    jax_version, devices = "unknown", ["unknown: " + probe.stderr.strip()[-200:]]
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                          capture_output=True, text=True).stdout.strip() or "unknown"
  if HERE not in sys.path:
    sys.path.insert(0, HERE)
  from _common import install_bytecode
  return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "jax": jax_version, "devices": devices, "cpu_count": os.cpu_count(),
          "platform": platform.platform(), "commit": commit,
          "python": platform.python_version(), "loadavg_start": _loadavg(),
          "bytecode": install_bytecode(ROOT)}


def _loadavg():
  try:
    return [round(x, 2) for x in os.getloadavg()]
  except (AttributeError, OSError):   # not on every platform
    return None


def _available(mod):
  return importlib.util.find_spec(mod) is not None


def _g(x, nd=3):
  if x is None:
    return ""
  if isinstance(x, float):
    return f"{x:.{nd}f}" if abs(x) >= 0.01 or x == 0 else f"{x:.2e}"
  return str(x)


def _val(r):
  if r.get("value") is None:
    return ""
  v = f"{r['value']:.6g}"
  if r.get("lower") is not None:
    v += f" (lower {r['lower']:.6g})"
  return v


def table(rows):
  head = ["question", "row", "import (s)", "first answer (s)", "trace / lower / compile (s)",
          "run (s)", "XLA programs", "top 3 compiles (s)", "value", "first / peer",
          "(import+first) / peer", "first / Y", "process (s)", "notes"]
  out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    if "error" in r or "skipped" in r:
      msg = r.get("skipped") or "ERROR " + (r["error"].strip().splitlines() or ["?"])[-1][:120]
      out.append(f"| {r['question']} | {r['row']} | " + " | " * 11 + f"{msg} |")
      continue
    top = "; ".join(f"{f} {s:.2f}" + (f" x{n}" if n > 1 else "") for f, s, n in
                    r.get("top_compile", []))
    jx = "jax" in r   # the child imported JAX (no split for pure-NumPy peers)
    split = f"{r['trace_s']:.2f} / {r['lower_s']:.2f} / {r['compile_s']:.2f}" if jx else ""
    notes = []
    if r.get("second"):
      s = r["second"]
      notes.append(f"{s['label']}: {s['s']:.3f} s, {s['compiles']} programs, value {s['value']:.6g}")
    if r.get("target") is not None and r.get("first_over_y") is not None:
      met = "met" if r["first_over_y"] <= r["target"] else "missed"
      notes.append(f"target <= {r['target']:g} Y: {met}")
    if r.get("target_s") is not None:
      met = "met" if r["first_s"] <= r["target_s"] else "missed"
      notes.append(f"target <= {r['target_s']:g} s: {met}")
    if r.get("is_y"):
      notes.append("this is Y")
    if r.get("cache_files") is not None:
      notes.append(f"cache hits {r.get('cache_hits', 0)}, {r['cache_files']} files in cache dir")
    if r.get("note"):
      notes.append(r["note"])
    cells = [r["question"], r["row"], _g(r["import_s"]), _g(r["first_s"]), split,
             _g(r.get("run_s")) if jx else "", _g(r.get("compiles")) if jx else "", top, _val(r),
             _g(r.get("ratio_first"), 2), _g(r.get("ratio_total"), 2),
             _g(r.get("first_over_y"), 2), _g(r["process_s"], 2), "; ".join(notes)]
    out.append("| " + " | ".join(cells) + " |")
  return "\n".join(out)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--only", nargs="*", help=f"question names: {', '.join(QUESTIONS)}")
  p.add_argument("--repeat", type=int, default=1, help="runs per child; the median is shown")
  p.add_argument("--with-slow-peers", action="store_true",
                 help="also run PLD_accounting for the allocation questions (minutes)")
  p.add_argument("--cache-rows", choices=("questions", "all", "none"), default="questions",
                 help="which questions get a jaxacct persistent-cache row (doors: 'all')")
  p.add_argument("--out", default=os.path.join(HERE, "results"))
  p.add_argument("--child", choices=sorted(QUESTIONS), help=argparse.SUPPRESS)
  p.add_argument("--side", choices=("ours", "peer"), default="ours", help=argparse.SUPPRESS)
  p.add_argument("--cache-dir", default=None, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.child:
    child_main(args.child, args.side, args.cache_dir)
    return 0
  if args.repeat < 1:
    p.error("--repeat must be >= 1")
  names = list(QUESTIONS)
  if args.only:
    bad = sorted(set(args.only) - set(names))
    if bad:
      p.error(f"unknown question(s) {bad}; choose from {names}")
    names = [n for n in names if n in args.only]
  meta = _meta()
  tag = "gpu" if any("cuda" in d.lower() or "gpu" in d.lower() for d in meta["devices"]) else "cpu"
  print(f"cold start, {meta['date']}, jax {meta['jax']}, devices {meta['devices']}, "
        f"{meta['cpu_count']} CPUs, commit {meta['commit']}, repeat {args.repeat}", flush=True)

  def runs(name, side, cache_dir=None):
    recs = []
    for _ in range(args.repeat):
      recs.append(run_child(name, side, cache_dir))
      r = recs[-1]
      print(f"  {name:32s} {side:4s}{' cache' if cache_dir else ''}: "
            + (f"import {r['import_s']:.2f} s, first {r['first_s']:.2f} s, "
               f"{r.get('compiles', 0)} programs, value {r['value']}" if "error" not in r
               else "ERROR " + (r["error"].strip().splitlines() or ["?"])[-1]), flush=True)
    return _median_run(recs)

  rows, y = [], None
  if Y_QUESTION not in names and _available("dp_accounting"):
    y_rec = runs(Y_QUESTION, "peer")
    y = y_rec.get("first_s")
  for name in names:
    spec = QUESTIONS[name]
    if spec.get("needs") and not _available(spec["needs"]):
      rows.append({"question": name, "row": "jaxacct",
                   "skipped": f"skipped: {spec['needs']} not installed"})
      continue
    ours = runs(name, "ours")
    ours["row"] = "jaxacct cold"
    peer = None
    pspec = spec["peer"]
    if pspec and spec.get("slow_peer") and not args.with_slow_peers:
      peer = {"question": name, "row": pspec[0], "skipped": "peer skipped (--with-slow-peers)"}
    elif pspec and not all(_available(m.split(".")[0]) for m in pspec[1]):
      peer = {"question": name, "row": pspec[0], "skipped": f"skipped: {pspec[1][0]} not installed"}
    elif pspec:
      peer = runs(name, "peer")
      peer["row"] = pspec[0] + " cold"
      if name == Y_QUESTION and "error" not in peer:
        y, peer["is_y"] = peer["first_s"], True
    if peer and "error" not in peer and "skipped" not in peer and "error" not in ours:
      ours["ratio_first"] = ours["first_s"] / peer["first_s"]
      ours["ratio_total"] = ((ours["import_s"] + ours["first_s"])
                             / (peer["import_s"] + peer["first_s"]))
    ours["target"] = TARGETS.get(name)
    ours["target_s"] = SECONDS_TARGETS.get(name)
    rows.append(ours)
    if peer:
      rows.append(peer)
    if args.cache_rows == "all" or (args.cache_rows == "questions"
                                    and not name.startswith("door_")):
      tmp = tempfile.mkdtemp(prefix="jaxacct-cold-cache-")
      try:
        run_child(name, "ours", tmp)              # fills the cache
        nfiles = sum(len(f) for _, _, f in os.walk(tmp))
        cached = runs(name, "ours", tmp)
        cached["row"] = "jaxacct, 2nd process, cache on"
        cached["cache_files"] = nfiles
        rows.append(cached)
      finally:
        shutil.rmtree(tmp, ignore_errors=True)
  for r in rows:
    if y and r.get("lib") == "jaxacct" and "first_s" in r:
      r["first_over_y"] = r["first_s"] / y
  imp = {s: [r["import_s"] for r in rows if r.get("side") == s and "import_s" in r
             and r.get("lib") in ("jaxacct", "dp_accounting RdpAccountant",
                                  "dp_accounting PLDAccountant") and "cache_files" not in r
             and r["question"] in ("poisson_rdp", "poisson_pld", "shuffle", "calibrate")]
         for s in ("ours", "peer")}
  summary = [f"Y (dp_accounting first Poisson-PLD answer) = {_g(y)} s" if y else "Y: not measured"]
  if imp["ours"] and imp["peer"]:
    a, b = statistics.median(imp["ours"]), statistics.median(imp["peer"])
    summary.append(f"import jaxacct {a:.2f} s vs import dp_accounting {b:.2f} s (medians over "
                   f"the jaxacct rows of questions 1, 2, 3, 6 and the dp_accounting rows of 1, 2, 6): ratio {a / b:.2f} (target <= {IMPORT_TARGET}: "
                   f"{'met' if a / b <= IMPORT_TARGET else 'missed'})")
  for r in rows:
    if r.get("target") is not None and r.get("first_over_y") is not None:
      summary.append(f"{r['question']}: jaxacct first answer {r['first_s']:.2f} s = "
                     f"{r['first_over_y']:.2f} Y (target <= {r['target']:g} Y: "
                     f"{'met' if r['first_over_y'] <= r['target'] else 'missed'})")
  for r in rows:
    if r.get("target_s") is not None and "first_s" in r:
      summary.append(f"{r['question']}: jaxacct first answer {r['first_s']:.2f} s in a fresh "
                     f"process (target <= {r['target_s']:g} s: "
                     f"{'met' if r['first_s'] <= r['target_s'] else 'missed'})")
  md = table(rows)
  head = (f"Cold start ({tag}), {meta['date']}, jax {meta['jax']}, devices {meta['devices']}, "
          f"{meta['cpu_count']} CPUs, load average {meta['loadavg_start']} at start, "
          f"commit {meta['commit']}; one fresh process per cell, "
          f"caches off, {meta['bytecode']}; repeat {args.repeat} (median run by first-answer time)")
  ours_dpa = [r["question"] for r in rows if r.get("lib") == "jaxacct"
              and r.get("loaded_by_import", {}).get("dp_accounting")]
  if ours_dpa:
    summary.append(f"the jaxacct import window loaded dp_accounting in {len(ours_dpa)} of "
                   f"{sum(r.get('lib') == 'jaxacct' for r in rows)} jaxacct rows")
  text = "\n\n".join([head, md, "\n".join("- " + x for x in summary)])
  print("\n" + text)
  meta["loadavg_end"] = _loadavg()
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, f"cold_start_{tag}.json"), "w") as f:
    json.dump({"meta": meta, "y_s": y, "summary": summary, "rows": rows, "args": vars(args)},
              f, indent=1, default=float)
  with open(os.path.join(args.out, f"cold_start_{tag}.md"), "w") as f:
    f.write(text + "\n")
  return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
  sys.exit(main())
