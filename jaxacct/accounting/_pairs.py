r"""Dominating (and dominated) pairs that ``jaxacct.pld`` has no constructor for.

All functions return ``jaxacct.pld`` PLDs on a caller-chosen grid ``step``,
pessimistic (dominating: every hockey-stick divergence, at every real
epsilon, is >= the mechanism's, so compositions stay upper bounds) or
optimistic (a lower estimate of every one). They run eagerly in NumPy
(one-time construction; the FFT composition is ``jaxacct.pld``'s).

* :func:`regrid` -- a PLD on another grid step, validity kept.
* :func:`from_profile` -- the tightest pair whose hockey-stick curves lie
  above given per-direction privacy profiles ``delta_remove(eps)``,
  ``delta_add(eps)`` on an epsilon grid (RDP conversions, (eps, delta)
  guarantees, amplification theorems stated on profiles).
* :func:`from_cells` -- a monotone-loss mechanism from the exact P- and
  Q-masses of the cells of a partition of its output space.
* :func:`dominated_on_grid` -- a second-order lower PLD of a discrete pair
  (outcomes merged into groups whose likelihood ratio is on the grid).
* :func:`epsilon_delta_pair` -- the (epsilon, delta) pair.

Pairs of specific mechanisms built with these: :mod:`.mechanisms`.

The hockey-stick curve of a pair is :math:`h(\gamma) = H_\gamma(P\|Q) =
\sup_A P(A) - \gamma Q(A)`, :math:`\gamma > 0`; ``delta(eps) = h(e^eps)``
and, for the other direction, :math:`H_\gamma(Q\|P) = 1 - \gamma + \gamma\,
h(1/\gamma)`. A pair dominates another iff its curve is pointwise larger
(Blackwell; Zhu, Dong, Wang, "Optimal accounting of differential privacy
via characteristic function", arXiv:2106.08567v2, Sec. 2).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import batching, checks, hull
from jaxacct._core.compiled import jit
from jaxacct._core.dtype import require_x64


#: the largest epsilon (nats) of a profile point :func:`from_profile` reads: its
#: hull runs on gamma = e^eps, which overflows float64 past 709.8; above it the
#: curve runs flat (looser, valid).
PROFILE_LOSS_MAX = 700.0


# --------------------------------------------------------------------------
# re-gridding


def _from_atoms(losses, probs, *, step, **kw):
  """``jaxacct.pld.from_losses`` of concrete atoms on its own grid. Where it runs a
  compiled kernel (not :func:`jaxacct._core.batching.on_host`), at bucketed atom
  and grid lengths, then cut back: padding atoms (P-mass 0) add +0.0 and no atom
  reaches past the length it computes, so the PLD is the same, and a new profile
  (a new sigma) reuses its bucket's compiled program."""
  lv = np.ravel(np.asarray(losses, np.float64))
  pv = np.ravel(np.asarray(probs, np.float64)) * np.ones_like(lv)
  host = batching.on_host()
  pad = 0 if host else _bucket(lv.size) - lv.size
  if pad:
    lv, pv = np.concatenate([lv, np.zeros(pad)]), np.concatenate([pv, np.zeros(pad)])
  fin = np.isfinite(lv) & (pv > 0)
  h = float(step)
  lo = int(math.floor(lv[fin].min() / h)) if np.any(fin) else 0
  hi = int(math.floor(lv[fin].max() / h)) + 1 if np.any(fin) else 0
  size = _fast_len(hi - lo + 1)                     # the length from_losses computes
  p = jpld.from_losses(lv, pv, step=step, offset=lo, size=size if host else _bucket(size), **kw)
  return jpld.PLD(np.asarray(p.probs)[:size], p.offset, p.step, p.inf_mass, p.pessimistic)


def _fast_len(n: int) -> int:
  """Smallest 2^a or 3 * 2^a >= n (jaxacct.pld.from_losses' grid lengths)."""
  n = max(int(n), 1)
  p = 1 << (n - 1).bit_length()
  return 3 * p // 4 if 3 * p // 4 >= n and p >= 4 else p


def _bucket(n: int) -> int:
  """The power of 2 >= n, at least 2^18 (few compiled shapes)."""
  return max(1 << (max(int(n), 1) - 1).bit_length(), 1 << 18)


