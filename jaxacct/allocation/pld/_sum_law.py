"""Convex-order upper and lower laws of S = L(Y_1)+...+L(Y_t), Y ~ Q^t (private).

Kernels behind :mod:`jaxacct.allocation.pld`; the mathematics and the
validity argument are in that module's docstring. Windows and re-grids are
in :mod:`._regrid`. One text for both paths (:mod:`jaxacct._core.namespace`):
``ns = JAX`` (the default) is jittable and vmappable in ``sigma`` and ``t``;
``ns = HOST`` answers a concrete question in NumPy with no compiled program,
the diagonals of a pairwise sum then taken a block of rows at a time and each
output cell summed in the jitted loop's order (:func:`._host_rows.host_sums`). The grid
size ``n`` is static.

Proofs and sources: docs/bounds/allocation_pld.md ("Bounds and proofs /
Random allocation: the tight PLD").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from numpy.lib.stride_tricks import as_strided

from jaxacct._core.batching import accelerator_layout
from jaxacct._core.compiled import jit
from jaxacct._core.namespace import JAX
from jaxacct.allocation.pld import _diagonal_blocks as db
from jaxacct.allocation.pld._law_types import (Lattice, LowerLaw, UpperLaw, both, nbits, pick,
                                             stack, unstack)
from jaxacct.allocation.pld._host_rows import HOST_ROWS, host_sums
from jaxacct.allocation.pld import _lower_coarse as lc
from jaxacct.allocation.pld._far_field import (band_limits, far_lower, far_prefix, far_ulps,
                                              far_upper)
from jaxacct.allocation.pld._regrid import (new_step, regrid_lower, regrid_upper, tables,
                                           window_lower, window_upper)

_EPS = float(np.finfo(np.float64).eps)
UNROLL = 1


# ----------------------------------------------------------------------------
# pairwise sums on a shared lattice (diagonal kernels)
# ----------------------------------------------------------------------------

def out_size(n: int) -> int:
  """Static length of a pairwise-sum output (see conv_upper)."""
  return (3 * n) // 2 + 4


def _diagonal_pieces(n: int, pieces: int):
  """Static ``(d_lo, d_hi, L)``: the diagonals d in [d_lo, d_hi) of a pairwise
  sum touch only the elements i < n - d <= L = n - d_lo (the rest of a length-n
  slice is zero padding, whose products add exact zeros for finite masses;
  NaN masses of an invalid lane then reach fewer outputs, its ledger stays
  NaN): each piece loops over vectors of its own length L (1: plain loop)."""
  cuts = [(p * n) // pieces for p in range(pieces + 1)]
  return [(cuts[p], cuts[p + 1], n - cuts[p]) for p in range(pieces) if cuts[p + 1] > cuts[p]]


def _accumulate(out, terms, d, L: int):
  """Jitted: adds the terms ``(start, re, im)`` of diagonal ``d`` at elements
  ``start .. start + L`` of the complex row ``out``, ONE in-place slice update
  (``re``: real row, ``im``: imaginary row; the host: :func:`._host_rows.host_sums`)."""
  start, re, im = terms(d)
  seg = lax.dynamic_slice(out, (start,), (L + 1,)) + lax.complex(re, im)
  return lax.dynamic_update_slice(out, seg, (start,))


def _run_loops(parts, n: int, pieces: int, band=None, D=None, active=None, ns=JAX):
  """Runs the diagonal loops of one or more pairwise sums.

  ``parts``: ``(terms, finish, init, lows, block)`` per sum; ``terms(L)`` maps
  a diagonal d >= 1 to its terms over length-L vectors (:func:`_accumulate`),
  ``terms(L, True)`` those of the main diagonal d = 0 (applied once, before the
  loop, so that the loop needs no ``d > 0`` mask; every product and sum is the
  one a masked body formed). ``band`` (traced int or None: n): only the
  diagonals d < band run here (the near band, a dynamic trip count, no new
  static variant); ``finish(out, pre)`` adds the far field from ``pre``, the
  :func:`far_prefix` of its rows ``lows`` (all sums' rows in one filter).
  ``active`` (traced bools, one per sum, or None: one loop for all): each sum
  runs its own loop, with no trip where False (a sum the level does not read).
  ``block``: the accelerator layout's trip body (:mod:`._diagonal_blocks`).
  ``ns = HOST``: blocks of :data:`HOST_ROWS` diagonals, :func:`._host_rows.host_sums`. Returns
  ``[finish(out)]``.
  """
  return _finish(parts, _loop_rows(parts, n, pieces, band, active, ns), band, D, n, ns)


def _loop_rows(parts, n: int, pieces: int, band, active, ns, blocks=None):
  """The accumulation rows of :func:`_run_loops` (before ``finish``); ``blocks``
  (None: the accelerator layout's choice): the dense blocks, else the loops."""
  xp = ns.xp
  outs = tuple(p[2] for p in parts)
  if not ns.is_host and (accelerator_layout() if blocks is None else blocks):
    # every diagonal block of every piece at once, float64 rows (._diagonal_blocks)
    hi = n if band is None else band
    his = [hi if act is None else xp.where(act, hi, 0) for act in (active or [None] * len(parts))]
    terms, X, kap, o = parts[0][4]
    rows = db.dense_sums(terms, jnp.stack([p[4][1] for p in parts]),
                         jnp.stack([jnp.asarray(h, jnp.int32) for h in his]), n, kap, o, _buf(n))
    return tuple(lax.complex(r[0], r[1]) for r in rows)
  host = [[] for _ in parts]   # ns = HOST: each sum's blocks (host_sums)
  for d_lo, d_hi, L in _diagonal_pieces(n, pieces):
    if d_lo == 0:   # the main diagonal once, outside the loop (band >= 1: it always runs)
      if ns.is_host:
        for p, blks in zip(parts, host):
          blks.append((p[0](L, True), np.zeros((1, 1), np.intp), L))
      else:
        zero = jnp.zeros((), jnp.int32)
        outs = tuple(_accumulate(x, p[0](L, True), zero, L) for p, x in zip(parts, outs))
      d_lo = 1
    if d_hi <= d_lo:
      continue
    hi = d_hi if band is None else xp.minimum(d_hi, band)
    his = [hi if act is None else xp.where(act, hi, d_lo)
           for act in (active or [None] * len(parts))]
    steps = [p[0](L) for p in parts]
    if ns.is_host:   # blocks of HOST_ROWS diagonals as rows
      for f, h, blks in zip(steps, his, host):
        blks.extend((f, np.arange(b, min(b + HOST_ROWS, int(h)))[:, None], L)
                    for b in range(d_lo, int(h), HOST_ROWS))
    elif active is None:
      body = lambda d, o, steps=steps: tuple(_accumulate(x, f, d, L)
                                             for f, x in zip(steps, o))
      outs = lax.fori_loop(d_lo, hi, body, outs, unroll=UNROLL)
    else:
      outs = tuple(lax.fori_loop(d_lo, h, lambda d, o, f=f: _accumulate(o, f, d, L), x,
                                 unroll=UNROLL) for f, x, h in zip(steps, outs, his))
  return host_sums(outs, host) if ns.is_host else outs


def _finish(parts, outs, band, D, n: int, ns):
  """``[finish(out)]`` of the sums, the far fields of all sums from one filter."""
  xp = ns.xp
  if band is None:
    return [p[1](x, None) for p, x in zip(parts, outs)]
  # the far fields of all sums: one filter over the stacked low-atom rows
  rows = [r for p in parts for r in p[3]]
  P, T = far_prefix(xp.stack(rows), D, band, n, ns)
  res, k = [], 0
  for p, x in zip(parts, outs):
    res.append(p[1](x, (P[k:k + len(p[3])], T[k:k + len(p[3])])))
    k += len(p[3])
  return res


def _buf(n: int) -> int:
  """Length of a pairwise sum's accumulation row (every ``start + L`` < it)."""
  return 3 * n + 4


def _low(x, L: int, xp=jnp):
  """``(x_i, x_{i-1})`` for i = 0..L (zero outside 0..L-1): the low operand of a
  diagonal at an output element and one to its left (two static arrays)."""
  z = xp.zeros(1)
  return xp.concatenate([x[:L], z]), xp.concatenate([z, x[:L]])


def _high(x, n: int, xp=jnp):
  """``x`` with one zero before and n + 1 after: element ``d + 1 + j`` is
  ``x_{d+j}`` (the high operand of diagonal d; a slice never clamps)."""
  return xp.concatenate([xp.zeros(1), x, xp.zeros(n + 1)])


def _dslice(x, start, size: int, ns):
  """``x[start : start + size]``; on the host ``start`` is a column of
  consecutive starts, one row each (a strided view, nothing copied)."""
  if ns.is_host:
    s0, s1 = int(start[0, 0]), int(start[-1, 0])
    if s1 + size > x.shape[0]:
      raise IndexError(f"window {s0}..{s1} + {size} past {x.shape[0]}")
    step = x.strides[0]     # sliding_window_view's rows, without its checks' cost
    return as_strided(x[s0:], (s1 - s0 + 1, size), (step, step), writeable=False)
  return lax.dynamic_slice(x, (start,), (size,))


def _slices(low, high, d, L: int, ns=JAX):
  """``(low_i, high_{i+d})`` and ``(low_{i-1}, high_{i-1+d})``, i = 0..L."""
  return ((low[0], _dslice(high, d + 1, L + 1, ns)), (low[1], _dslice(high, d, L + 1, ns)))


def _add_drop(out, idx, v, ns):
  """``out.at[idx].add(v, mode="drop")`` (indices past the end dropped)."""
  if ns.is_host:
    keep = idx < out.shape[0]
    return ns.add_at(out, idx[keep], v[keep])
  return out.at[idx].add(v, mode="drop")


def _upper_parts(A: UpperLaw, B: UpperLaw, D, n: int, symmetric: bool, kap, om, o,
                 d_up=None, ns=JAX, z=None):
  xp = ns.xp
  m = out_size(n)
  hA, hB = (_high(X.p, n, xp) for X in (A, B))

  def terms(L, main=False):
    lA, lB = (_low(X.p, L, xp) for X in (A, B))   # [0]: element j, zero at j = L

    def at(d):
      # The pair sums of low element j (v_j = a_j b_{j+d} + a_{j+d} b_j) go to
      # output knots start + j (weight 1 - w) and start + j + 1 (w): both parts
      # at element start + j of one complex row (real: knot j, imaginary: the
      # knot to its right, shifted in finish), ONE in-place slice update a
      # diagonal (two real rows would take two kernels; one real row with
      # (1 - w) v_j + w v_{j-1} would form v twice).
      k = kap[d]
      w = om[d]
      v = r(lA[0] * _dslice(hB, d + 1, L + 1, ns))
      if not (main or symmetric):
        v = v + r(lB[0] * _dslice(hA, d + 1, L + 1, ns))
      if symmetric and not main:   # X + X off the main diagonal: both orientations
        v = v * 2.0
      return d + k - o, r(v * (1.0 - w)), r(v * w)
    return at

  # ``z`` (a traced int64 zero, or None): every product rounded on its own, as
  # NumPy does (XLA:CPU would fuse a product and its sum into one FMA): the
  # compiled rows of HOST_LOOPS are then bit for bit HOST's
  r = (lambda x: x) if z is None else (lambda x: lax.bitcast_convert_type(
      lax.bitcast_convert_type(x, jnp.int64) ^ z, jnp.float64))

  block = None if ns.is_host else (db.upper_terms(om), jnp.stack([A.p[:n], B.p[:n]], axis=-1),
                                   kap, o)

  def finish(out, pre):
    out = out.real + xp.concatenate([xp.zeros(1), out.imag[:-1]])   # knot j, knot j + 1
    if pre is not None:   # far field d >= d_up (kappa = 0, o = 0 when it is not empty)
      P, T = pre
      c0, c1 = far_upper(A.p, B.p, D, d_up, n, ns, pre=(P[:1], T[:1]))
      if symmetric:
        c0, c1 = 2.0 * c0, 2.0 * c1
      else:
        e0, e1 = far_upper(B.p, A.p, D, d_up, n, ns, pre=(P[1:], T[1:]))
        c0, c1 = c0 + e0, c1 + e1
      out = ns.add_at(ns.add_at(out, slice(0, n), c0), slice(1, n + 1), c1)
    out = out[:m]
    # zero atoms shift the other summand exactly: input knot i -> output index
    # i - o. Those below the output window (i < o; only tiny left-tail atoms)
    # are spread onto {0, first output knot} (mean preserving).
    zero_part = A.q0 * B.p + B.q0 * A.p
    i = xp.arange(n)
    inside = i >= o
    out = _add_drop(out, xp.where(inside, i - o, m), xp.where(inside, zero_part, 0.0), ns)
    w0 = xp.exp(xp.minimum(i - o, 0) * D)
    out = ns.add_at(out, 0, xp.sum(xp.where(inside, 0.0, zero_part * w0)))
    q0 = A.q0 * B.q0 + xp.sum(xp.where(inside, 0.0, zero_part * (1.0 - w0)))
    minf = A.minf + B.minf
    return UpperLaw(out, q0, minf)

  init = (np.zeros(_buf(n)),) * 2 if ns.is_host else jnp.zeros(_buf(n), jnp.complex128)
  return (terms, finish, init, [A.p[:n]] if symmetric else [A.p[:n], B.p[:n]], block)


def conv_upper(A: UpperLaw, B: UpperLaw, D, n: int, symmetric: bool, pieces: int = 1,
               far: bool = True, ns=JAX):
  """Mean-preserving-split sum of two upper laws on the same n-knot window.

  A pair (i, i+d) sums to x_{i+d} (1 + r^-d) in [x_{h+k}, x_{h+k+1}],
  k = kappa(d); it is split linearly between those knots (a mean-preserving
  spread). Output element j sits at knot (window offset) + o + j with
  o = kappa(n-1); the output length out_size(n) bounds n + kappa(0) - o + 1.
  ``pieces`` (static) splits the diagonal loop (:func:`_diagonal_pieces`).
  ``far`` (static): the diagonals past the near band (:func:`band_limits`) by
  :func:`far_upper` in O(n log n) (the same splits, reassociated); False: every
  diagonal in the loop (the O(n^2) oracle). ``ns``: the array namespace.
  """
  kap, om = tables(D, n, ns)
  o = kap[n - 1]
  d_up = band_limits(kap, om, n, ns)[0] if far else None
  return _run_loops([_upper_parts(A, B, D, n, symmetric, kap, om, o, d_up, ns)], n, pieces,
                    d_up, D, ns=ns)[0], o


def conv_upper_pair(X: UpperLaw, A: UpperLaw, B: UpperLaw, D, n: int, pieces: int = 1,
                    far: bool = True, active=None, ns=JAX):
  """``(X + X, A + B, o)``: the two sums of a level (``X + X`` by the symmetric
  kernel: one orientation, doubled); ``active``: see :func:`_run_loops`. On
  the host the near band runs as the compiled rows of :func:`_upper_pair_rows`
  (the same bits) with ``ns = HOST_LOOPS``, or once this process holds them."""
  kap, om = tables(D, n, ns)
  o = kap[n - 1]
  d_up = band_limits(kap, om, n, ns)[0] if far else None
  parts = [_upper_parts(X, X, D, n, True, kap, om, o, d_up, ns),
           _upper_parts(A, B, D, n, False, kap, om, o, d_up, ns)]
  compiled = (n, pieces) in LOOPS_COMPILED and not accelerator_layout()
  if not (far and ns.is_host and (ns.compiled_loops or compiled)):
    S, C = _run_loops(parts, n, pieces, d_up, D, active, ns)
    return S, C, o
  act = np.ones(2, bool) if active is None else np.array([bool(a) for a in active])
  with jax.enable_x64(True):   # the near band's loops by the compiled rows (bit for bit)
    rows = _upper_pair_rows(*(np.asarray(v.p[:n], np.float64) for v in (X, A, B)),
                            np.float64(D), np.asarray(kap, np.int32), np.asarray(om, np.float64),
                            np.int32(o), np.int32(d_up), act, np.int64(0), n=n, pieces=pieces)
    rows = tuple(np.asarray(r) for r in rows)
  LOOPS_COMPILED.add((n, pieces))
  S, C = _finish(parts, rows, d_up, D, n, ns)
  return S, C, o


#: ``(n, pieces)`` of the compiled rows (:func:`_upper_pair_rows`) this process
#: holds: host upper sums of that size run them too (``ns = HOST`` as well as
#: ``HOST_LOOPS``; the same bits as NumPy's loops, at a tenth of their cost).
LOOPS_COMPILED = set()


@functools.partial(jit, static_argnames=("n", "pieces"))
def _upper_pair_rows(Xp, Ap, Bp, D, kap, om, o, band, active, zero, *, n: int, pieces: int):
  """The near-band rows of :func:`conv_upper_pair`'s two sums (``X + X``,
  ``A + B``) as one small program, bit for bit the host's rows (the CPU
  layout's loops, the same terms; ``zero``: an int64 0, see
  :func:`_upper_parts`): ``ns = HOST_LOOPS`` runs this and the rest of the
  level in NumPy."""
  z = jnp.zeros(())
  X, A, B = (UpperLaw(p, z, z) for p in (Xp, Ap, Bp))
  parts = [_upper_parts(X, X, D, n, True, kap, om, o, band, JAX, zero),
           _upper_parts(A, B, D, n, False, kap, om, o, band, JAX, zero)]
  return _loop_rows(parts, n, pieces, band, [active[0], active[1]], JAX, blocks=False)


def _lower_parts(A: LowerLaw, B: LowerLaw, D, n: int, symmetric: bool, kap, o, d_lo=None,
                 ns=JAX):
  xp = ns.xp
  m = out_size(n)
  buf = _buf(n)
  fa, fb = (xp.where(X.a > 0, X.g / xp.where(X.a > 0, X.a, 1.0), 1.0) for X in (A, B))
  hA, hB = (_high(X.a, n, xp) for X in (A, B))
  hfA, hfB = (_high(f, n, xp) for f in (fa, fb))
  eD, emD = xp.exp(D), xp.exp(-D)
  # per diagonal (tables: no scalar kernel in the loop body): r^-d, the cell
  # test e^{kD} e^D and the moment scale e^{-kD} of k = kappa(d)
  kf = kap.astype(xp.float64)
  rdt = xp.exp(-xp.arange(n, dtype=xp.float64) * D)
  tht, sct = xp.exp(kf * D) * eD, xp.exp(-kf * D)

  def terms(L, main=False):
    lA, lB = (_low(X.a, L, xp) for X in (A, B))
    lfA, lfB = (_low(f, L, xp) for f in (fa, fb))

    def at(d):
      # As the upper terms: low element j's pair (mass, exact moment) goes to
      # output cell start + j (sum below x_{h+k+1}) or start + j + 1; element
      # start + i gets the first part of element i and the second of i - 1.
      # Mass a and moment g ride in one complex row (a + i g): ONE in-place
      # slice update a diagonal (four real rows would take four).
      # Moments in units of the cell's left knot: times the rounded e^{-kD},
      # e^{-D} (the ledger of a division).
      k = kap[d]
      rd, th, sc = rdt[d], tht[d], sct[d]

      def parts(la, lf, ha, hf):
        # c = 0: pairs of element i staying in their cell; c = 1: pairs of
        # element i - 1 moving one cell up
        out_a = out_g = 0.0
        for c, ((ma, mb), (fl, fh)) in enumerate(zip(_slices(la, ha, d, L, ns),
                                                     _slices(lf, hf, d, L, ns))):
          mass, s_rel = ma * mb, fh + fl * rd
          up = s_rel >= th
          mm = xp.where(up, mass, 0.0) if c else xp.where(up, 0.0, mass)
          gg = mm * (s_rel * sc)
          out_a, out_g = out_a + mm, out_g + (gg * emD if c else gg)
        return out_a, out_g

      xa, xg = parts(lA, lfA, hB, hfB)        # orientation 1: low from A, high from B
      if not (main or symmetric):             # orientation 2: low from B, high from A
        ya, yg = parts(lB, lfB, hA, hfA)
        xa, xg = xa + ya, xg + yg
      if symmetric and not main:   # X + X off the main diagonal: both orientations
        xa, xg = xa * 2.0, xg * 2.0
      return d + k - o, xa, xg
    return at

  block = None if ns.is_host else (db.lower_terms((rdt, tht, sct, emD)),
                                   jnp.stack([A.a[:n], fa[:n], B.a[:n], fb[:n]], axis=-1), kap, o)

  def finish(out, pre):
    out = xp.concatenate([out.real, out.imag])   # (a | g) rows
    if pre is not None:   # far field d >= d_lo (kappa = 0, o = 0 when it is not empty)
      P, T = pre
      c = far_lower(A, B, D, d_lo, n, ns, pre=(P[:2], T[:2]))
      if symmetric:
        c = tuple(2.0 * x for x in c)
      else:
        c = tuple(x + y for x, y in zip(c, far_lower(B, A, D, d_lo, n, ns, pre=(P[2:], T[2:]))))
      for part, lo in ((c[0], 0), (c[2], 1), (c[1], buf), (c[3], buf + 1)):
        out = ns.add_at(out, slice(lo, lo + n), part)
    outa, outg = out[:m], out[buf:buf + m]
    # zero-atom cross terms below the output window are dropped (lower law)
    za = A.q0 * B.a + B.q0 * A.a
    zg = A.q0 * B.g + B.q0 * A.g
    i = xp.arange(n)
    idx = xp.where(i >= o, i - o, m)
    outa = _add_drop(outa, idx, za, ns)
    outg = _add_drop(outg, idx, zg, ns)
    return LowerLaw(outa, outg, A.q0 * B.q0)

  lows = [A.a[:n], A.g[:n]] + ([] if symmetric else [B.a[:n], B.g[:n]])
  init = (np.zeros(buf),) * 2 if ns.is_host else jnp.zeros(buf, jnp.complex128)
  return terms, finish, init, lows, block


def _lower_exact(pairs, D, n: int, pieces: int, far: bool = True, active=None, ns=JAX):
  # the fine kernel: ([P + R], o)
  kap, om = tables(D, n, ns)
  d_lo = band_limits(kap, om, n, ns)[1] if far else None
  return _run_loops([_lower_parts(P, R, D, n, s, kap, kap[n - 1], d_lo, ns)
                     for P, R, s in pairs], n, pieces, d_lo, D, active, ns), kap[n - 1]


def conv_lower(A: LowerLaw, B: LowerLaw, D, n: int, symmetric: bool, pieces: int = 1,
               coarsen: int | None = None, far: bool = True, ns=JAX):
  """Barycentric sum of two lower laws on the same n-cell window.

  Atoms mu_i = x_i f_i, f = g / a in [1, r). A pair (i, i+d) with sum s is
  accumulated (mass and exact moment) in cell h + kappa(d) + [s >= x_{h+k+1}];
  any grouping with exact moments is a mean-preserving contraction. ``pieces``:
  as in :func:`conv_upper`; ``coarsen`` (static): the sum runs on a lattice that
  many times coarser (:mod:`._lower_coarse`; None: its default; 1: full
  resolution); ``far`` (static): the far field (kappa = 0) grouped per high cell
  by :func:`far_lower`; False: every pair by the cell rule (the O(n^2) oracle).
  """
  ex = lambda p, D, n: _lower_exact(p, D, n, pieces, far, ns=ns)
  (S,), o = lc.coarse_sums(ex, [(A, B, symmetric)], D, n, out_size(n), coarsen, ns)
  return S, o


def conv_lower_pair(X: LowerLaw, A: LowerLaw, B: LowerLaw, D, n: int, pieces: int = 1,
                    coarsen: int | None = None, far: bool = True, active=None, ns=JAX):
  """``(X + X, A + B, o)`` (see conv_upper_pair)."""
  ex = lambda p, D, n: _lower_exact(p, D, n, pieces, far, active, ns)
  (S, C), o = lc.coarse_sums(ex, [(X, X, True), (A, B, False)], D, n, out_size(n), coarsen,
                             ns)
  return S, C, o


# ----------------------------------------------------------------------------
# t-fold sums
# ----------------------------------------------------------------------------

#: Static diagonal pieces of the pairwise sums (:func:`_diagonal_pieces`; same
#: laws): piece p runs its diagonals over vectors of length n - p n / PIECES.
#: With one slice update a diagonal the loops are bound by their arithmetic
#: and memory traffic, so the elements count: 4 pieces (0.625 n^2 a sum
#: against 0.75 n^2 for 2) run fewer elements for a little more compile time
#: (3 pieces fall in between).
PIECES = 4
METHODS = ("fast", "loop", "reference")


def _combine_level(conv, A2, B2, A2m, D2, n, bit, first, method="fast", last=None, ns=JAX):
  """One level of the binary powering: (A, B) -> (A + X, B + X) on the new lattice.

  ``X`` is ``A2`` or ``B2`` by the current bit of ``t``: the level needs
  ``X + X`` and ``A2 + B2`` (``A + X`` is one of them, ``B + X`` the other);
  the first level keeps ``A2m`` (``A2`` padded). Returns ``(A_next, B_next,
  offset)``.

  ``method`` (static): "fast" runs ``X + X`` by the symmetric kernel (one
  orientation, doubled) and ``A2 + B2`` by the asymmetric one over the near
  band, the far field by :mod:`._far_field` (upper masses equal up to
  re-association in the bulk; the lower another exact-moment grouping), and
  only the sums a level reads (``last``: the final level; ``active`` of
  :func:`_run_loops`); "loop" has every diagonal in the loop (static trip
  count, for callers that vmap lanes) and both sums; "reference" (the O(n^2)
  oracle, jitted only) runs both as asymmetric sums over every diagonal in one
  vmapped call (bit for bit the lower laws of "loop").
  """
  xp = ns.xp
  X = pick(bit, A2, B2, xp)
  if method == "reference":
    C, o = jax.vmap(lambda P, R: conv(P, R, D2, n, False, far=False), out_axes=(0, None))(
        stack(A2, X), stack(B2, X))
    C1, C0 = unstack(C)          # C1 = A2 + B2, C0 = X + X
  elif method in ("fast", "loop"):
    pair = conv_upper_pair if conv is conv_upper else conv_lower_pair
    active = None
    if method == "fast" and last is not None:
      one = first & last                       # t = 1: the level returns A2m
      active = [~one & (first | ~last | (bit == 0)),     # X + X
                ~first & (~last | (bit == 1))]           # A2 + B2
    C0, C1, o = pair(X, A2, B2, D2, n, PIECES, far=method == "fast", active=active, ns=ns)
  else:
    raise ValueError(f"method must be one of {METHODS}; got {method!r}.")
  An = pick(first.astype(xp.int32), pick(bit, C0, C1, xp), A2m, xp)
  Bn = pick(bit, C1, C0, xp)
  return An, Bn, o


def _powering(law, lat, t, n: int, tail, min_step, method, ns, *, upper: bool,
              levels: int | None = None, shared: bool = False):
  """The t-fold sum of ``law`` (see :func:`sum_law_upper`): ``(law, lattice, eta)``;
  ``shared`` (host): a list of them for the ts ``t`` (:func:`sum_laws_upper`)."""
  xp = ns.xp
  t = xp.asarray(t, xp.int32)
  nb = nbits(t, xp)
  pad = xp.zeros(out_size(n) - n)
  if upper:
    grow = lambda L: UpperLaw(xp.concatenate([L.p, pad]), L.q0, L.minf)
    win, regrid, conv = window_upper, regrid_upper, conv_upper
  else:
    grow = lambda L: LowerLaw(xp.concatenate([L.a, pad]), xp.concatenate([L.g, pad]), L.q0)
    win, regrid, conv = window_lower, regrid_lower, conv_lower
  zero = xp.zeros((), xp.int32)

  def level(j, carry, bit=None):
    A, LA, B, LB, ledger = carry
    (la, ra), (lb, rb) = both(lambda X, LX: win(X, LX, tail, ns), A, LA, B, LB, ns)
    jl, jr = xp.minimum(la, lb), xp.maximum(ra, rb)
    if upper:
      D2 = new_step(jl, jr, LA.step, n, min_step, ns)
    else:   # n new cells cover old cells jl..jr whole (atoms sit anywhere in a cell)
      D2 = new_step(jl, jr + 1, LA.step, n + 1, min_step, ns)
    A2, B2 = both(lambda X, LX: regrid(X, LX, jl, D2, n, ns)[0], A, LA, B, LB, ns)
    L2 = Lattice(LA.u_ref + jl * LA.step, D2, zero)
    first = xp.asarray(j == 0)
    last = xp.asarray(False)   # a shared carry: both sums (the one read is the same)
    if bit is None:
      bit, last = (t >> xp.maximum(nb - 1 - j, 0)) & 1, xp.asarray(j == nb - 1)
    An, Bn, o = _combine_level(conv, A2, B2, grow(A2), D2, n, bit, first, method,
                               last=last, ns=ns)
    LAn = Lattice(L2.u_ref, D2, xp.where(first, zero, o))
    LBn = Lattice(L2.u_ref, D2, o)
    if upper:   # log-position rounding of this level (regrid offsets, lattice origin, kernel)
      ledger = ledger + 4 * _EPS * (4.0 + xp.abs(L2.u_ref) + 2.5 * n * (LA.step + D2))
      ledger = ledger + _EPS * far_ulps(n)[1]   # far-field barycentres (far_lower)
    return An, LAn, Bn, LBn, ledger

  A = grow(law)
  carry = (A, lat, A, lat, xp.zeros(()))
  if shared:
    memo = {}

    def after(a):   # the carry after t's leading bits a, (S_a, S_{a+1}), once each
      if a not in memo:
        memo[a] = level(0, carry, 1) if a == 1 else level(1, after(a >> 1), a & 1)
      return memo[a]
    return [(c[0], c[1], c[4]) for c in map(after, [int(x) for x in t.tolist()])]
  if levels is not None and not ns.is_host:
    # a static trip count: level j is the lane's level j - (levels - nb), none before
    def static_level(j, carry):
      jj = j - (levels - nb)
      return jax.tree.map(lambda new, old: xp.where(jj >= 0, new, old),
                          level(jj, carry), carry)
    A, LA, _, _, ledger = lax.fori_loop(0, levels, static_level, carry)
    return A, LA, ledger
  A, LA, _, _, ledger = ns.fori_loop(0, nb, level, carry)
  return A, LA, ledger


def sum_law_upper(up: UpperLaw, lat: Lattice, t, n: int, tail, min_step,
                  method: str = "fast", ns=JAX, levels: int | None = None):
  """Upper (convex-order dominating) law of the t-fold sum, t >= 1 traced.

  Carries (S_a, S_{a+1}) along the binary digits of t from the top: level 0
  makes (S_1, S_2); then bit b maps a -> 2a + b with (S_{2a}, S_{2a+1}) =
  (S_a + S_a, S_a + S_{a+1}) and (S_{2a+1}, S_{2a+2}) = (S_a + S_{a+1},
  S_{a+1} + S_{a+1}). Returns (law, lattice, eta): eta bounds the accumulated log-position
  rounding error of the atoms (see pld module docstring).
  ``method`` (static): "fast" (default: near band + far field), "loop" (every
  diagonal in the loop) or "reference", the O(n^2) oracle kept for the tests
  (see :func:`_combine_level`). ``ns``: ``JAX`` (jittable) or ``HOST`` (NumPy,
  concrete input, a Python loop over the levels). ``levels`` (static int >=
  the bit length of every lane's t, or None): jitted, a loop of that many
  levels with a static trip count (a lane with fewer bits keeps its carry
  through the first ones); None: as many as the lanes' bits (a trip count
  known at run time only).
  """
  return _powering(up, lat, t, n, tail, min_step, method, ns, upper=True, levels=levels)


def sum_laws_upper(up: UpperLaw, lat: Lattice, ts, n: int, tail, min_step, ns):
  """:func:`sum_law_upper` for each t of ``ts`` on the host (``ns`` HOST or
  HOST_LOOPS), a list: the carry after t's leading bits a is (S_a, S_{a+1})
  whatever follows, so ts that share leading bits share those levels (64
  prefixes of t = 234: 133 levels, not 443). Each law bit for bit its own
  :func:`sum_law_upper`'s."""
  return _powering(up, lat, ts, n, tail, min_step, "fast", ns, upper=True, shared=True)


def sum_law_lower(lw: LowerLaw, lat: Lattice, t, n: int, tail, min_step,
                  method: str = "fast", ns=JAX, levels: int | None = None):
  """Lower (convex-order dominated, sub-probability) law of the t-fold sum.

  ``method``, ``ns``, ``levels``: as in :func:`sum_law_upper` (same values either way).
  """
  A, LA, _ = _powering(lw, lat, t, n, tail, min_step, method, ns, upper=False, levels=levels)
  return A, LA
