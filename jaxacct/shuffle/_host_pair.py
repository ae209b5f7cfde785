r"""Host (NumPy) path of the scalar shuffling questions: no compiled program.

One lane of ``pair_fast.sym_epsilon_fast`` / ``sym_delta_fast`` (the clone
pair and the stronger clone) and of the App. G binary-RR lower bound
(``clones.rr2_lower_epsilon`` / ``rr2_lower_delta``), operation for operation
in NumPy float64 with the special functions of
:mod:`jaxacct.shuffle._host_math`. The eager doors use it for a single
(scalar) question, where the jitted kernels would cost 1-3 s of XLA
compilation each in a fresh process for a few milliseconds of arithmetic;
arrays still go to the vmapped jitted kernels (the sweep API).

Same formulas, same window, same rounding allowance, same safeguarded Newton
iteration (``solve.safeguarded_root``) and bisection (``solve.bracket_decreasing``
without Illinois steps): the returned right end of the Newton bracket is
feasible for the upper-bounding delta, the rr2 value is the lower
(infeasible) end of its bracket. Agreement with the jitted kernels is
checked in ``tests/test_shuffle_host.py`` (relative 1e-12 over a grid).
"""

from __future__ import annotations

import math

import numpy as np

from jaxacct._core.namespace import HOST
from jaxacct.shuffle import _host_math as hm
from jaxacct.shuffle._symmetric_pair_sum import sym_eval, sym_setup

_EPS64 = float(np.finfo(np.float64).eps)


def one_question(*xs) -> bool:
  """Whether concrete inputs are one question, every input a scalar (the host
  path's domain; called by a ``dtype.dispatch`` host, after the traced fork)."""
  return all(np.size(x) == 1 for x in xs)


def scalar(x) -> float:
  return float(np.ravel(x)[0])


def _sym_at(e, n, p, setup, block):
  """(delta, Q-mass) at e = exp(eps), floats: :func:`._symmetric_pair_sum.sym_eval` on the host."""
  with np.errstate(all="ignore"):
    d, qm, _ = sym_eval(e, n, p, *setup, block, ns=HOST)
  return float(d), float(qm)


def _setup(n, p, beta, q, width):
  with np.errstate(all="ignore"):
    return sym_setup(n, p, beta, q, width, ns=HOST)


def sym_bad(n, p, beta, q) -> bool:
  """``pair_fast._sym_bad`` for one lane (NaN lanes of the jitted kernel)."""
  alpha = beta / (p - 1.0)
  s = 1.0 - alpha * p / q - alpha * p / q
  bad = ((p <= 1.0) or (beta <= 0) or (beta > (p - 1.0) / (p + 1.0) * (1 + 1e-12))
         or (q < 1.0) or (q > p * q * (1 + 1e-12)) or (s < -1e-12) or (n < 1)
         or (n != math.floor(n)) or math.isnan(p + beta + q + q + n))
  return bool(bad or abs(beta * (p + 1.0) / (p - 1.0) - 1.0) > 1e-12)


def sym_delta(eps, n, p, beta, q, width, block):
  """``pair_fast.sym_delta_fast`` for one lane (float)."""
  if sym_bad(n, p, beta, q) or math.isnan(eps) or eps < 0:
    return float("nan")
  setup = _setup(n, p, beta, q, width)
  return _sym_at(math.exp(eps), n, p, setup, block)[0]


def _propose(x, d, qm, a, b, tgt):
  """``pair_fast._sym_fast_eps_scalar``'s Newton proposal."""
  e = math.exp(x)
  feas = d <= tgt
  safe_q = qm if qm > 0 else 1.0
  ratio = d / tgt if d > 0 else 1.0
  ld = math.log(d if d > 0 else 1.0)
  lt = math.log(tgt)
  phi = math.sqrt(max(-2.0 * ld, 0.0))
  phi_t = math.sqrt(-2.0 * lt)
  with np.errstate(all="ignore"):
    dphi = (np.float64(e) * safe_q / (d if d > 0 else 1.0)
            / (phi if phi > 0 else 1.0))
    x_phi = x + (phi_t - phi) / dphi
    x_log = (x_phi if (d < 0.5) and (tgt < 0.5)
             else x + np.log(np.float64(ratio)) * d / (e * safe_q))
    step_e = (d - tgt) / safe_q
    x_lin = np.log(np.float64(e + step_e * 1.001)) + 8.0 * _EPS64 * (1.0 + x)
    x_logf = x_log - 1e-3 * (x - x_log) - 8.0 * _EPS64 * (1.0 + x)
  x_new = float(x_logf if feas else (x_log if d > 20.0 * tgt else x_lin))
  good = (qm > 0) and (d > 0) and math.isfinite(x_new) and a < x_new < b
  return x_new if good else 0.5 * (a + b)