def regrid(pld, step: float):
  r"""The PLD on the grid ``loss_i = i * step``, keeping its kind of bound.

  Every atom (loss ``l``, P-mass ``p``) is re-discretised by
  ``jaxacct.pld.from_losses``: pessimistic PLDs by connect-the-dots, a
  mean-preserving split of the atom in ``x = e^l`` onto the two new grid
  points around it (a convex-order increase of the Q-law of the likelihood
  ratio: Doroshenko et al., arXiv:2207.04380v1, Sec. 3), so the result
  dominates the input and hence whatever the input dominated; optimistic
  PLDs by rounding every loss down (a lower estimate of every delta of the
  input, by the coupling of rounded-down sums). ``inf_mass`` is kept.

  Args:
    pld: a ``jaxacct.pld.PLD``.
    step: new grid step > 0.

  Returns:
    ``jaxacct.pld.PLD`` on step ``step`` (the input itself when the steps
    agree to 1e-12 relative).

  Bound: as the input (upper for pessimistic, lower for optimistic).
  """
  checks.check_positive("step", step)
  step = float(step)
  if abs(float(pld.step) - step) <= 1e-12 * step:
    return pld
  probs = np.asarray(pld.probs, np.float64)
  keep = probs > 0
  losses = (int(pld.offset) + np.arange(probs.size)) * float(pld.step)
  return _from_atoms(losses[keep], probs[keep], step=step,
                     pessimistic=bool(pld.pessimistic),
                            inf_mass=min(1.0, float(pld.inf_mass)))


# --------------------------------------------------------------------------
# pairs from privacy profiles


def _chain(points_x, points_y, start_y):
  """Lower hull on x >= 1 of {(1, start_y)} U points (x > 1), values made
  non-increasing first. Returns (vertex x, vertex y, slopes into each
  vertex after the first, Q-type masses at vertices after the first)."""
  order = np.argsort(points_x, kind="stable")
  x = np.concatenate([[1.0], points_x[order]])
  y = np.concatenate([[start_y], points_y[order]])
  y = np.minimum.accumulate(y)        # h is non-increasing: a valid tightening
  vertices = hull.lower_hull_indices(x, y)
  vx, vy = x[vertices], y[vertices]
  slopes = np.diff(vy) / np.diff(vx) if vx.size > 1 else np.zeros(0)
  slopes = np.minimum(slopes, 0.0)
  slopes = np.maximum.accumulate(slopes) if slopes.size else slopes
  nxt = np.concatenate([slopes[1:], [0.0]])
  mass = np.maximum(nxt - slopes, 0.0)   # jump of the slope at vertices 1..K
  return vx, vy, slopes, mass


