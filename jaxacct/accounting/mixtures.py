r"""Pairs of dp_accounting 0.6.0's newer events (discrete Laplace, mixtures of Gaussians,
truncated Poisson sampling, sampling with replacement).

Every function returns ``jaxacct.pld`` PLDs on a caller-chosen grid ``step``:
pessimistic (dominating: every hockey-stick divergence of the mechanism is
below the PLD's, so compositions stay upper bounds) or optimistic
(dominated, from an explicit instance of the mechanism, so every delta is a
certified lower bound). Derivations are in each docstring; numbers are
checked against dp_accounting 0.6.0's ``PLDAccountant`` in
``tests/accounting/test_accounting_events_more.py``.

Public (``__all__``):

* :func:`truncated_poisson_gaussian` -- Poisson sampling truncated to a
  maximal batch size, then the Gaussian mechanism (add/remove) (its
  truncation probabilities are a step: ``_truncation_probabilities``);
* :func:`with_replacement_gaussian` -- a fixed batch drawn with
  replacement, then the Gaussian mechanism (replace-one);

Used by the accountant through their events (``DiscreteLaplaceDpEvent``,
``MixtureOfGaussiansDpEvent``, ...), not public: ``discrete_laplace`` (DLap(a)
noise, integer sensitivity s), ``mixture_of_gaussians`` (N(0, s^2) against
sum_i p_i N(c_i, s^2)), ``mixture`` (a revealed-coin mixture of pairs),
``max_loss`` / ``inf_mass`` (epsilon at delta = 0 and delta at epsilon = inf
of a PLD), ``composed_extreme``, ``revealed_mixture``, ``worse_of`` (one pair
above several: the max of their profiles), ``CONSTRUCTIONS``,
``with_truncated_construction``, ``draw_count_law`` (also :mod:`.fixed_size`'s).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from jaxacct import pld as jpld
from jaxacct._core import binomial, checks
from jaxacct._core.dtype import public_surface, side_by_side
from jaxacct._core.gaussian import normal_tail_z
from jaxacct._core.logmath import log_ndtr_diff
from jaxacct._core.namespace import host_call
from jaxacct.accounting import _mechanisms
from jaxacct.accounting._pairs import (PROFILE_LOSS_MAX, dominated_on_grid, from_cells,
                                       from_profile)


# public: the constructions tests and researchers check directly; the others
# (discrete_laplace, mixture_of_gaussians, mixture, max_loss, inf_mass, ...)
# serve the accountant, whose door is the event (``jaxacct.accounting.events``)
__all__ = ["truncated_poisson_gaussian", "with_replacement_gaussian"]

#: tail mass per side below which the noise line is cut (charged pessimistically).
TAIL = 1e-20
_MAX_CELLS = 1 << 20
#: constructions of :func:`truncated_poisson_gaussian`'s upper pair: ours
#: (default, tighter) and dp_accounting 0.6.0's (valid, looser).
CONSTRUCTIONS = ("jaxacct", "dp_accounting")
_MAX_LOSS = 400.0


def max_loss(pld) -> float:
  """Epsilon at delta = 0: the largest loss of positive mass (inf if any mass is at +inf)."""
  if float(pld.inf_mass) > 0:
    return math.inf
  probs = np.asarray(pld.probs)
  nz = np.nonzero(probs > 0)[0]
  if nz.size == 0:
    return 0.0
  return max(0.0, (int(pld.offset) + int(nz[-1])) * float(pld.step))


def inf_mass(pld) -> float:
  """Delta at epsilon = inf: the mass at +inf."""
  return float(pld.inf_mass)


def composed_extreme(quantity: str, plds_counts) -> float:
  """epsilon(0) (``quantity="epsilon"``) or delta(inf) of a composition.

  ``plds_counts``: ``[(pld or None, count)]``; a ``None`` PLD (unknown
  shape) makes epsilon(0) infinite. epsilon(0) = sum of count x
  :func:`max_loss`; delta(inf) = ``1 - prod (1 - inf_mass)^count``. An
  empty list gives 0.
  """
  if quantity == "epsilon":
    tot = 0.0
    for p, n in plds_counts:
      tot += math.inf if p is None else n * max_loss(p)
    return tot
  keep = 0.0
  for p, n in plds_counts:
    keep += n * math.log1p(-min(inf_mass(p), 1.0)) if inf_mass(p) < 1 else -math.inf
  return max(0.0, float(-math.expm1(keep)))


# --------------------------------------------------------------------------
# discrete Laplace


def discrete_laplace(a: float, sensitivity: int, *, step: float, pessimistic: bool = True):
  r"""The discrete Laplace mechanism, both directions (add/remove, replace-special).

  DLap(a) has mass ``tanh(a/2) e^{-a|x|}`` on the integers (dp_accounting's
  ``DiscreteLaplaceDpEvent``; Canonne, Kamath, Steinke, arXiv:2004.00387).
  With P = DLap(a) and Q = s + DLap(a) (sensitivity s), the loss
  ``a(|x - s| - |x|)`` takes the s + 1 values ``a(s - 2k)``, k = 0..s, with
  P-masses ``1/(1 + e^{-a})`` (x <= 0, k = 0), ``tanh(a/2) e^{-ak}``
  (0 < k < s) and ``e^{-as}/(1 + e^{-a})`` (x >= s); so the loss is bounded
  by ``a s`` (a pure ``a s``-DP mechanism). The pair is symmetric
  (x -> s - x swaps P and Q), so remove = add. Upper: connect-the-dots of
  these atoms; lower: their exact merge onto the grid.

  Returns:
    ``PairPLD``. Bound: upper (pessimistic) / lower.
  """
  a, s = float(a), int(sensitivity)
  k = np.arange(s + 1, dtype=np.float64)
  losses = a * (s - 2.0 * k)
  p = np.tanh(a / 2.0) * np.exp(-a * k)
  p[0] = 1.0 / (1.0 + math.exp(-a))
  p[-1] = math.exp(-a * s) / (1.0 + math.exp(-a))
  if not pessimistic:
    one = dominated_on_grid(p, p * np.exp(-losses), step=step)
  else:
    h = float(step)
    # a loss within 1e-12 (relative) of a grid point is taken as on it: float
    # rounding of a (s - 2k) and of the grid (e.g. 0.2 * 3 / 1e-3 =
    # 600.0000000000001) must not add a grid step (delta moves <= 1e-12 rel.)
    r = losses / h
    near = np.abs(r - np.round(r)) < 1e-12 * np.maximum(1.0, np.abs(r))
    losses = np.where(near, np.round(r) * h, losses)
    one = jpld.from_losses(losses, p, step=h, pessimistic=True)
  return jpld.PairPLD(one, one)


# --------------------------------------------------------------------------
# mixtures of Gaussians


def _mog_loss_slope(x, sigma, c, lp, slope=True):
  """L(x) = log sum_i p_i exp((c_i x - c_i^2/2) / sigma^2) and L'(x), vectorised in x."""
  z = lp[None, :] + (np.outer(x, c) - 0.5 * c * c) / (sigma * sigma)
  m = z.max(axis=1, keepdims=True)
  e = np.exp(z - m)
  tot = e.sum(axis=1)
  loss = m[:, 0] + np.log(tot)
  if not slope:
    return loss
  return loss, (e @ c) / tot / (sigma * sigma)


