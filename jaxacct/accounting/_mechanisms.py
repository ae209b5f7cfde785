r"""Dominating and dominated pairs of mechanisms ``jaxacct.pld`` has no constructor for.

Private helpers of the accountant: every caller has entered float64 at its
public door (the accountant's queries, the public constructors of ``mixtures``
and ``fixed_size``; see :mod:`jaxacct._core.dtype`).

* :func:`poisson_laplace`, :func:`poisson_gaussian_replace` -- the two
  subsampled mechanisms dp_accounting 0.6.0 supports that ``jaxacct.pld``
  lacks (upper: cell splitting + connect-the-dots; lower: exact merging).
* :func:`gaussian_lower`, :func:`laplace_lower`,
  :func:`poisson_gaussian_lower` -- second-order lower PLDs of the standard
  mechanisms (their upper PLDs are ``jaxacct.pld``'s).
* :func:`lower_pld` -- the accountant's lower pair of a base mechanism value
  (``jaxacct.mechanisms``): the second-order lower PLDs below, or the exact
  finite pair merged onto the grid.
* :func:`rdp_pair` -- the dominating pair of an RDP curve.

All from exact cell masses of a uniform partition of the output line
(log-space CDF differences), through :func:`._pairs.from_cells` and
:func:`._pairs.dominated_on_grid`.
"""

from __future__ import annotations

import math

import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import checks
from jaxacct._core.conversion import rdp_to_delta
from jaxacct._core.dtype import side_by_side
from jaxacct._core.gaussian import gaussian_delta, normal_tail_z
from jaxacct._core.logmath import LOG_HALF, log_laplace_cells, log_ndtr_diff
from jaxacct._core.namespace import host_call
from jaxacct.accounting._pairs import (dominated_on_grid, epsilon_delta_pair, from_cells,
                                       from_profile)
from jaxacct.mechanisms import EpsilonDelta, Gaussian, Laplace, RandomizedResponse

#: Renyi orders of the RDP fallback (integers: the check-in kernels need them).
RDP_ORDERS = np.arange(2, 257, dtype=np.float64)
_PROFILE_DELTA_FLOOR = 1e-40
_MAX_CELLS = 1 << 22


def profile_grid(top: float, num: int = 8000) -> np.ndarray:
  """Epsilon grid for :func:`._pairs.from_profile`: 0, a geometric start (small
  eps), then linear up to ``top`` (spacing ``top / num``)."""
  lin = np.linspace(0.0, float(top), int(num) + 1)
  geo = np.geomspace(float(top) * 1e-8, lin[1], 64)
  return np.unique(np.concatenate([lin, geo]))


def _uniform_edges(lo, hi, dx, max_cells=_MAX_CELLS):
  """Edges of a uniform grid on [lo, hi], spacing <= dx (16 to ``max_cells`` cells)."""
  n = int(min(max(math.ceil((hi - lo) / dx), 16), max_cells))
  return np.linspace(lo, hi, n + 1)


def _gauss_cells(edges, mu, s):
  """Log masses of N(mu, s^2) on the cells of ``edges`` and the two tails."""
  e = np.concatenate([[-np.inf], edges, [np.inf]])
  return host_call(log_ndtr_diff, (e[:-1] - mu) / s, (e[1:] - mu) / s)


def _laplace_cells(edges, b):
  """Log masses of Lap(0, b) and Lap(1, b) on x <= 0, the cells of ``edges``
  (a grid of [0, 1]) and x >= 1."""
  l0, l1 = log_laplace_cells(edges[:-1], edges[1:], b, np)
  return (np.concatenate([[LOG_HALF], l0, [LOG_HALF - 1.0 / b]]),
          np.concatenate([[LOG_HALF - 1.0 / b], l1, [LOG_HALF]]))


