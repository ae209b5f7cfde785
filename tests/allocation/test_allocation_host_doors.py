"""A scalar question to the allocation front door is answered on the host.

``jaxacct.allocation.epsilon`` / ``delta`` with one (sigma, t, k, E) run the
remove RDP (Thm 4.8 powering), direct_add, local, the RDP conversions and
decomposition's conversion in NumPy: the formulas the kernels run, written
once against the array namespace (``jaxacct._core.namespace``). Only the
add-direction RDP quadrature and decomposition's Poisson RDP keep their
compiled programs. Checked here: the jitted kernels a scalar question calls
(recorded: only the add-RDP quadrature and decomposition's Poisson RDP may
run), and host values against the kernels (float round-off of two
log-sum-exp implementations: 1.4e-12 relative at RDP ~ 1e-13) and against
mpmath where a closed form exists (R_2 of Thm 4.8; the Gaussian profile's
extremes are checked against the kernel, itself checked against mpmath in
tests/mechanisms/test_mechanisms.py).
"""

import mpmath as mp
import numpy as np
import pytest

from jaxacct import allocation, mechanisms
from jaxacct._core import compiled


@pytest.fixture
def kernels_called(monkeypatch):
  """Names of the jitted kernels (jaxacct's ``CachedJit``) called while the test runs."""
  called = []
  call = compiled.CachedJit.__call__

  def spy(self, *args, **kwargs):
    called.append(self.__name__)
    return call(self, *args, **kwargs)
  monkeypatch.setattr(compiled.CachedJit, "__call__", spy)
  return called


@pytest.mark.parametrize("quantity", ["epsilon", "delta"])
def test_front_door_scalar_question_calls_no_kernel(kernels_called, quantity):
  kw = dict(sigma=1.3, steps_per_epoch=77, num_epochs=3,
            methods=("rdp_direct", "direct_add", "local"))
  if quantity == "epsilon":
    r = allocation.epsilon(delta=1e-6, **kw)
    v = r.epsilon
  else:
    r = allocation.delta(epsilon=1.0, **kw)
    v = r.delta
  assert np.isfinite(v) and v > 0
  assert set(r.details["remove"]) == {"rdp_direct", "local"}
  # k = E = 1: decomposition's conversion and bisection on the host too
  r1 = allocation.epsilon(sigma=1.1, steps_per_epoch=50, delta=1e-6, num_epochs=1,
                          methods=("rdp_direct", "decomposition", "local", "direct_add"))
  assert np.isfinite(r1.epsilon) and r1.epsilon < r1.details["remove"]["local"]
  # decomposition keeps its Poisson-RDP program (the quadrature is slower in NumPy)
  assert set(kernels_called) - LOOPS <= {"_poisson_rdp_jit"}, kernels_called
  # the default methods add the add-direction RDP quadrature, and nothing else
  kernels_called.clear()
  allocation.epsilon(sigma=1.0, steps_per_epoch=234, num_epochs=10, delta=1e-5)
  assert set(kernels_called) - LOOPS == {"_add_rdp_jit"}, kernels_called


# The host upper laws' compiled loops (``sum_law.laws_batch(host="loops")``, bit
# for bit NumPy's): host laws run them once this process holds them (another
# test compiled them), never compiling them themselves (test_allocation_pld_host
# and test_allocation_laws_host count the compiles of scalar questions).
LOOPS = {"_upper_pair_rows"}


def test_front_door_values_equal_the_kernels():
  """Host front door (scalar) against the same methods on arrays of one lane,
  each method's value; rtol 1e-12 (the conversions pick the same order)."""
  kw = dict(steps_per_epoch=234, num_epochs=10, delta=1e-5,
            methods=("rdp_direct", "direct_add", "local"))
  host = allocation.epsilon(sigma=1.0, **kw)
  orders, rdp = allocation.allocation_rdp(sigma=np.array([1.0]), steps_per_epoch=234, num_epochs=10,
                                          direction="remove")
  jit_eps = mechanisms.rdp_to_epsilon(orders, np.asarray(rdp), np.array([1e-5])).epsilon
  assert host.details["remove"]["rdp_direct"] == pytest.approx(float(np.asarray(jit_eps)[0]),
                                                               rel=1e-12)
  g = mechanisms.Gaussian(1.0 / np.sqrt(10.0))
  assert host.details["add"]["local"] == pytest.approx(
      float(np.asarray(g.epsilon(np.array([1e-5])).epsilon)[0]), rel=1e-13)
  # (the kernel itself is checked against the literal partition sum of Thm 4.8
  # and mpmath in tests/allocation/test_allocation.py)


