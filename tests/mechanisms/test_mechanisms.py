"""RDP of base mechanisms against mpmath integrals / closed forms at 50 digits."""

import math

import mpmath as mp
import numpy as np
import pytest

import jaxacct

mp.mp.dps = 50
ORDERS = np.array([1.01, 1.5, 2.0, 3.0, 7.5, 32.0, 128.0, 512.0])


@pytest.mark.parametrize("scale", [0.1, 0.5, 1.0, 4.0, 100.0])
def test_laplace_rdp_matches_mpmath_integral(scale):
  out = np.asarray(jaxacct.mechanisms.laplace_rdp(ORDERS[:5], scale))
  b = mp.mpf(scale)
  p = lambda x: mp.e**(-abs(x) / b) / (2 * b)
  q = lambda x: mp.e**(-abs(x - 1) / b) / (2 * b)
  for a, o in zip(ORDERS[:5], out):
    a = mp.mpf(a)
    integ = mp.quad(lambda x: p(x)**a * q(x)**(1 - a), [-mp.inf, 0, 1, mp.inf])
    assert abs(o - float(mp.log(integ) / (a - 1))) <= 1e-10 * max(1.0, abs(o))


@pytest.mark.parametrize("eps0", [0.0, 0.1, 1.0, 4.0, 20.0])
def test_pure_dp_rdp_is_randomized_response(eps0):
  out = np.asarray(jaxacct.mechanisms.pure_dp_rdp(ORDERS, eps0))
  e = mp.mpf(eps0)
  p = mp.e**e / (1 + mp.e**e)
  for a, o in zip(ORDERS, out):
    a = mp.mpf(a)
    ref = mp.log(p**a * (1 - p)**(1 - a) + (1 - p)**a * p**(1 - a)) / (a - 1)
    assert abs(o - float(ref)) <= 1e-12 * max(1.0, float(ref))
  assert np.all(np.diff(out) >= -1e-15) and np.all(out <= eps0 + 1e-15)


def test_gaussian_rdp_shape_and_value():
  out = gaussian_rdp(ORDERS, np.array([0.5, 2.0]))
  assert out.shape == (2, ORDERS.size)
  np.testing.assert_allclose(out[1], ORDERS / 8.0, rtol=1e-15)


# ---------------------------------------------------------------------------
# Mechanisms as values (issue 29 item 3): each value against an independent
# number, and each value == the door it names.

from jaxacct import mechanisms as M
from jaxacct import pld as jpld
from jaxacct.accounting import NeighboringRelation, PLDAccountant
from jaxacct.accounting import events as ev
from jaxacct.allocation import sum_law
from jaxacct._core.gaussian import gaussian_delta, gaussian_epsilon
from jaxacct._core.gaussian import gaussian_rdp   # the Gaussian RDP kernel (internal)


def _mp_gaussian_delta(s, eps):
  """Balle & Wang, arXiv:1805.06530v2, Thm 8, at 50 digits."""
  s, eps = mp.mpf(s), mp.mpf(eps)
  return mp.ncdf(1 / (2 * s) - eps * s) - mp.e**eps * mp.ncdf(-1 / (2 * s) - eps * s)


def _mp_hockey_stick(p, q, eps, points):
  """int max(p - e^eps q, 0) by mpmath quadrature (breakpoints ``points``)."""
  f = lambda x: max(p(x) - mp.e**mp.mpf(eps) * q(x), 0)
  return mp.quad(f, points)


@pytest.mark.parametrize("noise,sens", [(0.5, 1.0), (1.0, 1.0), (2.2, 2.0), (8.0, 1.0)])
def test_gaussian_value_profile_matches_mpmath(noise, sens):
  g = M.Gaussian(noise, sensitivity=sens)
  for eps in [-1.0, 0.0, 0.3, 1.0, 4.0]:
    ref = float(_mp_gaussian_delta(noise / sens, eps))
    got = float(g.delta(eps).delta)
    # log-space profile: ~1e-15 |log_ndtr(a)| / gap relative; at delta ~1e-226
    # (sigma 8, eps 4) the cancellation costs 8.5e-10 relative (below the exact value)
    tol = 1e-11 if ref > 1e-100 else 2e-9
    assert abs(got - ref) <= tol * ref, (eps, got, ref)
  for delta in [1e-3, 1e-6, 1e-10]:
    e = float(g.epsilon(delta).epsilon)
    assert float(_mp_gaussian_delta(noise / sens, e)) <= delta * (1 + 1e-10)   # feasible side
    assert float(_mp_gaussian_delta(noise / sens, e - 1e-9 * max(e, 1))) > delta * (1 - 1e-6)


