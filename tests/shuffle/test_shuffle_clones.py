"""Tests for the shuffle pair kernel, FMT'21 clone bounds and variation-ratio bounds.

Reference values and their sources:
* issue 11 table (independent evaluation; Wang digest §6 Table A): clone pair,
  stronger-clone pair, 2RR lower bound, all to 1e-6 relative;
* FMT clones digest §0 anchor / §5.3 tables (scipy float64 full sums, mpmath
  cross-checked there);
* brute-force double sums of the pair's definition (numpy, here).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxacct import shuffle as sh
from jaxacct.shuffle import bounds as shb


ROWS_N = np.array([1e4, 1e5, 1e5])
ROWS_E0 = np.array([1.0, 1.0, 4.0])
# issue 11 table, independent evaluation (Wang digest §6 Table A, 10 digits)
ISSUE11_CLONE = [0.053005, 0.015282, 0.169770]
ISSUE11_STRONG = [0.0432061581, 0.0124298975, 0.1181530665]
ISSUE11_RR2 = [0.0356588153, 0.0101424932, 0.0847139906]


def test_issue11_clone_column():
  eps = np.asarray(sh.clone_epsilon(1e-6, n=ROWS_N, eps0=ROWS_E0).epsilon)
  # the table prints 5-6 significant digits: compare to its rounding
  np.testing.assert_allclose(eps, ISSUE11_CLONE, rtol=0, atol=6e-7)
  # FMT digest §0 anchor, 12 digits (scipy full sum, brentq)
  assert abs(eps[2] - 0.169769747255) < 1e-10


def test_issue11_stronger_clone_column():
  eps = np.asarray(sh.stronger_clone_epsilon(1e-6, n=ROWS_N, eps0=ROWS_E0).epsilon)
  np.testing.assert_allclose(eps, ISSUE11_STRONG, rtol=1e-6)
  # and within 1e-4 of Wang et al.'s code (UB, T=30, digest Table A)
  np.testing.assert_allclose(eps, [0.0432064813, 0.0124309948, 0.1181609109],
                             atol=1e-4)


def test_issue11_rr2_lower_column():
  eps = np.asarray(sh.rr2_lower_epsilon(1e-6, n=ROWS_N, eps0=ROWS_E0).epsilon)
  np.testing.assert_allclose(eps, ISSUE11_RR2, rtol=1e-6)
  assert np.all(eps <= np.asarray(ISSUE11_RR2) + 1e-9)  # a lower bound


def test_fmt_digest_small_n_table_c():
  # FMT digest §5.3 Table C, "clone" column (scipy full sum)
  eps = sh.clone_epsilon(np.array([1e-2, 1e-3, 1e-4]), n=np.array([20, 50, 50]),
                             eps0=np.array([1.0, 2.0, 0.5]), max_n=64).epsilon
  np.testing.assert_allclose(eps, [0.571917531435, 1.96419792950, 0.241227306058],
                             rtol=1e-9)


def test_closed_forms():
  # FMT digest §0 anchor: Eq. (1) at (1e5, 4, 1e-6) = 0.534633991652
  assert abs(float(sh.clone_epsilon_closed_form(1e-6, n=1e5, eps0=4.0).epsilon)
             - 0.534633991652) < 1e-11
  # outside the validity region (eps0 > ln(n/(16 ln(4/delta)))): eps0
  assert float(sh.clone_epsilon_closed_form(1e-6, n=1000, eps0=2.0).epsilon) == 2.0
  # FMT digest Table E, Eq. (11): k=10 valid, k=100 fails p4 >= 8 ln(2/d)/n
  v = sh.krr_epsilon_closed_form(1e-6, n=1e4, eps0=np.array([1.0, 1.0, 3.0]),
                                     k=np.array([10, 100, 10])).epsilon
  np.testing.assert_allclose(v, [0.1105293918, 1.0, 0.6026874045], rtol=1e-9)


def test_clone_rdp_table_f():
  # FMT digest §5.3 Table F (n = 1000, eps0 = 1)
  r = sh.clone_rdp([2.0, 5.0, 16.0], n=1000, eps0=1.0)
  np.testing.assert_allclose(r, [0.002323335044, 0.005808426118, 0.01859042654],
                             rtol=1e-8)


def _pair_bruteforce(n, p, beta, q0, q1, eps):
  """H(P||Q), H(Q||P) from the definition: C ~ Bin(n-1, r0+r1), A|C ~
  Bin(C, rho), (D1, D2) in {(1,0), (0,1), (0,0)}."""
  from scipy import stats
  alpha = beta / (p - 1)
  r0, r1 = alpha * p / q0, alpha * p / q1
  lam = 1 - alpha - p * alpha
  rho = r0 / (r0 + r1)
  P, Q = {}, {}
  for c in range(n):
    wc = stats.binom.pmf(c, n - 1, r0 + r1)
    for a in range(c + 1):
      w = wc * stats.binom.pmf(a, c, rho)
      for (d1, d2), pd in (((1, 0), p * alpha), ((0, 1), alpha), ((0, 0), lam)):
        kp = (a + d1, c - a + d2)
        kq = (a + d2, c - a + d1)
        P[kp] = P.get(kp, 0) + w * pd
        Q[kq] = Q.get(kq, 0) + w * pd
  e = math.exp(eps)
  keys = set(P) | set(Q)
  h1 = sum(max(P.get(k, 0) - e * Q.get(k, 0), 0) for k in keys)
  h2 = sum(max(Q.get(k, 0) - e * P.get(k, 0), 0) for k in keys)
  return max(h1, h2)


@pytest.mark.parametrize("n,p,beta,q0,q1,eps", [
    (9, 3.0, 0.3, 3.0, 3.0, 0.2),        # leftover weight > 0
    (12, 4.0, 0.6, 4.0, 2.5, 0.3),       # asymmetric blanket
    (7, math.e, (math.e - 1) / (math.e + 1), math.e, math.e, 0.05),
])
def test_pair_delta_matches_definition(x64, n, p, beta, q0, q1, eps):
  got = float(shb.variation_ratio_pair_delta(eps, n=n, p=p, beta=beta, q0=q0, q1=q1))
  want = _pair_bruteforce(n, p, beta, q0, q1, eps)
  assert abs(got - want) <= 1e-13 + 1e-11 * want


def test_ordering_and_monotonicity():
  eps = np.linspace(0.0, 0.9, 10)
  c = np.asarray(sh.clone_delta(eps, n=200, eps0=1.0).delta)
  s = np.asarray(sh.stronger_clone_delta(eps, n=200, eps0=1.0).delta)
  lo = np.asarray(sh.rr2_lower_delta(eps, n=200, eps0=1.0).delta)
  assert np.all(lo <= s + 1e-15) and np.all(s <= c + 1e-15)
  assert np.all(np.diff(c) <= 1e-15) and np.all(np.diff(s) <= 1e-15)
  assert float(sh.clone_delta(1.0, n=200, eps0=1.0).delta) == 0.0


def test_jit_vmap_eager_agree(x64):
  ns = jnp.array([100.0, 1000.0, 700.0])
  e0 = jnp.array([0.5, 1.0, 2.0])
  eager = np.asarray(sh.clone_epsilon(1e-6, n=np.asarray(ns),
                                          eps0=np.asarray(e0), max_n=1000).epsilon)
  f = jax.jit(jax.vmap(lambda n, e: sh.clone_epsilon(
      1e-6, n=n, eps0=e, max_n=1000).epsilon))
  np.testing.assert_allclose(np.asarray(f(ns, e0)), eager, rtol=1e-10)
  # NaN policy: invalid traced lanes are NaN, valid ones untouched
  bad = np.asarray(f(jnp.array([100.0, 100.0, 100.5]), jnp.array([-1.0, 1.0, 1.0])))
  assert np.isnan(bad[0]) and np.isfinite(bad[1]) and np.isnan(bad[2])


def test_traced_n_needs_max_n(x64):
  with pytest.raises(ValueError, match="max_n"):
    jax.jit(lambda n: sh.clone_delta(0.1, n=n, eps0=1.0))(100.0)


@pytest.mark.parametrize("kw,match", [
    (dict(delta=1e-6, n=0, eps0=1.0), "n must be"),
    (dict(delta=1e-6, n=10.5, eps0=1.0), "n must be"),
    (dict(delta=1e-6, n=10, eps0=-1.0), "eps0"),
    (dict(delta=1.5, n=10, eps0=1.0), "delta"),
])
def test_bad_input(kw, match):
  with pytest.raises(ValueError, match=match):
    sh.clone_epsilon(**kw)


def _krr_row(eps0, k):
  """The k-RR row of the variation-ratio pair (Wang et al. Thm 5.1, digest §7.2):
  (p, beta, q0 = q1) = (e^eps0, (e^eps0 - 1) / (e^eps0 + k - 1), e^eps0)."""
  p = math.exp(eps0)
  return dict(p=p, beta=(p - 1.0) / (p + k - 1.0), q0=p, q1=p)


def test_variation_ratio_lower_and_krr_rows():
  # Wang digest §6 Table C "pair, exact" (lower bounds for k-RR)
  np.testing.assert_allclose(
      shb.variation_ratio_lower_epsilon(1e-6, n=1e4, **_krr_row(1.0, 10)).epsilon,
      0.0232516778, rtol=1e-8)
  np.testing.assert_allclose(
      shb.variation_ratio_lower_epsilon(1e-6, n=1e4, **_krr_row(2.0, 3)).epsilon,
      0.1076632150, rtol=1e-8)
  with pytest.raises(ValueError, match="q0/q1"):
    shb.variation_ratio_lower_delta(0.1, n=10, p=2.0, beta=0.3, q0=5.0, q1=1.0)


def _krr(k, e0):
  r = np.ones((k, k))
  np.fill_diagonal(r, math.exp(e0))
  return r / (math.exp(e0) + k - 1)


def test_check_blanket_condition():
  assert sh.check_blanket_condition(_krr(5, 2.0))[0]
  assert sh.check_blanket_condition(_krr(2, 0.5), 0.5)[0]
  # a non-extremal randomizer that fails the condition
  m = np.array([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [0.3, 0.4, 0.3]])
  ok, e0 = sh.check_blanket_condition(m)
  assert not ok and abs(e0 - math.log(2.5)) < 1e-12
  # a declared eps0 below the matrix's LDP level fails
  assert not sh.check_blanket_condition(_krr(3, 1.0), 0.5)[0]


@pytest.mark.parametrize("layout", ["cpu", pytest.param("accelerator", marks=pytest.mark.slow)])
def test_large_eps0_never_under_the_randomized_response(layout):
  # The shuffled reports are eps0-DP, and with no other report a clone (probability
  # (1 - 2/(e^eps0 + 1))^(n-1)) the pair is eps0-randomized response: each member's
  # delta lies between those two (rr2_lower_* is that response's own epsilon, a lower
  # bound). Checked from eps0 25, where the fast sums lose digits, past 354.9, where
  # e^(2 eps0) overflows, to the doors' limit 700; the response's delta at eps0 - 1 is
  # its closed form (1 - e^-1) / (1 + e^-eps0).
  import jaxacct
  e0 = np.array([25.0, 40.0, 120.0, 354.9, 355.1, 600.0, 700.0])
  n = np.full(e0.shape, 1000)
  rr_delta = -np.expm1(-1.0) / (1.0 + np.exp(-e0))   # the response's delta at eps0 - 1
  with jaxacct.set_layout(layout):
    lo = np.asarray(sh.rr2_lower_epsilon(np.full(e0.shape, 1e-6), n=n, eps0=e0).epsilon)
    for member in ("clone", "stronger_clone"):
      up = np.asarray(getattr(sh, f"{member}_epsilon")(np.full(e0.shape, 1e-6), n=n,
                                                          eps0=e0).epsilon)
      assert np.all(up >= lo * (1 - 1e-12)) and np.all(up <= e0), (member, up, lo)
      d = np.asarray(getattr(sh, f"{member}_delta")(e0 - 1.0, n=n, eps0=e0).delta)
      np.testing.assert_allclose(d, rr_delta, rtol=1e-12)
      assert np.all(d >= rr_delta * (1 - 1e-12))
  with pytest.raises(ValueError, match=r"eps0 must be in \(0, 700\]"):
    sh.clone_epsilon(1e-6, n=1000, eps0=720.0)


@pytest.mark.slow
def test_chen_rdp_past_its_sum_is_eps0():
  # Chen et al.'s RDP where its sum overflows (eps0 50, n = 1000): eps0 bounds every
  # order, so the epsilon is eps0 plus the conversion's log(1/delta) / (order - 1)
  r = sh.chen_epsilon(n=1000, eps0=50.0, delta=1e-6)
  assert 50.0 <= r.epsilon < 50.01
