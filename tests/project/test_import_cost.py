"""``import jaxacct`` is cheap (issue 28): submodules load on first use.

In a fresh process ``import jaxacct`` loads no heavy dependency (scipy,
optax, chex, flax, matplotlib, tqdm, dp_accounting) and no jaxacct scheme;
importing any jaxacct module compiles no XLA program (an eager ``jnp`` op at
module level would compile one in every process); the first access of a
scheme (``jaxacct.poisson.epsilon``) loads it. Counted, never timed: module
names in ``sys.modules`` and ``jax.monitoring`` backend-compile events.
And every name in every public ``__all__`` resolves.
"""

import importlib
import json
import os
import pkgutil
import subprocess
import sys
import textwrap

import pytest

import jaxacct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
HEAVY = ("scipy", "optax", "chex", "flax", "matplotlib", "tqdm", "dp_accounting")


def _fresh(code):
  """Runs ``code`` in a fresh interpreter on this checkout; returns its JSON line."""
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr
  return json.loads(out.stdout.strip().splitlines()[-1])


def _public_modules():
  names = ["jaxacct"]
  for info in pkgutil.walk_packages(jaxacct.__path__, "jaxacct."):
    if not any(p.startswith("_") for p in info.name.split(".")):
      names.append(info.name)
  return names


def test_import_loads_no_heavy_dependency_and_no_scheme():
  got = _fresh("""
      import json, sys
      import jaxacct
      mods = sorted(sys.modules)
      print(json.dumps({"top": sorted({m.split(".")[0] for m in mods}),
                        "ours": [m for m in mods if m.startswith("jaxacct.")],
                        "version": jaxacct.__version__}))
      """)
  assert not set(HEAVY) & set(got["top"]), got["top"]
  # at most the numerical core; no scheme (poisson, pld, allocation, ...)
  assert all(m.startswith("jaxacct._core") for m in got["ours"]), got["ours"]
  assert got["version"] == jaxacct.__version__


def test_import_compiles_nothing_and_first_access_loads_the_scheme():
  got = _fresh("""
      import json, sys
      import jax
      compiles = []
      jax.monitoring.register_event_duration_secs_listener(
          lambda name, d, **kw: compiles.append(kw.get("fun_name"))
          if name == "/jax/core/compile/backend_compile_duration" else None)
      import jaxacct
      before = "jaxacct.poisson" in sys.modules
      at_import = list(compiles)
      fn = jaxacct.poisson.epsilon
      print(json.dumps({"at_import": at_import, "before": before,
                        "after": "jaxacct.poisson" in sys.modules,
                        "callable": callable(fn), "compiles": compiles,
                        "heavy": sorted({m.split(".")[0] for m in sys.modules} & set(%r))}))
      """ % (HEAVY,))
  assert got["at_import"] == [] and got["compiles"] == [], got
  assert not got["before"] and got["after"] and got["callable"]
  assert got["heavy"] == [], got["heavy"]    # the Poisson door needs none of them



def test_schemes_load_only_what_they_need():
  """The scheme packages and front doors load none of the heavy dependencies:
  scipy.stats, optax and dp_accounting come with the functions that use them
  (the optax hook, the dp_accounting-compatible accountant, two shuffle
  helpers), not with ``jaxacct.shuffle`` or ``jaxacct.tracking``."""
  got = _fresh("""
      import json, sys
      import jaxacct
      for m in ("poisson", "pld", "allocation", "dpsgd", "mechanisms", "sampling", "shuffle",
                "tracking", "accounting", "experimental"):
        getattr(jaxacct, m)
      import jaxacct.allocation.pld
      jaxacct.tracking.EventAccountant, jaxacct.tracking.accountant_for, jaxacct.calibrate
      jaxacct.accounting.from_profile
      light = sorted({m.split(".")[0] for m in sys.modules} & set(%r))
      jaxacct.tracking.track_privacy
      hook = sorted({m.split(".")[0] for m in sys.modules} & set(%r))
      print(json.dumps({"light": light, "hook": hook}))
      """ % (HEAVY, HEAVY))
  assert got["light"] == [], got["light"]
  assert "optax" in got["hook"], got["hook"]   # the first access of the optax hook loads it

