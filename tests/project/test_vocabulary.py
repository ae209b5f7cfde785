"""One vocabulary (issue 56, item 4): every public name is in the glossary, once, with one meaning.

The public surface is walked by introspection: the ``__all__`` of each public
module (``MODULES``), the public methods of its classes, the fields of its
dataclasses and NamedTuples (events, results), and the flags of the commands
(``jaxacct``, ``jaxacct dpsgd``, ``jaxacct table``, ``python -m jaxacct.sweep``). Deprecated
spellings (``__deprecated_aliases__``) are not in the signatures, so they are
not walked; each is checked to warn instead.

* every parameter or field name is a row of ``docs/api/glossary.md`` ("Every
  public name"), listed once, and every row is a name in use;
* every flag is a row of its "Command-line flags" table;
* the names that meant two things before issue 56 mean one now
  (``MEANINGS``): ``num_steps`` is the whole run's count, only where no epoch
  is in the signature; ``sigma`` (the scheme kernels' noise) is never beside
  ``noise_multiplier`` and never an event's field; the sampling probability is
  ``sampling_probability`` (``q`` only in the Poisson scheme kernels).
"""

import argparse
import contextlib
import dataclasses
import enum
import importlib
import inspect
import io
import os
import re
import warnings

import numpy as np
import pytest

from jaxacct._core.units import deprecated_aliases

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GLOSSARY = os.path.join(ROOT, "docs", "api", "glossary.md")

MODULES = (
    "jaxacct", "jaxacct.mechanisms", "jaxacct.poisson", "jaxacct.pld",
    "jaxacct.allocation", "jaxacct.allocation.pld", "jaxacct.allocation.sum_law",
    "jaxacct.shuffle", "jaxacct.shuffle.bounds", "jaxacct.tracking", "jaxacct.experimental",
    "jaxacct.dpsgd", "jaxacct.sampling", "jaxacct.accounting", "jaxacct.accounting.events",
    "jaxacct.accounting.mixtures", "jaxacct.accounting.fixed_size",
    "jaxacct.accounting.jax_privacy", "jaxacct.risk", "jaxacct.plot", "jaxacct.calibrator",
)

# The names that meant two things, and the one thing each means now.
MEANINGS = {
    "num_steps": "the whole run's number of steps T (never the steps of one epoch)",
    "steps_per_epoch": "the steps of one epoch t",
    "total_steps": "the whole run's number of noisy updates T (DP-SGD layer)",
    "sigma": "the scheme kernels' Gaussian noise (std / sensitivity); the DP-SGD layer, "
             "the samplers and the events say noise_multiplier",
    "noise_multiplier": "Gaussian noise std / sensitivity (DP-SGD layer, samplers, events)",
    "scale": "a Laplace mechanism's scale",
    "sampling_probability": "the probability that an example joins a step (Poisson)",
    "q": "the Poisson scheme kernels' symbol for sampling_probability",
}
# Where a name of MEANINGS may appear (the callables that take the whole run's num_steps;
# the modules of the scheme kernels that keep the papers' q).
NUM_STEPS_WHOLE_RUN = {
    "jaxacct.poisson.epsilon", "jaxacct.poisson.delta", "jaxacct.pld.poisson_gaussian_composed",
    "jaxacct.tracking.track_privacy", "jaxacct.tracking.epsilon_table",
    "jaxacct.tracking.EventAccountant.step_segments", "jaxacct.sampling.PoissonSampler",
    "jaxacct.sampling.capacity_for",
}
Q_MODULES = ("jaxacct.poisson.", "jaxacct.pld.", "jaxacct.accounting.mixtures.")
SIGMA_NOT_IN = ("jaxacct.dpsgd.", "jaxacct.sampling.", "jaxacct.accounting.events.",
                "jaxacct.tracking.", "jaxacct.risk.", "jaxacct.plot.")
RETIRED = {"sampling_rate", "sampling_prob", "inclusion_prob", "dataset_size_"}


def _public_objects():
  seen, out = set(), []
  for mod_name in MODULES:
    mod = importlib.import_module(mod_name)
    names = getattr(mod, "__all__", None)
    if names is None:
      names = [n for n in dir(mod) if not n.startswith("_")
               and getattr(getattr(mod, n), "__module__", None) == mod_name]
    for name in names:
      obj = getattr(mod, name)
      if inspect.ismodule(obj) or not callable(obj) or id(obj) in seen:
        continue
      seen.add(id(obj))
      out.append((f"{mod_name}.{name}", obj))
  return out