@pytest.mark.parametrize("sigma,t,order", [(1.0, 234, 64), (0.5, 1, 64), (3.0, 10**6, 64),
                                           (0.3, 2**31 - 1, 64), (0.1, 10**7, 256),
                                           (50.0, 2**31 - 1, 256)])
def test_remove_rdp_host_equals_kernel(sigma, t, order):
  """Extremes included: sigma 0.1 (RDP ~ alpha / 0.02 at alpha 256), sigma 50 at
  t = 2^31 - 1 (RDP ~ 1e-13: the excess's relative accuracy)."""
  host = allocation.allocation_remove_rdp(sigma=sigma, steps_per_epoch=t, max_order=order)
  # two lanes: the jitted kernel (one lane is a host question, namespace.for_inputs)
  jit = allocation.allocation_remove_rdp(sigma=np.array([sigma, sigma]), steps_per_epoch=t,
                                         max_order=order)
  assert np.all(np.isfinite(host)) and np.all(host > 0)
  assert isinstance(host, np.ndarray)
  # two log-sum-exp implementations (SciPy's, XLA's) over 31 powering levels:
  # 1.4e-12 relative at RDP ~ 1e-13 (sigma 50), 2e-16 elsewhere
  np.testing.assert_allclose(host, np.asarray(jit)[0], rtol=2e-12)
  # order 2 in closed form, R_2 = log1p(expm1(1/sigma^2)/t) (Thm 4.8, mpmath, 40 digits)
  mp.mp.dps = 40
  exact = float(mp.log1p(mp.expm1(1 / mp.mpf(sigma) ** 2) / t))
  assert host[0] == pytest.approx(exact, rel=1e-13)


def test_gaussian_doors_scalar_on_host(compile_counter):
  """Balle-Wang profile (arXiv:1805.06530v2 Thm 8): scalar questions are
  NumPy floats, equal to the kernel on arrays within 1e-14, no program."""
  with compile_counter as c:
    e = mechanisms.Gaussian(1.0).epsilon(1e-5).epsilon
    d = mechanisms.Gaussian(2.0).delta(0.5).delta
  assert c.count == 0
  assert isinstance(e, np.floating) and isinstance(d, np.floating)
  ea = mechanisms.Gaussian(1.0).epsilon(np.array([1e-5, 1e-5])).epsilon   # 2 lanes: jitted
  da = mechanisms.Gaussian(2.0).delta(np.array([0.5, 0.5])).delta
  assert float(e) == pytest.approx(float(np.asarray(ea)[0]), rel=1e-14)
  assert float(d) == pytest.approx(float(np.asarray(da)[0]), rel=1e-14)
  # extremes: never below the kernel's (feasible-end) epsilon by more than round-off
  for s, dl in ((0.1, 1e-300), (50.0, 1e-15), (0.5, 0.5), (1e3, 1e-6)):
    h = float(mechanisms.Gaussian(s).epsilon(dl).epsilon)
    k = float(np.asarray(mechanisms.Gaussian(s).epsilon(np.array([dl])).epsilon)[0])
    assert np.isfinite(h) and h == pytest.approx(k, rel=1e-12, abs=1e-300), (s, dl)


def test_remove_rdp_large_orders_stay_on_the_kernel():
  """Above max_order 256 the host powering (O(A^2 log t) log-sum-exps) is slower
  than the compiled kernel: those questions keep it (same values either way)."""
  big = allocation.allocation_remove_rdp(sigma=1.0, steps_per_epoch=1000, max_order=300)
  small = allocation.allocation_remove_rdp(sigma=1.0, steps_per_epoch=1000, max_order=256)
  assert not isinstance(big, np.ndarray) and isinstance(small, np.ndarray)
  np.testing.assert_allclose(np.asarray(big)[:255], small, rtol=1e-12)
