"""Tests for jaxacct.allocation.pld with a mechanism given as a discrete PLD.

Oracles (all independent of the convex-order kernels):
* exact enumeration of the 1-of-t allocation profiles of a finite pair (P, Q):
  delta_rem(eps) = P_s + E_{Q^t}[(S/t - e^eps)_+], delta_add(eps) =
  E_{Q^t}[(1 - e^eps S/t)_+], S = sum_i L(Y_i), summed over the multinomial
  counts of the outcomes (randomized response: Kairouz et al. arXiv:1311.0776v4
  Thm 3.4; any 3-outcome pair);
* the built-in analytic Gaussian / Laplace allocation laws of this module
  (upper >= their lower, lower <= their upper) and the exact t = 1 Gaussian
  profile / digest t = 2 quadrature value (digest feldman-shenfeld-allocation-pld.md
  Sec. 5.2);
* exact composition of the exact 1-of-t remove PLD of randomized response.

The default tests share grid size N = 256 and batch sizes of 8 lanes.
"""

import itertools
import math

import numpy as np
import pytest
from scipy.special import gammaln

from jaxacct import pld as jpld
from jaxacct._core.gaussian import gaussian_epsilon
from jaxacct.allocation import pld

N = 256


# ---------------------------------------------------------------------------
# exact enumeration oracle
# ---------------------------------------------------------------------------

def _exact_profiles(p, q, t, eps):
  """(remove, add) deltas of 1-of-t allocation of the pair (p, q) at eps (exact).

  X = p/q on outcomes with q > 0 (X = 0 where p = 0); P-mass on q = 0 is the
  singular part P_s, which adds P_s to the remove profile (one coordinate is
  P-distributed) and nothing to the add profile.
  """
  p, q = np.asarray(p, float), np.asarray(q, float)
  m = q > 0
  xs, qs = p[m] / q[m], q[m]
  ps = float(p[~m].sum())
  g = math.exp(eps)
  rem, add = ps, 0.0
  lq = np.log(np.where(qs > 0, qs, 1.0))
  for c in itertools.product(range(t + 1), repeat=len(xs) - 1):
    last = t - sum(c)
    if last < 0:
      continue
    cnt = np.array(c + (last,))
    lw = gammaln(t + 1) - np.sum(gammaln(cnt + 1)) + np.sum(cnt * lq)
    w = math.exp(lw)
    s = float(np.dot(cnt, xs))
    rem += w * max(s / t - g, 0.0)
    add += w * max(1.0 - g * s / t, 0.0)
  return rem, add


def _rr_pair(eps0, delta0=0.0):
  a = (1 - delta0) / (1 + math.exp(-eps0))
  b = (1 - delta0) / (1 + math.exp(eps0))
  return np.array([delta0, a, b, 0.0]), np.array([0.0, b, a, delta0])


# the 3-outcome pair of the asymmetric tests (losses off any grid)
P3 = np.array([0.5, 0.3, 0.2])
Q3 = np.array([0.25, 0.35, 0.4])


@pytest.fixture(scope="session")  # built once per worker (see conftest.py)
def rr_batch():
  rr = jpld.randomized_response(1.0)
  ts = np.array([1, 2, 3, 10, 1, 2, 3, 100])
  es = np.array([0.0, 0.0, 0.0, 0.0, 0.3, 0.3, 0.3, 0.3])
  return ts, es, pld.allocation_pld_delta(mechanism=rr, steps_per_epoch=ts, epsilon=es, grid_size=N)


