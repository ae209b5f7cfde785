r"""Epsilon after every count of one repeated event: powers of one spectrum.

``f * p^{*n}`` (n repetitions of a PLD ``p`` composed onto an optional ``f``)
has spectrum ``F Z^n``: :func:`direction_epsilons` evaluates a list of counts as
batched, Esscher-tilted inverse FFTs in canonical blocks, with the window and
tail charges of :func:`jaxacct.pld.compose_many`; a count's epsilon is the same
number alone (the accountant) or in a table. Window, tilt, fold bound and
accuracy: docs/bounds/tracking.md, "The repeated-event engine".

Bound: upper, as the accountant's FFT composition (pessimistic PLDs in,
every tail charged), up to float64 round-off.
"""

from __future__ import annotations

import math

import numpy as np

from jaxacct._core.batching import device_memory_bytes
from jaxacct._core.checks import WindowTooLarge
from jaxacct._core.namespace import host_call
from jaxacct._core.parallel import cores, host_map
from jaxacct.pld._host_law import law
from jaxacct.pld._core import fast_len
from jaxacct.pld._windows import LAMBDAS, Powers
from jaxacct.pld._query import (ROUNDING_ALLOWANCE, delta_core, epsilon_core,
                                epsilon_on_atoms)
from jaxacct.pld._workspace import release, scratch

_ROWS = 32        # counts per chunk (rows of one batched inverse FFT; 32 stay in cache)
_SINGLE = 2       # counts up to this one are blocks of their own (:func:`_block_of`)
# Tilts tried per chunk (every other Chernoff order below the saddle point, and 0),
# and the orders of the fold bounds' first pass (:func:`_fold` refines between them).
_TILTS = 6
_MU_STEP = 4
_MU = LAMBDAS[::_MU_STEP]
# Largest folded tilted mass (untilted, relative to delta) on the points the query reads.
_FOLD = 1e-12
# Round-off estimate (relative, in delta) above which a longer FFT is tried for a
# steeper tilt. The estimate adds the errors coherently; measured errors are about
# 1e-6 of it (Poisson, delta 1e-5 to 1e-10), so this keeps them near 1e-11.
_ROUND = 1e-5
# Epsilons round up by this: the FFT round-off (4.4e-13 relative measured), over epsilon's.
_ALLOWANCE = 10 * ROUNDING_ALLOWANCE
# Points per block of the query's block sums.
_BLOCK = 256
# An epsilon over 700 nats above the first point read overflows the query: read again
# from ``_REREAD`` nats below the Chernoff bound, lower each time (:func:`_estimate`).
_REREAD, _REREADS = 400.0, 8


def window_fits(pld, count, *, tail_mass=1e-20) -> bool:
  """Whether :func:`direction_epsilons` / :func:`direction_delta` run ``count``
  repetitions of ``pld`` (every count of its canonical block) within ``MAX_WINDOW``
  (host, a few log-MGFs: nothing composed)."""
  first, width = _block_of(count)
  try:
    Powers(law(pld), None, np.array([first + width - 1], np.int64), tail_mass)
  except WindowTooLarge:
    return False
  return True


