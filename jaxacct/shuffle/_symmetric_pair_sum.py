r"""The block-recurrence hockey-stick sum of the symmetric zero-leftover pairs.

One formula for both paths of the clone pair and the stronger clone
(:mod:`._pair_fast`, whose docstring states the recurrences and the rounding
allowance): ``ns = JAX`` inside the jitted kernels, ``ns = HOST`` for one
question on the host (no compiled program). The special functions differ
only in who evaluates them (:func:`special`): jax's ``gammaln`` and
``betainc`` in the kernels, SciPy's on the host. They differ by up to 1.2e-10
relative (the float64 error of jax's ``betainc`` at arguments ~1e5, from the
rounding of XLA's ``lgamma`` in its log-Beta prefactor), which the kernels'
rounding allowance covers; the host values are the more accurate ones.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
from jax.scipy.special import gammaln

from jaxacct._core import binomial
from jaxacct._core.logmath import log_binom_pmf
from jaxacct._core.namespace import HOST, JAX
from jaxacct.shuffle import _windows as windows

_EPS64 = float(np.finfo(np.float64).eps)


class Special(NamedTuple):
  window_start: object
  cut_mass: object
  log_bin_prob: object
  binom_sf: object
  lgamma: object


_JAX_SPECIAL = Special(windows.window_start, windows.cut_mass, log_binom_pmf,
                       binomial.binom_sf, gammaln)


@functools.lru_cache(maxsize=None)
def _host_special() -> Special:
  sp = HOST.sp   # scipy.special, imported with the first host question
  return Special(functools.partial(windows.window_start, xp=np),
                 functools.partial(windows.cut_mass, xp=np, betainc=sp.betainc),
                 functools.partial(log_binom_pmf, xp=np, gammaln=sp.gammaln),
                 functools.partial(binomial.binom_sf, xp=np, betainc=sp.betainc),
                 sp.gammaln)


def special(ns) -> Special:
  """The binomial helpers of the namespace ``ns``: jax's special functions in
  the kernels, SciPy's on the host."""
  return _host_special() if ns.is_host else _JAX_SPECIAL


def sym_setup(n, p, beta, q, width, ns=JAX, fixed_tail: bool = False):
  """e-independent parts of the fast kernel for one lane (scalars).

  ``fixed_tail`` (``ns = JAX``): the cut mass by
  :func:`._windows.betainc_fixed`, a loop of known trip count (the
  accelerator layout; the same formula, rounding apart)."""
  xp, f = ns.xp, special(ns)
  alpha = beta / (p - 1.0)
  r = alpha * p / q
  total = 2.0 * r
  lo = f.window_start(n, total, width)
  c = lo + xp.arange(width, dtype=xp.float64)
  valid = c <= n
  # Loader's saddle-point pmf (1e-14 absolute in log at n = 1e7; the gammaln
  # difference loses ~1e-8 there)
  w = xp.where(valid, xp.exp(f.log_bin_prob(c, n, total)), 0.0)
  if fixed_tail:
    tail = windows.cut_mass(n, total, lo, width, betainc=windows.betainc_fixed)
  else:
    tail = f.cut_mass(n, total, lo, width)
  return alpha, r, lo, c, w, tail


def thresholds(e, p, cb, xp):
  """Each cell's threshold ``floor(c theta) + 1`` at e = exp(eps): the only way
  :func:`block_terms` depends on ``e`` and ``p``."""
  theta = (p * e - 1.0) / ((p - 1.0) * (1.0 + e))
  theta = xp.clip(theta, 0.0, 1.0)
  return xp.floor(cb * theta) + 1.0


def block_starts(lo, nb, xp):
  """1 for a block that starts at c = 0 (anchored at c = 1), else 0: ``[nb]``."""
  return xp.where((xp.arange(nb) == 0) & (lo == 0), 1, 0)


class HostBlockTerms:
  """:func:`block_terms` of one host lane (NumPy) along the evaluations of a
  solve: a block is recomputed only where one of its thresholds moved (a
  block's terms depend on its own thresholds alone, so the others are kept,
  the same values). Near the root a Newton step moves ``e`` by ~1e-13: no
  threshold moves and the block terms of the last evaluation answer."""

  def __init__(self, lo, c, block):
    nb = c.shape[0] // block
    self.cb = c.reshape(nb, block)
    self.s = block_starts(lo, nb, np)
    self.tb = None
    self.terms = None

  def __call__(self, e, p):
    tb = thresholds(e, p, self.cb, np)
    if self.tb is None:
      self.terms = block_terms(e, p, None, None, self.cb, self.s, ns=HOST)
    else:
      idx = np.nonzero(np.any(tb != self.tb, axis=1))[0]
      if idx.size:
        sub = block_terms(e, p, None, None, self.cb[idx], self.s[idx], ns=HOST)
        terms = tuple(t.copy() for t in self.terms)
        for t, u in zip(terms, sub):
          t[idx] = u
        self.terms = terms
    self.tb = tb
    return self.terms


