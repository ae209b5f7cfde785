"""Certified lower pairwise sums on a coarsened lattice (private).

The lower law of :mod:`._sum_law` (per cell ``[x_j, x_{j+1})`` a mass ``a``
and a moment ``g`` in units of ``x_j``; ``x_j = exp(u_ref + j D)``) only has
to be a *mean-preserving contraction* of the true sum (convex order from
below, sub-probability allowed; :mod:`jaxacct.allocation.pld`, facts 1-3):
any grouping of atoms whose groups are replaced by their barycentres (exact
mass and first moment) is valid, and so is dropping mass. This module runs the
exact O(n^2) barycentric kernel of :func:`._sum_law.conv_lower` on a lattice
``c`` times coarser, which costs about ``1/c^2`` of the fine sum.

Proofs and sources: docs/bounds/allocation_pld.md ("Bounds and proofs /
Random allocation: the tight PLD").
"""

from __future__ import annotations

from jaxacct._core.namespace import JAX

#: Default coarsening factor of the lower pairwise sums (static).
COARSEN = 2
#: Default grids below this (the tests' 256 and 512 knots) are summed at full
#: resolution: the O(n^2) sum is cheap there, and coarser sums would widen the
#: bracket (n = 512 at full resolution: 1.006 already, README).
MIN_COARSE_N = 1024


def coarsen_law(law, D, c: int, ns=JAX):
  """``law`` (fields a, g, q0 on n fine cells) merged c cells at a time:
  n_c = ceil(n / c) coarse cells, moments in units of the coarse cell's left knot
  (``ns``: the array namespace, :mod:`jaxacct._core.namespace`)."""
  xp = ns.xp
  n = law.a.shape[0]
  nc = -(-n // c)
  pad = xp.zeros(nc * c - n)
  a = xp.concatenate([law.a, pad]).reshape(nc, c)
  g = xp.concatenate([law.g, pad]).reshape(nc, c)
  rl = xp.exp(xp.arange(c, dtype=xp.float64) * D)   # r^l, l = 0..c-1
  return law._replace(a=xp.sum(a, axis=1), g=xp.sum(g * rl, axis=1))


def refine_law(law, D, c: int, m: int, ns=JAX):
  """Coarse output law (step cD) re-expressed on the fine lattice (step D):
  length m, element i at fine knot c o_c + i for the coarse offset o_c."""
  xp = ns.xp
  a, g = law.a, law.g
  pos = a > 0
  f = xp.where(pos, g / xp.where(pos, a, 1.0), 1.0)
  l = xp.clip(xp.floor(xp.log(f) / D), 0, c - 1)
  gl = g * xp.exp(-l * D)
  lanes = xp.arange(c, dtype=xp.float64)
  hit = l[:, None] == lanes[None, :]                     # (m_c, c) one-hot fine slot
  fa = xp.where(hit, a[:, None], 0.0).reshape(-1)
  fg = xp.where(hit, gl[:, None], 0.0).reshape(-1)
  k = fa.shape[0]
  if k >= m:
    fa, fg = fa[:m], fg[:m]
  else:
    fa = xp.concatenate([fa, xp.zeros(m - k)])
    fg = xp.concatenate([fg, xp.zeros(m - k)])
  return law._replace(a=fa, g=fg)


def coarse_sums(exact, pairs, D, n: int, m: int, c: int, ns=JAX):
  """Lower sums ``P + R`` for ``(P, R, symmetric)`` in ``pairs`` on a lattice
  c times coarser (see the module docstring); returns ``(sums, o)``.

  ``exact(pairs, D, n)`` is the fine O(n^2) kernel, returning ``(sums, o)``
  with sums of length ``m(n)`` at knot offset ``o``; ``m`` is the fine output
  length. ``c`` None: :data:`COARSEN` where ``n >= MIN_COARSE_N``, else 1;
  ``c = 1`` calls ``exact`` unchanged. ``ns``: the array namespace of the
  coarsening and refining (the host twin passes ``HOST`` and its own ``exact``).
  """
  c = (COARSEN if n >= MIN_COARSE_N else 1) if c is None else int(c)
  if c <= 1:
    return exact(pairs, D, n)
  seen = {}

  def co(law):   # coarsen each distinct operand once (X + X: the same object)
    if id(law) not in seen:
      seen[id(law)] = coarsen_law(law, D, c, ns)
    return seen[id(law)]

  cpairs = [(co(P), co(R), s) for P, R, s in pairs]
  nc = -(-n // c)
  sums, oc = exact(cpairs, c * D, nc)
  return [refine_law(S, D, c, m, ns) for S in sums], c * oc
