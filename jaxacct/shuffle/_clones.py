r"""Amplification by shuffling via clones (Feldman, McMillan, Talwar).

Source: V. Feldman, A. McMillan, K. Talwar, "Hiding Among the Clones: A Simple
and Nearly Optimal Analysis of Privacy Amplification by Shuffling",
arXiv:2012.12803 (revised version with Sec. 6.1, FOCS 2021); jaxacct digest
``feldman-mcmillan-talwar-clones.md``.

All bounds are for **replacement** neighbours, both directions, for any
(adaptive) sequence of eps0-LDP local randomizers (Thm 3.2).

* ``clone_delta`` / ``clone_epsilon``: the exact privacy profile of the clone
  pair (Thm 3.2; App. F computes it), evaluated in O(window) log-space terms
  by the shared pair kernel ``jaxacct.shuffle._pair_fast`` (the clone pair is the
  member ``p = e^eps0``, ``beta = (p-1)/(p+1)``, ``q = 2 e^{2 eps0}/(e^eps0+1)``
  of the Wang et al. family). Upper bound, valid for every eps0-LDP randomizer.
* ``clone_epsilon_closed_form``: Thm 3.1 Eq. (1), upper, with its validity
  condition ``eps0 <= ln(n / (16 ln(4/delta)))`` (the proof's 4/delta, digest
  §8); outside it the trivial ``eps0`` is returned.
* ``clone_epsilon_approx_ldp``: Thm 3.8 with the numerical clone delta.
* ``krr_epsilon_closed_form``: Cor 4.2 Eq. (11) for k-ary RR, with the
  condition ``p4 >= 8 ln(2/delta)/n`` checked directly (the printed
  condition is insufficient for large k).
* ``rr2_lower_delta`` / ``rr2_lower_epsilon``: App. G, shuffled binary RR on
  ``(0,...,0)`` vs ``(1,0,...,0)``: a LOWER bound for every generic theorem.
* ``clone_rdp``: Sec. 6.1, Renyi divergence of the clone pair, real orders.

Every ``*_epsilon`` returns an :class:`~jaxacct.EpsilonResult` and every
``*_delta`` a :class:`~jaxacct.DeltaResult` (pytrees: the jittable ones return
them from inside ``jit``); ``bound`` says upper or lower.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import binomial, checks, solve
from jaxacct._core.batching import host_lanes
from jaxacct._core.dtype import dispatch, host_door, require_x64, static_size
from jaxacct.shuffle._host import ON_HOST
from jaxacct._core.logmath import log_binom_pmf
from jaxacct._core.namespace import JAX, each_lane, for_inputs, host_call
from jaxacct._core.results import DeltaResult, EpsilonResult, host_f64
from jaxacct.shuffle import _pair_fast as pair_fast, _pair_reference as pair_reference, _windows as windows
from jaxacct.shuffle._symmetric_pair_sum import special
from jaxacct._core.compiled import jit


def clone_pair_params(eps0):
  """(p, beta, q) of the pair family that give FMT'21's clone pair."""
  return pair_fast.member_params(jnp.asarray(eps0), "clone")


def _check_common(n, eps0):
  checks.check_int("n", n, min_value=1)
  checks.check_positive("eps0", eps0)


def _check_max_n(max_n):
  if max_n is not None:
    checks.check_int("max_n", max_n, min_value=1)


def clone_delta(eps, *, n, eps0, max_n=None, devices=None):
  r"""Replacement delta(eps) of shuffling eps0-LDP reports (FMT'21 clone pair).

  Feldman, McMillan, Talwar, arXiv:2012.12803, Thm 3.2 (pair) and App. F,
  Lemma F.1 (exact inner sum).

  .. math:: \delta(\varepsilon)=H_{e^\varepsilon}\big((A+\Delta, C-A+1-\Delta)\,\|\,
     (A+1-\Delta, C-A+\Delta)\big),\ C\sim\mathrm{Bin}(n-1,e^{-\varepsilon_0}),
     A\sim\mathrm{Bin}(C,\tfrac12),\ \Delta\sim\mathrm{Bern}(\tfrac{e^{\varepsilon_0}}{e^{\varepsilon_0}+1}).

  Args:
    eps: central epsilon >= 0 (broadcasts with n, eps0).
    n: number of shuffled users, integer >= 1 (up to ~1e8).
    eps0: local epsilon > 0.
    max_n: static upper bound on n, needed only when n or eps0 is traced.
    devices: None (the default device), or jax devices or a
      ``jax.sharding.Mesh``: arrays run in blocks spread over them (values
      bitwise those of one device).

  Returns:
    ``DeltaResult(delta, epsilon=eps, method="clone", bound="upper")``;
    ``delta`` is a float64 array of the broadcast shape, ``epsilon`` the
    ``eps`` given. A pytree: traced calls return it from inside ``jit``.

  Bound: upper (valid for every, also adaptive, eps0-LDP randomizer); it is the
  pair's exact profile plus a computed tail mass < 1e-20. NaN for invalid lanes.
  """
  d = pair_fast.member_delta_checked(eps, n=n, eps0=eps0, max_n=max_n,
                                     member="clone", where="clone_delta", devices=devices)
  return DeltaResult(delta=d, epsilon=eps, method="clone", bound="upper")


def clone_epsilon(delta, *, n, eps0, max_n=None, devices=None):
  r"""Replacement eps(delta) of shuffling eps0-LDP reports (FMT'21 clone pair).

  Feldman, McMillan, Talwar, arXiv:2012.12803, Thm 3.2 + App. F (BinS, Alg. 4:
  the feasible, upper end of the bracket is returned).

  Args:
    delta: target delta in (0, 1).
    n: integer >= 1. eps0: > 0. max_n, devices: see ``clone_delta``.

  Returns:
    ``EpsilonResult(epsilon, delta, method="clone", bound="upper")``;
    ``epsilon`` is a float64 array of the broadcast shape, in ``[0, eps0]``
    (numpy for concrete input without ``max_n``, jax otherwise), ``delta``
    the ``delta`` given.

  Computed by ``jaxacct.shuffle._pair_fast.sym_epsilon_fast``: the pair's delta
  by block recurrences anchored by one incomplete-beta call per 64 c-cells
  (rounding allowance and cut mass added) and a safeguarded Newton solve that
  returns the feasible end of a bracket of relative width ~1e-13 (4-10
  evaluations). Concrete input without ``max_n`` and with every n <= 2e5
  runs the same formula in NumPy on the host (no compiled program; within
  3e-12 relative of the kernel): one question, or on the CPU layout an array
  lane by lane (each lane its own question's value). Other concrete arrays
  are grouped by window bucket (one compiled kernel per bucket).

  Bound: upper (any eps0-LDP randomizer). Regression: (1e5, 4, 1e-6) ->
  0.169769747; NaN for invalid traced lanes. Not covered by
  the allowance: the float64 error of jax's ``betainc``/``gammaln`` at the
  anchors and weights (~1e-11 relative at c ~ 1e5, ~1e-8 at c ~ 1e7).
  """
  e = pair_fast.member_epsilon_checked(delta, n=n, eps0=eps0, max_n=max_n,
                                       member="clone", where="clone_epsilon",
                                       devices=devices)
  return EpsilonResult(epsilon=e, delta=delta, method="clone", bound="upper")


def _closed_form(delta, n, eps0, ns=JAX):
  """FMT'21 Eq. (1); ``ns``: traced, or concrete input on the host (no compiled program)."""
  xp = ns.xp
  e0 = xp.exp(eps0)
  w0 = (e0 - 1.0) / (e0 + 1.0)
  l4 = xp.log(4.0 / delta)
  eps = xp.log1p(w0 * (8.0 * xp.sqrt(e0 * l4 / n) + 8.0 * e0 / n))
  valid = eps0 <= xp.log(n / (16.0 * l4))
  return xp.where(valid, xp.minimum(eps, eps0), eps0)


def clone_epsilon_closed_form(delta, *, n, eps0):
  r"""Closed-form replacement epsilon of shuffling (FMT'21 Thm 3.1, Eq. (1)).

  Feldman, McMillan, Talwar, arXiv:2012.12803, Thm 3.1:

  .. math:: \varepsilon=\ln\Big(1+\frac{e^{\varepsilon_0}-1}{e^{\varepsilon_0}+1}
     \Big(\frac{8\sqrt{e^{\varepsilon_0}\ln(4/\delta)}}{\sqrt n}+\frac{8e^{\varepsilon_0}}{n}\Big)\Big)

  valid when ``eps0 <= ln(n / (16 ln(4/delta)))`` (the condition the proof of
  Lemma A.1 needs; the paper prints 2/delta). Outside that range the
  trivially valid ``eps0`` is returned. Jittable.

  Returns:
    ``EpsilonResult(epsilon, delta, method="clone_closed_form",
    bound="upper")``; ``epsilon`` a float64 array (broadcast shape).
    Bound: upper (any eps0-LDP randomizer).
  """
  def validate():
    _check_common(n, eps0)
    checks.check_delta(delta)

  def concrete(*args):  # elementwise: NumPy on the host for any lane count, no program
    return jax.device_put(host_call(_closed_form, *(np.asarray(v, np.float64) for v in args)))

  e = dispatch(_closed_form, (delta, n, eps0), validate, eager=concrete,
               where="clone_epsilon_closed_form")
  return EpsilonResult(epsilon=e, delta=delta, method="clone_closed_form",
                       bound="upper")


@host_door(ON_HOST)
def clone_epsilon_approx_ldp(delta, *, n, eps0, delta0, num_refine: int = 3):
  r"""Replacement epsilon of shuffling (eps0, delta0)-LDP reports (FMT'21 Thm 3.8).

  Feldman, McMillan, Talwar, arXiv:2012.12803, Thm 3.8 with the numerical clone
  delta (the proof combines the additive term with any valid pair bound):

  .. math:: \delta_{\rm tot}(\varepsilon)=\delta_{\rm clone}(\varepsilon)
     +(e^{\varepsilon}+1)(1+e^{-\varepsilon_0}/2)\,n\,\delta_0 .

  Inverted by a non-increasing fixed-point sequence (every
  iterate is valid). If no split of delta works, returns ``eps0`` when
  ``delta0 <= delta`` (shuffling never hurts), else ``inf`` (no guarantee).

  Args: scalars (eager).

  Returns:
    ``EpsilonResult(epsilon, delta, method="clone_approx_ldp",
    bound="upper")``; ``epsilon`` a numpy float64 scalar (host-only).
    Bound: upper (Thm 3.8 is a theorem, not an approximation: "approx" is
    the local (eps0, delta0) guarantee).
  """
  checks.check_scalar("jaxacct.shuffle.clone_epsilon_approx_ldp", n=n, eps0=eps0,
                      delta0=delta0, num_refine=num_refine)
  _check_common(n, eps0)
  checks.check_delta(delta)
  checks.check_range("delta0", delta0, 0.0, 1.0)
  checks.check_int("num_refine", num_refine, min_value=0)
  kk = (1.0 + np.exp(-eps0) / 2.0) * n * delta0
  d = delta - (np.exp(eps0) + 1.0) * kk
  if d <= 0:
    eps = float(eps0) if delta0 <= delta else float("inf")
  else:
    eps = float(clone_epsilon(d, n=n, eps0=eps0).epsilon)
    for _ in range(num_refine):
      d2 = delta - (np.exp(eps) + 1.0) * kk
      if d2 <= d:
        break
      eps_new = float(clone_epsilon(min(d2, 1 - 1e-16), n=n, eps0=eps0).epsilon)
      d, eps = d2, min(eps, eps_new)
  return EpsilonResult(epsilon=np.float64(eps), delta=delta,
                       method="clone_approx_ldp", bound="upper")


def _krr_cf(delta, n, eps0, k):
  e0 = jnp.exp(eps0)
  p4 = k / ((k + 1.0) * (e0 + k - 1.0))
  l4 = jnp.log(4.0 / delta)
  eps = jnp.log1p((e0 - 1.0) * (
      4.0 * jnp.sqrt(2.0 * (k + 1.0) * l4) / jnp.sqrt((e0 + k - 1.0) * k * n)
      + 4.0 * (k + 1.0) / (k * n)))
  valid = p4 >= 8.0 * jnp.log(2.0 / delta) / n
  return jnp.where(valid, jnp.minimum(eps, eps0), eps0)


_krr_cf_jit = jit(_krr_cf)


def krr_epsilon_closed_form(delta, *, n, eps0, k):
  r"""Closed-form replacement epsilon of shuffled k-ary RR (FMT'21 Cor 4.2, Eq. (11)).

  Feldman, McMillan, Talwar, arXiv:2012.12803, Thm 4.1 / Cor 4.2:

  .. math:: \varepsilon=\ln\Big(1+(e^{\varepsilon_0}-1)\Big(\frac{4\sqrt{2(k+1)\ln(4/\delta)}}
     {\sqrt{(e^{\varepsilon_0}+k-1)kn}}+\frac{4(k+1)}{kn}\Big)\Big)

  valid when ``p4 = k/((k+1)(e^eps0+k-1)) >= 8 ln(2/delta)/n`` (checked
  directly; the printed eps0-condition does not imply it for large k, digest
  §2.6). Outside it ``eps0`` is returned. Applies to k-RR (composed with any
  pre-processing), not to other randomizers.

  Returns:
    ``EpsilonResult(epsilon, delta, method="krr_closed_form",
    bound="upper")``; ``epsilon`` a float64 array. Bound: upper (k-RR only).
  """

  def run(*args):
    require_x64("krr_epsilon_closed_form")
    return _krr_cf_jit(*args)

  def validate():
    _check_common(n, eps0)
    checks.check_delta(delta)
    checks.check_int("k", k, min_value=2)

  # a list is a grid, as an array is
  delta, n, eps0, k = (np.asarray(x, np.float64) if isinstance(x, (list, tuple)) else x
                       for x in (delta, n, eps0, k))
  e = dispatch(run, (delta, n, eps0, k), validate)
  return EpsilonResult(epsilon=e, delta=delta, method="krr_closed_form",
                       bound="upper")


# ---------------------------------------------------------------------------
# App. G: the binary-RR lower bound
# ---------------------------------------------------------------------------

def _rr2_pmfs(n, eps0, width, ns=JAX):
  """eps-independent part of the App. G sums: the two count pmfs on
  the y-window (one ``log_binom_pmf`` call over ``width + 1`` points) and
  the window start (``ns``: the jitted kernels, or one question on the host)."""
  xp, f = ns.xp, special(ns)
  pi = 1.0 / (xp.exp(eps0) + 1.0)
  lpi, l1pi = -xp.log1p(xp.exp(eps0)), -xp.log1p(xp.exp(-eps0))
  m = n - 1.0
  lo = f.window_start(n, pi, width)
  y = lo + xp.arange(width, dtype=xp.float64)
  # Z = Bin(n-1, pi);  Y0 = Z + Bern(pi),  Y1 = Z + Bern(1-pi);
  # log P(Z = y - 1) and log P(Z = y) from one evaluation at lo - 1, ..., lo + width - 1
  lz_ext = f.log_bin_prob(lo - 1.0 + xp.arange(width + 1, dtype=xp.float64), m, pi)
  lz, lzm = lz_ext[1:], lz_ext[:-1]
  l0 = xp.logaddexp(l1pi + lz, lpi + lzm)
  l1 = xp.logaddexp(lpi + lz, l1pi + lzm)
  keep = y <= n
  return xp.exp(l0), xp.exp(l1), keep, lo, pi


def _rr2_hockey(eps, eps0, p0, p1, keep, ns=JAX):
  """max of both directions of the windowed hockey-stick sum at ``eps``."""
  xp = ns.xp
  e = xp.exp(eps)
  h01 = xp.sum(xp.where(keep, xp.maximum(p0 - e * p1, 0.0), 0.0))
  h10 = xp.sum(xp.where(keep, xp.maximum(p1 - e * p0, 0.0), 0.0))
  d = xp.maximum(h01, h10)
  return xp.where(eps >= eps0, 0.0, d)


def _rr2_width(n, eps0, max_n=None):
  _check_max_n(max_n)
  return static_size(
      (n, eps0), lambda: windows.window_size(n, 1.0 / (np.exp(np.asarray(eps0, np.float64)) + 1)),
      bound=None if max_n is None else (lambda: windows.window_size(max_n, 0.5)))


def _rr2_delta_lane(eps, n, eps0, width, ns=JAX):
  """The windowed sum of one lane (a lower bound: the cut mass is left out)."""
  return _rr2_hockey(eps, eps0, *_rr2_pmfs(n, eps0, width, ns)[:3], ns)


def _rr2_epsilon_lane(dl, n, eps0, width, num_iters=64, ns=JAX):
  """eps(delta) of one lane: the LOWER (infeasible) end of ``num_iters``
  halvings (BinSLower, Alg. 7). The windowed sum (without the tail) is <= the
  true delta, so the smallest eps with windowed delta <= target is <= the
  true eps. The pmfs do not depend on eps: computed once, outside the loop."""
  xp = ns.xp
  p0, p1, keep, _, _ = _rr2_pmfs(n, eps0, width, ns)

  def halve(_, ab):
    a, b = ab
    m = 0.5 * (a + b)
    feas = _rr2_hockey(m, eps0, p0, p1, keep, ns) - dl <= 0
    return xp.where(feas, a, m), xp.where(feas, m, b)

  a, _ = ns.fori_loop(0, num_iters, halve, (xp.zeros_like(dl), xp.zeros_like(dl) + eps0))
  return xp.maximum(a, 0.0)


@functools.partial(jit, static_argnames=("width",))
def _rr2_delta_jit(eps, n, eps0, *, width):
  args = jnp.broadcast_arrays(*[jnp.asarray(x, jnp.float64) for x in (eps, n, eps0)])
  shp = args[0].shape
  f = jax.vmap(lambda a, b, c: _rr2_delta_lane(a, b, c, width))
  return f(*[x.reshape(-1) for x in args]).reshape(shp)


@functools.partial(jit, static_argnames=("width", "num_iters"))
def _rr2_epsilon_jit(delta, n, eps0, *, width, num_iters=64):
  args = jnp.broadcast_arrays(*[jnp.asarray(x, jnp.float64) for x in (delta, n, eps0)])
  shp = args[0].shape
  f = jax.vmap(lambda a, b, c: _rr2_epsilon_lane(a, b, c, width, num_iters))
  return f(*[x.reshape(-1) for x in args]).reshape(shp)


def _rr2_lower(kind, value, n, eps0, max_n, check_value):
  """The rr2 lower ``kind`` ("delta" at eps, "epsilon" at delta) through dispatch:
  one question (:func:`for_inputs`, no ``max_n``), or an array on the CPU
  layout lane by lane, on the host (the lane's formula with ``ns = HOST``, no
  compiled program), else the jitted kernel."""
  kernel, lane = {"delta": (_rr2_delta_jit, _rr2_delta_lane),
                  "epsilon": (_rr2_epsilon_jit, _rr2_epsilon_lane)}[kind]

  def validate():
    _check_common(n, eps0)
    check_value()

  def jitted(value, n, eps0):
    return kernel(value, n, eps0, width=_rr2_width(n, eps0, max_n))

  def concrete(value, n, eps0):
    # one lane, or any number on the CPU layout (a host lane is as fast as a
    # warm jitted one there, and compiles nothing); each lane its own question
    if max_n is None and for_inputs(value, n, eps0, max_lanes=host_lanes()).is_host:
      return host_f64(each_lane(lambda v, m, e: host_call(lane, v, m, e, _rr2_width(m, e)),
                                value, n, eps0))
    return jitted(value, n, eps0)

  return dispatch(jitted, (value, n, eps0), validate, where=f"rr2_lower_{kind}",
                  eager=concrete)


def rr2_lower_delta(eps, *, n, eps0, max_n=None):
  r"""Binary-RR lower bound on shuffling delta(eps) (FMT'21 App. G, Eq. (27)).

  Feldman, McMillan, Talwar, arXiv:2012.12803, App. G: shuffled binary RR on
  ``X0 = (0,...,0)`` vs ``X1 = (1,0,...,0)``; the count of ones is
  ``Bin(n, pi)`` vs ``Bern(1-pi) * Bin(n-1, pi)``, ``pi = 1/(e^eps0+1)``;
  max of both directions.

  Returns:
    ``DeltaResult(delta, epsilon=eps, method="rr2_lower", bound="lower")``;
    ``delta`` a float64 array. Bound: lower for any generic eps0-LDP theorem
    (and for shuffled binary RR itself); the window omits < 1e-20 of mass,
    which only lowers it. n, eps0 concrete (``eps`` may be traced).
  """
  d = _rr2_lower("delta", eps, n, eps0, max_n,
                 lambda: checks.check_range("eps", eps, 0.0))
  return DeltaResult(delta=d, epsilon=eps, method="rr2_lower", bound="lower")


def rr2_lower_epsilon(delta, *, n, eps0, max_n=None):
  r"""Binary-RR lower bound on shuffling eps(delta) (FMT'21 App. G, BinSLower).

  See ``rr2_lower_delta``. Returns the lower end of the final bracket.
  Regression (an independent evaluation):
  (1e4, 1, 1e-6) -> 0.035659, (1e5, 1) -> 0.010142, (1e5, 4) -> 0.084714.

  Returns:
    ``EpsilonResult(epsilon, delta, method="rr2_lower", bound="lower")``;
    ``epsilon`` a float64 array. Bound: lower.
  """
  e = _rr2_lower("epsilon", delta, n, eps0, max_n, lambda: checks.check_delta(delta))
  return EpsilonResult(epsilon=e, delta=delta, method="rr2_lower", bound="lower")


# ---------------------------------------------------------------------------
# Sec. 6.1: RDP
# ---------------------------------------------------------------------------

@host_door(ON_HOST)
def clone_rdp(orders, *, n, eps0):
  r"""Renyi DP of shuffling eps0-LDP reports, from the clone pair (FMT'21 Sec. 6.1).

  Feldman, McMillan, Talwar, arXiv:2012.12803, Sec. 6.1 (Thm 3.2 + data
  processing), in count form:

  .. math:: e^{(\alpha-1)D_\alpha}=\sum_{c}\frac{w_c}{2^c(c+1)(e^{\varepsilon_0}+1)}
     \sum_a\binom{c+1}{a}(e^{\varepsilon_0}a+b)^\alpha(a+e^{\varepsilon_0}b)^{1-\alpha}

  windowed in (c, a) with the omitted mass times ``e^{alpha eps0}`` added.

  Args:
    orders: 1-D concrete array of real orders > 1.
    n: integer >= 1 (concrete). eps0: > 0 (concrete scalar).

  Returns:
    float64 array ``(len(orders),)``, each in ``[0, eps0]``.

  Bound: upper (any eps0-LDP randomizer, replacement). Cost grows like
  ``n * window``: fine to n ~ 1e5 at orders <= 256.
  """
  orders_np = checks.check_orders(orders)
  checks.check_int("n", n, min_value=1, scalar=True)
  checks.check_range("eps0", eps0, 0.0, checks.EPS0_MAX, lo_open=True, scalar=True)
  p = float(np.exp(eps0))
  beta = (p - 1.0) / (p + 1.0)
  q = 2.0 * p * p / (p + 1.0)
  wc, wa = windows.rdp_widths(n, np.exp(-eps0), 0.5, orders_np.max(), eps0)
  return pair_reference.pair_rdp(orders_np, n=float(n), p=p, beta=beta, q0=q, q1=q,
                         wc=wc, wa=wa, symmetric=True)


# ---------------------------------------------------------------------------
# Thm 4.1 / Cor 4.2 numerical pair for k-ary randomized response
# ---------------------------------------------------------------------------

def _krr41_params(eps0, k):
  e0 = jnp.exp(eps0)
  q4 = (e0 - 1.0) / (e0 + k - 1.0)
  p4 = k / ((k + 1.0) * (e0 + k - 1.0))
  return p4, q4


def _krr41_delta_scalar(eps, n, eps0, k, wm, wz, lower):
  """The Thm 4.1 double sum, windowed in m (Bin(n-1, 3 p4)) and z (Bin(s, 1/3))."""
  p4, q4 = _krr41_params(eps0, k)
  tm = 3.0 * p4
  e = jnp.exp(eps)
  al = q4 * (1.0 + e)
  mlo = windows.window_start(n - 1.0, tm, wm)
  m = mlo + jnp.arange(wm, dtype=jnp.float64)  # (wm,)
  s = m + 1.0
  lwm = log_binom_pmf(m, n - 1.0, tm)
  zlo = jnp.clip(jnp.floor(s / 3.0 - 0.5 * (wz - 1)), 0.0,
                 jnp.maximum(s + 1.0 - wz, 0.0))
  z = zlo[:, None] + jnp.arange(wz, dtype=jnp.float64)[None, :]  # (wm, wz)
  ss = s[:, None]
  okz = z <= ss
  lwz = log_binom_pmf(z, ss, 1.0 / 3.0)
  big_n = jnp.maximum(ss - z, 0.0)
  be = q4 * e * big_n + (e - 1.0) * (1.0 - q4) * z
  kk = jnp.floor(be / al) + 1.0
  # E[(al x - be)_+], x ~ Bin(N, 1/2):
  #   al N/2 Pr[Bin(N-1,1/2) >= k-1] - be Pr[Bin(N,1/2) >= k]
  # with X = Pr[Bin(N-1,1/2) >= k], f = Bin(k-1; N-1, 1/2):
  #   Pr[Bin(N-1) >= k-1] = X + f,  Pr[Bin(N) >= k] = X + f/2.
  nm1 = jnp.maximum(big_n - 1.0, 0.0)
  x = binomial.binom_sf(kk, nm1, 0.5)
  f = jnp.exp(log_binom_pmf(kk - 1.0, nm1, 0.5))
  has = big_n >= 1
  x = jnp.where(has, x, 0.0)
  f = jnp.where(has, f, 0.0)
  inner = jnp.maximum(al * big_n / 2.0 * (x + f) - be * (x + 0.5 * f), 0.0)
  term = jnp.where(okz & (m[:, None] <= n - 1.0),
                   jnp.exp(lwm[:, None] + lwz) * (3.0 / ss) * inner, 0.0)
  d = jnp.sum(term)
  if not lower:
    # cut m: P-mass; cut z within a kept m: (3/s) Bin(z) E[..] <= 1.5 al Bin(z)
    mhi = mlo + wm - 1.0
    mtail = (jnp.where(mlo >= 1, binomial.binom_cdf(mlo - 1.0, n - 1.0, tm), 0.0)
             + binomial.binom_sf(mhi + 1.0, n - 1.0, tm))
    zhi = zlo + wz - 1.0
    zt = (jnp.where(zlo >= 1, binomial.binom_cdf(zlo - 1.0, s, 1.0 / 3.0), 0.0)
          + binomial.binom_sf(zhi + 1.0, s, 1.0 / 3.0))
    d = d + mtail + 1.5 * al * jnp.max(jnp.where(m <= n - 1.0, zt, 0.0))
  d = jnp.where(eps >= eps0, 0.0, jnp.clip(d, 0.0, 1.0))
  bad = (eps0 <= 0) | (k < 2) | (n < 1) | jnp.isnan(eps) | (eps < 0)
  return jnp.where(bad, jnp.nan, d)


@functools.partial(jit, static_argnames=("wm", "wz", "lower"))
def _krr41_delta_jit(eps, n, eps0, k, *, wm, wz, lower=False):
  args = jnp.broadcast_arrays(*[jnp.asarray(x, jnp.float64) for x in (eps, n, eps0, k)])
  shp = args[0].shape
  f = jax.vmap(lambda *a: _krr41_delta_scalar(*a, wm, wz, lower))
  return f(*[a.reshape(-1) for a in args]).reshape(shp)


@functools.partial(jit, static_argnames=("wm", "wz"))
def _krr41_eps_jit(delta, n, eps0, k, *, wm, wz):
  args = jnp.broadcast_arrays(*[jnp.asarray(x, jnp.float64) for x in (delta, n, eps0, k)])
  shp = args[0].shape

  def one(dl, n_, e0, k_):
    fn = lambda e: _krr41_delta_scalar(e, n_, e0, k_, wm, wz, False) - dl
    hi, _ = solve.bracket_decreasing(fn, 0.0, e0, 1.0 - dl, -dl, num_iters=40)
    return jnp.where((dl <= 0) | (dl >= 1) | (e0 <= 0), jnp.nan, hi)

  return jax.vmap(one)(*[a.reshape(-1) for a in args]).reshape(shp)


def krr_thm41_widths(n, eps0, k):
  """Static (m-window, z-window) lengths of the Thm 4.1 k-RR sum (eager numpy).

  Their product is the cost of ``krr_thm41_delta`` (the front door skips the
  bound above a cell budget).
  """
  e0 = np.exp(np.asarray(eps0, np.float64))
  k = np.asarray(k, np.float64)
  tm = 3.0 * k / ((k + 1.0) * (e0 + k - 1.0))
  wm = windows.window_size(np.asarray(n, np.float64) - 1.0, tm)
  smax = float(np.max(np.minimum(np.asarray(n, np.float64),
                                 (np.asarray(n) - 1.0) * tm + wm)))
  wz = windows.window_size(smax, 1.0 / 3.0)
  return wm, wz


def krr_thm41_delta(eps, *, n, eps0, k):
  r"""Replacement delta(eps) of shuffled k-ary RR via FMT'21 Thm 4.1 (numerical pair).

  Feldman, McMillan, Talwar, arXiv:2012.12803, Thm 4.1 with Cor 4.2's
  parameters ``p4 = k/((k+1)(e^eps0+k-1))``, ``q4 = (e^eps0-1)/(e^eps0+k-1)``:
  the pair ``(A+G, B, C+1-G)`` vs ``(A, B+G, C+1-G)``,
  ``(A,B,C,.) ~ Mult(n-1; p4,p4,p4,1-3p4)``, ``G ~ Bern(q4)``; delta by the
  Thm 4.1 double sum (closed-form inner expectation), windowed in both
  sums with the cut mass added. Valid for k-RR composed with any (adaptive)
  pre-processing; needs no condition on n (unlike Eq. (11)).

  Returns:
    ``DeltaResult(delta, epsilon=eps, method="krr_thm41", bound="upper")``;
    ``delta`` a float64 array. Bound: upper (k-RR only).
  Regression: eps0=1, k=10 ->
  eps 0.02461579492.
  """
  _check_common(n, eps0)
  checks.check_int("k", k, min_value=2)
  checks.check_range("eps", eps, 0.0)
  wm, wz = krr_thm41_widths(n, eps0, k)
  d = dispatch(functools.partial(_krr41_delta_jit, wm=wm, wz=wz), (eps, n, eps0, k))
  return DeltaResult(delta=d, epsilon=eps, method="krr_thm41", bound="upper")


def krr_thm41_epsilon(delta, *, n, eps0, k):
  """Replacement eps(delta) of shuffled k-RR via FMT'21 Thm 4.1 (see ``krr_thm41_delta``).

  Returns:
    ``EpsilonResult(epsilon, delta, method="krr_thm41", bound="upper")``;
    ``epsilon`` a float64 array (upper end of the bracket). Bound: upper
    (k-RR only).
  """
  _check_common(n, eps0)
  checks.check_int("k", k, min_value=2)
  checks.check_delta(delta)
  wm, wz = krr_thm41_widths(n, eps0, k)
  e = dispatch(functools.partial(_krr41_eps_jit, wm=wm, wz=wz), (delta, n, eps0, k))
  return EpsilonResult(epsilon=e, delta=delta, method="krr_thm41", bound="upper")