def block_terms(e, p, alpha, r, cb, s, ns=JAX, fixed: bool = False, axis_name="lanes"):
  """Per-cell terms of the hockey-stick sum at e = exp(eps), block by block.

  ``cb``: cells ``[nb, block]`` (a lane's window, or blocks of several lanes);
  ``s``: ``[nb]``, 1 where a block starts at c = 0 (anchored at c = 1: the
  c = 0 cell contributes exactly 0); the lane parameters ``e, p, alpha, r``
  scalars or ``[nb, 1]``. ``fixed``: the anchors' incomplete beta by
  :func:`._windows.betainc_fixed`, running while any anchor of the program
  (over the vmapped axis ``axis_name`` when given) has not converged.

  Returns ``(x, b, err_g, rel_b, live, ok)``: ``[nb, block]`` arrays (the
  binomial tails and pmfs of the cells, their rounding allowances, the cells
  that count: the inputs of :func:`cell_terms`) and ``[nb]`` (every
  threshold step of the block in {0, 1}).
  """
  xp, f = ns.xp, special(ns)
  nb, block = cb.shape
  rho = 0.5
  tb = thresholds(e, p, cb, xp)
  mb = cb - 1.0
  ca = cb[:, 0] + s
  ta = xp.where(s == 1, tb[:, 1], tb[:, 0])
  ma = ca - 1.0
  if fixed and not ns.is_host:
    # over the program's anchors, as jax's betainc of the vmapped CPU kernel
    xa = binomial.binom_sf(ta, ma, rho, betainc=functools.partial(windows.betainc_fixed,
                                                                 axis_name=axis_name))
  else:
    xa = f.binom_sf(ta, ma, rho)
  # jax's betainc is not correctly rounded: against scipy its relative error
  # was <= 0.5 M eps for m <= 1e7 (one outlier of 7.9 M eps at m = 3e7),
  # with M the magnitude of the log-Gamma terms of its prefactor; allow 16 M
  # eps on each anchor (added to delta through err_g below).
  lg = xp.abs(f.lgamma(xp.stack([ma + 1.0, xp.maximum(ta, 1.0),
                                   xp.maximum(ma - ta + 2.0, 1.0)])))  # one call
  mag = lg[0] + lg[1] + lg[2] + (ma + 1.0) * math.log(2.0) + 1.0
  err_anchor = 16.0 * _EPS64 * mag * xp.abs(xa)
  lfa = f.log_bin_prob(ta - 1.0, ma, rho)
  # steps i -> i+1 inside a block
  ti, mi = tb[:, :-1], mb[:, :-1]
  d = tb[:, 1:] - ti
  ok = xp.all((d == 0) | (d == 1), axis=1)
  active = xp.arange(block - 1)[None, :] >= s[:, None]
  d0 = d == 0
  ratio = xp.where(d0, (mi + 1.0) / (2.0 * xp.maximum(mi - ti + 2.0, 1.0)),
                    (mi + 1.0) / (2.0 * xp.maximum(ti, 1.0)))
  g = xp.where(d0, 0.5, (ti - mi - 1.0) / (2.0 * xp.maximum(ti, 1.0)))
  logr = xp.where(active, xp.log(ratio), 0.0)
  zero = xp.zeros((nb, 1))
  cums = xp.concatenate([zero, xp.cumsum(logr, axis=1)], axis=1)
  logb = lfa[:, None] + cums
  b = xp.exp(logb)
  incr = xp.where(active, b[:, :-1] * g, 0.0)
  gsum = xp.concatenate([zero, xp.cumsum(incr, axis=1)], axis=1)
  gval = xa[:, None] + gsum
  # rounding allowance of the recurrences (relative to the anchor values)
  kk = xp.maximum(xp.arange(block)[None, :] - s[:, None], 0).astype(xp.float64)
  big_l = xp.max(xp.abs(logr), axis=1, keepdims=True)
  fin_logb = xp.where(xp.isfinite(logb), xp.abs(logb), 0.0)
  # + 64: the anchor log-pmf's own absolute error (Loader form, <= ~40 eps
  # measured against mpmath up to n = 1e9)
  rel_b = 1.01 * _EPS64 * (kk * (3.0 + big_l) + kk * kk * big_l + fin_logb + 66.0)
  err_inc = xp.where(active, xp.abs(incr) * (rel_b[:, :-1] + 2.0 * _EPS64), 0.0)
  abs_inc = xp.concatenate([zero, xp.cumsum(xp.abs(incr), axis=1)], axis=1)
  err_g = 1.01 * (xp.concatenate([zero, xp.cumsum(err_inc, axis=1)], axis=1)
                  + (kk + 1.0) * _EPS64 * (xp.abs(xa)[:, None] + abs_inc)
                  + err_anchor[:, None])
  x = xp.clip(gval, 0.0, 1.0)
  live = (kk >= 0) & ~(xp.arange(block)[None, :] < s[:, None])
  return x, b, err_g, rel_b, live, ok