@pytest.mark.parametrize("scale,sens", [(0.5, 1.0), (1.0, 1.0), (3.0, 2.0)])
def test_laplace_value_profile_matches_quadrature(scale, sens):
  lap = M.Laplace(scale, sensitivity=sens)
  b, s = mp.mpf(scale), mp.mpf(sens)
  p = lambda x: mp.e**(-abs(x) / b) / (2 * b)
  q = lambda x: mp.e**(-abs(x - s) / b) / (2 * b)
  for eps in [-0.5, 0.0, 0.2, 0.9 * sens / scale, 2.0 * sens / scale]:
    kink = (s - b * eps) / 2    # where the loss (|x-s| - |x|)/b crosses eps
    pts = sorted({mp.mpf(0), s / 2, s} | ({kink} if 0 < kink < s else set()))
    ref = float(_mp_hockey_stick(p, q, eps, [-mp.inf] + pts + [mp.inf]))
    got = float(lap.delta(eps).delta)
    assert abs(got - ref) <= 1e-12 + 1e-10 * ref, (eps, got, ref)
  for delta in [1e-3, 0.05, 0.2]:   # closed-form inverse: delta(epsilon(delta)) = delta
    e = float(lap.epsilon(delta).epsilon)
    assert abs(float(lap.delta(e).delta) - delta) <= 1e-14
  # RDP: Mironov, arXiv:1702.07476v3, Prop. 6 at b = scale / sensitivity
  orders = ORDERS[:5]
  out = np.asarray(lap.rdp(orders))
  bb = b / s
  for a, o in zip(orders, out):
    a = mp.mpf(a)
    ref = mp.log(a / (2 * a - 1) * mp.e**((a - 1) / bb) + (a - 1) / (2 * a - 1) * mp.e**(-a / bb)) / (a - 1)
    assert abs(o - float(ref)) <= 1e-12 * max(1.0, float(ref))


@pytest.mark.parametrize("p,k", [(0.5, 4), (0.2, 10), (0.9, 2), (1.0, 3)])
@pytest.mark.parametrize("neighbouring", ["replace_one", "replace_special"])
def test_randomized_response_value_matches_enumeration(p, k, neighbouring):
  rr = M.RandomizedResponse(p, k, neighbouring=neighbouring)
  P, K = mp.mpf(p), mp.mpf(k)
  hit, miss = 1 - P + P / K, P / K
  if neighbouring == "replace_one":
    a, b = [hit, miss, 1 - hit - miss], [miss, hit, 1 - hit - miss]
  else:
    a, b = [hit, 1 - hit], [1 / K, 1 - 1 / K]
  def delta(eps, x, y):
    return sum(max(u - mp.e**mp.mpf(eps) * v, 0) for u, v in zip(x, y))
  for eps in [0.0, 0.3, 1.0, 3.0]:
    ref = float(max(delta(eps, a, b), delta(eps, b, a)))
    assert abs(float(rr.delta(eps).delta) - ref) <= 1e-14
  for d in [1e-6, 1e-2, 0.1]:
    e = float(rr.epsilon(d).epsilon)
    assert float(rr.delta(e).delta) <= d + 1e-15
    if e > 0:
      assert float(rr.delta(e * (1 - 1e-9)).delta) > d - 1e-12
  out = np.asarray(rr.rdp(ORDERS[1:6]))
  for al, o in zip(ORDERS[1:6], out):
    al = mp.mpf(al)
    r = lambda x, y: mp.log(sum(u**al * v**(1 - al) for u, v in zip(x, y) if u > 0)) / (al - 1)
    ref = float(max(r(a, b), r(b, a)))
    assert abs(o - ref) <= 1e-12 * max(1.0, ref)


