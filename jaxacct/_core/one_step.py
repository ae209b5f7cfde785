"""One-step laws of the Gaussian and Laplace privacy losses on a lattice (NumPy/SciPy).

The input of random allocation's law builder (``jaxacct.allocation``), and what
``jaxacct.mechanisms.Gaussian/Laplace(...).one_step_law`` returns: a base
mechanism says what its one step looks like without importing a scheme.
:func:`one_steps` is batched over lanes; ``jaxacct.allocation``'s jittable
kernels (traced input) are its in-program twins, with the same formulas and
operation order, so the arrays agree to a few units in the last place.
Validity does not depend on which library evaluated them: the mathematics
(mean-preserving splits, exact tail masses) is in :mod:`jaxacct.allocation.pld`,
and rounding of the one-step masses is part of the relative float ledger.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

_EPS = float(np.finfo(np.float64).eps)
GL_X, GL_W = np.polynomial.legendre.leggauss(8)   # 8-point Gauss-Legendre on [0, 1]
GL_X = (GL_X + 1.0) / 2.0
GL_W = GL_W / 2.0
_BLOCK = 32          # lanes per NumPy block (bounds the (lanes, n, 8) temporaries)


class Steps(NamedTuple):
  """One-step upper/lower laws of L lanes (NumPy, float64).

  ``p`` (L, n): upper masses at the knots exp(lo + j D); ``q0``, ``minf``
  (L,): upper atom at 0 and first-moment defect; ``a``, ``g`` (L, n): lower
  cell masses and moments (units of the cell's left knot); ``lo``, ``D``
  (L,): the lattice (knot 0 at log position ``lo``, step ``D``).
  """
  p: np.ndarray
  q0: np.ndarray
  minf: np.ndarray
  a: np.ndarray
  g: np.ndarray
  lo: np.ndarray
  D: np.ndarray


def _cells(lo, D, n, logdens):
  """Cell masses (without the density's constant) and E[X/x_c - 1 | cell]."""
  j = np.arange(n - 1, dtype=np.float64)
  rel = GL_X[None, None, :] * D[:, None, None]                    # ell - u_c
  ell = lo[:, None, None] + j[None, :, None] * D[:, None, None] + rel
  lf = logdens(ell)
  cmax = np.max(lf, axis=2, keepdims=True)
  wt = GL_W[None, None, :] * np.exp(lf - cmax)
  sw = np.sum(wt, axis=2)
  gfrac = np.sum(wt * np.expm1(rel), axis=2) / sw
  return sw, cmax[:, :, 0], gfrac


def _split(M, gfrac, D, n):
  om = np.clip(gfrac / np.expm1(D)[:, None], 0.0, 1.0)
  p = np.zeros((M.shape[0], n))
  p[:, :-1] += M * (1.0 - om)
  p[:, 1:] += M * om
  return p


def _gaussian(sigma, tail, n):
  from scipy.special import log_ndtr, ndtri
  mu = 0.5 / sigma**2
  s = 1.0 / sigma
  z = -ndtri(tail)
  lo = -mu - z * s
  hi = mu + z * s
  D = (hi - lo) / (n - 1)
  mu3, s3 = mu[:, None, None], s[:, None, None]
  sw, cmax, gfrac = _cells(lo, D, n, lambda ell: -0.5 * ((ell + mu3) / s3)**2)
  logM = np.log(sw) + cmax + np.log(D / s)[:, None] - 0.5 * np.log(2 * np.pi)
  M = np.exp(logM)
  p = _split(M, gfrac, D, n)
  ML, FL, MR, FR = np.exp(log_ndtr(np.stack([(lo + mu) / s, (lo - mu) / s, -(hi + mu) / s,
                                             -(hi - mu) / s])))
  to0 = FL * np.exp(-lo)
  p[:, 0] += to0
  q0 = np.maximum(ML - to0, 0.0)
  p[:, -1] += MR
  minf = np.maximum(FR - MR * np.exp(hi), 0.0) + 4 * _EPS * FR
  zero = np.zeros((M.shape[0], 1))
  a = np.concatenate([M, zero], axis=1)
  g = np.concatenate([M * (1.0 + gfrac), zero], axis=1)
  return Steps(p, q0, minf, a, g, lo, D)


def _laplace(b, n):
  e = 1.0 / b
  lo, hi = -e, e
  D = (hi - lo) / (n - 1)
  b3 = b[:, None, None]
  sw, cmax, gfrac = _cells(lo, D, n, lambda ell: -((b3 * ell + 1.0) / 2.0) / b3)
  M = sw * np.exp(cmax) * D[:, None] * 0.25
  p = _split(M, gfrac, D, n)
  top = 0.5 * np.exp(-e)
  p[:, 0] += 0.5
  p[:, -1] += top
  zero = np.zeros((M.shape[0], 1))
  a = np.concatenate([M, zero], axis=1)
  g = np.concatenate([M * (1.0 + gfrac), zero], axis=1)
  a[:, 0] += 0.5
  a[:, -1] += top
  g[:, 0] += 0.5
  g[:, -1] += top
  zl = np.zeros(M.shape[0])
  return Steps(p, zl, zl.copy(), a, g, lo, D)


def one_steps(mechanism: str, param, tail, n: int) -> Steps:
  """One-step laws of lanes ``param`` (sigma or Laplace scale), ``tail`` (1-D).

  Invalid lanes (param <= 0 or not finite) give non-finite arrays; the
  kernel marks them NaN from ``param`` itself.
  """
  param = np.asarray(param, np.float64).ravel()
  tail = np.broadcast_to(np.asarray(tail, np.float64).ravel(), param.shape)
  parts = []
  with np.errstate(all="ignore"):
    for i in range(0, max(param.size, 1), _BLOCK):
      sl = slice(i, i + _BLOCK)
      if mechanism == "gaussian":
        parts.append(_gaussian(param[sl], tail[sl], n))
      elif mechanism == "laplace":
        parts.append(_laplace(param[sl], n))
      else:
        raise ValueError(f"mechanism must be 'gaussian' or 'laplace'; got {mechanism!r}.")
  return Steps(*(np.concatenate(x) for x in zip(*parts)))