def from_profile(epsilons, delta_remove, delta_add=None, *, step: float,
                 pessimistic: bool = True):
  r"""The tightest pair (both directions) whose profiles lie above the given ones.

  Given upper bounds ``delta_remove[j] >= H_{e^{eps_j}}(P||Q)`` and
  ``delta_add[j] >= H_{e^{eps_j}}(Q||P)`` of a mechanism's pair (P, Q) at
  ``eps_j >= 0``, every valid hockey-stick curve h of (P, Q) is convex,
  non-increasing, ``h(0) <= 1``, and lies below the points
  ``(e^{eps_j}, delta_remove[j])`` and ``(e^{-eps_j}, 1 - e^{-eps_j} +
  e^{-eps_j} delta_add[j])``. Hence h is below the lower convex hull of
  these points and (0, 1), extended flat to the right; this hull is itself
  the curve of a discrete pair (an atom at each vertex, likelihood ratio =
  the vertex abscissa, Q-mass = the jump of the slope there; P-mass at +inf
  = the last value), which therefore dominates (P, Q) in both directions.
  With a single point it is the (eps, delta) pair of Kairouz, Oh, Viswanath,
  arXiv:1311.0776v4, Thm 3.4; in general it is the "privacy profile to
  dominating pair" construction of Zhu, Dong, Wang, arXiv:2106.08567v2,
  Sec. 3 (here computed directly on the hull).

  Numerics: the left part (gamma < 1) is handled in the add direction's own
  coordinates (x = 1/gamma, values ``delta_add``), so small deltas keep their
  relative precision in both directions; the two chains are glued at
  gamma = 1 with the value there of the lower convex hull of all points
  (the smallest chord through 1, which makes the glued curve convex), plus a
  1e-15 absolute margin. The hull interpolates linearly in gamma between
  the given epsilons: use a fine grid where the profile curves (the error
  is second order in the spacing). Points above ``PROFILE_LOSS_MAX`` (700
  nats; ``e^eps`` overflows float64 past 709.8) are left out: the curve runs
  flat from the last point kept, so the mass beyond it sits at +inf.

  Args:
    epsilons: 1-D array of eps >= 0 (any order; may include 0).
    delta_remove: upper bounds on delta(eps) in the remove direction (same
      shape, in [0, 1]).
    delta_add: same for the add direction; default ``delta_remove``
      (a symmetric mechanism, e.g. replacement neighbours).
    step: PLD grid step > 0.
    pessimistic: True: connect-the-dots (dominating); False: rounded down
      (then the result is a lower estimate of this pair, which is a lower
      bound of the mechanism only if the profile is exact).

  Returns:
    ``jaxacct.pld.PairPLD(remove, add)``.

  Bound: upper (pessimistic); see ``pessimistic`` for the other case.
  """
  checks.check_range("epsilons", epsilons, 0.0, np.inf)
  checks.check_probability("delta_remove", delta_remove)
  if delta_add is not None:
    checks.check_probability("delta_add", delta_add)
  checks.check_positive("step", step, scalar=True)
  checks.check_bool("pessimistic", pessimistic)
  eps = np.asarray(epsilons, np.float64).ravel()
  for name, d in (("delta_remove", delta_remove), ("delta_add", delta_add)):
    if np.ndim(d) and np.size(d) != eps.size:
      raise ValueError(f"{name} and epsilons differ in length: {np.size(d)} vs {eps.size}.")
  dr = np.broadcast_to(np.asarray(delta_remove, np.float64).ravel(), eps.shape)
  da = dr if delta_add is None else np.broadcast_to(
      np.asarray(delta_add, np.float64).ravel(), eps.shape)
  dr = np.clip(dr, 0.0, 1.0)
  da = np.clip(da, 0.0, 1.0)
  # e^eps overflows float64 past 709.8 nats: the points above PROFILE_LOSS_MAX are
  # left out, and the curve runs flat from the last one kept (its P-mass at +inf is
  # the profile's bound there), above the profile beyond it (a profile does not rise)
  inside = eps <= PROFILE_LOSS_MAX
  okr, oka = ~np.isnan(dr) & inside, ~np.isnan(da) & inside
  # TV = h(1): the profiles at eps = 0, and every chord through gamma = 1.
  h1 = 1.0
  if np.any(okr & (eps == 0)):
    h1 = min(h1, float(np.min(dr[okr & (eps == 0)])))
  if np.any(oka & (eps == 0)):
    h1 = min(h1, float(np.min(da[oka & (eps == 0)])))
  rx, ry = np.exp(eps[okr & (eps > 0)]), dr[okr & (eps > 0)]
  lx, ly = np.exp(eps[oka & (eps > 0)]), da[oka & (eps > 0)]
  # every chord through gamma = 1 bounds h(1): the lower convex hull of all
  # points (and (0, 1)) in h-coordinates, evaluated at gamma = 1
  if rx.size:
    gl = 1.0 / lx
    gx = np.concatenate([[0.0], gl, rx])
    gy = np.concatenate([[1.0], 1.0 - gl + gl * ly, ry])
    order = np.argsort(gx, kind="stable")
    gx, gy = gx[order], gy[order]
    # where a line below every point already passes h1 - 2e-16 at 1, the hull's
    # chord at 1, evaluated and 1e-15 added within 7 u = 7.8e-16 (u = 2^-53; all
    # values lie in [0, 1]), is at least h1, and h1 stands: the hull is not needed
    if not hull.certified_at_least(gx, gy, 1.0, h1 - 2e-16):
      vertices = hull.lower_hull_indices(gx, gy)
      hx, hy = gx[vertices], gy[vertices]
      k = int(np.searchsorted(hx, 1.0))
      if 0 < k < hx.size:
        at1 = hy[k - 1] + (hy[k] - hy[k - 1]) * (1.0 - hx[k - 1]) / (hx[k] - hx[k - 1])
        h1 = min(h1, float(at1) + 1e-15)
  h1 = min(max(h1, 0.0), 1.0)
  # right chain (gamma >= 1) in (gamma, delta_remove); left chain in
  # (x = 1/gamma, delta_add).
  rvx, rvy, rs, rq = _chain(rx, ry, h1)
  lvx, lvy, ls, lp = _chain(lx, ly, h1)
  m_rem = -rs[0] if rs.size else 0.0
  m_add = -ls[0] if ls.size else 0.0
  c = max(1.0 - h1 - m_rem - m_add, 0.0)     # P = Q mass at likelihood ratio 1
  p_inf = float(rvy[-1])                        # P-mass where Q = 0
  q_zero = float(lvy[-1])                       # Q-mass where P = 0
  g, x = rvx[1:], lvx[1:]
  # remove PLD: P-law of ln(dP/dQ)
  loss_r = np.concatenate([np.log(g), [0.0], -np.log(x)])
  prob_r = np.concatenate([g * rq, [c], lp])
  # add PLD: Q-law of ln(dQ/dP)
  loss_a = np.concatenate([-np.log(g), [0.0], np.log(x)])
  prob_a = np.concatenate([rq, [c], x * lp])
  kr, ka = prob_r > 0, prob_a > 0
  if not np.any(kr):
    loss_r, prob_r, kr = np.zeros(1), np.zeros(1), np.ones(1, bool)
  if not np.any(ka):
    loss_a, prob_a, ka = np.zeros(1), np.zeros(1), np.ones(1, bool)
  rem = _from_atoms(loss_r[kr], prob_r[kr], step=step, pessimistic=pessimistic,
                         inf_mass=min(p_inf, 1.0))
  add = _from_atoms(loss_a[ka], prob_a[ka], step=step, pessimistic=pessimistic,
                         inf_mass=min(q_zero, 1.0))
  return jpld.PairPLD(rem, add)