@pytest.mark.parametrize("eps0,delta0", [(0.0, 0.0), (0.5, 0.0), (1.0, 1e-6), (3.0, 0.01)])
def test_epsilon_delta_value_is_kairouz_oh_viswanath(eps0, delta0):
  m = M.EpsilonDelta(eps0, delta0)
  for eps in [0.0, 0.25, 1.0, 5.0]:   # arXiv:1311.0776v4, Thm 3.4
    e0, d0, e = mp.mpf(eps0), mp.mpf(delta0), mp.mpf(eps)
    ref = float(d0 + (1 - d0) * max(0, (mp.e**e0 - mp.e**e) / (1 + mp.e**e0)))
    assert abs(float(m.delta(eps).delta) - ref) <= 1e-15
  if delta0 == 0:
    np.testing.assert_array_equal(m.rdp(ORDERS), jaxacct.mechanisms.pure_dp_rdp(ORDERS, eps0))
  else:
    assert np.all(np.isinf(m.rdp(ORDERS)))
    assert float(m.epsilon(delta0 / 2).epsilon) == np.inf


def test_values_are_the_old_doors_bitwise():
  g, lap = M.Gaussian(1.3), M.Laplace(0.7)
  np.testing.assert_array_equal(g.rdp(ORDERS), gaussian_rdp(ORDERS, 1.3))
  np.testing.assert_array_equal(lap.rdp(ORDERS), jaxacct.mechanisms.laplace_rdp(ORDERS, 0.7))
  assert float(g.delta(0.5).delta) == float(gaussian_delta(1.3, 0.5).delta)
  assert float(g.epsilon(1e-6).epsilon) == float(gaussian_epsilon(1.3, 1e-6).epsilon)
  for pess in (True, False):
    for value, old in [(M.Gaussian(1.3, sensitivity=2.0),
                        jpld.gaussian(1.3, step=1e-3, pessimistic=pess, sensitivity=2.0)),
                       (lap, jpld.laplace(0.7, step=1e-3, pessimistic=pess)),
                       (M.EpsilonDelta(1.0, 1e-5),
                        jpld.randomized_response(1.0, delta0=1e-5, step=1e-3, pessimistic=pess))]:
      pair = value.pld(value_discretization_interval=1e-3, pessimistic=pess)
      for p in pair:
        np.testing.assert_array_equal(np.asarray(p.probs), np.asarray(old.probs))
        assert (int(p.offset), float(p.inf_mass), bool(p.pessimistic)) == (
            int(old.offset), float(old.inf_mass), pess)
  # the one-step laws (formerly checked bitwise against ``sum_law.one_steps``,
  # of which ``one_step_law`` is now the one public door): the Laplace value
  # reads its noise in units of the sensitivity (scale / sensitivity = b)
  law = g.one_step_law(64, 1e-12)
  assert law.p.shape == (1, 64) and abs(float(np.sum(law.p) + law.q0[0]) - 1.0) < 1e-12
  for x, y in zip(M.Laplace(1.4, sensitivity=2.0).one_step_law(64, 1e-12),
                  M.Laplace(0.7).one_step_law(64, 1e-12)):
    np.testing.assert_array_equal(x, y)


def test_values_name_their_events():
  assert M.Gaussian(2.0, sensitivity=2.0).event() == ev.GaussianDpEvent(1.0)
  assert M.Laplace(3.0).event() == ev.LaplaceDpEvent(3.0)
  assert M.RandomizedResponse(0.5, 4).event() == ev.RandomizedResponseDpEvent(0.5, 4)
  assert M.EpsilonDelta(1.0, 1e-6).event() == ev.EpsilonDeltaDpEvent(1.0, 1e-6)


@pytest.mark.parametrize("value,relation", [
    (M.Gaussian(1.1), NeighboringRelation.ADD_OR_REMOVE_ONE),
    (M.Laplace(2.0), NeighboringRelation.ADD_OR_REMOVE_ONE),
    (M.RandomizedResponse(0.5, 4), NeighboringRelation.REPLACE_ONE),
    (M.EpsilonDelta(0.7, 1e-7), NeighboringRelation.ADD_OR_REMOVE_ONE)])
