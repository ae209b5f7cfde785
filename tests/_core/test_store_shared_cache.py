"""N processes, one cache folder, no crash (issue 67 item 4).

Several processes at once (two notebooks, a hyper-parameter search, the
``jaxacct`` command twice) enable JAX's persistent cache in one folder with
:func:`jaxacct.enable_compilation_cache` and compile the same programs. Each
process writes a folder of its own and publishes its new entries with one
``os.rename`` each, so no process reads a file another is writing. The
processes of a round wait for each other before they compile. Checked: no
process dies (0 aborts in every round), JAX warns of no entry it could not
read or write, every published entry is whole (its zlib stream decompresses),
no private folder is left behind, and from the second round on each process
loads what the first round published.

Also a script: ``python tests/_core/test_store_shared_cache.py N M [direct]``
runs N processes for M rounds and prints the abort count; ``direct`` points
JAX at the shared folder itself, as jaxacct did before (the reproduction).
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import jax, jax.numpy as jnp
    import jaxacct
    from jaxacct import poisson
    hits = []
    jax.monitoring.register_event_listener(
        lambda e, **k: hits.append(1) if e == "/jax/compilation_cache/cache_hits" else None)
    shared, mode, gate, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if mode == "direct":      # JAX's cache in the shared folder itself (jaxacct before)
      jax.config.update("jax_compilation_cache_dir", shared)
      jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    else:
      jaxacct.enable_compilation_cache(shared)
    open(os.path.join(gate, str(os.getpid())), "w").close()    # all start compiling at once
    t = time.monotonic()
    while len(os.listdir(gate)) < n and time.monotonic() - t < 60:
      time.sleep(0.01)
    out = []
    for k in range(4):        # plain programs, the same in every process
      f = jax.jit(lambda x, k=k: jnp.cumsum(jnp.sin(x) * (k + 1.5)).sum())
      out.append(float(f(jnp.arange(32.0))))
    with jaxacct.set_layout("accelerator"):    # jaxacct's compiled block programs
      r = poisson.epsilon(q=0.01, sigma=np.array([1.0, 2.0]), num_steps=1000, delta=1e-5,
                          orders=(1.5, 2.0, 4.0, 8.0, 32.0))
    out += [float(e) for e in r.epsilon]
    print("CHILD " + json.dumps({"hits": len(hits), "values": out}), flush=True)
""")


