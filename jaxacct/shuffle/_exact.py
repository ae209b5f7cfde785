r"""Exact shuffled privacy profiles for specific randomizers, and discrete
dominating pairs (probability vectors) for tight composition with ``jaxacct.pld``.

* Binary randomized response (``binary_rr_delta`` / ``binary_rr_epsilon``):
  neighbours differ in user 1 (0 vs 1), and ``m`` of the other ``n-1`` users
  hold a 1. The shuffled output is equivalent to the count of ones,

  .. math:: Y_b = \mathrm{Bern}(b\text{-dependent}) * \mathrm{Bin}(m, 1-\pi) * \mathrm{Bin}(n-1-m, \pi),
     \qquad \pi = 1/(e^{\varepsilon_0}+1),

  and the exact replacement profile is ``max_m max(H(Y0||Y1), H(Y1||Y0))``
  (Feldman, McMillan, Talwar, arXiv:2012.12803, App. G gives the ``m = 0``
  case; the max over ``m`` covers the rest). The flip
  symmetry ``m <-> n-1-m`` (reversing the direction) halves the work. The
  per-``m`` pmfs are built once (O(n^2) total, numpy, positive terms only);
  the delta/eps evaluation over that table is a jitted kernel. Exact up to
  float64 rounding (relative ~1e-15 per term, no cancellation).
* ``enumerate_delta`` / ``worst_case_delta``: brute force for any randomizer
  matrix by dynamic programming over shuffled histograms (``Fraction``
  arithmetic available) -- the test oracle, small n only.
* ``pair_pmfs``: the variation-ratio / clone pair as probability vectors plus
  an atom carrying the (rigorously bounded) cut mass, for ``jaxacct.pld``.
* ``binary_rr_pmfs``: the exact shuffled binary-RR pair for one ``m``.

``binary_rr_*``, ``enumerate_delta`` and ``worst_case_delta`` return
:class:`~jaxacct.EpsilonResult` / :class:`~jaxacct.DeltaResult` (``bound``
``"exact"``, or ``"lower"`` where only some datasets are maximised over).
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks
from jaxacct._core.logmath import log_binom_pmf
from jaxacct._core.results import DeltaResult, EpsilonResult
from jaxacct._core.solve import bisect
from jaxacct._core.compiled import jit
from jaxacct._core.dtype import host_door
from jaxacct.shuffle._host import ON_HOST

MAX_EXACT_BINARY_N = 2000


@jit
def _count_laws(k, m, pi):
  """Bin(k; m, 1-pi) and Bin(k; n-1-m, pi) on the padded support ``k = 0..n-1``
  (Loader log-pmf, zero beyond each law's support): one compile per n."""
  n1 = k.shape[0] - 1.0
  return (jnp.exp(log_binom_pmf(k, m, 1.0 - pi)),
          jnp.exp(log_binom_pmf(k, n1 - m, pi)))


def binary_rr_pmfs(n: int, eps0: float, m: int):
  """(Y0, Y1): pmfs of the count of ones, user 1 holding 0 resp. 1, ``m`` of
  the other ``n-1`` users holding 1 (binary RR with parameter eps0).

  Returns two float64 numpy arrays of length ``n + 1``.
  """
  checks.check_int("n", n, min_value=1)
  checks.check_positive("eps0", eps0)
  checks.check_int("m", m, min_value=0, max_value=int(n) - 1)
  pi = 1.0 / (math.exp(eps0) + 1.0)
  with jax.enable_x64(True):
    a, b = _count_laws(np.arange(int(n), dtype=np.float64), float(m), pi)
  a = np.asarray(a)[:int(m) + 1]
  b = np.asarray(b)[:int(n) - int(m)]
  z = np.convolve(a, b)
  zs = np.concatenate([[0.0], z])
  z = np.concatenate([z, [0.0]])
  y0 = (1.0 - pi) * z + pi * zs
  y1 = pi * z + (1.0 - pi) * zs
  return y0, y1


def binary_rr_table(n: int, eps0: float, ms: Sequence[int] | None = None):
  """Stacked pmfs, both directions, for ``m`` in ``ms`` (default: all, using
  the flip symmetry m <-> n-1-m). Returns ``(P, Q)`` of shape ``(2 len(ms), n+1)``."""
  if ms is None:
    ms = range(0, (n - 1) // 2 + 1)
  ps, qs = [], []
  for m in ms:
    y0, y1 = binary_rr_pmfs(n, eps0, int(m))
    ps += [y0, y1]
    qs += [y1, y0]
  return np.stack(ps), np.stack(qs)


@jit
def _table_delta(p, q, eps):
  e = jnp.exp(jnp.asarray(eps, jnp.float64))[..., None, None]
  h = jnp.sum(jnp.maximum(p - e * q, 0.0), axis=-1)
  return jnp.max(h, axis=-1)


@functools.partial(jit, static_argnames=("lower",))
def _table_epsilon(p, q, delta, eps0, *, lower=False):
  def one(dl):
    fn = lambda e: _table_delta(p, q, e) - dl
    res = bisect(fn, 0.0, eps0, increasing=False, num_iters=64)
    return jnp.maximum(res.x - res.width, 0.0) if lower else res.x
  d = jnp.asarray(delta, jnp.float64)
  return jax.vmap(one)(d.reshape(-1)).reshape(d.shape)


def _check_binary(n, eps0, max_n=MAX_EXACT_BINARY_N, ms=None):
  checks.check_int("n", n, min_value=1, max_value=max_n, scalar=True)
  checks.check_range("eps0", eps0, 0.0, checks.EPS0_MAX, lo_open=True, scalar=True)
  if ms is not None:
    if np.ndim(ms) != 1:
      raise ValueError(f"ms must be a list of counts (integers in [0, n - 1]); got {ms!r}.")
    checks.check_int("ms", list(ms), min_value=0, max_value=int(n) - 1)


@host_door(ON_HOST)
def binary_rr_delta(eps, *, n: int, eps0: float, ms=None):
  r"""Exact replacement delta(eps) of shuffled binary randomized response.

  ``max`` over every dataset (``m`` = number of other users holding 1) and
  both directions of the hockey-stick divergence of the count of ones (module
  docstring). With ``ms`` given, the max runs over those ``m`` only, which is
  a LOWER bound (exact profiles of those datasets).

  Args:
    eps: float array >= 0. n: integer in [1, MAX_EXACT_BINARY_N]. eps0: > 0.
    ms: optional iterable of ``m`` values.

  Returns:
    ``DeltaResult(delta, epsilon=eps, method="binary_rr", bound)``; ``delta``
    a float64 array of ``eps``'s shape.

  Bound: ``"exact"`` (``ms=None``), ``"lower"`` otherwise. Host-only: the
  pmf table is built eagerly, so a call under ``jit`` raises.
  """
  _check_binary(n, eps0, MAX_EXACT_BINARY_N if ms is None else np.inf, ms)
  checks.check_range("eps", eps, 0.0)
  p, q = binary_rr_table(int(n), float(eps0), ms)
  d = _table_delta(jnp.asarray(p), jnp.asarray(q), eps)
  return DeltaResult(delta=d, epsilon=eps, method="binary_rr",
                     bound="exact" if ms is None else "lower")


@host_door(ON_HOST)
def binary_rr_epsilon(delta, *, n: int, eps0: float, ms=None,
                      lower: bool = False):
  r"""Exact replacement eps(delta) of shuffled binary randomized response.

  Bisection on the exact profile of ``binary_rr_delta`` (64 halvings of
  ``[0, eps0]``); returns the feasible (upper) end, or the infeasible (lower)
  end with ``lower=True``.

  Returns:
    ``EpsilonResult(epsilon, delta, method="binary_rr", bound)``;
    ``epsilon`` a float64 array of ``delta``'s shape. Host-only (as
    :func:`binary_rr_delta`).

  Bound: ``"exact"`` (to the bracket width ``eps0 2^-64``) when ``ms=None``;
  ``"lower"`` when ``ms`` is given and ``lower=True``; ``"estimate"`` when
  ``ms`` is given and ``lower=False`` (the feasible end of the bracket of a
  lower bound: neither end is certified).
  """
  _check_binary(n, eps0, MAX_EXACT_BINARY_N if ms is None else np.inf, ms)
  checks.check_delta(delta)
  checks.check_bool("lower", lower)
  p, q = binary_rr_table(int(n), float(eps0), ms)
  e = _table_epsilon(jnp.asarray(p), jnp.asarray(q), delta, float(eps0),
                     lower=lower)
  bound = "exact" if ms is None else "lower" if lower else "estimate"
  return EpsilonResult(epsilon=e, delta=delta, method="binary_rr", bound=bound)


# ---------------------------------------------------------------------------
# brute force (test oracle)
# ---------------------------------------------------------------------------

def histogram_distribution(rows, exact: bool):
  """Distribution over output histograms of independent users with output
  distributions ``rows`` (list of sequences), as a dict ``{histogram: prob}``
  (``Fraction`` probabilities when ``exact``). Exact enumeration; the oracle
  behind :func:`enumerate_delta`."""
  k = len(rows[0])
  dist = {tuple([0] * k): Fraction(1) if exact else 1.0}
  for row in rows:
    new = {}
    for h, pr in dist.items():
      for y, ry in enumerate(row):
        if ry == 0:
          continue
        h2 = list(h)
        h2[y] += 1
        h2 = tuple(h2)
        new[h2] = new.get(h2, 0) + pr * ry
    dist = new
  return dist


#: The widest window pair_pmfs is asked for, in standard deviations.
_Z_MAX = 1e6
#: The largest eps the brute force takes: e^eps is finite in float64 there.
_EPS_MAX = math.log(np.finfo(np.float64).max)


def _check_enum_args(matrix, eps, exact):
  checks.check_not_text("matrix", matrix)
  checks.check_not_bool("matrix", matrix)
  if np.ndim(matrix) != 2:
    raise ValueError("matrix must be a 2-D table (a row of output probabilities per "
                     f"input); got {matrix!r}.")
  checks.check_probability("matrix", np.asarray(matrix, np.float64))
  checks.check_bool("exact", exact)
  if not (isinstance(eps, tuple) and len(eps) == 2 and eps[0] == "exp"):
    checks.check_range("eps", eps, -np.inf, _EPS_MAX, scalar=True)


def _check_indices(name, values, matrix, shape, allow_empty):
  """A sequence of input indices (rows of ``matrix``) of the given shape."""
  checks.check_not_text(name, values)
  checks.check_not_bool(name, values)
  if np.ndim(values) != len(shape) or any(
      s is not None and s != t for s, t in zip(shape, np.shape(values))):
    what = "a sequence of input indices" if len(shape) == 1 else "a list of (x0, x1) pairs"
    raise ValueError(f"{name} must be {what}; got {values!r}.")
  if np.size(values) or not allow_empty:
    checks.check_int(name, np.asarray(values, np.float64), min_value=0,
                     max_value=len(matrix) - 1)


def enumerate_delta(matrix, x0: int, x1: int, others: Sequence[int], eps,
                    *, exact: bool = False):
  r"""Brute-force replacement delta of the shuffled outputs on one dataset pair.

  Users ``(x0, others...)`` vs ``(x1, others...)``, each reporting through
  ``matrix[x]``; the shuffler reveals the histogram. ``max`` of both
  directions of ``sum_h [P(h) - e^eps Q(h)]_+``.

  Args:
    matrix: rows = inputs, columns = output probabilities (floats or
      ``Fraction`` for exact arithmetic with ``exact=True``).
    eps: a float (or, with exact=True, ``e^eps`` given as a Fraction through
      ``eps=("exp", Fraction)``).

  Returns:
    ``DeltaResult(delta, epsilon=eps, method="enumerate", bound="exact")``;
    ``delta`` a numpy float64 (a ``Fraction`` with ``exact=True``), host-only.
    Bound: exact for this dataset pair (the test oracle).
  """
  _check_enum_args(matrix, eps, exact)
  checks.check_int("x0", x0, min_value=0, max_value=len(matrix) - 1)
  checks.check_int("x1", x1, min_value=0, max_value=len(matrix) - 1)
  _check_indices("others", others, matrix, (None,), True)   # none: the two users alone
  rows0 = [matrix[x0]] + [matrix[x] for x in others]
  rows1 = [matrix[x1]] + [matrix[x] for x in others]
  d0 = histogram_distribution(rows0, exact)
  d1 = histogram_distribution(rows1, exact)
  if isinstance(eps, tuple) and eps[0] == "exp":
    e = eps[1]
  else:
    e = math.exp(eps)
  keys = set(d0) | set(d1)
  h01 = sum(max(d0.get(h, 0) - e * d1.get(h, 0), 0) for h in keys)
  h10 = sum(max(d1.get(h, 0) - e * d0.get(h, 0), 0) for h in keys)
  d = max(h01, h10)
  return DeltaResult(delta=d if exact else np.float64(d), epsilon=eps,
                     method="enumerate", bound="exact")


def worst_case_delta(matrix, n: int, eps, *, exact: bool = False,
                     pairs=None):
  """Brute-force replacement delta over ALL datasets of ``n`` users.

  Max over ordered input pairs ``(x0, x1)`` (or the given ``pairs``) and all
  multisets of the other ``n-1`` inputs of ``enumerate_delta``.

  Returns:
    ``DeltaResult(delta, epsilon=eps, method="worst_case", bound,
    details={"argmax": (x0, x1, others)})``: ``delta`` a numpy float64 (a
    ``Fraction`` with ``exact=True``), host-only; ``details["argmax"]`` the
    dataset pair attaining it.

  Bound: ``"exact"`` (test oracle) over all pairs (``pairs=None``);
  ``"lower"`` when ``pairs`` restricts the max.
  """
  _check_enum_args(matrix, eps, exact)
  checks.check_int("n", n, min_value=1, scalar=True)
  if pairs is not None:
    _check_indices("pairs", pairs, matrix, (None, 2), False)
  k_in = len(matrix)
  pairs_given = pairs
  if pairs is None:
    pairs = [(a, b) for a in range(k_in) for b in range(k_in) if a != b]
  best, arg = -1, None
  for x0, x1 in pairs:
    for others in itertools.combinations_with_replacement(range(k_in), n - 1):
      d = enumerate_delta(matrix, x0, x1, others, eps, exact=exact).delta
      if d > best:
        best, arg = d, (x0, x1, others)
  return DeltaResult(delta=best, epsilon=eps, method="worst_case",
                     bound="exact" if pairs_given is None else "lower",
                     details={"argmax": arg})


# ---------------------------------------------------------------------------
# dominating pairs as probability vectors (for jaxacct.pld)
# ---------------------------------------------------------------------------

def pair_pmfs(n: int, p: float, beta: float, q0: float, q1: float,
              *, z: float = 10.0):
  r"""The variation-ratio pair as probability vectors over a (c, a) window.

  Same pair as ``jaxacct.shuffle._pair_reference`` (Wang et al. arXiv:2304.05007v5
  App. H; the FMT'21 clone pair and the stronger clone are members). Returns
  ``(P, Q)`` numpy float64 vectors whose last two entries are atoms carrying
  an upper bound on the cut mass: ``(tail, 0)`` and ``(0, tail)``, i.e. +inf
  loss in each direction -- so a pessimistic PLD built from them dominates the
  pair in both directions.

  Args:
    n: integer >= 1. p, beta, q0, q1: as in ``pair_delta``.
    z: window half-width in standard deviations (+ z^2 for skew), in (0, 1e6];
      past sqrt(n) + 2 the windows are the whole support.

  Returns:
    ``(P, Q)``: 1-D float64 numpy arrays of equal length.
  """
  checks.check_scalar("jaxacct.shuffle.bounds.pair_pmfs", n=n, p=p, beta=beta, q0=q0, q1=q1,
                      z=z)
  checks.check_int("n", n, min_value=1)
  checks.check_range("p", p, 1.0, np.inf, lo_open=True)
  checks.check_range("beta", beta, 0.0, 1.0, lo_open=True)
  checks.check_range("q0", q0, 1.0)
  checks.check_range("q1", q1, 1.0)
  checks.check_range("z", z, 0.0, _Z_MAX, lo_open=True)
  alpha = beta / (p - 1.0)
  r0, r1 = alpha * p / q0, alpha * p / q1
  if r0 + r1 > 1.0:
    raise ValueError(
        "beta is too large for p, q0 and q1: the pair needs beta p / (p - 1) (1 / q0 + "
        f"1 / q1) <= 1; got beta={beta!r}, p={p!r}, q0={q0!r}, q1={q1!r}.")
  from scipy import stats  # here, not at import: scipy.stats is slow to import
  n = int(n)
  # past sqrt(n) + 2 both windows hold every (c, a): a wider z changes nothing
  z = min(float(z), math.sqrt(n) + 2.0)
  lam = max(1.0 - alpha - p * alpha, 0.0)
  s = 1.0 - r0 - r1
  total = r0 + r1
  rho = r0 / total
  sd = math.sqrt(n * total * (1 - total))
  half = z * sd + z * z
  clo = max(0, int(math.floor(n * total - half)))
  chi = min(n, int(math.ceil(n * total + half)))
  c = np.arange(clo, chi + 1, dtype=np.float64)
  asd = math.sqrt(max(chi, 1) * rho * (1 - rho))
  ah = int(math.ceil(z * asd + z * z)) + 1
  offs = np.arange(-ah, ah + 1, dtype=np.float64)
  a = np.floor(c * rho)[:, None] + offs[None, :]
  cc = np.broadcast_to(c[:, None], a.shape)
  ok = (a >= 0) & (a <= cc)
  a = np.where(ok, a, 0.0)
  b = cc - a
  lw = stats.binom.logpmf(cc, n, total)
  la = stats.binom.logpmf(a, cc, rho)
  lamterm = lam * (n - cc) / s if lam > 0 else 0.0
  gp = p * alpha * a / r0 + alpha * b / r1 + lamterm
  gq = alpha * a / r0 + p * alpha * b / r1 + lamterm
  with np.errstate(divide="ignore"):
    lp = lw + la - math.log(n) + np.log(gp)
    lq = lw + la - math.log(n) + np.log(gq)
  pv = np.where(ok, np.exp(lp), 0.0).ravel()
  qv = np.where(ok, np.exp(lq), 0.0).ravel()
  # cut mass: totals c outside [clo, chi] need C = c - (0 or 1) outside
  # [clo, chi - 1]; within a kept c, a outside the window needs
  # Bin(C, rho) (C in {c-1, c}) outside [alo, ahi - 1].
  m = n - 1
  ctail = (stats.binom.cdf(clo - 1, m, total) if clo >= 1 else 0.0) + \
      stats.binom.sf(chi - 1, m, total)
  alo = np.floor(c * rho) - ah
  ahi = np.floor(c * rho) + ah
  atail = 0.0
  for cm in (c, np.maximum(c - 1, 0)):
    t = np.where(alo >= 1, stats.binom.cdf(alo - 1, cm, rho), 0.0) + \
        stats.binom.sf(ahi - 1, cm, rho)
    atail = max(atail, float(np.max(t)))
  tail = float(min(1.0, ctail + atail))
  keep = (pv > 0) | (qv > 0)
  pv, qv = pv[keep], qv[keep]
  pv = np.concatenate([pv, [tail, 0.0]])
  qv = np.concatenate([qv, [0.0, tail]])
  return pv, qv