def test_randomized_response_exact_enumeration(rr_batch):
  # Exact pair (grid step = eps0): [lower, upper] holds the exact profile, and
  # for t <= 3 the gap is at float level (the sums have few atoms).
  ts, es, r = rr_batch
  P, Q = _rr_pair(1.0)
  for i, (t, e) in enumerate(zip(ts, es)):
    rem, add = _exact_profiles(P, Q, int(t), float(e))
    ru, rl = float(r.by_direction["remove"][0][i]), float(r.by_direction["remove"][1][i])
    au, al = float(r.by_direction["add"][0][i]), float(r.by_direction["add"][1][i])
    assert rl <= rem <= ru, (t, e, rl, rem, ru)
    assert al <= add <= au, (t, e, al, add, au)
    if t <= 3:
      assert ru - rl <= 1e-10 * rem and au - al <= 1e-10 * add, (t, e, rl, ru, al, au)
    else:   # second order in the lattice step at N = 256 (measured: 2.8e-2 at t = 100)
      assert ru - rl <= 5e-2 * rem and au - al <= 5e-2 * add, (t, e, rl, ru, al, au)
  # regression: t = 2, eps = 0.3 (exact enumeration, also by hand:
  # remove = q_a^2 (e - e^.3) + 2 q_a q_b ((e + 1/e)/2 - e^.3)).
  qa, qb = 1 / (1 + math.e), math.e / (1 + math.e)
  hand = qa**2 * (math.e - math.exp(0.3)) + 2 * qa * qb * max(
      (math.e + 1 / math.e) / 2 - math.exp(0.3), 0.0)
  assert abs(_exact_profiles(P, Q, 2, 0.3)[0] - hand) < 1e-15
  assert float(r.by_direction["remove"][1][5]) <= hand <= float(r.by_direction["remove"][0][5])


def test_randomized_response_with_delta0():
  # (eps0, delta0) pair: P has delta0 where Q = 0 (inf_mass) and Q has delta0
  # where P = 0 (the 0-atom of X).
  rr = jpld.randomized_response(0.5, delta0=1e-3)
  ts = np.array([1, 2, 3, 10] * 2)
  es = np.array([0.0] * 4 + [0.3] * 4)
  r = pld.allocation_pld_delta(mechanism=rr, steps_per_epoch=ts, epsilon=es, grid_size=N)
  P, Q = _rr_pair(0.5, 1e-3)
  for i, (t, e) in enumerate(zip(ts, es)):
    rem, add = _exact_profiles(P, Q, int(t), float(e))
    assert float(r.by_direction["remove"][1][i]) <= rem <= float(r.by_direction["remove"][0][i]), (t, e)
    assert float(r.by_direction["add"][1][i]) <= add <= float(r.by_direction["add"][0][i]), (t, e)
    assert float(r.by_direction["remove"][0][i]) - float(r.by_direction["remove"][1][i]) <= 1e-4 * rem   # exact mixture
  # delta_rem >= delta0 always (one coordinate is P-distributed)
  assert np.all(np.asarray(r.by_direction["remove"][1]) >= 1e-3 * (1 - 1e-9))


def test_large_zero_atom_valid():
  # P = point mass (loss 0.3), Q = (e^-0.3 there, the rest where P = 0): a
  # 26 % 0-atom of X, handled by the exact binomial mixture over the number
  # of zeros (t = 2 by hand: add delta(0.1) = q0^2 + 2 q0 (1 - q0) (1 - e^0.1
  # e^0.3 / 2) = 0.16474...).
  import jax.numpy as jnp
  mech = jpld.PLD(jnp.asarray([1.0]), 3, 0.1, jnp.asarray(0.0), True)
  P, Q = np.array([1.0, 0.0]), np.array([math.exp(-0.3), 1 - math.exp(-0.3)])
  ts = np.array([1, 2, 3, 10] * 2)   # as the delta0 test: one compile (16 components)
  es = np.array([0.0] * 4 + [0.1] * 4)
  r = pld.allocation_pld_delta(mechanism=mech, steps_per_epoch=ts, epsilon=es, grid_size=N)
  for i, (t, e) in enumerate(zip(ts, es)):
    rem, add = _exact_profiles(P, Q, int(t), float(e))
    assert float(r.by_direction["remove"][1][i]) <= rem + 1e-15 and rem <= float(r.by_direction["remove"][0][i]), (t, e)
    assert float(r.by_direction["add"][1][i]) <= add + 1e-15 and add <= float(r.by_direction["add"][0][i]), (t, e)
    assert float(r.by_direction["add"][0][i]) - float(r.by_direction["add"][1][i]) <= 1e-2 * add + 1e-12, (t, e)
    assert float(r.by_direction["remove"][0][i]) - float(r.by_direction["remove"][1][i]) <= 1e-2 * rem + 1e-12, (t, e)
  q0 = 1 - math.exp(-0.3)
  hand = q0**2 + 2 * q0 * (1 - q0) * (1 - math.exp(0.1) * math.exp(0.3) / 2)
  assert float(r.by_direction["add"][1][5]) <= hand <= float(r.by_direction["add"][0][5])
  assert float(r.by_direction["add"][0][5]) - float(r.by_direction["add"][1][5]) < 1e-9