def _env(store_dir):
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE",
                              "JAXACCT_COMPILATION_CACHE", "PYTEST_XDIST"))}
  env.update(JAXACCT_CACHE_DIR=store_dir, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  return env


def run_rounds(n, m, mode="jaxacct", timeout=300.0):
  """``[(return codes, child reports, stderr tails, problems)]`` of ``m``
  rounds of ``n`` processes started together on one fresh cache folder."""
  rounds = []
  with tempfile.TemporaryDirectory(prefix="jaxacct-shared-cache-") as tmp:
    shared = os.path.join(tmp, "jax")
    for r in range(m):
      gate = os.path.join(tmp, f"gate-{r}")
      os.mkdir(gate)
      procs = [subprocess.Popen([sys.executable, "-c", CHILD, shared, mode, gate, str(n)],
                                env=_env(os.path.join(tmp, f"store-{r}-{i}")), cwd=tmp,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(n)]
      codes, reports, errs, warned = [], [], [], []
      deadline = time.monotonic() + timeout
      for p in procs:
        try:
          o, e = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
          p.kill()
          o, e = p.communicate()
        codes.append(p.returncode)
        line = [x for x in o.splitlines() if x.startswith("CHILD ")]
        reports.append(json.loads(line[-1][6:]) if line else None)
        errs.append(e[-3000:])
        warned += [w.strip()[:200] for w in e.splitlines()     # a torn read or write
                   if "persistent compilation cache entry" in w]
      problems = [f"JAX: {w}" for w in warned[:20]]
      for name in sorted(os.listdir(shared)) if os.path.isdir(shared) else []:
        path = os.path.join(shared, name)
        if name.startswith("."):
          problems.append(f"left behind: {name}")
        elif name.endswith("-cache"):
          try:
            with open(path, "rb") as f:
              zlib.decompress(f.read())
          except zlib.error as e:
            problems.append(f"torn entry {name}: {e}")
      rounds.append((codes, reports, errs, problems))
  return rounds


def _aborts(rounds):
  return sum(c != 0 for codes, _, _, _ in rounds for c in codes)


def _check(rounds, n):
  for r, (codes, reports, errs, problems) in enumerate(rounds):
    assert codes == [0] * n, (r, codes, [e for c, e in zip(codes, errs) if c])
    assert problems == [], (r, problems)
    values = [rep["values"] for rep in reports]
    assert all(v == values[0] for v in values), (r, values)
    if r > 0:     # what round 0 published is loaded, not compiled again
      assert all(rep["hits"] >= 4 for rep in reports), (r, [rep["hits"] for rep in reports])


def test_processes_share_one_cache_folder_without_a_crash():
  """3 processes, 2 rounds (about 20 s of CPU)."""
  n = 3
  rounds = run_rounds(n, 2)
  _check(rounds, n)
  assert _aborts(rounds) == 0


def test_own_folder_then_published_by_restore(tmp_path):
  """In one process: JAX compiles into a folder of this process's own, which
  started with links to the published entries only (a FIFO, a link, another
  process's folder are not taken); restore() moves the new entry into the
  shared folder and removes the own folder; a dead process's folder is removed."""
  import jax
  import jax.numpy as jnp
  import jaxacct
  shared = tmp_path / "jax"
  shared.mkdir()
  os.mkfifo(shared / "planted-cache")
  (shared / "elsewhere-cache").symlink_to("/dev/zero")
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()
  orphan = shared / f".process-{__import__('socket').gethostname()}@{dead.pid}-x"
  orphan.mkdir()
  setting = jaxacct.enable_compilation_cache(str(shared))
  try:
    own = jax.config.jax_compilation_cache_dir
    assert os.path.dirname(own) == str(shared) and os.path.basename(own).startswith(".process-")
    assert os.listdir(own) == [] and not orphan.exists()
    jax.jit(lambda x: jnp.cos(x) * 1.375 - float(tmp_path.stat().st_ino % 997))(
        jnp.arange(3.0)).block_until_ready()
    new = [n for n in os.listdir(own) if n.endswith("-cache")]
    assert new and not any((shared / n).exists() for n in new)
  finally:
    setting.restore()
  assert jax.config.jax_compilation_cache_dir != own and not os.path.exists(own)
  for n in new:
    with open(shared / n, "rb") as f:
      zlib.decompress(f.read())
  assert sorted(p.name for p in shared.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow
def test_processes_share_one_cache_folder_without_a_crash_many_rounds():
  """4 processes, 10 rounds."""
  n = 4
  rounds = run_rounds(n, 10)
  _check(rounds, n)
  assert _aborts(rounds) == 0


if __name__ == "__main__":
  n, m = int(sys.argv[1]), int(sys.argv[2])
  mode = sys.argv[3] if len(sys.argv) > 3 else "jaxacct"
  t0 = time.time()
  rounds = run_rounds(n, m, mode)
  for r, (codes, _, errs, problems) in enumerate(rounds):
    print(f"round {r}: exit codes {codes}; {len(problems)} problems {problems[:3]}")
    for c, e in zip(codes, errs):
      if c:
        print(f"--- exit {c}:\n{e}")
  print(f"SUMMARY mode={mode} N={n} M={m}: {_aborts(rounds)} processes died in "
        f"{sum(any(c) for c, _, _, _ in rounds)} of {m} rounds; "
        f"{sum(len(p) for *_, p in rounds)} problems; {time.time() - t0:.0f} s")