def test_accountant_of_one_event_is_the_value(value, relation):
  """One use: the accountant's delta is the value's upper PLD's delta, and it
  brackets the value's exact profile (upper >= exact >= lower)."""
  acc = PLDAccountant(relation, value_discretization_interval=1e-4)
  acc.compose(value.event())
  for eps in [0.1, 0.5, 1.0]:
    d = float(acc.get_delta(eps))
    pair = value.pld(value_discretization_interval=1e-4)
    assert d == pytest.approx(max(float(jpld.delta(p, eps)) for p in pair), rel=1e-12, abs=1e-15)
    exact = float(value.delta(eps).delta)
    assert d >= exact - 1e-15 and d <= exact + 1e-3
  r = acc.get_epsilon_bounds(1e-5)
  exact = float(value.epsilon(1e-5).epsilon)
  assert float(r.lower) <= exact + 1e-12 <= float(r.epsilon) + 2e-12


def test_randomized_response_two_buckets_replace_one_regression():
  """k = 2 under REPLACE_ONE: the empty 'other' outcome rounded to -1e-17 and
  the accountant raised (main at 5fd311a); now it is accounted."""
  acc = PLDAccountant(NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-4)
  acc.compose(ev.RandomizedResponseDpEvent(0.1, 2))
  exact = float(M.RandomizedResponse(0.1, 2).delta(1.0).delta)   # p/k = 0.05: eps0 = log 19
  assert exact == pytest.approx(0.95 - np.e * 0.05, rel=1e-14)
  assert exact - 1e-15 <= float(acc.get_delta(1.0)) <= exact + 1e-3   # float rounding


def test_values_pass_through_jit_static_and_as_pytrees():
  import jax
  traces = []

  @jax.jit
  def f(m, x):
    traces.append(m)
    return x / m.sigma

  assert float(f(M.Gaussian(2.0), 1.0)) == 0.5
  assert float(f(M.Gaussian(2.0), 3.0)) == 1.5       # equal values: no new trace
  assert float(f(M.Gaussian(4.0), 1.0)) == 0.25
  assert len(traces) == 2
  assert jax.tree_util.tree_leaves(M.Laplace(1.0)) == []
  assert hash(M.Gaussian(1.0)) == hash(M.Gaussian(np.float64(1.0)))


@pytest.mark.parametrize("make,name", [
    (lambda: M.Gaussian(0.0), "noise_multiplier"), (lambda: M.Gaussian("1"), "noise_multiplier"),
    (lambda: M.Gaussian(1.0, sensitivity=-1.0), "sensitivity"),
    (lambda: M.Laplace(np.array([1.0, 2.0])), "scale"),
    (lambda: M.RandomizedResponse(1.5, 4), "noise_parameter"),
    (lambda: M.RandomizedResponse(0.5, 1), "num_buckets"),
    (lambda: M.RandomizedResponse(0.5, 4, neighbouring="add"), "neighbouring"),
    (lambda: M.EpsilonDelta(-1.0), "eps0"), (lambda: M.EpsilonDelta(1.0, 1.0), "delta0"),
    (lambda: M.Gaussian(1.0).pld(value_discretization_interval=0.0),
     "value_discretization_interval"),
    (lambda: M.Laplace(1.0).epsilon(0.0), "delta")])
def test_values_refuse_bad_input_naming_the_parameter(make, name):
  with pytest.raises(ValueError, match=name):
    make()


def test_values_match_dp_accounting_live():
  """dp_accounting's exact profiles (privacy_loss_mechanism) and its RR PLD."""
  pytest.importorskip("dp_accounting")
  from dp_accounting.pld import privacy_loss_distribution as pldm
  from dp_accounting.pld import privacy_loss_mechanism as plm
  eps = [0.0, 0.2, 1.0, 2.0]
  for s, sens in [(0.8, 1.0), (2.0, 2.0)]:
    ref = plm.GaussianPrivacyLoss(s, sensitivity=sens).get_delta_for_epsilon(eps)
    np.testing.assert_allclose(M.Gaussian(s, sensitivity=sens).delta(np.array(eps)).delta,
                               ref, rtol=1e-12)
    ref = plm.LaplacePrivacyLoss(s, sensitivity=sens).get_delta_for_epsilon(eps)
    np.testing.assert_allclose(M.Laplace(s, sensitivity=sens).delta(np.array(eps)).delta,
                               ref, rtol=1e-12, atol=1e-16)
  for p, k in [(0.5, 4), (0.2, 10)]:   # dp_accounting's PLD is pessimistic: >= exact
    d = pldm.from_randomized_response(p, k, value_discretization_interval=1e-6)
    for e in eps:
      ours = float(M.RandomizedResponse(p, k).delta(e).delta)
      assert ours - 1e-15 <= d.get_delta_for_epsilon(e) <= ours * (1 + 1e-6) + 1e-12