def _mog_inverse(y, sigma, c, lp, lo, hi):
  """x with L(x) = y for y in [L(lo), L(hi)] (L convex, increasing): start from
  the chord on a 16k-point table, then safeguarded Newton steps."""
  y = np.asarray(y, np.float64)
  xg = np.linspace(lo, hi, (1 << 14) + 1)
  lg = np.maximum.accumulate(_mog_loss_slope(xg, sigma, c, lp, slope=False))
  i = np.clip(np.searchsorted(lg, y), 1, xg.size - 1)
  a, b = xg[i - 1], xg[i]
  with np.errstate(divide="ignore", invalid="ignore"):
    w = np.clip(np.nan_to_num((y - lg[i - 1]) / (lg[i] - lg[i - 1])), 0.0, 1.0)
  x = a + w * (b - a)
  for _ in range(50):
    f, g = _mog_loss_slope(x, sigma, c, lp)
    f = f - y
    a = np.where(f < 0, x, a)
    b = np.where(f >= 0, x, b)
    with np.errstate(divide="ignore", invalid="ignore"):
      xn = x - f / g
    bad = ~np.isfinite(xn) | (xn < a) | (xn > b)
    xn = np.where(bad, 0.5 * (a + b), xn)
    done = np.all(np.abs(xn - x) <= 1e-14 * (1.0 + np.abs(x)))
    x = xn
    if done:
      break
  return x


