"""The composed law of n repetitions of a PLD: log-MGFs, Chernoff windows, spectra.

:class:`Powers` holds ``base^n * factor`` for a list of counts, as the repeated-event
engine (:mod:`jaxacct.pld._powers`) reads it; windows over ``MAX_WINDOW`` points are
refused before anything is allocated.
"""

from __future__ import annotations

import math

import numpy as np

from jaxacct._core.checks import WindowTooLarge
from jaxacct.pld._core import fast_len

# Chernoff orders (per unit of loss): the windows here and compose_many's.
LAMBDAS = np.geomspace(1e-3, 1e9, 97)
#: Longest composed window (FFT length, grid points) the engine runs: its buffers hold
#: 32 rows of spectra and values, 16 GiB at this length. A count whose window is
#: longer, or whose largest grid index passes 2^53 (float64's exact integers), is
#: refused (``WindowTooLarge``) before anything is allocated.
MAX_WINDOW = 1 << 25


class Powers:
  """``base^n * factor`` for the counts: log-MGFs and Chernoff windows.

  ``factor``: None, one law composed onto every count, or a list of laws, one
  per count (a column: one count, a factor per row; :func:`column_epsilons`).
  """

  def __init__(self, base, factor, counts, tail_mass):
    self.rowwise = isinstance(factor, (list, tuple))
    facs = list(factor) if self.rowwise else ([] if factor is None else [factor])
    for f in facs:
      if f.step != base.step:
        raise ValueError(f"factor must be on the grid step of pld ({base.step:g}); got "
                         f"{f.step:g}.")
    self.base, self.factor, self.counts = base, factor, counts
    self.facs = facs
    if self.rowwise:
      self.f_offset = np.array([f.offset for f in facs], np.int64)
      self.f_top = np.array([f.top for f in facs], np.int64)
      f_inf = np.array([f.inf for f in facs])
    else:
      self.f_offset = 0 if factor is None else factor.offset
      self.f_top = 0 if factor is None else factor.top
      f_inf = None if factor is None else factor.inf
    self.h = base.step
    self.up = self.kn(LAMBDAS)
    dn = self.kn(-LAMBDAS)
    lt = math.log(tail_mass)
    x_hi = np.min((self.up - lt) / LAMBDAS, axis=1)
    x_lo = np.max((lt - dn) / LAMBDAS, axis=1)
    check_window(self, x_lo, x_hi)
    self.shift = counts * base.offset + self.f_offset
    self.max_idx = counts * base.top + self.f_top
    self.lo = np.clip(np.floor(x_lo / self.h), 0, self.max_idx).astype(np.int64)
    hi = np.minimum(self.max_idx, np.ceil(np.minimum(x_hi / self.h, 9e18))).astype(np.int64)
    nat = np.array([fast_len(max(int(b - a + 1), 2)) for a, b in zip(self.lo, hi)])
    full = np.array([fast_len(int(m) + 1) for m in self.max_idx])
    self.natural = np.where(nat > self.max_idx + 1, full, nat)
    self.inf = -np.expm1(counts * math.log1p(-min(base.inf, 1.0 - 1e-16)))
    if f_inf is not None:
      self.inf = 1.0 - (1.0 - self.inf) * (1.0 - f_inf)

  def kn(self, lams, rows=slice(None)):
    """Composed log-MGF (relative indices) at ``lams``, (counts, len(lams))."""
    k = self.counts[rows].astype(np.float64)[:, None] * self.base.lmgf(lams)[None, :]
    if self.factor is None:
      return k
    if self.rowwise:
      picked = np.arange(len(self.facs))[rows]     # a slice or an index array
      return k + np.stack([self.facs[i].lmgf(lams) for i in np.atleast_1d(picked)])
    return k + self.factor.lmgf(lams)[None, :]

  def start(self, rows, size):
    """Window start ``m`` (relative index) of the counts ``rows`` at FFT length ``size``."""
    mx = self.max_idx[rows]
    return np.clip(np.minimum(self.lo[rows], mx + 1 - size), 0, mx)

  def spectra(self, rows, size, lam, out):
    """``F Z^n`` (tilted) for the counts ``rows`` into ``out`` (B, size // 2 + 1): one
    polar power, then products by ``Z^d`` (counts a step ``d`` apart)."""
    z = self.base.spectrum(lam, size)
    zp = self.base.polar(lam, size)
    n = self.counts[rows]
    if self.rowwise:      # a column: the count's power once a run of equal counts
      zc = None
      for i, f in enumerate(self.facs[rows]):
        if i == 0 or n[i] != n[i - 1]:
          zc = polar_power(zp, int(n[i]))
        np.multiply(zc, f.spectrum(lam, size), out=out[i])
      return out[:n.size]
    gaps = np.diff(n)
    fz = None if self.factor is None else self.factor.spectrum(lam, size)
    out[0] = polar_power(zp, int(n[0]))
    if fz is not None:
      out[0] *= fz
    if n.size > 1 and np.all(gaps == gaps[0]):
      zd = z if gaps[0] == 1 else polar_power(zp, int(gaps[0]))
      for i in range(1, n.size):
        np.multiply(out[i - 1], zd, out=out[i])
    else:
      for i in range(1, n.size):
        out[i] = polar_power(zp, int(n[i])) if fz is None else polar_power(zp, int(n[i])) * fz
    return out[:n.size]


def check_window(pair, x_lo, x_hi):
  """``WindowTooLarge`` where a count's Chernoff window is over ``MAX_WINDOW`` points or
  its grid indices pass 2^53: in float64, before any int64 index (which would wrap
  around: 9e-12 for ~1 at 1e17 steps) or buffer exists."""
  base, h = pair.base, pair.h
  counts = pair.counts.astype(np.float64)
  top = counts * base.top + pair.f_top
  span = np.abs(counts * base.offset) + np.abs(pair.f_offset) + top
  with np.errstate(invalid="ignore", over="ignore"):
    width = np.minimum(np.minimum(x_hi / h, top) - np.clip(x_lo / h, 0.0, None), top) + 1.0
  width = np.where(np.isnan(width), np.inf, width)
  bad = (width > MAX_WINDOW) | (span >= 2.0**53)
  if np.any(bad):
    i = int(np.argmax(bad))
    raise WindowTooLarge(
        f"count={int(pair.counts[i])}: the composed PLD needs a window of "
        f"{float(width[i]):.3g} grid points of step {h:g} (loss indices up to "
        f"{float(span[i]):.3g}); jaxacct's PLD engine runs at most {MAX_WINDOW} points "
        "(16 GiB of buffers) and indices below 2^53.", points=float(width[i]))


def polar_power(polar, c):
  """``z^c`` (``|z| <= 1``) in polar form, as ``jaxacct._core.tilted_fft.cpow``;
  ``polar``: z's ``(|z| > 0, log|z|, arg z)`` (a law's ``polar``, :mod:`._host_law`)."""
  pos, log_mag, arg = polar
  lm = np.where(pos, c * log_mag, -np.inf)
  return np.exp(lm) * np.exp(1j * (c * arg))