def test_mechanism_values_load_dp_accounting_with_their_events():
  """A mechanism value (``jaxacct.mechanisms.Gaussian``) builds its event from
  ``jaxacct._core.events`` (the events sit below the mechanisms, issue 46), but
  dp_accounting comes with the first ``event()``, not with the value."""
  got = _fresh("""
      import json, sys
      import jaxacct
      g = jaxacct.mechanisms.Gaussian(2.0)
      before = "dp_accounting" in sys.modules or "scipy" in sys.modules
      e = g.event()
      print(json.dumps({"before": before, "event": type(e).__name__,
                        "sigma": float(e.noise_multiplier)}))
      """)
  assert got == {"before": False, "event": "GaussianDpEvent", "sigma": 2.0}


def test_importing_every_module_compiles_nothing():
  """No module computes with jnp at import (each eager op is a compiled program)."""
  mods = [m.name for m in pkgutil.walk_packages(jaxacct.__path__, "jaxacct.")
          if m.name != "jaxacct.__main__"]
  got = _fresh("""
      import importlib, json
      import jax
      compiles = []
      jax.monitoring.register_event_duration_secs_listener(
          lambda name, d, **kw: compiles.append(kw.get("fun_name"))
          if name == "/jax/core/compile/backend_compile_duration" else None)
      for m in %r:
        importlib.import_module(m)
      print(json.dumps({"compiles": compiles}))
      """ % (mods,))
  assert len(mods) > 40
  assert got["compiles"] == [], got["compiles"]


@pytest.mark.parametrize("module", _public_modules())
def test_every_public_name_resolves(module):
  mod = importlib.import_module(module)
  names = getattr(mod, "__all__", [])
  assert len(names) == len(set(names)), f"{module}.__all__ lists a name twice"
  missing = [n for n in names if not hasattr(mod, n)]
  assert not missing, f"{module}.__all__ names that do not resolve: {missing}"
  assert set(names) <= set(dir(mod))


def test_lazy_names_are_the_real_objects():
  from jaxacct import allocation, dpsgd, poisson
  from jaxacct._core import results
  from jaxacct.allocation import pld as alloc_pld
  assert jaxacct.poisson is poisson and jaxacct.allocation is allocation
  assert jaxacct.allocation.pld is alloc_pld
  assert jaxacct.dpsgd is dpsgd and jaxacct.calibrate.__module__ == "jaxacct.calibrator"
  assert jaxacct.EpsilonResult is results.EpsilonResult
  assert set(jaxacct.__all__) <= set(dir(jaxacct))
  with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
    jaxacct.not_a_name  # noqa: B018


def test_events_load_dp_accounting_modules_not_its_init():
  """An event needs dp_accounting's ``dp_event``, ``dp_event_builder`` and
  ``privacy_accountant`` modules only: its ``__init__`` (which loads SciPy's
  optimize, signal and stats: about 0.9 s) waits for a name of the package
  itself. A later ``import dp_accounting`` then gets the whole package, with
  the same classes jaxacct's events and accountants are built on."""
  got = _fresh("""
      import json, sys
      import jaxacct
      from jaxacct import dpsgd
      e = dpsgd.event(noise_multiplier=1.0, num_examples=600, batch_size=6, num_epochs=1)
      heavy = sorted(m for m in ("dp_accounting.mechanism_calibration", "dp_accounting.pld",
                                 "dp_accounting.rdp", "scipy.optimize", "scipy.signal")
                     if m in sys.modules)
      import dp_accounting
      from dp_accounting import rdp
      from dp_accounting.pld import PLDAccountant
      acct = jaxacct.accounting.PLDAccountant()
      names = {"calibrate": callable(dp_accounting.calibrate_dp_mechanism),
               "event_is_dp": isinstance(e, dp_accounting.DpEvent),
               "accountant_is_dp": isinstance(acct, dp_accounting.PrivacyAccountant),
               "gaussian": dp_accounting.GaussianDpEvent is dp_accounting.dp_event.GaussianDpEvent,
               "rdp": rdp.RdpAccountant.__name__, "pld": PLDAccountant.__name__,
               "module": type(dp_accounting).__name__}
      from dp_accounting import *   # noqa: F403 -- the whole public surface
      names["star"] = callable(get_epsilon_gaussian)
      print(json.dumps({"heavy_before": heavy, "names": names}))
      """)
  assert got["heavy_before"] == [], got
  assert got["names"] == {"calibrate": True, "event_is_dp": True, "accountant_is_dp": True,
                          "gaussian": True, "rdp": "RdpAccountant",
                          "pld": "PLDAccountant", "module": "module", "star": True}, got


