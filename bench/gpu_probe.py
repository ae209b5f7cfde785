"""One prepared device call: the tight allocation sweep on the accelerator layout.

Usage (repository root, on the GPU machine): ``python bench/gpu_probe.py OUT_DIR``.
Each step is a fresh process with its own time limit; results are appended to
``OUT_DIR/gpu_probe.json`` as each step ends. Steps: the sweep of 1e3 sigmas
(t=234, E=10) cold then warm, 1e4 warm; the same 1e3 on the machine's CPU
backend (values compared); t=1000, E=1; Poisson RDP over 1e3 and 1e5 sigmas.
"""
import json, os, subprocess, sys, time

CHILD = r'''
import json, sys, time, numpy as np, jax
comp = []
jax.monitoring.register_event_duration_secs_listener(
    lambda n, d, **k: comp.append(d) if n == "/jax/core/compile/backend_compile_duration" else None)
t0 = time.perf_counter()
import jaxacct
from jaxacct.allocation import pld
from jaxacct._core.batching import layout
kind, t, E, sizes, npz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
out = dict(kind=kind, t=t, E=E, device=str(jax.devices()[0].device_kind), backend=jax.default_backend(),
           layout=layout(), import_s=time.perf_counter() - t0, runs=[])
def emit():
  print("PROBE " + json.dumps(out), flush=True)
for i, n in enumerate(int(x) for x in sizes.split(",")):
  sig = np.geomspace(0.5, 5.0, n)
  c0, ts = len(comp), time.perf_counter()
  if kind == "poisson":
    r = jaxacct.poisson.epsilon(q=0.01, sigma=sig, num_steps=10_000, delta=1e-5)
    up, lo = np.asarray(r.epsilon), np.asarray(r.epsilon)
  else:
    r = pld.allocation_pld_epsilon(sigma=sig, steps_per_epoch=t, num_epochs=E, delta=1e-5)
    up, lo = np.asarray(r.epsilon), np.asarray(r.lower)
  dt = time.perf_counter() - ts
  out["runs"].append(dict(lanes=n, seconds=dt, compile_s=sum(comp[c0:]), compiles=len(comp) - c0,
                          eps_min=float(up.min()), eps_max=float(up.max()),
                          widest=float(np.max(up / lo)), certified=bool(np.all(lo <= up))))
  if i == 0 and npz != "-":
    np.savez(npz, up=up, lo=lo)
  emit()
'''

def step(name, env, args, limit, res, path):
  t0 = time.time()
  try:
    p = subprocess.run([sys.executable, "-c", CHILD] + args, env=env, capture_output=True,
                       text=True, timeout=limit)
    lines = [l for l in p.stdout.splitlines() if l.startswith("PROBE ")]
    rec = json.loads(lines[-1][6:]) if lines else {}
    if p.returncode:
      rec["error"] = p.stderr[-1500:]
  except subprocess.TimeoutExpired as e:
    out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    lines = [l for l in out.splitlines() if l.startswith("PROBE ")]
    rec = json.loads(lines[-1][6:]) if lines else {}
    rec["timeout_s"] = limit
  rec["step"], rec["wall_s"] = name, time.time() - t0
  res.append(rec)
  with open(path, "w") as f:
    json.dump(res, f, indent=1)
  print(name, json.dumps(rec)[:1500], flush=True)
  return rec

def main():
  out = sys.argv[1]
  os.makedirs(out, exist_ok=True)
  path, res = os.path.join(out, "gpu_probe.json"), []
  base = dict(os.environ, JAXACCT_COMPILATION_CACHE="0", PYTHONUNBUFFERED="1",
              PYTHONPATH=os.getcwd())
  cpu = dict(base, JAX_PLATFORMS="cpu")
  g = os.path.join(out, "gpu_t234.npz"); c = os.path.join(out, "cpu_t234.npz")
  step("gpu t234 E10 1e3 cold+warm, 1e4 warm", base, ["alloc", "234", "10", "1000,1000,10000", g],
       170, res, path)
  step("cpu16 t234 E10 1e3 cold+warm", cpu, ["alloc", "234", "10", "1000,1000", c], 60, res, path)
  try:
    import numpy as np
    a, b = np.load(g), np.load(c)
    res.append(dict(step="gpu vs cpu 1e3", max_rel_upper=float(np.max(np.abs(a["up"] - b["up"]) / b["up"])),
                    max_rel_lower=float(np.max(np.abs(a["lo"] - b["lo"]) / b["lo"]))))
    print(res[-1], flush=True)
  except Exception as e:  # noqa: BLE001
    res.append(dict(step="gpu vs cpu 1e3", error=repr(e)))
  with open(path, "w") as f:
    json.dump(res, f, indent=1)
  step("gpu t1000 E1 1e3 cold+warm", base, ["alloc", "1000", "1", "1000,1000", "-"], 80, res, path)
  step("gpu poisson rdp 1e3, 1e5", base, ["poisson", "0", "0", "1000,100000,100000", "-"], 40, res, path)

if __name__ == "__main__":
  main()