def mixture_of_gaussians(sigma: float, sensitivities, probs, *, step: float,
                         pessimistic: bool = True):
  r"""The mixture-of-Gaussians mechanism, both directions.

  dp_accounting's ``MixtureOfGaussiansDpEvent`` (Choquette-Choo, Ganesh,
  Steinke, Thakurta, arXiv:2310.15526; the mechanism of matrix-factorisation
  DP-SGD with random batches): one neighbour gives Q = N(0, sigma^2), the
  other P = sum_i p_i N(c_i, sigma^2), c_i >= 0. The loss
  ``L(x) = log dP/dQ(x) = logsumexp_i(log p_i + (c_i x - c_i^2/2)/sigma^2)``
  is a log-sum-exp of affine functions with slopes c_i/sigma^2 >= 0: convex
  and increasing. Remove: the P-law of L; add: the Q-law of -L.

  Cells: the x-line is cut at ``x_j = L^{-1}(j * step)`` (every grid
  loss in the range, or every k-th if that is more than 2^20 cells) between
  ``x_lo = min(c) - z sigma`` and ``x_hi = max(c) + z sigma`` (z: the
  1e-20 normal tail), plus the two tail cells; exact cell masses (normal
  CDF differences in log space). Upper: :func:`.pairs.from_cells` splits
  every cell onto the two ends of its loss range keeping both masses, which
  on grid-aligned cells is exactly connect-the-dots of the exact
  hockey-stick curve at the grid losses (Doroshenko et al., arXiv:2207.04380,
  the construction dp_accounting uses for this event); lower: the cells
  merged onto the grid (:func:`.pairs.dominated_on_grid`).

  Returns:
    ``PairPLD(remove, add)``. Bound: upper (pessimistic) / lower.
  """
  s = float(sigma)
  c = np.asarray(sensitivities, np.float64).ravel()
  p = np.asarray(probs, np.float64).ravel()
  keep = p > 0
  c, p = c[keep], p[keep] / np.sum(p[keep])
  lp = np.log(p)
  z = normal_tail_z(TAIL)
  lo, hi = float(c.min()) - z * s, float(c.max()) + z * s
  l_lo, l_hi = (float(v) for v in _mog_loss_slope(np.array([lo, hi]), s, c, lp,
                                                      slope=False))
  h = float(step)
  j0, j1 = math.ceil(l_lo / h), math.floor(l_hi / h)
  stride = max(1, math.ceil((j1 - j0 + 1) / _MAX_CELLS))
  grid = np.arange(j0, j1 + 1, stride, dtype=np.float64) * h
  xs = _mog_inverse(grid, s, c, lp, lo, hi)
  left = float(np.log(np.sum(p[c == 0]))) if np.any(c == 0) else -np.inf
  edges = np.concatenate([[-np.inf, lo], xs, [hi, np.inf]])
  loss_at = np.concatenate([[left, l_lo], grid, [l_hi, np.inf]])
  ea, eb = edges[:-1], edges[1:]
  lq = host_call(log_ndtr_diff, ea / s, eb / s)
  lpm = special.logsumexp(lp[None, :] + host_call(
      log_ndtr_diff, (ea[:, None] - c[None, :]) / s, (eb[:, None] - c[None, :]) / s), axis=1)
  a_, b_ = loss_at[:-1], loss_at[1:]
  rem = from_cells(lpm, lq, a_, b_, step=h, pessimistic=pessimistic)
  add = from_cells(lq, lpm, -b_, -a_, step=h, pessimistic=pessimistic)
  return jpld.PairPLD(rem, add)


