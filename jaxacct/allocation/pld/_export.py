"""Export of the composed allocation laws as jaxacct.pld PLDs (private).

:func:`jaxacct.allocation.pld.allocation_plds` (the PLDs the accountant
composes with other events and ``jaxacct.risk`` reads) runs the one
composition engine of the epsilon/delta doors, :func:`._compose.compose_laws`
on the host, and converts its window (:class:`._compose.Composed`) to
``jaxacct.pld`` PLDs on the requested loss grid: upper by connect-the-dots
(a mean-preserving split in x, dominating), lower by rounding losses down
(dominated), with the float ledger folded in. A single round (k E = 1) is
converted from its own laws (:func:`laws_to_plds`). Validity:
docs/bounds/allocation_pld.md ("The composed window as PLDs"). Eager, scalar.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxacct import pld as jpld
from jaxacct._core.namespace import host_call
from jaxacct.allocation.pld._compose import Composed, compose_laws, window_span

#: Tilts per direction and target of the exported composition, and the targets:
#: the deltas whose positions the tilt ladders reach (``mode="eps"`` of
#: :func:`._compose.compose_laws`; the rounds' tail cuts are set by the
#: smallest). An exported PLD serves every delta, so its tilts cover the
#: range the doors cover one target at a time (tightness only).
EXPORT_TILTS = 8
EXPORT_DELTAS = (1e-5, 1e-10, 1e-15)
#: Lattice sizes of the exported composition (host NumPy FFTs of this many
#: points, one per tilt).
EXPORT_MIN_SIZE, EXPORT_MAX_SIZE = 1 << 12, 1 << 18


def export_size(span, step, lo=EXPORT_MIN_SIZE, hi=EXPORT_MAX_SIZE):
  """The lattice size of an export: the smallest power of two in [lo, hi]
  whose lattice step span / (N - 16) is at most ``step``; the lattice is then
  aligned to the grid (step / j, j >= 1: every grid point a knot)."""
  n = int(lo)
  while n < hi and span / (n - 16) > step:
    n *= 2
  return n


class AllocationPLDs(NamedTuple):
  """PLDs (``jaxacct.pld.PLD``) of one round / the composition.

  Attributes:
    remove_upper, add_upper: pessimistic (dominating) PLDs.
    remove_lower, add_lower: optimistic (dominated; for k > 1 of the reduced
      object) PLDs.
    tail_mass: the composition window's tail (its charge sits in the upper
      PLDs' ``inf_mass``; the lower PLDs drop it).
  """
  remove_upper: Any
  add_upper: Any
  remove_lower: Any
  add_lower: Any
  tail_mass: float = 0.0


def _np(F):
  return jax.tree.map(lambda a: np.asarray(a, np.float64), F)


def laws_to_plds(F, step):
  """Four PLDs of one 1-of-t' round from its final laws (numpy side).

  Remove: losses ln(x/t), P-mass q x/t (+ minf/t at +inf). Add: losses
  -ln(x/t), P-mass (= Q^t-mass) q (+ q0 at +inf). The float ledger is folded
  in: upper losses + eta, masses (1 + rel) e^eta; lower mirrored with eta_lo.
  """
  F = _np(F)
  rel, eta, eta_lo = float(F.rel), float(F.eta), float(F.eta_lo)
  lu, pu = _atoms(F.up_loss, F.up_p)
  ll, pl = _atoms(F.lo_loss, F.lo_a)
  fu = (1.0 + rel) * math.exp(eta)
  fl = (1.0 - rel) * math.exp(-eta_lo)
  ru = jpld.from_losses(lu + eta, pu * np.exp(lu) * fu, step=step, pessimistic=True,
                        inf_mass=min(1.0, float(F.up_minf_t) * fu))
  au = jpld.from_losses(-lu + eta, pu * fu, step=step, pessimistic=True,
                        inf_mass=min(1.0, float(F.up_q0) * fu))
  rl = jpld.from_losses(ll - eta_lo, pl * np.exp(ll) * fl, step=step, pessimistic=False,
                        inf_mass=min(1.0, float(F.lo_inf) * fl))
  al = jpld.from_losses(-ll - eta_lo, pl * fl, step=step, pessimistic=False,
                        inf_mass=min(1.0, float(F.lo_q0) * fl))
  return ru, au, rl, al


def _atoms(loss, mass):
  """A law's atoms of positive mass; none: one zero mass at loss 0 (a PLD has a grid)."""
  keep = mass > 0
  return (loss[keep], mass[keep]) if keep.any() else (np.zeros(1), np.zeros(1))


