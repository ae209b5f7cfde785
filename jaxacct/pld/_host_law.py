"""A PLD on the host for the repeated-event engine: its masses, memoised log-MGFs and spectra.

:func:`law` wraps a :class:`jaxacct.pld.PLD` (or a ``PairPLD``) once; the
engine (:mod:`jaxacct.pld._powers`) asks it for log-MGFs at Chernoff orders
and for tilted spectra, which it keeps for the next question.
"""

from __future__ import annotations

import numpy as np

from jaxacct._core import tilted_fft
from jaxacct._core.namespace import HOST
from jaxacct.pld._core import PairPLD

# A law with fewer atoms than 1/_SPARSE of its grid is evaluated on its atoms.
_SPARSE = 8


class _Law:
  """One input PLD on the host: masses, grid offset, inf mass, cached log-MGFs."""

  def __init__(self, pld):
    self.p = np.asarray(pld.probs, np.float64)
    self.offset = int(pld.offset)
    self.inf = float(pld.inf_mass)
    self.step = float(pld.step)
    pos = np.flatnonzero(self.p > 0)
    self.top = int(pos[-1]) if pos.size else 0   # the last atom: the support's top
    # a sparse law (atoms far apart on the grid, as a balls-in-bins prefix's
    # ~2,000 atoms on 100,000 points) is tilted and summed on its atoms only
    self.atoms = pos if 0 < pos.size * _SPARSE < self.p.size else None
    self._memo = {}

  def lmgf(self, lams):
    """log sum_j p_j e^{lam j h} (relative index j) for each lam; -inf if no mass.
    Memoised per value of lam (the orders repeat across chunks and calls)."""
    lams = np.asarray(lams, np.float64)
    whole = self._memo.setdefault("lmgf-arrays", {})   # the same array asked again
    key = (lams.shape, lams.tobytes())
    if key in whole:
      return whole[key].copy()
    memo = self._memo.setdefault("lmgf", {})
    new = [x for x in np.unique(lams).tolist() if x not in memo]
    if new:
      if self.atoms is not None:
        vals = _lmgf_atoms(self.p[self.atoms], self.atoms, self.step, np.asarray(new))
      elif np.any(self.p > 0):
        vals = tilted_fft.log_mgf_lattice(self.p, self.step, np.asarray(new), 0, HOST)
      else:
        vals = np.full(len(new), -np.inf)
      memo.update(zip(new, np.asarray(vals).tolist()))
    out = np.array([memo[x] for x in lams.ravel().tolist()]).reshape(lams.shape)
    whole[key] = out
    return out.copy()

  def spectrum(self, lam, size):
    """rfft of the tilted masses ``p_j e^{lam j h} / M(lam)`` wrapped on ``size`` cells."""
    key = ("spec", lam, size)
    self._last = key
    if key not in self._memo:
      t = self.p
      if lam != 0.0:
        k = float(self.lmgf(np.array([lam]))[0])
        if self.atoms is not None:   # the same numbers, on the atoms (zeros stay zero)
          j = self.atoms
          t = np.zeros(self.p.size)
          t[j] = np.exp(np.minimum(np.log(self.p[j]) + lam * self.step * j - k, 0.0))
        else:
          with np.errstate(divide="ignore"):
            t = np.exp(np.minimum(np.log(t) + lam * self.step * np.arange(t.size) - k, 0.0))
      self._memo[key] = np.fft.rfft(tilted_fft.wrap(t[None, :], size, np)[0])
    return self._memo[key]

  def polar(self, lam, size):
    """``(|z| > 0, log|z| (0 where |z| = 0), arg z)`` of ``spectrum(lam, size)``,
    memoised: what :func:`_polar_power` takes of z for any power."""
    key = ("polar", lam, size)
    if key not in self._memo:
      z = self.spectrum(lam, size)
      mag = np.abs(z)
      self._memo[key] = (mag > 0, np.log(np.where(mag > 0, mag, 1.0)), np.angle(z))
    return self._memo[key]

  def drop_spectra(self, keep_last: bool = False):
    """Forgets the memoised spectra (a law kept for its log-MGFs holds no FFT
    buffers); ``keep_last``: all but the one asked for last (a column of
    compositions often takes the tilt and length of the one before)."""
    last = getattr(self, "_last", None) if keep_last else None
    for key in [k for k in self._memo if k not in ("lmgf", "lmgf-arrays", last)]:
      self._memo.pop(key, None)


def _lmgf_atoms(p, idx, step, lams):
  """``log sum_j p_j e^{lam j h}`` over atoms at grid indices ``idx`` (ascending)
  with masses ``p > 0``: :func:`jaxacct._core.tilted_fft.lmgf` on positions
  relative to the top atom for lam >= 0 and the bottom one below (as
  :func:`jaxacct._core.tilted_fft.log_mgf_lattice`: no exponent loses its
  relative accuracy at large lam), O(atoms) a lam, not O(grid)."""
  out = np.empty(lams.shape)
  logp = np.log(p)
  for sel, base in ((lams >= 0, idx[-1]), (lams < 0, idx[0])):
    if np.any(sel):
      pos = (idx - base).astype(np.float64) * step
      out[sel] = tilted_fft.lmgf(logp, pos, lams[sel], np) + lams[sel] * (float(base) * step)
  return out


def law(pld):
  """The host form of a PLD (its log-MGFs and spectra are memoised on it), or a
  ``PairPLD`` of them for a pair; pass it again to reuse the memos."""
  if isinstance(pld, _Law):
    return pld
  if isinstance(pld, PairPLD):   # a symmetric pair keeps one law (and its memos)
    rem = law(pld.remove)
    return PairPLD(rem, rem if pld.add is pld.remove else law(pld.add))
  return _Law(pld)
