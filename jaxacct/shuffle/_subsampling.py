r"""Shuffling a uniformly subsampled set of users (amplification by subsampling).

A round picks ``m`` of the ``n`` users uniformly at random without
replacement, applies each picked user's eps0-LDP randomizer and shuffles the
``m`` reports. Neighbouring datasets differ by replacing one user (the
shuffle model's relation). With probability ``1 - m/n`` the replaced user is
not picked and the two output laws coincide; otherwise the output is the
shuffle of ``m`` reports with one report's input replaced. Hence, for every
``eps' >= 0``,

.. math::
  \delta'(\varepsilon') = \frac mn\,\delta_m\Big(\log\big(1 + \tfrac nm
  (e^{\varepsilon'} - 1)\big)\Big),

where :math:`\delta_m` is any valid upper bound on the privacy profile of
shuffling ``m`` reports (the front door :func:`jaxacct.shuffle.delta` with
``n = m``). Equivalently ``(eps, delta)`` becomes
``(log(1 + (m/n)(e^eps - 1)), (m/n) delta)``.

Source: V. Feldman, A. McMillan, K. Talwar, "Hiding Among the Clones",
arXiv:2012.12803v3, Sec. 2 (amplification by subsampling, before Lemma 2.3),
citing Kasiviswanathan et al. 2008 and Balle, Barthe, Gaboardi, "Privacy
Amplification by Subsampling", NeurIPS 2018 (arXiv:1807.01647v2), Thm 9
(sampling without replacement, substitution relation; the bound is tight for
the mixture pair). Bound: upper, whenever the inner bound is an upper bound.

Poisson subsampling of users combined with RDP composition is in
:func:`jaxacct.shuffle.bounds.girgis_subsampled_rdp` (Girgis et al.'s
recipe, the paper that gives it).
"""

from __future__ import annotations

import math

import numpy as np

from jaxacct._core import checks
from jaxacct._core.dtype import HOST_ONLY, host_door
from jaxacct.shuffle._host import ON_HOST
from jaxacct._core.results import DeltaResult, EpsilonResult
from jaxacct.shuffle._front import delta as shuffle_delta
from jaxacct.shuffle._front import epsilon as shuffle_epsilon


def _check_nm(n, m):
  checks.check_int("n", n, min_value=1, scalar=True)
  checks.check_int("m", m, min_value=1, scalar=True)
  if m > n:
    raise ValueError(f"m must be in [1, n] = [1, {n}]; got m={m}.")


@host_door(HOST_ONLY)
def amplify_epsilon_delta(epsilon, delta, rate):
  """(eps, delta) of an inner mechanism -> subsampled (eps', delta').

  ``eps' = log(1 + rate (e^eps - 1))``, ``delta' = rate * delta``
  (Balle, Barthe, Gaboardi arXiv:1807.01647v2 Thm 9; FMT'21 Sec. 2).

  Args:
    epsilon: >= 0 (float or numpy array; +inf allowed and kept).
    delta: in [0, 1].
    rate: m/n in (0, 1].

  Returns:
    ``EpsilonResult(epsilon=eps', delta=delta', method="subsampling",
    bound="upper")``, both numpy float64 (host-only). Bound: upper (when the
    inner ``(epsilon, delta)`` is a valid guarantee).
  """
  checks.check_range("rate", rate, 0.0, 1.0, lo_open=True)
  checks.check_range("epsilon", epsilon, 0.0, allow_inf=True)
  checks.check_probability("delta", delta)
  eps = np.asarray(epsilon, np.float64)
  if np.any(np.isnan(eps)) or np.any(eps < 0):
    raise ValueError(f"epsilon must be >= 0; got {epsilon!r}.")
  dl = np.asarray(delta, np.float64)
  if np.any(np.isnan(dl)) or np.any((dl < 0) | (dl > 1)):
    raise ValueError(f"delta must be in [0, 1]; got {delta!r}.")
  # log1p(rate * expm1(eps)) without overflow for large eps
  with np.errstate(over="ignore"):
    small = np.log1p(rate * np.expm1(np.minimum(eps, 700.0)))
  big = eps + np.log(rate) + np.log1p((1.0 - rate) / rate * np.exp(-eps))
  out = np.where(eps > 700.0, big, small)
  return EpsilonResult(epsilon=out, delta=rate * dl, method="subsampling",
                       bound="upper")


