"""Core numerics: x64 boundary, validation, log-space math, conversion, Gaussian.

Independent references: scipy.stats.norm (Gaussian profile), mpmath at 50
digits, dp-accounting 0.6.0 (`compute_epsilon`, `compute_delta`), and brute
force over dense order grids.
"""

import jax
import jax.numpy as jnp
import mpmath as mp
import math

import numpy as np
import pytest

import jaxacct
from jaxacct._core import checks, logmath
from jaxacct._core.batching import map_blocks
from jaxacct._core.solve import bisect, refine_bracket, safeguarded_root
from jaxacct._core.dtype import x64_enabled
from jaxacct._core.gaussian import gaussian_delta, gaussian_epsilon
from jaxacct._core.orders import DEFAULT_ORDERS
from jaxacct._core.gaussian import gaussian_rdp   # the Gaussian RDP kernel (internal)

mp.mp.dps = 50


# --------------------------------------------------------------- x64 policy
def test_eager_api_returns_float64_without_touching_global_flag():
  assert not jax.config.jax_enable_x64  # tests run in the float32 default
  eps = gaussian_epsilon(1.0, 1e-5).epsilon
  assert eps.dtype == jnp.float64
  assert not x64_enabled()
  assert jnp.zeros(1).dtype == jnp.float32


def test_kernel_inside_float32_jit_raises_clear_error():
  f = jax.jit(lambda s: gaussian_rdp(np.array([2.0]), s))
  with pytest.raises(RuntimeError, match="needs float64"):
    f(1.0)


def test_kernel_inside_x64_jit_works():
  with jax.enable_x64(True):
    f = jax.jit(lambda s: jaxacct.poisson.poisson_gaussian_rdp(np.array([2.0, 2.5]),
                                                       q=0.1, sigma=s))
    out = f(jnp.float64(1.0))
  assert out.dtype == jnp.float64
  ref = jaxacct.poisson.poisson_gaussian_rdp(np.array([2.0, 2.5]), q=0.1, sigma=1.0)
  np.testing.assert_allclose(out, ref, rtol=1e-14)