# --------------------------------------------------------------------------
# revealed-coin mixtures


def revealed_mixture(plds, weights, extra_inf=0.0):
  """The PLD of a revealed-tag mixture: sum_k w_k PLD_k on one grid, plus
  ``extra_inf`` at +inf (host NumPy; the PLDs share ``step`` and side)."""
  step = float(plds[0].step)
  lo = min(int(p.offset) for p in plds)
  hi = max(int(p.offset) + int(np.asarray(p.probs).size) for p in plds)
  out = np.zeros(hi - lo)
  inf = float(extra_inf)
  for p, w in zip(plds, weights):
    a = np.asarray(p.probs, np.float64)
    out[int(p.offset) - lo:int(p.offset) - lo + a.size] += w * a
    inf += w * float(p.inf_mass)
  # NumPy arrays (a host PLD): a device copy would compile a program per length
  return jpld.PLD(out, lo, step, np.float64(min(inf, 1.0)),
               bool(plds[0].pessimistic))


def mixture(pairs, weights, *, extra_inf: float = 0.0):
  r"""The pair of a mechanism that picks pair k with public probability w_k.

  When the coin is revealed, the privacy loss is that of the chosen pair,
  so each direction's PLD is the w-mixture of the PLDs (same grid); a
  pessimistic mixture dominates the mixture of the mechanisms they dominate
  (the hockey-stick divergence is jointly convex: with the coin hidden it
  is at most the revealed one). ``extra_inf``: weight charged to +inf
  (pessimistic; e.g. cut-off terms).

  Returns:
    ``PairPLD``. Bound: as the inputs.
  """
  w = [float(x) for x in weights]
  return jpld.PairPLD(revealed_mixture([p.remove for p in pairs], w, extra_inf),
                   revealed_mixture([p.add for p in pairs], w, extra_inf))


# --------------------------------------------------------------------------
# truncated Poisson sampling


def _truncation_probabilities(n: int, q: float, b: int):
  r"""``(t, q_t, q_bar)`` for Poisson sampling (rate q) of n records truncated to b.

  With B ~ Bin(n - 1, q) the number of other records sampled: ``t = P(B >=
  b)`` (truncation can happen), ``q_t = P(target in the batch | B >= b) =
  q E[b/(B+1) | B >= b] = b P(Bin(n, q) > b) / (n t)`` (the identity
  ``E[1{B>=b}/(B+1)] = P(Bin(n,q) >= b+1)/(n q)``) and ``q_bar = (1 - t) q +
  t q_t`` (the target's overall inclusion probability).
  """
  # the tails by SciPy's betainc: scipy.stats.binom.sf's values, bit for bit,
  # without importing scipy.stats (tests/_core/test_binomial.py)
  sf = lambda k, m: float(binomial.binom_sf(k, m, q, xp=np, betainc=special.betainc))
  t = sf(b, n - 1) if n >= 1 else 0.0
  if t <= 0.0:
    return 0.0, 0.0, float(q)
  qt = min(sf(b + 1, n) * b / (t * n), 1.0)
  return t, qt, (1.0 - t) * q + t * qt


def with_truncated_construction(component, event, construction: str, step: float):
  """``component`` (of a ``TruncatedSubsampledGaussianDpEvent``) with its upper
  pair built by ``construction`` (:data:`CONSTRUCTIONS`); lower unchanged."""
  upper = truncated_poisson_gaussian(
      int(event.dataset_size), float(event.sampling_probability),
      int(event.truncated_batch_size), float(event.noise_multiplier),
      step=float(step), construction=construction)
  return component._replace(label=f"{component.label} [{construction} construction]",
                            upper=upper)


