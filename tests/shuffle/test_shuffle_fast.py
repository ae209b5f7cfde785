"""Fast symmetric pair kernel (behind ``clone_*`` / ``stronger_clone_*`` for
array input) vs the reference kernel.

Oracles and their sources:
* the reference kernel ``jaxacct.shuffle.bounds.variation_ratio_pair_delta`` /
  ``variation_ratio_pair_epsilon`` (one incomplete-beta call per c, 40
  Illinois steps), kept as the test oracle;
* scipy (boost ``betainc`` and ``binom.pmf``, float64) evaluating the same
  closed-form inner sum cell by cell, here;
* the pair's definition by brute force (numpy double sum over all (a, b)),
  here, for n <= 12;
* issue 11 table (independent evaluation, Wang digest §6 Table A).

Tolerances: the reference kernel evaluates jax's ``betainc``/``gammaln`` at
every cell; at c ~ 1e5 they carry ~1e-11 relative error (measured against
scipy), so new-vs-old agreement is asserted to 1e-9 relative and the
one-sided check (new >= old) to 1e-11 relative for n <= 1e3 and 1e-10 for
n = 1e5 (the reference's own library error; see the test).
"""

import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxacct import shuffle as sh
from jaxacct.shuffle import bounds as shb


E0 = np.array([0.05, 1.0, 4.0, 8.0])
DL = np.array([1e-3, 1e-6, 1e-12])


def _pairs_for(eps0):
  p = np.exp(eps0)
  beta = (p - 1.0) / (p + 1.0)
  return p, beta, {"clone": 2.0 * p * p / (p + 1.0), "strong": p}


def _grid(n):
  e0, dl = np.meshgrid(E0, DL, indexing="ij")
  e0, dl = e0.ravel(), dl.ravel()
  p, beta, qs = _pairs_for(e0)
  pp = np.concatenate([p, p])
  bb = np.concatenate([beta, beta])
  qq = np.concatenate([qs["clone"], qs["strong"]])
  dd = np.concatenate([dl, dl])
  tot = 2.0 * pp / ((pp + 1.0) * qq)
  return dd, pp, bb, qq, tot


_DOORS = ((sh.clone_epsilon, sh.clone_delta), (sh.stronger_clone_epsilon, sh.stronger_clone_delta))


def _fast(which, value, n, eps0):
  """The fast kernel through the public doors: array input (no host path),
  clone members first, then the stronger clone (the order of ``_grid``)."""
  half = len(eps0) // 2
  outs = []
  for (eps_door, delta_door), sl in zip(_DOORS, (slice(0, half), slice(half, None))):
    door = eps_door if which == "epsilon" else delta_door
    r = door(value[sl], n=np.full(half, float(n)), eps0=eps0[sl])
    outs.append(np.asarray(r.epsilon if which == "epsilon" else r.delta))
  return np.concatenate(outs)


def _new_and_old(n):
  dd, pp, bb, qq, tot = _grid(n)
  e0 = np.log(pp)
  old = shb.variation_ratio_pair_epsilon(dd, n=float(n), p=pp, beta=bb, q0=qq)
  new = _fast("epsilon", dd, n, e0)
  return new, old, (dd, pp, bb, qq, e0)


# n = 1e5 (the widest windows, 27 s of compilation) under -m slow; the default
# suite checks n = 1e5 against scipy (test_fast_delta_vs_scipy)
# n = 1000 (~35 s of reference evaluation) under -m slow too; the default suite
# checks n = 1000 in test_fast_delta_matches_reference
@pytest.mark.parametrize("n", [2, 3, 10, pytest.param(1000, marks=pytest.mark.slow),
                               pytest.param(100000, marks=pytest.mark.slow)])
def test_fast_epsilon_matches_reference(x64, n):
  new, old, (dd, pp, bb, qq, e0) = _new_and_old(n)
  assert np.all(np.isfinite(new)) and np.all(np.isfinite(old))
  # eps = 0 is returned exactly when delta(0) <= target (the reference
  # returns the upper end of its bracket, ~1e-80)
  zero = old < 1e-30
  assert np.all(new[zero] == 0.0)
  # where the inner sum cancels by ~1e11 (eps0 = 8, delta = 1e-12, n = 1e5:
  # threshold far in the binomial tail) the fast kernel adds the rounding
  # allowance of the cancelling two-term form (which the reference ignores):
  # eps larger by 5e-6 relative, still an upper bound
  loose = (np.log(pp) > 7.9) & (dd < 1e-11) & (n >= 1e5)
  tight = ~zero & ~loose
  # 5e-8: the fast kernel also adds an allowance for jax's betainc error at
  # its anchors (16 M eps, M = log-Gamma magnitude; ~7e-9 relative in eps at
  # n = 1e5), which the reference ignores
  np.testing.assert_allclose(new[tight], old[tight], rtol=1e-9 if n <= 1000 else 5e-8)
  np.testing.assert_allclose(new[loose], old[loose], rtol=1e-5)
  # one-sided: never below the reference beyond the library (jax betainc /
  # gammaln) error both share: 1e-11 (n <= 1e3; measured -4.8e-12 at n = 1e3), 1e-10 (n = 1e5; at eps0 =
  # 0.05 scipy puts delta(new eps) 1.9e-10 relative above the target, delta
  # (old eps) 8e-11 below: the anchors' library error, not covered)
  one_sided = 1e-11 if n <= 1000 else 1e-10
  assert np.all(new[~zero] >= old[~zero] * (1.0 - one_sided))
  # certified: the returned eps is feasible for the fast (upper) delta
  # (a re-evaluation compiles differently; near eps0 the cancelling inner
  # sum rounds differently, by at most the rounding allowance each adds)
  d_at = _fast("delta", new, n, e0)
  edge = new > np.log(pp) - 1e-3  # eps ~ eps0: allowance-dominated corner
  assert np.all(d_at[~edge] <= dd[~edge] * (1 + 1e-7))
  # the delta door sizes its window without delta (wider than the epsilon
  # solve's bucket), and near eps0 the rounding allowance grows with the
  # window: up to 2.1e-3 relative at n = 2 (measured, 2026-11-25)
  assert np.all(d_at[edge] <= dd[edge] * (1 + 1e-2))


