r"""Monte Carlo estimate and a provable lower bound for random allocation.

Not accountants: sanity checks for the upper bounds.

Proofs and sources: docs/bounds/allocation_rdp.md ("Bounds and proofs /
Random allocation: RDP and analytic bounds").
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxacct._core import checks
from jaxacct._core.dtype import HOST_ONLY, host_door
from jaxacct._core.solve import invert_decreasing_host
from jaxacct.allocation._bounds import check_scheme, split_rounds
from jaxacct._core.compiled import jit
from jaxacct._core.units import per_epoch_steps


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


@functools.partial(jit, static_argnames=("t", "m", "num_samples", "batch", "direction"))
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


@host_door(HOST_ONLY)
@per_epoch_steps
def delta_monte_carlo(*, sigma, steps_per_epoch, epsilon, num_selected=1, num_epochs=1,
                      direction: str = "remove", num_samples: int = 100_000,
                      seed: int = 0, confidence: float = 0.99,
                      batch_size: int = 10_000) -> MonteCarloResult:
  """Monte Carlo estimate of delta(epsilon) of the allocation dominating pair.

  Args:
    sigma: noise multiplier > 0 (scalar). steps_per_epoch: t >= 1.
    epsilon: scalar or 1-D array of epsilons (all share the samples).
    num_selected: k in [1, t]. num_epochs: E >= 1.
    direction: "remove" or "add".
    num_samples: multiple of ``batch_size``; memory is batch * kE * t'.
    seed: PRNG seed (``jax.random.PRNGKey``). confidence: in (0, 1).

  Returns:
    MonteCarloResult(estimate, lower, upper, ...), arrays shaped like
    ``epsilon``. Bound: estimate (not a guarantee).
  """
  check_scheme(sigma, steps_per_epoch, num_selected, num_epochs, scalar=True)
  checks.check_choice("direction", direction, ("remove", "add"))
  checks.check_range("epsilon", epsilon)
  checks.check_int("num_samples", num_samples, min_value=2, scalar=True)
  checks.check_int("batch_size", batch_size, min_value=1, scalar=True)
  checks.check_int("seed", seed, min_value=0, scalar=True)
  checks.check_range("confidence", confidence, 0.0, 1.0, lo_open=True, hi_open=True)
  if num_samples % batch_size:
    raise ValueError(f"num_samples must be a multiple of batch_size={batch_size}; got {num_samples}.")
  t, m = split_rounds(steps_per_epoch, num_selected, num_epochs)
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


# ----------------------------------------------------------------------------
# Monte Carlo of the TRUE k-of-t allocation pair (no Lemma 3.2 reduction)
# ----------------------------------------------------------------------------
#
# Remove pair of one epoch (Gaussian, sensitivity 1): P = mean over k-subsets S
# of N(1_S, s^2 I_t), Q = N(0, s^2 I_t). Its likelihood ratio is
#
#   L(y) = e_k(x_1..x_t) / C(t, k),   x_i = exp(y_i / s^2 - 1 / (2 s^2)),
#
# (the mean over S of prod_{i in S} x_i). M_j(n) = e_j(x_1..x_n) / C(n, j)
# obeys M_j(n) = M_j(n-1) + (j/n) (x_n M_{j-1}(n-1) - M_j(n-1)): a convex
# combination of non-negative numbers, so the scan over the t coordinates is
# stable (no cancellation; no overflow after a fixed offset c per sample:
# x_i e^{-c}, log L = log M_k + k c). E epochs (fresh draws): the losses add.
# By symmetry of L, under P the targets can be the first k coordinates.
#
# Importance sampling works under Q (y iid N(0, s^2), exchangeable):
#   delta_rem(eps) = E_Q[(L - e^eps)_+],  delta_add(eps) = E_Q[(1 - e^eps L)_+].
# Proposals: a deterministic mixture (Owen & Zhou, "Safe and effective
# importance sampling", JASA 2000, balance heuristic) of "allocation-like"
# components (a, nu): a uniformly random k-subset S of coordinates shifted by
# a, all coordinates by nu (a = 1, nu = 0 is P itself; a = 0, nu = 0 is Q).
# Each is symmetric in the coordinates, so its ratio to Q is again an
# elementary symmetric mean:
#   q_(a,nu)/Q = exp((nu sum_i y_i - t nu^2/2)/s^2) exp(-k a nu/s^2) e_k(u^(a))/C(t,k),
#   u_i^(a) = exp((a y_i - a^2/2)/s^2),
# computed by the same recurrence for every a of the design (u^(1) = x, so
# L is one of them), on u e^{-c_a} with c_a the value at the top of the
# generating component (y = nu + a_gen + 3 s): the factors are <= ~1, so the
# M_j (means of products) cannot overflow, and they decay at most
# polynomially; a ratio that underflows to 0 is < e^-700 and negligible next
# to Q's (= 1) in the mixture. Because the integrand and every ratio are symmetric,
# a sample of component (a, nu) may put S on the first k coordinates. Every
# sample gets the weight Q / sum_m (n_m / n) q_m with n_m samples drawn from
# component m (fixed before sampling): unbiased, and with Q in the mixture the
# weight is <= n / n_Q. Symmetric components matter: a large loss may come
# from any coordinate, not only the targets of P (a proposal tilting only P's
# targets misses "a non-target coordinate is large" and is biased low).
# Design: a grid spanning the mechanisms of a large loss -- k shifted
# coordinates (a from P's 1 up to 1.3 a*, a* = s^2 (ln C(t,k) + eps/E)/k + 1/2,
# where one k-subset alone carries the loss) combined with a shift of the
# whole sum (nu from 0 to 4 nu*, nu* = +-s^2 eps/(E k)) -- whose shares are then adapted on pilot
# samples (population Monte Carlo: share proportional to the part of the
# estimate a component carries, with a floor; Q keeps >= 2 %). Pilot samples
# never enter the main estimate.

_NUM_A = 10              # shifts a in geomspace(1.2, 1.3 a*) (plus 0 and 1)
# The noise multipliers and epsilons the estimators take: the design's shifts grow as
# sigma^2 (ln C(t,k) + eps/E) and are squared, the integrand holds e^eps; beyond sigma
# 1e6 or eps 700 float64 overflows. (Well inside, where a shift's e^{-a^2/sigma^2}
# underflows, e.g. sigma 100 at t = 10, the estimate is NaN: no answer, not a wrong one.)
_SIGMA_MAX = 1e6
_EPS_MAX = 700.0
_NU_FRACTIONS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0)
_NU_ADD_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


class TrueAllocationMC(NamedTuple):
  """Monte Carlo estimate for the true k-of-t allocation pair.

  Attributes:
    value: estimate (delta at ``epsilon``, or epsilon at ``delta``); float64
      numpy array (shape of the query).
    ci: (lo, hi) approximate two-sided confidence interval at ``confidence``
      (normal approximation of the importance-sampling mean).
    lower: lower bound that holds with probability >= 1 - ``beta``
      (empirical-Bernstein bound on truncated samples, union bound over the
      points it was evaluated at); 0 when the data certify nothing.
    beta: the failure probability of ``lower``.
    confidence: level of ``ci``.
    num_samples: main-run samples.
    design: ((nu_T, nu_B, share), ...) mixture components with their shares.
    direction: "remove" or "add". seconds: wall time (design + main run).
    bound: always "estimate" (``lower`` is "lower with probability 1 - beta").
  """
  value: Any
  ci: Any
  lower: Any
  beta: float
  confidence: float
  num_samples: int
  design: Any
  direction: str
  seconds: float
  bound: str = "estimate"


def _block_size(t):
  return int(min(128, 1 << max(0, (int(t) - 1).bit_length())))


@functools.partial(jit, static_argnames=("t", "k", "E", "batch", "blk", "unroll"))
def _true_alloc_kernel(key, sigma, a_gen, nu_gen, a_list, *, t, k, E, batch, blk,
                       unroll=8):
  """Samples of component (a_gen, nu_gen). Per sample: (log e_k(u^(a))/C(t,k) summed
  over epochs, for every a in ``a_list`` -> (batch, A); sum of all y)."""
  s2 = sigma * sigma
  A = a_list.shape[0]
  nblk = -(-t // blk)
  ytop = nu_gen + a_gen + sigma * 3.0
  c = (a_list * ytop - 0.5 * a_list**2) / s2          # offset: u ~ 1 near the top
  jj = jnp.arange(1, k + 1, dtype=jnp.float64)

  def epoch(carry, ekey):
    def block(st, b):
      z = jax.random.normal(jax.random.fold_in(ekey, b), (blk, batch), jnp.float64)

      def coord(st2, r):
        M, sy = st2                           # M: (batch, A, k+1)
        i = b * blk + r
        real = i < t
        y = nu_gen + jnp.where(i < k, a_gen, 0.0) + sigma * z[r]
        u = jnp.exp((a_list[None, :] * y[:, None] - 0.5 * a_list**2) / s2 - c)   # (batch, A)
        w = jnp.minimum(jj / (i + 1).astype(jnp.float64), 1.0)
        new = M[..., 1:] + w * (u[..., None] * M[..., :-1] - M[..., 1:])
        M = jnp.where(real, M.at[..., 1:].set(new), M)
        sy = sy + jnp.where(real, y, 0.0)
        return (M, sy), None

      st, _ = lax.scan(coord, st, jnp.arange(blk), unroll=unroll)
      return st, None

    M0 = jnp.zeros((batch, A, k + 1), jnp.float64).at[..., 0].set(1.0)
    (M, sy), _ = lax.scan(block, (M0, jnp.zeros((batch,), jnp.float64)), jnp.arange(nblk))
    # M_k = e_k(u e^{-c}) / C(t, k): log e_k(u)/C(t,k) = log M_k + k c
    lek = jnp.log(M[..., k]) + k * c[None, :]
    acc, sacc = carry
    return (acc + lek, sacc + sy), None

  (lek, sy), _ = lax.scan(epoch, (jnp.zeros((batch, A), jnp.float64),
                                  jnp.zeros((batch,), jnp.float64)), jax.random.split(key, E))
  return lek, sy


class _Samples(NamedTuple):
  ell: np.ndarray     # ln L (summed over epochs)
  logw: np.ndarray    # ln Q / mixture density


def _counts(shares, n, batch):
  """Whole batches per component, >= 1 batch for every share > 0, sum ~ n."""
  nb = max(int(round(n / batch)), 1)
  c = np.maximum(np.round(np.asarray(shares) * nb), (np.asarray(shares) > 0) * 1).astype(int)
  return c * batch


def _draw_mixture(seed, stream, sigma, comps, counts, t, k, E, batch):
  """Samples of the deterministic mixture ``comps`` [(a, nu)] with ``counts``
  samples each; (samples, log responsibilities (M, n))."""
  blk = _block_size(t)
  a_vals = sorted({float(a) for a, _ in comps} | {1.0})
  a_list = jnp.asarray(a_vals, jnp.float64)
  base = jax.random.fold_in(jax.random.PRNGKey(int(seed)), int(stream))
  lek, sy = [], []
  for m, ((a, nu), cnt) in enumerate(zip(comps, counts)):
    km = jax.random.fold_in(base, m)
    for i in range(int(cnt) // batch):
      o = _true_alloc_kernel(jax.random.fold_in(km, i), jnp.float64(sigma), jnp.float64(a),
                             jnp.float64(nu), a_list, t=int(t), k=int(k), E=int(E),
                             batch=int(batch), blk=blk)
      lek.append(np.asarray(o[0]))
      sy.append(np.asarray(o[1]))
  lek, sy = np.concatenate(lek), np.concatenate(sy)
  s2 = sigma**2
  alpha = np.asarray(counts, np.float64) / float(np.sum(counts))
  lq = []
  for (a, nu) in comps:
    ek = 0.0 if a == 0.0 else lek[:, a_vals.index(float(a))]
    lq.append(ek - E * k * a * nu / s2 + (nu * sy - E * t * nu**2 / 2) / s2)
  lq = np.asarray(lq)
  keep = alpha > 0
  mx = lq[keep].max(axis=0)
  lmix = mx + np.log(np.sum(alpha[keep, None] * np.exp(lq[keep] - mx), axis=0))
  return _Samples(lek[:, a_vals.index(1.0)], -lmix), lq - lmix


def _h(ell, eps, remove):
  """Hockey-stick integrand under Q: remove (L - e^eps)_+, add (1 - e^eps L)_+."""
  if remove:
    return np.where(ell > eps, np.exp(ell) * -np.expm1(np.minimum(eps - ell, 0.0)), 0.0)
  return -np.expm1(np.minimum(eps + ell, 0.0))


def _x(S, eps, remove):
  return np.exp(S.logw) * _h(S.ell, eps, remove)


def _grid(sigma, t, k, E, remove, eps):
  """Mixture components [(a, nu)] for a loss level ``eps``; Q = (0, 0) first."""
  eps = max(float(eps), 1e-3)
  nu_star = sigma**2 * eps / (E * k)
  if not remove:
    return [(0.0, -f * nu_star) for f in _NU_ADD_FRACTIONS] + [(1.0, 0.0)]
  lc = math.lgamma(t + 1) - math.lgamma(k + 1) - math.lgamma(t - k + 1)
  a_star = max(sigma**2 * (lc + eps / E) / k + 0.5, 1.0)
  a_vals = (0.0, 1.0) + tuple(np.geomspace(1.2, max(1.3 * a_star, 2.0), _NUM_A).tolist())
  return [(a, f * nu_star) for a in a_vals for f in _NU_FRACTIONS]


def _design(seed, sigma, t, k, E, remove, target, *, n, batch, rounds=3, floor=0.02):
  """Adapted mixture (components, shares) and independent pilot samples.
  ``target``: ("eps", eps) or ("delta", d) (then the level is re-estimated)."""
  eps = float(target[1]) if target[0] == "eps" else 1.0
  comps = _grid(sigma, t, k, E, remove, eps)
  shares = np.full(len(comps), 1.0 / len(comps))
  for r in range(rounds):
    S, resp = _draw_mixture(seed, 1000 + r, sigma, comps, _counts(shares, n, batch),
                            t, k, E, batch)
    if target[0] == "delta":
      new = invert_decreasing_host(lambda e: float(np.mean(_x(S, e, remove))), float(target[1]),
                       float(np.max(np.abs(S.ell))) + 1.0)
      if abs(new - eps) > 0.05 * eps:      # level moved: rebuild the grid around it
        eps = new
        comps = _grid(sigma, t, k, E, remove, eps)
        shares = np.full(len(comps), 1.0 / len(comps))
        continue
      eps = new
    x = _x(S, eps, remove)
    if not np.any(x > 0):
      continue
    contrib = np.exp(resp) @ x                      # part of the estimate per component
    shares = np.maximum(contrib / np.sum(contrib), floor / len(comps))
    shares[0] = max(shares[0], floor)               # defensive: Q itself
    shares = shares / np.sum(shares)
  S, _ = _draw_mixture(seed, 2000, sigma, comps, _counts(shares, n, batch), t, k, E, batch)
  return comps, shares, S


def _bernstein_lower(y, beta):
  """One-sided empirical-Bernstein lower bound on E[Y], Y in [0, 1] (Maurer &
  Pontil, arXiv:0907.3740v1, Thm 4): mean - sqrt(2 V ln(2/beta) / n) -
  7 ln(2/beta) / (3 (n-1)) holds with probability >= 1 - beta."""
  n = y.size
  lg = math.log(2.0 / beta)
  return float(y.mean() - math.sqrt(2.0 * y.var(ddof=1) * lg / n) - 7.0 * lg / (3.0 * (n - 1)))


def _pick_truncation(x_pilot, n_main, beta):
  """Truncation level B of the rigorous lower, chosen on independent pilot
  samples: the candidate maximising the pilot-predicted bound at n_main."""
  pos = x_pilot[x_pilot > 0]
  if pos.size < 2:
    return 1.0
  best, bestB = -np.inf, float(np.max(pos))
  lg = math.log(2.0 / beta)
  for qq in (0.5, 0.9, 0.99, 0.999, 0.9999, 1.0):
    for f in (1.0, 2.0, 4.0):
      B = float(np.quantile(pos, qq)) * f
      y = np.minimum(x_pilot, B) / B
      val = B * (y.mean() - math.sqrt(2 * y.var() * lg / n_main) - 7 * lg / (3 * (n_main - 1)))
      if val > best:
        best, bestB = val, B
  return bestB


def _rigorous_delta_lower(S, pilot, eps, n, beta, remove):
  B = _pick_truncation(_x(pilot, eps, remove), n, beta)
  return max(B * _bernstein_lower(np.minimum(_x(S, eps, remove), B) / B, beta), 0.0)


def _true_setup(sigma, steps_per_epoch, num_selected, num_epochs, direction, num_samples,
                batch_size, confidence, beta, seed, pilot_samples):
  check_scheme(sigma, steps_per_epoch, num_selected, num_epochs, scalar=True)
  checks.check_range("sigma", sigma, 0.0, _SIGMA_MAX, lo_open=True)
  checks.check_int("seed", seed, min_value=0, scalar=True)
  checks.check_int("pilot_samples", pilot_samples, min_value=2, scalar=True)
  checks.check_choice("direction", direction, ("remove", "add"))
  checks.check_int("num_samples", num_samples, min_value=2, scalar=True)
  checks.check_int("batch_size", batch_size, min_value=2, scalar=True)
  checks.check_range("confidence", confidence, 0.0, 1.0, lo_open=True, hi_open=True)
  checks.check_range("beta", beta, 0.0, 1.0, lo_open=True, hi_open=True)
  if int(num_selected) > 64:
    raise ValueError(f"num_selected must be <= 64 here; got {num_selected}.")
  from scipy.stats import norm   # here: scipy loads with the true-allocation estimators only
  return (float(sigma), int(steps_per_epoch), int(num_selected), int(num_epochs),
          direction == "remove", float(norm.ppf(0.5 + confidence / 2.0)))


def _design_out(comps, shares):
  return tuple((float(a), float(b), float(c)) for (a, b), c in zip(comps, shares) if c > 0)


@host_door(HOST_ONLY)
@per_epoch_steps
def true_allocation_delta_monte_carlo(*, sigma, steps_per_epoch, epsilon, num_selected=1,
                                      num_epochs=1, direction: str = "remove",
                                      num_samples: int = 100_000, seed: int = 0,
                                      confidence: float = 0.99, beta: float = 1e-3,
                                      pilot_samples: int = 8_000,
                                      batch_size: int = 250) -> TrueAllocationMC:
  r"""Monte Carlo delta(eps) of TRUE k-of-t allocation (no reduction), Gaussian.

  Exact sampling of the k-of-t remove pair (add: reversed) over E fresh
  epochs, ``L = e_k(x) / C(t, k)`` per epoch (comment block above; the pair:
  Feldman & Shenfeld, arXiv:2502.08202v3, Thm 3.1), with an adapted mixture of
  mean-shift importance samplers, so deltas far below 1 / num_samples are
  resolved. For k > 1 this measures the scheme itself, not the Lemma 3.2
  reduction that the certified bounds use.

  .. math:: \delta_{rem}(\varepsilon) = E_P[(1 - e^{\varepsilon-\ell})_+],
            \quad \delta_{add}(\varepsilon) = E_Q[(1 - e^{\varepsilon+\ell})_+]

  Args:
    sigma: noise multiplier in (0, 1e6] (scalar). steps_per_epoch: t >= 1.
    epsilon: scalar or 1-D array in [0, 700] (all share the samples; the
      design is tuned at the largest).
    num_selected: k in [1, min(t, 64)]. num_epochs: E >= 1 (fresh draws).
    direction: "remove" or "add".
    num_samples: main-run samples (whole batches per mixture component).
    seed: PRNG seed. confidence: level of the normal-approximation ``ci``.
    beta: failure probability of ``lower`` (union bound over the epsilons).
    pilot_samples: samples per design round (independent of the main run).
    batch_size: samples per compiled call.

  Returns:
    :class:`TrueAllocationMC` (value = delta estimates, shape of ``epsilon``).

  Bound: estimate (``lower``: lower with probability >= 1 - beta).
  """
  t0 = time.perf_counter()
  s, t, k, E, remove, z = _true_setup(sigma, steps_per_epoch, num_selected, num_epochs, direction,
                                      num_samples, batch_size, confidence, beta, seed,
                                      pilot_samples)
  checks.check_range("epsilon", epsilon, 0.0, _EPS_MAX)
  eps = np.atleast_1d(np.asarray(epsilon, np.float64))
  comps, shares, pilot = _design(seed, s, t, k, E, remove, ("eps", float(np.max(eps))),
                                 n=pilot_samples, batch=batch_size)
  S, _ = _draw_mixture(seed, 0, s, comps, _counts(shares, num_samples, batch_size), t, k, E,
                       batch_size)
  n = S.ell.size
  vals, lo_ci, hi_ci, lows = [], [], [], []
  for e in eps:
    x = _x(S, e, remove)
    m, se = float(x.mean()), float(x.std(ddof=1) / math.sqrt(n))
    vals.append(m)
    lo_ci.append(max(m - z * se, 0.0))
    hi_ci.append(m + z * se)
    lows.append(_rigorous_delta_lower(S, pilot, e, n, beta / eps.size, remove))
  shape = np.shape(epsilon)
  f = lambda a: np.asarray(a, np.float64).reshape(shape)
  return TrueAllocationMC(value=f(vals), ci=(f(lo_ci), f(hi_ci)), lower=f(lows),
                          beta=float(beta), confidence=float(confidence), num_samples=n,
                          design=_design_out(comps, shares), direction=direction,
                          seconds=time.perf_counter() - t0)


@host_door(HOST_ONLY)
@per_epoch_steps
def true_allocation_epsilon_monte_carlo(*, sigma, steps_per_epoch, delta, num_selected=1,
                                        num_epochs=1, direction: str = "remove",
                                        num_samples: int = 100_000, seed: int = 0,
                                        confidence: float = 0.99, beta: float = 1e-3,
                                        pilot_samples: int = 8_000,
                                        batch_size: int = 250, grid_points: int = 64,
                                        grid_width: float = 0.1) -> TrueAllocationMC:
  r"""Monte Carlo epsilon(delta) of TRUE k-of-t allocation (no reduction), Gaussian.

  As :func:`true_allocation_delta_monte_carlo`. The estimate solves
  ``delta_hat(eps) = delta`` on the main-run samples (bisection; delta_hat is
  non-increasing in eps); ``ci`` inverts the pointwise normal-approximation
  band; ``lower`` is the largest point eps_g of a grid fixed before the main
  run (``grid_points`` points in [1 - grid_width, 1 + grid_width / 5] times
  the pilot's estimate) whose rigorous lower delta bound exceeds ``delta``
  (union bound over the grid): delta(eps) is non-increasing, so then
  epsilon(delta) >= eps_g with probability >= 1 - beta.

  Args:
    delta: in (0, 1) (scalar). Others as in
      :func:`true_allocation_delta_monte_carlo`.

  Returns:
    :class:`TrueAllocationMC` (value = epsilon estimate; ``lower`` = epsilon
    lower bound with probability >= 1 - beta, 0 if none is certified).

  Bound: estimate (``lower``: lower with probability >= 1 - beta).
  """
  t0 = time.perf_counter()
  s, t, k, E, remove, z = _true_setup(sigma, steps_per_epoch, num_selected, num_epochs, direction,
                                      num_samples, batch_size, confidence, beta, seed,
                                      pilot_samples)
  checks.check_delta(delta)
  checks.check_int("grid_points", grid_points, min_value=1, scalar=True)
  checks.check_range("grid_width", grid_width, 0.0, 1.0, lo_open=True, hi_open=True)
  d = float(delta)
  comps, shares, pilot = _design(seed, s, t, k, E, remove, ("delta", d), n=pilot_samples,
                                 batch=batch_size)
  e_pilot = invert_decreasing_host(lambda e: float(np.mean(_x(pilot, e, remove))), d,
                       float(np.max(np.abs(pilot.ell))) + 1.0)
  grid = e_pilot * np.linspace(1.0 - grid_width, 1.0 + grid_width / 5.0, int(grid_points))
  S, _ = _draw_mixture(seed, 0, s, comps, _counts(shares, num_samples, batch_size), t, k, E,
                       batch_size)
  n = S.ell.size
  hi = float(np.max(np.abs(S.ell))) + 1.0

  def band(e, sign):
    x = _x(S, e, remove)
    return float(x.mean() + sign * z * x.std(ddof=1) / math.sqrt(n))

  est = invert_decreasing_host(lambda e: float(np.mean(_x(S, e, remove))), d, hi)
  ci = tuple(invert_decreasing_host(lambda e, sg=sg: band(e, sg), d, hi) for sg in (-1.0, 1.0))
  lower = 0.0
  for e in grid:
    if _rigorous_delta_lower(S, pilot, e, n, beta / grid.size, remove) > d:
      lower = max(lower, float(e))
  return TrueAllocationMC(value=np.float64(est), ci=(np.float64(ci[0]), np.float64(ci[1])),
                          lower=np.float64(lower), beta=float(beta),
                          confidence=float(confidence), num_samples=n,
                          design=_design_out(comps, shares), direction=direction,
                          seconds=time.perf_counter() - t0)
