"""Round laws on the host: NumPy twin of :mod:`._sum_law`'s t-fold sums (private).

A concrete (scalar or small-batch) allocation question builds its 1-of-t
round laws here, in NumPy, with ZERO compiled XLA programs; arrays of many
lanes and traced input keep the jitted kernels (:mod:`._pld_laws`). The
constructions are the same, step for step.

Derivations and sources: docs/bounds/allocation_pld.md ("Bounds and proofs /
Random allocation: the tight PLD").
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from jaxacct._core.namespace import HOST
from jaxacct.allocation import _lower_coarse as lc
from jaxacct.allocation._regrid import (new_step, regrid_lower, regrid_upper, tables,
                                        window_lower, window_upper)
from jaxacct.allocation._far_field import band_limits, far_lower, far_ulps, far_upper
from jaxacct.allocation._sum_law import Lattice, LowerLaw, UpperLaw, out_size

_EPS = float(np.finfo(np.float64).eps)


_BLOCK = 128   # diagonals per block of the (rows, L + 1) weight arrays


@functools.lru_cache(maxsize=8)
def _layout(n: int):
  """Static layout of the flattened pair weights of an n-knot sum.

  Blocks of diagonals ``[d0, d1)`` (pairs ``(i, i + d)``, ``i < L = n - d0``;
  the rest of a row is zero padding) are laid out as (rows, i), i = 0..L, the
  weights of diagonal d at output element ``start_d + i``, ``start_d = d +
  kappa(d) - o``, as the jitted loop body adds them in its one slice update per
  diagonal: upper, pair i's part on knot j and (a second array) on knot j + 1;
  lower, the part of pair i that stays in the cell plus the part of pair i - 1
  that moves one cell up. ``np.bincount`` adds its weights in array order, so
  each output element receives its terms one diagonal after another, in the
  jitted loop's order, hence the same sums. Returns ``(blocks, static, counts)``:
  ``[(d0, d1, L, offset)]``, the index without ``kappa(d) - o`` and the number of
  entries of each diagonal."""
  blocks, static, counts, off = [], [], [], 0
  for d0 in range(0, n, _BLOCK):
    d1, L = min(d0 + _BLOCK, n), n - d0
    d = np.arange(d0, d1)
    static.append((d[:, None] + np.arange(L + 1)[None, :]).ravel())
    counts.append(np.full(d1 - d0, L + 1))
    blocks.append((d0, d1, L, off))
    off += (L + 1) * (d1 - d0)
  static = np.concatenate(static)
  static.flags.writeable = False
  return blocks, static, np.concatenate(counts), off


def _index(kap, o, n, band):
  """Output index of every flattened weight of the diagonals d < band (blocks
  are laid out one after another, so those weights are a prefix of the
  layout); returns ``(blocks, index, length)``, blocks cut at ``band``."""
  blocks, static, counts, _ = _layout(n)
  cut, size = [], 0
  for d0, d1, L, off in blocks:
    if d0 >= band:
      break
    d1 = min(d1, band)
    cut.append((d0, d1, L, off))
    size = off + (L + 1) * (d1 - d0)
  return cut, static[:size] + np.repeat(kap[:band].astype(np.int64) - o, counts[:band]), size


def _combine(out, stay, move):
  """``out[:, i] = stay[:, i] + move[:, i - 1]`` (i = 0..L; a zero past either
  end): a diagonal's weights per output cell, as the jitted body adds them."""
  L = stay.shape[1]
  out[:, :L] = stay
  out[:, L] = 0.0
  out[:, 1:] += move
  return out


def _shifted(x, n, fill, d0, d1, L):
  """(d1 - d0, L) view: row d is ``x[d:d + L]`` (x padded with ``fill`` past n)."""
  xp = np.concatenate([x[:n], np.full(n, fill)])
  return sliding_window_view(xp, L)[d0:d1]


def _finish_upper(P, R, res, D, n, o):
  """Zero-atom cross terms of ``P + R`` (as :func:`._sum_law.conv_upper`'s finish)."""
  i = np.arange(n)
  inside = i >= o
  w0 = np.exp(np.minimum(i - o, 0) * D)
  zero_part = P.q0 * R.p[:n] + R.q0 * P.p[:n]
  res[(i - o)[inside]] += zero_part[inside]
  res[0] += np.sum(np.where(inside, 0.0, zero_part * w0))
  q0 = P.q0 * R.q0 + np.sum(np.where(inside, 0.0, zero_part * (1.0 - w0)))
  return UpperLaw(res, q0, P.minf + R.minf)


