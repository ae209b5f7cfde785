"""PLD engine: exact cases, dominance, dp-accounting 0.6.0 (called live), RDP.

References: the analytic Gaussian (mu-GDP) profile (Balle & Wang,
arXiv:1805.06530v2, Thm 8; jaxacct._core.gaussian), the exact binomial sum
for composed randomized response, brute-force enumeration of small
compositions, dp-accounting 0.6.0's PLD (pessimistic connect-the-dots and
optimistic privacy buckets), jaxacct.poisson's RDP epsilon.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxacct
from jaxacct import pld
from jaxacct import poisson
import mpmath as mp
from scipy.optimize import brentq

EPS_GRID = np.array([0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0])
mp.mp.dps = 40


def gaussian_delta(sigma, eps):
  """Exact Gaussian profile (Balle & Wang Thm 8), mpmath at 40 digits."""
  mu = mp.mpf(1) / mp.mpf(float(sigma))

  return np.vectorize(lambda e: float(_gdp_mp(mu, e)))(
      np.asarray(eps, np.float64))


def _gdp_mp(mu, e):
  e = mp.mpf(float(e))
  return mp.ncdf(-e / mu + mu / 2) - mp.exp(e) * mp.ncdf(-e / mu - mu / 2)


def gaussian_epsilon(sigma, delta):
  """Root of the exact profile (brentq to 1e-14 relative)."""
  mu = mp.mpf(1) / mp.mpf(float(sigma))
  f = lambda e: float(mp.log(_gdp_mp(mu, e)) - mp.log(delta))
  return brentq(f, 0.0, 60.0, xtol=1e-14, rtol=1e-14)


def _binom_rr_delta(eps0, n, eps):
  """Exact delta of n-fold randomized response (eps0-DP), log-space sum."""
  p = 1.0 / (1.0 + math.exp(-eps0))
  out = 0.0
  for k in range(n + 1):
    loss = (2 * k - n) * eps0
    if loss <= eps:
      continue
    lw = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
          + k * math.log(p) + (n - k) * math.log1p(-p))
    out += math.exp(lw) * (-math.expm1(eps - loss))
  return out


def _brute_delta(p, q, n, eps):
  """Exact hockey stick of the n-fold product pair by enumeration."""
  tot = 0.0
  for idx in itertools.product(range(len(p)), repeat=n):
    pp = np.prod([p[i] for i in idx])
    qq = np.prod([q[i] for i in idx])
    tot += max(pp - math.exp(eps) * qq, 0.0)
  return tot


# ------------------------------------------------------------------ exact


def test_gaussian_composition_equals_gdp_profile():
  # 16 steps of sigma=2 = mu-GDP with mu = 2 (sigma_eff = 0.5).
  pess = pld.compose(pld.gaussian(2.0, step=1e-3), 16)
  opt = pld.compose(pld.gaussian(2.0, step=1e-3, pessimistic=False), 16)
  exact = np.asarray(gaussian_delta(0.5, EPS_GRID))
  dp = np.asarray(pld.delta(pess, EPS_GRID))
  do = np.asarray(pld.delta(opt, EPS_GRID))
  assert np.all(dp >= exact * (1 - 1e-12))  # dominating
  assert np.all(do <= exact * (1 + 1e-12) + 1e-300)  # lower estimate
  # connect-the-dots error is second order in the step (1e-3)
  np.testing.assert_allclose(dp, exact, rtol=2e-5)
  for d in [1e-3, 1e-6, 1e-10]:
    e_exact = float(gaussian_epsilon(0.5, d))
    e_pess = float(pld.epsilon(pess, d))
    assert e_exact <= e_pess <= e_exact * (1 + 1e-5) + 1e-9
    assert float(pld.epsilon(opt, d)) <= e_exact + 1e-12


def test_randomized_response_composition_equals_binomial_sum():
  rr = pld.randomized_response(0.5)  # step = eps0: exact representation
  comp = pld.compose(rr, 60)
  ours = np.asarray(pld.delta(comp, EPS_GRID))
  ref = np.array([_binom_rr_delta(0.5, 60, e) for e in EPS_GRID])
  np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-15)
  # off-grid rounding is still dominating / lower
  pess = pld.compose(pld.randomized_response(0.5, step=0.03), 60)
  opt = pld.compose(pld.randomized_response(0.5, step=0.03,
                                            pessimistic=False), 60)
  assert np.all(np.asarray(pld.delta(pess, EPS_GRID)) >= ref - 1e-15)
  assert np.all(np.asarray(pld.delta(opt, EPS_GRID)) <= ref + 1e-15)


def test_huge_count_window_offsets_beyond_int32():
  # 3e9 steps of eps0=1e-5 randomized response: window start ~3e9 > 2^31
  # (regression: jnp.roll under jit mishandled such int64 shifts).  CLT:
  # -> mu-GDP with mu = sqrt(n) eps0; delta(0) = 2 Phi(mu/2) - 1.
  n, e0 = 3_000_000_000, 1e-5
  comp = pld.compose(pld.randomized_response(e0), n)
  # float64 FFT powers carry ~count * 1e-16 relative error (3e-7 here)
  assert abs(float(np.sum(np.asarray(comp.probs))) - 1) < 1e-5
  mu = math.sqrt(n) * e0
  ref = float(2 * mp.ncdf(mu / 2) - 1)
  assert float(pld.delta(comp, 0.0)) == pytest.approx(ref, rel=1e-3)


def test_from_pair_dominates_brute_force_enumeration():
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(5))
  q = rng.dirichlet(np.ones(5))
  eps = np.array([0.0, 0.1, 0.3, 0.7, 1.5])
  exact = np.array([_brute_delta(p, q, 3, e) for e in eps])
  for rounding in ["connect_dots", "ceil"]:
    pp = pld.compose(pld.from_pair(p, q, step=0.05, rounding=rounding), 3)
    assert np.all(np.asarray(pld.delta(pp, eps)) >= exact - 1e-14), rounding
  po = pld.compose(pld.from_pair(p, q, step=0.05, pessimistic=False), 3)
  assert np.all(np.asarray(pld.delta(po, eps)) <= exact + 1e-14)
  fine = pld.compose(pld.from_pair(p, q, step=1e-3), 3)
  np.testing.assert_allclose(np.asarray(pld.delta(fine, eps)), exact,
                             rtol=1e-5, atol=1e-9)
  # one step, single query: delta = sum (p - e^eps q)_+ exactly at grid eps
  one = pld.from_pair(p, q, step=1e-3)
  assert float(pld.delta(one, 0.0)) == pytest.approx(
      np.maximum(p - q, 0).sum(), rel=1e-6)


def test_from_pair_infinite_loss_and_add_direction():
  p = np.array([0.5, 0.3, 0.2, 0.0])
  q = np.array([0.4, 0.3, 0.0, 0.3])
  rem = pld.from_pair(p, q, step=0.01)
  add = pld.from_pair(q, p, step=0.01)
  assert float(rem.inf_mass) == pytest.approx(0.2)
  assert float(add.inf_mass) == pytest.approx(0.3)
  pair = pld.PairPLD(rem, add)
  for e in [0.0, 0.5, 2.0]:
    ref = max(_brute_delta(p, q, 1, e), _brute_delta(q, p, 1, e))
    assert float(pld.delta(pair, e)) >= ref - 1e-15
    assert float(pld.delta(pair, e)) == pytest.approx(ref, rel=1e-3)
  assert np.isinf(float(pld.epsilon(rem, 0.1)))  # inf_mass 0.2 > 0.1


def test_laplace_single_step_and_composition():
  b = 1.0
  lap = pld.laplace(b, step=1e-3)
  eps = np.array([0.0, 0.3, 0.9, 1.5])
  exact = np.where(eps < 1 / b, -np.expm1((eps - 1 / b) / 2), 0.0)
  ours = np.asarray(pld.delta(lap, eps))
  assert np.all(ours >= exact - 1e-15)
  np.testing.assert_allclose(ours, exact, atol=1e-7)
  # composition vs dp-accounting's Laplace PLD (called live), same step
  P = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
  ref = P.from_laplace_mechanism(b, value_discretization_interval=1e-3)
  ref = ref.self_compose(10)
  comp = pld.compose(lap, 10)
  for d in [1e-3, 1e-6]:
    assert float(pld.epsilon(comp, d)) == pytest.approx(
        ref.get_epsilon_for_delta(d), rel=1e-3)


def test_compose_many_heterogeneous_gaussians():
  g1 = pld.gaussian(2.0, step=1e-3)
  g2 = pld.gaussian(4.0, step=1e-3)
  comp = pld.compose_many([g1, g2], [3, 8])
  sig_eff = 1.0 / math.sqrt(3 / 4 + 8 / 16)
  exact = np.asarray(gaussian_delta(sig_eff, EPS_GRID))
  ours = np.asarray(pld.delta(comp, EPS_GRID))
  assert np.all(ours >= exact * (1 - 1e-12))
  np.testing.assert_allclose(ours, exact, rtol=1e-4)  # step 1e-3, 11 steps
  assert float(comp.inf_mass) < 1e-15
  assert abs(float(np.sum(np.asarray(comp.probs))) - 1) < 1e-12


@pytest.mark.parametrize("tilted", [False, True])
def test_compose_many_host_equals_the_kernel(tilted):
  # one formula, two layouts: concrete PLDs on the CPU layout compose on the host
  # (NumPy's FFT, no program), the accelerator layout in the compiled kernel; they
  # differ by FFT round-off only. delta 1e-10 reads a tilted tail (there 1e-8 apart,
  # each within the tilts' error estimate), 1e-5 the bulk
  h = 1e-4
  plds = [pld.poisson_gaussian(1.0, 256 / 60000, step=h), pld.gaussian(20.0, step=h),
          pld.laplace(10.0, step=h)]
  counts = [1000, 3, 2]
  host = pld.compose_many(plds, counts)
  assert isinstance(host.inf_mass, np.floating)          # no program ran
  with jaxacct.set_layout("accelerator"):
    kern = pld.compose_many(plds, counts)
  assert host.offset == kern.offset and host.probs.shape == kern.probs.shape
  np.testing.assert_allclose(np.asarray(host.probs), np.asarray(kern.probs), rtol=0,
                             atol=1e-15)
  np.testing.assert_allclose(float(host.inf_mass), float(kern.inf_mass), rtol=1e-9)
  delta, tol = (1e-10, 1e-7) if tilted else (1e-5, 1e-9)
  np.testing.assert_allclose(float(pld.epsilon(host, delta)), float(pld.epsilon(kern, delta)),
                             rtol=tol)


def test_compose_many_longer_windows_run_the_kernel():
  # past HOST_MAX_SIZE (2^20) points the compiled program's run time beats the host's
  # NumPy, its compile paid: 10 Gaussians (sigma 2) on a 3.1M-point window, by the
  # kernel, against the exact Gaussian of sigma 2 / sqrt(10) (Balle and Wang, Thm 8)
  g = pld.gaussian(2.0, step=1e-5)
  comp = pld.compose(g, 10)
  assert comp.probs.shape[0] > 1 << 20 and isinstance(comp.inf_mass, jax.Array)
  exact = np.asarray(gaussian_delta(2.0 / math.sqrt(10), EPS_GRID))
  ours = np.asarray(pld.delta(comp, EPS_GRID))
  assert np.all(ours >= exact * (1 - 1e-12))
  np.testing.assert_allclose(ours, exact, rtol=1e-5)


def test_to_dp_accounting_round_trip():
  pytest.importorskip("dp_accounting")
  g = pld.compose(pld.gaussian(2.0, step=1e-3), 4)
  conv = pld.to_dp_accounting(g)
  for e in [0.0, 0.5, 1.0]:
    assert conv.get_delta_for_epsilon(e) == pytest.approx(
        float(pld.delta(g, e)), rel=1e-9)


# ------------------------------------------------------------ dp-accounting


def _dpa_eps(sigma, q, steps, delta, step, pessimistic=True):
  P = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
  kw = {} if pessimistic else {"use_connect_dots": False}
  ref = P.from_gaussian_mechanism(sigma, sampling_prob=q,
                                  value_discretization_interval=step,
                                  pessimistic_estimate=pessimistic, **kw)
  return ref.self_compose(steps).get_epsilon_for_delta(delta)


FAST_SETTINGS = [  # (sigma, q, steps, delta)
    (2.0, 0.1, 100, 1e-8),
]

SLOW_SETTINGS = [
    (0.5, 1e-4, 10000, 1e-5), (0.5, 0.01, 100, 1e-3), (0.5, 0.5, 10, 1e-5),
    (3.0, 0.02, 50000, 1e-7), (1.0, 1e-3, 10000, 1e-8),
    (1.0, 0.01, 10000, 1e-5), (1.0, 0.1, 1000, 1e-6), (1.0, 0.5, 100, 1e-10),
    (2.0, 1e-3, 100000, 1e-5), (2.0, 0.01, 10000, 1e-12),
    (2.0, 0.1, 10000, 1e-5), (2.0, 0.5, 1000, 1e-3),
    (5.0, 0.01, 100000, 1e-5), (5.0, 0.1, 10000, 1e-8),
    (5.0, 0.5, 1000, 1e-12), (10.0, 0.01, 100000, 1e-3),
    (10.0, 0.1, 100000, 1e-5), (10.0, 0.5, 10000, 1e-10),
    (10.0, 1e-4, 1000, 1e-6), (0.7, 0.05, 3000, 1e-9),
    (1.0, 0.01, 1000, 1e-5),
]


def _check_against_dpa(sigma, q, steps, delta):
  # the door's grid step (the default of the composed pair it queries)
  step = pld.poisson_gaussian_composed(sigma=sigma, q=q, num_steps=steps).remove.step
  ours = poisson.epsilon(q=q, sigma=sigma, num_steps=steps, delta=delta,
                         method="pld").epsilon
  pess = _dpa_eps(sigma, q, steps, delta, step)
  opt = _dpa_eps(sigma, q, steps, delta, step, pessimistic=False)
  # same discretisation (step) on both sides; 1% relative (the bar)
  assert ours == pytest.approx(pess, rel=1e-2, abs=1e-6), (ours, pess)
  assert ours >= opt * (1 - 1e-9), (ours, opt)
  return ours, pess, opt


@pytest.mark.parametrize("sigma,q,steps,delta", FAST_SETTINGS)
def test_poisson_gaussian_matches_dp_accounting(sigma, q, steps, delta):
  _check_against_dpa(sigma, q, steps, delta)


@pytest.mark.slow
@pytest.mark.parametrize("sigma,q,steps,delta", SLOW_SETTINGS)
def test_poisson_gaussian_matches_dp_accounting_slow(sigma, q, steps, delta):
  _check_against_dpa(sigma, q, steps, delta)


@pytest.mark.slow
def test_tiny_delta_many_steps_stable_where_plain_fft_is_not():
  # sigma=1, q=1e-4, 1e5 steps, delta=1e-12: plain float64 FFT round-off
  # (~count * 1e-16 per point) swamps this tail.  dp-accounting 0.6.0 gives
  # 1.31 (step 4.15e-5), 0.273 (1e-4), 2.91/2.24 with tail truncation 1e-22
  # (measured 2026-11-23).  Ours (tilted FFT) is stable under refinement and
  # below RDP (1.430).
  s, q, t, d = 1.0, 1e-4, 100000, 1e-12
  e1, e2 = (float(pld.epsilon(pld.poisson_gaussian_composed(
      sigma=s, q=q, num_steps=t, step=h), d)) for h in (4e-5, 2e-5))
  rdp = float(poisson.epsilon(q=q, sigma=s, num_steps=t, delta=d).epsilon)
  assert e2 <= e1 <= e2 * 1.02
  assert e1 < rdp


@pytest.mark.slow
def test_gaussian_matches_dp_accounting_and_exact():
  for sigma, steps, delta in [(1.0, 1, 1e-5), (5.0, 1000, 1e-10)]:
    step = 1e-3 if steps == 1 else 1e-4
    comp = pld.compose(pld.gaussian(sigma, step=step), steps)
    ours = float(pld.epsilon(comp, delta))
    exact = float(gaussian_epsilon(sigma / math.sqrt(steps), delta))
    ref = _dpa_eps(sigma, 1.0, steps, delta, step)
    assert exact <= ours <= exact * (1 + 1e-4)
    assert ours == pytest.approx(ref, rel=1e-3)


# --------------------------------------------------------------------- RDP


def test_pld_epsilon_not_above_rdp_epsilon():
  for sigma, q, steps, delta in [(2.0, 0.1, 100, 1e-8)]:
    ours = poisson.epsilon(q=q, sigma=sigma, num_steps=steps, delta=delta,
                           method="pld").epsilon
    rdp = float(poisson.epsilon(q=q, sigma=sigma, num_steps=steps,
                                delta=delta).epsilon)
    assert ours <= rdp * (1 + 1e-3)
    assert ours < rdp  # strictly tighter in these settings


def test_poisson_front_door_pld_method():
  r = poisson.epsilon(q=0.1, sigma=2.0, num_steps=100, delta=1e-5,
                      method="pld")
  assert r.method == "pld" and r.bound == "upper"
  d = poisson.delta(q=0.1, sigma=2.0, num_steps=100, epsilon=float(r.epsilon),
                    method="pld")
  assert float(d.delta) == pytest.approx(1e-5, rel=1e-6)


def test_front_door_broadcasts():
  eps = poisson.epsilon(q=0.1, sigma=2.0, num_steps=100, delta=np.array([1e-8, 1e-5]),
                        method="pld").epsilon
  assert eps.shape == (2,) and eps[0] > eps[1] > 0
  assert poisson.epsilon(q=0.0, sigma=2.0, num_steps=10, delta=1e-5,
                         method="pld").epsilon == 0.0


# -------------------------------------------------------- jit/vmap/errors


def test_jit_vmap_and_eager_agree(x64):
  g = pld.compose(pld.gaussian(2.0, step=1e-3), 16)
  eps = jnp.asarray(EPS_GRID)
  eager = np.asarray(pld.delta(g, eps))
  jitted = jax.jit(pld.delta)(g, eps)
  vm = jax.vmap(lambda e: pld.delta(g, e))(eps)
  np.testing.assert_allclose(jitted, eager, rtol=1e-14)
  np.testing.assert_allclose(vm, eager, rtol=1e-14)
  ds = jnp.array([1e-3, 1e-6])
  np.testing.assert_allclose(jax.jit(pld.epsilon)(g, ds),
                             pld.epsilon(g, ds), rtol=1e-14)
  # compose and from_losses under jit with static sizes
  base = pld.gaussian(2.0, step=1e-3)
  cj = jax.jit(lambda p: pld.compose(p, 16, size=g.probs.shape[0]))(base)
  np.testing.assert_allclose(pld.delta(cj, eps), eager, rtol=1e-9)
  f = jax.jit(lambda l, p: pld.from_losses(l, p, step=0.5, offset=-1,
                                           size=4).probs)
  np.testing.assert_allclose(f(jnp.array([0.5, -0.5]), jnp.array([0.7, 0.3])),
                             [0.3, 0.0, 0.7, 0.0])  # losses -0.5, 0, 0.5, 1


def test_nan_policy_under_jit(x64):
  g = pld.gaussian(2.0, step=1e-2)
  out = jax.jit(pld.epsilon)(g, jnp.array([1.5, -0.1, 1e-5]))
  assert np.isnan(out[0]) and np.isnan(out[1]) and np.isfinite(out[2])
  assert np.isnan(jax.jit(pld.delta)(g, jnp.nan))


def test_bad_inputs_raise():
  g = pld.gaussian(2.0, step=1e-2)
  with pytest.raises(ValueError, match="sigma"):
    pld.gaussian(0.0)
  with pytest.raises(ValueError, match="q"):
    pld.poisson_gaussian(1.0, 1.5)
  with pytest.raises(ValueError, match="delta"):
    pld.epsilon(g, 0.0)
  with pytest.raises(ValueError, match="different grids"):
    pld.compose_many([g, pld.gaussian(2.0, step=2e-2)])
  with pytest.raises(ValueError, match="optimistic"):
    pld.compose_many([g, pld.gaussian(2.0, step=1e-2, pessimistic=False)])
  with pytest.raises(ValueError, match="direction"):
    pld.poisson_gaussian(1.0, 0.1, direction="both")
  with pytest.raises(ValueError, match="same shape"):
    pld.from_pair([0.5, 0.5], [1.0], step=0.1)
  with pytest.raises(ValueError, match="num_steps"):
    poisson.epsilon(q=0.1, sigma=1.0, num_steps=0, delta=1e-5, method="pld")


def test_float32_user_gets_float64():
  g = pld.gaussian(2.0, step=1e-2)
  assert pld.delta(g, 0.5).dtype == jnp.float64


def test_truncate_to_bucket_keeps_float64_in_a_float32_session():
  # Regression: truncate_to_bucket put its host-side masses on the device
  # with jnp.asarray outside the float64 boundary, so in a float32 session
  # (the user's default) they were silently truncated to float32. It is
  # internal and runs inside the public doors (float64 is entered at the
  # public surface, jaxacct._core.dtype): the door that composes with it
  # keeps float64 in a float32 session; as the doors call it, it keeps the mass.
  import warnings
  assert not jax.config.jax_enable_x64
  remove = pld.poisson_gaussian(1.0, 0.01)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    composed = pld.poisson_gaussian_composed(sigma=1.0, q=0.01, num_steps=2)
    with jax.enable_x64(True):
      t = pld.truncate_to_bucket(remove, 1e-18)
  for p in (composed.remove, composed.add, t):
    assert np.asarray(p.probs).dtype == np.float64
    assert np.asarray(p.inf_mass).dtype == np.float64
  # masses preserved exactly (kept + moved tails)
  total = float(np.sum(np.asarray(t.probs))) + float(t.inf_mass)
  ref = float(np.sum(np.asarray(remove.probs))) + float(remove.inf_mass)
  assert total == pytest.approx(ref, rel=1e-15)


def test_compose_far_tail_against_a_direct_convolution(x64):
  # 8 Poisson-subsampled Gaussian steps (q = 0.02, sigma = 0.8, grid 1e-3),
  # composed by np.convolve (sums of non-negative terms: relatively exact) and
  # by jaxacct.pld.compose. Before the tilts were restricted to those whose
  # tilted mass stays inside the window, compose was 2.2e-6 low at delta 1e-12
  # and 1.9e-5 low at 1e-14 (an under-report of the discrete PLD's epsilon);
  # measured after: 1.4e-10 and 2.3e-10.
  p = pld.poisson_gaussian(0.8, 0.02, step=1e-3, tail_mass=1e-20)
  probs = np.asarray(p.probs, np.float64)
  probs = probs[:np.flatnonzero(probs)[-1] + 1]
  conv = probs
  for _ in range(3):
    conv = np.convolve(conv, conv)
  inf = -math.expm1(8 * math.log1p(-float(p.inf_mass)))
  exact = pld.PLD(conv, 8 * int(p.offset), 1e-3, inf, True)
  composed = pld.compose(p, 8)
  for delta in (1e-8, 1e-10, 1e-12, 1e-14):
    assert float(pld.epsilon(composed, delta)) == pytest.approx(
        float(pld.epsilon(exact, delta)), rel=1e-8, abs=0.0)


@pytest.mark.parametrize("pessimistic", [True, False])
def test_from_losses_host_is_the_kernel_to_rounding(x64, pessimistic):
  # The host twin is the kernel's text with ns = HOST: the same grid, cells
  # equal to rounding (XLA's division and expm1 are not NumPy's, which are
  # correctly rounded: where a cell's split cancels, 1e-11 of the cell was
  # measured), the same inf mass; an optimistic atom never moves a cell (losses
  # drawn off the grid points). On the CPU layout from_losses of concrete atoms
  # is the host twin, bit for bit; the accelerator layout runs the kernel.
  rng = np.random.default_rng(7)
  for n in (1, 17, 1500):
    losses = rng.normal(0.0, 2.0, n)
    probs = rng.random(n) * (rng.random(n) > 0.2)
    losses[:min(n, 2)] = np.where(rng.random(min(n, 2)) > 0.5, np.inf, losses[:min(n, 2)])
    with jaxacct.set_layout("accelerator"):
      a = pld.from_losses(losses, probs, step=1e-3, pessimistic=pessimistic, inf_mass=0.01)
    assert isinstance(a.probs, jax.Array)
    b = pld.from_losses_host(losses, probs, step=1e-3, pessimistic=pessimistic, inf_mass=0.01)
    c = pld.from_losses(losses, probs, step=1e-3, pessimistic=pessimistic, inf_mass=0.01)
    assert isinstance(c.probs, np.ndarray) and (c.offset, c.inf_mass) == (b.offset, b.inf_mass)
    np.testing.assert_array_equal(c.probs, b.probs)
    assert isinstance(b.probs, np.ndarray) and b.probs.dtype == np.float64
    assert int(a.offset) == b.offset and np.asarray(a.probs).shape == b.probs.shape
    np.testing.assert_allclose(b.probs, np.asarray(a.probs), rtol=0.0,
                               atol=1e-12 * max(float(np.max(probs, initial=0.0)), 1e-300))
    assert b.inf_mass == pytest.approx(float(a.inf_mass), rel=1e-15, abs=0.0)
    assert float(np.sum(b.probs)) == pytest.approx(float(np.sum(np.asarray(a.probs))), rel=1e-13)
  with pytest.raises(ValueError, match="step"):
    pld.from_losses_host([0.1], [1.0], step=0.0)
  with pytest.raises(ValueError, match="probs"):
    pld.from_losses_host([0.1], [-1.0], step=1e-3)


def test_sparse_law_is_tilted_and_summed_on_its_atoms(x64):
  # A law whose atoms cover under 1/8 of its grid (a balls-in-bins prefix's
  # ~2,000 atoms on 100,000 points) is evaluated on its atoms: log-MGFs equal
  # the lattice formula (log_mgf_lattice) to 1e-13 relative (measured 7e-15
  # on the README run's prefixes), the tilted spectra bit for bit; a dense
  # law keeps the lattice formula itself.
  from jaxacct._core import tilted_fft
  from jaxacct._core.namespace import HOST
  rng = np.random.default_rng(3)
  probs = np.zeros(40_000)
  idx = np.sort(rng.choice(probs.size, 900, replace=False))
  probs[idx] = rng.random(idx.size) * np.exp(-rng.random(idx.size) * 30)
  sparse = pld.law(pld.PLD(probs, -5_000, 1e-4, 0.0, True))
  assert sparse.atoms is not None and sparse.atoms.size == 900
  lams = np.concatenate([np.geomspace(1e-3, 1e9, 97), -np.geomspace(1e-3, 1e9, 97), [0.0]])
  ref = tilted_fft.log_mgf_lattice(probs, 1e-4, lams, 0, HOST)
  np.testing.assert_allclose(sparse.lmgf(lams), ref, rtol=1e-13, atol=1e-13)
  for lam in (0.0, 2.3714, 17.78):
    k = float(sparse.lmgf(np.array([lam]))[0])
    with np.errstate(divide="ignore"):
      t = probs if lam == 0.0 else np.exp(np.minimum(
          np.log(probs) + lam * 1e-4 * np.arange(probs.size) - k, 0.0))
    want = np.fft.rfft(tilted_fft.wrap(t[None, :], 49_152, np)[0])
    assert np.array_equal(sparse.spectrum(lam, 49_152), want)
  dense = pld.law(pld.gaussian(1.0, step=1e-3))
  assert dense.atoms is None
  np.testing.assert_array_equal(dense.lmgf(lams[:5]), tilted_fft.log_mgf_lattice(
      np.asarray(dense.p), 1e-3, lams[:5], 0, HOST))


@pytest.mark.parametrize("n, step", [(700, 1e-3), (600, 0.1), (400, 0.01), (300, 0.5)])
def test_host_query_of_one_repetition_is_exact(x64, n, step):
  # The engine's count 1 (pair_epsilons: the query's tables on the host,
  # running sums scaled by e^{kh} inside a block, the block products where
  # 256 h > 30 as at h = 0.5) against mpmath's root of
  # sum p (1 - e^{eps - l})_+ = delta at 30 digits: never below it, 1e-12
  # above at most; and the jitted query (pld.epsilon) to 1e-12. The third
  # case mixes unit atoms with atoms 1e12 times smaller (the running sums add
  # the later atoms only, never subtract an atom back out).
  rng = np.random.default_rng(n)
  p = rng.random(n) ** 8
  if n == 400:
    p = np.full(n, 1e-12)
    p[::50] = 1.0
  p *= 0.999 / p.sum()
  off = -n // 4
  P = pld.PLD(p, off, step, 0.0, True)
  losses = [mp.mpf(off + i) * mp.mpf(step) for i in range(n)]
  for delta in (1e-2, 1e-5, 1e-9):
    got = pld.pair_epsilons(pld.PairPLD(P, P), np.array([1]), delta)[0]
    assert got == pytest.approx(float(pld.epsilon(P, delta)), rel=1e-12, abs=1e-300)
    f = lambda e: mp.fsum(mp.mpf(p[i]) * -mp.expm1(e - l)   # noqa: E731
                          for i, l in enumerate(losses) if l > e) - delta
    lo, hi = mp.mpf(0), max(losses)
    if f(lo) <= 0:
      assert got == pytest.approx(0.0, abs=1e-12)
      continue
    for _ in range(70):
      mid = (lo + hi) / 2
      lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    assert float(hi) * (1 - 1e-15) <= got <= float(hi) + 1e-12 * (1 + float(hi)), (delta, got)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_epsilon_on_atoms_is_the_dense_query(x64, seed):
  # A sparse PLD's epsilon on its atoms only (the engine's count 1 of a law
  # with atoms on under 1/8 of its grid: the gaps' recurrences, the segment
  # solve at the first atom with D <= delta) against the jitted query on the
  # whole grid: 2e-13 relative (both inside the 1e-13 allowance of the exact
  # segment solve); against mpmath's root of
  # inf + sum p (1 - e^{eps - l})_+ = delta: never below it, 1e-12 above at
  # most. Seeds: losses spanning 3 to 150 nats (several chunks of 30), an inf
  # mass, a delta below and above the largest atom's mass.
  rng = np.random.default_rng(seed)
  h, n = 1e-3, (3_000, 40_000, 150_000, 20_000)[seed]
  atoms = np.unique(rng.integers(0, n, 400))
  p = np.zeros(n)
  p[atoms] = rng.random(atoms.size) ** 4
  p *= 0.999 / p.sum()
  offset, inf = -n // 3, (0.0, 1e-7, 0.0, 1e-9)[seed]
  P = pld.PLD(p, offset, h, inf, True)
  for delta in (1e-9, 1e-5, 1e-2):
    dense = float(pld.epsilon(P, delta))      # the jitted query on the whole grid
    got = pld.pair_epsilons(pld.PairPLD(P, P), np.array([1]), delta)[0]   # on the atoms
    assert got == pytest.approx(dense, rel=2e-13, abs=1e-300)
    if delta <= inf:                         # the inf mass alone exceeds delta
      assert got == dense == math.inf
      continue
    losses = [mp.mpf(int(offset + i)) * mp.mpf(h) for i in atoms]
    f = lambda e: mp.mpf(inf) + mp.fsum(mp.mpf(p[i]) * (1 - mp.exp(e - l))   # noqa: E731
                                        for i, l in zip(atoms, losses) if l > e) - delta
    if f(mp.mpf(0)) <= 0:
      assert got == pytest.approx(0.0, abs=1e-12)
      continue
    lo, hi = mp.mpf(0), max(losses)          # f(lo) > 0 >= f(hi): bisection
    for _ in range(80):
      mid = (lo + hi) / 2
      lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    want = float(hi)
    assert want <= got <= want + 1e-12 * (1 + abs(want))
  Q = pld.PLD(p, offset, h, 0.5, True)
  assert pld.pair_epsilons(pld.PairPLD(Q, Q), np.array([1]), 0.1)[0] == math.inf
