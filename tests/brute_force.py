"""Brute-force oracles shared by the fixed-size batch tests (no jaxacct code).

:func:`draws_with_replacement_law`: the exact law of the sum of ``m`` draws
with replacement from ``points`` (every one of the n^m draw sequences
enumerated), as a finite mixture: (means (k, d), weights).
"""

import itertools

import numpy as np


def draws_with_replacement_law(points, m):
  """(means (k, d), weights): the sum of m draws with replacement from ``points``."""
  out = {}
  n = len(points)
  for seq in itertools.product(range(n), repeat=m):
    v = tuple(np.round(np.sum([points[i] for i in seq], axis=0), 12))
    out[v] = out.get(v, 0.0) + float(n) ** -m
  mu = np.array(sorted(out))
  return mu, np.array([out[tuple(v)] for v in mu])