def _pair_at(m: int, q: float, b: int, sigma: float, *, step: float, construction: str):
  """The upper pair of the dataset of ``m`` records that holds the differing
  record (the mixture of :func:`truncated_poisson_gaussian`'s proof)."""
  first = jpld.poisson_gaussian_pair(sigma, float(q), step=step, pessimistic=True)
  return _mixed(first, *_truncated_branch(m, q, b, sigma, step=step,
                                          construction=construction))


def _truncated_branch(m: int, q: float, b: int, sigma: float, *, step: float,
                      construction: str):
  """``(t, pair)``: the probability t that the batch of the dataset of ``m`` records
  can be truncated, and the pair of that branch (None where t is 0)."""
  t, qt, _ = _truncation_probabilities(int(m), float(q), int(b))
  if t <= 0.0:
    return t, None
  if construction == "dp_accounting":
    return t, _mechanisms.poisson_gaussian_replace(sigma / 2.0, qt, step=step,
                                                   pessimistic=True)
  return t, jpld.poisson_gaussian_pair(sigma / 2.0, qt, step=step, pessimistic=True)


def _mixed(first, t: float, second):
  """``(1 - t) first + t second`` (:func:`mixture`); ``first`` itself where t is 0."""
  return first if t <= 0.0 else mixture([first, second], [1.0 - t, t])


def _grid_profiles(pairs, step: float):
  """``(eps, delta_remove, delta_add)``: every grid loss ``eps = k * step >= 0``
  up to the largest of the pairs' supports, and the max over the pairs of
  each direction's delta there (the exact discrete profiles, host NumPy)."""
  h = float(step)
  plds = [p for pair in pairs for p in (pair.remove, pair.add)]
  top = max(int(p.offset) + int(np.asarray(p.probs).size) - 1 for p in plds)
  top = min(top, int(PROFILE_LOSS_MAX / h))     # from_profile reads no point above
  eps = np.arange(max(top, 0) + 1, dtype=np.float64) * h

  def prof(p):
    return np.asarray(host_call(jpld.delta_core, np.asarray(p.probs, np.float64),
                                np.int64(p.offset), h, np.float64(p.inf_mass), eps))

  rem, add = side_by_side(lambda: np.max([prof(pair.remove) for pair in pairs], axis=0),
                          lambda: np.max([prof(pair.add) for pair in pairs], axis=0))
  return eps, np.clip(rem, 0.0, 1.0), np.clip(add, 0.0, 1.0)


def worse_of(pairs, *, step: float):
  r"""One pair that dominates every pair of ``pairs`` (pessimistic PLDs on ``step``).

  The max of privacy profiles is a privacy profile: the least pair above
  several has the trade-off function ``conv(min_k f_k)``, whose conjugate is
  ``max_k f_k^*`` (Zhu, Dong, Wang, arXiv:2106.08567v2, Sec. 2-3). Each
  direction's discrete profile is piecewise linear in ``e^eps`` between grid
  losses, so its values at every grid loss ``>= 0`` (:func:`_grid_profiles`)
  determine it there; :func:`jaxacct.accounting._pairs.from_profile` turns
  the per-direction max into the least pair above it (lower convex hull;
  ``gamma < 1`` from the add side). It dominates each input pair's mechanism
  in both directions, so it composes with other events as an upper bound.

  Returns:
    ``PairPLD``; the input itself when ``pairs`` holds one distinct pair.
    Bound: upper.
  """
  distinct = []
  for p in pairs:
    if not any(p is d for d in distinct):
      distinct.append(p)
  if len(distinct) == 1:
    return distinct[0]
  eps, rem, add = _grid_profiles(distinct, step)
  return from_profile(eps, rem, add, step=step, pessimistic=True)


