r"""Views of a composed PLD: membership inference (TPR at FPR) and mu-GDP.

Both are read off the hockey-stick curve :math:`h(\gamma) = H_\gamma(P\|Q)`
of the composed pair, which a PLD gives at every real epsilon
(``jaxacct.pld.delta(pld, eps)``, ``gamma = e^eps``):

* **Trade-off / membership inference.** An attack that decides "member"
  (P, the dataset with the record) against "non-member" (Q) with
  false-positive rate :math:`\alpha = Q(\text{say member})` has true-positive
  rate at most

  .. math:: \mathrm{TPR}(\alpha) = \inf_{\gamma > 0}\,[h(\gamma) + \gamma\alpha]

  (Lagrange duality for the Neyman-Pearson problem; equivalently
  :math:`1 - T(P, Q)(\alpha)` with Dong, Roth, Su's trade-off function,
  arXiv:1905.02383v3, Prop. 2.12). For a discrete PLD, h is linear in
  :math:`\gamma` between grid losses, so the infimum is a minimum over the
  grid losses (and :math:`\gamma \to 0`, which gives 1).
* **mu-GDP.** A pair is mu-GDP iff :math:`h(e^\varepsilon) \le
  \delta_\mu(\varepsilon) = \Phi(-\varepsilon/\mu + \mu/2) - e^\varepsilon
  \Phi(-\varepsilon/\mu - \mu/2)` for every :math:`\varepsilon \ge 0`, both
  directions (Dong, Roth, Su, arXiv:1905.02383v3, Cor. 2.13).

Upper values come from pessimistic (dominating) PLDs, lower values from
optimistic (dominated) ones; both directions are covered by taking the max.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import checks
from jaxacct._core.compiled import jit
from jaxacct._core.gaussian import gaussian_log_delta
from jaxacct._core.solve import refine_bracket


class TradeOff(NamedTuple):
  """True-positive-rate bracket of the best attack at given false-positive rates.

  Attributes:
    fpr: the false-positive rates, float64 array.
    upper: certified upper bound on the TPR (no attack does better).
    lower: certified lower bound on the best attack's TPR (NaN if no lower
      PLD).
  """
  fpr: Any
  upper: Any
  lower: Any


class GDPResult(NamedTuple):
  """mu-GDP bracket.

  Attributes:
    mu: upper: the composed pair is mu-GDP at every epsilon >= 0 where its
      delta is >= ``delta_floor`` (a certificate on that range).
    lower: every mu that certifies the mechanism on that range is >= this.
    delta_floor: deltas below this were not examined (a pessimistic PLD
      carries truncation mass at +inf, which no finite mu covers).
    bound: ``"upper"``.
  """
  mu: float
  lower: float
  delta_floor: float
  bound: str = "upper"


def _grid(pld):
  probs = np.asarray(pld.probs, np.float64)
  losses = (int(pld.offset) + np.arange(probs.size)) * float(pld.step)
  return losses[probs > 0] if np.any(probs > 0) else losses[:1]


@jit
def _tpr_min(deltas, log_gamma, log_fpr):
  # min over grid points of delta_i + exp(l_i + log alpha), per alpha
  vals = deltas[None, :] + jnp.exp(log_gamma[None, :] + log_fpr[:, None])
  return jnp.minimum(jnp.min(vals, axis=1), 1.0)


def _tpr_one(pld, fpr):
  l = _grid(pld)
  # also the kinks' neighbours: h is linear between consecutive grid losses
  d = np.asarray(jpld.delta(pld, l), np.float64)
  out = np.empty(fpr.shape)
  with np.errstate(divide="ignore"):
    lf = np.log(fpr)
  flat = lf.ravel()
  for i in range(0, flat.size, 16):
    chunk = flat[i:i + 16]
    padded = np.concatenate([chunk, np.zeros(16 - chunk.size)])   # one shape
    res = np.asarray(_tpr_min(jnp.asarray(d), jnp.asarray(l), jnp.asarray(padded)))
    out.flat[i:i + chunk.size] = res[:chunk.size]
  return np.where(fpr >= 1.0, 1.0, np.where(fpr <= 0.0, _tpr_at_zero(pld), out))


def _tpr_at_zero(pld):
  # alpha = 0: TPR = P(Q = 0) = inf_mass
  return float(pld.inf_mass)


def _directions(pair, direction):
  checks.check_choice("direction", direction, ("remove", "add", "both"))
  return [pair.remove, pair.add] if direction == "both" else [getattr(pair, direction)]


def tpr_at_fpr(upper, lower, fpr, *, direction: str = "both",
               lower_allowance: float = 0.0) -> TradeOff:
  r"""Bracket on the best membership-inference TPR at each FPR in ``fpr``.

  ``TPR(alpha) = min(1, min_i [delta(l_i) + e^{l_i} alpha])`` over the grid
  losses l_i of the PLD (exact for the discrete pair, see the module
  docstring). ``direction="remove"``: attacks deciding "record present"
  (P = with the record); ``"add"``: the reverse orientation; ``"both"``:
  the max (any orientation of a neighbouring pair).

  Args:
    upper: ``PairPLD`` of pessimistic PLDs (dominating).
    lower: ``PairPLD`` of optimistic PLDs, or None.
    fpr: false-positive rates in [0, 1] (any shape).
    direction: ``"remove"``, ``"add"`` or ``"both"``.
    lower_allowance: delta mass the lower PLDs may overstate by (FFT
      aliasing); subtracted.

  Returns:
    :class:`TradeOff`.

  Bound: upper (``upper``) and lower (``lower``).
  """
  a = np.asarray(fpr, np.float64)
  checks.check_probability("fpr", a)
  up = np.max([_tpr_one(p, a) for p in _directions(upper, direction)], axis=0)
  if lower is None:
    lo = np.full(a.shape, np.nan)
  else:
    lo = np.max([_tpr_one(p, a) for p in _directions(lower, direction)], axis=0)
    lo = np.clip(lo - lower_allowance, a, up)   # a blind guess achieves TPR = FPR
  return TradeOff(a, up, lo)


@jit
def _mu_of(delta_target, eps, lo, hi):
  """mu with delta_mu(eps) = delta_target, by bisection in log mu (vectorised).

  Returns (a, b): the bracket ends (a infeasible side, b >= root)."""
  lt = jnp.log(delta_target)
  a = jnp.full_like(eps, jnp.log(lo))
  b = jnp.full_like(eps, jnp.log(hi))
  # in m = log mu (delta_mu increasing in mu); tol=0: the same 90 halvings as
  # a plain loop (a lane whose two ends have met no longer moves).
  a, b = refine_bracket(lambda m: gaussian_log_delta(jnp.exp(-m), eps) >= lt, a, b,
                        tol=0.0, max_iters=90)
  return jnp.exp(a), jnp.exp(b)


def _mu_points(pld, delta_floor, upper: bool, allowance: float):
  l = _grid(pld)
  l = np.unique(np.concatenate([[0.0], l[l >= 0]]))
  d = np.asarray(jpld.delta(pld, l), np.float64)
  if upper:
    # on [l_k, l_{k+1}]: delta(eps) <= delta(l_k) and delta_mu(eps) >=
    # delta_mu(l_{k+1}); so delta(l_k) <= delta_mu(l_{k+1}) for all k suffices
    e_eval = np.concatenate([l[1:], [np.inf]])
  else:
    d = d - allowance
    e_eval = l
  keep = (d >= delta_floor) & (d < 1.0) & np.isfinite(e_eval)
  if upper and np.any((d >= delta_floor) & ~np.isfinite(e_eval)):
    return np.inf     # mass above the grid would need mu = inf
  if not np.any(keep):
    return 0.0
  hi = 1e4
  a, b = _mu_of(jnp.asarray(d[keep]), jnp.asarray(e_eval[keep]), 1e-8, hi)
  if upper:
    b = np.asarray(b)
    return float(np.inf if np.any(b >= hi * (1 - 1e-12)) else np.max(b))
  return float(np.max(np.asarray(a)))


def gdp_mu(upper, lower=None, *, delta_floor: float = 1e-12,
           lower_allowance: float = 0.0) -> GDPResult:
  r"""mu-GDP bracket of a composed pair, on the range where delta >= ``delta_floor``.

  Upper: the smallest mu with ``delta_up(eps) <= delta_mu(eps)`` for all eps
  >= 0 with ``delta_up(eps) >= delta_floor``, both directions, checked
  between grid points conservatively (``delta_up(l_k) <= delta_mu(l_{k+1})``:
  delta is non-increasing and delta_mu decreasing in eps), then rounded up by
  the bisection. Lower: the largest ``mu(eps_k)`` at grid points of the
  optimistic PLDs (any certificate must cover those points).

  Args:
    upper, lower: ``PairPLD`` (pessimistic / optimistic or None).
    delta_floor: in (0, 1).
    lower_allowance: see :func:`tpr_at_fpr`.

  Returns:
    :class:`GDPResult` (``lower`` NaN without a lower PLD).

  Bound: upper (``mu``) and lower (``lower``), on the stated delta range.
  """
  checks.check_delta(delta_floor, "delta_floor")
  mu_up = max(_mu_points(p, delta_floor, True, 0.0) for p in (upper.remove, upper.add))
  if lower is None:
    mu_lo = float("nan")
  else:
    mu_lo = max(_mu_points(p, delta_floor, False, lower_allowance)
                for p in (lower.remove, lower.add))
    mu_lo = min(mu_lo, mu_up)
  return GDPResult(mu=mu_up, lower=mu_lo, delta_floor=float(delta_floor))
