r"""Monte Carlo estimate and a provable lower bound for random allocation.

Not accountants: sanity checks for the upper bounds (digest pitfall 13).

* :func:`delta_monte_carlo` -- Monte Carlo **estimate** of the hockey-stick
  divergence of the dominating pair used by every bound here (Feldman &
  Shenfeld, arXiv:2502.08202v3, Thm 3.1 + Lemma 3.2: m = kE rounds of
  1-out-of-t' allocation, t' = floor(t/k)), in the style of Chua et al. 2024
  ("How private are DP-SGD implementations?", arXiv:2403.17673) as used in
  App. F.1:

  .. math:: H_{e^\varepsilon}(P\|Q) = E_{\omega\sim P}\big[[1-e^{\varepsilon-\ell(\omega)}]_+\big],

  per-round loss (remove) :math:`\ell = \mathrm{LSE}_i(x_i/\sigma^2) - \ln t'
  - \frac1{2\sigma^2}` with :math:`x = e_1 + \mathcal N(0,\sigma^2 I_{t'})`;
  (add) :math:`x\sim\mathcal N(0,\sigma^2 I_{t'})` and the loss negated. The
  m round losses add. Every sample lies in [0, 1]; the confidence interval is
  the two-sided empirical-Bernstein bound (Maurer & Pontil 2009, Thm 4).
  Plain sampling, no importance sampling: resolves delta down to about
  10/num_samples. For k = 1 the pair is exactly the scheme's; for k > 1 it is
  the Lemma 3.2 pair (so the estimate may exceed the true k-of-t delta).
  Bound: estimate (with a confidence interval), not a guarantee.

* :func:`delta_lower_bound` -- provable lower bound on the remove-direction
  delta (Chua et al. 2024 "max" test, digest Sec. 3.8): for any threshold C,
  :math:`\delta \ge p(C)^m - e^\varepsilon q(C)^m` with
  :math:`p(C)=1-\Phi(\frac{C-1}\sigma)\Phi(\frac C\sigma)^{t'-1}`,
  :math:`q(C)=1-\Phi(\frac C\sigma)^{t'}` (the event "max exceeds C in every
  round"), maximised over a grid of C. Bound: lower (for the m-round
  1-of-t' pair; for k = 1 a lower bound on the scheme itself).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks
from jaxacct._core.dtype import x64_boundary
from jaxacct._core.logmath import log_ndtr, log1m_exp, log_sub_exp
from jaxacct.allocation.bounds import _rounds, check_scheme


class MonteCarloResult(NamedTuple):
  """Monte Carlo estimate of delta with a confidence interval.

  Attributes:
    estimate: sample mean (float64 array, shape of ``epsilon``).
    lower, upper: empirical-Bernstein confidence interval at ``confidence``.
    num_samples: number of samples.
    confidence: two-sided confidence level.
    bound: always ``"estimate"``.
  """
  estimate: Any
  lower: Any
  upper: Any
  num_samples: int
  confidence: float
  bound: str = "estimate"


@functools.partial(jax.jit, static_argnames=("t", "m", "num_samples", "batch", "direction"))
def _mc_jit(key, sigma, eps, *, t, m, num_samples, batch, direction):
  nb = num_samples // batch
  keys = jax.random.split(key, nb)
  s2 = sigma**2

  def one_batch(k):
    z = sigma * jax.random.normal(k, (batch, m, t), jnp.float64)
    if direction == "remove":
      z = z.at[..., 0].add(1.0)
    loss = jax.scipy.special.logsumexp(z / s2, axis=-1) - jnp.log(t) - 0.5 / s2
    loss = jnp.sum(loss, axis=-1)
    if direction == "add":
      loss = -loss
    vals = -jnp.expm1(jnp.minimum(eps[None, :] - loss[:, None], 0.0))   # [1 - e^{eps-l}]_+
    return jnp.sum(vals, axis=0), jnp.sum(vals**2, axis=0)

  s1, s2_ = jax.lax.map(one_batch, keys)
  return jnp.sum(s1, axis=0), jnp.sum(s2_, axis=0)


@x64_boundary
def delta_monte_carlo(*, sigma, num_steps, epsilon, num_selected=1, num_epochs=1,
                      direction: str = "remove", num_samples: int = 100_000,
                      seed: int = 0, confidence: float = 0.99,
                      batch_size: int = 10_000) -> MonteCarloResult:
  """Monte Carlo estimate of delta(epsilon) of the allocation dominating pair.

  Args:
    sigma: noise multiplier > 0 (scalar). num_steps: t >= 1.
    epsilon: scalar or 1-D array of epsilons (all share the samples).
    num_selected: k in [1, t]. num_epochs: E >= 1.
    direction: "remove" or "add".
    num_samples: multiple of ``batch_size``; memory is batch * kE * t'.
    seed: PRNG seed (``jax.random.PRNGKey``). confidence: in (0, 1).

  Returns:
    MonteCarloResult(estimate, lower, upper, ...), arrays shaped like
    ``epsilon``. Bound: estimate (not a guarantee).
  """
  check_scheme(sigma, num_steps, num_selected, num_epochs)
  checks.check_choice("direction", direction, ("remove", "add"))
  checks.check_range("epsilon", epsilon)
  checks.check_int("num_samples", num_samples, min_value=2)
  checks.check_int("batch_size", batch_size, min_value=1)
  checks.check_range("confidence", confidence, 0.0, 1.0, lo_open=True, hi_open=True)
  if num_samples % batch_size:
    raise ValueError(f"num_samples must be a multiple of batch_size={batch_size}; got {num_samples}.")
  t, m = _rounds(num_steps, num_selected, num_epochs)
  eps = np.atleast_1d(np.asarray(epsilon, np.float64))
  s1, s2 = _mc_jit(jax.random.PRNGKey(seed), jnp.float64(sigma), jnp.asarray(eps),
                   t=int(t), m=int(m), num_samples=int(num_samples),
                   batch=int(batch_size), direction=direction)
  n = float(num_samples)
  mean = s1 / n
  var = jnp.maximum(s2 / n - mean**2, 0.0) * n / (n - 1.0)
  lg = np.log(4.0 / (1.0 - confidence))      # two-sided: ln(2/((1-c)/2))
  half = jnp.sqrt(2.0 * var * lg / n) + 7.0 * lg / (3.0 * (n - 1.0))
  shape = np.shape(epsilon)
  f = lambda a: np.asarray(a).reshape(shape)
  return MonteCarloResult(estimate=f(mean), lower=f(jnp.maximum(mean - half, 0.0)),
                          upper=f(jnp.minimum(mean + half, 1.0)),
                          num_samples=int(num_samples), confidence=float(confidence))


@x64_boundary
def delta_lower_bound(*, sigma, num_steps, epsilon, num_selected=1, num_epochs=1,
                      thresholds=None):
  r"""Provable lower bound on the remove delta (Chua et al. 2024 max test).

  Args:
    sigma: > 0 (scalar or array). num_steps: t >= 1. epsilon: real (broadcast).
    num_selected, num_epochs: k, E (the m = kE round 1-of-t' pair).
    thresholds: grid of C (default ``-5 sigma .. 1 + 12 sigma + 8``, 4001
      points).

  Returns:
    float64 array (broadcast of sigma and epsilon): max over C of
    ``p(C)^m - e^eps q(C)^m``, clipped at 0. Bound: lower.
  """
  check_scheme(sigma, num_steps, num_selected, num_epochs)
  checks.check_range("epsilon", epsilon)
  t, m = _rounds(num_steps, num_selected, num_epochs)
  s = jnp.asarray(sigma, jnp.float64)
  e = jnp.asarray(epsilon, jnp.float64)
  s, e = jnp.broadcast_arrays(s, e)
  if thresholds is None:
    u = jnp.linspace(0.0, 1.0, 4001)
    c = -5.0 * s[..., None] + u * (1.0 + 17.0 * s[..., None] + 8.0)
  else:
    c = jnp.broadcast_to(jnp.asarray(thresholds, jnp.float64), s.shape + (len(thresholds),))
  lp_le = log_ndtr((c - 1.0) / s[..., None]) + (t - 1.0) * log_ndtr(c / s[..., None])
  lq_le = t * log_ndtr(c / s[..., None])
  lp = m * log1m_exp(jnp.minimum(lp_le, 0.0))     # log P(max > C)^m
  lq = m * log1m_exp(jnp.minimum(lq_le, 0.0))
  a, b = lp, e[..., None] + lq
  val = jnp.where(a > b, log_sub_exp(a, jnp.minimum(a, b)), -jnp.inf)
  return jnp.maximum(jnp.exp(jnp.max(val, axis=-1)), 0.0)
