"""Queries on composed allocation laws, and the batched jitted entry point (private).

Hockey-stick deltas and epsilons of a :class:`._pld_compose.Composed` lane
(upper: exact segment inversion of the lattice law; lower: bisection then
Newton steps from the feasible side on the merged atoms, every iterate
evaluated), with the float ledger of :mod:`._pld_compose`; and
:func:`query_batch`, the one jitted call behind the epsilon/delta front doors.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxacct._core.batching import lanes_per_block, map_blocks
from jaxacct._core.dtype import require_x64
from jaxacct._core.solve import bisect, newton_keep_feasible
from jaxacct.allocation._pld_compose import Composed, compose_laws
from jaxacct.allocation._pld_laws import deltas, epsilons
from jaxacct._core.compiled import jit


def _knots(C: Composed):
  N = C.wu.shape[0]
  sh = (C.m + jnp.arange(N, dtype=jnp.int64)).astype(jnp.float64) * C.h
  return sh, jnp.exp(sh)


def composed_deltas(C: Composed, eps):
  """(rem_up, add_up, rem_lo, add_lo) at eps (scalar) for one composed lane."""
  sh, x = _knots(C)
  e = jnp.asarray(eps, jnp.float64)
  g = jnp.exp(e - C.H)
  ru = C.fup * jnp.exp(C.H) * (jnp.sum(C.wu * jnp.maximum(x - g, 0.0)) + C.defu)
  au = C.fup * (jnp.sum(C.wu * jnp.maximum(-jnp.expm1(sh + e - C.H), 0.0)) + C.q0u)
  if C.wl_lo is None:
    rl = al = jnp.full((), jnp.nan)
  else:
    gl = jnp.exp(e + C.H)
    rl = C.flo * (jnp.exp(-C.H) * jnp.sum(jnp.maximum(C.pl_lo - gl * C.wl_hi, 0.0)) + C.singl)
    al = C.flo * (jnp.sum(jnp.maximum(C.wl_lo - gl * C.pl_hi, 0.0)) + C.q0l)
  bad = jnp.isnan(C.fup) | jnp.isnan(e)
  return tuple(jnp.where(bad, jnp.nan, v) for v in (ru, au, rl, al))


def _upper_eps(C: Composed, x, t_rem, t_add):
  """(gamma_rem, gamma_add): the smallest gamma with sum wu (x - gamma)_+ <= t_rem
  (remove) and with sum wu (1 - gamma x)_+ <= t_add (add), by exact segment
  inversion of the lattice law.

  remove: with B_j = sum_{i >= j} w_i, delta(x_j) = D_j = sum_{l > j} dx_l B_l
  (D decreasing), and delta is linear on [x_j, x_{j+1}].
  add: y = 1/gamma with delta(y) = C_j - K_j / y on [x_j, x_{j+1}] (C, K: Q-
  and P-mass <= j).
  The five cumulative sums run as two stacked ones (each row bit for bit the
  sum it replaces), so the program holds two cumsum kernels instead of five.
  """
  wu = C.wu
  N = x.shape[0]
  dx = x * -jnp.expm1(-C.h)                            # x_j - x_{j-1}
  c1 = jnp.cumsum(jnp.stack([wu[::-1], wu, wu * x]), axis=1)
  B = c1[0][::-1]                                      # B_j = sum_{i >= j} w_i
  Cq, Kp = c1[1], c1[2]
  Cprev = jnp.concatenate([jnp.zeros(1), Cq[:-1]])
  c2 = jnp.cumsum(jnp.stack([(dx * B)[::-1], dx * Cprev]), axis=1)
  S = c2[0][::-1]                                      # S_l = sum_{l' >= l} dx B
  G = c2[1]                                            # G_j = sum_{i<j} w_i (x_j - x_i)

  # remove: largest j with D_j >= target (D decreasing); j = -1 if none
  D = jnp.concatenate([S[1:], jnp.zeros(1)])           # D_j = delta(x_j)
  j = jnp.sum(D >= t_rem) - 1
  jn = jnp.clip(j + 1, 0, N - 1)
  D_next = jnp.where(j + 1 <= N - 1, D[jn], 0.0)
  Bn = B[jn]
  g = x[jn] - (t_rem - D_next) / jnp.where(Bn > 0, Bn, 1.0)
  g = jnp.where(Bn > 0, g, x[jn])
  g_rem = jnp.where(j >= N - 1, x[N - 1], g)

  # add
  dnode = G / x                                        # delta at y = x_j (increasing)
  j = jnp.sum(dnode <= t_add) - 1                      # last node with delta <= target
  jc = jnp.clip(j, 0, N - 1)
  denom = Cq[jc] - t_add
  y = jnp.where(denom > 0, Kp[jc] / jnp.where(denom > 0, denom, 1.0), jnp.inf)
  y = jnp.clip(y, x[jc], jnp.where(jc + 1 <= N - 1, x[jnp.minimum(jc + 1, N - 1)], jnp.inf))
  y = jnp.where(j < 0, x[0], y)                        # delta(x_0) > target: gamma >= 1/x_0
  return g_rem, 1.0 / y


def _lower_eps(A, B, target, g_hi, *, iters_bis=24, iters_newton=8):
  """Largest gamma with f(gamma) = sum (A - gamma B)_+ >= target (f convex, decreasing).

  Bisection in log gamma on [1, g_hi] keeping the feasible end, then Newton
  steps from it (never past the root for a convex decreasing f); returns
  gamma with f(gamma) >= target evaluated, or 0 if f(1) < target.
  """
  f = lambda g: jnp.sum(jnp.maximum(A - g * B, 0.0))
  ok0 = f(1.0) >= target
  # log gamma: feasible (f >= target) on [0, root]
  a = bisect(lambda x: target - f(jnp.exp(x)), jnp.zeros(()),
             jnp.log(jnp.maximum(g_hi, 1.0)) + 1e-9, increasing=True, num_iters=iters_bis).x

  slope = lambda g: jnp.sum(jnp.where(A > g * B, B, 0.0))
  g = newton_keep_feasible(f, slope, jnp.exp(a), target, num_iters=iters_newton)
  return jnp.where(ok0, g, 0.0)


#: Relative rounding allowance of the composed epsilon queries: the log of a
#: profile solved through tilted FFT sums carries float64 error of order
#: 1e-14 relative; upper epsilons move up and lower ones down by this much.
COMPOSED_ROUNDING = 1e-12


def composed_epsilons(C: Composed, delta):
  """(rem_up, add_up, rem_lo, add_lo) epsilons at delta (scalar), one lane."""
  sh, x = _knots(C)
  d = jnp.asarray(delta, jnp.float64)
  nudge = lambda e: e + COMPOSED_ROUNDING * (1.0 + jnp.abs(e))
  t_r = d / (C.fup * jnp.exp(C.H)) - C.defu
  t_a = d / C.fup - C.q0u
  g_r, g_a = _upper_eps(C, x, t_r, t_a)
  ru = jnp.where(t_r > 0, jnp.maximum(nudge(jnp.log(jnp.maximum(g_r, 1e-300)) + C.H), 0.0),
                 jnp.inf)
  au = jnp.where(t_a > 0, jnp.maximum(nudge(jnp.log(jnp.maximum(g_a, 1e-300)) + C.H), 0.0),
                 jnp.inf)
  if C.wl_lo is None:
    rl = al = jnp.full((), jnp.nan)
  else:
    # remove: f(g) = sum (P_lo - g W_hi)_+; add: sum (W_lo - g P_hi)_+ (one traced
    # copy of the solver, lax.map over the two directions)
    A = jnp.stack([C.pl_lo, C.wl_lo])
    B = jnp.stack([C.wl_hi, C.pl_hi])
    t_l = jnp.stack([(d / C.flo - C.singl) * jnp.exp(C.H), d / C.flo - C.q0l])
    ghi = jnp.max(jnp.where(B > 0, A / jnp.where(B > 0, B, 1.0), 0.0), axis=1)
    g = jax.lax.map(lambda a: _lower_eps(*a), (A, B, t_l, ghi))
    rl, al = (jnp.where(t_l[i] > 0, jnp.maximum(jnp.log(jnp.maximum(g[i], 1e-300)) - C.H, 0.0),
                        jnp.inf) for i in range(2))
    shrink = lambda e: jnp.where(jnp.isfinite(e), e * (1.0 - COMPOSED_ROUNDING), e)
    rl, al = shrink(rl), shrink(al)
  bad = jnp.isnan(C.fup) | ~(d > 0) | ~(d < 1)
  return tuple(jnp.where(bad, jnp.nan, v) for v in (ru, au, rl, al))


def upper_feasible(C: Composed, eps, delta):
  """Whether both upper deltas at ``eps`` are <= ``delta`` (calibration)."""
  ru, au, _, _ = composed_deltas(C._replace(wl_lo=None), eps)
  return (ru <= delta) & (au <= delta)


# ----------------------------------------------------------------------------
# batched entry point
# ----------------------------------------------------------------------------

@functools.partial(jit, static_argnames=("mode", "size", "tilts", "shared", "two",
                                             "compose", "want_lower", "batch", "single"))
def query_batch(Fr1, Fa1, Fr2, Fa2, c1, c2, q, tau, *, mode: str, size: int, tilts: int,
                shared: bool, two: bool, compose: bool, want_lower: bool, batch: int,
                single: bool = True):
  """(rem_up, add_up, rem_lo, add_lo) per lane: epsilons (mode "eps", q = delta)
  or deltas (mode "delta", q = epsilon) of c1 rounds F1 composed with c2
  rounds F2 (remove laws Fr*, add laws Fa*; ``shared``: Fa* is Fr*).
  Lanes with c1 + c2 == 1 use the round's own laws (no lattice); ``single``
  (static) False promises there are none (the direct query is not compiled).
  """
  require_x64("allocation.pld")
  direct_fn = epsilons if mode == "eps" else deltas

  def lane(xs):
    fr1, fa1, fr2, fa2, cc1, cc2, qq, tt = xs
    if not compose:
      return direct_fn(fr1, qq, fa1)
    query = composed_epsilons if mode == "eps" else composed_deltas

    def run(f1, f2):
      C = compose_laws(f1, f2, cc1, cc2, tt, qq, mode=mode, size=size, tilts=tilts, two=two,
                       want_lower=want_lower)
      return query(C, qq)

    out = run(fr1, fr2)
    if not shared:
      oa = run(fa1, fa2)
      out = (out[0], oa[1], out[2], oa[3])
    if not single:
      return out
    direct = direct_fn(fr1, qq, fa1)
    one = (cc1 + cc2) == 1
    return tuple(jnp.where(one, a, b) for a, b in zip(direct, out))

  fr2 = Fr1 if Fr2 is None else Fr2
  fa2 = Fa1 if Fa2 is None else Fa2
  xs = (Fr1, Fa1, fr2, fa2, c1, c2, q, tau)
  return map_blocks(lane, xs, batch_size=lanes_per_block(batch))
