r"""The Gaussian mechanism: exact privacy profile and RDP (sensitivity 1).

Profile: Balle & Wang, "Improving the Gaussian mechanism for differential
privacy", arXiv:1805.06530v2, Thm 8 (tight, both directions, all real eps):

.. math:: \delta(\varepsilon) = \Phi\Big(\frac{1}{2\sigma}-\varepsilon\sigma\Big)
          - e^{\varepsilon}\Phi\Big(-\frac{1}{2\sigma}-\varepsilon\sigma\Big).

Evaluated as ``exp(log_sub_exp(log_ndtr(a), eps + log_ndtr(b)))`` so that it
neither overflows at large epsilon nor loses the difference to cancellation:
relative error ~1e-15 * |log_ndtr(a)| / gap, where gap = 1 - e^(lb - la) ~
1/(eps sigma^2) when eps sigma is large. The answers are rounded up by that
round-off, each log term allowed 4 ulps of (|l| + 1): delta by its absolute
error, epsilon by that over |d delta / d eps| = e^lb. Measured against mpmath
(tests/_core/test_core.py): never below the exact profile or root; epsilon at
most 3.2e-12 relative above it (median 3e-14), delta 7.6e-9 where both terms
are astronomically small and nearly equal.

RDP: Mironov, arXiv:1702.07476v3, Prop. 7: :math:`R_\alpha = \alpha/(2\sigma^2)`.
"""

from __future__ import annotations

import contextlib
import functools
import math

import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks, compiled
from jaxacct._core.dtype import dispatch, require_x64
from jaxacct._core.logmath import log_mills_series, log_ndtr, log_sub_exp
from jaxacct._core.namespace import HOST, JAX, for_inputs, host_call
from jaxacct._core.results import DeltaResult, EpsilonResult, host_f64


#: Float64 round-off, in units of the two log terms' sizes, that the rounded-up
#: profile and epsilon allow for (``_log_terms``): measured errors reach about one
#: unit (1.8e-13 relative in epsilon at sigma 97.75, delta 2.2e-20).
_ROUND_UNITS = 4.0 * float(np.finfo(np.float64).eps)


def gaussian_log_delta(sigma, epsilon, ns=JAX):
  """Log of the exact Gaussian privacy profile (jittable kernel; ``ns=HOST``:
  the same formula in NumPy/SciPy, :mod:`jaxacct._core.namespace`), to round-off
  (either side; :func:`gaussian_delta_kernel` rounds up)."""
  la, lb, sigma, epsilon = _log_terms(sigma, epsilon, ns)
  return _log_profile(la, lb, sigma, epsilon, ns.xp)


def _log_profile(la, lb, sigma, epsilon, xp):
  out = log_sub_exp(la, xp.minimum(lb, la), xp)
  out = xp.where(epsilon == xp.inf, -xp.inf, out)
  return xp.where(sigma > 0, out, xp.nan)


def _round_off(la, lb, xp):
  """Bound on the absolute error of delta, over e^lb (= -d delta / d epsilon):
  each log term's error is at most ``_ROUND_UNITS (|l| + 1)`` absolute."""
  gap = xp.minimum(la - lb, 700.0)
  return _ROUND_UNITS * ((xp.abs(la) + 1.0) * xp.exp(gap) + xp.abs(lb) + 1.0)


def _log_ndtr(x, ns):
  """log Phi(x): SciPy's on the host, :func:`jaxacct._core.logmath.log_ndtr` in a
  kernel (JAX's own is up to 3.9e-9 absolute off on [-37, -20])."""
  return ns.sp.log_ndtr(x) if ns.is_host else log_ndtr(x)


