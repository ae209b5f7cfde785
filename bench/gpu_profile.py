"""Where a GPU sweep's time goes: host one-step laws, the laws program, the query program.

Usage (repository root): ``python bench/gpu_profile.py OUT_DIR``. Fresh processes,
each with its own limit; ``OUT_DIR/gpu_profile.json`` is rewritten after each.
Variants: fusion autotuner off (``XLA_FLAGS``, this probe's processes only) at
t=234, E=10 and t=1000, E=1; diagonal blocks of 16 instead of 64.
"""
import json, os, subprocess, sys, time

CHILD = r'''
import json, sys, time, numpy as np, jax
comp = []
jax.monitoring.register_event_duration_secs_listener(
    lambda n, d, **k: comp.append(d) if n == "/jax/core/compile/backend_compile_duration" else None)
import jaxacct
from jaxacct.allocation import pld, _pld_laws, _pld_query, _one_step, _sum_law
t, E, n, K = (int(x) for x in sys.argv[1:5])
_sum_law.DIAGONAL_BLOCK = K
acc = {}
def timed(mod, name):
  f = getattr(mod, name)
  class W:
    def __getattr__(self, a): return getattr(f, a)
    def __call__(self, *a, **k):
      t0 = time.perf_counter(); r = jax.block_until_ready(f(*a, **k))
      acc[name] = acc.get(name, 0.0) + time.perf_counter() - t0
      return r
  setattr(mod, name, W())
for mod, name in ((_pld_laws, "steps_laws_batch"), (_pld_query, "composed_batch"),
                  (_pld_query, "direct_batch")):
  timed(mod, name)
f0 = _pld_laws.one_steps
def one(*a, **k):
  t0 = time.perf_counter(); r = f0(*a, **k); acc["one_steps_host"] = acc.get("one_steps_host", 0) + time.perf_counter() - t0; return r
_pld_laws.one_steps = one
out = dict(t=t, E=E, lanes=n, K=K, device=jax.devices()[0].device_kind, runs=[])
sig = np.geomspace(0.5, 5.0, n)
for i in range(3):
  acc.clear(); c0 = len(comp); t0 = time.perf_counter()
  r = pld.allocation_pld_epsilon(sigma=sig, num_steps=t, num_epochs=E, delta=1e-5)
  out["runs"].append(dict(seconds=time.perf_counter() - t0, compile_s=sum(comp[c0:]),
                          compiles=len(comp) - c0, **acc, eps_max=float(np.max(r.epsilon))))
  print("PROF " + json.dumps(out), flush=True)
'''

def step(name, env, args, limit, res, path):
  t0 = time.time()
  try:
    p = subprocess.run([sys.executable, "-c", CHILD] + args, env=env, capture_output=True,
                       text=True, timeout=limit)
    so, err = p.stdout, (p.stderr[-1500:] if p.returncode else None)
  except subprocess.TimeoutExpired as e:
    so = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    err = f"timeout after {limit} s"
  lines = [l for l in so.splitlines() if l.startswith("PROF ")]
  rec = json.loads(lines[-1][5:]) if lines else {}
  rec.update(step=name, wall_s=time.time() - t0, error=err)
  res.append(rec)
  with open(path, "w") as f:
    json.dump(res, f, indent=1)
  print(name, json.dumps(rec)[:1200], flush=True)

def main():
  out = sys.argv[1]
  os.makedirs(out, exist_ok=True)
  path, res = os.path.join(out, "gpu_profile.json"), []
  base = dict(os.environ, JAXACCT_COMPILATION_CACHE="0", PYTHONUNBUFFERED="1", PYTHONPATH=os.getcwd())
  off = dict(base, XLA_FLAGS="--xla_gpu_experimental_enable_fusion_autotuner=false")
  step("autotuner off, t234 E10, K64", off, ["234", "10", "1000", "64"], 95, res, path)
  step("autotuner off, t1000 E1, K64", off, ["1000", "1", "1000", "64"], 55, res, path)
  step("autotuner off, t234 E10, K16", off, ["234", "10", "1000", "16"], 55, res, path)

if __name__ == "__main__":
  main()