def epsilon_delta_pair(epsilon: float, delta: float, *, step: float,
                       pessimistic: bool = True):
  r"""The (epsilon, delta) pair (Kairouz, Oh, Viswanath, arXiv:1311.0776v4, Thm 3.4).

  P = (delta, (1-delta) e^eps/(1+e^eps), (1-delta)/(1+e^eps), 0), Q the
  reverse: losses +inf, eps, -eps. It dominates every (eps, delta)-DP
  mechanism and is itself one, so it is the exact worst case.

  Returns:
    ``PairPLD`` (both directions equal). Bound: exact up to the grid
    rounding (pessimistic: upper; else lower).
  """
  eps, d = float(epsilon), float(delta)
  hi = (1.0 - d) / (1.0 + math.exp(-eps))
  # past 700 nats the mass at -eps (< 1e-304; e^eps overflows past 709.8) is left
  # out: it weighs in no delta at an epsilon >= 0
  lo = (1.0 - d) / (1.0 + math.exp(eps)) if eps <= 700.0 else 0.0
  if not pessimistic:
    if lo == 0.0:    # one finite atom (the loss eps), rounded down: below the pair
      one = jpld.from_losses(np.array([eps]), np.array([hi]), step=step, pessimistic=False,
                             inf_mass=d)
    else:
      one = dominated_on_grid(np.array([hi, lo]), np.array([lo, hi]), step=step,
                              inf_mass=d)
    return jpld.PairPLD(one, one)
  one = jpld.from_losses(np.array([eps, -eps]), np.array([hi, lo]), step=step,
                         pessimistic=pessimistic, inf_mass=d)
  return jpld.PairPLD(one, one)


# --------------------------------------------------------------------------
# monotone-loss mechanisms from cell masses