def _log_ratio(a, b):
  """ln(a / b) for a > 0 (b = 0: +inf)."""
  with np.errstate(divide="ignore"):
    return np.where(b > 0, np.log(a) - np.log(np.where(b > 0, b, 1.0)), np.inf)


def window_to_plds(C: Composed, step):
  """(remove_upper, add_upper, remove_lower, add_lower) PLDs of one composed
  window (NumPy), the same hockey sticks :func:`._query.composed_deltas`
  evaluates, at every epsilon.

  Upper: the knot s (x_s = e^{(m + s) h}, Q-mass wu_s) becomes a remove atom
  at loss ln x_s + H with P-mass F e^H wu_s x_s and an add atom at
  -ln x_s + H with P-mass F wu_s; the defect F e^H defu and F q0u go to
  +inf; then connect-the-dots onto the grid. Lower: the merged atom s (Q-mass
  in [wl_lo, wl_hi], P-mass in [pl_lo, pl_hi]) becomes a remove atom at
  ln(pl_lo / wl_hi) - H_lo with P-mass F_lo e^-H_lo pl_lo and an add atom at
  ln(wl_lo / pl_hi) - H_lo with P-mass F_lo wl_lo; F_lo singl and F_lo q0l at
  +inf; then losses rounded down onto the grid.
  """
  C = _np(C)
  h, m, H, H_lo = float(C.h), float(C.m), float(C.H), float(C.H_lo)
  fup, flo = float(C.fup), float(C.flo)
  if not (np.isfinite(fup) and np.isfinite(h)):
    raise ValueError("the composed allocation laws are not finite.")
  sh = (m + np.arange(C.wu.shape[0])) * h
  k = C.wu > 0
  s, w = sh[k], C.wu[k]
  cap = lambda v: min(1.0, float(v))
  ru = jpld.from_losses(s + H, w * np.exp(s + H) * fup, step=step, pessimistic=True,
                        inf_mass=cap(fup * math.exp(H) * C.defu))
  au = jpld.from_losses(-s + H, w * fup, step=step, pessimistic=True,
                        inf_mass=cap(fup * C.q0u))
  kr = C.pl_lo > 0
  rl = jpld.from_losses(_log_ratio(C.pl_lo[kr], C.wl_hi[kr]) - H_lo,
                        C.pl_lo[kr] * (flo * math.exp(-H_lo)), step=step, pessimistic=False,
                        inf_mass=cap(flo * C.singl))
  ka = C.wl_lo > 0
  al = jpld.from_losses(_log_ratio(C.wl_lo[ka], C.pl_hi[ka]) - H_lo, C.wl_lo[ka] * flo,
                        step=step, pessimistic=False, inf_mass=cap(flo * C.q0l))
  return ru, au, rl, al


def composed_plds(Fr1, Fa1, Fr2, Fa2, c1, c2, shared, *, step, tail_mass, size=None,
                  tilts=EXPORT_TILTS, targets=EXPORT_DELTAS) -> AllocationPLDs:
  """AllocationPLDs of c1 rounds F1 composed with c2 rounds F2 (one lane, host
  NumPy laws; remove laws Fr*, add laws Fa*, ``shared``: Fa* is Fr*).

  k E = c1 + c2 = 1: the round's own laws (:func:`laws_to_plds`); else the
  doors' composition (:func:`._compose.compose_laws`, window tail
  ``tail_mass``; ``size`` lattice points, default :func:`export_size`, on a
  lattice holding the grid's points) converted by :func:`window_to_plds`.
  """
  c1, c2 = int(c1), int(c2)
  if c1 + c2 == 1:
    pr = laws_to_plds(Fr1 if c1 else Fr2, step)
    pa = pr if shared else laws_to_plds(Fa1 if c1 else Fa2, step)
    return AllocationPLDs(pr[0], pa[1], pr[2], pa[3], tail_mass=0.0)

  def window(f1, f2):
    args = (f1, f2, float(c1), float(c2), float(tail_mass), tuple(map(float, targets)))
    kw = dict(mode="eps", blocks=2 if c2 > 0 else 1)
    n = size or export_size(float(host_call(window_span, *args, **kw)), step)
    C = host_call(compose_laws, *args, size=n, tilts=int(tilts), want_lower=True,
                  step=float(step), **kw)
    return window_to_plds(C, step)

  pr = window(Fr1, Fr2)
  pa = pr if shared else window(Fa1, Fa2)
  return AllocationPLDs(pr[0], pa[1], pr[2], pa[3], tail_mass=float(tail_mass))