@pytest.mark.parametrize("conv,value", [("rdp_to_epsilon", 1e-5), ("rdp_to_delta", 1.0)])
def test_rdp_conversions_check_shapes_naming_the_parameter(conv, value):
  """orders a 1-D grid, rdp one value per order on its last axis, the value
  broadcasting against rdp's other axes (were IndexError / unnamed ValueErrors)."""
  fn = getattr(jaxacct.mechanisms, conv)
  o, r = np.array([2.0, 4.0, 8.0]), np.array([0.1, 0.2, 0.4])
  for kw, name in [(dict(orders=[2.0, 4.0]), "orders"), (dict(orders=1e300), "orders"),
                   (dict(orders=np.array([[2.0, 4.0, 8.0]])), "orders"),
                   (dict(rdp=[0.1, 0.2]), "rdp"), (dict(rdp=0.0), "rdp"),
                   (dict(rdp=np.inf), "rdp"), (dict(rdp=np.full((2, 2), 0.1)), "rdp"),
                   (dict(rdp=np.full((2, 3), 0.1), value=np.full(3, value)),
                    "delta" if conv == "rdp_to_epsilon" else "epsilon")]:
    args = dict(orders=o, rdp=r, value=value)
    args.update(kw)
    with pytest.raises(ValueError, match=name):
      fn(args["orders"], args["rdp"], args["value"])


@pytest.mark.parametrize("method", ["tight", "classic"])
def test_rdp_conversions_of_zero_and_infinite_curves(method):
  """RDP 0 at every order (P = Q): tight gives epsilon 0 and delta 0 (the KL/TV
  route); classic (Mironov, arXiv:1702.07476v3, Prop. 3) its own values at the
  largest order 8: log(1/delta) / 7 and e^{-7 eps}. RDP inf (or 1e300): no
  guarantee, epsilon inf (1e300) and delta 1."""
  conv = jaxacct.mechanisms
  o = np.array([2.0, 4.0, 8.0])
  zero = np.zeros(3)
  eps0 = float(conv.rdp_to_epsilon(o, zero, 1e-5, method=method).epsilon)
  d0 = float(conv.rdp_to_delta(o, zero, 0.5, method=method).delta)
  if method == "tight":
    assert eps0 == 0.0 and d0 == 0.0
  else:
    assert eps0 == pytest.approx(math.log(1e5) / 7.0, rel=1e-14)
    assert d0 == pytest.approx(math.exp(-3.5), rel=1e-14)
  for big in (np.inf, 1e300):
    curve = np.full(3, big)
    assert float(conv.rdp_to_epsilon(o, curve, 1e-5, method=method).epsilon) == big
    assert float(conv.rdp_to_delta(o, curve, 0.5, method=method).delta) == 1.0


def test_values_at_the_ends_of_their_ranges():
  """Laplace at scale 1e300: RDP 0 (its logaddexp rounded to -5.6e-17, which the
  conversions refuse as negative). EpsilonDelta past eps0 700: e^eps0 overflowed
  (OverflowError in pld, delta, epsilon); the low outcome's mass is e^-eps0 / (1 +
  e^-eps0) (Kairouz-Oh-Viswanath, Thm 3.4), so delta(1) = 1 - e^{1-800} = 1 in float64;
  a grid past MAX_WINDOW points is refused naming eps0 and its accounted range."""
  o = np.array([2.0, 8.0])
  assert np.all(np.asarray(jaxacct.mechanisms.laplace_rdp(o, 1e300)) == 0.0)
  assert float(jaxacct.mechanisms.rdp_to_epsilon(o, jaxacct.mechanisms.laplace_rdp(o, 1e300),
                                                 1e-5).epsilon) == 0.0
  v = M.EpsilonDelta(800.0)
  assert float(v.delta(1.0).delta) == 1.0
  p = v.pld(value_discretization_interval=400.0).remove
  assert (p.offset, p.step) == (2, 400.0) and np.asarray(p.probs)[0] == 1.0
  with pytest.raises(ValueError, match=r"eps0 1e\+300 .* eps0 <= 1\.68e\+05 is accounted"):
    M.EpsilonDelta(1e300).pld(value_discretization_interval=1e-2)