def from_cells(log_p, log_q, loss_lo, loss_hi, *, step: float,
               pessimistic: bool = True):
  r"""PLD of a pair from the masses of a partition into cells of monotone loss.

  Each cell j has exact masses ``P_j = e^{log_p[j]}``, ``Q_j = e^{log_q[j]}``
  and its privacy loss ``ln dP/dQ`` ranges in ``[loss_lo[j], loss_hi[j]]``
  (``+-inf`` allowed; equal ends = constant loss).

  * Upper (pessimistic): the cell's mass is split onto the two ends of its
    loss range with both masses kept (``p_a + p_b = P_j``, ``p_a e^{-a} +
    p_b e^{-b} = Q_j``): inside the cell the likelihood ratio's Q-law is
    replaced by the two-point law with the same mean on the ends of its
    range, a convex-order increase (Jensen), so the pair dominates (the same
    argument as connect-the-dots, Doroshenko et al., arXiv:2207.04380v1,
    Sec. 3). An end at ``+inf`` takes the P-mass that has no Q-mass (to
    ``inf_mass``); an end at ``-inf`` takes Q-mass only (P-mass moves up to
    the finite end). Then connect-the-dots onto the grid.
  * Lower (optimistic): the cells are merged into groups of likelihood
    ratio exactly on the grid (:func:`dominated_on_grid`; merging outcomes
    is post-processing, so the merged pair is dominated by the mechanism).

  Args:
    log_p, log_q: log cell masses (1-D, same shape; -inf allowed).
    loss_lo, loss_hi: the loss range of each cell.
    step: grid step > 0. pessimistic: upper (True) or lower (False).

  Returns:
    ``jaxacct.pld.PLD`` (one direction: P-law of ``ln dP/dQ``).

  Bound: upper (pessimistic) / lower (optimistic).
  """
  lp, lq = np.asarray(log_p, np.float64), np.asarray(log_q, np.float64)
  a, b = np.asarray(loss_lo, np.float64), np.asarray(loss_hi, np.float64)
  live = lp > -np.inf
  lp, lq, a, b = lp[live], lq[live], a[live], b[live]
  if not pessimistic:
    return dominated_on_grid(np.exp(lp), np.exp(lq), step=step)
  with np.errstate(invalid="ignore", over="ignore"):
    rho = np.where(lq > -np.inf, lp - lq, np.inf)
  rho = np.clip(rho, a, b)
  P = np.exp(lp)
  losses, probs = [], []
  inf_mass = 0.0
  # b = +inf: keep the Q-mass at a (P-mass Q e^a), the rest of P to +inf
  top = np.isinf(b) & (b > 0)
  if np.any(top):
    ta = a[top]
    pa = np.where(np.isfinite(ta), np.exp(np.minimum(lq[top] + ta, lp[top])), 0.0)
    pa = np.minimum(pa, P[top])
    inf_mass += float(np.sum(P[top] - pa))
    fin = np.isfinite(ta)
    losses.append(ta[fin])
    probs.append(pa[fin])
  rest = ~top
  a2, b2, r2, P2 = a[rest], b[rest], rho[rest], P[rest]
  low = np.isinf(a2)                           # a = -inf: all P-mass to b
  losses.append(b2[low])
  probs.append(P2[low])
  mid = ~low
  a3, b3, r3, P3 = a2[mid], b2[mid], r2[mid], P2[mid]
  width = b3 - a3
  with np.errstate(invalid="ignore", divide="ignore"):
    frac = np.where(width > 0, np.expm1(a3 - r3) / np.expm1(-width), 0.0)
  frac = np.clip(np.nan_to_num(frac, nan=0.0), 0.0, 1.0)
  losses += [a3, b3]
  probs += [P3 * (1.0 - frac), P3 * frac]
  L = np.concatenate(losses)
  W = np.concatenate(probs)
  keep = W > 0
  if not np.any(keep):
    L, W, keep = np.zeros(1), np.zeros(1), np.ones(1, bool)
  return _from_atoms(L[keep], W[keep], step=step, pessimistic=True,
                          inf_mass=min(inf_mass, 1.0))


# --------------------------------------------------------------------------
# dominated pairs on the grid (second order): exact merging of outcomes


#: atoms per call of :func:`_merge_scan`: one compiled program serves every length
#: (the carry passes from chunk to chunk, so the merge is the one sequential scan).
_CHUNK = 1 << 14


