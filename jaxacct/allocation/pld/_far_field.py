"""Far field of the round laws' pairwise sums: O(n log n) per level (private).

On the geometric lattice ``x_j = exp(u_ref + j D)`` of :mod:`._sum_law`, a
pair (i, i + d) sums to ``x_{i+d} (1 + r^-d)``, r = e^D. For the diagonals
with ``kappa(d) = 0`` (``r^-d < r - 1``) every pair lands between its high
knot j = i + d and the next, so the pairs of one high knot are summed by
prefix sums and a geometric filter of the low law instead of one diagonal at a
time (:func:`far_upper`: the same mean-preserving splits, re-associated;
:func:`far_lower`: one exact barycentre per high cell). The near band (the
other diagonals, :func:`band_limits`) stays in the diagonal loop of
:mod:`._sum_law`. The same functions serve the host path
(``ns = HOST``: NumPy, no compiled program).

Float ledger. :func:`geometric_prefix` forms no power ``r^n`` (no overflow)
and subtracts nothing: every term reaches an output through at most
``ceil(log2 n)`` additions of non-negative numbers and as many products with
factors ``exp(-s D)`` (each within 1 ulp of the real one for the float D), so
P and the filter carry relative errors of at most ``3 ceil(log2 n)`` ulp. The
upper's knot-j mass ``P - W`` at most doubles that (``W <= P / 2`` in the far
field); the lower's group mass and moment are products and sums of those, so
the group's position (moment / mass) moves by a relative error of at most
twice theirs. Masses perturbed relatively are covered by ``rel``
(:mod:`._laws`), positions moved by a factor ``e^{+-h}`` by the ``eta``
ledger (:func:`._sum_law.sum_law_upper`); :func:`far_ulps` is what each adds per
level.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from jaxacct._core.namespace import JAX


def far_ulps(n: int):
  """``(mass, position)``: the relative mass error and the log-position error, in
  ulp, that one level's far field may add (:func:`far_upper`: masses within
  ``6 ceil(log2 n) + 8`` ulp; :func:`far_lower`: positions within ``2 (3
  ceil(log2 n) + 3)`` ulp). ``rel`` and the ``eta`` ledger add them per level."""
  lg = int(n - 1).bit_length()
  return 6 * lg + 8, 6 * lg + 6


def band_limits(kap, om, n, ns=JAX):
  """``(d_up, d_lo)``: the near bands of the upper and lower pairwise sums.

  Diagonals ``d >= d_lo`` have ``kappa(d) = 0`` (``r^-d < r - 1``: the pair
  sum lies in ``[x_j, x_{j+1})``, ``j = i + d`` its high knot); ``d >= d_up``
  moreover have split weight ``omega(d) = r^-d / (r - 1) <= 1/2``. Both are
  at least 1 (the diagonal d = 0 always runs in the loop) and at most n
  (``n``: no far field). Traced under jit; NumPy ints with ``ns = HOST``.
  """
  xp = ns.xp
  d_lo = xp.maximum(xp.sum(kap > 0), 1)
  d_up = xp.maximum(xp.sum((kap > 0) | (om > 0.5)), 1)
  return d_up, d_lo


def _shift(x, s, n):
  """``y[..., j] = x[..., j - s]`` (0 for j < s), s traced in [0, n]."""
  z = jnp.concatenate([jnp.zeros(x.shape[:-1] + (n,)), x], axis=-1)
  return lax.dynamic_slice_in_dim(z, n - s, n, axis=-1)


def geometric_prefix(x, D, n: int, ns=JAX):
  """Prefix sums and geometric filters of the rows of ``x`` (shape (k, n)):
  ``(P, Y)`` with ``P[:, j] = sum_{i <= j} x[:, i]`` and ``Y[:, j] =
  sum_{i <= j} x[:, i] r^-(j - i)``, ``r = e^D``, by recursive doubling
  (Hillis-Steele): after the steps ``s = 1, 2, 4, ... < n``, ``Z_j <- Z_j +
  rho^s Z_{j - s}`` with ``rho^s = exp(-s D)`` (``rho = 1`` for P).

  Float ledger: every term ``x_i rho^(j-i)`` reaches ``Y_j`` through at most
  ``ceil(log2 n)`` products (each factor ``exp(-s D)`` within 1 ulp of the
  real one, since the lattice's D is a float) and as many additions of
  non-negative numbers, so P and Y carry a relative error at most
  ``3 ceil(log2 n)`` ulp (n = 1024: 30 ulp; no overflow, no cancellation).
  ``ns``: ``JAX`` (a ``fori_loop`` of ceil(log2 n) steps) or ``HOST``.
  """
  xp = ns.xp
  k = x.shape[0]
  z = xp.concatenate([x, x], axis=0)
  rate = xp.concatenate([xp.zeros(k), xp.full(k, 1.0)]) * D    # rho = 1 | e^-D
  steps = max(int(n - 1).bit_length(), 0)
  if ns.is_host:
    for b in range(steps):
      s = 1 << b
      sh = xp.concatenate([xp.zeros((2 * k, s)), z[:, :n - s]], axis=1)
      z = z + xp.exp(-s * rate)[:, None] * sh
    return z[:k], z[k:]

  def body(b, z):
    s = jnp.left_shift(1, b)
    return z + jnp.exp(-s.astype(jnp.float64) * rate)[:, None] * _shift(z, s, n)
  z = lax.fori_loop(0, steps, body, z)
  return z[:k], z[k:]


def far_prefix(rows, D, band, n: int, ns=JAX):
  """``(P, T)`` of the stacked rows (k, n) for a far field from diagonal
  ``band`` on: ``P[:, j] = sum_{i <= j - band} rows[:, i]`` and ``T[:, j] =
  sum_{i <= j - band} rows[:, i] r^-(j - i)`` (:func:`geometric_prefix`, then a
  shift by ``band`` and the exact-to-1-ulp factor ``exp(-band D)``)."""
  xp = ns.xp
  P, Y = geometric_prefix(rows[:, :n], D, n, ns)
  if not ns.is_host:
    P, Y = _shift(P, band, n), _shift(Y, band, n)
  else:
    s = int(band)
    z = xp.zeros((rows.shape[0], s))
    P = xp.concatenate([z, P[:, :n - s]], axis=1)
    Y = xp.concatenate([z, Y[:, :n - s]], axis=1)
  return P, Y * xp.exp(-band * D)


def far_upper(low, high, D, d_up, n: int, ns=JAX, pre=None):
  """Far-field split of the pairs (i, j = i + d), ``d >= d_up``, low atom from
  ``low`` (masses, length >= n), high atom from ``high``: ``(c0, c1)``,
  masses to knots j and j + 1 (length n, element j).

  A pair's split weight of knot j + 1 is ``w_d = r^-d / (r - 1)`` (kappa = 0);
  summed over the pairs of high knot j: ``high_j W_j`` with ``W_j =
  sum_{i <= j - d_up} low_i w_{j - i} = r^-d_up Y_{j - d_up} / expm1(D)``
  (:func:`geometric_prefix`) and ``high_j (P_{j - d_up} - W_j)`` on knot j:
  the sum of the pairs' mean-preserving splits, reassociated. Since
  ``w_d <= 1/2`` there, ``W_j <= P/2`` and the difference loses at most a factor
  2 in relative accuracy: both masses are within ``6 ceil(log2 n) + 8`` ulp
  (relative) of the exact split sums (a relative perturbation of non-negative
  masses, inside ``rel``). ``d_up`` traced; ``ns`` as in geometric_prefix;
  ``pre``: ``(P, T)`` of ``low`` (:func:`far_prefix`, rows of length n) if
  already computed.
  """
  xp = ns.xp
  P, T = far_prefix(low[None, :n], D, d_up, n, ns) if pre is None else pre
  W = T[0] / xp.expm1(D)
  return high[:n] * xp.maximum(P[0] - W, 0.0), high[:n] * W


def far_lower(low, high, D, d_lo, n: int, ns=JAX, pre=None):
  """Far field of a lower pairwise sum: the pairs (i, j = i + d), ``d >= d_lo``
  (kappa = 0), low atom from ``low``, high atom from ``high`` (LowerLaw
  fields, length >= n), grouped per high cell j into ONE barycentre:
  ``(a0, g0, a1, g1)`` (length n, element j), mass and moment to cell j (units
  of x_j) or to cell j + 1 (units of x_{j+1}).

  The group of cell j has mass ``a_j P_j`` and moment (units of x_j)
  ``g_j P_j + a_j T_j``, ``P_j = sum_{i <= j - d_lo} low.a_i``, ``T_j =
  sum_{i <= j - d_lo} low.g_i r^-(j - i)`` (:func:`geometric_prefix`): its
  exact barycentre (Jensen: a mean-preserving contraction of the group, so a
  valid lower whatever cell it is stored in; facts 1-2 of the pld module). It
  lies in ``[x_j f_j, x_j (f_j + r^(1 - d_lo)))`` with ``f_j < r`` and
  ``r^-d_lo < r - 1``, so below ``x_{j+2}``: it is stored in the cell that
  holds it (moment ``>= r`` mass: cell j + 1, moment divided by r). Floats:
  mass and moment are sums of non-negative terms within ``3 ceil(log2 n) + 3``
  ulp (relative) of the exact ones, so the atom's position is within twice that
  (a log-position error, inside the per-level ``eta`` allowance). ``pre``:
  ``(P, T)`` of the rows ``(low.a, low.g)`` (:func:`far_prefix`) if computed.
  """
  xp = ns.xp
  if pre is None:
    pre = far_prefix(xp.stack([low.a[:n], low.g[:n]]), D, d_lo, n, ns)
  P, T = pre[0][0], pre[1][1]
  M = high.a[:n] * P
  G = high.g[:n] * P + high.a[:n] * T
  up = G >= xp.exp(D) * M
  zero = xp.zeros(n)
  return (xp.where(up, zero, M), xp.where(up, zero, G), xp.where(up, M, zero),
          xp.where(up, G, zero) / xp.exp(D))
