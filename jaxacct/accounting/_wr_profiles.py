r"""One-step privacy profiles for m draws with replacement, then the Gaussian (host NumPy).

Helpers of :func:`jaxacct.accounting.fixed_size.with_replacement_profile`
(the derivations are in docs/bounds/fixed_size.md,
"With replacement"). Inputs: ``w[k] = P(K = k)``, K ~ Bin(m, 1/n), k =
0..k_max; sigma > 0; ``eps >= 0`` (1-D float64 array). Every profile is
``H_{e^eps}`` of a pair of 1-D Gaussian mixtures with shifts ``2k`` whose
privacy loss increases along the line, so it is ``P(Y > y*) - e^eps Q(Y >
y*)`` at the root y* of ``log p(y) - log q(y) = eps``: a monotone root,
found by bisection at every 64th point and a safeguarded Newton iteration
from there (each root bracketed by its neighbours' roots).

Derivations and sources: docs/bounds/fixed_size.md ("Bounds and proofs /
Fixed-size batches").
"""

from __future__ import annotations

import numpy as np
from scipy import special


def _roots(lw_p, dp, lw_q, dq, s, target):
  """y with ``log p(y) - log q(y) = target`` (increasing in y), p = sum_k
  e^{lw_p} N(dp_k, s^2), q likewise; vectorised over ``target``."""
  def f(y):
    tp = lw_p - (y[:, None] - dp) ** 2 / (2 * s * s)
    tq = lw_q - (y[:, None] - dq) ** 2 / (2 * s * s)
    ep = np.exp(tp - tp.max(axis=1)[:, None])
    eq = np.exp(tq - tq.max(axis=1)[:, None])
    val = (tp.max(axis=1) + np.log(ep.sum(axis=1)) - tq.max(axis=1) - np.log(eq.sum(axis=1)))
    mp = ep @ dp / ep.sum(axis=1)            # E[shift | y] under p and q
    mq = eq @ dq / eq.sum(axis=1)
    return val, (mp - mq) / (s * s)

  def bracket(t):
    lo, hi = np.full(t.size, -1.0), np.full(t.size, 1.0)
    for _ in range(64):
      bad = f(hi)[0] < t
      if not bad.any():
        break
      hi[bad] *= 2.0
    for _ in range(64):
      bad = f(lo)[0] > t
      if not bad.any():
        break
      lo[bad] *= 2.0
    return lo, hi

  def solve(t, lo, hi, iters):
    """Newton, bisecting when a step leaves the bracket; each point stops
    at |residual| <= 1e-11 max(1, |t|) (float noise of the two log-sums
    is ~1e-13 of their size) or a bracket of 1e-13 relative."""
    y = (lo + hi) / 2
    act = np.arange(t.size)
    for _ in range(iters):
      val, slope = f(y[act])
      g = val - t[act]
      yl, yh, ya = lo[act], hi[act], y[act]
      yl, yh = np.where(g < 0, ya, yl), np.where(g < 0, yh, ya)
      nxt = ya - g / np.maximum(slope, 1e-300)
      nxt = np.where((nxt > yl) & (nxt < yh), nxt, (yl + yh) / 2)
      done = (np.abs(g) <= 1e-11 * np.maximum(1.0, np.abs(t[act]))) | (
          yh - yl <= 1e-13 * (1.0 + np.abs(ya)))
      lo[act], hi[act] = yl, yh
      y[act] = np.where(done, ya, nxt)
      act = act[~done]
      if act.size == 0:
        break
    return y

  idx = np.unique(np.append(np.arange(0, target.size, 64), target.size - 1))
  lo, hi = bracket(target[idx])
  coarse = solve(target[idx], lo, hi, 200)
  order = np.argsort(target[idx])
  tc, yc = target[idx][order], coarse[order]
  # targets ascend with their index, so each lies between two coarse ones
  pos = np.clip(np.searchsorted(tc, target), 1, max(tc.size - 1, 1))
  slack = 1e-9 * (1.0 + np.abs(yc))
  lo = (yc - slack)[pos - 1]
  hi = (yc + slack)[np.minimum(pos, tc.size - 1)]
  return solve(target, np.minimum(lo, hi), np.maximum(lo, hi), 200)


def hockey(w_p, d_p, w_q, d_q, s, log_a):
  """``H_a(sum w_p N(d_p, s^2) || sum w_q N(d_q, s^2))`` at ``a = e^log_a``
  (the loss must increase in y: every ``d_p >= 0 >= d_q``, or ``d_q = 0``)."""
  kp, kq = w_p > 0, w_q > 0
  w_p, d_p, w_q, d_q = w_p[kp], d_p[kp], w_q[kq], d_q[kq]
  y = _roots(np.log(w_p), d_p, np.log(w_q), d_q, s, log_a)
  out = -np.exp(log_a) * (special.ndtr((d_q - y[:, None]) / s) @ w_q)
  out += special.ndtr((d_p - y[:, None]) / s) @ w_p
  return np.maximum(out, 0.0)


def split(w, sigma, eps):
  """``(upper, revealed, hidden)`` of the split bound (no cut tail)."""
  r = 1.0 - float(w[0]) if w[0] < 1 else 1.0
  k = np.nonzero(w[1:] > 0)[0] + 1
  pi, d, s = w[k] / r, 2.0 * k, float(sigma)
  em1 = np.expm1(eps)
  lap = np.log1p(em1 / r)                       # log a'
  ap = np.exp(lap)
  b = np.exp(eps) * r / (r + em1)
  rev = np.zeros(lap.size)
  for p, dk in zip(pi, d):                      # one Gaussian of shift dk: exact
    mu = dk / s
    rev += p * (special.ndtr(mu / 2 - lap / mu) - ap * special.ndtr(-mu / 2 - lap / mu))
  hid = hockey(pi, d, np.ones(1), np.zeros(1), s, lap)
  rev = np.maximum(rev, hid)                    # joint convexity: hidden <= revealed
  return r * hid + r * b * (rev - hid), r * rev, r * hid


def double_mixture(w, sigma, eps):
  """``H_{e^eps}(sum_k w_k N(2k) || sum_k w_k N(-2k))`` (no cut tail)."""
  d = 2.0 * np.arange(w.size)
  return hockey(w, d, w, -d, float(sigma), eps)


def lower_hull(x, y, rtol=1e-9):
  """The greatest convex minorant of the points (x ascending), at x, up to
  concavities below ``rtol`` (relative): those are float noise, and the
  caller's clipping of negative masses lifts the curve over them."""
  idx = np.arange(x.size)
  while idx.size > 2:
    a, b = x[idx], y[idx]
    cross = (a[1:-1] - a[:-2]) * (b[2:] - b[:-2]) - (b[1:-1] - b[:-2]) * (a[2:] - a[:-2])
    size = (a[2:] - a[:-2]) * np.maximum(np.abs(b[:-2]), np.abs(b[1:-1]))
    drop = np.nonzero(cross < -rtol * size)[0] + 1   # above the chord of its neighbours
    if drop.size == 0:
      break
    drop = drop[np.insert(np.diff(drop) > 1, 0, True)]   # never two neighbours at once
    idx = np.delete(idx, drop)
  return np.interp(x, x[idx], y[idx])