@pytest.mark.slow
def test_fast_epsilon_vs_reference_1e7(x64):
  # At n = 1e7 the reference's 40 Illinois steps do not always converge
  # (delta = 1e-12, eps0 = 1: reference eps 2.68782e-3 has delta 9.94e-13,
  # the fast kernel's 2.68734e-3 has delta 1e-12). The fast kernel uses
  # Loader's pmf (the reference's gammaln weights are off by ~1e-8 here) and
  # adds an allowance for jax's betainc error at its anchors (16 M eps, see
  # the fast kernel's _sym_eval), which costs up to ~1.1e-6 relative in eps at
  # n = 1e7 (measured). So: never looser than the reference beyond 1e-5,
  # and feasible for the reference's delta up to the reference's own
  # library error (measured 4e-8 against scipy).
  n = 10_000_000
  new, old, (dd, pp, bb, qq, _) = _new_and_old(n)
  assert np.all(new <= old * (1 + 1e-5) + 1e-15)
  d_ref = shb.variation_ratio_pair_delta(new, n=float(n), p=pp, beta=bb, q0=qq)
  assert np.all(d_ref <= dd * (1 + 1e-7))  # measured 4e-8 (library error)


@pytest.mark.parametrize("n", [1000.0, pytest.param(1e5, marks=pytest.mark.slow)])
def test_fast_delta_matches_reference(x64, n):
  # delta(eps) on a grid of eps, n = 1e3 and 1e5 (-m slow): the allowance added
  # by the fast kernel (recurrence rounding, betainc anchor allowance) is below
  # 1e-8 relative at n = 1e3 and below 1e-7 at n = 1e5
  p, beta, qs = _pairs_for(1.0)
  for (_, door), q in zip(_DOORS, (qs["clone"], qs["strong"])):
    eps = np.linspace(0.0, 0.9, 10)
    old = shb.variation_ratio_pair_delta(eps, n=n, p=p, beta=beta, q0=q)
    new = np.asarray(door(eps, n=n, eps0=1.0).delta)
    big = old > 1e-15  # below, the cancellation allowance dominates
    np.testing.assert_allclose(new[big], old[big], rtol=1e-8 if n <= 1e3 else 1e-7)
    # the reference's gammaln weights are off by ~1e-10 at n = 1e5 (the
    # fast kernel's Loader weights are not); scipy decides in the next test
    assert np.all(new >= old * (1 - (2e-11 if n <= 1e3 else 1e-9)))
    assert np.all(new <= old * 1.01 + 1e-20)  # cut mass (z = 10) < 1e-20


def _scipy_delta(eps, n, p, q):
  """The pair's delta by the closed-form inner sum, scipy float64, all c."""
  from scipy import special, stats
  alpha = 1.0 / (p + 1.0)
  r = alpha * p / q
  tot = 2.0 * r
  e = math.exp(eps)
  u, v = (p - e) * alpha / r, (1 - p * e) * alpha / r
  sig = u - v
  c = np.arange(0, n).astype(float)
  w = stats.binom.pmf(c, n, tot)
  keep = w > 1e-40
  c, w = c[keep], w[keep]
  kap = v * c
  t = np.floor(-kap / sig) + 1
  m = np.maximum(c - 1, 0)
  x = special.betainc(np.maximum(t, 1), np.maximum(m - t + 1, 1e-300), 0.5)
  x = np.where(t > m, 0.0, x)
  f = stats.binom.pmf(t - 1, m, 0.5)
  inner = np.maximum(sig * c * 0.5 * (x + f) + kap * (x + 0.5 * f), 0)
  return float(np.sum(w * inner) / n)


def test_fast_delta_vs_scipy(x64):
  # n = 1e5, eps0 = 1, at the issue-11 stronger-clone / clone epsilons
  p = math.e
  beta = (p - 1) / (p + 1)
  for door, q, eps in ((sh.stronger_clone_delta, p, 0.0124298975),
                       (sh.clone_delta, 2 * p * p / (p + 1), 0.015282)):
    ref = _scipy_delta(eps, 100000, p, q)
    # an array eps: the jitted fast kernel (a scalar goes to the host twin)
    got = float(door(np.array([eps]), n=100000, eps0=1.0).delta[0])
    assert got >= ref * (1 - 1e-10)
    assert got <= ref * (1 + 1e-7)  # the betainc anchor allowance: 3.6e-8


