"""Round laws on the host: NumPy twin of :mod:`._sum_law`'s t-fold sums (private).

A concrete (scalar or small-batch) allocation question builds its 1-of-t
round laws here, in NumPy, with ZERO compiled XLA programs; arrays of many
lanes and traced input keep the jitted kernels (:mod:`._pld_laws`). The
constructions are the same, step for step:

* windows, re-grids and the pair tables are the same text as the jitted
  path's (:mod:`._regrid`, evaluated with ``ns = HOST``), and so are the
  coarsen/refine steps of the coarse lower (:mod:`._lower_coarse`);
* the level logic (binary powering along the bits of t, ``(S_a, S_{a+1})``
  carried, the float ledger ``eta``) mirrors :func:`._sum_law.sum_law_upper`
  and :func:`._sum_law.sum_law_lower` line by line, in Python control flow;
* the O(n^2) pairwise sums keep the mean-preserving split (upper) and the
  barycentric cell rule (lower) of :func:`._sum_law.conv_upper` and
  :func:`._sum_law.conv_lower`: their per-diagonal products are formed at once
  as (n, n) arrays (row d: the pairs (i, i + d)), and the rows are accumulated
  into the output one diagonal after another, in the jitted loop's order.

So each output cell receives the same terms in the same order as in the
jitted loop, and the laws agree to rounding: the libraries' ``exp``/``log``
differ by about an ulp and XLA may contract a product and a sum into one
fused multiply-add (~1e-15 relative, as between the jitted "fast" and
"reference" methods). Validity does not depend on the evaluator: every mass
is a sum of non-negative products (relative error, inside ``rel``) and every
position is rounded within the ``eta`` allowance of the float ledger
(:mod:`jaxacct.allocation.pld`). tests/test_allocation_laws_host.py compares
the two paths.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from jaxacct._core.namespace import HOST
from jaxacct.allocation import _lower_coarse as lc
from jaxacct.allocation._regrid import (new_step, regrid_lower, regrid_upper, tables,
                                        window_lower, window_upper)
from jaxacct.allocation._sum_law import Lattice, LowerLaw, UpperLaw, out_size

_EPS = float(np.finfo(np.float64).eps)


_BLOCK = 128   # diagonals per block of the (rows, n) product arrays


def _blocks(n: int):
  """Diagonal blocks [d0, d1): their pairs (i, i + d) have i < n - d0."""
  return [(d0, min(d0 + _BLOCK, n)) for d0 in range(0, n, _BLOCK)]


def _shifted(x, n, fill, d0, d1, L):
  """(d1 - d0, L) array: row d is ``x[d:d + L]`` (x padded with ``fill`` past n)."""
  xp = np.concatenate([x[:n], np.full(n, fill)])
  return sliding_window_view(xp, L)[d0:d1]


def _accumulate(out, w0, w1, start, nz, d0):
  """out[:, start_d + i] += w0[:, d, i], then out[:, start_d + i + 1] += w1[:, d, i],
  one diagonal d after another (the jitted loop's order, per output cell);
  row d has ``nz[d]`` possibly non-zero leading entries (the rest: zero padding)."""
  for r in range(w0.shape[1]):
    L = nz[d0 + r]
    if L > 0:
      s = start[d0 + r]
      out[:, s:s + L] += w0[:, r, :L]
      out[:, s + 1:s + L + 1] += w1[:, r, :L]


def _support(laws, n, field):
  """Per diagonal d: how many leading i may give a non-zero pair (i, i + d)."""
  x = np.zeros(n)
  for L in laws:
    x = np.maximum(x, np.abs(getattr(L, field)[:n]))
  nzi = np.flatnonzero(x)   # NaN counts as non-zero
  top = int(nzi[-1]) + 1 if nzi.size else 0
  return np.clip(top - np.arange(n), 0, n - np.arange(n)).tolist()


def conv_upper_host(pairs, D, n: int):
  """NumPy twin of :func:`._sum_law.conv_upper` / ``conv_upper_pair``: the sums
  ``P + R`` of ``pairs`` ``[(P, R, symmetric)]`` (same split, same order per
  output cell) in one pass over the diagonals; returns ``([sums], o)``."""
  kap, om = tables(D, n, HOST)
  o = int(kap[n - 1])
  m = out_size(n)
  buf = 3 * n + 4
  k = len(pairs)
  start = (np.arange(n) + kap - o).tolist()
  nz = _support([L for P, R, _ in pairs for L in (P, R)], n, "p")
  out = np.zeros((k, buf + 1))
  for d0, d1 in _blocks(n):
    L = n - d0
    v = np.empty((k, d1 - d0, L))
    for j, (P, R, sym) in enumerate(pairs):
      v[j] = P.p[None, :L] * _shifted(R.p, n, 0.0, d0, d1, L)
      first = 1 if d0 == 0 else 0
      if sym:
        v[j, first:] *= 2.0
      else:
        v[j, first:] += _shifted(P.p, n, 0.0, d0, d1, L)[first:] * R.p[None, :L]
    w = om[None, d0:d1, None]
    _accumulate(out, v * (1.0 - w), v * w, start, nz, d0)
  sums = []
  i = np.arange(n)
  inside = i >= o
  w0 = np.exp(np.minimum(i - o, 0) * D)
  for j, (P, R, _) in enumerate(pairs):
    res = out[j, :m].copy()
    zero_part = P.q0 * R.p[:n] + R.q0 * P.p[:n]
    res[(i - o)[inside]] += zero_part[inside]
    res[0] += np.sum(np.where(inside, 0.0, zero_part * w0))
    q0 = P.q0 * R.q0 + np.sum(np.where(inside, 0.0, zero_part * (1.0 - w0)))
    sums.append(UpperLaw(res, q0, P.minf + R.minf))
  return sums, o


def _split(mass, s_rel, rk, eD):
  up = s_rel >= (rk * eD)[:, None]
  f = s_rel / rk[:, None]
  m0 = np.where(up, 0.0, mass)
  m1 = np.where(up, mass, 0.0)
  return m0, m0 * f, m1, m1 * f / eD


def _lower_exact(pairs, D, n: int):
  """NumPy twin of the fine lower kernel of :func:`._sum_law.conv_lower_pair`
  (``([P + R], o)``, same barycentric cells, same order per output cell)."""
  kap, _ = tables(D, n, HOST)
  o = int(kap[n - 1])
  m = out_size(n)
  buf = 3 * n + 4
  k = len(pairs)
  fr = lambda X: np.where(X.a > 0, X.g / np.where(X.a > 0, X.a, 1.0), 1.0)
  fs = [(fr(P), fr(R)) for P, R, _ in pairs]
  eD = np.exp(D)
  d = np.arange(n)
  rd_all = np.exp(-d * D)
  rk_all = np.exp(kap * D)
  start = (d + kap - o).tolist()
  nz = _support([L for P, R, _ in pairs for L in (P, R)], n, "a")
  out = np.zeros((2 * k, buf + 1))     # rows: a of sum 0, g of sum 0, a of sum 1, ...
  for d0, d1 in _blocks(n):
    L = n - d0
    rd, rk = rd_all[d0:d1, None], rk_all[d0:d1]
    w0 = np.empty((2 * k, d1 - d0, L))
    w1 = np.empty((2 * k, d1 - d0, L))
    first = 1 if d0 == 0 else 0
    for j, ((P, R, sym), (fp, fq)) in enumerate(zip(pairs, fs)):
      m0, g0, m1, g1 = _split(P.a[None, :L] * _shifted(R.a, n, 0.0, d0, d1, L),
                              _shifted(fq, n, 1.0, d0, d1, L) + fp[None, :L] * rd, rk, eD)
      if sym:
        for x in (m0, g0, m1, g1):
          x[first:] *= 2.0
      else:
        n0, h0, n1, h1 = _split(_shifted(P.a, n, 0.0, d0, d1, L) * R.a[None, :L],
                                _shifted(fp, n, 1.0, d0, d1, L) + fq[None, :L] * rd, rk, eD)
        for x, y in ((m0, n0), (g0, h0), (m1, n1), (g1, h1)):
          x[first:] += y[first:]
      w0[2 * j], w0[2 * j + 1], w1[2 * j], w1[2 * j + 1] = m0, g0, m1, g1
    _accumulate(out, w0, w1, start, nz, d0)
  sums = []
  i = np.arange(n)
  keep = i >= o
  for j, (P, R, _) in enumerate(pairs):
    outa, outg = out[2 * j, :m].copy(), out[2 * j + 1, :m].copy()
    outa[(i - o)[keep]] += (P.q0 * R.a[:n] + R.q0 * P.a[:n])[keep]
    outg[(i - o)[keep]] += (P.q0 * R.g[:n] + R.q0 * P.g[:n])[keep]
    sums.append(LowerLaw(outa, outg, P.q0 * R.q0))
  return sums, o


def conv_lower_host(pairs, D, n: int, coarsen: int | None = None):
  """NumPy twin of :func:`._sum_law.conv_lower` / ``conv_lower_pair`` (the coarse
  lower of :mod:`._lower_coarse` included): ``([sums], o)``."""
  return lc.coarse_sums(_lower_exact, pairs, D, n, out_size(n), coarsen, ns=HOST)


def _level_sums(conv, A2, B2, A2m, D2, n, bit, first):
  """(A_next, B_next, o) of one level (see :func:`._sum_law._combine_level`):
  ``X + X`` (X = A2 or B2 by the bit) and ``A2 + B2`` in one pass."""
  X = B2 if bit else A2
  if first:        # (S_1, S_2): A + B is not used
    (C0,), o = conv([(X, X, True)], D2, n)
    return A2m, C0, o
  (C0, C1), o = conv([(X, X, True), (A2, B2, False)], D2, n)
  return (C1, C0, o) if bit else (C0, C1, o)


def _powering(law, lat, t, n, tail, min_step, *, upper):
  t = int(t)
  nb = t.bit_length() if t > 0 else 0   # t < 1 (an invalid lane, NaN-marked later): no level
  pad = np.zeros(out_size(n) - n)
  if upper:
    grow = lambda L: UpperLaw(np.concatenate([L.p, pad]), L.q0, L.minf)
    win, regrid, conv = window_upper, regrid_upper, conv_upper_host
  else:
    grow = lambda L: LowerLaw(np.concatenate([L.a, pad]), np.concatenate([L.g, pad]), L.q0)
    win, regrid, conv = window_lower, regrid_lower, conv_lower_host
  A = B = grow(law)
  LA = LB = lat
  ledger = 0.0
  for j in range(nb):
    (la, ra), (lb, rb) = win(A, LA, tail, HOST), win(B, LB, tail, HOST)
    jl, jr = min(la, lb), max(ra, rb)
    if upper:
      D2 = new_step(jl, jr, LA.step, n, min_step, HOST)
    else:   # n cells cover old cells jl..jr whole (see _sum_law.sum_law_lower)
      D2 = new_step(jl, jr + 1, LA.step, n + 1, min_step, HOST)
    A2 = regrid(A, LA, jl, D2, n, HOST)[0]
    B2 = regrid(B, LB, jl, D2, n, HOST)[0]
    u0 = LA.u_ref + jl * LA.step
    bit = (t >> max(nb - 1 - j, 0)) & 1
    first = j == 0
    A, B, o = _level_sums(conv, A2, B2, grow(A2), D2, n, bit, first)
    # log-position rounding of this level (as in _sum_law.sum_law_upper)
    ledger = ledger + 4 * _EPS * (4.0 + np.abs(u0) + 2.5 * n * (LA.step + D2))
    LA = Lattice(u0, D2, 0 if first else o)
    LB = Lattice(u0, D2, o)
  return A, LA, ledger


def sum_law_upper_host(up: UpperLaw, lat: Lattice, t: int, n: int, tail, min_step=0.0):
  """NumPy twin of :func:`._sum_law.sum_law_upper`: ``(law, lattice, eta)``."""
  return _powering(up, lat, t, n, tail, min_step, upper=True)


def sum_law_lower_host(lw: LowerLaw, lat: Lattice, t: int, n: int, tail, min_step=0.0):
  """NumPy twin of :func:`._sum_law.sum_law_lower`: ``(law, lattice)``."""
  A, LA, _ = _powering(lw, lat, t, n, tail, min_step, upper=False)
  return A, LA