@jit
def _merge_scan(p, q, rho, step, carry):
  """Greedy merge of ratio-sorted atoms into groups of likelihood ratio on the grid.

  Carry: the open group's P- and Q-mass and its target grid index. Each atom
  either joins the open group, or closes it (the fraction f of the atom that
  brings the group's ratio exactly to the target joins it) and opens the next
  group with the rest (target: the first grid value >= the atom's ratio).
  Emits per atom: (closed?, grid index, P-mass of the closed group), and the
  carry after the last atom (the next chunk's start).
  """
  require_x64("jaxacct.accounting dominated_on_grid")

  def body(carry, x):
    pg, qg, t, started = carry
    pj, qj, rj = x
    live = pj > 0
    tj = jnp.ceil(rj / step)
    big = jnp.exp(t * step)
    s = pg - big * qg                 # <= 0: the open group's excess at target
    ej = pj - big * qj
    close = live & started & (s + ej >= 0)
    f = jnp.where(close, jnp.clip(-s / jnp.where(ej > 0, ej, 1.0), 0.0, 1.0), 0.0)
    out = (close, t, pg + f * pj)
    # new state
    npg = jnp.where(close, (1 - f) * pj, jnp.where(live, pg + pj, pg))
    nqg = jnp.where(close, (1 - f) * qj, jnp.where(live, qg + qj, qg))
    nt = jnp.where(close | (live & ~started), tj, t)
    nst = started | live
    return (npg, nqg, nt, nst), out

  return jax.lax.scan(body, carry, (p, q, rho))


