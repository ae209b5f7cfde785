r"""Per-randomizer variation-ratio rows (Wang et al.) -- NOT upper bounds.

Source: S. Wang et al., "Privacy Amplification via Shuffling: Unified,
Simplified, and Tightened", arXiv:2304.05007v5, Table 6 / repository README
(``wangsw/PrivacyAmplification``), parameter rows ``(p, beta, q)`` per
randomizer.

Every row with leftover weight ``1 - alpha - p alpha > 0`` (i.e.
``beta < (p-1)/(p+1)``) rests on App. C's Lemma 4.5, whose post-processing
step is not exact. The pair's delta is then BELOW the true
shuffled delta on some datasets:

* 4-RR, n = 3, e^eps0 = 3, e^eps = 2: the k-RR row certifies 7/216; exact
  enumeration of the shuffled histograms gives 11/216 (worst dataset; 5/108
  with both others on a third value). Regression test:
  ``tests/shuffle/test_shuffle_exact.py::test_vr_krr_k4_n3_exceeds_pair``.
* 3-RR, n = 16, eps0 = ln 3, delta = 1e-6, others holding x^0: true eps >=
  1.0951 vs the row's 0.9756.

For k-RR (and every extremal randomizer) the row's pair IS a valid LOWER
bound (Thm 5.1): use ``jaxacct.shuffle.bounds.variation_ratio_lower_epsilon``
with the k-RR row. The valid upper bound for k-RR is the stronger clone (``jaxacct.shuffle.stronger_clone_*``).
"""

from __future__ import annotations

import math

import numpy as np

from jaxacct._core import checks
from jaxacct._core.results import DeltaResult, EpsilonResult
from jaxacct.shuffle.bounds import variation_ratio_pair_delta, variation_ratio_pair_epsilon


def row_parameters(mechanism: str, eps0: float, **options):
  """``(p, beta, q)`` of a README / Table 6 row. Not a bound.

  Supported: ``"k_rr"`` (option ``k``), ``"laplace"`` (on [0, 1]),
  ``"rappor"``, ``"local_hash"`` (option ``l``), ``"generic"``.
  """
  checks.check_choice("mechanism", mechanism,
                      ("generic", "k_rr", "laplace", "rappor", "local_hash"))
  checks.check_range("eps0", eps0, 0.0, checks.EPS0_MAX, lo_open=True, scalar=True)
  for name in ("k", "l"):
    if name in options:
      checks.check_int(name, options[name], min_value=2)
  e = math.exp(eps0)
  if mechanism == "generic":
    beta = (e - 1) / (e + 1)
  elif mechanism == "k_rr":
    beta = (e - 1) / (e + options["k"] - 1)
  elif mechanism == "laplace":
    beta = 1 - math.exp(-eps0 / 2)
  elif mechanism == "rappor":
    beta = (math.exp(eps0 / 2) - 1) / (math.exp(eps0 / 2) + 1)
  elif mechanism == "local_hash":
    beta = (e - 1) / (e + options["l"] - 1)
  else:
    raise ValueError(f"unknown mechanism {mechanism!r}.")
  return e, beta, e


def row_delta_unsafe(eps, *, n, mechanism: str, eps0: float, **options):
  """Delta of a per-randomizer row's pair. NOT an upper bound (module doc).

  Returns:
    ``DeltaResult(delta, epsilon, method="variation_ratio_row",
    bound="estimate")``: ``delta`` a float64 numpy array (0-d for scalar
    ``eps``), ``epsilon`` the given ``eps``.

  Bound: estimate -- neither an upper bound (below the truth on known
  counterexamples) nor a lower bound in general (it is one for extremal
  randomizers such as k-RR; use
  ``jaxacct.shuffle.bounds.variation_ratio_lower_epsilon`` with the k-RR row).
  """
  checks.check_range("eps", eps, 0.0)
  d = _row_query(variation_ratio_pair_delta, eps, n, mechanism, eps0, options)
  return DeltaResult(d, np.asarray(eps, np.float64), method="variation_ratio_row",
                     bound="estimate")


def row_epsilon_unsafe(delta, *, n, mechanism: str, eps0: float, **options):
  """Epsilon of a per-randomizer row's pair. NOT an upper bound (module doc).

  Returns:
    ``EpsilonResult(epsilon, delta, method="variation_ratio_row",
    bound="estimate")``: ``epsilon`` a float64 numpy array (0-d for scalar
    ``delta``), ``delta`` the given delta.

  Bound: estimate -- not a valid upper bound (below the truth on known
  counterexamples, module doc); a lower bound only for extremal randomizers
  such as k-RR.
  """
  checks.check_delta(delta)
  e = _row_query(variation_ratio_pair_epsilon, delta, n, mechanism, eps0, options)
  return EpsilonResult(e, np.asarray(delta, np.float64), method="variation_ratio_row",
                       bound="estimate")


def _row_query(query, value, n, mechanism, eps0, options):
  """A row's symmetric pair through a reference-kernel query (host numpy)."""
  checks.check_int("n", n, min_value=1)
  p, beta, q = row_parameters(mechanism, eps0, **options)
  return query(value, n=n, p=p, beta=beta, q0=q)
