r"""Fixed-grid FFT composition of allocation laws inside ``jit`` (private).

Proofs and sources: docs/bounds/allocation_pld.md ("Bounds and proofs /
Random allocation: the tight PLD").
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core.namespace import JAX
from jaxacct._core.tilted_fft import cmul as _cmul, compose_atoms as _compose_law
from jaxacct._core.tilted_fft import lmgf as _lmgf, moments as _moments

from jaxacct._core.batching import accelerator_layout
from jaxacct._core.dtype import require_x64
from jaxacct.allocation.pld._laws import EPS64, FinalLaws

DEFAULT_SIZE = 1 << 15      # lattice points N (static)
DEFAULT_TILTS = 4           # tilts per direction (plus mu = 0 and mu = 1)
_U = EPS64
# Chernoff exponents: 0 and 1 exactly, and +-sinh-spaced up to 1e4 (about 5 %
# apart above |mu| = 1: the fold bounds need the minimising exponent closely).
_MU = np.unique(np.concatenate([np.sinh(np.linspace(-math.asinh(1e4), math.asinh(1e4), 383)),
                                [0.0, 1.0]]))
_G0 = int(np.argmin(np.abs(_MU)))
_G1 = int(np.argmin(np.abs(_MU - 1.0)))
# The sweep grid (``compose_laws(..., sweep=True)``): the same range, about 22 %
# apart above |mu| = 1. Any grid gives valid Chernoff bounds (each is a min over
# the grid); a coarser one only loosens the window and the fold bounds a little
# (tightness), and the grid log-MGFs over every atom are most of the cost of a
# small lattice (about a fifth of the work per lane for the window at t = 234).
_MU_SWEEP = np.unique(np.concatenate([np.sinh(np.linspace(-math.asinh(1e4), math.asinh(1e4),
                                                          95)), [0.0, 1.0]]))
#: Binary-powering levels of a jitted composition on the accelerator layout
#: (static): the bit length of the largest count the doors allow (num_selected
#: * num_epochs <= 2**20). Lanes with shorter counts run masked no-op levels
#: (:meth:`jaxacct._core.namespace.Namespace.with_max_trips`: bit for bit the
#: powers of a run-time level count, NaN past it); the CPU layout runs each
#: lane's own levels.
COUNT_LEVELS = 21
CUT_EPS = 1e-5              # round tail cuts, eps queries (x delta / (k E))
CUT_DELTA = 1e-9            # round tail cuts, delta queries (x Chernoff bound / (k E))


class Composed(NamedTuple):
  """Composed upper/lower laws on the window [m h, (m + N - 1) h] (one lane)."""
  h: jax.Array
  m: jax.Array          # int64 index of the first window point
  wu: jax.Array         # upper Q-masses at the knots (N,)
  q0u: jax.Array        # upper Q-mass at x = 0 (+ charged window tails)
  defu: jax.Array       # upper first-moment defect (remove P-mass at +inf)
  wl_lo: Optional[jax.Array]   # lower merged atoms: Q-mass, lower/upper ends
  wl_hi: Optional[jax.Array]
  pl_lo: Optional[jax.Array]   # ... P-mass (= Q-mass x barycentre), lower/upper ends
  pl_hi: Optional[jax.Array]
  q0l: jax.Array        # lower Q-mass at x = 0
  singl: jax.Array      # lower singular P-mass (remove)
  fup: jax.Array        # relative float factor of the upper values (>= 1)
  flo: jax.Array        # relative float factor of the lower values (<= 1)
  H: jax.Array          # log-position slack of the upper values (an epsilon shift)
  H_lo: jax.Array       # log-position slack of the lower values


# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------

def _safe_log(x, xp=jnp):
  return xp.where(x > 0, xp.log(xp.where(x > 0, x, 1.0)), -xp.inf)


def _expdiff(a, b, xp=jnp):
  """exp(a) - exp(b) for a >= b (log inputs; -inf allowed), >= 0."""
  a = xp.maximum(a, b)
  return xp.where(a > -xp.inf, xp.exp(a) * -xp.expm1(xp.minimum(b - a, 0.0)), 0.0)


def truncate_round(F: FinalLaws, tau_hi, tau_lo, ns=JAX) -> FinalLaws:
  """Cuts a round's far tails before composition (valid in both directions).

  Upper: the atoms above the last position whose P-mass tail exceeds tau_hi
  are split onto {0, +inf} (Q-mass to q0, P-mass = first moment to the
  defect: delta_rem grows by at most tau_hi per round); the atoms below the
  first position whose Q-mass head exceeds tau_lo are split onto {0, x_b}
  (x_b the first kept knot; mean preserving: delta_add grows by at most
  tau_lo per round).
  Both are mean-preserving spreads. Lower: atoms outside [x_b, x_c] are
  dropped (a sub-probability law below the truth). Far atoms of tiny mass
  would otherwise dominate the tilted FFTs' moment generating functions.
  """
  xp = ns.xp
  w, loss = F.up_p, F.up_loss
  x = xp.exp(loss)
  pm = w * x
  cs = xp.cumsum(xp.stack([pm[::-1], w]), axis=1)    # one stacked cumsum kernel
  tail_p = cs[0][::-1]                                  # P-mass at or above i
  head_q = cs[1]                                        # Q-mass at or below i
  n = w.shape[0]
  i = xp.arange(n)
  hi = xp.sum(tail_p > tau_hi) - 1                     # last index kept (-1: none)
  lo = xp.sum(head_q <= tau_lo)                        # first index kept
  lo = xp.minimum(lo, xp.maximum(hi, 0))
  above = i > hi
  below = i < lo
  xb = x[xp.clip(lo, 0, n - 1)]
  fb = xp.where(below, x / xb, 0.0)                    # share of each atom put at x_b
  up_p = xp.where(above | below, 0.0, w)
  up_p = ns.add_at(up_p, xp.clip(lo, 0, n - 1), xp.sum(w * fb))
  up_q0 = F.up_q0 + xp.sum(xp.where(above, w, 0.0)) + xp.sum(w * xp.where(below, 1.0 - fb,
                                                                                0.0))
  up_minf_t = F.up_minf_t + xp.sum(xp.where(above, pm, 0.0)) * (1.0 + 4 * _U)
  lo_keep = (F.lo_loss <= loss[xp.clip(hi, 0, n - 1)]) & (F.lo_loss >= loss[xp.clip(lo, 0,
                                                                                         n - 1)])
  lo_a = xp.where(lo_keep, F.lo_a, 0.0)
  return F._replace(up_p=up_p, up_q0=up_q0, up_minf_t=up_minf_t, lo_a=lo_a)


def _upper_atoms(F: FinalLaws, h, xp=jnp):
  """Upper round law split (mean preserving in x) onto the h-lattice."""
  loss, w = F.up_loss, F.up_p
  ok = w > 0
  i = xp.floor(loss / h)
  e = xp.clip(loss - i * h, 0.0, h)
  th = xp.clip(xp.expm1(e) / xp.expm1(h), 0.0, 1.0)
  idx = xp.concatenate([i, i + 1.0]).astype(xp.int64)
  lw = xp.concatenate([_safe_log(xp.where(ok, w * (1.0 - th), 0.0), xp),
                       _safe_log(xp.where(ok, w * th, 0.0), xp)])
  mx = xp.max(xp.where(ok, xp.abs(loss), 0.0))
  return idx, lw, mx


def _lower_atoms(F: FinalLaws, h, xp=jnp):
  """Lower round law binned at the knot below each atom, exact moments kept."""
  loss, a = F.lo_loss, F.lo_a
  ok = a > 0
  idx = xp.floor(loss / h).astype(xp.int64)
  lw = _safe_log(xp.where(ok, a, 0.0), xp)
  lp = xp.where(ok, lw + loss, -xp.inf)
  mx = xp.max(xp.where(ok, xp.abs(loss), 0.0))
  return idx, lw, lp, mx


def _window(Fs, cs, log_tau, N, xp=jnp, mu=None, step=None):
  """(h, m, bot, top, K, K1, K2) from Chernoff bounds of the composed
  continuous upper law; K, K1, K2: its log-MGF, tilted mean and variance on
  the mu grid (default ``_MU``). ``step`` (optional): h is moved up to the
  nearest step / j or j step (j a positive integer), so that every multiple
  of ``step`` is a lattice point (the PLD export's grid)."""
  mu = xp.asarray(_MU) if mu is None else mu
  parts = [[_cmul(c, v, xp) for v in _moments(_safe_log(F.up_p, xp), F.up_loss, mu, xp)]
           for c, F in zip(cs, Fs)]
  K, K1, K2 = (sum(p[i] for p in parts) for i in range(3))
  Kf = xp.where(xp.isfinite(K), K, xp.inf)
  top = xp.min(xp.where(mu > 1.0, (Kf - log_tau) / (mu - 1.0), xp.inf))
  bot = xp.max(xp.where(mu < 0.0, (log_tau - Kf) / (-mu), -xp.inf))
  ok = xp.isfinite(top) & xp.isfinite(bot) & (top > bot)
  top = xp.where(ok, top, 1.0)
  bot = xp.where(ok, bot, -1.0)
  h = xp.maximum((top - bot) / (N - 16), 1e-12)
  if step is not None:
    j = xp.floor(step / h)
    h = xp.where(j >= 1, step / xp.maximum(j, 1.0), step * xp.ceil(h / step))
  m = xp.floor(bot / h).astype(xp.int64) - 8
  return h, m, bot, top, Kf, K1, K2


def _exact(blocks, counts, x, xp=jnp):
  """Composed log-MGF, tilted mean and variance at the exponents x (exact)."""
  out = [_moments(lw, pos, x, xp) for lw, pos in blocks]
  return tuple(sum(_cmul(c, o[i], xp) for c, o in zip(counts, out)) for i in range(3))


def _roots(f, lo, hi, ns=JAX):
  """Roots of the elementwise decreasing ``f`` (a vector of problems) between
  ``lo`` (f > 0) and ``hi`` (f <= 0); the feasible (upper) ends.

  One traced copy of ``f`` serves every problem: 30 halvings of
  :func:`jaxacct._core.solve.bisect` on the vector of brackets. A problem
  with an increasing ``f`` is posed in y = -x (the halving iterates are the
  exact negatives, so the root is bit for bit the one found in x).
  """
  return ns.bisect(f, lo, hi, increasing=False, num_iters=30)


def _tilts(blocks, counts, K, K1, K2, mu, mode, value, per_side, ns=JAX):
  """Tilt exponents of the W-law: 0, 1, and per_side around each direction's
  relevant position.

  remove: W-positions just above eps (P-mass above eps); add: just below
  -eps. For an eps query, eps is located by the saddlepoint approximations
  delta_rem ~ e^{K(1+l) - l x} / (sqrt(2 pi K'') l (1 + l)) at the saddle
  x = K'(1 + l), l > 0, and delta_add ~ e^{K(m) - m x} / (sqrt(2 pi K'')
  |m| (1 + |m|)), m < 0 (grid bracket, then bisection in the exponent with
  exact moments); for a delta query the saddles of x = eps and x = -eps.
  The tilts form a ladder 1 -> saddle (remove) and 0 -> saddle (add) of
  ``per_side - 1`` steps, plus one 1.5 / sqrt(K'') beyond each saddle.
  Tightness only: any tilt is valid, its error bound is explicit.
  """
  xp = ns.xp
  value = xp.asarray(value, xp.float64)
  G = mu.shape[0]
  sd = lambda v: xp.sqrt(xp.maximum(v, 1e-16))
  if mode == "eps":
    ld = xp.log(value)

    def est(x, rem):
      k, k1, k2 = _exact(blocks, counts, x, xp)
      lam = xp.where(rem, x - 1.0, -x)
      v = k - (x - xp.where(rem, 1.0, 0.0)) * k1 - xp.log(sd(k2) * xp.sqrt(2 * xp.pi)) \
          - xp.log(lam * (1.0 + lam))
      return xp.where(xp.isfinite(v), v, xp.where(lam > 0, -xp.inf, xp.inf)) - ld

    lam_g = xp.where(mu > 1.0, mu - 1.0, -mu)
    e_g = (K - (mu - xp.where(mu > 1.0, 1.0, 0.0)) * K1 - xp.log(sd(K2) * xp.sqrt(2 * xp.pi))
           - xp.log(lam_g * (1.0 + lam_g)))
    below = xp.isfinite(e_g) & (e_g <= ld)
    pos_r = (mu > 1.0) & below
    g = xp.where(xp.any(pos_r), xp.argmax(pos_r), G - 1)
    neg = (mu < 0.0) & below
    ga = xp.where(xp.any(neg), G - 1 - xp.argmax(neg[::-1]), 0)
    # remove in x (decreasing), add in y = -x (est(., add) increases in x)
    sgn = xp.asarray([1.0, -1.0])
    rem = xp.asarray([True, False])
    lo = xp.stack([xp.maximum(mu[g - 1], 1.0),
                    -xp.minimum(mu[xp.minimum(ga + 1, G - 1)], 0.0)])
    hi = xp.stack([mu[g], -mu[ga]])
    mu_r, mu_a = sgn * _roots(lambda y: est(sgn * y, rem), lo, hi, ns)
  else:
    g = xp.clip(xp.sum(K1[None, :] < xp.stack([value, -value])[:, None], axis=1), 1, G - 1)
    target = xp.stack([value, -value])
    mu_r, mu_a = _roots(lambda x: target - _exact(blocks, counts, x, xp)[1], mu[g - 1], mu[g],
                        ns)
  fin = lambda x: xp.where(xp.isfinite(x), x, 0.0)
  mu_r, mu_a = fin(mu_r), fin(mu_a)
  s_r, s_a = sd(_exact(blocks, counts, xp.stack([mu_r, mu_a]), xp)[2])
  # a ladder from the plain FFTs to the saddle (heavy-tailed rounds fold far
  # mass into the window at large tilts: the point-wise pick then prefers an
  # intermediate tilt), and one tilt 1.5 standard deviations beyond it
  f = xp.arange(1, per_side) / max(per_side - 1, 1)
  lad_r = 1.0 + (mu_r - 1.0) * f
  lad_a = mu_a * f
  return xp.concatenate([xp.asarray([0.0, 1.0]), lad_r, xp.atleast_1d(mu_r + 1.5 / s_r),
                          lad_a, xp.atleast_1d(mu_a - 1.5 / s_a)])


def _cut_levels(Fs, cs, mode, query, mu, xp=jnp):
  """Per-round tail cuts (P-mass above, Q-mass below) for the composition.

  eps queries: CUT_EPS * delta / (k E) (the upper delta grows by at most
  CUT_EPS * delta). delta queries: CUT_DELTA times the Chernoff bounds of
  the two deltas at eps (bounds of the truth, so the growth is at most
  CUT_DELTA * Chernoff / delta relative), divided by k E. Tightness only.
  """
  c_tot = xp.maximum(sum(cs), 1.0)
  value = xp.asarray(query, xp.float64)
  if mode == "eps":
    lv = CUT_EPS * value / c_tot
    return lv, lv
  K = sum(_cmul(c, _lmgf(_safe_log(F.up_p, xp), F.up_loss, mu, xp), xp) for c, F in zip(cs, Fs))
  K = xp.where(xp.isfinite(K), K, xp.inf)
  c_r = xp.min(xp.where(mu > 1.0, K - (mu - 1.0) * value, xp.inf))   # P(L >= eps)
  c_a = xp.min(xp.where(mu < 0.0, K + mu * value, xp.inf))           # Q(L <= -eps)
  f = lambda c: CUT_DELTA * xp.exp(xp.clip(c, -700.0, 0.0)) / c_tot
  return f(c_r), f(c_a)


def _prepare(F1, F2, c1, c2, tau, query, mode, blocks, sweep, xp, ns):
  """(Fs, cs, c_tot, mu, log_tau): the rounds cut (:func:`truncate_round`) and counted."""
  cs = [xp.asarray(c1, xp.float64), xp.asarray(c2, xp.float64)]
  c_tot = cs[0] + cs[1]
  Fs, cs = [F1, F2][:blocks], cs[:blocks]
  mu = xp.asarray(_MU_SWEEP if sweep else _MU)
  log_tau = xp.log(xp.asarray(tau, xp.float64))
  t_hi, t_lo = _cut_levels(Fs, cs, mode, min(query) if isinstance(query, tuple) else query,
                           mu, xp)
  Fs = [truncate_round(F, t_hi, t_lo, ns) for F in Fs]
  return Fs, cs, c_tot, mu, log_tau


def window_span(F1: FinalLaws, F2: FinalLaws, c1, c2, tau, query, *, mode: str,
                blocks: int = 2, ns=JAX):
  """Width top - bot of the window :func:`compose_laws` puts its lattice on
  (the same arguments): the lattice step is about width / (size - 16)."""
  xp = ns.xp
  Fs, cs, _, mu, log_tau = _prepare(F1, F2, c1, c2, tau, query, mode, blocks, False, xp, ns)
  _, _, bot, top, _, _, _ = _window(Fs, cs, log_tau, 1 << 15, xp, mu)
  return top - bot


def compose_laws(F1: FinalLaws, F2: FinalLaws, c1, c2, tau, query, *, mode: str,
                 size: int, tilts: int, want_lower: bool, blocks: int = 2,
                 sweep: bool = False, step=None, ns=JAX) -> Composed:
  """Composition of c1 rounds with laws F1 and c2 rounds with laws F2 (one lane).

  ``mode`` ("eps": ``query`` is a delta; "delta": an epsilon; it only places
  the tilts), ``size`` (N), ``tilts`` (per direction), ``want_lower`` and
  ``blocks`` (1: F2 and c2 are not used; 2: c2 = 0 still leaves F2 out
  exactly, at the cost of its arrays) are static; c1, c2 (>= 0, float),
  ``tau`` (window tail, > 0) and ``query`` traced. ``ns``: ``JAX`` (jittable)
  or ``HOST`` (NumPy, concrete input; see :mod:`jaxacct._core.namespace`).
  ``sweep`` (static): the coarser Chernoff grid ``_MU_SWEEP`` for the window,
  the tilts and the fold bounds (valid for any grid; tightness only).
  ``query`` may be a tuple of values (static length): tilts for each, the
  cuts for the smallest. ``step`` (optional, > 0): the lattice step is moved
  up to step / j or j step (j a positive integer), so the lattice holds the
  grid of multiples of ``step`` (the PLD export's; tightness only).
  Bound: see the module docstring (upper and lower, float ledger included).
  """
  xp = ns.xp
  if not ns.is_host:
    require_x64("allocation.pld composition")
  N = int(size)
  Fs, cs, c_tot, mu, log_tau = _prepare(F1, F2, c1, c2, tau, query, mode, blocks, sweep, xp,
                                        ns)
  h, m, bot, top, Kc, K1, K2 = _window(Fs, cs, log_tau, N, xp, mu, step)
  tw = xp.concatenate([_tilts([(_safe_log(F.up_p, xp), F.up_loss) for F in Fs], cs, Kc, K1, K2,
                              mu, mode, q, tilts, ns)
                       for q in (query if isinstance(query, tuple) else (query,))])

  # ---- the compositions: upper Q-mass, and (want_lower) the lower atoms'
  # Q-mass W and P-mass P. One traced copy of _compose_law serves all three
  # (lax.map; the lower atom arrays are padded to the upper's length with
  # empty atoms, log-mass -inf at index 0, which add exact zeros), so the
  # program holds the composition once instead of twice.
  ua = [_upper_atoms(F, h, xp) for F in Fs]
  law_ns = ns.with_max_trips(COUNT_LEVELS) if not ns.is_host and accelerator_layout() else ns
  law = lambda a: _compose_law(list(zip(a[0], a[1])), cs, h, m, N, a[2], c_tot, mu, law_ns,
                               grid_lmgf=a[3])
  # each law's log-MGF on the Chernoff grid, on its own atoms (the lower ones
  # unpadded: half the upper's count, and most of the exponentials of a lane)
  grid = lambda idx, lw: _lmgf(lw, idx.astype(xp.float64) * h, mu, xp)
  if want_lower:
    la = [_lower_atoms(F, h, xp) for F in Fs]
    size_u = ua[0][0].shape[0]
    pad = lambda x, v: xp.concatenate([x, xp.full(size_u - x.shape[0], v, x.dtype)])
    idxs, lws, gls = [], [], []
    for u, b in zip(ua, la):
      idxs.append(xp.stack([u[0], pad(b[0], 0), pad(b[0], 0)]))
      lws.append(xp.stack([u[1], pad(b[1], -xp.inf), pad(b[2], -xp.inf)]))
      gls.append(xp.stack([grid(u[0], u[1]), grid(b[0], b[1]), grid(b[0], b[2])]))
    vals, errs, effts, Ks = ns.map_seq(law, (idxs, lws, xp.stack([tw, tw, tw - 1.0]), gls))
    wu, efu, Ku = vals[0], effts[0], Ks[0]
  else:
    wu, _, efu, Ku = law(([a[0] for a in ua], [a[1] for a in ua], tw,
                          [grid(a[0], a[1]) for a in ua]))
  wu = xp.maximum(wu, 0.0) + efu
  tot = [xp.sum(F.up_p) for F in Fs]
  mean = [xp.exp(l) for l in
          (_lmgf(a[1], a[0].astype(xp.float64) * h, xp.ones(1), xp)[0] for a in ua)]
  sl = lambda x: _safe_log(x, xp)
  cm = lambda c, v: _cmul(c, v, xp)
  q0c = _expdiff(sum(cm(c, sl(t + F.up_q0)) for c, t, F in zip(cs, tot, Fs)),
                 sum(cm(c, sl(t)) for c, t in zip(cs, tot)), xp)
  defc = _expdiff(sum(cm(c, sl(a + F.up_minf_t)) for c, a, F in zip(cs, mean, Fs)),
                  sum(cm(c, sl(a)) for c, a in zip(cs, mean)), xp)
  Kuf = xp.where(xp.isfinite(Ku), Ku, xp.inf)
  topw = (m + N).astype(xp.float64) * h
  botw = (m - 1).astype(xp.float64) * h
  q_hi = xp.min(xp.where(mu > 0, Kuf - mu * topw, xp.inf))
  q_lo = xp.min(xp.where(mu < 0, Kuf - mu * botw, xp.inf))
  p_hi = xp.min(xp.where(mu > 1, Kuf - (mu - 1.0) * topw, xp.inf))
  q0u = q0c + xp.minimum(xp.exp(xp.minimum(q_hi, 0.0)) + xp.exp(xp.minimum(q_lo, 0.0)), 1.0)
  defu = defc + xp.exp(xp.minimum(p_hi, 0.0))

  # ---- lower
  if want_lower:
    wl, ewl, pl, epl = vals[1], errs[1], vals[2], errs[2]
    wl_lo, wl_hi = xp.maximum(wl - ewl, 0.0), xp.maximum(wl, 0.0) + ewl
    pl_lo, pl_hi = xp.maximum(pl - epl, 0.0), xp.maximum(pl, 0.0) + epl
    totl = [xp.sum(F.lo_a) for F in Fs]
    q0l = _expdiff(sum(cm(c, sl(t + F.lo_q0)) for c, t, F in zip(cs, totl, Fs)),
                   sum(cm(c, sl(t)) for c, t in zip(cs, totl)), xp)
    singl = -xp.expm1(sum(cm(c, xp.log1p(-xp.minimum(F.lo_inf, 1.0))) for c, F in zip(cs, Fs)))
    mx_lo = [a[3] for a in la]
  else:
    wl_lo = wl_hi = pl_lo = pl_hi = None
    q0l = singl = xp.zeros(())
    mx_lo = [xp.zeros(()) for _ in Fs]

  # ---- float ledger
  slack = 64 * _U * (c_tot + 8.0) + 8 * _U * N
  fup = xp.exp(sum(c * xp.log1p(F.rel) for c, F in zip(cs, Fs))) * (1.0 + slack)
  flo = xp.exp(sum(c * xp.log1p(-F.rel) for c, F in zip(cs, Fs))) * (1.0 - slack)
  # the lattice split of each side's atoms (upper: the upper atoms only, so the
  # upper values do not depend on whether the lower laws are composed)
  eta_disc = [xp.where(c > 0, 8 * _U * (a[2] + 2.0), 0.0) for a, c in zip(ua, cs)]
  eta_disc_lo = [xp.where(c > 0, 8 * _U * (xp.maximum(a[2], b) + 2.0), 0.0)
                 for a, b, c in zip(ua, mx_lo, cs)]
  knots = 8 * _U * (xp.abs(m.astype(xp.float64) * h) + N * h + 2.0)
  H = sum(c * (F.eta + e) for c, F, e in zip(cs, Fs, eta_disc)) + knots
  H_lo = sum(c * (F.eta_lo + e) for c, F, e in zip(cs, Fs, eta_disc_lo)) + knots
  fup = xp.where(xp.isnan(h), xp.nan, fup)
  return Composed(h, m, wu, q0u * (1.0 + slack), defu * (1.0 + slack), wl_lo, wl_hi, pl_lo,
                  pl_hi, q0l * (1.0 - slack), singl * (1.0 - slack), fup, flo, H, H_lo)