def poisson_gaussian_replace(sigma: float, q: float, *, step: float,
                             pessimistic: bool = True,
                             tail_mass: float = 1e-20):
  r"""Poisson-subsampled Gaussian under replacement neighbours (both directions).

  The pair P = (1-q) N(0, sigma^2) + q N(-1, sigma^2), Q = (1-q) N(0, sigma^2)
  + q N(1, sigma^2) (each record's clipped contribution has norm <= 1, so
  replacing one moves the sum by a vector of norm <= 2): the REPLACE pair
  of dp_accounting 0.6.0 (``privacy_loss_mechanism.GaussianPrivacyLoss``,
  adjacency REPLACE, after Zhu, Dong, Wang, arXiv:2106.08567v2, Sec. 5).
  The loss ``ln(P/Q)(x)`` is decreasing in x; cells are a uniform x-grid on
  which the loss moves by <= ``step`` per cell (see :func:`from_cells`),
  tails beyond ``z(tail_mass)`` standard deviations are tail cells. The pair
  is symmetric (x -> -x), so both directions share one PLD.

  Returns:
    ``PairPLD`` (remove = add). Bound: upper (pessimistic) / lower.
  """
  checks.check_sigma("sigma", sigma)
  checks.check_probability("q", q, open_lo=True)
  s, q = float(sigma), float(q)
  l1q, lq = math.log1p(-q) if q < 1 else -np.inf, math.log(q)

  def loss(x):
    with np.errstate(invalid="ignore"):
      up = np.logaddexp(l1q, lq - (2 * x + 1) / (2 * s * s))
      dn = np.logaddexp(l1q, lq + (2 * x - 1) / (2 * s * s))
    return up - dn

  z = normal_tail_z(tail_mass)
  e = _uniform_edges(-1.0 - z * s, 1.0 + z * s, float(step) * s * s / 2.0,
                     max_cells=4_000_000)
  l0 = _gauss_cells(e, 0.0, s)
  # log mass of (1-q) N(0) + q N(-+1) on the cells
  lp = np.logaddexp(l1q + l0, lq + _gauss_cells(e, -1.0, s))
  lqm = np.logaddexp(l1q + l0, lq + _gauss_cells(e, 1.0, s))
  le = loss(e)
  loss_hi = np.concatenate([[np.inf], le])      # loss decreasing in x
  loss_lo = np.concatenate([le, [-np.inf]])
  one = from_cells(lp, lqm, loss_lo, loss_hi, step=step, pessimistic=pessimistic)
  return jpld.PairPLD(one, one)


def poisson_laplace(scale: float, q: float, *, step: float,
                    pessimistic: bool = True):
  r"""Poisson-subsampled Laplace mechanism, add/remove neighbours, both directions.

  Remove: P = (1-q) Lap(0, b) + q Lap(1, b), Q = Lap(0, b); add: the reverse
  (the pairs of dp_accounting 0.6.0's ``LaplacePrivacyLoss`` with sampling,
  which are the exact worst cases for L1 sensitivity 1). The loss
  ``ln(1 - q + q e^{(|x| - |x-1|)/b})`` is constant for x <= 0 and x >= 1
  and increasing between; cells: the two half-lines and a uniform grid on
  (0, 1) fine enough that the loss moves by <= ``step`` per cell
  (:func:`from_cells`).

  Returns:
    ``PairPLD(remove, add)``. Bound: upper (pessimistic) / lower.
  """
  checks.check_positive("scale", scale)
  checks.check_probability("q", q, open_lo=True)
  b, q = float(scale), float(q)
  l1q = math.log1p(-q) if q < 1 else -np.inf
  lq = math.log(q)
  e = _uniform_edges(0.0, 1.0, float(step) * b / 2.0, max_cells=4_000_000)
  l0, l1 = _laplace_cells(e, b)
  lmix = np.logaddexp(l1q + l0, lq + l1)

  def loss(x):
    return np.logaddexp(l1q, lq + (np.abs(x) - np.abs(x - 1.0)) / b)

  le = loss(e)
  lo = np.concatenate([[le[0]], le[:-1], [le[-1]]])
  hi = np.concatenate([[le[0]], le[1:], [le[-1]]])
  rem = from_cells(lmix, l0, lo, hi, step=step, pessimistic=pessimistic)
  add = from_cells(l0, lmix, -hi, -lo, step=step, pessimistic=pessimistic)
  return jpld.PairPLD(rem, add)