def test_dp_accounting_imported_first_is_used_as_it_is():
  """A process that imported dp_accounting before jaxacct keeps that module."""
  got = _fresh("""
      import json, sys
      import dp_accounting
      before = sys.modules["dp_accounting"]
      import jaxacct
      e = jaxacct.dpsgd.event(noise_multiplier=1.0, num_examples=600, batch_size=6,
                              num_epochs=1)
      print(json.dumps({"same": sys.modules["dp_accounting"] is before,
                        "event_is_dp": isinstance(e, dp_accounting.DpEvent)}))
      """)
  assert got == {"same": True, "event_is_dp": True}


def test_dpsgd_answers_load_no_scipy_stats():
  """A DP-SGD epsilon with balls-in-bins, fixed-size or truncated Poisson batches
  loads neither scipy.stats, scipy.fft, dp_accounting's ``__init__`` nor
  jaxacct.shuffle (each slow to import: bench/results/HISTORY.md): the binomial laws
  load scipy.stats where they are used (batches drawn with replacement; the truncated
  instance lower's count law is ``jaxacct._core.binomial.host_law``), the adaptive
  with-replacement lower loads scipy.fft, and the accountant loads the shuffle
  bounds with the first shuffle or check-in event."""
  got = _fresh("""
      import json, sys
      from jaxacct import dpsgd
      run = dict(num_examples=600, batch_size=6, num_epochs=1, delta=1e-5, progress=False)
      seen = {}
      for sampling, kw in (("balls_in_bins", {}), ("fixed_size", {}),
                           ("truncated_poisson", {"max_batch_size": 8})):
        r = dpsgd.epsilon(noise_multiplier=2.0, sampling=sampling, **run, **kw)
        seen[sampling] = [float(r.epsilon) > float(r.lower) > 0,
                          sorted(m for m in ("scipy.stats", "scipy.fft", "dp_accounting.pld",
                                             "dp_accounting.mechanism_calibration",
                                             "jaxacct.shuffle")
                                 if m in sys.modules)]
      print(json.dumps(seen))
      """)
  assert got == {"balls_in_bins": [True, []], "fixed_size": [True, []],
                 "truncated_poisson": [True, []]}, got


def test_deferred_package_that_cannot_give_its_modules_is_not_left_registered():
  """``import_submodules`` of a module the package lacks raises ImportError and
  takes its stand-in package back out of ``sys.modules``: a later ``import`` of
  the package runs it whole."""
  got = _fresh("""
      import json, sys
      from jaxacct._core.lazy import import_submodules
      try:
        import_submodules("dp_accounting", ("dp_event", "no_such_module"))
        raised = False
      except ImportError:
        raised = True
      left = "dp_accounting" in sys.modules
      import dp_accounting
      print(json.dumps({"raised": raised, "left": left,
                        "whole": callable(dp_accounting.calibrate_dp_mechanism),
                        "same": dp_accounting.dp_event is sys.modules["dp_accounting.dp_event"]}))
      """)
  assert got == {"raised": True, "left": False, "whole": True, "same": True}, got