def cell_terms(e, p, alpha, r, c, x, f, err_g, rel_b, live, xp):
  """The terms of delta, of its rounding allowance and of the Q-mass at each
  cell ``c`` (elementwise; before the pmf weights), from :func:`block_terms`."""
  rho = 0.5
  sig = alpha * (p - 1.0) * (1.0 + e) / r
  v = (1.0 - p * e) * alpha / r
  kap = v * c
  a1 = sig * c * rho
  term1 = a1 * (x + f)
  term2 = kap * (x + rho * f)
  inner = xp.where(live, xp.maximum(term1 + term2, 0.0), 0.0)
  allow = xp.where(live, xp.abs(a1 + kap) * err_g
                    + xp.abs(a1 + kap * rho) * f * rel_b
                    + 4.0 * _EPS64 * (xp.abs(term1) + xp.abs(term2)), 0.0)
  qm = (alpha / r) * ((1.0 - p) * c * rho * (x + f) + p * c * (x + rho * f))
  return inner, allow, qm


def finish_delta(e, p, n, width, h_sum, allow_sum, tail, ok, xp):
  """A lane's delta from its sums: ``h = sum(w inner) / n`` plus the rounding
  allowance (the terms' own, and ``2 width eps h`` for any order of the
  window's sum) plus the cut mass; 1 where a threshold step was not in {0, 1};
  0 where ``e >= p``."""
  h = h_sum / n
  allowance = 1.01 * (allow_sum / n + 2.0 * width * _EPS64 * h)
  dl = h + allowance + tail
  dl = xp.where(ok, dl, 1.0)
  return xp.where(e >= p, 0.0, xp.clip(dl, 0.0, 1.0))


def sym_eval(e, n, p, alpha, r, lo, c, w, tail, block, ns=JAX, fixed: bool = False,
             terms=None):
  """(delta, Q-mass, ok) at e = exp(eps) for one lane of the fast kernel.

  ``fixed`` (``ns = JAX``, under a ``vmap`` of axis name ``"lanes"``): the
  anchors' incomplete beta by :func:`._windows.betainc_fixed`, a loop of
  known trip count that runs while any anchor of the block's lanes has not
  converged (the accelerator layout; jax's steps, rounding apart).
  ``terms`` (``ns = HOST``): a :class:`HostBlockTerms` of this lane, which
  keeps the block terms between evaluations (the same values).

  delta includes the cut mass ``tail`` and the rounding allowance; Q-mass is
  ``-d delta / d e`` (the Q-probability of the set {P > e Q}), >= 0.
  ``ok`` is False where a threshold step was not in {0, 1} (then delta = 1,
  the trivial bound).
  """
  xp = ns.xp
  width = c.shape[0]
  nb = width // block
  if terms is not None:
    x, f, err_g, rel_b, live, ok = terms(e, p)
  else:
    # block 0 starts at c = 0 when lo == 0: anchor it at c = 1
    s = block_starts(lo, nb, xp)
    x, f, err_g, rel_b, live, ok = block_terms(e, p, alpha, r, c.reshape(nb, block), s,
                                                ns=ns, fixed=fixed)
  x, f, err_g, rel_b, live = (t.reshape(-1) for t in (x, f, err_g, rel_b, live))
  inner, allow, qm = cell_terms(e, p, alpha, r, c, x, f, err_g, rel_b, live, xp)
  ok = xp.all(ok)
  qmass = xp.maximum(xp.sum(xp.where(live, w * qm, 0.0)) / n, 0.0)
  dl = finish_delta(e, p, n, width, xp.sum(w * inner), xp.sum(w * allow), tail, ok, xp)
  return rr_sandwich(dl, qmass, e, p, n, xp) + (ok,)


def rr_sandwich(dl, qmass, e, p, n, xp):
  """``(delta, Q-mass)`` checked against the bounds every member's pair obeys: at
  most eps0-randomized response's delta ``(p - e)^+ / (p + 1)`` (the shuffled
  reports are eps0-DP), at least ``(1 - 2 / (p + 1))^(n - 1)`` of it (no other
  report is a clone, a clone's probability being at most ``2 / (p + 1)``: then the
  pair is that response). Where e^eps0 is large the sums lose every digit (delta 0
  at eps0 = 40, n = 1000, under the response's 0.632; NaN past e^(2 eps0)): a
  delta below the lower bound, or NaN, is wrong, and the response's delta (an
  upper bound) replaces it, as it replaces one above it (invalid lanes are NaN
  again at the callers). Q-mass follows: the response's ``1 / (p + 1)`` there."""
  rr = xp.maximum(p - e, 0.0) / (p + 1.0)
  no_clone = xp.exp((n - 1.0) * xp.log1p(-2.0 / (p + 1.0)))
  held = xp.where((dl < no_clone * rr) | xp.isnan(dl), rr, xp.minimum(dl, rr))
  moved = held != dl
  return held, xp.where(moved, xp.where(e < p, 1.0 / (p + 1.0), 0.0), qmass)
