r"""Variation-ratio / stronger-clone shuffling bounds, with their validity rules.

Source: S. Wang et al., "Privacy Amplification via Shuffling: Unified,
Simplified, and Tightened", arXiv:2304.05007v5 (appendix: Lemma 4.4-4.6,
Thm 5.1, Prop. I.1); V. Feldman, A. McMillan, K. Talwar, "Stronger Privacy
Amplification by Shuffling for Renyi and Approximate Differential Privacy",
arXiv:2208.04591 (SODA 2023; its current version carries an erratum restricting
the general bound).

Derivations and sources: docs/bounds/shuffle.md ("Bounds and proofs / Shuffling").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks, solve
from jaxacct._core.dtype import HOST_ONLY, dispatch, host_door
from jaxacct.shuffle._host import ON_HOST
from jaxacct._core.results import DeltaResult, EpsilonResult
from jaxacct.shuffle import _pair_fast as pair_fast, _pair_reference as pair_reference, _windows as windows
from jaxacct._core.compiled import jit


def stronger_pair_params(eps0):
  """(p, beta, q) of the pair family that give the stronger clone."""
  return pair_fast.member_params(jnp.asarray(eps0), "stronger")


def _check(n, eps0):
  checks.check_int("n", n, min_value=1)
  checks.check_positive("eps0", eps0)


def stronger_clone_delta(eps, *, n, eps0, max_n=None, devices=None):
  r"""Replacement delta(eps) of shuffling, stronger-clone pair (blanket randomizers only).

  Wang et al., arXiv:2304.05007v5, App. H + Prop. I.1 with the generic row
  (= Feldman, McMillan, Talwar, arXiv:2208.04591, stronger clone):
  ``C ~ Bin(n-1, 2/(e^eps0+1))``, ``A ~ Bin(C, 1/2)``, user 1 adds
  ``(1,0)`` w.p. ``e^eps0/(e^eps0+1)`` else ``(0,1)``.

  Args:
    eps: >= 0. n: integer >= 1. eps0: > 0. max_n: static bound on a traced n.
    devices: as in ``clones.clone_delta`` (arrays in blocks over the devices).

  Returns:
    ``DeltaResult(delta, epsilon=eps, method="stronger_clone",
    bound="upper")``; ``delta`` a float64 array (broadcast shape). A pytree:
    traced calls return it from inside ``jit``.

  Bound: upper ONLY for randomizers meeting the blanket condition of the
  module docstring (binary RR, k-RR, extremal-ratio randomizers); exact pair
  profile plus a computed tail < 1e-20. NaN for invalid traced lanes.
  """
  d = pair_fast.member_delta_checked(eps, n=n, eps0=eps0, max_n=max_n,
                                     member="stronger",
                                     where="stronger_clone_delta", devices=devices)
  return DeltaResult(delta=d, epsilon=eps, method="stronger_clone",
                     bound="upper")


def stronger_clone_epsilon(delta, *, n, eps0, max_n=None, devices=None):
  r"""Replacement eps(delta) of shuffling, stronger-clone pair (blanket randomizers only).

  See ``stronger_clone_delta`` (also for ``devices``). Independent evaluation (Wang et al.'s
  code, Table A): (1e4, 1, 1e-6) -> 0.0432061581, (1e5, 1) ->
  0.0124298975, (1e5, 4) -> 0.1181530665.

  Returns:
    ``EpsilonResult(epsilon, delta, method="stronger_clone", bound="upper")``;
    ``epsilon`` a float64 array (broadcast shape; numpy for concrete input
    without ``max_n``), the upper (feasible) end of the final bracket of the
    fast kernel ``pair_fast.sym_epsilon_fast`` (safeguarded Newton, block
    recurrences; see ``clones.clone_epsilon``).

  Bound: upper under the blanket condition only (see module docstring).
  """
  e = pair_fast.member_epsilon_checked(delta, n=n, eps0=eps0, max_n=max_n,
                                       member="stronger",
                                       where="stronger_clone_epsilon", devices=devices)
  return EpsilonResult(epsilon=e, delta=delta, method="stronger_clone",
                       bound="upper")


@host_door(ON_HOST)
def stronger_clone_rdp(orders, *, n, eps0):
  """RDP of the stronger-clone pair (blanket randomizers only), real orders > 1.

  Same pair as ``stronger_clone_delta``; Renyi divergence summed over a
  (c, a) window with the omitted mass times ``e^{alpha eps0}`` added.

  Returns: float64 ``(len(orders),)``. Bound: upper under the blanket condition.
  """
  orders_np = checks.check_orders(orders)
  checks.check_int("n", n, min_value=1, scalar=True)
  checks.check_range("eps0", eps0, 0.0, checks.EPS0_MAX, lo_open=True, scalar=True)
  p = float(np.exp(eps0))
  wc, wa = windows.rdp_widths(n, 2.0 / (p + 1.0), 0.5, orders_np.max(), eps0)
  return pair_reference.pair_rdp(orders_np, n=float(n), p=p, beta=(p - 1.0) / (p + 1.0), q0=p, q1=p,
                         wc=wc, wa=wa, symmetric=True)


# ---------------------------------------------------------------------------
# general pair as a LOWER bound (Thm 5.1)
# ---------------------------------------------------------------------------

def _lower_delta_scalar(eps, n, p, beta, q0, q1, width):
  alpha, r0, r1, lam, s = pair_reference.pair_params(p, beta, q0, q1)
  h1, _ = pair_reference.pair_hockey_stick(eps, n, p, alpha, r0, r1, lam, s, width)
  h2, _ = pair_reference.pair_hockey_stick(eps, n, p, alpha, r1, r0, lam, s, width)
  d = jnp.where(eps >= jnp.log(p), 0.0, jnp.maximum(h1, h2))
  bad = ((p <= 1.0) | (beta <= 0) | (beta > (p - 1.0) / (p + 1.0) * (1 + 1e-12))
         | (q0 < 1.0) | (q1 < 1.0) | (q0 > p * q1 * (1 + 1e-12))
         | (q1 > p * q0 * (1 + 1e-12)) | (s < -1e-12) | (n < 1))
  return jnp.where(bad, jnp.nan, d)


@functools.partial(jit, static_argnames=("width",))
def _lower_delta_jit(eps, n, p, beta, q0, q1, *, width):
  args = jnp.broadcast_arrays(*[jnp.asarray(x, jnp.float64)
                                for x in (eps, n, p, beta, q0, q1)])
  shp = args[0].shape
  f = jax.vmap(lambda *a: _lower_delta_scalar(*a, width))
  return f(*[a.reshape(-1) for a in args]).reshape(shp)


@functools.partial(jit, static_argnames=("width",))
def _lower_eps_jit(delta, n, p, beta, q0, q1, *, width):
  args = jnp.broadcast_arrays(*[jnp.asarray(x, jnp.float64)
                                for x in (delta, n, p, beta, q0, q1)])
  shp = args[0].shape

  def one(dl, n_, p_, b_, q0_, q1_):
    fn = lambda e: _lower_delta_scalar(e, n_, p_, b_, q0_, q1_, width) - dl
    _, lo = solve.bracket_decreasing(fn, 0.0, jnp.log(p_), 1.0 - dl, -dl,
                                      num_iters=64, illinois=False)
    # lo: infeasible end, <= the true eps (BinSLower)
    bad = pair_reference.pair_params_invalid(n_, p_, b_, q0_, q1_) | (dl <= 0) | (dl >= 1)
    return jnp.where(bad, jnp.nan, jnp.maximum(lo, 0.0))

  return jax.vmap(one)(*[a.reshape(-1) for a in args]).reshape(shp)


def _check_vr(n, p, beta, q0, q1, max_n=None):
  checks.check_scalar("jaxacct.shuffle.bounds.variation_ratio_*", n=n, p=p, beta=beta, q0=q0,
                      q1=q1)
  checks.check_int("n", n, min_value=1)
  checks.check_range("p", p, 1.0, np.inf, lo_open=True)
  checks.check_positive("beta", beta)
  if max_n is not None:
    checks.check_int("max_n", max_n, min_value=1)
  pv = np.asarray(p, np.float64)
  checks.check_range("beta", np.asarray(beta) / ((pv - 1) / (pv + 1)), 0.0,
                     1.0 + 1e-12, lo_open=True)
  checks.check_range("q0", q0, 1.0)
  checks.check_range("q1", q1, 1.0)
  r = np.asarray(q0, np.float64) / np.asarray(q1, np.float64)
  if np.any(r * pv < 1 - 1e-12) or np.any(r > pv * (1 + 1e-12)):
    raise ValueError(f"q0/q1 must be in [1/p, p]; got q0/q1 = {r}.")
  a = np.asarray(beta) / (pv - 1)
  tot = a * pv / np.asarray(q0) + a * pv / np.asarray(q1)
  if np.any(tot > 1 + 1e-12):
    raise ValueError(f"r0 + r1 = beta p/((p-1)) (1/q0 + 1/q1) must be <= 1; got {tot}.")
  return float(np.max(tot))


def variation_ratio_lower_delta(eps, *, n, p, beta, q0, q1, max_n=None):
  r"""Lower bound on shuffled delta(eps) for extremal randomizers (variation-ratio pair).

  Wang et al., arXiv:2304.05007v5, Thm 5.1 (App. B) + Prop. I.1. For a
  randomizer whose ratio ``R(x^0)/R(x^1)`` takes only the values
  ``p, 1, 1/p`` and another input ``x*`` putting mass ``r0``/``r1`` on
  ``{R0 > R1}``/``{R1 > R0}``, the pair is a post-processing of the shuffled
  output on a real dataset, so its delta is <= the true delta. The window
  omits mass (< 1e-20), which only lowers it.

  Args:
    eps: >= 0. n: integer >= 1. p > 1; beta in (0, (p-1)/(p+1)];
    q0, q1 >= 1 with q0/q1 in [1/p, p] and r0 + r1 <= 1.

    max_n: optional static bound on n (sizes the window; lets many small n
      share one compiled kernel).

  Returns:
    ``DeltaResult(delta, epsilon=eps, method="variation_ratio_lower",
    bound="lower")``; ``delta`` a float64 array. Bound: lower (extremal
    randomizers only).
  """
  tot = _check_vr(n, p, beta, q0, q1, max_n)
  checks.check_range("eps", eps, 0.0)
  w = windows.window_size(n if max_n is None else max_n,
                         tot if max_n is None else 0.5)
  d = dispatch(functools.partial(_lower_delta_jit, width=w), (eps, n, p, beta, q0, q1))
  return DeltaResult(delta=d, epsilon=eps, method="variation_ratio_lower",
                     bound="lower")


def variation_ratio_lower_epsilon(delta, *, n, p, beta, q0, q1, max_n=None):
  """Lower bound on shuffled eps(delta) for extremal randomizers.

  See ``variation_ratio_lower_delta``.

  Returns:
    ``EpsilonResult(epsilon, delta, method="variation_ratio_lower",
    bound="lower")``; ``epsilon`` a float64 array, the infeasible (lower) end
    of the final bisection bracket. Bound: lower.
  """
  tot = _check_vr(n, p, beta, q0, q1, max_n)
  checks.check_delta(delta)
  w = windows.window_size(n if max_n is None else max_n,
                         tot if max_n is None else 0.5)
  e = dispatch(functools.partial(_lower_eps_jit, width=w), (delta, n, p, beta, q0, q1))
  return EpsilonResult(epsilon=e, delta=delta, method="variation_ratio_lower",
                       bound="lower")


def _krr_row(eps0, k):
  p = np.exp(np.asarray(eps0, np.float64))
  beta = (p - 1.0) / (p + np.asarray(k, np.float64) - 1.0)
  return p, beta, p


def krr_lower_delta(eps, *, n, eps0, k, max_n=None):
  """Lower bound on shuffled k-RR delta(eps), k >= 3 (Wang et al. Thm 5.1, k-RR row).

  Dataset: user 1 holds 1 vs 2, all others a third value; the pair with
  ``(p, beta, q) = (e^eps0, (e^eps0-1)/(e^eps0+k-1), e^eps0)`` is the law of
  the counts of outputs 1 and 2, exact for k = 3.

  Returns:
    ``DeltaResult(delta, epsilon=eps, method="krr_lower", bound="lower")``;
    ``delta`` a float64 array. Bound: lower (k-RR).
  """
  return _krr_lower(variation_ratio_lower_delta, eps, n, eps0, k, max_n)


def krr_lower_epsilon(delta, *, n, eps0, k, max_n=None):
  """Lower bound on shuffled k-RR eps(delta), k >= 3 (see ``krr_lower_delta``).

  Regression: (1e4, 1, 1e-6, k=10) ->
  0.0232516778.

  Returns:
    ``EpsilonResult(epsilon, delta, method="krr_lower", bound="lower")``;
    ``epsilon`` a float64 array. Bound: lower (k-RR).
  """
  return _krr_lower(variation_ratio_lower_epsilon, delta, n, eps0, k, max_n)


def _krr_lower(query, value, n, eps0, k, max_n):
  """The k-RR row's pair through a variation-ratio lower query."""
  _check(n, eps0)
  checks.check_int("k", k, min_value=3)
  p, beta, q = _krr_row(eps0, k)
  r = query(value, n=n, p=p, beta=beta, q0=q, q1=q, max_n=max_n)
  return r._replace(method="krr_lower")