def test_asymmetric_pair_and_pairpld_enumeration():
  # A 3-outcome pair whose losses are off the grid: connect-the-dots upper,
  # optimistic lower (from_pair); also PairPLD(remove, add) with the add PLD
  # of the reversed pair (add orientation), which must give the same brackets.
  h = 0.01
  up = jpld.from_pair(P3, Q3, step=h)
  lo = jpld.from_pair(P3, Q3, step=h, pessimistic=False)
  pair_up = jpld.PairPLD(up, jpld.from_pair(Q3, P3, step=h))
  pair_lo = jpld.PairPLD(lo, jpld.from_pair(Q3, P3, step=h, pessimistic=False))
  ts = np.array([1, 2, 3, 4, 1, 2, 3, 4])
  es = np.array([0.0] * 4 + [0.2] * 4)
  r1 = pld.allocation_pld_delta(mechanism=(up, lo), steps_per_epoch=ts, epsilon=es, grid_size=N)
  r2 = pld.allocation_pld_delta(mechanism=(pair_up, pair_lo), steps_per_epoch=ts, epsilon=es,
                                grid_size=N)
  for i, (t, e) in enumerate(zip(ts, es)):
    rem, add = _exact_profiles(P3, Q3, int(t), float(e))
    for r in (r1, r2):
      ru, rl = float(r.by_direction["remove"][0][i]), float(r.by_direction["remove"][1][i])
      au, al = float(r.by_direction["add"][0][i]), float(r.by_direction["add"][1][i])
      assert rl <= rem <= ru, (t, e, rl, rem, ru)
      assert al <= add <= au, (t, e, al, add, au)
      # first order (optimistic lower) in the step 0.01: a few percent at most
      assert ru - rl <= 0.06 * rem + 1e-12 and au - al <= 0.06 * add + 1e-12
  # the remove direction does not depend on how the add PLD is given
  np.testing.assert_allclose(np.asarray(r1.by_direction["remove"][0]), np.asarray(r2.by_direction["remove"][0]), rtol=1e-12)


@pytest.fixture(scope="session")  # built once per worker (see conftest.py)
def gauss_pld():
  up = jpld.gaussian(1.0, step=1e-3)
  lo = jpld.gaussian(1.0, step=1e-3, pessimistic=False)
  return up, lo


GAUSS_TS = np.array([1, 2, 10, 100, 1000, 10**4, 10**6, 2])
GAUSS_DS = np.array([1e-6] * 7 + [1e-10])


def test_gaussian_as_pld_oracles(gauss_pld):
  # sigma = 1 Gaussian given as a step-1e-3 PLD (CtD upper, optimistic lower)
  # vs independent values: t = 1 exact profile; t = 2 quadrature (digest
  # Sec. 5.2); t = 10, 1000 the digest's independent second-order prototype
  # brackets (Sec. 5.2 table), widened by the step-1e-3 PLD's rounding.
  r = pld.allocation_pld_epsilon(mechanism=gauss_pld, steps_per_epoch=GAUSS_TS, delta=GAUSS_DS,
                                 grid_size=N)
  ru, rl = np.asarray(r.upper), np.asarray(r.lower)
  assert np.all(np.isfinite(ru)) and np.all(np.isfinite(rl)) and np.all(ru >= rl)
  e1 = float(gaussian_epsilon(1.0, 1e-6).epsilon)
  assert rl[0] <= e1 <= ru[0]
  assert rl[1] <= 4.2012457 <= ru[1] and rl[7] <= 5.8562220 <= ru[7]
  assert rl[2] <= 2.652416 and ru[2] >= 2.652400 and ru[2] - rl[2] < 1e-2
  assert rl[4] <= 0.171817 and ru[4] >= 0.171683 and ru[4] - rl[4] < 6e-3   # N = 256
  assert np.all(np.diff(ru[:7]) < 0)