# --------------------------------------------------------------------------
# lower (dominated) PLDs of the standard additive mechanisms, from exact cells




def gaussian_lower(sigma: float, *, step: float, sensitivity: float = 1.0,
                   tail_mass: float = 1e-20):
  r"""Dominated PLD of the Gaussian mechanism (both directions), second order.

  P = N(0, sigma^2), Q = N(sensitivity, sigma^2) on a uniform x-grid whose
  cells move the loss by <= step/2 (at most 4M cells), exact cell masses
  (log-space normal CDF differences), merged onto the grid by
  :func:`dominated_on_grid`.

  Bound: lower.
  """
  s, d = float(sigma) / float(sensitivity), 1.0
  z = normal_tail_z(tail_mass)
  edges = _uniform_edges(-z * s, d + z * s, float(step) * s * s / 2.0)
  lp, lq = _gauss_cells(edges, 0.0, s), _gauss_cells(edges, d, s)
  return dominated_on_grid(np.exp(lp), np.exp(lq), step=step)


def laplace_lower(scale: float, *, step: float, sensitivity: float = 1.0):
  r"""Dominated PLD of the Laplace mechanism (both directions), second order.

  P = Lap(0, b), Q = Lap(sensitivity, b): the loss is constant (+-s/b) on
  the two half-lines and linear on (0, s); cells of loss width <= step/2
  there, exact masses, merged onto the grid (:func:`dominated_on_grid`).

  Bound: lower.
  """
  b = float(scale) / float(sensitivity)
  lp, lq = _laplace_cells(_uniform_edges(0.0, 1.0, float(step) * b / 4.0), b)
  return dominated_on_grid(np.exp(lp), np.exp(lq), step=step)


def poisson_gaussian_lower(sigma: float, q: float, *, step: float,
                           tail_mass: float = 1e-20):
  r"""Dominated PLDs of the Poisson-subsampled Gaussian (add/remove), second order.

  Remove pair P = (1-q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2); add: the
  reverse. Uniform x-cells (the loss moves by <= step/2 per cell), exact
  masses, merged onto the grid (:func:`dominated_on_grid`).

  Returns:
    ``PairPLD(remove, add)``. Bound: lower.
  """
  s, q = float(sigma), float(q)
  z = normal_tail_z(tail_mass)
  edges = _uniform_edges(-z * s, 1.0 + z * s, float(step) * s * s / 2.0)
  l0 = _gauss_cells(edges, 0.0, s)
  l1 = _gauss_cells(edges, 1.0, s)
  lmix = np.logaddexp(math.log1p(-q) + l0, math.log(q) + l1) if q < 1 else l1
  pm, p0 = np.exp(lmix), np.exp(l0)
  return jpld.PairPLD(*side_by_side(lambda: dominated_on_grid(pm, p0, step=step),
                                   lambda: dominated_on_grid(p0, pm, step=step)))


def lower_pld(mechanism, *, step: float):
  r"""The accountant's dominated pair of a base mechanism value, second order.

  ``Gaussian`` / ``Laplace``: :func:`gaussian_lower` / :func:`laplace_lower`
  (exact cell masses merged onto the grid); ``RandomizedResponse``: its exact
  outcome pair merged onto the grid (:func:`dominated_on_grid`, both
  orientations); ``EpsilonDelta``: :func:`._pairs.epsilon_delta_pair`,
  optimistic. Tighter than the values' own ``pld(pessimistic=False)``
  (``jaxacct.pld``'s first-order optimistic PLDs).

  Returns:
    ``PairPLD(remove, add)``. Bound: lower.
  """
  m = mechanism
  if isinstance(m, Gaussian):
    one = gaussian_lower(m.noise_multiplier, step=step, sensitivity=m.sensitivity)
  elif isinstance(m, Laplace):
    one = laplace_lower(m.scale, step=step, sensitivity=m.sensitivity)
  elif isinstance(m, EpsilonDelta):
    return epsilon_delta_pair(m.eps0, m.delta0, step=step, pessimistic=False)
  elif isinstance(m, RandomizedResponse):
    a, b = m.outcome_pair()
    return jpld.PairPLD(dominated_on_grid(a, b, step=step), dominated_on_grid(b, a, step=step))
  else:
    raise ValueError(f"mechanism must be a jaxacct.mechanisms value; got {m!r}.")
  return jpld.PairPLD(one, one)