def _log_terms(sigma, epsilon, ns):
  """(log Phi(a), epsilon + log Phi(b), sigma, epsilon) of the profile."""
  xp = ns.xp
  if not ns.is_host:
    require_x64("gaussian_log_delta")
  sigma = xp.asarray(sigma, xp.float64)
  epsilon = xp.asarray(epsilon, xp.float64)
  a = 0.5 / sigma - epsilon * sigma
  b = -0.5 / sigma - epsilon * sigma
  la = _log_ndtr(a, ns)
  # epsilon + log Phi(b) cancels once b^2/2 ~ epsilon is far above 1/ulp (epsilon 1e18,
  # sigma 7e-10: hundreds off in log delta, an epsilon below the truth). As
  # e^eps phi(b) = phi(a) exactly, for b < -1e3 it is -a^2/2 - log(-b) - log(2 pi)/2 +
  # log(1 - 1/b^2 + 3/b^4 - 15/b^6 + 105/b^8) (next term 945/b^10 < 1e-27).
  far = b < -1e3
  bs = xp.where(far, b, -1e3)
  lb_far = (-0.5 * a * a - xp.log(-bs) - 0.5 * math.log(2.0 * math.pi)
            + log_mills_series(bs, xp))
  lb = xp.where(far, lb_far, epsilon + _log_ndtr(xp.where(far, 0.0, b), ns))
  return la, lb, sigma, epsilon


def gaussian_delta_kernel(sigma, epsilon, ns=JAX):
  """Exact Gaussian privacy profile delta(epsilon), rounded up by its round-off
  bound (:func:`_round_off`; jittable kernel; ``ns`` as above)."""
  xp = ns.xp
  la, lb, sigma, epsilon = _log_terms(sigma, epsilon, ns)
  out = xp.exp(_log_profile(la, lb, sigma, epsilon, xp))
  with _quiet(ns):
    err = _round_off(la, lb, xp) * xp.exp(xp.minimum(lb, la))
  return xp.where(out > 0, xp.minimum(out + err, 1.0), out)


def gaussian_epsilon_kernel(sigma, delta, num_iters: int = 80, ns=JAX):
  """Smallest epsilon >= 0 with delta(epsilon) <= delta (jittable kernel; ``ns`` as above).

  Bisection on ``[0, 1/(2 sigma^2) + sqrt(2 log(1/delta))/sigma]`` (the upper
  end is the RDP bound at the optimal order, so it is always feasible),
  returning the feasible (upper) end: never below the true epsilon.
  """
  xp = ns.xp
  if not ns.is_host:
    require_x64("gaussian_epsilon")
  sigma = xp.asarray(sigma, xp.float64)
  delta = xp.asarray(delta, xp.float64)
  sigma, delta = xp.broadcast_arrays(sigma, delta)
  with _quiet(ns):
    log_delta = xp.log(delta)
    hi = 0.5 / sigma**2 + xp.sqrt(-2.0 * log_delta) / sigma + 1e-12
    x = ns.bisect(lambda e: gaussian_log_delta(sigma, e, ns) - log_delta,
                  xp.zeros_like(hi), hi, increasing=False, num_iters=num_iters)
    # rounded up by the profile's round-off at x (over |d delta / d epsilon| = e^lb)
    la, lb, _, _ = _log_terms(sigma, x, ns)
    x = x + _round_off(la, lb, xp)
    eps = xp.where(gaussian_log_delta(sigma, 0.0, ns) <= log_delta, 0.0, x)
  bad = ~(sigma > 0) | ~(delta > 0) | ~(delta < 1)
  return xp.where(bad, xp.nan, eps)


def _quiet(ns):
  """NumPy's floating-point warnings off on the host (NaN lanes are answers there)."""
  return np.errstate(all="ignore") if ns.is_host else contextlib.nullcontext()


# one compiled program per shape for the eager doors (eager jnp would compile
# ~45 tiny ones); ``gaussian_epsilon_jit`` is THE jitted Gaussian-epsilon
# kernel: every door that needs it on arrays calls this one
_gaussian_delta_jit = compiled.jit(gaussian_delta_kernel)
gaussian_epsilon_jit = compiled.jit(gaussian_epsilon_kernel, static_argnames="num_iters")