def sym_epsilon(delta, n, p, beta, q, width, block, max_iter=40, rtol=1e-13):
  """``pair_fast.sym_epsilon_fast`` for one lane: ``(eps, bracket width)``."""
  if (sym_bad(n, p, beta, q) or not 0.0 < delta < 1.0):
    return float("nan"), float("nan")
  setup = _setup(n, p, beta, q, width)
  # solve.safeguarded_root, step -1 evaluating x0 = a = 0
  a, b, xn, it, wlast = 0.0, math.log(p), 0.0, -1, math.inf
  while it < max_iter:
    d, qm = _sym_at(math.exp(xn), n, p, setup, block)
    feas = d <= delta
    a2, b2 = (a, xn) if feas else (xn, b)
    chk = (it % 4) == 3
    slow = chk and (b2 - a2) > 0.5 * wlast
    if chk:
      wlast = b2 - a2
    xp = _propose(xn, d, qm, a2, b2, delta)
    if slow:
      xp = 0.5 * (a2 + b2)
    a, b, xn, it = a2, b2, xp, it + 1
    if (b2 - a2) <= rtol * b2:
      break
  return b, b - a


# ---------------------------------------------------------------------------
# FMT'21 App. G: the binary-RR lower bound
# ---------------------------------------------------------------------------

def _rr2_pmfs(n, eps0, width):
  """``clones._rr2_pmfs`` for one lane."""
  pi = 1.0 / (np.exp(eps0) + 1.0)
  lpi, l1pi = -np.log1p(np.exp(eps0)), -np.log1p(np.exp(-eps0))
  lo = float(hm.window_start(n, pi, width))
  y = lo + np.arange(width, dtype=np.float64)
  lz_ext = hm.log_bin_prob(lo - 1.0 + np.arange(width + 1, dtype=np.float64),
                            n - 1.0, pi)
  lz, lzm = lz_ext[1:], lz_ext[:-1]
  with np.errstate(all="ignore"):
    p0 = np.exp(np.logaddexp(l1pi + lz, lpi + lzm))
    p1 = np.exp(np.logaddexp(lpi + lz, l1pi + lzm))
  keep = y <= n
  return p0, p1, keep, lo, float(pi)


def _rr2_hockey(eps, eps0, p0, p1, keep):
  if eps >= eps0:
    return 0.0
  e = math.exp(eps)
  h01 = np.sum(np.where(keep, np.maximum(p0 - e * p1, 0.0), 0.0))
  h10 = np.sum(np.where(keep, np.maximum(p1 - e * p0, 0.0), 0.0))
  return float(max(h01, h10))


def rr2_delta(eps, n, eps0, width):
  """``clones._rr2_delta_jit`` for one lane (the windowed sum, a lower bound)."""
  p0, p1, keep, _, _ = _rr2_pmfs(n, eps0, width)
  return _rr2_hockey(eps, eps0, p0, p1, keep)


def rr2_epsilon(delta, n, eps0, width, num_iters=64):
  """``clones._rr2_epsilon_jit`` for one lane: the lower end of 64 bisections."""
  p0, p1, keep, _, _ = _rr2_pmfs(n, eps0, width)
  a, b = 0.0, float(eps0)
  for _ in range(num_iters):
    m = 0.5 * (a + b)
    if _rr2_hockey(m, eps0, p0, p1, keep) - delta <= 0:
      b = m
    else:
      a = m
  return max(a, 0.0)
