r"""Membership-inference risk of DP-SGD, and calibrating the noise to it.

The hypothesis-testing view of a neighbouring pair (A = the output law with a
record, B = without it): an attack that says "member" with false-positive
rate :math:`\alpha = B(\text{say member})` has true-positive rate at most

Proofs and sources: docs/bounds/dpsgd.md ("Bounds and proofs /
DP-SGD: schedule, samplers, statement, risk").
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import numpy as np

from jaxacct._core import checks
from jaxacct._core import progress as _progress
from jaxacct._core.dtype import public_surface
from jaxacct._core.progress import check_progress_arg
from jaxacct._core.solve import search_decreasing_host
from jaxacct.accounting import TradeOff
from jaxacct.dpsgd import Schedule, samplers, schedule

# ``TradeOff`` (the result of tpr_from_plds) is public in ``jaxacct.accounting``
__all__ = ["Advantage", "tpr_from_plds", "advantage_from_plds", "tpr_at_fpr",
           "advantage", "calibrate_noise_multiplier"]

_U = 2.0 ** -53
_SIGMA_MIN, _SIGMA_MAX = 1e-2, 1e4     # calibration search range (as jaxacct.dpsgd)
#: Lower-side allowance for FFT aliasing of the optimistic compositions (each
#: composes with tail_mass <= 1e-18; allocation_plds with 1e-30).
LOWER_ALLOWANCE = 1e-12
_CHUNK = 1 << 22                       # grid points x FPRs per NumPy block


class _Pair(NamedTuple):
  remove: object
  add: object


class Advantage(NamedTuple):
  """Membership advantage bracket ``max_alpha TPR(alpha) - alpha`` (total variation).

  Attributes:
    upper: certified upper bound (no attack has a larger advantage).
    lower: lower bound on the best attack's advantage against the accounted
      pair (NaN where no lower PLD is known).
  """
  upper: float
  lower: float


# ---------------------------------------------------------------------------
# the trade-off of one discrete PLD (host NumPy)
# ---------------------------------------------------------------------------

def _curve(pld, upper: bool, full: bool = False):
  """(points, delta at them) of one PLD, with the rounding ledger applied.

  ``full=False``: epsilon = 0 and the kinks (grid losses with mass) >= 0;
  ``full=True``: every kink, negative ones too. Recursion (sums of
  non-negative terms only): delta(l_{j-1}) = delta(l_j) + (1 - e^{-h}) R_j,
  R_j = sum_{i>=j} p_i e^{-(i-j)h} = p_j + e^{-h} R_{j+1}.
  """
  from scipy.signal import lfilter
  p = np.asarray(pld.probs, np.float64).ravel()
  h, off, m = float(pld.step), int(pld.offset), float(pld.inf_mass)
  n = p.size
  l = (off + np.arange(n)) * h
  c = 4.0 * (n + 2) * _U
  R = lfilter([1.0], [1.0, -math.exp(-h)], p[::-1])[::-1]
  tail = np.concatenate([np.cumsum(R[:0:-1])[::-1], [0.0]])      # sum_{i>j} R_i
  d = m + (-math.expm1(-h)) * tail
  keep = (p > 0) if full else (l >= 0) & ((p > 0) | (l == 0))     # kinks (and eps = 0)
  eps, dl = l[keep], d[keep]
  if not full and not np.any(l == 0):     # eps = 0 off the grid: delta(0) directly
    d0 = m + float(np.sum(p[l > 0] * -np.expm1(-l[l > 0])))
    eps, dl = np.concatenate([[0.0], eps]), np.concatenate([[d0], dl])
  return eps, dl * ((1 + c) if upper else (1 - c))


def _orientation(fwd, rev, a, upper: bool):
  """TPR bound at FPRs ``a`` (1-D) for the orientation (fwd = A||B, rev = B||A).

  Upper: the two halves of the module docstring's formula (epsilon >= 0 of
  both directions: what a dominating pair certifies). Lower: the exact
  infimum over every real epsilon of the optimistic ``fwd`` alone (its
  delta is below the true one at every epsilon: rounding losses down and
  dropping mass lower every hockey stick), with gamma -> 0 giving its total
  mass; so the lower needs no relation between the two directions.
  """
  s = 16 * _U
  out = np.ones(a.shape)
  with np.errstate(over="ignore", invalid="ignore"):
    if upper:
      e1, d1 = _curve(fwd, True)
      e2, d2 = _curve(rev, True)
      step = max(1, _CHUNK // max(e1.size, e2.size, 1))
      for i in range(0, a.size, step):
        ac = a[i:i + step, None]
        v1 = np.min(d1[None, :] + np.exp(e1)[None, :] * ac, axis=1)
        v2 = np.min(1.0 - np.exp(-e2)[None, :] * (1.0 - d2[None, :] - ac), axis=1)
        out[i:i + step] = np.minimum(np.minimum(v1, v2), 1.0)
      return np.clip(out * (1 + s) + s, 0.0, 1.0)
    e1, d1 = _curve(fwd, False, full=True)
    total = float(np.sum(np.asarray(fwd.probs, np.float64))) + float(fwd.inf_mass)
    step = max(1, _CHUNK // max(e1.size, 1))
    for i in range(0, a.size, step):
      ac = a[i:i + step, None]
      v1 = np.min(d1[None, :] + np.exp(e1)[None, :] * ac, axis=1, initial=np.inf)
      out[i:i + step] = np.minimum(np.minimum(v1, total * (1 - s)), 1.0)
  return np.clip(out * (1 - s) - s, 0.0, 1.0)


def _orientations(pair, direction):
  checks.check_choice("direction", direction, ("remove", "add", "both"))
  if not hasattr(pair, "remove"):   # one PLD: a symmetric pair (remove = add)
    pair = _Pair(pair, pair)
  both = [(pair.remove, pair.add), (pair.add, pair.remove)]
  return {"remove": both[:1], "add": both[1:], "both": both}[direction]


def tpr_from_plds(upper, fpr, *, lower=None, direction: str = "both",
                  lower_allowance: float = 0.0) -> TradeOff:
  r"""TPR bracket of the best membership-inference attack at each FPR, from PLDs.

  Dong, Roth & Su, arXiv:1905.02383v3, Prop. 2.12; Kulynych et al.,
  arXiv:2407.02191 (see the module docstring for the formula and its
  symmetric side).

  Args:
    upper: ``jaxacct.pld.PairPLD`` of pessimistic (dominating) PLDs, or one
      ``jaxacct.pld.PLD`` (a symmetric pair: both directions equal).
    fpr: false-positive rates in [0, 1], any shape.
    lower: ``PairPLD`` of optimistic (dominated) PLDs, or None.
    direction: ``"remove"`` (H1: member), ``"add"`` (H1: non-member) or
      ``"both"`` (max).
    lower_allowance: delta mass the lower PLDs may overstate by (aliasing),
      >= 0; subtracted from the lower TPR.

  Returns:
    :class:`TradeOff` ``(fpr, upper, lower)``: float64 arrays of ``fpr``'s
    shape (``lower`` NaN without lower PLDs; clipped to [fpr, upper]).

  Bound: upper (``upper``: no attack does better against the mechanism the
  PLDs dominate) and lower (``lower``). Nothing is compiled (host NumPy).
  """
  a = np.asarray(fpr, np.float64)
  checks.check_probability("fpr", a)
  checks.check_range("lower_allowance", lower_allowance, 0.0, 1.0)
  flat = a.ravel()
  up = _bound(upper, flat, direction, True)
  lo = (np.full(flat.shape, np.nan) if lower is None else
        np.clip(_bound(lower, flat, direction, False) - float(lower_allowance), flat, up))
  return TradeOff(a, up.reshape(a.shape), lo.reshape(a.shape))


def _bound(pair, a, direction, upper: bool):
  """Max over the orientations of :func:`_orientation` (>= the FPR: a coin flip)."""
  v = np.max([_orientation(f, r, a, upper) for f, r in _orientations(pair, direction)], axis=0)
  return np.maximum(v, a)


def advantage_from_plds(upper, *, lower=None, lower_allowance: float = 0.0) -> Advantage:
  r"""Membership advantage ``max_alpha TPR - FPR`` = total variation ``delta(0)``.

  The hockey-stick divergence at epsilon = 0 (Kulynych et al.,
  arXiv:2407.02191, Sec. 3; Dong, Roth & Su, arXiv:1905.02383v3, Sec. 2).
  Both directions bound the same worst-case total variation, so the upper is
  the smaller of the two upper values and the lower the larger of the lower.

  Args:
    upper, lower, lower_allowance: as in :func:`tpr_from_plds`.

  Returns:
    :class:`Advantage` ``(upper, lower)`` (floats; lower NaN without lower PLDs).

  Bound: upper and lower.
  """
  checks.check_range("lower_allowance", lower_allowance, 0.0, 1.0)
  up = min(1.0, _adv(upper, True))
  lo = float("nan")
  if lower is not None:
    lo = float(np.clip(_adv(lower, False) - float(lower_allowance), 0.0, up))
  return Advantage(up, lo)


def _adv(pair, upper: bool):
  """delta(0) of a pair: both directions bound the same total variation, so the
  smaller upper and the larger lower are kept."""
  d = [float(_curve(p, upper)[1][0]) for p in (
      (pair.remove, pair.add) if hasattr(pair, "remove") else (pair,))]
  s = 16 * _U
  return min(d) * (1 + s) + s if upper else max(d) * (1 - s) - s


# ---------------------------------------------------------------------------
# DP-SGD configurations
# ---------------------------------------------------------------------------

def _gauss_tpr(mu, a, upper: bool):
  """TPR of mu-GDP, ``Phi(Phi^-1(alpha) + mu)`` (exact), moved by 1e-9 relative
  and 1e-15 absolute toward ``upper``'s side (a generous margin for scipy's
  ndtr/ndtri, whose relative error here is of order 1e-14; tests compare with
  mpmath at 50 digits)."""
  from scipy.special import ndtr, ndtri
  with np.errstate(divide="ignore"):
    v = ndtr(ndtri(a) + mu)
  s = 1e-9
  return np.clip(v * (1 + s) + 1e-15 if upper else v * (1 - s) - 1e-15, 0.0, 1.0)


def _gauss_adv(mu):
  """Total variation of N(0, 1) and N(mu, 1), ``2 Phi(mu / 2) - 1``, moved up as
  :func:`_gauss_tpr`."""
  from scipy.special import ndtr
  return min(1.0, (2 * ndtr(mu / 2) - 1) * (1 + 1e-9) + 1e-15)


@functools.lru_cache(maxsize=8)
def _plds(sched: Schedule, sigma: float, want_lower: bool):
  """(upper PairPLD or None, lower PairPLD or None) of one configuration: the
  sampler's (:meth:`jaxacct.dpsgd.Sampler.plds`). Shuffle has no upper PLD (its
  upper is the exact Gaussian)."""
  return samplers.get(sched.sampling).plds(sched, sigma, want_lower)


def _key(sched: Schedule, sigma: float, want_lower: bool):
  return sched, float(sigma), bool(want_lower)


def _local_mu(sched: Schedule, sigma):
  """mu of the no-amplification bound, where the run post-processes m full-batch
  Gaussian steps (k E for balls_in_bins and shuffle; exact, as dpsgd)."""
  m = samplers.get(sched.sampling).no_amplification
  return None if m is None else math.sqrt(m(sched)) / float(sigma)


def _tpr(sched, sigma, a, direction, want_lower):
  """(upper, lower) TPR arrays at flat FPRs ``a`` for one sigma."""
  up_p, lo_p = _plds(*_key(sched, sigma, want_lower))
  mu = _local_mu(sched, sigma)
  up = np.ones(a.shape) if up_p is None else _bound(up_p, a, direction, True)
  if mu is not None:         # balls_in_bins: min with no amplification; shuffle: it
    up = np.minimum(up, np.maximum(_gauss_tpr(mu, a, True), a))
  lo = np.full(a.shape, np.nan)
  if lo_p is not None:
    lo = np.clip(_bound(lo_p, a, direction, False) - LOWER_ALLOWANCE, a, up)
  return up, lo


def _sched(progress, num_examples, batch_size, num_epochs, sampling, num_selected,
           total_steps, direction, settings):
  check_progress_arg(progress)
  checks.check_choice("direction", direction, ("remove", "add", "both"))
  return schedule(num_examples=num_examples, batch_size=batch_size, num_epochs=num_epochs,
                  sampling=sampling, num_selected=num_selected, total_steps=total_steps,
                  **settings)


def _scalar_sigma(noise_multiplier):
  if isinstance(noise_multiplier, (str, bytes, bool)) or np.ndim(noise_multiplier):
    raise ValueError(f"noise_multiplier must be a scalar number > 0; got {noise_multiplier!r}.")
  checks.check_sigma("noise_multiplier", noise_multiplier)
  return float(noise_multiplier)


def tpr_at_fpr(fpr, *, noise_multiplier, num_examples, batch_size, num_epochs=None,
               sampling: str = "balls_in_bins", num_selected: int = 1, total_steps=None,
               direction: str = "both", with_lower: bool = True,
               progress: Optional[bool] = None, **settings) -> TradeOff:
  r"""TPR bracket of the best membership-inference attack on a DP-SGD run, at FPRs.

  The trade-off (module docstring; Dong, Roth & Su, arXiv:1905.02383v3;
  Kulynych et al., arXiv:2407.02191) of the pair that
  :func:`jaxacct.dpsgd.epsilon` accounts, per ``sampling``:

  * ``"balls_in_bins"``: the tight allocation PLDs
    (:func:`jaxacct.allocation.pld.allocation_plds`), and the smaller of that
    and the no-amplification Gaussian (mu = sqrt(k E) / sigma), as for epsilon;
    lower from the optimistic allocation PLDs (k = 1).
  * ``"poisson"``: the Poisson-subsampled Gaussian PLDs
    (:func:`jaxacct.pld.poisson_gaussian_composed`), upper and lower.
  * ``"shuffle"``: no amplification, mu-GDP with mu = sqrt(E) / sigma (exact:
    ``Phi(Phi^-1(alpha) + mu)``); lower from 1-of-t allocation when B | N.
  * the other samplers (:mod:`jaxacct.dpsgd.samplers`): the accountant's
    composed PLDs of the run's event (:func:`jaxacct.dpsgd.event`).

  Args:
    fpr: false-positive rates in [0, 1] (any shape; one PLD serves them all).
    noise_multiplier: sigma > 0 (scalar).
    num_examples, batch_size, num_epochs, sampling, num_selected, total_steps,
      **settings: the configuration, as in :func:`jaxacct.dpsgd.schedule`.
    direction: "remove", "add" or "both" (default: the max).
    with_lower: also the lower bound (costs a second, optimistic PLD).
    progress: None (global switch), True or False.

  Returns:
    :class:`TradeOff` ``(fpr, upper, lower)``, float64 arrays of ``fpr``'s
    shape (``lower`` NaN where none is known or ``with_lower=False``).

  Bound: upper (``upper``) and lower (``lower``).
  """
  sched = _sched(progress, num_examples, batch_size, num_epochs, sampling, num_selected,
                 total_steps, direction, settings)
  sigma = _scalar_sigma(noise_multiplier)
  checks.check_bool("with_lower", with_lower)
  a = np.asarray(fpr, np.float64)
  checks.check_probability("fpr", a)
  desc = f"jaxacct.risk tpr_at_fpr ({sched.sampling}, E={sched.num_epochs:g})"
  with _progress.progress(total=None, desc=desc, enabled=progress):
    up, lo = _tpr(sched, sigma, a.ravel(), direction, bool(with_lower))
  return TradeOff(a, up.reshape(a.shape), lo.reshape(a.shape))


def advantage(*, noise_multiplier, num_examples, batch_size, num_epochs=None,
              sampling: str = "balls_in_bins", num_selected: int = 1, total_steps=None,
              with_lower: bool = True, **settings) -> Advantage:
  r"""Membership advantage bracket (max_alpha TPR - FPR) of a DP-SGD run.

  ``delta(0)`` (total variation) of the pair of :func:`tpr_at_fpr`, both
  directions (Kulynych et al., arXiv:2407.02191).

  Args: as :func:`tpr_at_fpr` (no ``fpr``).

  Returns:
    :class:`Advantage` ``(upper, lower)``.

  Bound: upper and lower.
  """
  sched = _sched(None, num_examples, batch_size, num_epochs, sampling, num_selected,
                 total_steps, "both", settings)
  sigma = _scalar_sigma(noise_multiplier)
  checks.check_bool("with_lower", with_lower)
  up_p, lo_p = _plds(*_key(sched, sigma, bool(with_lower)))
  up = 1.0 if up_p is None else min(1.0, _adv(up_p, True))
  mu = _local_mu(sched, sigma)
  if mu is not None:
    up = min(up, _gauss_adv(mu))
  lo = float("nan")
  if lo_p is not None:
    lo = float(np.clip(_adv(lo_p, False) - LOWER_ALLOWANCE, 0.0, up))
  return Advantage(float(up), lo)


def _gdp_rate(sched: Schedule):
  """The rate of the CLT model (the sampler's ``gdp_rate``), or None where the
  run is exactly mu-GDP with mu = sqrt(m) / sigma."""
  rate = samplers.get(sched.sampling).gdp_rate
  return None if rate is None else rate(sched)


def _exact_m(sched: Schedule):
  return samplers.get(sched.sampling).no_amplification(sched)


def _clt_mu(sched: Schedule, sigma):
  """Gaussian-DP (CLT) model mu = q sqrt(T (e^{1/s^2} - 1)) (Dong, Roth & Su,
  arXiv:1905.02383v3, Sec. 5, the CLT of composed subsampled Gaussians; at
  rate k/t for balls-in-bins), a starting point only; exact for
  shuffle (mu = sqrt(E) / s)."""
  q = _gdp_rate(sched)
  if q is None:
    return math.sqrt(_exact_m(sched)) / sigma
  return q * np.sqrt(sched.total_steps * np.expm1(np.minimum(1.0 / sigma**2, 700.0)))


def _clt_sigma(sched: Schedule, mu):
  """Inverse of :func:`_clt_mu` in sigma."""
  q = _gdp_rate(sched)
  if q is None:
    return math.sqrt(_exact_m(sched)) / mu
  with np.errstate(divide="ignore"):
    return 1.0 / np.sqrt(np.log1p(mu**2 / (q * q * sched.total_steps)))


def _mu_of(target, alpha):
  """mu-GDP parameter with the same TPR at alpha (or the same advantage)."""
  from scipy.special import ndtri
  if alpha is None:
    return 2 * ndtri((1 + target) / 2)
  return ndtri(target) - ndtri(alpha)


def _start(sched, target, alpha, upper_fn):
  """(hint, tight, known) for :func:`search_decreasing_host`: the CLT sigma, one
  evaluation there, and the CLT model rescaled by the mu it implies (one
  evaluation buys a start within a few per cent at small FPR, where the CLT
  alone is 10-30 % low)."""
  mu_t = _mu_of(target, alpha)
  h0 = np.clip(_clt_sigma(sched, mu_t), _SIGMA_MIN, _SIGMA_MAX)
  if _gdp_rate(sched) is None:
    return h0, True, None
  u0 = upper_fn(h0, np.arange(target.size))
  mu_eff = _mu_of(np.clip(u0, 1e-300, 1 - 1e-16), alpha)
  with np.errstate(divide="ignore", invalid="ignore"):
    scale = np.where(np.isfinite(mu_eff) & (mu_eff > 0), mu_eff / _clt_mu(sched, h0), 1.0)
  h1 = np.clip(_clt_sigma(sched, mu_t / np.maximum(scale, 1e-6)), _SIGMA_MIN, _SIGMA_MAX)
  return h1, False, (h0[None], u0[None])


def calibrate_noise_multiplier(*, num_examples, batch_size, tpr=None, fpr=None,
                               advantage=None, num_epochs=None,
                               sampling: str = "balls_in_bins", num_selected: int = 1,
                               total_steps=None, direction: str = "both",
                               rtol: float = 1e-3, progress: Optional[bool] = None,
                               **settings):
  r"""Smallest certified noise multiplier whose attack risk meets each target.

  Targets (arrays broadcast; one call for several): either ``tpr`` at
  ``fpr`` (the upper TPR of :func:`tpr_at_fpr` at ``fpr`` must be <= ``tpr``)
  or ``advantage`` (the upper of :func:`advantage` <= the target). The
  risk-calibration problem of Kulynych et al., arXiv:2407.02191 (Poisson in
  riskcal); here for every ``sampling`` of :mod:`jaxacct.dpsgd`, including
  balls-in-bins with its tight allocation PLD.

  Search: a Gaussian-DP (CLT) model gives a first sigma per target, one
  evaluation there rescales the model for a second start; then
  :func:`jaxacct._core.solve.search_decreasing_host` (bracketing and secant
  steps on log sigma) with the certified upper bound itself, so each
  returned sigma is evaluated feasible and ``sigma / (1 + rtol)`` infeasible
  (a sigma the PLD refuses, too small for its grid or too many steps at it,
  counts as infeasible: its bound is read as 1).
  Each evaluation builds one upper PLD (the programs of
  :func:`jaxacct.dpsgd.epsilon`'s PLD paths; nothing new is compiled here).

  Args:
    num_examples, batch_size, num_epochs, sampling, num_selected, total_steps,
      **settings: the configuration, as in :func:`jaxacct.dpsgd.schedule`.
    tpr: target true-positive rate(s) in (fpr, 1); with ``fpr``.
    fpr: false-positive rate(s) in (0, 1).
    advantage: target advantage(s) in (0, 1) (instead of tpr/fpr).
    direction: "remove", "add" or "both" (TPR targets only).
    rtol: relative tolerance on sigma, in (0, 0.1].
    progress: None (global switch), True or False.

  Returns:
    float (scalar targets) or float64 numpy array of the broadcast shape.

  Raises:
    ValueError: invalid input, or a target that needs sigma > 1e4.

  Bound: upper (each sigma is certified: its TPR / advantage upper bound
  meets the target).
  """
  sched = _sched(progress, num_examples, batch_size, num_epochs, sampling, num_selected,
                 total_steps, direction, settings)
  checks.check_range("rtol", rtol, 0.0, 0.1, lo_open=True)
  if advantage is not None:
    if tpr is not None or fpr is not None:
      raise ValueError("give either advantage or (tpr, fpr), not both; got "
                       f"advantage={advantage!r}, tpr={tpr!r}, fpr={fpr!r}.")
    adv = np.asarray(advantage, np.float64)
    checks.check_range("advantage", adv, 0.0, 1.0, lo_open=True, hi_open=True)
    shape, target = adv.shape, adv.ravel().copy()
    alpha = None
  else:
    if tpr is None or fpr is None:
      raise ValueError(f"give tpr and fpr together (or advantage); got tpr={tpr!r}, "
                       f"fpr={fpr!r}.")
    t_, a_ = np.broadcast_arrays(np.asarray(tpr, np.float64), np.asarray(fpr, np.float64))
    checks.check_range("fpr", a_, 0.0, 1.0, lo_open=True, hi_open=True)
    checks.check_range("tpr", t_, 0.0, 1.0, lo_open=True, hi_open=True)
    if np.any(t_ <= a_):
      i = np.flatnonzero((t_ <= a_).ravel())[0]
      raise ValueError(f"tpr must be > fpr (TPR = FPR is a coin flip, met by no finite "
                       f"noise); got tpr={t_.ravel()[i]:g} at fpr={a_.ravel()[i]:g}.")
    shape, target, alpha = t_.shape, t_.ravel().copy(), a_.ravel().copy()
  what = "advantage" if alpha is None else "TPR at FPR"
  desc = (f"jaxacct.risk calibrating noise_multiplier to {what} ({sched.sampling}, "
          f"E={sched.num_epochs:g}, {target.size} target{'s' if target.size > 1 else ''})")
  with _progress.progress(total=None, desc=desc, enabled=progress) as bar:

    def upper_fn(s, idx):
      out = np.empty(len(idx))
      for j, (sj, ij) in enumerate(zip(np.asarray(s, np.float64), idx)):
        try:
          if alpha is None:
            out[j] = advantage_upper(float(sj))
          else:
            out[j] = _tpr(sched, float(sj), alpha[ij:ij + 1], direction, False)[0][0]
        except checks.WindowTooLarge:   # a sigma the PLD refuses: 1 bounds it (infeasible)
          out[j] = 1.0
        bar.update(1)
      return out

    def advantage_upper(sj):
      up_p, _ = _plds(*_key(sched, sj, False))
      v = 1.0 if up_p is None else min(1.0, _adv(up_p, True))
      mu_loc = _local_mu(sched, sj)
      return v if mu_loc is None else min(v, _gauss_adv(mu_loc))

    try:
      hint, tight, known = _start(sched, target, alpha, upper_fn)
      sig = search_decreasing_host(upper_fn, target, hint, tight_hint=tight,
                                   rtol=float(rtol), bounds=(_SIGMA_MIN, _SIGMA_MAX),
                                   name="noise_multiplier", bar=bar, known=known)
    except ValueError as err:
      raise ValueError(f"{err} ({what} target; sampling={sched.sampling!r})") from None
  sig = sig.reshape(shape)
  return float(sig) if sig.ndim == 0 else sig

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
