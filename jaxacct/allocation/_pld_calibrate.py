"""Tight sigma calibration of k-of-t random allocation over E epochs (private).

The kernel behind :func:`jaxacct.allocation.pld.allocation_pld_calibrate_sigma`:
a grid stage (upper deltas of the composed law at every target, one lane per
grid sigma), a cubic interpolation of log delta_up in log sigma, and the
verification of two sigmas per target computed exactly as the epsilon front
door computes them (:func:`upper_eps_lane`), then bisection for the rare
targets left unresolved (both through :mod:`jaxacct._core.solve`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxacct._core.batching import lanes_per_block, map_blocks
from jaxacct._core.solve import refine_bracket
from jaxacct.allocation import _pld_compose as cp
from jaxacct.allocation import _pld_query as qy
from jaxacct.allocation._pld_laws import delta_one, epsilons, final_laws

BATCH = 4         # lanes per block of the maps on accelerators (~12 MB a lane)
SAFETY = 1e-10    # a calibrated sigma's epsilon is <= target * (1 - SAFETY)


def upper_eps_lane(sigma, f, c1, c2, tail, tau, delta, *, n, mechanism, size, tilts, two,
                    compose):
  """Upper epsilon (max of directions) at delta of one lane (as the front door)."""
  F1 = final_laws(sigma, f, n=n, tail=tail, mechanism=mechanism, lower=False)
  if not compose:
    e = epsilons(F1, delta)
    return jnp.maximum(e[0], e[1])
  F2 = final_laws(sigma, f + 1, n=n, tail=tail, mechanism=mechanism, lower=False) if two \
      else None
  C = cp.compose_laws(F1, F2, c1, c2, tau, delta, mode="eps", size=size, tilts=tilts,
                      two=two, want_lower=False)
  e = qy.composed_epsilons(C, delta)
  return jnp.maximum(e[0], e[1])


def upper_delta_grid(sigma, f, c1, c2, tail, tau, eps, *, n, mechanism, size, tilts, two,
                      compose):
  """max(upper deltas) at every eps (vector) for one sigma."""
  F1 = final_laws(sigma, f, n=n, tail=tail, mechanism=mechanism, lower=False)
  if not compose:
    return jnp.maximum(delta_one(F1, eps, 0), delta_one(F1, eps, 1))
  F2 = final_laws(sigma, f + 1, n=n, tail=tail, mechanism=mechanism, lower=False) if two \
      else None
  C = cp.compose_laws(F1, F2, c1, c2, tau, jnp.median(eps), mode="delta", size=size,
                      tilts=tilts, two=two, want_lower=False)
  d = jax.vmap(lambda e: qy.composed_deltas(C._replace(wl_lo=None), e)[:2])(eps)
  return jnp.maximum(d[0], d[1])


@functools.partial(jax.jit, static_argnames=("n", "mechanism", "size", "tilts", "two",
                                             "compose", "num_grid", "rtol", "max_rounds"))
def calibrate_kernel(eps, delta, f, c1, c2, lo, hi, grid_tail, grid_tau, tails, taus, *, n,
                      mechanism, size, tilts, two, compose, num_grid, rtol, max_rounds):
  kw = dict(n=n, mechanism=mechanism, size=size, tilts=tilts, two=two, compose=compose)
  block = lanes_per_block(BATCH)
  lgrid = jnp.linspace(jnp.log(lo), jnp.log(hi), num_grid)
  eps_m = eps * (1.0 - SAFETY)
  D = map_blocks(lambda ls: upper_delta_grid(jnp.exp(ls), f, c1, c2, grid_tail, grid_tau,
                                              eps_m, **kw), lgrid, batch_size=block)  # (G, J)
  feas = D <= delta[None, :]
  g = jnp.argmax(feas, axis=0)
  any_f = jnp.any(feas, axis=0)
  status = jnp.where(any_f, jnp.where(g == 0, 2, 0), 1)     # 1: none feasible, 2: lo feasible
  gc = jnp.clip(g, 1, num_grid - 1)
  # cubic interpolation of log(D / delta) in log sigma through 4 grid points
  start = jnp.clip(gc - 2, 0, num_grid - 4)
  idx = start[None, :] + jnp.arange(4)[:, None]                          # (4, J)
  xs = lgrid[idx]
  ys = jnp.log(jnp.maximum(jnp.take_along_axis(D, idx, axis=0), 1e-300)) - jnp.log(delta)

  def poly(x):
    out = jnp.zeros_like(x)
    for i in range(4):
      li = jnp.ones_like(x)
      for j in range(4):
        if j != i:
          li = li * (x - xs[j]) / (xs[i] - xs[j])
      out = out + li * ys[i]
    return out

  a, b = lgrid[gc - 1], lgrid[gc]          # a infeasible, b feasible (status 0)

  pa, pb = refine_bracket(lambda x: poly(x) <= 0, a, b, tol=0.0, max_iters=40)
  est = 0.5 * (pa + pb)
  step = jnp.log1p(rtol / 3.0)
  cand_hi = jnp.minimum(est + step, b)
  cand_lo = jnp.maximum(est - step, a)

  def evaluate(ls):      # feasibility of sigma = exp(ls) per target (front-door computation)
    e = map_blocks(lambda x: upper_eps_lane(jnp.exp(x[0]), f, c1, c2, x[1], x[2], x[3], **kw),
                   (ls, tails, taus, delta), batch_size=block)
    return e <= eps_m

  # the two points either side of the interpolated root, then bisection: one
  # loop, so the front-door evaluation is compiled once
  a, b = refine_bracket(evaluate, a, b, tol=jnp.log1p(rtol), max_iters=max_rounds,
                        active=status == 0, probes=(cand_hi, cand_lo))
  return jnp.exp(b), status, b - a
