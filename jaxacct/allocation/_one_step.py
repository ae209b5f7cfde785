"""One-step laws of the Gaussian and Laplace mechanisms (private).

The jittable kernels :func:`gaussian_one_step` and :func:`laplace_one_step`
(one lane; traced input builds its laws in-program) and their NumPy/SciPy
twins :func:`one_steps`, batched over lanes. The jitted law builder (:func:`jaxacct.allocation._pld_laws.laws_batch`)
takes their arrays as inputs instead of computing them in-program: the
quantile ``ndtri``, the four ``log_ndtr`` tails and the Gauss-Legendre cell
integrals were about a sixth of its instructions (1,030 of 5,719 optimised
HLO instructions, 2026-11-25), compiled on every fresh process, for work
that takes well under a millisecond per lane here. It also lets one compiled
program serve both mechanisms.

Same formulas, same operation order, so the arrays agree with the jitted
versions to a few units in the last place (the libraries' ``exp``/``log``
differ by about an ulp; tests/test_allocation_pld.py checks the laws built
from either). Validity does not depend on which library evaluated them: the
mathematics (mean-preserving splits, exact tail masses) is in
:mod:`jaxacct.allocation.pld`, and rounding of the one-step masses is part of
the relative float ledger ``rel`` (it is absorbed the same way as the
in-program evaluation's).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, ndtri

from jaxacct.allocation._sum_law import Lattice, LowerLaw, UpperLaw

_EPS = float(np.finfo(np.float64).eps)
_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)   # 8-point Gauss-Legendre on [0, 1]
_GL_X = (_GL_X + 1.0) / 2.0
_GL_W = _GL_W / 2.0
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
  rel = _GL_X[None, None, :] * D[:, None, None]                    # ell - u_c
  ell = lo[:, None, None] + j[None, :, None] * D[:, None, None] + rel
  lf = logdens(ell)
  cmax = np.max(lf, axis=2, keepdims=True)
  wt = _GL_W[None, None, :] * np.exp(lf - cmax)
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


# ----------------------------------------------------------------------------
# jittable one-step laws (traced input: the in-program twins of one_steps)
# ----------------------------------------------------------------------------

def gaussian_one_step(sigma, n: int, tail):
  """Upper and lower laws of X = L(Y), Y ~ Q, on an n-knot log lattice.

  Loss ell = ln X ~ N(-mu, 2 mu) under Q and N(mu, 2 mu) under P, mu =
  1/(2 sigma^2). Window [-mu - z s, mu + z s], s = 1/sigma, z = -ndtri(tail).
  Cell integrals by 8-point Gauss-Legendre (cells are <= 20 s / n wide in
  z-units, where the rule is exact to rounding).
  """
  sigma = jnp.asarray(sigma, jnp.float64)
  mu = 0.5 / sigma**2
  s = 1.0 / sigma
  z = -ndtri(jnp.asarray(tail, jnp.float64))
  lo = -mu - z * s
  hi = mu + z * s
  D = (hi - lo) / (n - 1)
  j = jnp.arange(n - 1, dtype=jnp.float64)
  # nodes: (n-1, 8)
  xi = jnp.asarray(_GL_X)
  w = jnp.asarray(_GL_W)
  rel = xi[None, :] * D                                  # ell - u_c
  ell = lo + j[:, None] * D + rel
  zq = (ell + mu) / s
  logphi = -0.5 * zq**2                                  # up to constants
  # cell-wise stabilisation
  cmax = jnp.max(logphi, axis=1, keepdims=True)
  wt = w[None, :] * jnp.exp(logphi - cmax)
  sw = jnp.sum(wt, axis=1)
  logM = jnp.log(sw) + cmax[:, 0] + jnp.log(D / s) - 0.5 * jnp.log(2 * jnp.pi)
  M = jnp.exp(logM)                                      # Q-mass of cell
  gfrac = jnp.sum(wt * jnp.expm1(rel), axis=1) / sw      # E[X/x_c - 1 | cell]
  om = jnp.clip(gfrac / jnp.expm1(D), 0.0, 1.0)
  p = jnp.zeros(n).at[:-1].add(M * (1.0 - om)).at[1:].add(M * om)
  # tails
  # Q(ell < lo), P(ell < lo) = E_Q[X; .], Q(ell > hi), P(ell > hi): one log_ndtr
  ML, FL, MR, FR = jnp.exp(log_ndtr(jnp.stack([(lo + mu) / s, (lo - mu) / s, -(hi + mu) / s,
                                               -(hi - mu) / s])))
  to0 = FL * jnp.exp(-lo)
  p = p.at[0].add(to0)
  q0 = jnp.maximum(ML - to0, 0.0)
  p = p.at[-1].add(MR)
  minf = jnp.maximum(FR - MR * jnp.exp(hi), 0.0) + 4 * _EPS * FR
  up = UpperLaw(p, q0, minf)
  a = jnp.concatenate([M, jnp.zeros(1)])
  g = jnp.concatenate([M * (1.0 + gfrac), jnp.zeros(1)])
  lw = LowerLaw(a, g, jnp.zeros(()))
  lat = Lattice(lo, D, jnp.zeros((), jnp.int32))
  return up, lw, lat


def laplace_one_step(scale, n: int, tail):
  """Upper and lower laws of X = L(Y), Y ~ Q for the Laplace mechanism.

  Q = Lap(0, b), P = Lap(1, b): ell(y) = (|y| - |y - 1|)/b in [-1/b, 1/b],
  with atoms e^{-1/b} (y <= 0, Q-mass 1/2) and e^{1/b} (y >= 1, Q-mass
  e^{-1/b}/2), and a continuous part on (0, 1): ell = (2y - 1)/b, Q-density
  e^{-y/b}/(2b).
  """
  b = jnp.asarray(scale, jnp.float64)
  e = 1.0 / b
  lo, hi = -e, e
  D = (hi - lo) / (n - 1)
  j = jnp.arange(n - 1, dtype=jnp.float64)
  xi = jnp.asarray(_GL_X)
  w = jnp.asarray(_GL_W)
  rel = xi[None, :] * D
  ell = lo + j[:, None] * D + rel
  # y = (b ell + 1)/2, dy = b/2 dell; Q density in ell: e^{-y/b}/(2b) * b/2
  logf = -((b * ell + 1.0) / 2.0) / b
  cmax = jnp.max(logf, axis=1, keepdims=True)
  wt = w[None, :] * jnp.exp(logf - cmax)
  sw = jnp.sum(wt, axis=1)
  M = sw * jnp.exp(cmax[:, 0]) * D * 0.25
  gfrac = jnp.sum(wt * jnp.expm1(rel), axis=1) / sw
  om = jnp.clip(gfrac / jnp.expm1(D), 0.0, 1.0)
  p = jnp.zeros(n).at[:-1].add(M * (1.0 - om)).at[1:].add(M * om)
  p = p.at[0].add(0.5).at[-1].add(0.5 * jnp.exp(-e))
  up = UpperLaw(p, jnp.zeros(()), jnp.zeros(()))
  a = jnp.concatenate([M, jnp.zeros(1)]).at[0].add(0.5).at[-1].add(0.5 * jnp.exp(-e))
  g = jnp.concatenate([M * (1.0 + gfrac), jnp.zeros(1)]).at[0].add(0.5).at[-1].add(
      0.5 * jnp.exp(-e))
  lw = LowerLaw(a, g, jnp.zeros(()))
  return up, lw, Lattice(jnp.asarray(lo), D, jnp.zeros((), jnp.int32))