def conv_upper_host(pairs, D, n: int, far: bool = True):
  """NumPy twin of :func:`._sum_law.conv_upper` / ``conv_upper_pair``: the sums
  ``P + R`` of ``pairs`` ``[(P, R, symmetric)]`` (same split, same order per
  output cell: the near band's diagonals, then the far field, then the zero
  atoms); returns ``([sums], o)``."""
  kap, om = tables(D, n, HOST)
  o = int(kap[n - 1])
  m = out_size(n)
  band = int(band_limits(kap, om, n, HOST)[0]) if far else n
  blocks, idx, total = _index(kap, o, n, band)
  ww = np.stack([1.0 - om, om], axis=1)[:, :, None]          # (n, 2, 1)
  ww2 = ww * np.where(np.arange(n) > 0, 2.0, 1.0)[:, None, None]   # exact doubling
  sums = []
  for P, R, sym in pairs:
    flat, flat1 = np.empty(total), np.empty(total)
    for d0, d1, L, off in blocks:
      v = P.p[None, :L] * _shifted(R.p, n, 0.0, d0, d1, L)
      if not sym:
        first = 1 if d0 == 0 else 0
        v[first:] += _shifted(P.p, n, 0.0, d0, d1, L)[first:] * R.p[None, :L]
      w = (ww2 if sym else ww)[d0:d1]
      for f, part in ((flat, 0), (flat1, 1)):   # knot j / knot j + 1, at element j
        blk = f[off:off + (L + 1) * (d1 - d0)].reshape(-1, L + 1)
        blk[:, :L] = v * w[:, part]
        blk[:, L] = 0.0
    # the two parts summed apart, then added one knot apart (the jitted complex row)
    r0, r1 = (np.bincount(idx, f[:total], minlength=m)[:m] for f in (flat, flat1))
    res = r0 + np.concatenate([np.zeros(1), r1[:-1]])
    if band < n:   # far field (o = 0): as _sum_law._upper_parts' finish
      c0, c1 = far_upper(P.p, R.p, D, band, n, HOST)
      if sym:
        c0, c1 = 2.0 * c0, 2.0 * c1
      else:
        e0, e1 = far_upper(R.p, P.p, D, band, n, HOST)
        c0, c1 = c0 + e0, c1 + e1
      res[:n] += c0
      res[1:n + 1] += c1
    sums.append(_finish_upper(P, R, res, D, n, o))
  return sums, o


def _split_into(wa, wg, mass, s_rel, rk, eD, rkm, emD):
  """Barycentric cell of each pair: mass and moment (units of the target cell's
  left knot) into part 0 (cell start_d + i) or part 1 (the next cell)."""
  up = s_rel >= (rk * eD)[:, None]
  f = s_rel * rkm[:, None]   # as the jitted split: times e^{-kD} (rkm), e^{-D} (emD)
  np.multiply(mass, ~up, out=wa[:, 0])
  np.multiply(mass, up, out=wa[:, 1])
  np.multiply(wa[:, 0], f, out=wg[:, 0])
  np.multiply(wa[:, 1], f, out=wg[:, 1])
  wg[:, 1] *= emD