def _params(obj):
  try:
    sig = inspect.signature(obj)
  except (TypeError, ValueError):
    return []
  return [p.name for p in sig.parameters.values()
          if p.name not in ("self", "cls") and not p.name.startswith("_")
          and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _fields(cls):
  if dataclasses.is_dataclass(cls):
    return [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]
  return list(getattr(cls, "_fields", ()))


def public_callables():
  """``[(qualname, object, names)]``: each public callable (methods of public
  classes too) and the parameter or field names it shows."""
  out = []
  for qual, obj in _public_objects():
    if inspect.isclass(obj):
      if issubclass(obj, (BaseException, enum.Enum)):   # exceptions, enums: no parameters
        continue
      fields = _fields(obj)
      out.append((qual, obj, fields or _params(obj)))
      for m, v in vars(obj).items():
        if m.startswith("_") or isinstance(v, property):
          continue
        fn = getattr(obj, m, None)
        if callable(fn) and not inspect.isclass(fn):
          out.append((f"{qual}.{m}", fn, _params(fn)))
    else:
      out.append((qual, obj, _params(obj)))
  return out


def public_names():
  """``{name: [(qualname, object), ...]}`` over the public surface."""
  uses = {}
  for qual, obj, names in public_callables():
    for n in names:
      uses.setdefault(n, []).append((qual, obj))
  return uses


def _help(argv):
  from jaxacct.__main__ import main
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    try:
      main(argv)      # `jaxacct --help` (the commands) returns
    except SystemExit:   # a command's --help (argparse) exits
      pass
  return buf.getvalue()


def cli_flags():
  """``{flag: [command, ...]}`` of the commands' ``--help``."""
  from jaxacct import sweep
  texts = {"jaxacct": _help(["--help"]), "jaxacct dpsgd": _help(["dpsgd", "--help"]),
           "jaxacct table": _help(["table", "--help"]),
           "python -m jaxacct.sweep": sweep.parser().format_help()}
  flags = {}
  for cmd, text in texts.items():
    for f in sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))):
      flags.setdefault(f, []).append(cmd)
  return flags


def _table(heading):
  text = open(GLOSSARY, encoding="utf-8").read()
  part = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
  rows = re.findall(r"^\| `([^`]+)` \|(.+)\|\s*$", part, re.M)
  return [(name, meaning.strip()) for name, meaning in rows]


def test_every_public_name_is_in_the_glossary_once():
  rows = _table("Every public name")
  listed = [n for n, _ in rows]
  twice = sorted({n for n in listed if listed.count(n) > 1})
  assert not twice, f"listed more than once in docs/api/glossary.md: {twice}"
  assert all(m.strip(" |") for _, m in rows), "a glossary row without its meaning"
  uses = public_names()
  missing = sorted(set(uses) - set(listed))
  assert not missing, (
      "public parameter/field names missing from docs/api/glossary.md ('Every public "
      "name'; add the name with its one meaning, or use the glossary's name): "
      + ", ".join(f"{n} ({uses[n][0][0]})" for n in missing))
  stale = sorted(set(listed) - set(uses))
  assert not stale, f"glossary rows of names no public callable takes: {stale}"


def test_every_flag_is_in_the_glossary_once():
  rows = _table("Command-line flags")
  listed = [n for n, _ in rows]
  assert len(listed) == len(set(listed))
  flags = cli_flags()
  assert not sorted(set(flags) - set(listed)), sorted(set(flags) - set(listed))
  assert not sorted(set(listed) - set(flags)), sorted(set(listed) - set(flags))
  assert "--num-steps" not in flags   # the table's old spelling: hidden, deprecated


def test_names_that_meant_two_things_mean_one():
  rows = dict(_table("Every public name"))
  for name in MEANINGS:
    assert name in rows, name
  bad = []
  for qual, obj, names in public_callables():
    s = set(names)
    if "num_steps" in s and qual not in NUM_STEPS_WHOLE_RUN:
      bad.append(f"{qual}: num_steps (is it the whole run? add it to NUM_STEPS_WHOLE_RUN; "
                 "the steps of one epoch are steps_per_epoch)")
    if "sigma" in s and ("noise_multiplier" in s or qual.startswith(SIGMA_NOT_IN)):
      bad.append(f"{qual}: sigma (the DP-SGD layer, samplers and events say noise_multiplier)")
    if "q" in s and not qual.startswith(Q_MODULES):
      bad.append(f"{qual}: q (say sampling_probability)")
    if s & RETIRED:
      bad.append(f"{qual}: {sorted(s & RETIRED)} (say sampling_probability)")
  # a class's methods speak as the class does
  by_class = {}
  for qual, obj, names in public_callables():
    cls = qual.rsplit(".", 1)[0]
    by_class.setdefault(cls, set()).update(names)
  for cls, names in by_class.items():
    if {"sigma", "noise_multiplier"} <= names:
      bad.append(f"{cls}: sigma and noise_multiplier in one class")
  assert not bad, "\n".join(bad)


