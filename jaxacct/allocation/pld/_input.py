"""Mechanisms given as discrete PLDs: one-step laws and 1-of-t laws (private).

Ingestion of a ``jaxacct.pld.PLD`` / ``PairPLD`` / ``(upper, lower)`` tuple
into the dominating and dominated one-step Q-laws of X = L(Y) (``OneStep``),
and their 1-of-t sum laws (``pld_final_laws``). The validity argument for the
sums is in the docstring of :mod:`jaxacct.allocation.pld`; the one for the
one-step laws follows.

Proofs and sources: docs/bounds/allocation_pld.md ("Bounds and proofs /
Random allocation: the tight PLD").
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct import pld as jpld
from jaxacct._core.dtype import require_x64
from jaxacct._core.logmath import log_binom_pmf
from jaxacct.allocation.pld import _sum_law as sl
from jaxacct.allocation.pld._laws import EPS64 as _EPS
from jaxacct.allocation.pld._laws import FinalLaws, assemble_final
from jaxacct._core.compiled import jit

_PAIR_TOL = 1e-6      # E_P[e^-L] - 1 up to this is float noise, repaired pessimistically
_MASS_TOL = 1e-9      # total P-mass (probs + inf_mass) may exceed 1 by this (rounding)
_DEFICIT_TOL = 1e-12  # P-mass deficit below this counts as rounding (lower 0-atom kept)
_MAX_LOSS = 700.0     # |loss| of any atom (e^{+-loss} must stay finite)


class OneStep(NamedTuple):
  """One-step Q-law of X = L(Y) on the PLD's own lattice (numpy, eager).

  Atom i sits in the lattice cell [x_j, x_{j+1}), x_j = exp((idx0 + i) * step),
  with Q-mass ``qm[i]`` and first moment ``gm[i] * x_j`` (upper laws: atoms at
  the knots, gm = qm); ``q0`` is the Q-mass at x = 0; ``minf``: upper law -
  first moment carried at +inf (P-mass where Q = 0); lower law - P-mass at
  +inf kept in the remove profile.
  """
  qm: np.ndarray
  gm: np.ndarray
  idx0: int
  step: float
  q0: float
  minf: float


def pld_numpy(obj, name):
  if not isinstance(obj, jpld.PLD):
    raise ValueError(f"{name} must be a jaxacct.pld.PLD; got {type(obj).__name__}.")
  p = np.asarray(obj.probs, np.float64).ravel()
  step = float(np.asarray(obj.step))
  off = int(np.asarray(obj.offset))
  inf = float(np.asarray(obj.inf_mass))
  if not (math.isfinite(step) and step > 0):
    raise ValueError(f"{name}.step must be finite and > 0; got {step!r}.")
  if not np.all(np.isfinite(p)) or np.any(p < -1e-12):
    raise ValueError(f"{name}.probs must be finite and >= 0 (up to -1e-12 rounding); "
                     f"got min {float(np.min(p)) if p.size else 0.0!r}.")
  if not (0.0 <= inf <= 1.0):
    raise ValueError(f"{name}.inf_mass must be in [0, 1]; got {inf!r}.")
  p = np.maximum(p, 0.0)
  total = math.fsum(p) + inf
  if total > 1.0 + _MASS_TOL:
    raise ValueError(f"{name}: P-masses (sum of probs + inf_mass) must sum to <= 1; "
                     f"got {total!r}.")
  loss = (off + np.arange(p.size)) * step
  if p.size and np.any(np.abs(loss[p > 0]) > _MAX_LOSS):
    raise ValueError(f"{name}: finite losses must lie in [-{_MAX_LOSS}, {_MAX_LOSS}] "
                     "(put larger ones in inf_mass).")
  return p, off, step, inf, bool(obj.pessimistic), loss


def oriented(p, off, step, q0, minf, orientation, w):
  """Q-law atoms (at knots) in the remove orientation (x = e^l, Q-mass
  p e^-l) or the add orientation (the reversed pair of an add-direction PLD:
  x = e^-l, Q-mass p)."""
  if orientation == "remove":
    qm = p * w
    return OneStep(qm, qm, off, step, q0, minf)
  qm = p[::-1].copy()
  return OneStep(qm, qm, -(off + p.size - 1), step, q0, minf)


def upper_one_step(obj, orientation: str = "remove", name: str = "mechanism") -> OneStep:
  """Dominating one-step Q-law from a pessimistic (dominating) PLD.

  The PLD's canonical pair (P = probs, Q = e^-loss probs + the rest where
  P = 0) Blackwell-dominates the true pair whenever the PLD comes from a
  mean-preserving spread of the true Q-law of L (see the module docstring:
  connect-the-dots, ceil rounding, tail moves and FFT composition all are).
  A missing P-mass is put at loss +inf (pessimistic); a float excess of
  E_P[e^-L] over 1 (<= 1e-6) is removed by moving the lowest-loss P-mass to
  +inf (a spread); a larger excess raises (not a valid pair: e.g. an
  optimistic PLD, whose implied Q-mass exceeds 1).
  """
  p, off, step, inf, pess, loss = pld_numpy(obj, name)
  if not pess:
    raise ValueError(f"{name}: the upper bound needs a pessimistic (dominating) PLD; "
                     "pass an optimistic one as the lower element of (upper, lower).")
  p = p.copy()
  inf = min(1.0, inf + max(0.0, 1.0 - math.fsum(p) - inf))
  w = np.exp(-loss)
  W = math.fsum(p * w)
  if W > 1.0:
    if W > 1.0 + _PAIR_TOL:
      raise ValueError(f"{name}: not a valid pair, E_P[e^-L] = {W!r} > 1 (an optimistic "
                       "PLD? pass it as the lower element of (upper, lower)).")
    excess = (W - 1.0) * (1.0 + 1e-6)
    for i in np.nonzero(p > 0)[0]:       # ascending loss: largest e^-l first
      take = min(p[i], excess / w[i])
      p[i] -= take
      inf += take
      excess -= take * w[i]
      if excess <= 0.0:
        break
    W = math.fsum(p * w)
  inf = min(inf, 1.0)
  if orientation == "remove":
    return oriented(p, off, step, max(0.0, 1.0 - math.fsum(p * w)), inf, "remove", w)
  return oriented(p, off, step, inf, max(0.0, 1.0 - W) + 4 * _EPS, "add", w)


def lower_one_step(obj, orientation: str = "remove", name: str = "mechanism") -> OneStep:
  """Dominated one-step Q-law (both directions) from a PLD.

  Input contract: every atom of the true PLD lies in [loss, loss + step) of
  its PLD atom (exact pairs: at loss; jaxacct.pld's optimistic PLDs: rounded
  down), some P-mass may be missing (dropped tails), ``inf_mass`` is exact.

  Remove orientation. Candidate atoms x_i = e^{l_i} with Q-mass w_i = p_i e^{-l_i}
  (the most Q-mass a true cell can have). With C(a) = E(X - a)_+ and
  P(a) = E(a - X)_+ of the true Q-law nu, Jensen per cell gives
  C(a) >= sum_i w_i (x_i - a)_+ and P(a) >= g(a) := a - sum_i w_i min(x_i, a) - d
  (d = missing P-mass), and g is convex. The lower law nu' is the measure whose
  P-function is max(g, 0): the atoms x_i >= a* kept, and all lower atoms
  collapsed into one atom at a* = root of g, with mass 1 - sum_{x_i >= a*} w_i
  (<= their mass) and their moment (+ d). Then nu'(R) = 1, P' <= P and
  C' <= C, i.e. E f(X') <= E f(X) for every non-negative monotone convex f:
  exactly what the sum kernels need for both directions. If sum_i w_i <= 1
  and d = 0 this is the PLD's own Q-law with 0-atom 1 - sum w_i.
  Add orientation (the add PLD of a PairPLD: x = e^{-l} in (e^{-l-h}, e^{-l}],
  exact Q-mass p): atoms at the top e^{-l}, 0-atom inf_mass; serves the add
  direction (decreasing profiles) only, which is all it is used for.
  """
  p, off, step, inf, _, loss = pld_numpy(obj, name)
  w = np.exp(-loss)
  if orientation == "add":
    return oriented(p, off, step, inf, 0.0, "add", w)
  d = max(0.0, 1.0 - math.fsum(p) - inf)
  if d <= _DEFICIT_TOL:   # summation rounding of a complete PLD (admits an add-lower
    d = 0.0               # error <= e^eps * 1e-12; it would else park an atom at ~1e-13)
  wm = p * w                                   # Q-masses
  x = np.exp(loss)
  mom = p                                      # w_i x_i
  S_gt = np.concatenate([np.cumsum(wm[::-1])[::-1], [0.0]])   # sum_{i >= k} w_i
  M_lt = np.concatenate([[0.0], np.cumsum(mom)]) + d           # sum_{i < k} w_i x_i + d
  rest = 1.0 - S_gt
  xk = np.concatenate([x, [np.inf]])
  with np.errstate(divide="ignore", invalid="ignore"):
    a_k = np.where(rest > 0, M_lt / np.where(rest > 0, rest, 1.0), np.inf)
  ok = (rest > 0) & (a_k <= xk)
  k = int(np.argmax(ok))                       # ok[N] is always true
  qm = wm.copy()
  qm[:k] = 0.0
  gm = qm.copy()
  mass, a_star = float(rest[k]), float(a_k[k])
  q0 = 0.0
  idx0 = off
  if M_lt[k] <= 0.0:
    q0 = mass                                  # the collapsed atom sits at 0
  elif mass > 0.0:
    j = int(math.floor(math.log(a_star) / step))   # its lattice cell
    f = a_star / math.exp(j * step)
    if j < off:                                # extend the array downwards
      qm = np.concatenate([np.zeros(off - j), qm])
      gm = np.concatenate([np.zeros(off - j), gm])
      idx0 = j
    qm[j - idx0] += mass
    gm[j - idx0] += mass * f
  return OneStep(qm, gm, idx0, step, q0, inf)


def bucket(qm):
  size = max(256, 1 << max(qm.size - 1, 0).bit_length())   # few compiles
  return np.concatenate([qm, np.zeros(size - qm.size)])


def pld_upper(qm, idx0, step, q0, minf, t, tail, n):
  up = sl.UpperLaw(qm, q0, minf)
  lat = sl.Lattice(jnp.zeros(()), step, idx0)
  jl, jr = sl.window_upper(up, lat, tail)
  D2 = sl.new_step(jl, jr, step, n, 0.0)
  U1, L1 = sl.regrid_upper(up, lat, jl, D2, n)
  U, Ul, ledger = sl.sum_law_upper(U1, L1, t, n, tail, 0.0)
  ledger = ledger + 8 * _EPS * (4.0 + jnp.abs(jl * step) + qm.shape[0] * step + 2.5 * n * D2)
  return U, Ul, ledger


def pld_lower(qm, gm, idx0, step, q0, t, tail, n):
  lw = sl.LowerLaw(qm, gm, q0)
  lat = sl.Lattice(jnp.zeros(()), step, idx0)
  jl, jr = sl.window_lower(lw, lat, tail)
  D2 = sl.new_step(jl, jr + 1, step, n + 1, 0.0)   # n cells cover [x_jl, x_{jr+1})
  L1, LL1 = sl.regrid_lower(lw, lat, jl, D2, n)
  return sl.sum_law_lower(L1, LL1, t, n, tail, 0.0)


@functools.partial(jit, static_argnames=("n", "zc"))
def pld_laws_batch(up, lo, t, tail, qu, ql, *, n, zc=1):
  """FinalLaws for lanes (t, tail) from one-step laws ``up``, ``lo``
  (tuples (qm, gm, idx0, step, q0, minf) of arrays, see _jnp_step).

  Zero-atom mixture (``zc`` > 1, or qu/ql > 0): ``up``/``lo`` are then the laws
  of X given X > 0 and qu/ql their 0-atoms, and S_t = S~_K exactly with
  Z = t - K ~ Bin(t, q0). The components z = 0..zc-1 (S~_{t-z}, losses
  shifted by ln((t-z)/t)) are weighted and concatenated: every profile is
  linear in the law. Z = t adds q0^t at S = 0; the rest P(zc <= Z < t) is
  charged to the upper (as S = 0 for add, as first moment / (1 - q0) for
  remove) and dropped from the lower.
  """
  require_x64("allocation.pld")

  def comp(kk, tl):
    U, Ul, led = pld_upper(up[0], up[2], up[3], up[4], up[5], kk, tl, n)
    Lw, Ll = pld_lower(lo[0], lo[1], lo[2], lo[3], lo[4], kk, tl, n)
    return assemble_final(U, Ul, led, Lw, Ll, kk, n, jnp.zeros((), bool), lo[5])

  def one(tt, tl):
    z = jnp.arange(zc, dtype=jnp.int32)
    valid = z < tt
    k = jnp.maximum(tt - z, 1)
    F = jax.vmap(lambda kk: comp(kk, tl))(k)
    sh = jnp.log(k.astype(jnp.float64)) - jnp.log(tt.astype(jnp.float64))
    wu = jnp.where(valid, jnp.exp(log_binom_pmf(z, tt, qu)), 0.0)
    wl = jnp.where(valid, jnp.exp(log_binom_pmf(z, tt, ql)), 0.0)
    kt = k.astype(jnp.float64) / tt.astype(jnp.float64)
    tf = tt.astype(jnp.float64)
    all0_u = jnp.exp(tf * jnp.log(jnp.where(qu > 0, qu, 1.0))) * (qu > 0)
    all0_l = jnp.exp(tf * jnp.log(jnp.where(ql > 0, ql, 1.0))) * (ql > 0)
    rest = jnp.maximum(1.0 - jnp.sum(wu) - all0_u, 0.0) + 4 * _EPS * zc
    rest = jnp.where(jnp.asarray(zc == 1) & ~(qu > 0), 0.0, rest)
    flat = lambda a: a.reshape(-1)
    return FinalLaws(
        flat(F.up_p * wu[:, None]), flat(F.up_loss + sh[:, None]),
        jnp.sum(F.up_q0 * wu) + all0_u + rest,
        jnp.sum(F.up_minf_t * kt * wu) + rest / (1.0 - qu),
        flat(F.lo_a * wl[:, None]), flat(F.lo_loss + sh[:, None]),
        jnp.sum(F.lo_q0 * wl) + all0_l,
        jnp.where(tt >= 1, jnp.max(F.rel), jnp.nan), jnp.max(F.eta),
        lo[5] * (1.0 - jnp.max(F.rel)),   # H_rem = P_s + E(...): P_s whatever Z is
        jnp.max(F.eta_lo))

  return jax.vmap(one)(t, tail)


def jnp_step(o: OneStep):
  return (jnp.asarray(bucket(o.qm)), jnp.asarray(bucket(o.gm)), jnp.asarray(o.idx0, jnp.int32),
          jnp.asarray(o.step, jnp.float64), jnp.asarray(o.q0, jnp.float64),
          jnp.asarray(o.minf, jnp.float64))


def same(a: OneStep, b: OneStep):
  return (a.idx0 == b.idx0 and a.step == b.step and a.q0 == b.q0 and a.minf == b.minf
          and np.array_equal(a.qm, b.qm) and np.array_equal(a.gm, b.gm))


def pld_mechanism_laws(mechanism):
  """{direction: (upper OneStep, lower OneStep)} for a mechanism given as PLDs.

  ``mechanism``: a ``PLD`` (one valid pair: upper and lower from it, both
  directions), a ``PairPLD(remove, add)`` (remove allocation from the remove
  PLD, add allocation from the add PLD in the reversed orientation), or a
  tuple ``(upper, lower)`` of PLDs / PairPLDs (upper pessimistic; lower a
  valid pair or an optimistic PLD).
  """
  if isinstance(mechanism, (jpld.PLD, jpld.PairPLD)):
    up = lo = mechanism
  elif isinstance(mechanism, (tuple, list)) and len(mechanism) == 2:
    up, lo = mechanism
  else:
    raise ValueError("mechanism must be 'gaussian', 'laplace', a jaxacct.pld.PLD, a "
                     f"PairPLD or a tuple (upper, lower) of them; got {type(mechanism).__name__}.")

  def pick(x, d, name):
    if isinstance(x, jpld.PairPLD):
      return (x.remove, "remove") if d == "remove" else (x.add, "add")
    if isinstance(x, jpld.PLD):
      return x, "remove"
    raise ValueError(f"{name} must be a jaxacct.pld.PLD or PairPLD; got {type(x).__name__}.")

  out = {}
  for d in ("remove", "add"):
    upld, uo = pick(up, d, "mechanism (upper)")
    lpld, lo_o = pick(lo, d, "mechanism (lower)")
    out[d] = (upper_one_step(upld, uo, "mechanism (upper)"),
              lower_one_step(lpld, lo_o, "mechanism (lower)"))
  return out


def pld_final_laws(laws, t, tail, n):
  """(F_remove, F_add) batched over lanes t, tail (arrays); F_add is F_remove
  when both directions share their one-step laws."""
  tj = jnp.asarray(np.asarray(t).astype(np.int32))
  tl = jnp.asarray(tail, jnp.float64)
  tmax = int(np.max(t))
  tmin_tail = float(np.min(tail))
  (ur, lr), (ua, la) = laws["remove"], laws["add"]

  def run(u, l):
    (u, qu), (l, ql), zc = mixture_split(u, l, tmax, tmin_tail)
    return pld_laws_batch(jnp_step(u), jnp_step(l), tj, tl, jnp.asarray(qu),
                           jnp.asarray(ql), n=int(n), zc=zc)

  Fr = run(ur, lr)
  if same(ur, ua) and same(lr, la):
    return Fr, Fr
  return Fr, run(ua, la)


_MAX_MIX = 64          # most zero-atom mixture components (static, powers of 2)
_MIX_Q0 = 1e-12        # 0-atoms above this are handled by the exact mixture


def mixture_split(u: OneStep, l: OneStep, t: int, tail: float):
  """((u~, qu), (l~, ql), zc): laws given X > 0 and the 0-atoms, when a
  0-atom is material and the binomial count of zeros fits in zc <= 64
  components (P(Z >= zc) <= 1e-3 tail, both laws); else the laws unchanged,
  0, 0, 1 (the 0-atom stays inside the sum kernels: valid, looser)."""
  from scipy.stats import binom
  q = max(u.q0, l.q0)
  if q <= _MIX_Q0 or q >= 0.5:
    return (u, 0.0), (l, 0.0), 1
  target = 1e-3 * tail
  zc = 1
  while zc <= _MAX_MIX:
    if all(binom.sf(zc - 1, t, qq) <= target for qq in (u.q0, l.q0)) or zc > t:
      break
    zc *= 2
  if zc > _MAX_MIX:
    return (u, 0.0), (l, 0.0), 1

  def strip(o: OneStep):
    c = 1.0 / (1.0 - o.q0)
    return o._replace(qm=o.qm * c, gm=o.gm * c, q0=0.0, minf=o.minf * c), o.q0

  uu, qu = strip(u)
  ll, ql = strip(l)
  ll = ll._replace(minf=l.minf)          # lower: P-mass at +inf (not a law moment)
  return (uu, qu), (ll, ql), zc