@pytest.mark.slow
def test_gaussian_as_pld_matches_builtin(gauss_pld):
  ts, ds = GAUSS_TS, GAUSS_DS
  r = pld.allocation_pld_epsilon(mechanism=gauss_pld, steps_per_epoch=ts, delta=ds, grid_size=N)
  g = pld.allocation_pld_epsilon(sigma=1.0, steps_per_epoch=ts, delta=ds, grid_size=N)
  ru, rl = np.asarray(r.upper), np.asarray(r.lower)
  gu, gl = np.asarray(g.upper), np.asarray(g.lower)
  assert np.all(np.isfinite(ru)) and np.all(np.isfinite(rl))
  assert np.all(ru >= gl) and np.all(rl <= gu), (ru, gl, rl, gu)
  assert np.all(ru >= rl)
  # within the discretisation error of a step-1e-3 PLD (CtD: second order;
  # optimistic: < one step in epsilon)
  assert np.all(ru <= gu * (1 + 2e-3) + 1e-3), (ru, gu)
  assert np.all(rl >= gl - 2e-3), (rl, gl)
  # exact oracles: t = 1 Gaussian profile; t = 2 digest quadrature (Sec. 5.2)
  e1 = float(gaussian_epsilon(1.0, 1e-6).epsilon)
  assert rl[0] <= e1 <= ru[0]
  assert rl[1] <= 4.2012457 <= ru[1] and rl[7] <= 5.8562220 <= ru[7]


def test_laplace_as_pld_matches_builtin():
  up = jpld.laplace(1.0, step=1e-4)
  lo = jpld.laplace(1.0, step=1e-4, pessimistic=False)
  ts = np.array([1, 2, 10, 100, 1, 2, 10, 100])
  es = np.array([0.3] * 4 + [0.8] * 4)
  r = pld.allocation_pld_delta(mechanism=(up, lo), steps_per_epoch=ts, epsilon=es, grid_size=N)
  g = pld.allocation_pld_delta(sigma=1.0, mechanism="laplace", steps_per_epoch=ts, epsilon=es,
                               grid_size=N)
  ru, rl, gu, gl = map(np.asarray, (r.upper, r.lower, g.upper, g.lower))
  assert np.all(ru >= gl) and np.all(rl <= gu), (ru, gl, rl, gu)
  # (deltas ~1e-15 at t = 100, eps = 0.8 are float noise: absolute slack 1e-13)
  assert np.all(ru <= gu * 1.01 + 1e-13) and np.all(rl >= gl * 0.99 - 1e-13), (ru, gu, rl, gl)
  # t = 1: the exact Laplace profile, delta(eps) = 1 - e^{(eps - 1/b)/2} (b = 1, eps <= 1)
  for i in (0, 4):
    ex = 1.0 - math.exp((es[i] - 1.0) / 2)
    assert rl[i] <= ex <= ru[i], (es[i], rl[i], ex, ru[i])


def test_large_t_finite():
  rr = jpld.randomized_response(1.0)
  ts = np.array([10**4, 10**5, 10**6, 10**7] * 2)
  ds = np.array([1e-8] * 4 + [1e-14] * 4)
  r = pld.allocation_pld_epsilon(mechanism=rr, steps_per_epoch=ts, delta=ds, grid_size=N)
  u, lo = np.asarray(r.upper), np.asarray(r.lower)
  assert np.all(np.isfinite(u)) and np.all(np.isfinite(lo)) and np.all(u >= lo)
  assert np.all(np.diff(u[:4]) < 0) and np.all(np.diff(u[4:]) < 0)  # more amplification
  assert np.all(u[4:] > u[:4])
  assert np.all(u / lo < 1.05), (u, lo)