@host_door(HOST_ONLY)
def check_blanket_condition(matrix, eps0=None, *, rtol: float = 1e-12):
  r"""Does a randomizer (rows = inputs, columns = outputs) meet the blanket condition?

  Checks (numpy, eager) that ``matrix`` is row-stochastic, eps0-LDP
  (``eps0`` defaults to the smallest valid value, the max log-ratio), and

  .. math:: R(x)[y]\ \ge\ \frac{R(x^0)[y]+R(x^1)[y]}{e^{\varepsilon_0}+1}
     \quad\forall\,x,x^0,x^1,y

  under which ``stronger_clone_*`` is a valid upper bound.

  Returns:
    ``(ok, eps0)``: bool and the eps0 used (float).
  """
  checks.check_not_text("matrix", matrix)
  if eps0 is not None:
    checks.check_range("eps0", eps0, 0.0, scalar=True)
  checks.check_range("rtol", rtol, 0.0, 1.0)
  r = np.asarray(matrix, np.float64)
  if r.ndim != 2 or r.shape[0] < 2 or np.any(r < 0) or not np.all(np.isfinite(r)):
    raise ValueError("matrix must be a finite, non-negative 2-D array with >= 2 rows.")
  if not np.allclose(r.sum(axis=1), 1.0, rtol=0, atol=1e-9):
    raise ValueError("each row of matrix must sum to 1.")
  col_max = r.max(axis=0)
  col_min = r.min(axis=0)
  if np.any((col_min == 0) & (col_max > 0)):
    return False, float("inf")
  used = col_max > 0
  ldp = float(np.max(np.log(col_max[used]) - np.log(col_min[used])))
  if eps0 is None:
    eps0 = ldp
  elif ldp > eps0 * (1 + rtol) + 1e-15:
    return False, float(eps0)
  e0 = np.exp(eps0)
  # worst case over x0, x1 is the sum of the two largest entries per column
  top2 = np.sort(r, axis=0)[-2:].sum(axis=0)
  ok = bool(np.all(col_min * (e0 + 1.0) >= top2 * (1 - rtol) - 1e-300))
  return ok, float(eps0)