def test_no_event_has_a_sigma_field():
  from jaxacct.accounting import events
  for name in events.__all__:
    cls = getattr(events, name)
    if inspect.isclass(cls):
      assert "sigma" not in _fields(cls), name


# --------------------------------------------------- the old spellings, one release

def _allocation_doors():
  from jaxacct import allocation
  from jaxacct.allocation import pld as apld
  kw = dict(sigma=1.3, num_epochs=2)
  return [
      (allocation.epsilon, dict(kw, delta=1e-5, methods=("local", "direct_add")), 12),
      (allocation.delta, dict(kw, epsilon=2.0, methods=("local", "direct_add")), 12),
      (allocation.allocation_rdp, dict(kw, direction="remove", max_order=8), 12),
      (allocation.allocation_remove_rdp, dict(sigma=1.3, max_order=8), 12),
      (allocation.allocation_add_rdp, dict(sigma=1.3, orders=np.array([2.0, 3.5]),
                                           num_outer=256, num_inner=128), 12),
      (allocation.allocation_remove_rdp_from_moments,
       dict(log_moments=np.array([[0.0, 0.0, 0.5, 1.2]])), 12),
      (allocation.delta_lower_bound, dict(kw, epsilon=1.0), 12),
      (apld.allocation_pld_epsilon, dict(kw, delta=1e-5, grid_size=64, tail=1e-12), 6),
  ]


def _values(r):
  if isinstance(r, tuple) and not hasattr(r, "_fields"):
    return [np.asarray(x) for x in r]
  if hasattr(r, "_fields"):
    return [np.asarray(getattr(r, f)) for f in r._fields
            if isinstance(getattr(r, f), (float, int, np.ndarray, np.floating))]
  return [np.asarray(r)]


@pytest.mark.parametrize("i", range(8))
def test_num_steps_per_epoch_warns_and_gives_the_same_value(i):
  fn, kw, t = _allocation_doors()[i]
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    new = fn(steps_per_epoch=t, **kw)
  with pytest.warns(DeprecationWarning, match="'num_steps' is deprecated.*'steps_per_epoch'"):
    old = fn(num_steps=t, **kw)
  for a, b in zip(_values(new), _values(old), strict=True):
    assert np.array_equal(a, b, equal_nan=True)   # bitwise
  assert deprecated_aliases(fn) == {"num_steps": "steps_per_epoch"}
  assert "num_steps" not in inspect.signature(fn).parameters


def test_event_sigma_warns_and_is_the_same_event():
  from jaxacct.accounting import PLDAccountant
  from jaxacct.accounting import events as ev
  new = ev.RandomAllocationDpEvent(noise_multiplier=1.1, steps_per_epoch=10, num_epochs=2)
  lap = ev.RandomAllocationDpEvent(scale=0.7, steps_per_epoch=10, mechanism="laplace")
  chk = ev.ShuffledCheckInDpEvent(n=50, p=0.5, noise_multiplier=2.0)
  with pytest.warns(DeprecationWarning, match="'sigma' is deprecated.*'noise_multiplier'"):
    old = ev.RandomAllocationDpEvent(sigma=1.1, steps_per_epoch=10, num_epochs=2)
  with pytest.warns(DeprecationWarning, match="'sigma' is deprecated.*'scale'"):
    old_lap = ev.RandomAllocationDpEvent(sigma=0.7, steps_per_epoch=10, mechanism="laplace")
  with pytest.warns(DeprecationWarning, match="use 'scale'"):   # by position
    pos_lap = ev.RandomAllocationDpEvent(0.7, 10, 1, 1, "laplace")
  with pytest.warns(DeprecationWarning, match="'sigma' is deprecated.*'noise_multiplier'"):
    old_chk = ev.ShuffledCheckInDpEvent(n=50, p=0.5, sigma=2.0)
  assert old == new and hash(old) == hash(new)
  assert old_lap == lap == pos_lap and old_chk == chk
  with pytest.warns(DeprecationWarning, match="'noise_multiplier'"):
    assert new.sigma == 1.1
  with pytest.warns(DeprecationWarning, match="'scale'"):
    assert lap.sigma == 0.7
  with pytest.raises(ValueError, match="not both"):
    ev.RandomAllocationDpEvent(sigma=1.0, noise_multiplier=1.0)
  with pytest.raises(ValueError, match="scale"):
    ev.RandomAllocationDpEvent(noise_multiplier=1.0, scale=1.0)
  # the accountant's epsilon of the old spelling is bitwise the new one's
  e_new = PLDAccountant().compose(new).get_epsilon(1e-5)
  e_old = PLDAccountant().compose(old).get_epsilon(1e-5)
  assert e_new == e_old


def test_cli_flags_spell_the_library():
  flags = cli_flags()
  assert "--steps-per-epoch" in flags and "--noise-multiplier" in flags
  assert argparse.SUPPRESS not in str(flags)