@pytest.mark.slow
def test_scalar_matches_batch(rr_batch):
  ts, es, r = rr_batch
  rr = jpld.randomized_response(1.0)
  s = pld.allocation_pld_delta(mechanism=rr, steps_per_epoch=10, epsilon=0.0, grid_size=N)
  assert np.ndim(s.upper) == 0
  np.testing.assert_allclose([float(s.upper), float(s.lower)],
                             [float(r.upper[3]), float(r.lower[3])], rtol=1e-12)


def _composed_rr_exact(t, E_, eps):
  """Exact remove delta of E compositions of 1-of-t allocation of RR(1)."""
  qa, qb = 1 / (1 + math.e), math.e / (1 + math.e)
  j = np.arange(t + 1)
  w = np.exp(gammaln(t + 1) - gammaln(j + 1) - gammaln(t - j + 1)
             + j * math.log(qa) + (t - j) * math.log(qb))
  s = (j * math.e + (t - j) / math.e) / t            # S/t = likelihood ratio
  loss, pm = np.log(s), w * s                        # remove PLD: P-mass Q-mass * ratio
  L, Pm = loss, pm
  for _ in range(E_ - 1):
    L = (L[:, None] + loss[None, :]).ravel()
    Pm = (Pm[:, None] * pm[None, :]).ravel()
  return float(np.sum(Pm * np.maximum(-np.expm1(eps - L), 0.0)))


def test_epochs_and_export_composition():
  rr = jpld.randomized_response(1.0)
  r = pld.allocation_pld_delta(mechanism=rr, steps_per_epoch=10, num_epochs=2, epsilon=0.2,
                               grid_size=N)
  ex = _composed_rr_exact(10, 2, 0.2)
  ru, rl = float(r.by_direction["remove"][0]), float(r.by_direction["remove"][1])
  assert rl <= ex <= ru, (rl, ex, ru)
  assert ru - rl < 1e-2 * ex
  # k = 2 of t = 20 reduces to 2 x (1-of-10): same as 2 epochs (Lemma 3.2)
  r2 = pld.allocation_pld_delta(mechanism=rr, steps_per_epoch=20, num_selected=2, epsilon=0.2,
                                grid_size=N)
  np.testing.assert_allclose([float(r2.upper), float(r2.lower)],
                             [float(r.upper), float(r.lower)], rtol=1e-12)
  P = pld.allocation_plds(mechanism=rr, steps_per_epoch=10, num_epochs=2, grid_size=N,
                          composition_step=1e-3)
  assert float(jpld.delta(P.remove_lower, 0.2)) <= ex <= float(jpld.delta(P.remove_upper, 0.2))


@pytest.mark.parametrize("bad", ["mass", "negative", "optimistic_upper", "sigma",
                                 "object", "not_a_pair", "step"])
def test_invalid_pld_raises(bad):
  rr = jpld.randomized_response(1.0)
  kw = dict(steps_per_epoch=10, delta=1e-6, grid_size=N)
  if bad == "mass":       # masses sum to 1.5
    mech = rr._replace(probs=np.asarray(rr.probs) * 1.5)
  elif bad == "negative":
    mech = rr._replace(probs=np.array([-0.1, 0.0, 0.731, 0.0]))
  elif bad == "optimistic_upper":
    mech = jpld.gaussian(1.0, step=1e-2, pessimistic=False)
  elif bad == "sigma":
    mech = rr
    kw["sigma"] = 1.0
  elif bad == "object":
    mech = (1.0, 2.0)
  elif bad == "not_a_pair":   # optimistic masses labelled pessimistic: E e^-L > 1
    mech = jpld.gaussian(1.0, step=1e-2, pessimistic=False)._replace(pessimistic=True)
  else:
    mech = rr._replace(step=-1.0)
  with pytest.raises(ValueError):
    pld.allocation_pld_epsilon(mechanism=mech, **kw)