def _lower_exact(pairs, D, n: int, far: bool = True):
  """NumPy twin of the fine lower kernel of :func:`._sum_law.conv_lower_pair`
  (``([P + R], o)``, same barycentric cells, same order per output cell; the
  far field grouped per high cell as :func:`._far_field.far_lower`)."""
  kap, om = tables(D, n, HOST)
  o = int(kap[n - 1])
  m = out_size(n)
  band = int(band_limits(kap, om, n, HOST)[1]) if far else n
  blocks, idx, total = _index(kap, o, n, band)
  fr = lambda X: np.where(X.a > 0, X.g / np.where(X.a > 0, X.a, 1.0), 1.0)
  eD, emD = np.exp(D), np.exp(-D)
  d = np.arange(n)
  rd_all = np.exp(-d * D)[:, None]
  rk_all, rkm_all = np.exp(kap * D), np.exp(-kap * D)
  i = np.arange(n)
  keep = i >= o
  sums = []
  for P, R, sym in pairs:
    fp, fq = fr(P), fr(R)
    fa, fg = np.empty(total), np.empty(total)
    for d0, d1, L, off in blocks:
      rows = d1 - d0
      ca = fa[off:off + (L + 1) * rows].reshape(rows, L + 1)
      cg = fg[off:off + (L + 1) * rows].reshape(rows, L + 1)
      rd, rk, rkm = rd_all[d0:d1], rk_all[d0:d1], rkm_all[d0:d1]
      wa, wg = np.empty((rows, 2, L)), np.empty((rows, 2, L))
      _split_into(wa, wg, P.a[None, :L] * _shifted(R.a, n, 0.0, d0, d1, L),
                  _shifted(fq, n, 1.0, d0, d1, L) + fp[None, :L] * rd, rk, eD, rkm, emD)
      _combine(ca, wa[:, 0], wa[:, 1])
      _combine(cg, wg[:, 0], wg[:, 1])
      first = 1 if d0 == 0 else 0
      if sym:
        ca[first:] *= 2.0
        cg[first:] *= 2.0
      else:
        _split_into(wa, wg, _shifted(P.a, n, 0.0, d0, d1, L) * R.a[None, :L],
                    _shifted(fp, n, 1.0, d0, d1, L) + fq[None, :L] * rd, rk, eD, rkm, emD)
        ca[first:] += _combine(np.empty_like(ca), wa[:, 0], wa[:, 1])[first:]
        cg[first:] += _combine(np.empty_like(cg), wg[:, 0], wg[:, 1])[first:]
    outa, outg = (np.bincount(idx, w[:total], minlength=m + 1)[:m] for w in (fa, fg))
    if band < n:   # far field (o = 0): as _sum_law._lower_parts' finish
      c = far_lower(P, R, D, band, n, HOST)
      if sym:
        c = tuple(2.0 * x for x in c)
      else:
        c = tuple(x + y for x, y in zip(c, far_lower(R, P, D, band, n, HOST)))
      outa[:n] += c[0]
      outa[1:n + 1] += c[2]
      outg[:n] += c[1]
      outg[1:n + 1] += c[3]
    outa[(i - o)[keep]] += (P.q0 * R.a[:n] + R.q0 * P.a[:n])[keep]
    outg[(i - o)[keep]] += (P.q0 * R.g[:n] + R.q0 * P.g[:n])[keep]
    sums.append(LowerLaw(outa, outg, P.q0 * R.q0))
  return sums, o


def conv_lower_host(pairs, D, n: int, coarsen: int | None = None):
  """NumPy twin of :func:`._sum_law.conv_lower` / ``conv_lower_pair`` (the coarse
  lower of :mod:`._lower_coarse` included): ``([sums], o)``."""
  return lc.coarse_sums(_lower_exact, pairs, D, n, out_size(n), coarsen, ns=HOST)


def _level_sums(conv, A2, B2, A2m, D2, n, bit, first, last=False):
  """(A_next, B_next, o) of one level (see :func:`._sum_law._combine_level`):
  ``X + X`` (X = A2 or B2 by the bit) and ``A2 + B2`` in one pass; only the
  sum that is used at the first level (``X + X``) and at the last (the one
  returned as A; B_next is then None)."""
  X = B2 if bit else A2
  if first:        # (S_1, S_2): A + B is not used
    if last:       # t = 1
      return A2m, None, 0
    (C0,), o = conv([(X, X, True)], D2, n)
    return A2m, C0, o
  if last:
    (C,), o = conv([(A2, B2, False)] if bit else [(X, X, True)], D2, n)
    return C, None, o
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
    A, B, o = _level_sums(conv, A2, B2, grow(A2), D2, n, bit, first, last=j == nb - 1)
    # log-position rounding of this level (as in _sum_law.sum_law_upper)
    ledger = ledger + 4 * _EPS * (4.0 + np.abs(u0) + 2.5 * n * (LA.step + D2))
    ledger = ledger + _EPS * far_ulps(n)[1]   # far-field barycentres (far_lower)
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