# --------------------------------------------------------------- validation
@pytest.mark.parametrize("call, match", [
    (lambda: gaussian_epsilon(0.0, 1e-5), "sigma must be in"),
    (lambda: gaussian_epsilon(1.0, 1.0), "delta must be in"),
    (lambda: gaussian_epsilon(1.0, 0.0), "delta must be in"),
    (lambda: gaussian_rdp([0.5], 1.0), "orders must be in"),
    (lambda: jaxacct.mechanisms.pure_dp_rdp([2.0], -1.0), "eps0 must be in"),
    (lambda: jaxacct.mechanisms.laplace_rdp([2.0], 0.0), "scale must be in"),
    (lambda: jaxacct.mechanisms.rdp_to_epsilon([2.0], [0.1], 1.5), "delta must be in"),
    (lambda: jaxacct.mechanisms.rdp_to_epsilon([1.0], [0.1], 1e-5), "orders must be in"),
    (lambda: jaxacct.mechanisms.rdp_to_epsilon([2.0], [-0.1], 1e-5), "rdp must be in"),
    (lambda: jaxacct.mechanisms.rdp_to_epsilon([2.0], [0.1], 1e-5, method="x"), "method must be one of"),
    (lambda: jaxacct.poisson.epsilon(q=1.5, sigma=1.0, num_steps=10, delta=1e-5), "q must be in"),
    (lambda: jaxacct.poisson.epsilon(q=0.1, sigma=1.0, num_steps=2.5, delta=1e-5), "num_steps must be an integer"),
    (lambda: jaxacct.poisson.epsilon(q=0.1, sigma=np.nan, num_steps=2, delta=1e-5), "sigma must be in"),
    (lambda: jaxacct.poisson.poisson_gaussian_rdp([2.0], q=0.1, sigma=1.0, direction="up"), "direction must be one of"),
])
def test_bad_input_raises_value_error_naming_parameter(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_checks_are_noops_on_tracers():
  @jax.jit
  def f(x):
    checks.check_positive("x", x)
    return x
  assert float(f(-1.0)) == -1.0


# --------------------------------------------------------------- logmath
def test_log_sub_exp_and_log1m_exp_against_mpmath(x64):
  a = np.array([0.0, -1e-10, -5.0, 700.0, -745.0])
  b = np.array([-1e-12, -2e-10, -50.0, 699.999, -746.0])
  out = np.asarray(logmath.log_sub_exp(a, b))
  ref = [float(mp.log(mp.e**mp.mpf(x) - mp.e**mp.mpf(y))) for x, y in zip(a, b)]
  np.testing.assert_allclose(out, ref, rtol=1e-12)
  x = np.array([-1e-20, -1e-5, -0.5, -0.7, -30.0])
  ref = [float(mp.log(1 - mp.e**mp.mpf(v))) for v in x]
  np.testing.assert_allclose(np.asarray(logmath.log1m_exp(x)), ref, rtol=1e-13)


# --------------------------------------------------------------- Gaussian
@pytest.mark.parametrize("sigma", [0.1, 0.5, 1.0, 3.0, 30.0, 100.0])
def test_gaussian_delta_matches_mpmath(sigma):
  eps = np.array([-1.0, 0.0, 0.01, 0.5, 2.0, 10.0])
  out = np.asarray(gaussian_delta(sigma, eps).delta)
  s = mp.mpf(sigma)
  ref = [float(mp.ncdf(1 / (2 * s) - e * s) - mp.e**e * mp.ncdf(-1 / (2 * s) - e * s))
         for e in map(mp.mpf, eps)]
  # rtol 1e-8: log_sub_exp of two log_ndtr values of size ~|eps sigma|^2/2
  # whose gap is small at large eps (documented in jaxacct._core.gaussian);
  # atol for values below 1e-300.
  np.testing.assert_allclose(out, ref, rtol=1e-8, atol=1e-300)


def test_gaussian_epsilon_inverts_delta():
  sig = np.array([0.3, 1.0, 5.0, 50.0])
  dl = np.array([1e-14, 1e-10, 1e-5, 1e-2])
  eps = np.asarray(gaussian_epsilon(sig[:, None], dl[None, :]).epsilon)
  back = np.asarray(gaussian_delta(sig[:, None], eps).delta)
  # Upper side of the root: the exact delta (mpmath, 40 digits) at eps is at most
  # the target (both answers are rounded up by their round-off bounds, so the
  # round trip itself may land a few 1e-13 above), and within 1e-9 of it.
  with mp.workdps(40):
    exact = np.array([[float(mp.ncdf(1 / (2 * mp.mpf(s)) - mp.mpf(e) * s)
                             - mp.e ** mp.mpf(e) * mp.ncdf(-1 / (2 * mp.mpf(s)) - mp.mpf(e) * s))
                       for e in row] for s, row in zip(sig, eps)])
  assert np.all(exact[eps > 0] <= np.broadcast_to(dl, eps.shape)[eps > 0])
  pos = eps > 0
  np.testing.assert_allclose(back[pos], np.broadcast_to(dl, eps.shape)[pos], rtol=1e-9)


def test_gaussian_epsilon_and_delta_never_under_the_exact_profile():
  """120 random (sigma, delta) and (sigma, epsilon), arrays (the jitted kernel)
  and delta down to 1e-300: the exact profile (mpmath, 50 digits) at the returned
  epsilon is at most delta, and the returned delta is at least the exact one."""
  rng = np.random.default_rng(7)
  sig = 10 ** rng.uniform(-1.3, 2.5, 120)
  dl = 10 ** rng.uniform(-300, -0.5, 120)
  ep = 10 ** rng.uniform(-3, 1.5, 120)
  eps = np.asarray(gaussian_epsilon(sig, dl).epsilon)
  dlt = np.asarray(gaussian_delta(sig, ep).delta)

  def exact(s, e):
    s, e = mp.mpf(float(s)), mp.mpf(float(e))
    return mp.ncdf(1 / (2 * s) - e * s) - mp.e ** e * mp.ncdf(-1 / (2 * s) - e * s)
  with mp.workdps(50):
    assert all(exact(s, e) <= d for s, e, d in zip(sig, eps, dl) if e > 0)
    # (an exact delta below float64's normal range may read 0)
    assert all(exact(s, e) <= max(d, 1e-300) for s, e, d in zip(sig, ep, dlt))


# --------------------------------------------------------------- conversion
def _dp_rdp():
  return pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")


@pytest.mark.parametrize("delta", [1e-12, 1e-8, 1e-5, 1e-2])
@pytest.mark.parametrize("scale", [1e-4, 0.1, 10.0])
def test_conversion_matches_dp_accounting(delta, scale):
  R = _dp_rdp()
  orders = np.array([1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0, 64.0, 256.0])
  rdp = scale * orders / 2.0
  r = jaxacct.mechanisms.rdp_to_epsilon(orders, rdp, delta)
  eps, order = r.epsilon, r.order
  ref_eps, ref_order = R.compute_epsilon(orders, rdp, delta)
  np.testing.assert_allclose(float(eps), ref_eps, rtol=1e-12)
  assert float(order) == ref_order
  d = jaxacct.mechanisms.rdp_to_delta(orders, rdp, float(eps) + 0.1).delta
  ref_d, ref_o2 = R.compute_delta(orders, rdp, float(eps) + 0.1)
  np.testing.assert_allclose(float(d), ref_d, rtol=1e-10)


def test_conversion_batched_and_classic_never_tighter():
  orders = DEFAULT_ORDERS
  rdp = np.linspace(0.01, 1.0, 7)[:, None] * orders[None, :]
  tight = jaxacct.mechanisms.rdp_to_epsilon(orders, rdp, 1e-6).epsilon
  classic = jaxacct.mechanisms.rdp_to_epsilon(orders, rdp, 1e-6, method="classic").epsilon
  assert tight.shape == (7,)
  assert np.all(np.asarray(tight) <= np.asarray(classic))
  # Gaussian RDP curve rho*alpha -> eps must be >= the exact Gaussian eps.
  sig = 1.0 / np.sqrt(2 * np.linspace(0.01, 1.0, 7))
  exact = np.asarray(gaussian_epsilon(sig, 1e-6).epsilon)
  assert np.all(np.asarray(tight) >= exact)


def test_default_grid_is_not_the_reason_a_bound_is_loose():
  # Dense reference grid (10x): the default grid loses < 0.1% of epsilon.
  dense = np.unique(np.concatenate([1 + np.geomspace(0.001, 11, 800),
                                    np.arange(2, 1025.0)]))
  for rho, delta in [(1e-4, 1e-5), (0.01, 1e-10), (0.3, 1e-6), (3.0, 1e-3)]:
    e_def = jaxacct.mechanisms.rdp_to_epsilon(DEFAULT_ORDERS, rho * DEFAULT_ORDERS,
                                   delta).epsilon
    e_den = jaxacct.mechanisms.rdp_to_epsilon(dense, rho * dense, delta).epsilon
    assert float(e_den) <= float(e_def) <= float(e_den) * 1.001


# --------------------------------------------------------------- bisection
def test_bisect_vmaps_and_keeps_feasible_side(x64):
  targets = jnp.array([0.1, 1.0, 7.5])
  res = bisect(lambda x: x**2 - targets, jnp.zeros(3), jnp.full(3, 10.0),
               increasing=True, num_iters=60)
  assert np.all(np.asarray(res.x) ** 2 <= np.asarray(targets))
  np.testing.assert_allclose(res.x, np.sqrt(targets), rtol=1e-12)
  res2 = jax.vmap(lambda t: bisect(lambda x: t / x - 1.0, 0.01, 100.0,
                                   increasing=False, log_scale=True).x)(targets)
  assert np.all(np.asarray(targets) / np.asarray(res2) <= 1.0 + 1e-15)
  np.testing.assert_allclose(res2, targets, rtol=1e-12)


def test_refine_bracket_probes_then_bisects(x64):
  # feasible: x >= root (decreasing problem); probes either side of the root
  # narrow the bracket first, then bisection; b stays feasible, a infeasible.
  root = jnp.array([0.3, 0.61, 0.9])
  feasible = lambda x: x >= root  # noqa: E731
  a, b = refine_bracket(feasible, jnp.zeros(3), jnp.ones(3), tol=1e-9, max_iters=60,
                        probes=(root + 1e-3, root - 1e-3))
  assert np.all(np.asarray(b) >= np.asarray(root)) and np.all(np.asarray(a) < np.asarray(root))
  assert np.all(np.asarray(b - a) <= 1e-9)
  # probes alone (no bisection rounds): the bracket is exactly the probes
  a, b = refine_bracket(feasible, jnp.zeros(3), jnp.ones(3), tol=1e-9, max_iters=0,
                        probes=(root + 1e-3, root - 1e-3))
  np.testing.assert_array_equal(b, root + 1e-3)
  np.testing.assert_array_equal(a, root - 1e-3)


def test_safeguarded_root_feasible_first_point_and_newton(x64):
  # delta(x) = exp(-x) <= target: root log(1/target); Newton on log delta.
  ev = lambda x: (jnp.exp(-x), jnp.exp(-x))  # noqa: E731

  def propose(x, d, slope, a, b):
    xn = x + jnp.log(d / target)
    return jnp.where((xn > a) & (xn < b), xn, 0.5 * (a + b))

  target = 1e-6
  a, b = safeguarded_root(ev, propose, 0.0, 50.0, 0.0, target=target, max_iter=40,
                          rtol=1e-13)
  # b feasible, a infeasible (plain Newton approaches from one side: the
  # halving guard closes the bracket, so it is narrow, not rtol-narrow)
  assert float(jnp.exp(-b)) <= target < float(jnp.exp(-a))
  np.testing.assert_allclose(float(b), -math.log(target), rtol=1e-9)
  # the first point already feasible: the bracket collapses onto it
  target = 2.0
  a, b = safeguarded_root(ev, propose, 0.0, 50.0, 0.0, target=target, max_iter=40,
                          rtol=1e-13)
  assert float(a) == 0.0 and float(b) == 0.0


def test_map_blocks_equals_vmap_for_any_lane_count(x64):
  f = lambda x: (jnp.sin(x[0]) * x[1], x[0] + x[1])  # noqa: E731
  for num in (1, 3, 8, 13):
    xs = (jnp.linspace(0.0, 1.0, num), jnp.linspace(1.0, 2.0, num))
    got = map_blocks(f, xs, batch_size=4)
    ref = jax.vmap(f)(xs)
    for g, r in zip(got, ref):
      assert g.shape == (num,)
      np.testing.assert_allclose(g, r, rtol=1e-15)


def test_log_expm1_and_log_binom_pmf_against_mpmath_and_scipy(x64):
  """Shared log-space helpers (one definition, used by poisson, allocation,
  shuffle): log(e^y - 1) vs mpmath at 30 digits over 1e-300..700 and the
  edge values; log Bin(k; n, p) vs scipy.stats.binom.logpmf, incl. p in {0, 1}."""
  import scipy.stats
  from jaxacct._core.logmath import log_binom_pmf, log_expm1
  mp.mp.dps = 30
  ys = np.array([1e-300, 1e-20, 1e-8, 0.3, 1.0, 30.0, 700.0])
  ref = np.array([float(mp.log(mp.expm1(mp.mpf(y)))) for y in ys])
  np.testing.assert_allclose(np.asarray(log_expm1(ys)), ref, rtol=1e-14)
  edge = np.asarray(log_expm1(np.array([0.0, -1.0, np.inf])))
  assert edge[0] == -np.inf and edge[1] == -np.inf and edge[2] == np.inf
  k = np.arange(0, 21, dtype=np.float64)
  for n, p in [(20, 0.3), (20, 1e-9), (20, 0.0), (20, 1.0), (1e7, 0.5)]:
    kk = k if n == 20 else k + 5e6 - 10
    ours = np.asarray(log_binom_pmf(kk, float(n), p))
    theirs = scipy.stats.binom.logpmf(kk, n, p)
    fin = np.isfinite(theirs)
    assert np.array_equal(fin, np.isfinite(ours)), (n, p)
    # scipy 1.x's logpmf is itself off by ~3e-8 at n = 1e7 (mpmath below
    # decides); at n = 20 both agree to 1e-12
    atol = 1e-7 if n > 1e6 else 1e-12
    np.testing.assert_allclose(ours[fin], theirs[fin], rtol=0, atol=atol)
  # Loader's saddle-point form vs mpmath at 40 digits, up to n = 1e9 (the
  # plain gammaln difference loses ~2e-7 relative at n = 1e7..1e9).
  mp.mp.dps = 40
  for n, p in [(1e7, 0.37), (1e9, 0.5), (1e7, 1e-6), (12345, 0.3), (1e6, 0.999)]:
    m, sd = n * p, math.sqrt(n * p * (1 - p))
    ks = np.unique(np.clip(np.round(
        [1.0, m - 30 * sd, m - sd, m, m + 0.5, m + 5 * sd, m + 30 * sd, n - 1]), 0, n))
    ours = np.asarray(log_binom_pmf(ks, n, p))
    ref = np.array([float(mp.loggamma(n + 1) - mp.loggamma(mp.mpf(k) + 1)
                          - mp.loggamma(n - mp.mpf(k) + 1) + k * mp.log(p)
                          + (n - k) * mp.log1p(-mp.mpf(p))) for k in ks])
    np.testing.assert_allclose(ours, ref, rtol=1e-13, atol=1e-12)
  assert float(log_binom_pmf(-1.0, 20.0, 0.3)) == -np.inf


# ------------------------------------------------------------ host lanes rule
def test_host_lanes_every_count_on_the_cpu_layout_one_with_block_programs():
  """The lane rule of the doors with a host lane path (Poisson PLD, shuffle)."""
  from jaxacct._core.batching import host_lanes
  from jaxacct._core.namespace import for_inputs
  with jaxacct.set_layout("cpu"):
    assert host_lanes() >= 2**62
    assert for_inputs(np.ones(10_000), 1.0, max_lanes=host_lanes()).is_host
    assert not for_inputs(jnp.ones(3), max_lanes=host_lanes()).is_host   # jax arrays: kernels
  with jaxacct.set_layout("accelerator"):
    assert host_lanes() == 1
    assert not for_inputs(np.ones(2), max_lanes=host_lanes()).is_host


def test_on_host_concrete_on_the_cpu_layout_only():
  """The host-or-kernel rule of the PLD composition, query and builders."""
  from jaxacct._core.batching import on_host
  seen = []
  with jaxacct.set_layout("cpu"):
    assert on_host() and on_host(np.ones(3), (jnp.ones(2), 1.0))   # concrete jax arrays too
    jax.jit(lambda x: seen.append(on_host(np.ones(2), {"p": x})) or x)(jnp.ones(2))
  assert seen == [False]                                             # a tracer: the kernel
  with jaxacct.set_layout("accelerator"):
    assert not on_host() and not on_host(np.ones(3))


def test_each_lane_is_each_one_lane_question():
  from jaxacct._core.namespace import each_lane
  seen = []

  def one(a, b):
    seen.append((type(a), type(b)))
    return a * 10.0 + b
  out = each_lane(one, np.array([[1.0], [2.0]]), [3, 4, 5])
  assert out.shape == (2, 3) and out.dtype == np.float64
  np.testing.assert_array_equal(out, [[13.0, 14.0, 15.0], [23.0, 24.0, 25.0]])
  assert set(seen) == {(np.float64, np.float64)}   # NumPy float64 scalars, as one question
  assert each_lane(one, 2.0, 1.0).shape == () and float(each_lane(one, 2.0, 1.0)) == 21.0
