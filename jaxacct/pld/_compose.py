r"""FFT composition of PLDs, with exponential tilts against round-off.

See :func:`compose_many` for the method and its error control,
:mod:`jaxacct._core.tilted_fft` for the engine (rings, powers, tilts, the
per-point pick) shared with the allocation composition, and
:mod:`jaxacct.pld._core` for the representation.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax.numpy as jnp
import numpy as np

from jaxacct._core import batching, checks, tilted_fft, window_cells
from jaxacct._core.dtype import dispatch, host_scalar, require_x64, static_size
from jaxacct._core.namespace import JAX, host_call, kernel_arg
from jaxacct.pld._core import DEFAULT_TAIL_MASS, PLD, device_array, fast_len
from jaxacct._core.compiled import jit
from jaxacct.pld._windows import LAMBDAS

#: The longest window composed on the host (concrete PLDs, CPU layout). Above it the
#: compiled program's run time, shorter than NumPy's (its transcendentals), outweighs
#: its compile (measurements: bench/results/HISTORY.md).
HOST_MAX_SIZE = 1 << 20
# Tilts: plain FFT plus tilted means at these fractions mean -> window top.
_TILT_FRACTIONS = (0.0, 0.3, 0.55, 0.8)
# Largest log tilted mass above the window for a tilt to be a target.
_LOG_FOLD = math.log(1e-10)


def _window(probs_list, counts, step, tail_mass, ns):
  """Chernoff-bounded index range [lo, hi] of the composed relative sum."""
  lam = ns.xp.asarray(LAMBDAS, ns.xp.float64)
  both = sum(c * tilted_fft.log_mgf_lattice(p, step, ns.xp.concatenate([lam, -lam]), 0, ns)
             for p, c in zip(probs_list, counts))
  up, dn = both[:lam.shape[0]], both[lam.shape[0]:]
  lt = math.log(tail_mass)
  x_hi = ns.xp.min((up - lt) / lam)
  x_lo = ns.xp.max((lt - dn) / lam)
  return x_lo / step, x_hi / step, up, lam


def _window_range(probs_list, step, counts, *, tail_mass, ns):
  counts = tuple(ns.xp.asarray(c, ns.xp.float64) for c in counts)
  lo, hi, _, _ = _window(probs_list, counts, step, tail_mass, ns)
  return lo, hi


def _top_index(probs, xp):
  """Index of the last positive entry (0 if none), int64."""
  idx = xp.arange(probs.shape[0], dtype=xp.int64)
  return xp.max(xp.where(probs > 0, idx, 0))


def _upper_tail_bound(up_rel, lam, gap, xp):
  """Chernoff bound on P(relative composed loss >= x).

  ``up_rel`` is the composed log-MGF relative to the top atom index ``J``
  (see :func:`jaxacct._core.tilted_fft.log_mgf_lattice`) and
  ``gap = (J - x / step) * step`` (exact from integers), so
  ``up - lam x = up_rel + lam * gap`` without cancellation.
  """
  return xp.minimum(xp.exp(xp.min(up_rel + lam * gap)), 1.0)


def _compose_core(probs_list, offsets, infs, step, pessimistic, counts, *,
                  size, tail_mass, ns=JAX, period=None, max_idx=None):
  """The composition of :func:`compose_many` (one formula; ``ns`` as in
  :mod:`jaxacct._core.namespace`: ``JAX`` in :func:`_compose_kernel`, ``HOST``
  for a scalar question).

  ``period`` (traced int64, a divisor of ``size``; JAX only): the window has
  ``period`` points, computed in arrays of the static length ``size`` (one
  program for many windows, :func:`jaxacct._core.window_cells.decimated_powers`);
  the result's points from ``period`` on are 0. ``max_idx``: the largest composed index when the
  inputs carry zero padding beyond the lengths it was set by (float64)."""
  xp = ns.xp
  if not ns.is_host:
    require_x64("jaxacct.pld.compose")
  step = xp.asarray(step, xp.float64)
  counts_i = counts
  counts = tuple(xp.asarray(c, xp.float64) for c in counts)
  if max_idx is None:
    max_idx = sum(c * (p.shape[0] - 1) for p, c in zip(probs_list, counts))
  span = size if period is None else period     # the window's points
  lo, _, _, lam = _window(probs_list, counts, step, tail_mass, ns)
  lo = xp.clip(xp.floor(lo), 0, max_idx)
  m = xp.clip(xp.minimum(lo, max_idx + 1 - span), 0, max_idx)
  m = m.astype(xp.int64)
  # Exponential tilting (Esscher transform) against FFT round-off: the plain
  # FFT has ~count * 1e-16 absolute error on every point, which swamps
  # upper-tail masses (delta ~ 1e-12 at 1e5 steps).  Tilting the inputs by
  # e^{lam L} / M(lam) moves the composed mass to the tail, where the result
  # p(s) = tilted(s) * exp(count log M(lam) - lam s h) then has relative
  # accuracy; per grid point we keep the version with the smallest error
  # factor exp(count log M(lam) - lam s h) (1 for the plain FFT).
  # All log-MGFs are taken relative to each input's top atom index (integer
  # bookkeeping), so the untilting exponent is
  #   sum_k c_k R_k(lam) + lam h (J - s),  J = sum_k c_k top_k,
  # with no cancellation of the large terms lam * L (at lam = 1e9
  # the absolute form lost 2e-7 per factor on discrete PLDs).
  s_idx = m + xp.arange(size)
  mean_idx = sum(c * xp.sum(xp.arange(p.shape[0]) * p) /
                 xp.maximum(xp.sum(p), 1e-300)
                 for p, c in zip(probs_list, counts))
  tops = tuple(_top_index(p, xp) for p in probs_list)
  top_j = sum(c * t for t, c in zip(tops, counts_i))  # int64
  top_idx = (m + span - 1).astype(xp.float64)
  total_count = sum(counts)
  mu = lam[::4]
  fr = xp.asarray(_TILT_FRACTIONS, xp.float64)
  targets = (mean_idx + fr * xp.maximum(top_idx - mean_idx, 0.0)) * step
  up_rel = sum(c * tilted_fft.log_mgf_lattice(p, step, lam, t, ns)
               for p, t, c in zip(probs_list, tops, counts))
  up_abs = up_rel + lam * (top_j.astype(xp.float64) * step)
  # Only tilts whose tilted mass above the window is negligible are targets: a
  # steeper one folds its own upper tail onto the window (circularly) and is
  # never the least-error version of a point, which then falls back to a
  # flatter tilt or the plain FFT (absolute accuracy only: the far tail of a
  # composed Poisson-subsampled Gaussian came out 1e-4..1e-2 low). Chernoff over
  # the grid: log P_lam(S >= top) <= min_{lam' > lam} K(lam') - K(lam) - (lam' - lam) top.
  x_top = (top_idx + 1.0) * step
  dlam = lam[None, :] - lam[:, None]
  fold = xp.min(xp.where(dlam > 0, up_abs[None, :] - up_abs[:, None] - dlam * x_top, xp.inf),
                axis=1)
  usable = fold <= _LOG_FOLD
  lam_t = lam[xp.argmin(xp.where(usable[None, :],
                                 up_abs[None, :] - lam[None, :] * targets[:, None], xp.inf),
                        axis=1)]
  lam_t = xp.where(fr == 0.0, 0.0, lam_t)  # (T,) tilts, first = plain
  nt = lam_t.shape[0]
  log_r_tot = xp.zeros(nt, xp.float64)
  up_t = xp.zeros((nt, mu.shape[0]), xp.float64)
  dn_t = xp.zeros((nt, mu.shape[0]), xp.float64)
  rings = []
  for p, t, c in zip(probs_list, tops, counts):
    # one evaluation for the tilts and the tilted +-mu orders
    r_all = tilted_fft.log_mgf_lattice(p, step, xp.concatenate(
        [lam_t, (lam_t[:, None] + mu).ravel(), (lam_t[:, None] - mu).ravel()]), t, ns)
    log_r = r_all[:nt]
    log_r_tot = log_r_tot + c * log_r
    up_t = up_t + c * r_all[nt:nt + nt * mu.shape[0]].reshape(nt, -1)
    dn_t = dn_t + c * r_all[nt + nt * mu.shape[0]:].reshape(nt, -1)
    j = (xp.arange(p.shape[0]) - t).astype(xp.float64) * step
    pt = p[None, :] * xp.exp(xp.minimum(
        lam_t[:, None] * j[None, :] - log_r[:, None], 700.0))
    rings.append(tilted_fft.wrap(pt, size, xp))
  if period is None:
    # (jnp.roll under jit mishandles int64 shifts beyond int32: reduce first)
    shift = xp.mod(-m, size).astype(xp.int32)
    yt = xp.roll(tilted_fft.convolve_powers(rings, counts, size, xp), shift, axis=-1)
  else:   # the same roll on the period's ring: point i is index m + i (mod period)
    at = xp.mod(xp.arange(size, dtype=xp.int64) + m, period)
    yt = window_cells.decimated_powers(rings, counts, size, period, xp)[:, at]
  # Chernoff bounds on the tilted mass outside the window, per grid point:
  # mass above the window lands (circularly) on point i from s >= m+size+i,
  # mass below it on point i from s <= m+i-size.  A per-point bound (not one
  # number per tilt) keeps a steep tilt selectable near the window top when
  # its own top tail aliases onto the bottom (composed RR at the
  # support edge kept a flatter tilt, 1e-8..1e-5 relative error in the top
  # atoms).  Integer gaps to the edges, in loss units.
  gap_hi = (top_j - (m + span)).astype(xp.float64) * step
  gap_lo = ((m - span) - top_j).astype(xp.float64) * step
  pos = xp.arange(size, dtype=xp.float64) * step
  base_hi = up_t - log_r_tot[:, None]  # (T, M)
  base_lo = dn_t - log_r_tot[:, None]

  log_a_hi = tilted_fft.lines_min(base_hi, mu, gap_hi - pos, ns)
  log_a_lo = tilted_fft.lines_min(base_lo, mu, gap_lo + pos, ns)
  log_a_hi = xp.where(m + span - 1 >= max_idx, -xp.inf, log_a_hi)
  log_a_lo = xp.where(m <= 0, -xp.inf, log_a_lo)
  log_alias = xp.minimum(xp.logaddexp(log_a_hi, log_a_lo), 0.0)
  s_gap = (top_j - s_idx).astype(xp.float64) * step  # exact: integers
  log_err = log_r_tot[:, None] + lam_t[:, None] * s_gap[None, :]
  # rank by the round-off estimate (see jaxacct._core.tilted_fft: the certified
  # bound ranks worse here); the pessimistic PLD charges the tails, not this
  best_y, _, _ = tilted_fft.pick_least_error(
      yt, log_err, tilted_fft.log_fft_estimate(total_count, xp), log_alias, None, xp)
  y = xp.maximum(best_y, 0.0)
  if period is not None:
    y = xp.where(xp.arange(size) < period, y, 0.0)
  tail = xp.where(m + span - 1 >= max_idx, 0.0,
                  _upper_tail_bound(up_rel, lam, gap_hi, xp))
  log_keep = sum(c * xp.log1p(-i) for i, c in zip(infs, counts))
  inf = -xp.expm1(log_keep)
  inf = xp.where(pessimistic, xp.minimum(inf + tail, 1.0), inf)
  offset = sum(c * o for o, c in zip(offsets, counts_i)) + m
  return y, offset, inf


_compose_kernel = jit(_compose_core, static_argnames=("size", "tail_mass"))
#: the formulas under public names, for the block programs that vmap them
#: (:mod:`jaxacct.pld._poisson_blocks`)
compose_core, window_range = _compose_core, _window_range


def _pad_to(p, n):
  """``p`` zero-padded to length ``n``: traced, in the caller's trace; concrete,
  on the host (NumPy, no compiled program for a new length), as
  ``pld._query._max_of`` does."""
  if n == p.shape[0]:
    return p
  pad = (0, n - p.shape[0])
  return dispatch(lambda x: jnp.pad(x, pad), (p,),
                  eager=lambda x: device_array(np.pad(np.asarray(x), pad)))


def _check_same_grid(plds):
  checks.check_same_step([p.step for p in plds])
  pess = [checks.check_static_bool("pessimistic", p.pessimistic) for p in plds]
  if len(set(pess)) > 1:
    raise ValueError("cannot compose pessimistic with optimistic PLDs.")
  return pess[0]


def _natural_size(probs_list, step, counts, tail_mass) -> int:
  """The FFT length of the Chernoff window at ``tail_mass`` (bucketed).

  Host glue on concrete PLDs (NumPy, no compiled program).
  """
  probs_list = tuple(np.asarray(p, np.float64) for p in probs_list)
  max_idx = sum(c * (p.shape[0] - 1) for p, c in zip(probs_list, counts))
  lo, hi = host_call(_window_range, probs_list, np.float64(step),
                     tuple(float(c) for c in counts), tail_mass=float(tail_mass))
  lo = max(0, int(math.floor(float(lo))))
  hi = min(max_idx, int(math.ceil(float(hi))))
  size = fast_len(max(hi - lo + 1, 2))
  if size > max_idx + 1:
    size = fast_len(max_idx + 1)
  return int(size)


def window_size(plds: Sequence[PLD], counts=None, *,
                tail_mass: float = DEFAULT_TAIL_MASS) -> int:
  """The FFT length :func:`compose_many` picks when ``size`` is not given.

  A caller composing several PLD lists (e.g. the two directions of a pair)
  can pass the max of their sizes to each, so that they share one compiled
  program (any ``size`` at least this one keeps the result an upper bound
  for pessimistic inputs; a longer window only moves where the lower tail
  aliases, ~1e-10 relative in epsilon).

  Returns:
    int, ``2^a`` or ``3 * 2^(a-2)``. Computed on the host (NumPy, no
    compiled program).
  """
  plds = _pld_list(plds)
  counts = _count_list(counts, len(plds))
  checks.check_range("tail_mass", tail_mass, 0.0, 1e-3, lo_open=True)
  _check_same_grid(plds)
  probs_list = tuple(np.asarray(p.probs, np.float64) for p in plds)
  return _natural_size(probs_list, plds[0].step, counts, tail_mass)


def compose_many(plds: Sequence[PLD], counts=None, *, size=None,
                 tail_mass: float = DEFAULT_TAIL_MASS) -> PLD:
  r"""Composition of heterogeneous PLDs: ``plds[k]`` composed ``counts[k]`` times.

  FFTs of length ``size``: every input is wrapped (aliased) to ``size``,
  the spectra are raised to their counts (polar form) and multiplied,
  and the window of the circular result starts at a Chernoff lower tail point
  (mass below it <= ``tail_mass``, it aliases onto higher losses, which only
  increases delta).  The mass above the window is bounded by the Chernoff
  bound ``min_lam exp(sum_k c_k log M_k(lam) - lam x)`` and, for pessimistic
  PLDs, charged to ``inf_mass``; ``inf_mass = 1 - prod (1 - inf_k)^{c_k}``.

  Round-off: a plain float64 FFT has ~``count * 1e-16`` absolute error at
  every point, which swamps tail masses (delta ~ 1e-12 after 1e5 steps).
  The composition is therefore also run on exponentially tilted inputs
  ``p_j e^{lam L_j} / M(lam)`` (three tilts, putting the tilted mean at 30%,
  55%, 80% of the way from the mean to the window top, among the tilts whose
  own tilted mass above the window is below 1e-10: a steeper one would fold
  its upper tail onto the window and never be picked) and untilted by
  ``M(lam)^count e^{-lam L}``; each grid point takes the version with the
  smallest estimated absolute error: the untilting factor times (FFT
  round-off ``count * 2.2e-16`` + a Chernoff bound on the tilted mass that
  aliases onto that point from outside the window).  All log-MGFs are kept
  relative to each input's top atom (integer offsets), so the untilting
  exponent has no cancellation even at lam ~ 1e9.  This is the
  Esscher-transform trick (cf. saddlepoint methods); 4 FFT passes, run by
  :mod:`jaxacct._core.tilted_fft` (whose docstring says why the tilts are
  ranked by this estimate and not by its certified bound).

  Args:
    plds: sequence of :class:`PLD` on the same ``step`` (else ValueError) and
      of the same kind (pessimistic or not).
    counts: sequence of Python ints >= 1 (default all 1); static.
    size: FFT length (static).  Default: the Chernoff window at
      ``tail_mass`` on each side (needs concrete PLDs).
    tail_mass: truncation mass per side, in (0, 1e-3].

  Returns:
    :class:`PLD` with ``probs`` of length ``size``.

  Where it runs: concrete PLDs on the CPU layout, windows up to
  ``HOST_MAX_SIZE`` points, in NumPy (no compiled program); traced input,
  longer windows, the accelerator layout or a lanes mesh, the compiled
  kernel (the same formula; masses within FFT round-off).

  Bound: pessimistic inputs -> upper bound on every delta of the composition;
  optimistic -> lower estimate (up to ``tail_mass`` aliasing).
  """
  plds = _pld_list(plds)
  counts = _count_list(counts, len(plds))
  checks.check_range("tail_mass", tail_mass, 0.0, 1e-3, lo_open=True)
  if size is not None:
    checks.check_int("size", size, min_value=1, scalar=True)
  pess = _check_same_grid(plds)
  step = plds[0].step
  probs_list = tuple(device_array(p.probs) for p in plds)
  size = int(static_size((probs_list, step),
                         lambda: _natural_size(probs_list, step, counts, tail_mass),
                         bound=None if size is None else (lambda: size),
                         message="compose under jit needs a static `size`."))
  # Pad inputs to few distinct lengths (fewer compiles).
  probs_list = tuple(
      _pad_to(p, min(fast_len(p.shape[0]), max(size, p.shape[0])))
      if p.shape[0] < size else p
      for p in probs_list)
  # Padding zeros changed max_idx; the kernel only uses it as a bound.
  offsets = tuple(kernel_arg(p.offset, np.int64) for p in plds)
  infs = tuple(kernel_arg(p.inf_mass) for p in plds)
  c64 = tuple(np.int64(c) for c in counts)
  if size <= HOST_MAX_SIZE and batching.on_host(probs_list, offsets, infs, step):
    # concrete PLDs on the CPU layout: the same formula in NumPy, no program to
    # compile (a first answer's seconds); values within FFT round-off of the kernel's
    y, off, inf = host_call(_compose_core, tuple(np.asarray(p, np.float64) for p in probs_list),
                            tuple(np.int64(o) for o in offsets),
                            tuple(np.float64(i) for i in infs), np.float64(step),
                            np.bool_(pess), c64, size=size, tail_mass=float(tail_mass))
    return PLD(device_array(y), int(off), step, np.float64(inf), pess)
  y, off, inf = _compose_kernel(probs_list, offsets, infs, step, np.bool_(pess), c64,
                                size=size, tail_mass=float(tail_mass))
  return PLD(y, host_scalar(off, int), step, inf, pess)


def compose(pld: PLD, count: int = 1, *, size=None,
            tail_mass: float = DEFAULT_TAIL_MASS) -> PLD:
  """Self-composition of ``pld`` ``count`` times (see :func:`compose_many`).

  Bound: as the input (upper for pessimistic PLDs).
  """
  if not isinstance(pld, PLD):
    raise ValueError(f"pld must be a jaxacct.pld.PLD; got {_what(pld)}.")
  checks.check_int("count", count, min_value=1, scalar=True)
  return compose_many([pld], [count], size=size, tail_mass=tail_mass)


def _what(x) -> str:
  text = repr(x)
  return f"{type(x).__name__} " + (text if len(text) <= 60 else text[:57] + "...")


def _pld_list(plds) -> list:
  """``plds`` of :func:`compose_many` as a list, checked: a non-empty sequence of
  :class:`PLD` (else ``ValueError`` naming ``plds``)."""
  if isinstance(plds, (PLD, str, bytes)) or not hasattr(plds, "__iter__"):
    raise ValueError(f"plds must be a sequence of jaxacct.pld.PLD; got {_what(plds)}.")
  plds = list(plds)
  if not plds:
    raise ValueError("plds must hold at least one jaxacct.pld.PLD; got an empty sequence.")
  for p in plds:
    if not isinstance(p, PLD):
      raise ValueError(f"plds must hold jaxacct.pld.PLD objects; got {_what(p)}.")
  return plds


def _count_list(counts, n: int) -> tuple:
  """``counts`` of :func:`compose_many` (default all 1) as a tuple of ints, checked:
  a sequence of ``n`` integers >= 1 (else ``ValueError`` naming ``counts``)."""
  if counts is None:
    return (1,) * n
  checks.check_int("counts", counts, min_value=1)
  if np.ndim(counts) != 1 or isinstance(counts, (str, bytes)):
    raise ValueError(f"counts must be a sequence of integers, one per PLD; got "
                     f"{_what(counts)}.")
  counts = list(counts)
  if len(counts) != n:
    raise ValueError(f"counts must have one entry per PLD ({n} in plds); got {len(counts)}.")
  return tuple(int(c) for c in counts)