def truncated_poisson_gaussian(n: int, q: float, b: int, sigma: float, *, step: float,
                               pessimistic: bool = True, construction: str = "jaxacct",
                               neighbours: str = "both"):
  r"""Poisson sampling (rate q) of N records, truncated to b, then Gaussian (add/remove).

  dp_accounting's ``TruncatedSubsampledGaussianDpEvent`` (arXiv:2508.15089):
  sample each record with probability q, keep a uniform b-subset if more
  than b were sampled, add N(0, sigma^2) to the sum (norms <= 1). ``n`` is
  the user's dataset size N (``dataset_size``; jax_privacy's
  ``truncated_dpsgd_event`` passes ``dataset_size=num_examples``). Its
  add/remove neighbours: the N - 1 others (remove the target: the dataset
  holding it has m = N records) and N + 1 records (add the target: m = N +
  1); the add neighbour truncates more often. **Upper: the worse of the
  two neighbours, as one dominating pair** (:func:`worse_of`: the pointwise
  max of the two pairs' privacy profiles, both directions; Zhu, Dong, Wang,
  arXiv:2106.08567v2).

  For the dataset of m records holding the target, let B ~ Bin(m-1, q)
  count the other records sampled; B has the same law under both
  datasets of the pair, so the event {B >= b} is a coin we may reveal
  (:func:`mixture`):

  * B < b (prob 1 - t): no truncation; the target joins with probability
    q: the Poisson-subsampled Gaussian pair ((1-q) N(0) + q N(1), N(0)).
  * B >= b (prob t): B itself stays hidden. Given only the coin, the
    neighbour without the target releases a uniform b-subset S of the
    others (exchangeability: the law of the batch is invariant under
    permutations of the others and its size is b). The one with the target
    includes it with probability ``q_t = P(target in batch | B >= b) =
    E[q b/(B+1) | B >= b]`` (:func:`_truncation_probabilities`), and then
    the rest of its batch is a uniform (b-1)-subset of the others, else a
    uniform b-subset (exchangeability again). Couple the (b-1)-subset as S
    minus a uniform member y: the pair is exactly
    ``(E_{S,y}[(1-q_t) N(s_S) + q_t N(s_S - y + x)], E_S N(s_S))``. By joint
    convexity of the hockey-stick divergence (reveal S and y) and rotation
    invariance, with ``|x - y| <= 2``, it is dominated by the add/remove
    Poisson-subsampled Gaussian pair at sigma/2 and rate q_t, both
    directions. (Revealing B as well would give the looser rate q b/(b+1)
    at the worst B = b; hiding it loses nothing above: the conditional laws
    given the coin do not depend on B.)

  Per m: ``(1-t) PG(sigma, q) + t PG(sigma/2, q_t)`` (t, q_t at m; PG:
  ``jaxacct.pld``'s Poisson-subsampled Gaussian pair; both directions); the
  upper is the worse of m = N and m = N + 1 (one of them alone when they
  coincide, e.g. no truncation at either). The bound is nearly tight
  (below), so the convention matters: at m = N alone, (N, q, b, sigma) =
  (20, 0.9, 19, 2.0) reports 0.55x the add neighbour's exact delta at
  eps = 1, add direction (tests/accounting/test_truncated_neighbours.py). dp_accounting
  0.6.0 (``from_truncated_subsampled_gaussian_mechanism``) uses the same mixture
  at m = ``dataset_size`` only, with the *replace-one* pair ``((1-q_t)
  N(0) + q_t N(1), (1-q_t) N(0) + q_t N(-1))`` at sigma/2 in the second
  branch ("a (slightly loose) upper bound", their comment). That pair
  dominates the add/remove pair in both directions (for a >= 1 the BBG
  identity gives ``H_a = q_t H_{a'}(N(1) || (1-b) N(0) + b N(y))``, y = -1
  for theirs, 0 for ours, and ``Q(x > c)`` is smaller at y = -1 on the
  upper sets where the divergence lives; numerically at std in {0.25, 0.5,
  1, 2} and q_t in {0.01, 0.1, 0.5, 0.9, 0.99}, eps in [0, 12];
  tests/accounting/test_truncated_compat.py keeps nine of them), so theirs is valid
  for the remove neighbour and ours is below it up to discretisation.
  ``construction="dp_accounting"`` builds theirs exactly as they do, at m =
  N only (:func:`jaxacct.accounting._mechanisms.poisson_gaussian_replace` in
  the second branch; our own code, for ``PLDAccountant(truncated=
  "dp_accounting")``, whose contract is their value): its slack covered the
  add neighbour in every brute-force case of
  tests/accounting/test_truncated_neighbours.py, but that is not proven. The default
  ``"jaxacct"`` builds ours. Brute force: the exact hockey stick of 1-D
  instances (x = 1, others in {-1, 0, 1}, every sampled set and truncation
  enumerated, both neighbours) stays below this bound, within 2% of it at
  n = 5, q = 0.8, b = 1, sigma = 1, two steps, delta = 1e-5 (9.825 vs
  10.002; tests/accounting/test_dp_accounting_conformance.py), within 0.1 % at n = 4,
  q = 0.95, b = 3, sigma = 2, one step, add direction. Lower: the instance whose
  other records are all 0 and x = 1: the target is in the batch with
  probability ``q_bar`` and the pair is exactly PG(sigma, q_bar), at the m
  of larger ``q_bar`` (m = N: more others, more truncation, smaller q_bar).

  ``neighbours``: ``"both"`` (default: the bound of the event), or one
  neighbour alone, ``"remove"`` (the mixture at m = N) or ``"add"`` (at m =
  N + 1), for checks of each neighbour's construction.

  Returns:
    ``PairPLD``. Bound: upper (pessimistic) / lower.
  """
  if construction not in CONSTRUCTIONS:
    raise ValueError(f"construction must be one of {CONSTRUCTIONS}; got "
                     f"{construction!r}.")
  checks.check_choice("neighbours", neighbours, ("both", "remove", "add"))
  n, q, b = int(n), float(q), int(b)
  # refused before allocating where one step's loss needs more points than the engine
  # runs (the truncated steps' shift 2: sensitivity 2)
  s = checks.accountable_sigma(sigma, step, max_points=jpld.MAX_WINDOW, sensitivity=2.0,
                               what="the truncated Poisson PLD")
  sizes = {"both": (n, n + 1), "remove": (n,), "add": (n + 1,)}[neighbours]
  if pessimistic and len(sizes) == 1:
    return _pair_at(sizes[0], q, b, s, step=step, construction=construction)
  if not pessimistic:
    qbar = max(_truncation_probabilities(m, q, b)[2] for m in sizes)
    if qbar >= 1.0:
      one = _mechanisms.gaussian_lower(s, step=step)
      return jpld.PairPLD(one, one)
    return _mechanisms.poisson_gaussian_lower(s, qbar, step=step)
  if construction == "dp_accounting" or _truncation_probabilities(n + 1, q, b)[0] <= 0.0:
    # theirs at m = N; or no truncation at N + 1 (hence at N): PG at both
    return _pair_at(n, q, b, s, step=step, construction=construction)
  # the untruncated branch (both m's) and the two m's truncated branches share
  # nothing: side by side (m = N + 1's on a helper, where one is free)
  branch = lambda m: _truncated_branch(m, q, b, s, step=step, construction=construction)
  (first, at_n), at_n1 = side_by_side(
      lambda: (jpld.poisson_gaussian_pair(s, q, step=step, pessimistic=True), branch(n)),
      lambda: branch(n + 1))
  return worse_of([_mixed(first, *at_n), _mixed(first, *at_n1)], step=step)


