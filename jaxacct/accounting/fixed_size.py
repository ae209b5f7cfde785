r"""Fixed-size batches under replace-one neighbours: dominating pairs for the Gaussian.

dp_accounting's ``SampledWithoutReplacementDpEvent(n, m, GaussianDpEvent(sigma))``
(a uniform m-subset of the n records) and ``SampledWithReplacementDpEvent``
(m independent uniform draws), ``REPLACE_ONE`` neighbours, the Gaussian read
as dp_accounting's PLD accountant reads it: each record contributes a vector
of norm <= 1 to the sum, the noise is N(0, sigma^2 I), so replacing a record
moves the sum of a batch that holds it by up to 2 (dp_accounting's RDP
accountant reads the same event with the replace-one sensitivity 1: halve
sigma to compare with it).

Proofs and sources: docs/bounds/fixed_size.md ("Bounds and proofs /
Fixed-size batches").
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxacct import pld
from jaxacct._core import checks
from jaxacct._core.dtype import public_surface
from jaxacct._core.logmath import log_ndtr_diff
from jaxacct._core.namespace import host_call
from jaxacct.accounting import _mechanisms
from jaxacct.accounting import _wr_profiles
from jaxacct.accounting import mixtures
from jaxacct.accounting._pairs import dominated_on_grid

__all__ = ["symmetrize", "without_replacement_pair",
           "with_replacement_pair", "adaptive_lower_delta", "kernels_lower_delta",
           "with_replacement_profile"]

#: a component whose one-step loss range would exceed this is charged to +inf.
_MAX_LOSS = 400.0
#: profile value below which the with-replacement upper's grid stops (the rest to +inf).
_TINY = 1e-20
#: largest loss grid of the adaptive program when it widens its range itself.
_MAX_GRID = 1 << 23


def _pld():
  return pld


def symmetrize(remove):
  r"""The symmetric PLD whose profile for eps >= 0 is that of ``remove``.

  ``remove`` (a pessimistic grid PLD, the P-law of ``L = ln dP/dQ``) is kept
  on losses > 0; its mirror ``e^{-l} w(l)`` goes to ``-l`` (the Q-law of L,
  reflected: a symmetric pair has ``w(-l) = e^{-l} w(l)``), the rest of the
  mass to loss 0, +inf mass kept. For eps >= 0 the profile is unchanged;
  for eps < 0 it is ``1 - e^eps + e^eps delta(-eps)``, the profile of any
  symmetric pair with that positive part. It therefore dominates every pair
  (P, Q) whose profiles in *both* directions lie below ``remove``'s for
  eps >= 0 (Zhu, Dong, Wang, arXiv:2106.08567v2, Sec. 3: a pair is
  determined by its profile; the symmetric profile is the pointwise max).

  Raises:
    ValueError: if the mass left for loss 0 is negative (``remove`` is
      then not the profile of any symmetric pair: ``P(L>0) + Q(L>0) > 1``).

  Returns:
    PLD (pessimistic). Bound: upper when ``remove`` is.
  """
  E = _pld()
  probs = np.asarray(remove.probs, np.float64)
  h, off = float(remove.step), int(remove.offset)
  inf = float(remove.inf_mass)
  idx = off + np.arange(probs.size)
  pos = idx > 0
  top = int(idx[pos][-1]) if np.any(pos & (probs > 0)) else 0
  if top <= 0:
    return E.PLD(np.ones(1), 0, h, np.float64(inf),
                 True)
  w = np.zeros(top + 1)
  sel = pos & (idx <= top)
  w[idx[sel]] = probs[sel]
  mirror = w[1:] * np.exp(-h * np.arange(1, top + 1))
  zero = 1.0 - inf - float(np.sum(w[1:])) - float(np.sum(mirror))
  if zero < -1e-12:
    raise ValueError(f"symmetrize: remove PLD has P(L>0) + Q(L>0) > 1 "
                     f"(loss-0 mass {zero:.3g}); no symmetric pair has its profile.")
  out = np.concatenate([mirror[::-1], [max(zero, 0.0)], w[1:]])
  out = np.pad(out, (0, _bucket(out.size) - out.size))   # few shapes: few compiles
  # NumPy arrays (a host PLD): a device copy would compile a program per length
  return E.PLD(out, -top, h, np.float64(inf), True)


def _padded(pair):
  """Both PLDs of ``pair`` zero-padded to a bucketed length (no new program
  downstream for a new n, m or sigma)."""
  E = _pld()
  out = []
  for p in pair:
    a = np.asarray(p.probs, np.float64)
    a = np.pad(a, (0, _bucket(a.size) - a.size))
    out.append(E.PLD(a, p.offset, p.step, p.inf_mass, p.pessimistic))   # host arrays
  return E.PairPLD(*out)


def _bucket(n: int) -> int:
  """Smallest 2^a or 3 * 2^(a-2) >= n (the grid lengths jaxacct.pld buckets to)."""
  p = 1 << (max(int(n), 1) - 1).bit_length()
  return 3 * p // 4 if p >= 4 and 3 * p // 4 >= n else p


def _check(n, m, sigma, step):
  checks.check_int("n", n, min_value=1, scalar=True)
  checks.check_int("m", m, min_value=0, scalar=True)
  checks.check_sigma("sigma", sigma, scalar=True)
  checks.check_positive("step", step, scalar=True)


def without_replacement_pair(n: int, m: int, sigma: float, *, step: float,
                             pessimistic: bool = True):
  r"""One step of m-of-n sampling without replacement, then the Gaussian (replace-one).

  Upper (``pessimistic=True``): :func:`symmetrize` of the remove PLD of
  ``((1-q) N(0, sigma^2) + q N(2, sigma^2), N(0, sigma^2))``, q = m/n
  (docs/bounds/fixed_size.md: the exact one-step profile, from Balle, Barthe,
  Gaboardi, arXiv:1807.01647v2, Thm 2; both orders of the neighbours).
  Lower: that pair (remove) and its reverse (add), cells merged onto the
  grid: the instance x = e, x' = -e, other records at -e (resp. +e).
  m = n is the Gaussian of sensitivity 2 (both bounds).

  Returns:
    ``PairPLD``. Bound: upper (pessimistic) / lower.
  """
  _check(n, m, sigma, step)
  if not 1 <= m <= n:
    raise ValueError(f"need 1 <= m <= n; got m={m}, n={n}.")
  E = _pld()
  q = m / n
  s = checks.accountable_sigma(sigma, step, max_points=pld.MAX_WINDOW, sensitivity=2.0,
                               what="the fixed-size PLD") / 2.0
  if m == n:
    if pessimistic:
      g = E.gaussian(s, step=step, pessimistic=True)
      return E.PairPLD(g, g)
    g = _mechanisms.gaussian_lower(s, step=step)
    return E.PairPLD(g, g)
  if not pessimistic:
    return _padded(_mechanisms.poisson_gaussian_lower(s, q, step=step))
  one = symmetrize(E.poisson_gaussian(s, q, direction="remove", step=step,
                                      pessimistic=True))
  return E.PairPLD(one, one)


def with_replacement_pair(n: int, m: int, sigma: float, *, step: float,
                          pessimistic: bool = True):
  r"""One step of m draws with replacement from n records, then the Gaussian (replace-one).

  Upper: :func:`symmetrize` of the connect-the-dots PLD of
  :func:`with_replacement_profile`'s ``upper`` (docs/bounds/fixed_size.md, "With
  replacement"; +1e-9 relative for float error; the cut tail P(K > k_max)
  <= 1e-20 and the profile past delta 1e-20 go to +inf). Lower: the
  instance x = e, x' = -e, other records at -e: ``(sum_k P(K=k) N(2k),
  N(0))`` (remove) and its reverse (add), cells merged onto the grid. n = 1
  is the Gaussian of sensitivity 2m.

  Returns:
    ``PairPLD``. Bound: upper (pessimistic) / lower.
  """
  _check(n, m, sigma, step)
  if m < 1:
    raise ValueError(f"need m >= 1; got m={m}.")
  E = _pld()
  w, cut = mixtures.draw_count_law(int(n), int(m))
  s = min(float(sigma), checks.SIGMA_MAX)   # more noise is a post-processing
  if not pessimistic:
    try:
      checks.accountable_sigma(s, step, max_points=pld.MAX_WINDOW, sensitivity=2.0)
    except ValueError:   # a grid past the engine's (tiny sigma): the trivial lower, loss 0
      none = E.PLD(jnp.ones(1), 0, float(step), jnp.zeros((), jnp.float64), False)
      return _padded(E.PairPLD(none, none))
    ks = 2.0 * np.arange(w.size)
    return _padded(mixtures.mixture_of_gaussians(s, ks, w / np.sum(w), step=step,
                                           pessimistic=False))
  return E.PairPLD(*(2 * [_split_upper(n, m, s, step)]))


def with_replacement_profile(n: int, m: int, sigma: float, eps):
  r"""One-step privacy profile bounds of m draws with replacement from n, then the Gaussian.

  For ``eps >= 0`` (array), with K ~ Bin(m, 1/n), ``r = P(K >= 1)``,
  ``pi_k = P(K = k) / r``, ``a = e^eps``, ``a' = 1 + (a - 1)/r``,
  ``b = a/a'``:

  * ``hidden = r H_{a'}(sum_k pi_k N(2k, sigma^2) || N(0, sigma^2))``: the
    exact profile of the instance x = e, x' = -e, other records at -e
    (remove order); a lower bound on the tightest one-step profile.
  * ``revealed = r sum_k pi_k H_{a'}(N(2k, sigma^2) || N(0, sigma^2))``:
    the draw count revealed (the upper before; docs/bounds/fixed_size.md).
  * ``upper = hidden + b (revealed - hidden)`` plus the cut tail
    P(K > k_max): above every dataset pair's profile, both orders (module
    docstring, "With replacement").

  Returns:
    ``(upper, revealed, hidden)``, float64 arrays shaped like ``eps``
    (``revealed`` and ``upper`` include the cut tail).

  Bound: ``upper`` and ``revealed`` upper, ``hidden`` exact for one instance
  (a lower bound). Float error: ~1e-15 relative (``ndtr`` and the
  cancellation in ``P(S) - a' Q(S)``), covered by the 1e-9 relative margin
  :func:`with_replacement_pair` adds.
  """
  _check(n, m, sigma, 1.0)
  if m < 1:
    raise ValueError(f"need m >= 1; got m={m}.")
  eps = np.asarray(eps, np.float64)
  if np.any(~(eps >= 0)):
    raise ValueError("eps must be >= 0 (an array of non-negative floats).")
  w, cut = mixtures.draw_count_law(int(n), int(m))
  flat = eps.ravel()
  up, rev, hid = _wr_profiles.split(w, sigma, flat)
  up = np.minimum(up, _wr_profiles.double_mixture(w, sigma, flat))
  return tuple(v.reshape(eps.shape) for v in (up + cut, rev + cut, hid))


def _split_upper(n, m, sigma, step):
  """The symmetric PLD of :func:`with_replacement_pair`'s upper: connect-the-dots
  on the profile ``upper`` at grid points (eps = j step): every one while
  delta > 1e-12, every 16th after, up to delta <= 1e-20 (the rest to +inf).
  Any set of points is valid: a profile is convex in e^eps, so the chords of
  its values lie above it."""
  h = float(step)
  coarse = np.arange(0.0, _MAX_LOSS + 1.0, 1.0)
  cu = with_replacement_profile(n, m, sigma, coarse)[0]

  def last(level):
    return int(math.ceil(coarse[np.argmax(cu <= level)] / h)) if np.any(cu <= level) else (
        int(math.ceil(_MAX_LOSS / h)))
  j1, j2 = last(1e-12), last(_TINY)
  if j1 * h >= _MAX_LOSS:
    # the profile is above 1e-12 up to the cap (a tiny sigma): the chords through
    # the coarse points (whole eps), not millions of evaluations of the profile
    j = np.unique(np.round(coarse / h).astype(np.int64))
  else:
    j = np.concatenate([np.arange(j1 + 1), np.arange(j1 + 16, j2 + 16, 16)])
  eps = h * j
  a = np.exp(eps)
  # the upper is the min of two bounds: its greatest convex minorant in
  # e^eps is still above every dataset's (convex) profile
  up = _wr_profiles.lower_hull(a, with_replacement_profile(n, m, sigma, eps)[0] * (1.0 + 1e-9))
  slope = np.append(np.diff(up) / np.diff(a), 0.0) if eps.size > 1 else np.zeros(1)
  # Q-mass at each point is the slope increase; a negative one (float noise
  # in a convex profile) is set to 0, which only raises the profile
  probs = np.zeros(int(j[-1]) + 1)
  probs[j[1:]] = a[1:] * np.maximum(np.diff(slope), 0.0)
  E = _pld()
  rem = E.PLD(probs, 0, h, np.float64(up[-1]), True)
  return symmetrize(rem)


# --------------------------------------------------------------------------
# adaptive-direction lower bound (host NumPy; a check, not an accountant path)


def _instance_cells(kind, n, m, sigma, c, h):
  """Exact (P, Q) cell masses of one step of the 1-D instance x = 1, x' = -1,
  every other record at c (centred; std sigma, norms <= 1)."""
  s = float(sigma)
  if kind == "wor":
    q = m / n
    means, w = np.array([c, 1.0]), np.array([1.0 - q, q])
    means_q = np.array([c, -1.0])
  else:
    w, _ = mixtures.draw_count_law(n, m)
    k = np.arange(w.size, dtype=np.float64)
    means, means_q = k * (1.0 - c), -k * (1.0 + c)
  keep = w > 0
  means, means_q, w = means[keep], means_q[keep], w[keep]
  lo = min(means.min(), means_q.min()) - 11.0 * s
  hi = max(means.max(), means_q.max()) + 11.0 * s
  e = np.concatenate([[-np.inf], np.arange(lo, hi, h * s * s / 4.0), [np.inf]])

  def law(mu):
    lm = host_call(log_ndtr_diff, (e[None, :-1] - mu[:, None]) / s,
                   (e[None, 1:] - mu[:, None]) / s)
    return np.exp(lm).T @ w

  return law(means), law(means_q)


def adaptive_lower_delta(kind: str, n: int, m: int, sigma: float, steps: int, *,
                         others=(-1.0, 0.0, 1.0), step: float = 2e-3,
                         loss_range=None, min_delta: float = 1e-10):
  r"""Certified lower bound on delta(eps) under an adversary that adapts each step.

  Instance (1-D, norms <= 1): the differing record is x = 1 in D and
  x' = -1 in D'; before each step the adversary moves every other record to
  a common value c_t in ``others``, chosen from the outputs so far
  (Lebeda, Regehr, Kamath, Steinke, arXiv:2405.20769: under replace-one
  the worst direction can change step to step; c = -1 is the remove order,
  c = +1 the add order). Each step's pair is post-processed onto the loss
  grid (:func:`jaxacct.accounting._pairs.dominated_on_grid`, merging
  outcomes), and the adversary acts on the merged outputs, so the dynamic
  program ``W_T(u) = (1 - e^{-u})_+``, ``W_{t-1}(u) = max_c E_{P_c}[W_t(u +
  L_c)]``, ``delta(eps) = W_0(-eps)`` is the exact delta of a realisable
  adaptive mechanism: a lower bound on the truth. ``W`` below the range is
  set to 0 and above it to ``(1 - e^{-u})_+`` (both lower bounds of
  ``W_t``, as ``E_P[e^{-L}] <= 1``). Float error: FFT round-off, ~1e-12
  absolute per step.

  Args:
    kind: ``"wor"`` (m of n without replacement) or ``"wr"`` (m draws with
      replacement). n, m: ints, 1 <= m (<= n for "wor"). sigma: > 0
      (dp_accounting's PLD reading: replace-one moves a batch sum by <= 2).
    steps: number of compositions >= 1. others: values of c in [-1, 1].
    step: loss grid. loss_range: ``(lo, hi)``, lo < 0 < hi, the range of
      the running loss minus eps; the table covers eps in [0, -lo]. Default
      None: (-30, 20), its lower end doubled until the table reaches
      ``min_delta`` (a ValueError naming ``loss_range`` past 2^23 points).
      An explicit range that does not reach it raises a ValueError naming
      ``loss_range``: no eps past -lo could be read from the table.
    min_delta: in (0, 1); the delta the table must reach at its largest eps.

  Returns:
    ``(eps, delta)``: numpy arrays on the grid, eps >= 0 ascending.

  Bound: lower.
  """
  checks.check_choice("kind", kind, ("wor", "wr"))
  _check(n, m, sigma, step)
  checks.check_int("steps", steps, min_value=1)
  if m < 1 or (kind == "wor" and m > n):
    raise ValueError(f"need 1 <= m{' <= n' if kind == 'wor' else ''}; got m={m}, n={n}.")
  cs = np.asarray(others, np.float64).ravel()
  checks.check_range("others", cs, -1.0, 1.0)
  h = float(step)
  kern = [_instance_cells(kind, int(n), int(m), sigma, float(c), h) for c in cs]
  return kernels_lower_delta(kern, steps, step=h, loss_range=loss_range,
                             min_delta=min_delta)


def kernels_lower_delta(cells, steps: int, *, step: float, loss_range=None,
                        min_delta: float = 1e-10):
  r"""The adaptive dynamic program of :func:`adaptive_lower_delta` over given one-step pairs.

  ``cells``: a list of exact ``(p, q)`` outcome masses of one-step pairs
  (any instances, e.g. in 2-D); before each step the adversary picks one,
  from the outputs so far. One pair gives a fixed schedule. ``loss_range``
  and ``min_delta``: as in :func:`adaptive_lower_delta` (checked: a table
  that ends before delta falls to ``min_delta`` is widened or refused).

  Returns:
    ``(eps, delta)`` as :func:`adaptive_lower_delta`. Bound: lower.
  """
  checks.check_int("steps", steps, min_value=1)
  checks.check_positive("step", step)
  if not 0.0 < float(min_delta) < 1.0:
    raise ValueError(f"min_delta must be in (0, 1); got {min_delta}.")
  auto = loss_range is None
  lo, hi = (-30.0, 20.0) if auto else (float(loss_range[0]), float(loss_range[1]))
  if not lo < 0.0 < hi:
    raise ValueError(f"loss_range must be (lo, hi) with lo < 0 < hi; got {loss_range}.")
  h = float(step)
  kern = []
  for p, q in cells:
    g = dominated_on_grid(p, q, step=h)
    kern.append((int(g.offset), np.asarray(g.probs, np.float64), float(g.inf_mass)))
  while True:
    u, W = _adaptive_program(kern, int(steps), h, lo, hi)
    if W[0] <= min_delta:      # W[0]: delta at the table's largest eps, -lo
      break
    if not auto or (hi - 2.0 * lo) / h > _MAX_GRID:
      raise ValueError(
          f"loss_range: the table ends at eps = {-lo:g} with delta {W[0]:.3g} > "
          f"min_delta = {min_delta:g}; larger eps cannot be read from it. Widen "
          f"loss_range[0] (e.g. to {2.0 * lo:g}){'' if not auto else ' or the step'}.")
    lo *= 2.0
  sel = u <= 0
  return 0.0 - u[sel][::-1], W[sel][::-1]


def _adaptive_program(kern, steps, h, lo, hi):
  """``(u, W_0(u))`` on the grid ``lo + h j`` (docs/bounds/fixed_size.md, adaptive lower)."""
  from scipy import fft as sfft   # here: the without-replacement paths need no scipy.fft
  jmin = min(o for o, _, _ in kern)
  jmax = max(o + w.size - 1 for o, w, _ in kern)
  k = int(round((hi - lo) / h)) + 1
  u = lo + h * np.arange(k)
  padl, padr = max(0, -jmin), max(0, jmax)
  size = sfft.next_fast_len(k + padl + padr + jmax - jmin + 1, real=True)
  fk = []
  for o, w, inf in kern:
    full = np.zeros(jmax - jmin + 1)
    full[o - jmin:o - jmin + w.size] = w
    fk.append((sfft.rfft(full[::-1], size), inf))
  right = -np.expm1(-(u[-1] + h * np.arange(1, padr + 1)))
  W = -np.expm1(-np.maximum(u, 0.0))
  first = padl + jmax
  for _ in range(steps):
    f = sfft.rfft(np.concatenate([np.zeros(padl), W, right]), size)
    best = np.zeros(k)
    for fw, inf in fk:
      best = np.maximum(best, sfft.irfft(f * fw, size)[first:first + k] + inf)
    W = np.minimum(best, 1.0)
  return u, W

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
