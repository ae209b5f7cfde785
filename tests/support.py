"""Helpers shared by several test modules (no test in it).

* :func:`draws_with_replacement_law`: brute force for the fixed-size batch
  tests: the exact law of the sum of ``m`` draws with replacement from
  ``points`` (every one of the n^m draw sequences enumerated), a finite
  mixture (means (k, d), weights).
* :data:`COUNT_COMPILES`: the head of a fresh-process child script that
  counts XLA compilations per function.
* :func:`public_functions`: ``{public path: function}`` of every function a
  public ``__all__`` lists (the walk test_core_dtype and test_traced_doors share).
* :func:`one_step_laws`: the allocation round-law tests' one-step laws on an
  n-knot lattice, built from the public NumPy door
  (``jaxacct.mechanisms.Gaussian/Laplace(...).one_step_law``).
"""

import ast
import importlib
import itertools
import os
import sys

import numpy as np

from jaxacct import mechanisms
from jaxacct.allocation import sum_law


def draws_with_replacement_law(points, m):
  """(means (k, d), weights): the sum of m draws with replacement from ``points``."""
  out = {}
  n = len(points)
  for seq in itertools.product(range(n), repeat=m):
    v = tuple(np.round(np.sum([points[i] for i in seq], axis=0), 12))
    out[v] = out.get(v, 0.0) + float(n) ** -m
  mu = np.array(sorted(out))
  return mu, np.array([out[tuple(v)] for v in mu])


#: Head of a child script for a fresh process (``python -c``): counts XLA
#: compilations per function in ``counts`` (jax.monitoring backend-compile
#: events; a persistent-cache load counts too).
COUNT_COMPILES = r"""
import json, sys
import jax
counts = {}
def listener(name, duration, **kw):
  if name == "/jax/core/compile/backend_compile_duration":
    f = kw.get("fun_name", "?")
    counts[f] = counts.get(f, 0) + 1
jax.monitoring.register_event_duration_secs_listener(listener)
"""


def one_step_laws(kind, param, n, tail):
  """(UpperLaw, LowerLaw, Lattice) of one step on an n-knot lattice (Laplace:
  ``param`` is the scale b)."""
  value = (mechanisms.Gaussian(float(param)) if kind == "gaussian"
           else mechanisms.Laplace(float(param)))
  st = value.one_step_law(n, float(tail))
  return (sum_law.UpperLaw(st.p[0], st.q0[0], st.minf[0]),
          sum_law.LowerLaw(st.a[0], st.g[0], np.float64(0.0)),
          sum_law.Lattice(st.lo[0], st.D[0], np.int32(0)))


def attribute_chains(tree, roots):
  """``(node, root name, [attr, ...])`` for every outermost-to-root attribute
  chain ``root.a.b`` in the AST ``tree`` whose root is a name in ``roots``
  (each ``ast.Attribute`` node yields its own chain, as ``ast.walk`` visits it)."""
  for node in ast.walk(tree):
    if not isinstance(node, ast.Attribute):
      continue
    chain, cur = [], node
    while isinstance(cur, ast.Attribute):
      chain.append(cur.attr)
      cur = cur.value
    if isinstance(cur, ast.Name) and cur.id in roots:
      yield node, cur.id, chain[::-1]


def integer_partitions(m, largest=None):
  """The partitions of the integer m >= 0 into parts <= ``largest`` (default m),
  each a non-increasing tuple (the brute-force oracles' sums over partitions)."""
  largest = m if largest is None else largest
  if m == 0:
    yield ()
    return
  for first in range(min(m, largest), 0, -1):
    for rest in integer_partitions(m - first, first):
      yield (first,) + rest


def example_module(name):
  """The module ``examples/<name>.py`` of this repository, imported."""
  here = os.path.dirname(os.path.abspath(__file__))
  sys.path.insert(0, os.path.join(here, "..", "examples"))
  try:
    return importlib.import_module(name)
  finally:
    sys.path.pop(0)


def public_functions(skip=()):
  """``{"module.name": function}`` for every function a public module's
  ``__all__`` lists (``jaxacct`` and every module without a private part),
  modules in ``skip`` and those whose optional extra (jax_privacy,
  matplotlib) is not installed left out; warnings on import silenced."""
  import inspect
  import pkgutil
  import warnings
  import jaxacct
  names = ["jaxacct"] + [i.name for i in pkgutil.walk_packages(jaxacct.__path__, "jaxacct.")
                         if not any(p.startswith("_") for p in i.name.split(".")[1:])]
  out = {}
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for mod_name in names:
      if mod_name in skip:
        continue
      try:
        mod = importlib.import_module(mod_name)
      except ImportError:   # an optional extra not installed
        continue
      for name in getattr(mod, "__all__", ()):
        obj = getattr(mod, name)
        if inspect.isfunction(obj):
          out[f"{mod_name}.{name}"] = obj
  return out