# --------------------------------------------------------------------------
# RDP -> dominating pair


def rdp_pair(rdp_total, *, step: float):
  r"""Dominating pair of a mechanism with (both-direction) RDP ``rdp_total``.

  The profile ``delta(eps) = rdp_to_delta(orders, rdp, eps)`` (the tight
  conversion of Canonne, Kamath, Steinke, arXiv:2004.00010v5, Prop. 12 /
  the KL-TV bound at eps = 0; ``jaxacct.mechanisms.rdp_to_delta``) is an upper bound at
  every eps >= 0 in both directions; :func:`pairs.from_profile` turns it into
  the tightest pair under it (:func:`profile_grid`: 8000 linear steps up to
  where delta < 1e-40).

  Bound: upper.
  """
  rdp = np.asarray(rdp_total, np.float64)
  top = 1.0
  while True:
    d = rdp_to_delta(RDP_ORDERS, rdp, top).delta
    if float(d) < _PROFILE_DELTA_FLOOR or top > 1e4:
      break
    top *= 2.0
  eps = profile_grid(top)
  d = np.asarray(rdp_to_delta(RDP_ORDERS, rdp, eps).delta, np.float64)
  return from_profile(eps, d, d, step=step, pessimistic=True)


def sampled_without_replacement_upper(noise: str, scale: float, g: float, *,
                                      step: float):
  r"""Dominating pair: m-of-n sampling without replacement, then Gaussian/Laplace.

  Replacement neighbours; the noise is relative to GaussianDpEvent's norm
  bound (each record's contribution has norm <= 1, so replacing one moves
  the sum by <= 2: the base mechanism M has sensitivity 2). Balle, Barthe,
  Gaboardi, "Privacy amplification by subsampling: tight analyses via
  couplings and divergences", arXiv:1807.01647v2 (the subsampling-without-
  replacement theorem for the substitution relation): if M is (eps', delta')
  -DP, the subsampled mechanism is (log(1 + g (e^{eps'} - 1)), g delta')-DP,
  g = m/n. Applied at every eps' of M's profile (exact Gaussian, Balle & Wang
  arXiv:1805.06530v2 Thm 8; Laplace from its dominating PLD), the resulting
  profile (symmetric: so is the relation) becomes the tightest pair under it
  (:func:`._pairs.from_profile`, :func:`profile_grid`).

  Args:
    noise: ``"gaussian"`` (noise multiplier ``scale``) or ``"laplace"``.
    scale: > 0. g: sampling fraction in (0, 1). step: grid step.

  Returns:
    ``PairPLD``. Bound: upper.
  """
  checks.check_choice("noise", noise, ("gaussian", "laplace"))
  checks.check_positive("scale", scale)
  checks.check_probability("g", g, open_lo=True)
  s, g = float(scale), float(g)
  if noise == "gaussian":
    top = 2.0 / s**2 + 24.0 / s + 1.0
    eps_b = profile_grid(top)
    d_b = np.asarray(gaussian_delta(s / 2.0, eps_b).delta, np.float64)
  else:
    bp = jpld.laplace(s, step=step, pessimistic=True, sensitivity=2.0)
    eps_b = profile_grid(2.0 / s + 1e-9)
    d_b = np.asarray(jpld.delta(bp, eps_b), np.float64)
  eps = np.log1p(g * np.expm1(eps_b))
  dl = np.minimum(g * d_b, 1.0)
  return from_profile(eps, dl, dl, step=step, pessimistic=True)
