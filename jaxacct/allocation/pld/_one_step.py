"""One-step laws of the Gaussian and Laplace mechanisms, jittable (private).

:func:`gaussian_one_step` and :func:`laplace_one_step` (one lane; traced input
builds its laws in-program) are the in-program twins of
:func:`jaxacct._core.one_step.one_steps` (NumPy, concrete lanes). The jitted law
builder (:func:`jaxacct.allocation.pld._laws.laws_batch`) takes the host arrays as
inputs for concrete lanes instead of computing them in-program: the quantile
``ndtri``, the four ``log_ndtr`` tails and the Gauss-Legendre cell integrals
would add many instructions to a program compiled in every fresh process,
for work that is cheap per lane on the host. It also lets one compiled
program serve both mechanisms.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, ndtri

from jaxacct._core.one_step import GL_W, GL_X
from jaxacct.allocation.pld._law_types import Lattice, LowerLaw, UpperLaw

_EPS = float(np.finfo(np.float64).eps)


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
  xi = jnp.asarray(GL_X)
  w = jnp.asarray(GL_W)
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
  xi = jnp.asarray(GL_X)
  w = jnp.asarray(GL_W)
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
