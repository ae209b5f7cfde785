"""Windows, re-grids and pair tables of the round laws: one text for both paths (private).

The level logic of :mod:`._sum_law`, jitted (``ns = JAX``) or on the host
(``ns = HOST``: a concrete question with zero compiled programs), reads these
formulas through an array namespace
``ns`` (:mod:`jaxacct._core.namespace`: ``ns.xp`` is ``jax.numpy`` by default,
``numpy`` on the host; ``ns.add_at`` is ``x.at[i].add``). The mathematics
(mean-preserving splits for the upper law, barycentric grouping for the
lower law) is in :mod:`jaxacct.allocation.pld`; the law representation in
:mod:`._sum_law`.
"""

from __future__ import annotations

import numpy as np

from jaxacct._core.namespace import JAX

_EPS = float(np.finfo(np.float64).eps)
TINY = 1e-250   # masses below this are dropped (lower) / flushed (upper, ledgered)


def tables(D, n, ns=JAX):
  """Per diagonal d = 0..n-1: the cell offset kappa(d) = floor(log(1 + r^-d) / D)
  of a pair sum and the split weight of its upper knot."""
  xp = ns.xp
  d = xp.arange(n, dtype=xp.float64)
  l1p = xp.log1p(xp.exp(-d * D))                       # log(1 + r^-d)
  kap = xp.floor(l1p / D)
  om = xp.clip(xp.expm1(l1p - kap * D) / xp.expm1(D), 0.0, 1.0)
  return kap.astype(xp.int32), om


def window(mass, mom, tail, ns=JAX):
  """Indices [jl, jr] keeping all but `tail` mass on the left and `tail` of
  the (normalised) first moment on the right."""
  xp = ns.xp
  tot = xp.sum(mass)
  cs = xp.cumsum(xp.stack([mass, mom[::-1]]), axis=1)  # one stacked cumsum kernel
  jl = xp.sum(cs[0] <= tail * tot)                     # first index with cum > tail
  totm = xp.sum(mom)
  tm = cs[1][::-1]                                     # tm[j] = sum_{k >= j}
  # last index jr with sum_{k > jr} mom <= tail * totm  <=> tm[jr+1] <= ..
  above = tm > tail * totm
  jr = xp.sum(above) - 1
  jr = xp.maximum(jr, jl + 1)
  return jl, jr


def window_upper(law, lat, tail, ns=JAX):
  """Knot indices (absolute) of the window of an upper law."""
  xp = ns.xp
  idx = lat.off + xp.arange(law.p.shape[0])
  ux = idx * lat.step                                  # relative log position
  mom = law.p * xp.exp(ux - xp.max(xp.where(law.p > 0, ux, -xp.inf)))
  jl, jr = window(law.p, mom, tail, ns)
  return lat.off + jl, lat.off + jr


def window_lower(law, lat, tail, ns=JAX):
  xp = ns.xp
  idx = lat.off + xp.arange(law.a.shape[0])
  ux = idx * lat.step
  mom = law.g * xp.exp(ux - xp.max(xp.where(law.a > 0, ux, -xp.inf)))
  jl, jr = window(law.a, mom, tail, ns)
  return lat.off + jl, lat.off + jr


def regrid_upper(law, lat, jl, D2, n: int, ns=JAX):
  """Mean-preserving split of every knot of `law` onto the new lattice
  x'_c = x_{jl} r'^c, c = 0..n-1. Below x'_0: spread onto {0, x'_0}.
  Above x'_{n-1}: Q-mass kept at x'_{n-1}, excess moment to minf."""
  xp = ns.xp
  m = law.p.shape[0]
  rel = (lat.off + xp.arange(m) - jl).astype(xp.float64) * lat.step   # ln(x / x'_0)
  pos = rel / D2
  pos = xp.where(xp.isnan(pos), -1.0, pos)   # a lattice past float64 (no int cast of NaN)
  c = xp.clip(xp.floor(pos), 0, n - 2).astype(xp.int32)
  e = rel - c * D2
  om = xp.clip(xp.expm1(e) / xp.expm1(D2), 0.0, 1.0)
  below = rel < 0
  above = rel > (n - 1) * D2
  inside = ~(below | above)
  p = law.p
  out = xp.zeros(n)
  out = ns.add_at(out, c, xp.where(inside, p * (1.0 - om), 0.0))
  out = ns.add_at(out, c + 1, xp.where(inside, p * om, 0.0))
  wl = xp.exp(xp.minimum(rel, 0.0))                    # x / x'_0 for below
  out = ns.add_at(out, 0, xp.sum(xp.where(below, p * wl, 0.0)))
  q0 = law.q0 + xp.sum(xp.where(below, p * (1.0 - wl), 0.0))
  out = ns.add_at(out, n - 1, xp.sum(xp.where(above, p, 0.0)))
  u_new0 = lat.u_ref + jl * lat.step
  xl = xp.exp(u_new0 + (n - 1) * D2)
  ex = xp.where(above, p * xp.expm1(xp.maximum(rel - (n - 1) * D2, 0.0)), 0.0)
  minf = law.minf + xl * xp.sum(ex) * (1.0 + 4 * _EPS)
  new_lat = type(lat)(u_new0, D2, xp.zeros((), xp.int32))
  return type(law)(out, q0, minf), new_lat


def regrid_lower(law, lat, jl, D2, n: int, ns=JAX):
  """Barycentric re-grid: every atom is accumulated (mass, exact moment) in
  the new cell that contains it; atoms outside the window are dropped."""
  xp = ns.xp
  m = law.a.shape[0]
  a = law.a
  f = xp.where(a > 0, law.g / xp.where(a > 0, a, 1.0), 1.0)
  rel = (lat.off + xp.arange(m) - jl).astype(xp.float64) * lat.step + xp.log(f)
  pos = rel / D2
  c = xp.where(xp.isnan(pos), -1.0, xp.floor(pos))   # NaN: outside, dropped
  keep = (c >= 0) & (c <= n - 1) & (a > 0)
  ci = xp.clip(c, 0, n - 1).astype(xp.int32)
  frel = xp.exp(rel - ci * D2)
  keep = keep & (a > TINY)
  outa = ns.add_at(xp.zeros(n), ci, xp.where(keep, a, 0.0))
  outg = ns.add_at(xp.zeros(n), ci, xp.where(keep, a * frel, 0.0))
  new_lat = type(lat)(lat.u_ref + jl * lat.step, D2, xp.zeros((), xp.int32))
  return type(law)(outa, outg, law.q0), new_lat


def new_step(jl, jr, D, n, min_step, ns=JAX):
  """Step of a fresh n-knot window over old knots jl..jr (at least min_step)."""
  xp = ns.xp
  return xp.maximum(xp.asarray(jr - jl).astype(xp.float64) * D / (n - 1), min_step)