def _pair_bruteforce(n, p, q, eps):
  from scipy import stats
  alpha = 1.0 / (p + 1.0)
  r = alpha * p / q
  P, Q = {}, {}
  for c in range(n):
    wc = stats.binom.pmf(c, n - 1, 2 * r)
    for a in range(c + 1):
      w = wc * stats.binom.pmf(a, c, 0.5)
      for (d1, d2), pd in (((1, 0), p * alpha), ((0, 1), alpha)):
        kp, kq = (a + d1, c - a + d2), (a + d2, c - a + d1)
        P[kp] = P.get(kp, 0) + w * pd
        Q[kq] = Q.get(kq, 0) + w * pd
  e = math.exp(eps)
  return sum(max(P.get(k, 0) - e * Q.get(k, 0), 0) for k in set(P) | set(Q))


@pytest.mark.parametrize("n", [2, 5, 12])
def test_fast_delta_bruteforce(x64, n):
  for e0 in (0.5, 2.0):
    p, beta, qs = _pairs_for(e0)
    for (_, door), q in zip(_DOORS, (qs["clone"], qs["strong"])):
      eps = np.array([0.0, 0.1, 0.3, 0.45])
      got = np.asarray(door(eps, n=n, eps0=e0).delta)
      want = np.array([_pair_bruteforce(n, p, q, x) for x in eps])
      np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-15)


def test_issue11_rows_fast(x64):
  # issue 11 table (Wang digest §6 Table A independent evaluation), 1e-6 rel
  n = np.array([1e4, 1e5, 1e5])
  e0 = np.array([1.0, 1.0, 4.0])
  np.testing.assert_allclose(sh.stronger_clone_epsilon(1e-6, n=n, eps0=e0).epsilon,
                             [0.0432061581, 0.0124298975, 0.1181530665],
                             rtol=1e-6)
  np.testing.assert_allclose(sh.clone_epsilon(1e-6, n=n, eps0=e0).epsilon,
                             [0.053005, 0.015282, 0.169770], rtol=0, atol=6e-7)


def test_grouped_equals_single_width(x64):
  # lanes grouped by window bucket give the same values as one wide window (a
  # lane past HOST_MAX_N sends the array to the grouped kernels on the CPU
  # layout; smaller arrays are answered on the host, lane by lane)
  n = np.array([50.0, 3000.0, 250_000.0, 50.0])
  e0 = np.array([1.0, 0.3, 2.0, 6.0])
  grouped = np.asarray(sh.clone_epsilon(1e-6, n=n, eps0=e0).epsilon)
  single = np.asarray(sh.clone_epsilon(1e-6, n=n, eps0=e0, max_n=250_000).epsilon)
  np.testing.assert_allclose(grouped, single, rtol=1e-10)
  host = np.asarray(sh.clone_epsilon(1e-6, n=n[[0, 1, 3]], eps0=e0[[0, 1, 3]]).epsilon)
  np.testing.assert_allclose(host, single[[0, 1, 3]], rtol=1e-10)


def test_fast_nan_policy_under_jit(x64):
  f = jax.jit(lambda d, n, e0: sh.stronger_clone_epsilon(d, n=n, eps0=e0,
                                                         max_n=2000).epsilon)
  out = np.asarray(f(jnp.array([1e-6, 0.0, 1e-6, 1e-6]),
                     jnp.array([1000.0, 1000.0, 1000.5, 1000.0]),
                     jnp.array([1.0, 1.0, 1.0, -1.0])))
  assert np.isfinite(out[0]) and np.all(np.isnan(out[1:]))


def test_front_door_records_failures(x64, monkeypatch):
  def boom(**kw):
    raise ValueError("boom")

  # the front door calls the sibling bounds by the names in its own module
  # namespace: make two of them fail
  door_globals = inspect.unwrap(sh.epsilon).__globals__
  monkeypatch.setitem(door_globals, "girgis_epsilon", boom)
  monkeypatch.setitem(door_globals, "chen_epsilon", boom)
  kw = dict(n=200, eps0=1.0, delta=1e-6, rounds=3)
  r = sh.epsilon(**kw)
  res = r.details
  assert res["girgis_thm1"][1] == "failed: ValueError: boom"
  assert res["chen_exact"][1] == "failed: ValueError: boom"
  assert math.isnan(res["girgis_thm1"][0])
  assert res["clone_rdp"][1] == "upper"
  with pytest.raises(ValueError, match="unavailable"):
    sh.epsilon(**kw, method="girgis_thm1")
  # "best" is the smallest of the bounds that did not fail
  ups = {m: v[0] for m, v in res.items() if v[1] == "upper"}
  assert r.bound == "upper" and r.method in ups and r.epsilon == min(ups.values())
  assert sh.epsilon(**kw, method="clone_rdp").epsilon == ups["clone_rdp"]