def _side_by_side(base, factor, counts, tail_mass) -> bool:
  """Whether two threads may each hold a block's buffers (:func:`_buffers`) at four
  natural windows of the largest count (the most the tilt search grows to), both within
  a quarter of ``device_memory_bytes``. A refused window runs (and is refused) on one."""
  if cores() < 2 or not np.size(counts):
    return False
  try:
    size = 4 * int(Powers(base, factor, np.asarray(counts, np.int64)[-1:], tail_mass).natural[0])
  except WindowTooLarge:
    return False
  # per thread: spectra, values and the read range (:mod:`._workspace`)
  return 2 * _ROWS * ((size // 2 + 1) * 16 + 2 * size * 8) <= 0.25 * device_memory_bytes()


def _fold(pair, rows, lams, from_idx, limit):
  """log Chernoff bound on the tilted mass at relative index >= ``from_idx``, (B, L):
  least over ``_MU``; for a tilt over ``limit`` there, also over the ``LAMBDAS`` between
  the best one's neighbours (convex in the order: the least over all of them)."""
  k_lam = pair.kn(lams, rows)                                       # (B, L)
  x = from_idx[:, None, None] * pair.h
  k_mu = pair.kn((lams[:, None] + _MU[None, :]).ravel(), rows).reshape(k_lam.shape + _MU.shape)
  coarse = k_mu - k_lam[:, :, None] - _MU[None, None, :] * x       # (B, L, M)
  out = np.min(coarse, axis=2)
  redo = np.flatnonzero(np.any(out > limit, axis=0))
  if redo.size:
    best = np.argmin(coarse[:, redo], axis=2)
    near = [np.unique(np.clip(_MU_STEP * best[:, i, None] + np.arange(1 - _MU_STEP, _MU_STEP),
                              0, LAMBDAS.size - 1)) for i in range(redo.size)]
    tilt = np.repeat(redo, [n.size for n in near])
    mu = LAMBDAS[np.concatenate(near)]
    fine = pair.kn(lams[tilt] + mu, rows) - k_lam[:, tilt] - mu[None, :] * x[:, :, 0]
    starts = np.concatenate([[0], np.cumsum([n.size for n in near])[:-1]])
    out[:, redo] = np.minimum(out[:, redo], np.minimum.reduceat(fine, starts, axis=1))
  return np.minimum(out, 0.0)


def _first_read(pair, rows, size, floor):
  """First relative index the query reads: one point below ``floor`` (a loss), in the window."""
  m = pair.start(rows, size)
  return np.clip(np.floor(floor / pair.h) - pair.shift[rows] - 1, m, m + size - 1).astype(
      np.int64)


def _least_folded(pair, rows, lams, log_u, score, from_idx, lim, done):
  """The tilt of least ``score`` whose fold bound is <= ``lim`` for every count (bounds
  computed only until one passes; with ``done``, the support in the window, all do)."""
  for l in np.argsort(score, kind="stable"):
    if done or np.all(_fold(pair, rows, lams[l:l + 1], from_idx, lim - log_u[:, l:l + 1])
                      + log_u[:, l:l + 1] <= lim):
      return int(l)
  return None


def _tilt_and_size(pair, rows, size, floor, delta, at=None, grow=4):
  """The tilt and FFT length of a chunk: over the tilts from 0 to the saddle
  point at ``at`` (default ``floor``; at most), the one with the least round-off estimate
  ``U(first) / (1 - e^{-lam h})`` (``U`` the untilting factor, the read points'
  sum of a unit error) among those whose folded tilted mass, untilted, is at
  most ``_FOLD * delta`` (a Chernoff bound) for every count; the length is
  raised until one is."""
  h, start_size = pair.h, size
  last = np.arange(pair.counts.size)[rows][-1]
  lams = np.concatenate([[0.0], LAMBDAS])
  x = max(floor if at is None else at, 0.0) - pair.shift[last] * h
  k_last = pair.kn(lams, slice(last, last + 1))[0]
  top = int(np.argmin(k_last - lams * x))                         # the saddle point
  lams = lams[np.unique(np.concatenate([[0], np.arange(top, 0, -2)[:_TILTS]]))]
  lim = math.log(_FOLD * delta)
  while True:
    first = _first_read(pair, rows, size, floor)
    log_u = pair.kn(lams, rows) - lams[None, :] * (first[:, None] * h)   # (B, L)
    done = np.all(pair.start(rows, size) + size - 1 >= pair.max_idx[rows])
    score = np.max(log_u, axis=0) - np.log(-np.expm1(-np.maximum(lams, 1e-300) * h))
    best = _least_folded(pair, rows, lams, log_u, score, first + size, lim, done)
    if best is not None:
      # relative round-off estimate in delta: count * u per point, untilted, summed
      est = float(pair.counts[last]) * 2.2e-16 * math.exp(min(score[best], 700.0)) / delta
      if best == len(lams) - 1 or est <= _ROUND or done or size >= grow * start_size:
        return float(lams[best]), size
    if size >= (1 << 24):
      return 0.0, size
    size = fast_len(size + 1)


def _round_off(pair, rows, size, lam, floor, delta):
  """Each row's relative round-off estimate in delta at tilt ``lam`` and FFT length
  ``size`` (the estimate :func:`_tilt_and_size` tries to keep under ``_ROUND`` for
  the chunk's worst row; here per row)."""
  first = _first_read(pair, rows, size, floor)
  log_u = pair.kn(np.array([lam]), rows)[:, 0] - lam * (first * pair.h)
  score = log_u - math.log(-math.expm1(-max(lam, 1e-300) * pair.h))
  with np.errstate(over="ignore"):   # an estimate past float64's range reads inf
    return pair.counts[rows] * 2.2e-16 * np.exp(np.minimum(score, 700.0)) / delta


def _own_tilt_helps(pair, rows, out, est, lam, delta):
  """Rows worth a :func:`_retilt` (the rest cost one batch of log-MGFs, not a tilt
  search each): estimate ``est`` over ``_ROUND``, the chunk's tilt ``lam`` under
  half the row's own saddle point (read from just below its answer ``out``), and
  the row's least estimate over the tilts up to that point (the tilt and length
  :func:`_retilt` picks can only do worse) under a quarter of ``est``."""
  want = (est > _ROUND) & np.isfinite(out) & (out > 0.0)
  if not np.any(want):
    return want
  lams = np.concatenate([[0.0], LAMBDAS])
  floors = (1.0 - 1e-3) * np.where(want, out, 0.0)
  first = np.maximum(np.floor(floors / pair.h) - pair.shift[rows] - 1,
                     pair.start(rows, 4 * int(np.max(pair.natural[rows]))))
  k = pair.kn(lams, rows)
  # the tilts :func:`_tilt_and_size` tries: 0 up to the saddle point at the floor
  top = np.argmin(k - lams[None, :] * (floors - pair.shift[rows] * pair.h)[:, None], axis=1)
  score = (k - lams[None, :] * (first[:, None] * pair.h)
           - np.log(-np.expm1(-np.maximum(lams, 1e-300) * pair.h))[None, :])
  score = np.where(np.arange(lams.size)[None, :] <= top[:, None], score, np.inf)
  with np.errstate(over="ignore"):
    least = pair.counts[rows] * 2.2e-16 * np.exp(np.minimum(np.min(score, axis=1), 700.0)) / delta
  return want & (least < 0.25 * est) & (lam < 0.5 * lams[top])


def _retilt(out, est, one, delta):
  """A row's epsilon again, alone at its own tilt, where the chunk's shared tilt
  left its round-off estimate ``est`` over ``_ROUND`` (the chunk's tilt is chosen at
  the saddle point of its last row, far below an earlier row's when epsilon is
  large): ``one()`` is the row's one-count ``Powers``, read from just below ``out``.
  Run only where its own estimate is under a quarter of ``est``; else ``out``."""
  if not (est > _ROUND and np.isfinite(out) and out > 0.0):
    return out
  pair, rows = one(), slice(0, 1)
  floor = (1.0 - 1e-3) * float(out)
  lam, size = _tilt_and_size(pair, rows, int(pair.natural[0]), floor, delta)
  if not _round_off(pair, rows, size, lam, floor, delta)[0] < 0.25 * est:
    return out
  return float(_run_chunk(pair, rows, size, lam, delta, floor)[0])


def _solve(pair, rows, y, size, lam, first, targets, below_ok):
  """Epsilon of each count of ``rows`` from its tilted composed masses ``y`` (B, size).

  Reads the points ``first .. m + size - 1`` (untilted, clipped at zero) in
  blocks of ``_BLOCK``: block sums locate the segment where ``delta(loss)``
  crosses the target (non-increasing for non-negative masses), one block is
  summed point by point, and the segment is solved as in ``jaxacct.pld.epsilon``.
  NaN where the answer lies below ``first`` and not ``below_ok``.
  """
  h = pair.h
  m = pair.start(rows, size)
  q = int(np.max(m + size - first))
  nb = -(-q // _BLOCK)
  buf = scratch("read", len(first) * nb * _BLOCK, np.float64).reshape(len(first), -1)
  top = pair.max_idx[rows]
  for i, (f, mi) in enumerate(zip(first, m)):     # the read range, unrolled, clipped at 0
    # (points above the composed support's top hold only round-off: read as 0)
    n_read, r0 = max(int(min(mi + size, top[i] + 1) - f), 0), int(f % size)
    a = min(n_read, size - r0)
    np.maximum(y[i, r0:r0 + a], 0.0, out=buf[i, :a])
    np.maximum(y[i, :n_read - a], 0.0, out=buf[i, a:n_read])
    buf[i, n_read:] = 0.0
  t = np.arange(_BLOCK, dtype=np.float64) * h
  g = np.stack([np.exp(-lam * t), np.exp(-(lam + 1.0) * t)], axis=1)       # (B_, 2)
  flat = buf.reshape(-1, _BLOCK)
  blk = np.stack([np.einsum("ij,j->i", flat, g[:, 0]), np.einsum("ij,j->i", flat, g[:, 1])],
                 axis=1).reshape(len(first), nb, 2)
  # log of the untilting factor at each block start: K_n(lam) - lam h s
  start = first[:, None] + _BLOCK * np.arange(nb)[None, :]
  log_u = pair.kn(np.array([lam]), rows)[:, 0][:, None] - lam * h * start.astype(np.float64)
  scale0 = np.exp(np.minimum(log_u, 700.0))
  scale1 = np.exp(np.minimum(log_u, 700.0) - h * _BLOCK * np.arange(nb)[None, :])
  a0 = blk[:, :, 0] * scale0
  a1 = blk[:, :, 1] * scale1
  s0 = np.cumsum(a0[:, ::-1], axis=1)[:, ::-1]          # suffix sums from each block start
  s1 = np.cumsum(a1[:, ::-1], axis=1)[:, ::-1]
  nxt0 = np.concatenate([s0[:, 1:], np.zeros((len(first), 1))], axis=1)
  nxt1 = np.concatenate([s1[:, 1:], np.zeros((len(first), 1))], axis=1)
  # delta at each block's last point, from the atoms of the later blocks
  end = (_BLOCK * (np.arange(nb) + 1) - 1).astype(np.float64)
  with np.errstate(over="ignore", invalid="ignore"):
    d_end = nxt0 - np.exp(np.minimum(h * end, 700.0))[None, :] * nxt1
  d_end[:, -1] = 0.0
  c = np.argmax(d_end <= targets[:, None], axis=1)       # the block holding the crossing
  r = np.arange(len(first))
  pts = buf.reshape(len(first), nb, _BLOCK)[r, c]        # (B, _BLOCK)
  w0 = pts * (g[:, 0][None, :] * scale0[r, c][:, None])
  w1 = pts * (g[:, 1][None, :] * scale1[r, c][:, None])
  f0 = np.cumsum(w0[:, ::-1], axis=1)[:, ::-1] + nxt0[r, c][:, None]
  f1 = np.cumsum(w1[:, ::-1], axis=1)[:, ::-1] + nxt1[r, c][:, None]
  j = c[:, None] * _BLOCK + np.arange(_BLOCK)[None, :]   # point index from ``first``
  f0n = np.concatenate([f0[:, 1:], nxt0[r, c][:, None]], axis=1)
  f1n = np.concatenate([f1[:, 1:], nxt1[r, c][:, None]], axis=1)
  with np.errstate(over="ignore", invalid="ignore"):
    dk = f0n - np.exp(np.minimum(h * j, 700.0)) * f1n
  k = np.argmax(dk <= targets[:, None], axis=1)
  loss0 = (pair.shift[rows] + first).astype(np.float64) * h
  with np.errstate(divide="ignore", invalid="ignore"):
    eps = loss0 + np.log((f0[r, k] - targets) / f1[r, k])
  # > 700 nats above the first point read, e^(h j) is capped and f1 is subnormal or 0:
  eps = np.where((f1[r, k] < np.finfo(np.float64).tiny) | (h * j[r, k] > 700.0), np.inf, eps)
  return eps if below_ok else np.where((c == 0) & (k == 0), np.nan, eps)


def _buffers(size):
  """This thread's spectrum and value buffers for ``_ROWS`` rows at FFT length
  ``size`` (views of :func:`._workspace.scratch`'s, reused)."""
  spec = scratch("spec", _ROWS * (size // 2 + 1), np.complex128)
  return spec.reshape(_ROWS, size // 2 + 1), scratch("y", _ROWS * size,
                                                     np.float64).reshape(_ROWS, size)


def _run_chunk(pair, rows, size, lam, delta, floor, spec=None):
  """Epsilons of one chunk of counts (one direction, ``rows`` a slice): FFT
  length ``size``, tilt ``lam``, ``floor`` a loss below the chunk's epsilons."""
  h = pair.h
  m = pair.start(rows, size)
  # the mass above the window, charged to inf (as compose_many)
  gap = (m + size).astype(np.float64) * h
  tail = np.minimum(np.exp(np.min(pair.up[rows] - LAMBDAS[None, :] * gap[:, None], axis=1)),
                    1.0)
  tail = np.where(m + size - 1 >= pair.max_idx[rows], 0.0, tail)
  targets = delta - np.minimum(pair.inf[rows] + tail, 1.0)
  nrow = len(pair.counts[rows])
  buf, y = _buffers(size)
  if spec is None:
    spec = pair.spectra(rows, size, lam, buf)
  np.fft.irfft(spec[:nrow], size, axis=-1, out=y[:nrow])
  y = y[:nrow]
  first = _first_read(pair, rows, size, floor)
  out = _solve(pair, rows, y, size, lam, first, targets, below_ok=bool(np.all(first == m)))
  redo = np.flatnonzero(np.isnan(out))
  if redo.size:      # below the floor: read the whole window
    sub = np.arange(rows.start, rows.stop)[redo]
    out[redo] = _solve(pair, sub, y[redo], size, lam, m[redo], targets[redo], below_ok=True)
  out = np.where(targets <= 0, np.inf, out + _ALLOWANCE * (1.0 + np.abs(out)))
  return np.maximum(out, 0.0)


def _chernoff(pair, i, delta):
  """An upper bound on the count's epsilon (delta(eps) <= P(L > eps) <=
  e^{K(lam) - lam eps}): where the first pass tilts to (a plain FFT would leave
  only absolute accuracy at a tiny delta)."""
  k = pair.kn(LAMBDAS, slice(i, i + 1))[0]
  return float(np.min((k - math.log(delta)) / LAMBDAS)) + pair.shift[i] * pair.h


def _estimate(pair, i, delta):
  """A loss to read from, just below the count ``pair.counts[i]``'s epsilon alone: its
  natural window tilted at the Chernoff point (a second pass, tilted at this answer,
  moved no entry by more than 5.6e-16 and cost 5-20% of the time)."""
  rows, at = slice(i, i + 1), _chernoff(pair, i, delta)
  lam, size = _tilt_and_size(pair, rows, int(pair.natural[i]), 0.0, delta, at=at, grow=1)
  e = _run_chunk(pair, rows, size, lam, delta, 0.0)[0]
  # over 700 nats above the window's start, the query's e^loss overflows (inf): read
  # from below the Chernoff bound instead, lower each time
  for floor in at - _REREAD * np.arange(1, _REREADS + 1):
    if np.isfinite(e) or not 0.0 < floor < np.inf or delta <= pair.inf[i]:
      break
    lam, size = _tilt_and_size(pair, rows, int(pair.natural[i]), floor, delta, grow=1)
    e = _run_chunk(pair, rows, size, lam, delta, floor)[0]
  return (1.0 - 1e-3) * e if np.isfinite(e) else 0.0


def _block_of(n):
  """``(first count, width)`` of the canonical block holding count ``n``: counts
  1 and 2 alone, then 3-4, 5-8, 9-16 and 17-31 (each within one piece of a
  table; every row's fold and round-off are checked), then 32 consecutive
  counts aligned at multiples of 32."""
  n = int(n)
  if n <= _SINGLE:
    return n, 1
  if n < _ROWS:
    first = (1 << ((n - 1).bit_length() - 1)) + 1
    return first, min(first - 1, _ROWS - first)
  return (n // _ROWS) * _ROWS, _ROWS


def _block(base, factor, block, wanted, delta, tail_mass):
  """Epsilons of the counts ``wanted`` of the canonical block ``(first, width)``
  (:func:`_block_of`).

  Every choice (read floor, tilt, FFT length) is made from the whole block,
  never from the counts asked, and the powers run along the block from its
  first count: a count's epsilon is the same number whether it is asked
  alone or with others.
  """
  canon = np.arange(block[0], block[0] + block[1], dtype=np.int64)
  pair = Powers(base, factor, canon, tail_mass)
  floor = _estimate(pair, 0, delta)
  rows = slice(0, canon.size)
  lam, size = _tilt_and_size(pair, rows, int(np.max(pair.natural)), floor, delta)
  upto = int(np.max(wanted)) - int(canon[0]) + 1
  spec, y = _buffers(size)
  pair.spectra(slice(0, upto), size, lam, spec)
  pick = (np.asarray(wanted, np.int64) - canon[0])
  if np.array_equal(pick, np.arange(canon.size)):   # the whole block (a table): as computed
    out = _run_chunk(pair, rows, size, lam, delta, floor, spec=spec)
  else:
    sub = Powers(base, factor, canon[pick], tail_mass)
    spec[:pick.size] = spec[pick]
    out = _run_chunk(sub, slice(0, pick.size), size, lam, delta, floor, spec=spec)
  for j in np.flatnonzero(np.isinf(out) & (delta > pair.inf[pick])):
    out[j] = _alone(base, factor, canon[pick[j]], delta, tail_mass)
  est = _round_off(pair, slice(0, canon.size), size, lam, floor, delta)[pick]
  for j in np.flatnonzero(_own_tilt_helps(pair, pick, out, est, lam, delta)):
    out[j] = _retilt(out[j], est[j], lambda c=canon[pick[j]]: Powers(
        base, factor, np.array([c], np.int64), tail_mass), delta)
  return out


def _alone(base, factor, count, delta, tail_mass):
  """One count's epsilon read alone, from its own floor: where it lies over 700 nats
  above its block's floor, the block's query overflowed (inf). The same number
  whatever else is asked (an inf of the block's is)."""
  one = Powers(base, factor, np.array([count], np.int64), tail_mass)
  floor = _estimate(one, 0, delta)
  lam, size = _tilt_and_size(one, slice(0, 1), int(one.natural[0]), floor, delta)
  return _run_chunk(one, slice(0, 1), size, lam, delta, floor)[0]


def direction_epsilons(pld, counts, delta, *, factor=None, tail_mass=1e-20, split=True):
  """Epsilon at ``delta`` after each count of ``pld``, composed onto ``factor``.

  Each count's number does not depend on the other counts asked (the
  accountant asks one count, a table many; they agree to the last bit).

  Args:
    pld: pessimistic :class:`jaxacct.pld.PLD` of one repetition.
    counts: strictly increasing int array, >= 1.
    delta: in (0, 1).
    factor: None or a pessimistic PLD on the same grid step, composed once.
    tail_mass: Chernoff window tail per side (as ``compose_many``'s).
    split: spread long lists over the CPU cores (whole blocks of counts).

  Returns:
    float64 numpy array of ``counts``' shape.
  """
  counts = np.asarray(counts, np.int64)
  base, fac = law(pld), None if factor is None else law(factor)
  if fac is None and counts.size and counts[0] == 1:   # one repetition: the PLD itself
    one = np.array([_direct("epsilon", base, delta)])
    return np.concatenate([one, direction_epsilons(base, counts[1:], delta, tail_mass=tail_mass,
                                                   split=split)]) if counts.size > 1 else one
  starts = np.array([_block_of(n)[0] for n in counts.tolist()], np.int64)
  cuts = np.flatnonzero(np.diff(starts)) + 1
  groups = np.split(counts, cuts)
  ids = [_block_of(g[0]) for g in groups]

  def run(k):     # each block hands its buffers back (the next block, any thread, takes them)
    try:
      return _block(base, fac, ids[k], groups[k], delta, tail_mass)
    finally:
      release()
  try:
    if split and len(groups) >= 2 and _side_by_side(base, fac, counts, tail_mass):
      # whole blocks on the cores, each core taking the next block when it is free
      # (later blocks are longer; NumPy releases the GIL)
      return np.concatenate(host_map(run, range(len(groups))))
    return np.concatenate([run(k) for k in range(len(groups))]) if groups else np.empty(0)
  finally:
    release()


def _direct(quantity, base, value):
  """The query of :mod:`jaxacct.pld._query` on one repetition's PLD (no FFT; a
  sparse law's epsilon on its atoms)."""
  if quantity == "epsilon" and base.atoms is not None:
    return epsilon_on_atoms(base.atoms, base.p[base.atoms], base.offset, base.step,
                            base.inf, value)
  core = epsilon_core if quantity == "epsilon" else delta_core
  return float(host_call(core, base.p, np.int64(base.offset), base.step, np.float64(base.inf),
                         np.float64(value)))


def direction_delta(pld, count, epsilon, *, factor=None, tail_mass=1e-20):
  """Delta at ``epsilon`` after ``count`` repetitions of ``pld`` (onto ``factor``).

  The composed masses of :func:`direction_epsilons`'s engine (window, tail
  charges, tilt chosen at ``epsilon``), untilted on the points above one
  below ``epsilon``, and the query of :func:`jaxacct.pld.delta` on them.
  """
  if factor is None and int(count) == 1:   # one repetition: the PLD itself
    return _direct("delta", law(pld), epsilon)
  pair = Powers(law(pld), None if factor is None else law(factor),
               np.array([int(count)], np.int64), tail_mass)
  rows, h = slice(0, 1), pair.h
  guess = 0.5
  for _ in range(2):      # a first guess of delta sets the fold tolerance of the tilt
    lam, size = _tilt_and_size(pair, rows, int(pair.natural[0]), float(epsilon), guess)
    m = int(pair.start(rows, size)[0])
    gap = float(m + size) * h
    tail = 0.0 if m + size - 1 >= pair.max_idx[0] else min(
        1.0, math.exp(float(np.min(pair.up[0] - LAMBDAS * gap))))
    buf, y = _buffers(size)
    np.fft.irfft(pair.spectra(rows, size, lam, buf)[:1], size, axis=-1, out=y[:1])
    first = int(_first_read(pair, rows, size, float(epsilon))[0])
    idx = np.arange(first, min(m + size, int(pair.max_idx[0]) + 1))
    vals = np.maximum(y[0, idx % size], 0.0)
    log_u = float(pair.kn(np.array([lam]), rows)[0, 0]) - lam * h * idx.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
      masses = np.where(vals > 0, vals * np.exp(np.minimum(log_u, 700.0)), 0.0)
    inf = np.float64(min(pair.inf[0] + tail, 1.0))
    if masses.size == 0:    # no composed atom above epsilon
      release()
      return float(inf)
    out = host_call(delta_core, masses, np.int64(pair.shift[0] + first), h, inf,
                    np.float64(epsilon))
    guess = min(max(float(out), 1e-300), 0.5)
  release()
  return float(out)


def pair_epsilons(pair, counts, delta, *, factor=None, tail_mass=1e-20, every=64):
  """max over the two directions of :func:`direction_epsilons` (a ``PairPLD``).

  Count 1 alone: the PLDs' own queries. Up to ``every`` counts: both directions
  at every count. Beyond, the one larger at the last count at every count, the
  other at every ``every``-th count and the last, and in full only where it may
  be the larger: epsilon never decreases with the count, so where ``other(n_b)
  <= lead(n_a)`` (a margin far above round-off) the lead is the max on ``(n_a, n_b]``."""
  counts = np.asarray(counts, np.int64)
  if pair.remove is pair.add and (factor is None or factor.remove is factor.add):
    # a symmetric pair (one PLD both ways, e.g. a fixed-size step's): its one
    # direction is the max, the number the two-direction path gives bit for bit
    pld = law(pair.remove)
    if factor is None and counts.tolist() == [1]:
      return np.array([_direct("epsilon", pld, delta)])
    return direction_epsilons(pld, counts, delta, tail_mass=tail_mass,
                              factor=None if factor is None else law(factor.remove))
  pair = law(pair)
  if factor is None and counts.tolist() == [1]:   # no FFT, no thread
    return np.array([max(_direct("epsilon", pair.remove, delta),
                         _direct("epsilon", pair.add, delta))])
  factor = None if factor is None else law(factor)
  fac = {d: None if factor is None else getattr(factor, d) for d in ("remove", "add")}

  def run(d, c):
    return direction_epsilons(getattr(pair, d), c, delta, factor=fac[d], tail_mass=tail_mass)
  # the two directions side by side where both fit (they share nothing)
  both = host_map if _side_by_side(pair.remove, fac["remove"], counts, tail_mass) else (
      lambda f, ds: [f(d) for d in ds])
  if counts.size <= every:
    return np.maximum(*both(lambda d: run(d, counts), ("remove", "add")))
  last = dict(zip(("remove", "add"), both(lambda d: run(d, counts[-1:])[0], ("remove", "add"))))
  lead, other = ("remove", "add") if last["remove"] >= last["add"] else ("add", "remove")
  out = run(lead, counts)
  marks = np.unique(np.concatenate([np.arange(every - 1, counts.size, every),
                                    [counts.size - 1]]))
  at = run(other, counts[marks])
  starts = np.concatenate([[0], marks[:-1] + 1])
  for a, b, v in zip(starts, marks, at):
    if not v <= out[a] * (1.0 - 1e-9):
      out[a:b + 1] = np.maximum(out[a:b + 1], run(other, counts[a:b + 1]))
  return out


def column_epsilons(pld, count, factors, delta, *, tail_mass=1e-20):
  """Epsilon at ``delta`` of ``count`` repetitions of ``pld`` composed onto each of
  ``factors`` (one direction): a column of compositions that share the power.

  The factors run in chunks of ``_ROWS``, each chunk one batched inverse FFT
  with one read floor (its first factor's epsilon, estimated alone), tilt and
  FFT length (chosen over the chunk's rows as for a block of counts), and
  ``pld``'s power computed once. Each row is the composition and query of
  :func:`direction_epsilons` with that factor (the same window and tail
  charges); only those shared choices, which move round-off, differ. The
  numbers depend on the order and chunking of ``factors``, not on the time.

  ``pld``: one repetition's pessimistic PLD; ``count`` >= 1; ``factors``:
  pessimistic PLDs on its grid step (or their :func:`law`); ``delta`` in (0,
  1); ``tail_mass``: the Chernoff window's tail per side. Returns float64
  (len(factors),). Bound: upper (as :func:`direction_epsilons`).
  """
  base, facs = law(pld), [law(f) for f in factors]
  out = []
  for a in range(0, len(facs), _ROWS):
    part = facs[a:a + _ROWS]
    pair = Powers(base, part, np.full(len(part), int(count), np.int64), tail_mass)
    floor = _estimate(pair, 0, delta)
    rows = slice(0, len(part))
    lam, size = _tilt_and_size(pair, rows, int(np.max(pair.natural)), floor, delta)
    got = _run_chunk(pair, rows, size, lam, delta, floor)
    for j in np.flatnonzero(np.isinf(got) & (delta > pair.inf)):   # as a block's counts
      got[j] = _alone(base, [part[j]], int(count), delta, tail_mass)
    est = _round_off(pair, rows, size, lam, floor, delta)
    for j in np.flatnonzero(_own_tilt_helps(pair, rows, got, est, lam, delta)):
      got[j] = _retilt(got[j], est[j], lambda f=part[j]: Powers(
          base, [f], np.array([int(count)], np.int64), tail_mass), delta)
    out.append(got)
  release()
  return np.concatenate(out) if out else np.empty(0)


def pair_column_epsilons(pair, count, factors, delta, *, tail_mass=1e-20):
  """max over the two directions of :func:`column_epsilons` (a ``PairPLD`` and
  ``PairPLD`` factors); the two directions and the chunks on the cores."""
  pair = law(pair)
  facs = [law(f) for f in factors]
  jobs = [(d, a) for d in ("remove", "add") for a in range(0, len(facs), _ROWS)]

  def run(job):
    d, a = job
    return column_epsilons(getattr(pair, d), count, [getattr(f, d) for f in facs[a:a + _ROWS]],
                           delta, tail_mass=tail_mass)
  wide = facs and not _side_by_side(pair.remove, facs[-1].remove, [int(count)], tail_mass)
  outs = dict(zip(jobs, [run(j) for j in jobs] if wide else host_map(run, jobs)))
  side = {d: np.concatenate([outs[d, a] for dd, a in jobs if dd == d]) if facs else np.empty(0)
          for d in ("remove", "add")}
  return np.maximum(side["remove"], side["add"])