def _answer(quantity, sigma, x):
  """The result of a ``quantity`` ("delta" at epsilon ``x``, or "epsilon" at
  delta ``x``) question; ``ns`` (:func:`jaxacct._core.namespace.for_inputs`)
  decides once: one question in NumPy (no compiled program), else the jitted
  kernel."""
  cls, given, kernel, jitted = (
      (DeltaResult, "epsilon", gaussian_delta_kernel, _gaussian_delta_jit)
      if quantity == "delta" else
      (EpsilonResult, "delta", gaussian_epsilon_kernel, gaussian_epsilon_jit))
  if for_inputs(sigma, x).is_host:
    v, g = host_f64(host_call(kernel, sigma, x)), host_f64(x)
  else:
    v, g = jitted(sigma, x), jnp.asarray(x, jnp.float64)
  return cls(**{quantity: v, given: g}, method="gaussian", bound="exact")


def gaussian_delta(sigma, epsilon) -> DeltaResult:
  """Exact delta(epsilon) of the Gaussian mechanism, both directions.

  Balle & Wang, arXiv:1805.06530v2, Thm 8. Jittable (a pytree result).

  Args:
    sigma: noise standard deviation / sensitivity, > 0.
    epsilon: any real (broadcasts with sigma).

  Returns:
    ``DeltaResult(delta, epsilon, method="gaussian", bound="exact")``;
    ``delta`` a float64 array of the broadcast shape, ``epsilon`` the given
    epsilon as a float64 array.

  Bound: exact.
  """
  return dispatch(functools.partial(_answer, "delta"), (sigma, epsilon),
                  lambda: (checks.check_positive("sigma", sigma),
                           checks.check_range("epsilon", epsilon, -jnp.inf, jnp.inf,
                                              allow_inf=True)),
                  where="jaxacct.mechanisms.Gaussian.delta")


def gaussian_epsilon(sigma, delta) -> EpsilonResult:
  """Exact epsilon(delta) of the Gaussian mechanism (bisection, upper side).

  Jittable (a pytree result).

  Args:
    sigma: > 0.
    delta: in (0, 1).

  Returns:
    ``EpsilonResult(epsilon, delta, method="gaussian", bound="exact")``;
    ``epsilon`` a float64 array of the broadcast shape, never below the
    exact root and within about 3e-12 relative above it (its round-off
    bound); ``delta`` the given delta as a float64
    array.

  Bound: exact (to bisection tolerance, rounded up).
  """
  return dispatch(functools.partial(_answer, "epsilon"), (sigma, delta),
                  lambda: (checks.check_positive("sigma", sigma), checks.check_delta(delta)),
                  where="jaxacct.mechanisms.Gaussian.epsilon")


def gaussian_rdp(orders, sigma):
  """RDP of the Gaussian mechanism, alpha / (2 sigma^2) (jittable).

  Mironov, "Renyi differential privacy", arXiv:1702.07476v3, Prop. 7.

  Args:
    orders: Renyi orders >= 1, shape (A,).
    sigma: > 0; any shape S.

  Returns:
    float64 array, shape S + (A,).

  Bound: exact. NaN for sigma <= 0 under jit.
  """
  return dispatch(_gaussian_rdp, (orders, sigma),
                  lambda: (checks.check_orders(orders, open_min=False), checks.check_positive("sigma", sigma)))


def _gaussian_rdp(orders, sigma):
  require_x64("gaussian_rdp")
  orders = jnp.asarray(orders, jnp.float64)
  sigma = jnp.asarray(sigma, jnp.float64)[..., None]
  out = orders / (2.0 * sigma**2)
  return jnp.where(sigma > 0, out, jnp.nan)


def normal_tail_z(tail_mass) -> float:
  """``z`` with ``Phi(-z) <= tail_mass`` (slightly conservative: +0.05), for
  ``tail_mass`` in (0, 0.5]: where the grids of the Gaussian constructions stop."""
  checks.check_range("tail_mass", tail_mass, 0.0, 0.5, lo_open=True)
  return float(-HOST.sp.ndtri(tail_mass)) + 0.05