# --------------------------------------------------------------------------
# fixed batches drawn with replacement


def draw_count_law(n: int, m: int):
  """``(w, cut)``: ``w[k] = P(K = k)``, K ~ Bin(m, 1/n) (the draws of one record
  among m with replacement from n), k = 0..k_max, and the cut tail
  ``cut = P(K > k_max) <= 1e-20`` (0 when k_max = m)."""
  from scipy import stats   # here, not at import: scipy.stats is slow to import
  k = np.arange(0, m + 1)
  w = stats.binom.pmf(k, m, 1.0 / n)
  tail = stats.binom.sf(k, m, 1.0 / n)         # P(K > k)
  k_max = int(np.argmax(tail <= TAIL)) if np.any(tail <= TAIL) else m
  return w[:k_max + 1], float(tail[k_max])


def with_replacement_gaussian(n: int, m: int, sigma: float, *, step: float,
                              special_record: bool = False,
                              pessimistic: bool = True):
  r"""A batch of m draws with replacement from n records, then the Gaussian mechanism.

  dp_accounting's ``SampledWithReplacementDpEvent(n, m, GaussianDpEvent(sigma))``
  read as the PLD accountant reads ``GaussianDpEvent`` (norms <= 1, noise
  N(0, sigma^2) on the sum). The differing record is drawn K ~ Bin(m, 1/n)
  times; K has the same law under both neighbours, the other draws too.

  * replace-one (``special_record=False``): given K = k and the other
    draws, the pair is (N(s + k x), N(s + k x')), ``|x - x'| <= 2``, which
    the Gaussian pair of sensitivity 2k dominates. Revealing K is allowed
    (:func:`mixture`): upper = ``sum_k b_k G(2k/sigma)`` (k = 0: no
    loss). This bound amplifies delta only (no amplification in epsilon);
    no tight pair is known. Lower: the instance x = 1, x' = -1, other
    records 0: (sum_k b_k N(k), sum_k b_k N(-k)), whose loss is increasing
    in the output; cells merged onto the grid.
  * replace-special (``special_record=True``, x' contributes 0): the pair is
    (sum_k b_k N(k x), N(0)); a shorter x only adds noise
    (post-processing), so |x| = 1 is the worst case and the pair is exactly
    :func:`mixture_of_gaussians` with sensitivities k and weights b_k
    (both bounds).

  Terms with P(K > k_max) <= 1e-20 cut are charged to +inf (upper) and
  dropped (lower).

  Returns:
    ``PairPLD``. Bound: upper (pessimistic) / lower.
  """
  w, cut = draw_count_law(int(n), int(m))
  s = float(sigma)
  ks = np.arange(w.size, dtype=np.float64)
  if special_record:
    pair = mixture_of_gaussians(s, ks, w / np.sum(w), step=step, pessimistic=pessimistic)
    if pessimistic and cut > 0:
      pair = mixture([pair], [1.0 - cut], extra_inf=cut)
    return pair
  if pessimistic:
    parts, weights, extra = [], [], cut
    zero = jpld.from_losses(np.zeros(1), np.ones(1), step=step, pessimistic=True)
    for k, wk in enumerate(w):
      d = 2.0 * k / s
      if k == 0:
        parts.append(jpld.PairPLD(zero, zero))
      elif d * d / 2.0 + 10.0 * d > _MAX_LOSS:
        extra += wk                     # too wide a grid: charged to +inf
        continue
      else:
        g = jpld.gaussian(s, step=step, pessimistic=True, sensitivity=2.0 * k)
        parts.append(jpld.PairPLD(g, g))
      weights.append(wk)
    return mixture(parts, weights, extra_inf=extra)
  # lower: the +-1 instance
  z = normal_tail_z(TAIL)
  top = ks[-1] + z * s
  slope = 2.0 * ks[-1] / (s * s)
  n_cells = int(min(max(math.ceil(2 * top * slope / (0.5 * float(step))), 16), _MAX_CELLS))
  e = np.linspace(-top, top, n_cells + 1)
  ea = np.concatenate([[-np.inf], e])
  eb = np.concatenate([e, [np.inf]])
  lw = np.log(w)[None, :]
  lp = special.logsumexp(
      lw + host_call(log_ndtr_diff, (ea[:, None] - ks) / s, (eb[:, None] - ks) / s), axis=1)
  lq = special.logsumexp(
      lw + host_call(log_ndtr_diff, (ea[:, None] + ks) / s, (eb[:, None] + ks) / s), axis=1)
  one = dominated_on_grid(np.exp(lp), np.exp(lq), step=step)
  return jpld.PairPLD(one, one)

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