@host_door(ON_HOST)
def subsampled_epsilon(*, n: int, m: int, eps0: float, delta: float,
                       randomizer="generic", method: str = "best"
                       ) -> EpsilonResult:
  r"""Epsilon of shuffling ``m`` users sampled without replacement from ``n``.

  Runs the shuffle front door (:func:`jaxacct.shuffle.epsilon`) for ``m``
  reports at ``delta * n / m`` and amplifies (module docstring). One round;
  for many rounds use RDP (:func:`jaxacct.shuffle.bounds.girgis_subsampled_rdp`
  for Poisson subsampling).

  Args:
    n: users >= 1. m: sampled users per round, 1 <= m <= n.
    eps0: local epsilon > 0. delta: target in (0, 1); ``delta * n/m`` must
      be < 1.
    randomizer, method: as in :func:`jaxacct.shuffle.epsilon`.

  Returns:
    :class:`EpsilonResult` with ``method`` = the inner winner prefixed by
    ``"subsampled:"``, the inner bound type, ``details`` with the inner
    result. Bound: upper when the inner one is (a ``"lower"`` inner bound is
    NOT amplified into a lower bound: subsampling only gives upper bounds, so
    only upper/exact inner results are accepted).
  """
  _check_nm(n, m)
  checks.check_delta(delta)
  rate = m / n
  inner_delta = delta / rate
  if not inner_delta < 1.0:
    raise ValueError(
        f"delta * n / m must be < 1 for the inner shuffle bound; got delta="
        f"{delta}, n={n}, m={m} (delta * n / m = {inner_delta}).")
  inner = shuffle_epsilon(n=m, eps0=eps0, delta=inner_delta, randomizer=randomizer,
                      method=method)
  if inner.bound not in ("upper", "exact"):
    raise ValueError(f"inner bound is {inner.bound!r}; subsampling amplifies "
                     "upper bounds only.")
  eps = amplify_epsilon_delta(inner.epsilon, inner_delta, rate).epsilon
  return EpsilonResult(float(eps), float(delta), "subsampled:" + inner.method,
                       "upper", None, {"inner": inner, "rate": rate,
                                       "inner_delta": inner_delta})


@host_door(ON_HOST)
def subsampled_delta(*, n: int, m: int, eps0: float, epsilon: float,
                     randomizer="generic", method: str = "best") -> DeltaResult:
  r"""Delta of shuffling ``m`` of ``n`` users (uniform, without replacement).

  ``delta'(eps') = (m/n) delta_m(log(1 + (n/m)(e^{eps'} - 1)))`` with the
  inner profile from :func:`jaxacct.shuffle.delta` at ``n = m``.

  Args: as :func:`subsampled_epsilon`, with ``epsilon >= 0``.

  Returns: :class:`DeltaResult`. Bound: upper.
  """
  _check_nm(n, m)
  checks.check_range("epsilon", epsilon, 0.0, np.inf, scalar=True)
  rate = m / n
  inner_eps = math.log1p(math.expm1(epsilon) / rate) if epsilon < 700 else (
      epsilon - math.log(rate) + math.log1p((rate - 1.0) * math.exp(-epsilon)))
  inner = shuffle_delta(n=m, eps0=eps0, epsilon=inner_eps, randomizer=randomizer,
                    method=method)
  if inner.bound not in ("upper", "exact"):
    raise ValueError(f"inner bound is {inner.bound!r}; subsampling amplifies "
                     "upper bounds only.")
  return DeltaResult(float(rate * inner.delta), float(epsilon),
                     "subsampled:" + inner.method, "upper", None,
                     {"inner": inner, "rate": rate, "inner_epsilon": inner_eps})
