"""RDP of shuffling: Chen et al. and Girgis et al. (``jaxacct.shuffle.bounds``,
``chen_epsilon``, ``girgis_epsilon``).

Sources of the reference values (cited next to each):
* [chen-digest] /work/shared/digests/chen-rdp-shuffle-enhanced.md, §4.2
  (values computed by the digest author from the full untruncated sum).
* [girgis-digest] /work/shared/digests/girgis-rdp-shuffle-model.md, §8 and
  §4.1 (float64, cross-checked with mpmath at 60 digits by the digest author).
* Oracles computed here: the literal multinomial enumeration (cells
  (n0, n1, n2) and Delta), an mpmath enumeration of the clone pair's binomial
  mixture, and brute-force enumeration of shuffled binary randomized response.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from jaxacct import shuffle as sh
from jaxacct.shuffle import bounds as shb


# One order tuple and one (n, eps0) batch per fixture: one compile each.
# Default run: upper bound only, few lanes (cost per lane does not depend on n).
CHEN_ORDERS = (2.0, 2.5, 3.0, 4.0, 5.0, 8.0, 16.0, 64.0)
CHEN_LANES = [(6, 1.0), (8, 0.5), (10, 2.0), (12, 1.5), (5, 1.0), (7, 2.0), (6, 0.3),
              (10**4, 2.0), (10**4, 4.0), (10**4, 6.0), (100, 2.0)]
# Slow run: the full [chen-digest] §4.2 tables, upper and lower brackets.
SLOW_ORDERS = (2.0, 3.0, 4.0, 5.0, 8.0, 16.0, 64.0, 128.0, 1000.0)
SLOW_LANES = [(10**4, e) for e in (0.1, 0.5, 1.0, 2.0, 3.0, 4.0, 5.25, 6.0)] + [
    (100, 2.0), (1000, 1.0), (1000, 2.0)]


def _tables(orders, lanes, lower):
  n = np.array([l[0] for l in lanes], np.float64)
  e = np.array([l[1] for l in lanes])
  up = np.asarray(shb.chen_exact_rdp(orders, n=n, eps0=e))
  lo = (np.asarray(shb.chen_exact_rdp(orders, n=n, eps0=e, bound="lower")) if lower
        else np.full_like(up, np.nan))
  return {l: (up[i], lo[i]) for i, l in enumerate(lanes)}, orders


@pytest.fixture(scope="session")  # built once per worker (see conftest.py)
def chen_tables():
  return _tables(CHEN_ORDERS, CHEN_LANES, lower=False)


@pytest.fixture(scope="session")  # built once per worker (see conftest.py)
def chen_slow_tables():
  return _tables(SLOW_ORDERS, SLOW_LANES, lower=True)


def _get(tab, n, e, lam):
  tab, orders = tab
  up, lo = tab[(n, e)]
  j = orders.index(lam)
  return up[j], lo[j]


# ---------------------------------------------------------------- oracles --

def literal_multinomial_rdp(n, eps0, lam, reverse=False):
  """Literal sum over multinomial cells (n0, n1, n2) and Delta (mpmath)."""
  mp.mp.dps = 40
  p = mp.e ** (-mp.mpf(eps0))
  q = mp.e ** mp.mpf(eps0) / (mp.e ** mp.mpf(eps0) + 1)
  P0, P1 = {}, {}
  for n0 in range(n):
    for n1 in range(n - n0):
      n2 = n - 1 - n0 - n1
      m = (mp.factorial(n - 1) / (mp.factorial(n0) * mp.factorial(n1) * mp.factorial(n2))
           * (p / 2) ** (n0 + n1) * (1 - p) ** n2)
      for d, pd in ((1, q), (0, 1 - q)):
        o0 = (n0 + d, n1 + 1 - d)
        o1 = (n0 + 1 - d, n1 + d)
        P0[o0] = P0.get(o0, 0) + m * pd
        P1[o1] = P1.get(o1, 0) + m * pd
  if reverse:
    P0, P1 = P1, P0
  s = mp.fsum(P0[k] ** lam * P1[k] ** (1 - lam) for k in P0)
  return float(mp.log(s) / (lam - 1))


def clone_pair_rdp_mp(n, eps0, lam):
  """FMT clone pair (Feldman-McMillan-Talwar arXiv:2012.12803v4 Thm 3.2) as a
  binomial mixture: C ~ Bin(n-1, e^-eps0), A|C ~ Bin(C, 1/2), and the
  first coordinate shifted by Bern(e^eps0/(e^eps0+1)) under P, by
  Bern(1/(e^eps0+1)) under Q. Enumerated in mpmath."""
  mp.mp.dps = 40
  E = mp.e ** mp.mpf(eps0)
  p = 1 / E
  a0 = E / (E + 1)
  tot = mp.mpf(0)
  for c in range(n):
    wc = mp.binomial(n - 1, c) * p ** c * (1 - p) ** (n - 1 - c)
    for k in range(c + 2):   # first coordinate value, total c + 1
      b = lambda j: mp.binomial(c, j) / mp.mpf(2) ** c if 0 <= j <= c else 0
      pk = a0 * b(k - 1) + (1 - a0) * b(k)
      qk = (1 - a0) * b(k - 1) + a0 * b(k)
      if pk > 0:
        tot += wc * pk ** lam * qk ** (1 - lam)
  return float(mp.log(tot) / (lam - 1))


def shuffled_rr_rdp_brute(n, eps0, lam):
  """Max over all neighbouring pairs of inputs in {0,1}^n (replace-one) of the
  Renyi divergence of the histogram of shuffled binary RR (exact)."""
  e = math.exp(eps0)
  keep = e / (e + 1)

  def hist(xs):
    dist = np.zeros(n + 1)
    for ys in itertools.product((0, 1), repeat=n):
      pr = 1.0
      for x, y in zip(xs, ys):
        pr *= keep if x == y else 1 - keep
      dist[sum(ys)] += pr
    return dist

  best = 0.0
  for k in range(n):   # k ones among the n-1 common users
    base = (1,) * k + (0,) * (n - 1 - k)
    P, Q = hist(base + (0,)), hist(base + (1,))
    for A, B in ((P, Q), (Q, P)):
      best = max(best, math.log(np.sum(A ** lam * B ** (1 - lam))) / (lam - 1))
  return best


# ------------------------------------------------------------- Chen et al --

@pytest.mark.parametrize("n,e,lam,ref", [
    # [chen-digest] §4.2 brute-force sanity values (full enumeration)
    (6, 1.0, 2.0, 0.3705813221829),
    (8, 0.5, 3.0, 0.0746048451900),
    (10, 2.0, 4.0, 1.7496609838065),
    (12, 1.5, 5.0, 1.1337740310417),
])
def test_chen_exact_small_n_matches_brute_force(chen_tables, n, e, lam, ref):
  up, _ = _get(chen_tables, n, e, lam)
  # every integer is a grid edge at these n: the binned sum is the exact sum
  assert up == pytest.approx(ref, rel=1e-12)


def test_chen_literal_multinomial_and_clone_pair_oracles(chen_tables):
  for n, e, lam in [(6, 1.0, 2.0), (10, 2.0, 4.0), (8, 0.5, 2.5)]:
    lit = literal_multinomial_rdp(n, e, lam)
    rev = literal_multinomial_rdp(n, e, lam, reverse=True)
    clone = clone_pair_rdp_mp(n, e, lam)
    assert rev == pytest.approx(lit, rel=1e-13)     # Cor. 1's max is redundant
    assert clone == pytest.approx(lit, rel=1e-13)   # Chen exact == FMT clone RDP
    up, _ = _get(chen_tables, n, e, lam)
    assert up == pytest.approx(lit, rel=1e-12)


# [chen-digest] §4.2, n = 1e4: (eps0, lambda, exact D^lambda)
CHEN_REF = [(0.1, 4.0, 2.206662e-06), (1.0, 4.0, 4.644232e-04), (2.0, 4.0, 3.430168e-03),
            (3.0, 4.0, 1.318785e-02), (4.0, 4.0, 4.084171e-02), (5.25, 4.0, 1.546463e-01),
            (6.0, 4.0, 1.869625e+00), (2.0, 2.0, 1.715075e-03), (2.0, 3.0, 2.572618e-03),
            (2.0, 5.0, 4.287729e-03), (2.0, 8.0, 6.860504e-03), (2.0, 16.0, 1.372241e-02),
            (2.0, 64.0, 5.500583e-02), (4.0, 64.0, 2.539539), (3.0, 128.0, 1.015048),
            (0.5, 4.0, 7.911982e-05)]


@pytest.mark.parametrize("e,lam,ref", [r for r in CHEN_REF if r[0] in (2.0, 4.0, 6.0)])
def test_chen_exact_n1e4_digest_values_upper(chen_tables, e, lam, ref):
  up, _ = _get(chen_tables, 10**4, e, lam)
  assert up >= ref * (1 - 1e-6)
  assert up <= ref * (1.01 if lam * e <= 200 else 1.02)


@pytest.mark.slow
@pytest.mark.parametrize("e,lam,ref", CHEN_REF)
def test_chen_exact_n1e4_digest_values(chen_slow_tables, e, lam, ref):
  up, lo = _get(chen_slow_tables, 10**4, e, lam)
  # certified bracket around the exact sum (digest values have 7 digits)
  assert lo <= ref * (1 + 1e-6)
  assert up >= ref * (1 - 1e-6)
  # slack of the default grid: < 1 % below lambda*eps0 ~ 200, < 2 % at (3, 128)
  assert up <= ref * (1.01 if lam * e <= 200 else 1.02)
  assert lo >= ref * 0.85


@pytest.mark.slow
def test_chen_exact_large_order_is_valid_but_looser(chen_slow_tables):
  # [chen-digest] §4.2: (eps0, lambda) = (2, 1000) exact 1.298620; (1, 1000) 0.1171014
  for e, ref in [(2.0, 1.298620), (1.0, 0.1171014)]:
    up, lo = _get(chen_slow_tables, 10**4, e, 1000.0)
    assert lo <= ref * (1 + 1e-6) <= up * (1 + 2e-6)
    assert up <= 1.5 * ref      # documented slack at lambda = 1000
    assert lo >= 0.98 * ref


@pytest.mark.slow
@pytest.mark.parametrize("n,e,lam,ref", [
    # [chen-digest] §4.2 small-n rows (exact column)
    (100, 2.0, 2.0, 1.83304e-01), (100, 2.0, 8.0, 1.01409), (100, 2.0, 16.0, 1.52923),
    (1000, 1.0, 4.0, 4.64671e-03), (1000, 2.0, 16.0, 1.39717e-01),
])
def test_chen_exact_small_n_digest_values(chen_slow_tables, n, e, lam, ref):
  up, lo = _get(chen_slow_tables, n, e, lam)
  assert lo <= ref * (1 + 1e-5) and up >= ref * (1 - 1e-5)
  assert up <= ref * 1.01


def test_chen_cor2_values_and_failures(chen_tables):
  # certified upper values at n = 1e4 for the failure cases are in the slow
  # test; here: Cor. 2 below the certified exact sum at (6, 4) and (4, 64)
  o = jnp.asarray([2.0, 4.0, 64.0, 128.0])
  cor2 = np.asarray(shb.chen_asymptotic_rdp(o, n=np.float64(10**4), eps0=np.array([0.1, 2.0, 6.0])))
  # [chen-digest] §4.2 Cor. 2 column: eps0=0.1: 8.842252e-04; 2: 5.911836e-03; 6: 3.227753e-01 (lambda=4)
  np.testing.assert_allclose(cor2[:, 1], [8.842252e-04, 5.911836e-03, 3.227753e-01], rtol=1e-6)
  # Cor. 2 is not an upper bound: below the certified LOWER bracket of the exact sum
  for e, lam, ref in [(6.0, 4.0, 1.869625), (4.0, 64.0, 2.539539)]:
    up, _ = _get(chen_tables, 10**4, e, lam)
    approx = float(shb.chen_asymptotic_rdp([lam], n=10**4, eps0=e)[0])
    # [chen-digest] exact values; ours within 2 % above them, Cor. 2 far below
    assert approx < 0.5 * ref and up <= 1.02 * ref
  mu = float(shb.chen_gdp_mu(n=10**4, eps0=2.0))
  assert mu == pytest.approx(2 * math.exp(1.0) / math.sqrt(9999), rel=1e-14)


def test_chen_table1_curves_fig2():
  # [chen-digest] §4.2 Fig. 2 setting, n = 1e4, lambda = 4
  # Table 1's explicit curves: eq. (4) = Girgis Thm 2, eq. (5) = Girgis Cor. 2
  e0 = np.array([0.1, 2.0, 6.0])
  upper = np.asarray(shb.girgis_thm2_rdp([4.0], n=10**4, eps0=e0))
  lower = np.asarray(shb.girgis_cor2_rdp([4.0], n=10**4, eps0=e0))
  np.testing.assert_allclose(upper[:2, 0], [1.303970e-05, 3.215759e-01], rtol=1e-6)
  np.testing.assert_allclose(lower[:, 0], [2.001661e-06, 1.103051e-03, 7.193456e-02], rtol=1e-6)
  # eq. (4) printed value 6.644059e+04 at eps0 = 6 exceeds eps0: we clip (valid).
  assert float(upper[2, 0]) == pytest.approx(6.0)


def test_chen_monotone_and_above_lower_bounds(chen_tables):
  o = np.asarray(CHEN_ORDERS)
  for (n, e), (up, lo) in chen_tables[0].items():
    assert np.all(np.diff((o - 1) * up) >= -1e-12 * np.abs(up[1:]))  # (a-1)D non-decreasing
    assert np.all(np.diff(up) >= -1e-9 * up[1:])                      # D non-decreasing
    assert np.all(up <= e + 1e-15)
    # 2RR lower bound (Girgis Thm 3) <= the clone-pair upper bound
    glo = np.asarray(shb.girgis_lower_rdp(o, n=n, eps0=e, num=64))
    assert np.all(glo <= up * (1 + 1e-9))


def test_brute_force_shuffled_rr_between_bounds(chen_tables):
  # exact shuffled binary RR, all neighbouring pairs, n <= 7
  o = (2.0, 3.0, 5.0)
  for n, e in [(5, 1.0), (7, 2.0), (6, 0.3)]:
    up = [_get(chen_tables, n, e, lam)[0] for lam in o]
    lo = np.asarray(shb.girgis_lower_rdp(o, n=n, eps0=e, num=64))
    for j, lam in enumerate(o):
      true = shuffled_rr_rdp_brute(n, e, lam)
      assert lo[j] <= true * (1 + 1e-10) + 1e-15
      assert true <= up[j] * (1 + 1e-10)


def test_chen_jit_and_nan_policy(x64, chen_tables):
  f = jax.jit(lambda n, e: shb.chen_exact_rdp(CHEN_ORDERS, n=n, eps0=e))
  out = np.asarray(f(jnp.array([100.0, -1.0, 3.5, 50.0, 1.0]),
                     jnp.array([2.0, 1.0, 1.0, 0.0, 1.5])))
  np.testing.assert_allclose(out[0], chen_tables[0][(100, 2.0)][0], rtol=1e-13)
  assert np.all(np.isnan(out[1:3]))
  np.testing.assert_array_equal(out[3], 0.0)          # eps0 = 0
  np.testing.assert_array_equal(out[4], 1.5)          # n = 1: eps0


def test_chen_bad_input():
  with pytest.raises(ValueError, match="n"):
    shb.chen_exact_rdp([2.0], n=0, eps0=1.0)
  with pytest.raises(ValueError, match="eps0"):
    shb.chen_exact_rdp([2.0], n=10, eps0=-1.0)
  with pytest.raises(ValueError, match="orders"):
    shb.chen_exact_rdp([1.0], n=10, eps0=1.0)
  with pytest.raises(ValueError, match="bound"):
    shb.chen_exact_rdp([2.0], n=10, eps0=1.0, bound="mid")
  with pytest.raises(ValueError, match="delta"):
    sh.chen_epsilon(n=10, eps0=1.0, delta=0.0)


def test_chen_epsilon_asymptotic():
  a = sh.chen_epsilon(n=10**4, eps0=1.0, delta=1e-6, rounds=10, bound="asymptotic",
                     orders=[2.0, 4.0, 8.0])
  o = np.array([2.0, 4.0, 8.0])
  rdp = 10 * 2 * math.e * o / 9999
  eps = rdp + np.log1p(-1 / o) - (np.log(1e-6) + np.log(o)) / (o - 1)   # CKS20 Prop 12
  assert a.bound == "estimate" and float(a.epsilon) == pytest.approx(eps.min(), rel=1e-12)


@pytest.mark.slow
def test_chen_epsilon_composition(chen_tables):
  o = np.asarray(CHEN_ORDERS)
  r = sh.chen_epsilon(n=10**4, eps0=2.0, delta=1e-6, rounds=100, orders=o)
  assert r.bound == "upper" and r.method == "chen_exact"
  rdp = np.asarray(chen_tables[0][(10**4, 2.0)][0])
  eps = 100 * rdp + np.log1p(-1 / o) - (np.log(1e-6) + np.log(o)) / (o - 1)   # CKS20 Prop 12
  assert float(r.epsilon) == pytest.approx(eps.min(), rel=1e-12)


# ----------------------------------------------------------- Girgis et al --

# [girgis-digest] §8: n, eps0, lambda, Thm1, Thm2, Cor1 [valid], EFM19, Thm3 LB, Cor2, mixture
GIRGIS_ROWS = [
    (1000, 1.0, 5, 2.667998e-02, 1.002885e-01, 2.790764e-02, 0, 1.612006e+00, 2.708058e-03, 2.700762e-03, 1.171992e-02),
    (10000, 0.1, 2, 2.212273e-06, 9.779772e-06, 4.424359e-06, 1, 6.600383e-06, 1.000833e-06, 1.000833e-06, 1.106092e-06),
    (10000, 0.1, 10, 1.139380e-05, 2.716603e-05, 2.211964e-05, 0, 3.300191e-05, 5.004139e-06, 5.004055e-06, 5.647854e-06),
    (10000, 0.1, 100, 1.533507e-04, 2.469639e-04, 2.188308e-04, 0, 3.300191e-04, 5.003838e-05, 4.991813e-05, 7.021963e-05),
    (10000, 3.0, 2, 7.030246e-02, 5.851530e+00, 1.360185e-01, 0, 2.371388e+04, 1.811890e-03, 1.811890e-03, 3.577804e-02),
    (10000, 3.0, 100, 2.401741e+00, 1.477659e+02, 6.648832e-02, 0, 1.185694e+06, 8.158025e-02, 2.323516e-02, 1.276451e+00),
    (1000000, 0.5, 5, 2.120127e-06, 8.673064e-06, 4.208357e-06, 1, 3.109605e-05, 6.381294e-07, 6.381290e-07, 1.057731e-06),
    (1000000, 0.5, 17, 7.426510e-06, 2.506516e-05, 1.430690e-05, 0, 1.057266e-04, 2.169636e-06, 2.169604e-06, 3.673240e-06),
    (1000000, 3.0, 100, 1.835523e-01, 1.478015e+00, 2.126902e-02, 0, 1.185694e+04, 9.056857e-04, 8.683488e-04, 1.153598e-01),
]
G_ORDERS = (2.0, 5.0, 10.0, 17.0, 100.0)


@pytest.fixture(scope="session")  # built once per worker (see conftest.py)
def girgis_tables():
  n = np.array([r[0] for r in GIRGIS_ROWS], np.float64)
  e = np.array([r[1] for r in GIRGIS_ROWS])
  return {
      "thm1": np.asarray(shb.girgis_thm1_rdp(G_ORDERS, n=n, eps0=e)),
      "thm2": np.asarray(shb.girgis_thm2_rdp(G_ORDERS, n=n, eps0=e)),
      "cor1": np.asarray(shb.girgis_cor1_rdp(G_ORDERS, n=n, eps0=e)),
      "efm": np.asarray(shb.efm19_rdp(G_ORDERS, n=n, eps0=e)),
      "lower": np.asarray(shb.girgis_lower_rdp(G_ORDERS, n=n, eps0=e)),
      "cor2": np.asarray(shb.girgis_cor2_rdp(G_ORDERS, n=n, eps0=e)),
      "mix_paper": np.asarray(shb.girgis_mixture_rdp(G_ORDERS, n=n, eps0=e, paper_caps=True)),
      "mix": np.asarray(shb.girgis_mixture_rdp(G_ORDERS, n=n, eps0=e)),
  }


@pytest.mark.parametrize("i", range(len(GIRGIS_ROWS)))
def test_girgis_digest_table(girgis_tables, i):
  n, e, lam, t1, t2, c1, c1ok, efm, lb, c2, mix = GIRGIS_ROWS[i]
  j = G_ORDERS.index(float(lam))
  T = {k: v[i, j] for k, v in girgis_tables.items()}
  assert T["thm1"] == pytest.approx(min(t1, e), rel=1e-6)
  assert T["thm2"] == pytest.approx(min(t2, e), rel=1e-6)          # clipped at eps0 (§2.8)
  assert T["efm"] == pytest.approx(efm, rel=1e-6)
  assert T["cor2"] == pytest.approx(c2, rel=1e-6)
  if c1ok:
    assert T["cor1"] == pytest.approx(c1, rel=1e-6)
  else:
    assert T["cor1"] == pytest.approx(e)    # outside lambda^4 e^{5 eps0} < n/9: no guarantee
  # Thm 3 lower bound: certified from below, within the grid slack
  assert T["lower"] <= lb * (1 + 1e-6)
  assert T["lower"] >= lb * (0.95 if lam * e >= 100 else 0.99 if lam >= 50 else 0.999)
  # binomial mixture (paper caps): certified from above, small slack
  assert T["mix_paper"] >= mix * (1 - 1e-6)
  assert T["mix_paper"] <= mix * (1.04 if lam * e >= 100 else 1.001)
  # tighter caps (Thm 6 and E_0 <= e^{(lam-1) eps0}) never hurt; mixture <= Thm 1
  assert T["mix"] <= T["mix_paper"] * (1 + 1e-12)
  assert T["mix"] <= T["thm1"] * (1 + 1e-12)
  assert T["lower"] <= T["mix"]


@pytest.mark.parametrize("n,e,t1,t2,lb,efm", [
    # [girgis-digest] §4.1 Fig. 2 spot values, lambda = 100
    (10**4, 0.1, 1.534e-4, 2.470e-4, 5.004e-5, 3.300e-4),
    (10**5, 3.0, 0.679, 14.8, 8.96e-3, 1.19e5),
    (10**7, 3.0, 0.0401, 0.148, 9.07e-5, 1.19e3),
    (10**6, 2.0, 0.0235, 0.0609, 2.76e-4, 24.3),
])
def test_girgis_fig2_spot_values(n, e, t1, t2, lb, efm):
  o = (100.0,)
  # digest prints 3 significant figures
  assert float(shb.girgis_thm1_rdp(o, n=n, eps0=e)[0]) == pytest.approx(min(t1, e), rel=2.5e-3)
  assert float(shb.girgis_thm2_rdp(o, n=n, eps0=e)[0]) == pytest.approx(min(t2, e), rel=2e-3)
  assert float(shb.efm19_rdp(o, n=n, eps0=e)[0]) == pytest.approx(efm, rel=5e-3)
  assert float(shb.girgis_cor2_rdp(o, n=n, eps0=e)[0]) <= lb * 1.002


def test_girgis_composition_vectors():
  # [girgis-digest] §8: Thm 1, eps0=0.5, n=1e6, T=1e5, delta=1e-6, integer lambda in [2, 2000]
  o = np.arange(2, 2001, dtype=np.float64)
  r = sh.girgis_epsilon(n=10**6, eps0=0.5, delta=1e-6, rounds=10**5, orders=o)
  assert float(r.epsilon) == pytest.approx(1.36842, rel=1e-5) and float(r.order) == 17
  r = sh.girgis_epsilon(n=10**6, eps0=0.5, delta=1e-6, rounds=10**4, orders=o)
  assert float(r.epsilon) == pytest.approx(0.41527, rel=1e-5) and float(r.order) == 45
  # subsampled: n_eff = 1000, eps0=3, ZW19 factor-3, gamma=1e-3, T=1e4, delta=1e-8, alpha in [2,200]
  r = sh.girgis_epsilon(n=1000, eps0=3.0, delta=1e-8, rounds=10**4, sampling_probability=1e-3)
  assert float(r.epsilon) == pytest.approx(1.0164, rel=1e-4) and float(r.order) == 25


def test_girgis_monotone_and_upper_above_lower():
  o = np.arange(2, 41, dtype=np.float64)
  n = np.array([[50.0], [1000.0], [10**5]])
  e = np.array([0.2, 1.0, 3.0])
  lo = np.asarray(shb.girgis_lower_rdp(o, n=n, eps0=e, num=64))
  for f in (shb.girgis_thm1_rdp, shb.girgis_thm2_rdp, shb.girgis_mixture_rdp):
    kw = {"num": 64} if f is shb.girgis_mixture_rdp else {}
    up = np.asarray(f(o, n=n, eps0=e, **kw))
    assert np.all(up >= lo * (1 - 1e-12))
    assert np.all(np.diff(up, axis=-1) >= -1e-12 * up[..., 1:])
  assert np.all(np.diff(lo, axis=-1) >= -1e-12 * lo[..., 1:])


def test_girgis_lower_mpmath_small_n():
  # eq. (11) central-moment form in mpmath vs our direct sum (exact at small n)
  mp.mp.dps = 60
  n, e = 20, 1.3
  for lam in (2, 5, 9):
    E = mp.e ** mp.mpf(e)
    p = 1 / (E + 1)
    mom = lambda i: mp.fsum(mp.binomial(n, k) * p ** k * (1 - p) ** (n - k) * (k - n * p) ** i
                            for k in range(n + 1))
    s = 1 + mp.binomial(lam, 2) * (E - 1) ** 2 / (n * E) + mp.fsum(
        mp.binomial(lam, i) * ((E ** 2 - 1) / (n * E)) ** i * mom(i) for i in range(3, lam + 1))
    ref = float(mp.log(s) / (lam - 1))
    ours = float(shb.girgis_lower_rdp([float(lam)], n=n, eps0=e, num=64)[0])
    assert ours == pytest.approx(ref, rel=1e-12)


def test_girgis_thm1_mpmath():
  # eq. (6) in mpmath at 50 digits
  mp.mp.dps = 50
  n, e, lam = 12345, 0.7, 23
  E = mp.e ** mp.mpf(e)
  nb = mp.floor((n - 1) / (2 * E)) + 1
  x = (E ** 2 - 1) ** 2 / (2 * E ** 2 * nb)
  s = 1 + mp.binomial(lam, 2) * (E - 1) ** 2 / (nb * E) + mp.fsum(
      mp.binomial(lam, i) * i * mp.gamma(mp.mpf(i) / 2) * x ** (mp.mpf(i) / 2)
      for i in range(3, lam + 1)) + mp.e ** (e * lam - (n - 1) / (8 * E))
  ref = float(mp.log(s) / (lam - 1))
  assert float(shb.girgis_thm1_rdp([float(lam)], n=n, eps0=e)[0]) == pytest.approx(ref, rel=1e-12)


def test_girgis_jit_nan_and_bad_input(x64):
  o = np.array([2.0, 3.0])
  f = jax.jit(lambda n, e: shb.girgis_thm1_rdp(o, n=n, eps0=e))
  out = np.asarray(f(jnp.array([1000.0, -3.0, 10.5]), jnp.array([1.0, 1.0, 1.0])))
  np.testing.assert_allclose(out[0], np.asarray(shb.girgis_thm1_rdp(o, n=1000, eps0=1.0)), rtol=1e-13)
  assert np.all(np.isnan(out[1:]))
  v = jax.vmap(lambda e: shb.girgis_thm2_rdp(o, n=1000.0, eps0=e))(jnp.array([0.5, 1.0]))
  np.testing.assert_allclose(np.asarray(v), np.asarray(shb.girgis_thm2_rdp(o, n=1000, eps0=np.array([0.5, 1.0]))),
                             rtol=1e-13)
  with pytest.raises(ValueError, match="orders"):
    shb.girgis_thm1_rdp([2.5], n=10, eps0=1.0)
  with pytest.raises(ValueError, match="n"):
    shb.girgis_thm2_rdp([2.5], n=0, eps0=1.0)
  with pytest.raises(ValueError, match="sampling_probability"):
    shb.girgis_subsampled_rdp([2.0], n=10, eps0=1.0, sampling_probability=1.5)
  assert float(shb.girgis_thm1_rdp([2.0], n=100, eps0=0.0)[0]) == 0.0


def _kov15(eps, k, dtilde):
  """Kairouz-Oh-Viswanath strong composition (Thm 3.4 as quoted in
  [girgis-digest] §5.3): epsilon part."""
  a = (math.expm1(eps)) * eps * k / (math.exp(eps) + 1)
  return min(k * eps, a + eps * math.sqrt(2 * k * math.log(math.e + math.sqrt(k * eps * eps) / dtilde)),
             a + eps * math.sqrt(2 * k * math.log(1 / dtilde)))


@pytest.mark.slow
def test_girgis_8x_and_10x_claims():
  """Girgis et al. claim 8x (Fig. 4(a): eps0=0.5, n=1e6, T=1e5, delta=1e-6) and
  >= 10x with subsampling (Fig. 5(a): eps0=3, n=1e6, gamma=1e-3, T=1e4,
  delta=1e-8) over FMT20 numerical + (LQS12) + KOV15. The baseline's delta split
  is not stated; with delta~ = delta/2 and per-round delta/(2T) (or
  delta/(2 T gamma)) the [girgis-digest] §4.3/§4.4 reproduction gets ~4.7x and
  ~7x (baseline 6.42 and 7.21). We reproduce the first (4.7x); for the second
  our baseline is 4.04 (4.0x). Neither reaches the paper's 8x / 10x."""
  o = np.arange(2, 2001, dtype=np.float64)
  ours = float(sh.girgis_epsilon(n=10**6, eps0=0.5, delta=1e-6, rounds=10**5, orders=o).epsilon)
  per = float(sh.clone_epsilon(1e-6 / (2 * 10**5), n=10**6, eps0=0.5).epsilon)
  base = _kov15(per, 10**5, 1e-6 / 2)
  assert base == pytest.approx(6.42, rel=0.03)      # [girgis-digest] §4.3 table
  assert 4.0 < base / ours < 6.0
  g, T, d = 1e-3, 10**4, 1e-8
  ours = float(sh.girgis_epsilon(n=1000, eps0=3.0, delta=d, rounds=T,
                                 sampling_probability=g).epsilon)
  per = float(sh.clone_epsilon(d / (2 * T * g), n=1000, eps0=3.0).epsilon)
  per = math.log1p(g * math.expm1(per))              # LQS12 amplification
  base = _kov15(per, T, d / 2)
  # [girgis-digest] §4.4 reports 7.21 for this baseline; with the reading above
  # (LQS12 then KOV15 over T rounds, delta~ = delta/2) we get 4.04 (unexplained;
  # the paper states neither the split nor the KOV15 variant). Either way the
  # RDP route wins by > 3x, not the paper's >= 10x.
  assert 3.5 < base < 7.6
  assert 3.0 < base / ours < 8.0
