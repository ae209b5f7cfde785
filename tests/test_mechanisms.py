"""RDP of base mechanisms against mpmath integrals / closed forms at 50 digits."""

import mpmath as mp
import numpy as np
import pytest

import jaxacct

mp.mp.dps = 50
ORDERS = np.array([1.01, 1.5, 2.0, 3.0, 7.5, 32.0, 128.0, 512.0])


@pytest.mark.parametrize("scale", [0.1, 0.5, 1.0, 4.0, 100.0])
def test_laplace_rdp_matches_mpmath_integral(scale):
  out = np.asarray(jaxacct.laplace_rdp(ORDERS[:5], scale))
  b = mp.mpf(scale)
  p = lambda x: mp.e**(-abs(x) / b) / (2 * b)
  q = lambda x: mp.e**(-abs(x - 1) / b) / (2 * b)
  for a, o in zip(ORDERS[:5], out):
    a = mp.mpf(a)
    integ = mp.quad(lambda x: p(x)**a * q(x)**(1 - a), [-mp.inf, 0, 1, mp.inf])
    assert abs(o - float(mp.log(integ) / (a - 1))) <= 1e-10 * max(1.0, abs(o))


@pytest.mark.parametrize("eps0", [0.0, 0.1, 1.0, 4.0, 20.0])
def test_pure_dp_rdp_is_randomized_response(eps0):
  out = np.asarray(jaxacct.pure_dp_rdp(ORDERS, eps0))
  e = mp.mpf(eps0)
  p = mp.e**e / (1 + mp.e**e)
  for a, o in zip(ORDERS, out):
    a = mp.mpf(a)
    ref = mp.log(p**a * (1 - p)**(1 - a) + (1 - p)**a * p**(1 - a)) / (a - 1)
    assert abs(o - float(ref)) <= 1e-12 * max(1.0, float(ref))
  assert np.all(np.diff(out) >= -1e-15) and np.all(out <= eps0 + 1e-15)


def test_gaussian_rdp_shape_and_value():
  out = jaxacct.gaussian_rdp(ORDERS, np.array([0.5, 2.0]))
  assert out.shape == (2, ORDERS.size)
  np.testing.assert_allclose(out[1], ORDERS / 8.0, rtol=1e-15)