def test_optimistic_gaussian_is_not_a_pair():
  # Finding recorded in the module docstring: the engine's optimistic PLD has
  # implied Q-mass E_P[e^-L] > 1 (losses rounded down, P-mass kept), while
  # its pessimistic (connect-the-dots) PLD is a valid pair with E_P[e^-L] <= 1.
  for s in (0.5, 1.0, 2.0):
    for pess in (True, False):
      p = jpld.gaussian(s, step=1e-2, pessimistic=pess)
      loss = (p.offset + np.arange(p.probs.shape[0])) * p.step
      W = float(np.sum(np.asarray(p.probs) * np.exp(-loss)))
      assert (W <= 1 + 1e-12) if pess else (W > 1 + 1e-4), (s, pess, W)


def _law_functions(o, a):
  """C(a) = E(X - a)_+ and P(a) = E(a - X)_+ of a OneStep law (upper: minf is a
  first moment at +inf, adding minf to C; lower: atoms at their barycentres)."""
  x = np.exp((o.idx0 + np.arange(o.qm.size)) * o.step)
  pos = np.where(o.qm > 0, x * o.gm / np.where(o.qm > 0, o.qm, 1.0), x)
  C = np.sum(o.qm[None, :] * np.maximum(pos[None, :] - a[:, None], 0.0), axis=1)
  P = np.sum(o.qm[None, :] * np.maximum(a[:, None] - pos[None, :], 0.0), axis=1) + o.q0 * a
  return C, P


@pytest.mark.parametrize("sigma", [0.7, 2.0])
def test_convex_order_of_one_step_laws(sigma):
  # The key claim, checked directly: the Q-law of X = L(Y) (log-normal,
  # ln X ~ N(-mu, 2 mu), E X = 1) is dominated by the law built from the
  # pessimistic (connect-the-dots) PLD and dominates the law built from the
  # optimistic PLD, for every call C(a) = E(X - a)_+ and put P(a) = E(a - X)_+
  # (closed-form Black-Scholes values), i.e. for all non-negative monotone
  # convex functions. Also for "ceil" rounding (from_losses on a fine sample).
  from scipy.stats import norm
  s = 1.0 / sigma                               # sd of ln X (= sqrt(2 mu))
  a = np.exp(np.linspace(-6.0 / sigma, 6.0 / sigma, 401))
  d1 = (-np.log(a) + s**2 / 2) / s
  C_true = norm.cdf(d1) - a * norm.cdf(d1 - s)
  P_true = a * norm.cdf(-(d1 - s)) - norm.cdf(-d1)
  up = pld.upper_one_step(jpld.gaussian(sigma, step=2e-2))
  lo = pld.lower_one_step(jpld.gaussian(sigma, step=2e-2, pessimistic=False))
  Cu, Pu = _law_functions(up, a)
  Cu = Cu + up.minf
  Cl, Pl = _law_functions(lo, a)
  tol = 1e-12
  assert np.all(Cu >= C_true - tol) and np.all(Pu >= P_true - tol)
  assert np.all(Cl <= C_true + tol) and np.all(Pl <= P_true + tol)
  # second order (upper) / first order (lower) in the step
  assert np.max(Cu - C_true) < 1e-3 and np.max(C_true - Cl) < 2e-2
  # ceil rounding: losses rounded up with the P-mass kept (Q-mass drops to 0)
  z = np.linspace(-9, 9, 20001)
  w = norm.pdf(z)
  w /= w.sum()
  mu = 0.5 / sigma**2
  loss_q = -mu + z / sigma                      # ln X under Q at quantile nodes
  ceil = jpld.from_losses(loss_q, w * np.exp(loss_q), step=2e-2, rounding="ceil")
  Cs = np.sum(w[None, :] * np.maximum(np.exp(loss_q)[None, :] - a[:, None], 0), axis=1)
  Ps = np.sum(w[None, :] * np.maximum(a[:, None] - np.exp(loss_q)[None, :], 0), axis=1)
  uc = pld.upper_one_step(ceil)
  Cc, Pc = _law_functions(uc, a)
  Cc = Cc + uc.minf
  assert np.all(Cc >= Cs - tol) and np.all(Pc >= Ps - tol)