def _scan(pv, qv, rho, h, carry):
  """:func:`_merge_scan` over ratio-sorted atoms, chunk by chunk from ``carry`` (the
  last chunk padded with atoms of mass 0, which leave the carry as it is): (grid
  index, P-mass) of the groups closed, and the carry after the last atom."""
  n = pv.size
  if n == 0:
    return np.zeros(0, np.int64), np.zeros(0), carry
  size = -(-n // _CHUNK) * _CHUNK                 # the last chunk padded
  pad = size - n
  pj = np.concatenate([pv, np.zeros(pad)])
  qj = np.concatenate([qv, np.zeros(pad)])
  rj = np.concatenate([rho, np.full(pad, rho[-1])])
  hh = np.float64(h)
  outs = []
  for i in range(0, size, _CHUNK):
    sl = slice(i, i + _CHUNK)
    carry, out = _merge_scan(pj[sl], qj[sl], rj[sl], hh, carry)
    outs.append(out)
  closed, ts, ps = (np.concatenate([np.asarray(o[k]) for o in outs]) for k in range(3))
  return ts[closed].astype(np.int64), ps[closed], carry


def _start():
  zero = np.zeros((), np.float64)
  return (zero, zero, zero, np.zeros((), bool))


def _sweeps(pv, qv, h, cut):
  """:func:`_greedy` of ``(pv, qv)`` (ratio-sorted) and of its first ``cut`` atoms, in
  one pass: the sweep of the first atoms is the whole sweep's up to its carry there
  (the atoms are in the same order). ``[(index, mass, left) of the first cut atoms,
  (...) of all]``."""
  rho = np.log(pv) - np.log(qv)
  order = np.argsort(rho, kind="stable")
  pv, qv, rho = pv[order], qv[order], rho[order]
  i1, m1, c1 = _scan(pv[:cut], qv[:cut], rho[:cut], h, _start())
  i2, m2, c2 = _scan(pv[cut:], qv[cut:], rho[cut:], h, c1)
  left = lambda c: (float(c[0]), float(c[1]))   # noqa: E731
  return [(i1, m1, left(c1)), (np.concatenate([i1, i2]), np.concatenate([m1, m2]), left(c2))]


def _greedy(pv, qv, h):
  """Runs :func:`_merge_scan` on atoms (p, q > 0), chunk by chunk: (grid index,
  P-mass) of the closed groups and (P, Q) of the unfinished last group."""
  return _sweeps(pv, qv, h, pv.size)[1]


def dominated_on_grid(p, q, *, step: float, inf_mass: float = 0.0):
  r"""A PLD on the grid, dominated by the discrete pair (p, q), second-order tight.

  Merging outcomes of a pair (reporting only which group an outcome fell in)
  is post-processing, so the merged pair is dominated by the original one
  and so are its compositions. Outcomes are sorted by likelihood ratio and
  merged greedily into consecutive groups whose likelihood ratio is exactly
  a grid value ``e^{i step}`` (an outcome may be split between two groups by
  an independent coin, also post-processing): each group gathers outcomes
  from just below to just above its grid value. The merged pair lies on the
  grid without any rounding, so its error is a contraction of width ~step
  per group: second order in ``step``, against first order for rounding
  losses down (``jaxacct.pld``'s optimistic PLDs lose ~step/2 of loss per
  composition). The last, unfinished group is rounded down. A 1e-12
  relative margin on every group's P-mass covers float rounding of the
  group ratios (a loss error <= 1e-12 moves delta by <= 1e-12 of the mass).

  Args:
    p, q: 1-D arrays of the P- and Q-masses of the outcomes of a pair
      (``q = 0 < p``: +inf loss, to ``inf_mass``; ``p = 0``: ignored).
    step: grid step > 0.
    inf_mass: extra P-mass at +inf.

  Returns:
    ``jaxacct.pld.PLD`` with ``pessimistic=False``.

  Bound: lower (every delta of every composition is a lower bound).
  """
  checks.check_positive("step", step)
  h = float(step)
  pv, qv = np.asarray(p, np.float64).ravel(), np.asarray(q, np.float64).ravel()
  if pv.shape != qv.shape or np.any(pv < 0) or np.any(qv < 0):
    raise ValueError("p and q must be arrays of the same shape with entries >= 0.")
  inf = float(inf_mass) + float(np.sum(pv[(qv == 0) & (pv > 0)]))
  keep = (pv > 0) & (qv > 0)
  pv, qv = pv[keep], qv[keep]
  if pv.size == 0:
    return jpld.PLD(jnp.zeros(1, jnp.float64), 0, h,
                    jnp.asarray(min(inf, 1.0), jnp.float64), False)
  # Sweeps: ascending ratios (groups aim at the next grid value up; the top
  # group cannot be completed), descending ratios (on the reversed pair; the
  # bottom group cannot), and both towards a light interior atom (only the
  # two meeting groups remain, merged). The unfinished group is rounded
  # down; keep the sweep whose rounding costs least (P-mass x loss lost).
  order = np.argsort(np.log(pv) - np.log(qv), kind="stable")
  pv, qv = pv[order], qv[order]
  n = pv.size
  splits = [n, 0]
  if n >= 40:
    lo_i, hi_i = n // 20, n - n // 20
    splits.append(lo_i + int(np.argmin(pv[lo_i:hi_i])))
  # The interior split's sweeps are the whole sweeps' up to the split (one pass each),
  # unless two atoms of equal ratio sit on both sides of it (the descending sweep
  # keeps equal ratios in index order: its order of atoms[k:] is then not a prefix).
  up, down = {}, {}
  if len(splits) == 3 and 0 < splits[2] < n:
    k = splits[2]
    rho = np.log(pv) - np.log(qv)
    if rho[k - 1] < rho[k]:
      part, whole = _sweeps(pv, qv, h, k)
      up = {k: part, n: whole}
      part, whole = _sweeps(qv, pv, h, n - k)    # its sort puts atoms[k:] first
      down = {k: part, 0: whole}
  best = None
  for k in splits:
    idx_l, mass_l, left = [], [], [0.0, 0.0]
    if k > 0:      # ascending on atoms[:k]
      i, m, (a, b) = up[k] if k in up else _greedy(pv[:k], qv[:k], h)
      idx_l.append(i)
      mass_l.append(m)
      left[0] += a
      left[1] += b
    if k < n:      # descending on atoms[k:]: the reversed pair, ascending
      i, m, (a, b) = down[k] if k in down else _greedy(qv[k:], pv[k:], h)
      # groups have Q/P = e^{i h}: original loss -i h, P-mass = Q-mass e^{-i h}
      idx_l.append(-i)
      mass_l.append(m * np.exp(-i * h))
      left[0] += b
      left[1] += a
    idx = np.concatenate(idx_l)
    mass = np.concatenate(mass_l)
    cost = 0.0
    if left[0] > 0 and left[1] > 0:
      r = math.log(left[0]) - math.log(left[1])
      kk = int(math.floor(r / h))
      cost = left[0] * (r - kk * h)
      idx = np.concatenate([idx, [kk]])
      mass = np.concatenate([mass, [left[0]]])
    if best is None or cost < best[0]:
      best = (cost, idx, mass)
  _, idx, mass = best
  mass = mass * (1.0 - 1e-12)
  lo = int(idx.min())
  probs = np.zeros(int(idx.max()) - lo + 1)
  np.add.at(probs, idx - lo, mass)
  # NumPy arrays (a host PLD): a device copy would compile a program per length
  return jpld.PLD(probs, lo, h, np.float64(min(inf, 1.0)), False)
