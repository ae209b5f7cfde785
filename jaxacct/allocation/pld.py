r"""Tight privacy loss distribution of random allocation, certified upper and lower.

Source: V. Feldman and M. Shenfeld, "Efficient privacy loss accounting for
subsampling and random allocation", ICML 2026, arXiv:2602.17284v1 (the
allocation PLD and its package PLD_accounting 2.0); the reduction of k-of-t to
1-of-floor/ceil(t/k) is Feldman & Shenfeld, "Privacy amplification by random
allocation", Lemma 3.2. The second-order (convex-order) rounding below is this
module's own construction (digest feldman-shenfeld-allocation-pld.md, Sec. 4.3),
not the package's first-order knot rounding.

Mathematics (1-of-t, one step with dominating pair (P, Q), L = dP/dQ)
--------------------------------------------------------------------
The remove pair is (mean_i Q^{i-1} x P x Q^{t-i}, Q^t); its likelihood ratio is
S/t with S = L(Y_1) + ... + L(Y_t), Y ~ Q^t (the add pair is the reverse).

.. math::

   \delta_{rem}(\varepsilon) = E_Q[(S/t - e^\varepsilon)_+], \qquad
   \delta_{add}(\varepsilon) = E_Q[(1 - e^\varepsilon S/t)_+].

Both integrands are convex functions of S. Hence, if S_up dominates S in the
convex order (S <=_cx S_up: equal means, E phi(S) <= E phi(S_up) for all convex
phi), every hockey-stick divergence of both directions computed from S_up is
>= the true one, and a law S_lo <=_cx S gives lower bounds. Three facts make
this constructive (proof sketches):

1. A mean-preserving spread (replace an atom at s in [x_c, x_{c+1}] by the
   two-point law on {x_c, x_{c+1}} with the same mean) is a convex-order
   increase (Jensen applied conditionally); collapsing any group of atoms to
   their barycentre is a convex-order decrease (Jensen again).
2. Convex order is preserved by independent sums: if X <=_cx X' and Y <=_cx Y'
   independent, then for convex phi, y -> E phi(X + y) is convex, so
   E phi(X + Y) <= E phi(X + Y') and likewise in X.
3. Mass "at infinity" for the upper law: right-tail mass beyond the last knot
   x_N keeps its Q-mass at x_N and its excess first moment ``minf`` is carried
   as a defect; E phi(S) for phi of slope <= 1/t at +inf grows by at most
   minf / t (remove) and 0 (add: phi -> 0). The upper law therefore dominates
   every functional we evaluate. The lower law drops tail mass: both
   integrands are >= 0, and for phi >= 0 dropping mass from a factor never
   raises E phi of a sum (the kept part is a sub-measure).

Blackwell/composition: a pair whose Q-law of L is larger in convex order
dominates the pair in both directions (hockey sticks are expectations of
convex functions of L under Q), so the upper PLDs built here are dominating
pairs for the allocation pair, and compositions of dominating pairs dominate
the composition (products of post-processings).  For k > 1 the reduction to
1-of-floor(t/k) and 1-of-ceil(t/k) blocks is an upper bound only, so the
``lower`` value is then a lower bound on the *reduced* object, not on k-of-t
allocation itself.

Algorithm and grid choices
--------------------------
* Geometric lattice x_j = exp(u_ref + j D) with a static number of knots n.
  On a geometric lattice x_i + x_j = x_h (1 + r^{-d}) (h = max, d = |i-j|,
  r = e^D), so the position of a pairwise sum relative to the lattice depends
  on d only: one table kappa(d), omega(d) per stage, and a sum is a loop over
  diagonals d of *vector* multiply-adds into a slice (no scatter). This is
  O(n^2) per pairwise sum, branch-free, contiguous in memory (good on CPU; on
  GPU one evaluation is latency-bound and the win is vmap over sigma/t).
* Upper: each sum atom is split linearly (mean preserving) between the two
  knots around it. Lower: each sum atom is accumulated with its exact moment
  in the cell holding it (barycentre). Both errors are second order in D,
  against first order for knot rounding.
* The t-fold sum is built along the binary digits of t carrying
  (S_a, S_{a+1}), so both operands of every sum live on one window; after
  every level both laws are re-gridded (again by mean-preserving split /
  barycentric collapse) onto a fresh n-knot window that keeps all but
  ``tail`` of the mass on the left (spread onto {0, x_0}: valid for free) and
  ``tail`` of the first moment on the right. As S/t concentrates the window
  shrinks and D refines automatically ("evolving resolution").
* k > 1 and epochs: the four laws (remove/add x upper/lower) of each
  Lemma 3.2 block become jaxacct.pld PLDs (remove: losses ln(x/t) with
  P-mass q x/t and minf/t at +inf; add: losses -ln(x/t) with mass q and q0 at
  +inf), upper ones by the engine's connect-the-dots (again a mean-preserving
  spread in x), lower ones rounded down (optimistic), and are composed by FFT
  (``compose_many``). The hockey sticks of a product pair,
  E[(L_1 L_2 - e^eps)_+] and E[(1 - e^eps L_1 L_2)_+] under Q x Q, are convex
  and non-negative in each likelihood ratio separately, so the convex-order
  (upper) and convex-non-negative (lower) comparisons survive composition.
  This path is eager (scalar sigma, t, delta); k = E = 1 is fully jittable
  and vmappable (``allocation_pld_laws``, and the front doors accept arrays).

Mechanisms given as discrete PLDs (``mechanism=`` a ``jaxacct.pld.PLD``)
-----------------------------------------------------------------------
A PLD (P-masses p_i at losses l_i, ``inf_mass`` at +inf) is the pair
(P = p, Q = e^{-l} p + the rest where P = 0). The Q-law of X = L(Y) has atoms
x_i = e^{l_i} with Q-mass e^{-l_i} p_i, an atom at x = 0 with the remaining
Q-mass 1 - sum e^{-l_i} p_i, and ``inf_mass`` as a first moment at +inf (the
upper law's ``minf``: H_rem of the allocation gets exactly inf_mass, one
coordinate being P-distributed; E_Q X = 1 - inf_mass).

* Upper: from a pessimistic PLD. Claim (checked): jaxacct.pld's pessimistic
  PLDs are convex-order increases of the true Q-law of L, so their canonical
  pair Blackwell-dominates the true pair (both directions at once), and by
  Feldman & Shenfeld, "Privacy amplification by random allocation",
  arXiv:2502.08202v3, Thm 3.1 (allocation of a mechanism dominated by a
  randomizer R is dominated by the allocation of R; with Lemma 2.10,
  Kairouz-Oh-Viswanath, the allocation pair is Blackwell-monotone in the
  one-step pair) the allocation built from it dominates the true allocation
  in both directions. Per rounding: connect-the-dots (Doroshenko
  et al., arXiv:2207.04380v1 Sec. 3) keeps P- and Q-mass of every cell, i.e.
  in x-space a mean-preserving split onto the two knots around the atom.
  "ceil" rounding and the moves of tail mass to the first grid point keep the
  P-mass (= the first moment of X) but lose Q-mass: the atom moves up from x
  to x' > x with Q-mass p/x' and the lost Q-mass p/x - p/x' lands at x = 0,
  i.e. a mean-preserving split onto {0, x'}, again a convex-order increase
  provided the 0-atom is taken as the *residual* 1 - sum e^{-l} p (it is).
  Mass moved to +inf: a split onto {0, +inf} (the ``minf`` slot).
  A P-mass deficit is put at +inf; a float excess E_P[e^-L] - 1 <= 1e-6 is
  repaired by moving the lowest-loss P-mass to +inf; larger excess raises.
* Finding: jaxacct.pld's *optimistic* PLDs are not pairs (losses rounded
  down with the P-mass kept: E_P[e^-L] > 1 by about step/2), and no single
  law below the truth exists from rounded-down atoms alone when the 0-atom is
  short: a true cell barycentre can be anywhere in [x, x e^h). The lower law
  is therefore built from the bounds they do give (``lower_one_step``): with
  w_i = p_i e^{-l_i} (the most Q-mass a true cell can have), Jensen per cell
  gives C(a) = E(X - a)_+ >= sum w_i (x_i - a)_+ and P(a) = E(a - X)_+ >=
  a - sum w_i min(x_i, a) - (missing P-mass) =: g(a), g convex. The law with
  P-function max(g, 0) keeps the atoms above the root a* of g and collapses
  all lower ones into one atom at a* with mass 1 - (kept mass) and their
  moment: it is below the truth for every non-negative monotone convex
  function (increasing: remove; decreasing: add), which is what sums need.
  For an exact pair (e.g. ``randomized_response(eps0)`` at step eps0, or
  ``from_pair`` on grid losses) it is the exact Q-law. A single pessimistic
  PLD given alone is used for both bounds: the lower then bounds the
  allocation of that discrete pair (the true one when it is exact).
* ``PairPLD(remove, add)``: the remove allocation uses the remove PLD, the
  add allocation the add PLD read as the reversed pair (x = e^{-l}, Q-mass p,
  0-atom inf_mass; its lower atoms sit at the top of their cells, valid for
  the decreasing add profiles): two S-laws. ``(upper, lower)`` tuples take
  PLDs or PairPLDs.
* Checked against exact enumeration (randomized response, a 3-outcome pair:
  multinomial sums), the built-in Gaussian/Laplace laws, and exact
  composition (tests/test_allocation_pld_mechanism.py).
* A 0-atom q0 of X (Q-mass where P = 0, e.g. randomized response with
  delta0 > 0, or a PLD with E_P[e^-L] < 1): inside the sum kernels a sum
  0 + x lies at x, below the pairwise sum's window when the law is
  concentrated, and would be dropped (lower) or split onto {0, x_0} (upper):
  valid but loose (q0 = 0.26, t = 2: [0.067, 0.195] around 0.165). So when
  1e-12 < q0 < 0.5 the laws are split exactly: S_t = S~_K with S~ the sum of
  the law given X > 0 and t - K ~ Bin(t, q0); the components K = t - z,
  z < zc (zc <= 64, P(Z >= zc) <= 1e-3 tail) are computed as extra lanes,
  weighted and concatenated (profiles are linear in the law), K = 0 adds
  q0^t at S = 0 and the remaining binomial tail is charged to the upper and
  dropped from the lower (``_pld_laws_batch``). Then q0 = 0.26, t = 2 gives
  [0.1647482, 0.1647482] and randomized response with delta0 = 1e-3 brackets
  the exact enumeration to ~1e-9 relative at t <= 3. If zc would exceed 64
  the 0-atom stays in the kernels (valid, looser). The one-step PLD is first re-gridded (split / collapse)
  onto the n-knot lattice, so its own size only costs an O(size) pass.

Public API: :func:`allocation_pld_epsilon`, :func:`allocation_pld_delta`
(AllocationPLDBounds(upper, lower, remove, add); ``mechanism`` may be a PLD),
:func:`allocation_pld_calibrate_sigma` (vector of targets, one jitted call),
:func:`allocation_plds` (PLD export; ``jaxacct.pld.to_dp_accounting``),
:func:`allocation_pld_laws` (jittable laws of S/t).

Regimes: tested for sigma in [0.3, 50], t up to 1e7, delta down to 1e-14.
Default grid 1024 knots: upper/lower <= 1.004 on the issue 10 settings.

* Floating point: all masses are sums of non-negative products, so rounding
  is a relative perturbation of the measure: delta is multiplied by
  (1 + rel) (upper) or (1 - rel) (lower), rel = eps_mach (16 t + 8 n levels)
  (t enters through the relative error of the one-step cell masses raised to
  the t-th power). Rounding in the knot positions and split weights moves an
  atom by a factor e^{+-h} with h <= a few ulp times (|u_ref| + n D) per level;
  a split computed for a moved atom is an exact spread of the moved atom.
  Sums and spreads preserve the increasing-convex (remove) and
  decreasing-convex (add) orders, and a factor e^{+-h} on every summand is a
  factor on S, so with eta = sum of these h:
  delta_rem(eps) <= (1 + rel) e^eta delta_rem^up(eps - eta) and
  delta_add(eps) <= (1 + rel) delta_add^up(eps - eta) (mirrored for the
  lower). eta is ~1e-13 at most, i.e. an epsilon shift, never an absolute
  delta floor. This ledger is argued, not machine-checked.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxacct._core import checks
from jaxacct._core.dtype import require_x64, x64_boundary
from jaxacct.allocation import _sum_law as sl

__all__ = [
    "AllocationPLDBounds", "allocation_pld_epsilon", "allocation_pld_delta",
    "allocation_pld_laws", "allocation_plds", "allocation_pld_calibrate_sigma", "AllocationPLDs", "DEFAULT_GRID_SIZE",
    "DEFAULT_TAIL",
]

DEFAULT_GRID_SIZE = 1024
DEFAULT_TAIL = 1e-20   # per-stage tail cut for delta(eps) queries
TAIL_FACTOR = 1e-5     # epsilon(delta) queries cut tails at TAIL_FACTOR * delta
_EPS = float(np.finfo(np.float64).eps)


class AllocationPLDBounds(NamedTuple):
  """Certified bracket [lower, upper] of epsilon (or delta).

  Attributes:
    upper: float64 array, an upper bound (valid dominating computation).
    lower: float64 array, a lower bound (on the reduced object when k > 1).
    remove: (upper, lower) of the remove direction.
    add: (upper, lower) of the add direction.
  """
  upper: Any
  lower: Any
  remove: Any = None
  add: Any = None


class FinalLaws(NamedTuple):
  up_p: jax.Array
  up_loss: jax.Array    # ln(x/t) at the upper knots
  up_q0: jax.Array
  up_minf_t: jax.Array  # minf / t
  lo_a: jax.Array
  lo_loss: jax.Array    # ln(mu/t) of the lower atoms
  lo_q0: jax.Array
  rel: jax.Array        # relative float slack
  eta: jax.Array        # log-position float slack (an epsilon shift)
  lo_inf: jax.Array     # lower law's P-mass at +inf (remove profile; 0 for Gaussian)


# ----------------------------------------------------------------------------
# kernels (jittable)
# ----------------------------------------------------------------------------

def _one_step(mechanism, param, n, tail):
  if mechanism == "gaussian":
    return sl.gaussian_one_step(param, n, tail)
  if mechanism == "laplace":
    return sl.laplace_one_step(param, n, tail)
  raise ValueError(f"mechanism must be 'gaussian' or 'laplace'; got {mechanism!r}.")


def _final_laws(param, t, *, n: int, tail, mechanism: str = "gaussian") -> FinalLaws:
  """Upper and lower laws of S/t for 1-of-t allocation (jittable, scalar)."""
  require_x64("allocation.pld")
  up, lw, lat = _one_step(mechanism, param, n, tail)
  t_i = jnp.asarray(t, jnp.int32)
  U, Ul, ledger = sl.sum_law_upper(up, lat, t_i, n, tail, 0.0)
  Lw, Ll = sl.sum_law_lower(lw, lat, t_i, n, tail, 0.0)
  bad = ~(jnp.asarray(param) > 0) | ~jnp.isfinite(jnp.asarray(param))
  return _assemble_final(U, Ul, ledger, Lw, Ll, t_i, n, bad, jnp.zeros(()))


def _assemble_final(U, Ul, ledger, Lw, Ll, t_i, n, bad, lo_inf) -> FinalLaws:
  """FinalLaws from the t-fold upper/lower sum laws and the float ledger."""
  tf = t_i.astype(jnp.float64)
  lnt = jnp.log(tf)
  m_up = U.p.shape[0]
  up_loss = Ul.u_ref + (Ul.off + jnp.arange(m_up)) * Ul.step - lnt
  m_lo = Lw.a.shape[0]
  f = jnp.where(Lw.a > 0, Lw.g / jnp.where(Lw.a > 0, Lw.a, 1.0), 1.0)
  lo_loss = Ll.u_ref + (Ll.off + jnp.arange(m_lo)) * Ll.step + jnp.log(f) - lnt
  levels = jnp.log2(tf) + 2.0
  rel = _EPS * (16.0 * tf + 8.0 * n * levels)
  bad = bad | ~(t_i >= 1)
  rel = jnp.where(bad, jnp.nan, rel)   # invalid traced lanes -> NaN results
  eta = ledger + 8 * _EPS * (4.0 + jnp.abs(Ul.u_ref) + jnp.abs(Ll.u_ref) + 2.0 * jnp.abs(lnt)
                             + 2.0 * m_up * (Ul.step + Ll.step))
  return FinalLaws(U.p, up_loss, U.q0, U.minf / tf, Lw.a, lo_loss, Lw.q0, rel, eta,
                   jnp.asarray(lo_inf, jnp.float64))


def _delta_one(F: FinalLaws, eps, which: int):
  """One of (rem_up, add_up, rem_lo, add_lo) at eps (broadcast over eps).

  Floating-point ledger: masses carry a relative error <= rel and atom
  positions a log error <= eta, so the certified values are
  up: (1 + rel) e^eta delta(eps - eta) (remove), (1 + rel) delta(eps - eta) (add);
  lo: (1 - rel) e^-eta delta(eps + eta), (1 - rel) delta(eps + eta).
  """
  e0 = jnp.asarray(eps, jnp.float64)
  e = (e0 - F.eta if which < 2 else e0 + F.eta)[..., None]
  if which == 0:    # remove, upper: e^eps sum p expm1(l - eps)_+ + minf/t
    v = jnp.exp(e[..., 0]) * jnp.sum(F.up_p * jnp.maximum(jnp.expm1(F.up_loss - e), 0.0),
                                     axis=-1) + F.up_minf_t
    v = v * jnp.exp(F.eta)
  elif which == 1:  # add, upper: sum p (1 - e^{eps + l})_+ + q0
    v = jnp.sum(F.up_p * jnp.maximum(-jnp.expm1(F.up_loss + e), 0.0), axis=-1) + F.up_q0
  elif which == 2:
    v = jnp.exp(e[..., 0]) * jnp.sum(F.lo_a * jnp.maximum(jnp.expm1(F.lo_loss - e), 0.0),
                                     axis=-1) * jnp.exp(-F.eta) + F.lo_inf
  else:
    v = jnp.sum(F.lo_a * jnp.maximum(-jnp.expm1(F.lo_loss + e), 0.0), axis=-1) + F.lo_q0
  if which < 2:
    v = v * (1.0 + F.rel)
  else:
    v = v * (1.0 - F.rel)
  return jnp.where(jnp.isnan(F.rel) | jnp.isnan(e0), jnp.nan, v)


def _deltas(F: FinalLaws, eps, Fa: FinalLaws | None = None):
  """(rem_up, add_up, rem_lo, add_lo) at eps (broadcast over eps's shape).

  ``Fa`` (default ``F``): laws for the add direction when they differ (a
  mechanism given as discrete PLDs with direction-specific laws).
  """
  Fa = F if Fa is None else Fa
  return tuple(_delta_one(G, eps, w) for w, G in zip(range(4), (F, Fa, F, Fa)))


def _eps_bisect(fn, delta, hi, *, upper: bool, iters: int = 80):
  """Upper: smallest eps >= 0 with fn(eps) <= delta; lower: largest eps with
  fn(eps) >= delta (0 if none). fn decreasing in eps."""
  lo = jnp.zeros_like(delta)
  hi = jnp.broadcast_to(hi, delta.shape)

  def body(_, c):
    a, b = c
    mid = 0.5 * (a + b)
    ok = fn(mid) <= delta
    return jnp.where(ok, a, mid), jnp.where(ok, mid, b)

  a, b = lax.fori_loop(0, iters, body, (lo, hi))
  if upper:
    res = jnp.where(fn(lo) <= delta, 0.0, b)
    return jnp.where(fn(hi) <= delta, res, jnp.inf)
  return jnp.where(fn(lo) <= delta, 0.0, a)


def _epsilons(F: FinalLaws, delta, Fa: FinalLaws | None = None):
  Fa = F if Fa is None else Fa
  d = jnp.asarray(delta, jnp.float64)

  def hi(p, loss):
    return jnp.maximum(jnp.max(jnp.where(p > 0, jnp.abs(loss), 0.0)), 1.0) + 1.0

  er_u = _eps_bisect(lambda e: _delta_one(F, e, 0), d, hi(F.up_p, F.up_loss), upper=True)
  ea_u = _eps_bisect(lambda e: _delta_one(Fa, e, 1), d, hi(Fa.up_p, Fa.up_loss), upper=True)
  er_l = _eps_bisect(lambda e: _delta_one(F, e, 2), d, hi(F.lo_a, F.lo_loss), upper=False)
  ea_l = _eps_bisect(lambda e: _delta_one(Fa, e, 3), d, hi(Fa.lo_a, Fa.lo_loss), upper=False)
  bad = jnp.isnan(F.rel) | jnp.isnan(Fa.rel) | ~(d > 0) | ~(d < 1)
  return tuple(jnp.where(bad, jnp.nan, v) for v in (er_u, ea_u, er_l, ea_l))


def _auto_tail(delta):
  """Per-stage tail cut for an epsilon query: far below delta (tightness only)."""
  return jnp.clip(TAIL_FACTOR * jnp.asarray(delta, jnp.float64), 1e-30, 1e-12)


_CHUNK = 8  # lanes per vmapped block; larger batches run block after block


@functools.partial(jax.jit, static_argnames=("n", "mechanism"))
def _laws_batch(param, t, tail, *, n, mechanism):
  f = jax.vmap(lambda a, b, c: _final_laws(a, b, n=n, tail=c, mechanism=mechanism))
  size = param.shape[0]
  if size <= _CHUNK or size % _CHUNK:
    return f(param, t, tail)
  # batched dynamic slices turn into gathers/scatters over the whole batch;
  # blocks of _CHUNK lanes keep the working set in cache (sequential lax.map).
  r = lambda x: x.reshape((size // _CHUNK, _CHUNK) + x.shape[1:])
  out = lax.map(lambda xs: f(*xs), (r(param), r(t), r(tail)))
  return jax.tree.map(lambda x: x.reshape((size,) + x.shape[2:]), out)


@jax.jit
def _eps_batch(F, delta):
  return jax.vmap(_epsilons)(F, delta)


@jax.jit
def _delta_batch(F, eps):
  return jax.vmap(_deltas)(F, eps)


def _padded(*arrays):
  """Flattens broadcast arrays and pads the batch to a power of two (fewer compiles)."""
  size = arrays[0].size
  b = 1 << max(size - 1, 0).bit_length()
  out = []
  for a in arrays:
    f = a.ravel()
    out.append(np.concatenate([f, np.repeat(f[-1:], b - size)]))
  return size, out


def _run(sigma, num_steps, query, *, grid_size, tail, mechanism, mode):
  s, t, q = np.broadcast_arrays(np.asarray(sigma, np.float64), np.asarray(num_steps),
                                np.asarray(query, np.float64))
  shape = s.shape
  size, (sp, tp, qp) = _padded(s, t, q)
  if tail is None:
    tl = np.clip(TAIL_FACTOR * qp, 1e-30, 1e-12) if mode == "eps" else np.full_like(
        qp, DEFAULT_TAIL)
  else:
    tl = np.full_like(qp, float(tail))
  F = _laws_batch(jnp.asarray(sp), jnp.asarray(tp.astype(np.int32)), jnp.asarray(tl),
                  n=int(grid_size), mechanism=mechanism)
  parts = (_eps_batch if mode == "eps" else _delta_batch)(F, jnp.asarray(qp))
  return tuple(p[:size].reshape(shape) for p in parts)


def _combine(parts, direction, k_like=None):
  ru, au, rl, al = parts
  if direction == "remove":
    return AllocationPLDBounds(ru, rl, (ru, rl), None)
  if direction == "add":
    return AllocationPLDBounds(au, al, None, (au, al))
  return AllocationPLDBounds(jnp.maximum(ru, au), jnp.maximum(rl, al), (ru, rl), (au, al))


# ----------------------------------------------------------------------------
# mechanisms given as discrete PLDs (jaxacct.pld.PLD / PairPLD)
# ----------------------------------------------------------------------------

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


def _pld_numpy(obj, name):
  from jaxacct import pld as E
  if not isinstance(obj, E.PLD):
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


def _oriented(p, off, step, q0, minf, orientation, w):
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
  p, off, step, inf, pess, loss = _pld_numpy(obj, name)
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
    return _oriented(p, off, step, max(0.0, 1.0 - math.fsum(p * w)), inf, "remove", w)
  return _oriented(p, off, step, inf, max(0.0, 1.0 - W) + 4 * _EPS, "add", w)


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
  p, off, step, inf, _, loss = _pld_numpy(obj, name)
  w = np.exp(-loss)
  if orientation == "add":
    return _oriented(p, off, step, inf, 0.0, "add", w)
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


def _bucket(qm):
  size = max(256, 1 << max(qm.size - 1, 0).bit_length())   # few compiles
  return np.concatenate([qm, np.zeros(size - qm.size)])


def _pld_upper(qm, idx0, step, q0, minf, t, tail, n):
  up = sl.UpperLaw(qm, q0, minf)
  lat = sl.Lattice(jnp.zeros(()), step, idx0)
  jl, jr = sl.window_upper(up, lat, tail)
  D2 = sl._new_step(jl, jr, step, n, 0.0)
  U1, L1 = sl.regrid_upper(up, lat, jl, D2, n)
  U, Ul, ledger = sl.sum_law_upper(U1, L1, t, n, tail, 0.0)
  ledger = ledger + 8 * _EPS * (4.0 + jnp.abs(jl * step) + qm.shape[0] * step + 2.5 * n * D2)
  return U, Ul, ledger


def _pld_lower(qm, gm, idx0, step, q0, t, tail, n):
  lw = sl.LowerLaw(qm, gm, q0)
  lat = sl.Lattice(jnp.zeros(()), step, idx0)
  jl, jr = sl.window_lower(lw, lat, tail)
  D2 = sl._new_step(jl, jr + 1, step, n + 1, 0.0)   # n cells cover [x_jl, x_{jr+1})
  L1, LL1 = sl.regrid_lower(lw, lat, jl, D2, n)
  return sl.sum_law_lower(L1, LL1, t, n, tail, 0.0)


def _log_binom_pmf(z, t, q):
  """log P(Bin(t, q) = z), q in [0, 1) (q = 0: point mass at 0)."""
  from jax.scipy.special import gammaln
  zf, tf = z.astype(jnp.float64), t.astype(jnp.float64)
  lq = jnp.where(zf > 0, zf * jnp.log(jnp.where(q > 0, q, 1.0)), 0.0)
  lq = jnp.where((zf > 0) & ~(q > 0), -jnp.inf, lq)
  return (gammaln(tf + 1) - gammaln(zf + 1) - gammaln(tf - zf + 1) + lq
          + (tf - zf) * jnp.log1p(-q))


@functools.partial(jax.jit, static_argnames=("n", "zc"))
def _pld_laws_batch(up, lo, t, tail, qu, ql, *, n, zc=1):
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
    U, Ul, led = _pld_upper(up[0], up[2], up[3], up[4], up[5], kk, tl, n)
    Lw, Ll = _pld_lower(lo[0], lo[1], lo[2], lo[3], lo[4], kk, tl, n)
    return _assemble_final(U, Ul, led, Lw, Ll, kk, n, jnp.zeros((), bool), lo[5])

  def one(tt, tl):
    z = jnp.arange(zc, dtype=jnp.int32)
    valid = z < tt
    k = jnp.maximum(tt - z, 1)
    F = jax.vmap(lambda kk: comp(kk, tl))(k)
    sh = jnp.log(k.astype(jnp.float64)) - jnp.log(tt.astype(jnp.float64))
    wu = jnp.where(valid, jnp.exp(_log_binom_pmf(z, tt, qu)), 0.0)
    wl = jnp.where(valid, jnp.exp(_log_binom_pmf(z, tt, ql)), 0.0)
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
        lo[5] * (1.0 - jnp.max(F.rel)))   # H_rem = P_s + E(...): P_s whatever Z is

  return jax.vmap(one)(t, tail)


def _jnp_step(o: OneStep):
  return (jnp.asarray(_bucket(o.qm)), jnp.asarray(_bucket(o.gm)), jnp.asarray(o.idx0, jnp.int32),
          jnp.asarray(o.step, jnp.float64), jnp.asarray(o.q0, jnp.float64),
          jnp.asarray(o.minf, jnp.float64))


def _same(a: OneStep, b: OneStep):
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
  from jaxacct import pld as E
  if isinstance(mechanism, (E.PLD, E.PairPLD)):
    up = lo = mechanism
  elif isinstance(mechanism, (tuple, list)) and len(mechanism) == 2:
    up, lo = mechanism
  else:
    raise ValueError("mechanism must be 'gaussian', 'laplace', a jaxacct.pld.PLD, a "
                     f"PairPLD or a tuple (upper, lower) of them; got {type(mechanism).__name__}.")

  def pick(x, d, name):
    if isinstance(x, E.PairPLD):
      return (x.remove, "remove") if d == "remove" else (x.add, "add")
    if isinstance(x, E.PLD):
      return x, "remove"
    raise ValueError(f"{name} must be a jaxacct.pld.PLD or PairPLD; got {type(x).__name__}.")

  out = {}
  for d in ("remove", "add"):
    upld, uo = pick(up, d, "mechanism (upper)")
    lpld, lo_o = pick(lo, d, "mechanism (lower)")
    out[d] = (upper_one_step(upld, uo, "mechanism (upper)"),
              lower_one_step(lpld, lo_o, "mechanism (lower)"))
  return out


def _pld_final_laws(laws, t, tail, n):
  """(F_remove, F_add) batched over lanes t, tail (arrays); F_add is F_remove
  when both directions share their one-step laws."""
  tj = jnp.asarray(np.asarray(t).astype(np.int32))
  tl = jnp.asarray(tail, jnp.float64)
  tmax = int(np.max(t))
  tmin_tail = float(np.min(tail))
  (ur, lr), (ua, la) = laws["remove"], laws["add"]

  def run(u, l):
    (u, qu), (l, ql), zc = _mixture_split(u, l, tmax, tmin_tail)
    return _pld_laws_batch(_jnp_step(u), _jnp_step(l), tj, tl, jnp.asarray(qu),
                           jnp.asarray(ql), n=int(n), zc=zc)

  Fr = run(ur, lr)
  if _same(ur, ua) and _same(lr, la):
    return Fr, Fr
  return Fr, run(ua, la)


_MAX_MIX = 64          # most zero-atom mixture components (static, powers of 2)
_MIX_Q0 = 1e-12        # 0-atoms above this are handled by the exact mixture


def _mixture_split(u: OneStep, l: OneStep, t: int, tail: float):
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


@jax.jit
def _eps_batch2(Fr, Fa, delta):
  return jax.vmap(lambda a, b, d: _epsilons(a, d, b))(Fr, Fa, delta)


@jax.jit
def _delta_batch2(Fr, Fa, eps):
  return jax.vmap(lambda a, b, e: _deltas(a, e, b))(Fr, Fa, eps)


def _run_pld(laws, num_steps, query, *, grid_size, tail, mode):
  t, q = np.broadcast_arrays(np.asarray(num_steps), np.asarray(query, np.float64))
  shape = t.shape
  size, (tp, qp) = _padded(t, q)
  if tail is None:
    tl = np.clip(TAIL_FACTOR * qp, 1e-30, 1e-12) if mode == "eps" else np.full_like(
        qp, DEFAULT_TAIL)
  else:
    tl = np.full_like(qp, float(tail))
  Fr, Fa = _pld_final_laws(laws, tp, tl, grid_size)
  parts = (_eps_batch2 if mode == "eps" else _delta_batch2)(Fr, Fa, jnp.asarray(qp))
  return tuple(p[:size].reshape(shape) for p in parts)


def _is_string_mechanism(mechanism):
  return isinstance(mechanism, str)


def _check_common(sigma, num_steps, num_selected, num_epochs, direction, grid_size, mechanism):
  """Validates the shared arguments; returns the PLD mechanism's one-step laws
  (None for "gaussian"/"laplace")."""
  laws = None
  if _is_string_mechanism(mechanism):
    checks.check_choice("mechanism", mechanism, ("gaussian", "laplace"))
    if sigma is None:
      raise ValueError(f"sigma is required for mechanism={mechanism!r}.")
    checks.check_positive("sigma", sigma)
  else:
    if sigma is not None:
      raise ValueError("sigma must be None when the mechanism is given as a PLD.")
    laws = pld_mechanism_laws(mechanism)
  checks.check_int("num_steps", num_steps, min_value=1)
  checks.check_int("num_selected", num_selected, min_value=1)
  checks.check_int("num_epochs", num_epochs, min_value=1)
  checks.check_direction(direction)
  if int(grid_size) < 16:
    raise ValueError(f"grid_size must be an int >= 16; got {grid_size}.")
  if np.any(np.asarray(num_steps) > 2**30):
    raise ValueError(f"num_steps must be <= 2**30; got {num_steps}.")
  return laws


def _components(t, k):
  """Lemma 3.2 blocks: [(t', count)] with (k - rho) x 1-of-floor(t/k) and
  rho x 1-of-(floor(t/k) + 1), rho = t mod k."""
  f, rho = divmod(int(t), int(k))
  if f < 1:
    raise ValueError(f"num_selected must be <= num_steps; got {k} > {t}.")
  comps = [(f, k - rho)]
  if rho:
    comps.append((f + 1, rho))
  return comps


class AllocationPLDs(NamedTuple):
  """PLDs (``jaxacct.pld.PLD``) of one round / the composition.

  Attributes:
    remove_upper, add_upper: pessimistic (dominating) PLDs.
    remove_lower, add_lower: optimistic (dominated; for k > 1 of the reduced
      object) PLDs.
    tail_mass: aliasing allowance of the FFT composition (lower side).
  """
  remove_upper: Any
  add_upper: Any
  remove_lower: Any
  add_lower: Any
  tail_mass: float = 0.0


def _laws_to_plds(F, step):
  """Four engine PLDs of one 1-of-t' round from its final laws (numpy side).

  Remove: losses ln(x/t), P-mass q x/t (+ minf/t at +inf). Add: losses
  -ln(x/t), P-mass (= Q^t-mass) q (+ q0 at +inf). The float ledger is folded
  in: upper losses + eta, masses (1 + rel) e^eta; lower mirrored.
  """
  from jaxacct import pld as E
  F = jax.tree.map(lambda a: np.asarray(a, np.float64), F)
  rel, eta = float(F.rel), float(F.eta)
  ku, kl = F.up_p > 0, F.lo_a > 0
  lu, pu = F.up_loss[ku], F.up_p[ku]
  ll, pl = F.lo_loss[kl], F.lo_a[kl]
  fu = (1.0 + rel) * math.exp(eta)
  fl = (1.0 - rel) * math.exp(-eta)
  ru = E.from_losses(lu + eta, pu * np.exp(lu) * fu, step=step, pessimistic=True,
                     inf_mass=min(1.0, float(F.up_minf_t) * fu))
  au = E.from_losses(-lu + eta, pu * fu, step=step, pessimistic=True,
                     inf_mass=min(1.0, float(F.up_q0) * fu))
  rl = E.from_losses(ll - eta, pl * np.exp(ll) * fl, step=step, pessimistic=False,
                     inf_mass=min(1.0, float(F.lo_inf) * fl))
  al = E.from_losses(-ll - eta, pl * fl, step=step, pessimistic=False,
                     inf_mass=min(1.0, float(F.lo_q0) * fl))
  return ru, au, rl, al


def _composed_plds(param, t, k, E_, *, grid_size, tail, step, mechanism, tail_mass):
  from jaxacct import pld as E
  comps = _components(t, k)
  per = []
  for tt, c in comps:
    if _is_string_mechanism(mechanism):
      F = _laws_batch(jnp.asarray([float(param)]), jnp.asarray([tt], jnp.int32),
                      jnp.asarray([tail]), n=int(grid_size), mechanism=mechanism)
      F = jax.tree.map(lambda a: a[0], F)
      per.append((_laws_to_plds(F, step), c * E_))
    else:   # mechanism: the one-step laws of a PLD mechanism (pld_mechanism_laws)
      Fr, Fa = _pld_final_laws(mechanism, np.asarray([tt]), np.asarray([tail]), grid_size)
      pr = _laws_to_plds(jax.tree.map(lambda a: a[0], Fr), step)
      pa = pr if Fa is Fr else _laws_to_plds(jax.tree.map(lambda a: a[0], Fa), step)
      per.append(((pr[0], pa[1], pr[2], pa[3]), c * E_))
  out = []
  for which in range(4):
    plds = [p[which] for p, _ in per]
    counts = [c for _, c in per]
    if len(plds) == 1 and counts[0] == 1:
      out.append(plds[0])
    else:
      out.append(E.compose_many(plds, counts, tail_mass=tail_mass))
  return AllocationPLDs(*out, tail_mass=tail_mass)


def _composed_query(param, t, k, E_, query, *, mode, grid_size, tail, step, mechanism):
  from jaxacct import pld as E
  tm = 1e-30
  if tail is None:
    tail = float(np.clip(TAIL_FACTOR * query, 1e-30, 1e-12)) if mode == "eps" else DEFAULT_TAIL
    tail = tail / (k * E_)
  P = _composed_plds(param, t, k, E_, grid_size=grid_size, tail=float(tail), step=step,
                     mechanism=mechanism, tail_mass=tm)
  if mode == "eps":
    ru = float(E.epsilon(P.remove_upper, query))  # noqa: E501
    au = float(E.epsilon(P.add_upper, query))
    q2 = min(query + tm, 0.999999)
    # engine nudges eps up by 1e-13 relative; undo it (and more) on the lower side
    rl = float(E.epsilon(P.remove_lower, q2)) * (1 - 4e-13)
    al = float(E.epsilon(P.add_lower, q2)) * (1 - 4e-13)
  else:
    ru = float(E.delta(P.remove_upper, query))
    au = float(E.delta(P.add_upper, query))
    rl = max(float(E.delta(P.remove_lower, query)) - tm, 0.0)
    al = max(float(E.delta(P.add_lower, query)) - tm, 0.0)
  if rl > ru * (1 + 1e-9) + 1e-15 or al > au * (1 + 1e-9) + 1e-15:
    import warnings
    warnings.warn("allocation.pld: composed lower bound exceeds the upper bound "
                  f"(remove {rl} > {ru} or add {al} > {au}); lower set to NaN.",
                  RuntimeWarning, stacklevel=3)
    rl = al = float("nan")
  return ru, au, rl, al


def _composed_run(sigma, num_steps, query, k, E_, *, mode, grid_size, tail, step, mechanism):
  if np.ndim(sigma) or np.ndim(num_steps) or np.ndim(query):
    raise ValueError("num_selected > 1 or num_epochs > 1 takes scalar sigma, num_steps "
                     "and delta/epsilon (the composition runs through jaxacct.pld).")
  parts = _composed_query(None if sigma is None else float(sigma), int(num_steps), int(k),
                          int(E_), float(query),
                          mode=mode, grid_size=grid_size, tail=tail, step=step,
                          mechanism=mechanism)
  return tuple(jnp.asarray(v) for v in parts)


@x64_boundary
def allocation_pld_epsilon(*, sigma=None, delta, num_steps, num_selected=1, num_epochs=1,
                           direction: str = "both", grid_size: int = DEFAULT_GRID_SIZE,
                           tail=None, mechanism: str = "gaussian",
                           composition_step: float = 1e-4) -> AllocationPLDBounds:
  r"""Epsilon of k-of-t random allocation from its tight PLD: certified upper and lower.

  Feldman & Shenfeld, "Efficient privacy loss accounting for subsampling and
  random allocation", arXiv:2602.17284v1 (ICML 2026); convex-order rounding
  as in this module's docstring.

  .. math:: \varepsilon(\delta) = \min\{\varepsilon : E_Q[(S/t - e^\varepsilon)_+]
            \le \delta\} \text{ (remove; add analogous)}

  Args:
    sigma: noise multiplier (> 0), or Laplace scale when
      ``mechanism="laplace"``; scalar or array (broadcast with num_steps, delta).
    delta: in (0, 1); broadcasts.
    num_steps: t >= 1 (int, <= 2**30); broadcasts.
    num_selected: k >= 1, <= num_steps. k > 1 uses Lemma 3.2 (blocks of
      1-of-floor(t/k) and 1-of-ceil(t/k)); ``lower`` then bounds the reduced
      object only.
    num_epochs: E >= 1 (composition).
    direction: "remove", "add" or "both" (max).
    grid_size: static number of lattice knots n (cost O(n^2 log t)).
    tail: mass / moment cut per stage (tightness only, never validity);
      None: ``TAIL_FACTOR * delta`` clipped to [1e-30, 1e-12].
    mechanism: "gaussian" or "laplace" (then ``sigma`` is required), or the
      mechanism as discrete PLDs (then ``sigma=None``; num_steps and delta
      broadcast): a pessimistic ``jaxacct.pld.PLD`` (upper and lower from it;
      the lower bounds that discrete pair), a ``PairPLD(remove, add)``, or a
      tuple ``(upper, lower)`` of PLDs/PairPLDs with ``upper`` pessimistic and
      ``lower`` optimistic or exact (see the module docstring).
    composition_step: loss-grid step of the jaxacct.pld composition used
      when k > 1 or E > 1 (then sigma, num_steps, delta must be scalars).

  Returns:
    AllocationPLDBounds(upper, lower, remove, add); float64 arrays of the
    broadcast shape.

  Bound: upper (``upper``) and lower (``lower``). ``upper`` may be +inf if
  delta is below the tail floor; sigma in [0.3, 50], t <= 1e7 tested.

  Example (randomized response, exact pair)::

    >>> from jaxacct import pld as jpld
    >>> r = allocation_pld_epsilon(mechanism=jpld.randomized_response(1.0),
    ...                            num_steps=10_000, delta=1e-8)
  """
  laws = _check_common(sigma, num_steps, num_selected, num_epochs, direction, grid_size,
                       mechanism)
  checks.check_delta(delta)
  k, E_ = int(num_selected), int(num_epochs)
  if k == 1 and E_ == 1:
    if laws is None:
      parts = _run(sigma, num_steps, delta, grid_size=grid_size, tail=tail,
                   mechanism=mechanism, mode="eps")
    else:
      parts = _run_pld(laws, num_steps, delta, grid_size=grid_size, tail=tail, mode="eps")
  else:
    parts = _composed_run(sigma, num_steps, delta, k, E_, mode="eps", grid_size=grid_size,
                          tail=tail, step=composition_step,
                          mechanism=mechanism if laws is None else laws)
  return _combine(parts, direction)


@x64_boundary
def allocation_pld_delta(*, sigma=None, epsilon, num_steps, num_selected=1, num_epochs=1,
                         direction: str = "both", grid_size: int = DEFAULT_GRID_SIZE,
                         tail=None, mechanism: str = "gaussian",
                         composition_step: float = 1e-4) -> AllocationPLDBounds:
  r"""Delta of k-of-t random allocation from its tight PLD: certified upper and lower.

  Feldman & Shenfeld, arXiv:2602.17284v1; see :func:`allocation_pld_epsilon`.

  .. math:: \delta_{rem}(\varepsilon) = E_Q[(S/t - e^\varepsilon)_+],\quad
            \delta_{add}(\varepsilon) = E_Q[(1 - e^\varepsilon S/t)_+]

  Args:
    sigma, num_steps, num_selected, num_epochs, direction, grid_size, tail,
    mechanism: as in :func:`allocation_pld_epsilon` (PLD mechanisms included).
    epsilon: >= 0; broadcasts.

  Returns:
    AllocationPLDBounds of delta values (float64 arrays).

  Bound: upper and lower.
  """
  laws = _check_common(sigma, num_steps, num_selected, num_epochs, direction, grid_size,
                       mechanism)
  checks.check_range("epsilon", epsilon, 0.0, np.inf)
  k, E_ = int(num_selected), int(num_epochs)
  if k == 1 and E_ == 1:
    if laws is None:
      parts = _run(sigma, num_steps, epsilon, grid_size=grid_size, tail=tail,
                   mechanism=mechanism, mode="delta")
    else:
      parts = _run_pld(laws, num_steps, epsilon, grid_size=grid_size, tail=tail,
                       mode="delta")
  else:
    parts = _composed_run(sigma, num_steps, epsilon, k, E_, mode="delta",
                          grid_size=grid_size, tail=tail, step=composition_step,
                          mechanism=mechanism if laws is None else laws)
  return _combine(parts, direction)


@x64_boundary
def allocation_plds(*, sigma=None, num_steps, num_selected=1, num_epochs=1,
                    grid_size: int = DEFAULT_GRID_SIZE, tail=None,
                    mechanism: str = "gaussian", composition_step: float = 1e-4,
                    tail_mass: float = 1e-30) -> AllocationPLDs:
  """PLDs of k-of-t random allocation over E epochs, upper and lower (export).

  Feldman & Shenfeld, arXiv:2602.17284v1; composition by jaxacct.pld (FFT).
  Convert with ``jaxacct.pld.to_dp_accounting(r.remove_upper, r.add_upper)``
  to compose with dp_accounting events.

  Args:
    sigma: scalar > 0 (None for a PLD mechanism); num_steps, num_selected,
      num_epochs: ints >= 1.
    grid_size, tail, mechanism: as in :func:`allocation_pld_epsilon`
      (tail default 1e-20 / (k E)).
    composition_step: loss-grid step of the returned PLDs.
    tail_mass: FFT window tail (aliasing allowance; lower side).

  Returns:
    AllocationPLDs(remove_upper, add_upper, remove_lower, add_lower).

  Bound: the ``*_upper`` PLDs dominate (pessimistic); the ``*_lower`` PLDs
  are dominated (optimistic, on the reduced object when k > 1).
  """
  laws = _check_common(sigma, num_steps, num_selected, num_epochs, "both", grid_size,
                       mechanism)
  k, E_ = int(num_selected), int(num_epochs)
  tl = DEFAULT_TAIL / (k * E_) if tail is None else float(tail)
  return _composed_plds(None if laws is not None else float(sigma), int(num_steps), k, E_,
                        grid_size=grid_size, tail=tl, step=float(composition_step),
                        mechanism=mechanism if laws is None else laws,
                        tail_mass=float(tail_mass))


@functools.partial(jax.jit, static_argnames=("n", "num_grid", "num_refine"))
def _calibrate_kernel(eps, delta, t, lo, hi, *, n, num_grid, num_refine):
  tail = jnp.clip(TAIL_FACTOR * jnp.min(delta), 1e-30, 1e-12)
  grid = jnp.exp(jnp.linspace(jnp.log(lo), jnp.log(hi), num_grid))
  tg = jnp.full((num_grid,), t, jnp.int32)
  F = jax.vmap(lambda sg, tt: _final_laws(sg, tt, n=n, tail=tail))(grid, tg)

  def dup(Fi, e):   # upper delta, both directions, at eps vector e
    return jnp.maximum(_delta_one(Fi, e, 0), _delta_one(Fi, e, 1))

  D = jax.vmap(lambda Fi: dup(Fi, eps))(F)              # (G, J)
  feas = D <= delta[None, :]
  # delta_up decreases in sigma: first feasible grid index
  g = jnp.argmax(feas, axis=0)
  any_f = jnp.any(feas, axis=0)
  sig = jnp.where(any_f, grid[g], jnp.inf)
  if num_refine:
    # bisection in log sigma inside [last infeasible, first feasible] grid cell;
    # every accepted sigma has been evaluated feasible.
    a = jnp.log(grid[jnp.maximum(g - 1, 0)])
    b = jnp.log(jnp.where(any_f, grid[g], hi))

    def body(_, c):
      a, b = c
      mid = 0.5 * (a + b)
      Fc = jax.vmap(lambda sg: _final_laws(sg, t, n=n, tail=tail))(jnp.exp(mid))
      ok = jax.vmap(lambda Fi, e, d: dup(Fi, e) <= d)(Fc, eps, delta)
      return jnp.where(ok, a, mid), jnp.where(ok, mid, b)

    a, b = lax.fori_loop(0, num_refine, body, (a, b))
    sig = jnp.where(any_f & (g > 0), jnp.exp(b), sig)
  return sig


@x64_boundary
def allocation_pld_calibrate_sigma(*, epsilon, delta, num_steps, sigma_lo: float = 0.3,
                                   sigma_hi: float = 50.0, num_grid: int = 64,
                                   num_refine: int = 4, grid_size: int = 512):
  """Smallest certified sigma (1-of-t allocation) meeting (epsilon, delta) targets.

  Feldman & Shenfeld, arXiv:2602.17284v1; upper PLD of this module. One
  jitted call for a whole vector of targets: the upper laws on a geometric
  sigma grid (``num_grid`` points in [sigma_lo, sigma_hi]) give delta_up at
  every target epsilon; each target takes the first feasible grid sigma, then
  ``num_refine`` bisection steps in log sigma inside its grid cell (vmapped
  over targets; only evaluated-feasible sigmas are kept).
  Cost: num_grid + num_refine * len(targets) law evaluations.

  Args:
    epsilon: targets >= 0 (array); delta: in (0, 1), broadcasts.
    num_steps: t (scalar int >= 1).
    sigma_lo, sigma_hi: search bracket (> 0).
    num_grid: static grid size; num_refine: static number of bisection steps.
    grid_size: lattice knots per law (static).

  Returns:
    float64 array of the targets' shape: a sigma whose *upper* bound meets the
    target (both directions); +inf when even sigma_hi does not.

  Bound: upper (the returned sigma is certified sufficient, conservative).
  """
  checks.check_range("epsilon", epsilon, 0.0, np.inf)
  checks.check_delta(delta)
  checks.check_int("num_steps", num_steps, min_value=1)
  checks.check_positive("sigma_lo", sigma_lo)
  checks.check_positive("sigma_hi", sigma_hi)
  e, d = np.broadcast_arrays(np.asarray(epsilon, np.float64), np.asarray(delta, np.float64))
  shape = e.shape
  out = _calibrate_kernel(jnp.asarray(e.ravel()), jnp.asarray(d.ravel()),
                          jnp.asarray(int(num_steps), jnp.int32), float(sigma_lo),
                          float(sigma_hi), n=int(grid_size), num_grid=int(num_grid),
                          num_refine=int(num_refine))
  return out.reshape(shape)


def allocation_pld_laws(sigma, num_steps, *, grid_size: int = DEFAULT_GRID_SIZE,
                        tail: float = DEFAULT_TAIL, mechanism: str = "gaussian") -> FinalLaws:
  """Upper and lower laws of S/t (1-of-t), jittable/vmappable in sigma, num_steps.

  Returns FinalLaws: upper masses ``up_p`` at losses ``up_loss`` = ln(x/t)
  (Q-masses; the remove PLD puts P-mass up_p e^{loss} at loss, plus
  ``up_minf_t`` at +inf; the add PLD puts Q-mass up_p at -loss, plus
  ``up_q0`` at +inf), and the lower atoms ``lo_a`` at ``lo_loss`` (plus
  ``lo_inf``, P-mass at +inf of the lower remove PLD; 0 for these mechanisms).
  Bound: upper (convex-order dominating) and lower (dominated) laws.
  """
  return _final_laws(sigma, num_steps, n=int(grid_size), tail=float(tail),
                     mechanism=mechanism)
