"""The two result types: pytrees through jit/vmap, closed bound vocabulary."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxacct import DeltaResult, EpsilonResult
from jaxacct._core.results import BOUNDS
from jaxacct._core.gaussian import gaussian_delta, gaussian_epsilon
from jaxacct._core.orders import DEFAULT_ORDERS


def test_results_pass_through_jit_and_vmap():
  def f(x):
    return EpsilonResult(2.0 * x, 1e-5, "m", "upper", lower=x,
                         by_direction={"remove": (2.0 * x, x), "add": (x, None)},
                         details={"note": "static"})
  r = jax.jit(f)(1.5)
  assert float(r.epsilon) == 3.0 and float(r.lower) == 1.5 and float(r.upper) == 3.0
  assert r.method == "m" and r.bound == "upper" and r.details == {"note": "static"}
  v = jax.vmap(f)(jnp.arange(4.0))
  np.testing.assert_array_equal(np.asarray(v.epsilon), [0.0, 2.0, 4.0, 6.0])
  np.testing.assert_array_equal(np.asarray(v.by_direction["remove"][1]), [0, 1, 2, 3])
  d = jax.jit(lambda x: DeltaResult(x, 1.0, "m", "exact"))(0.25)
  assert float(d.upper) == 0.25 and d.bound == "exact"


@pytest.mark.parametrize("bad", ["approximate", "lower_generic", "rdp-lower", "", None])
def test_bound_vocabulary_is_closed(bad):
  with pytest.raises(ValueError, match="bound must be one of"):
    EpsilonResult(1.0, 1e-5, "m", bad)
  with pytest.raises(ValueError, match="bound must be one of"):
    DeltaResult(1e-5, 1.0, "m", bad)
  assert BOUNDS == ("exact", "upper", "lower", "estimate")


# ------------------------------------------- every public door returns one
# (issue 16): the type, the bound word, the numbers as float64, and for the
# jittable doors the same result under jax.jit as eagerly (rtol 1e-13 as in
# tests/project/test_contract.py: XLA fusion may move the last ulp).

def _check(r, cls, value, method, bound, shape=()):
  assert isinstance(r, cls), type(r)
  assert r.method == method and r.bound == bound
  v = np.asarray(getattr(r, value))
  assert v.dtype == np.float64 and v.shape == shape
  return v


def test_gaussian_doors_return_results_and_jit_equals_eager():
  import jaxacct
  sig = np.array([0.5, 1.0, 4.0])
  e = _check(gaussian_epsilon(sig, 1e-6), EpsilonResult, "epsilon", "gaussian",
             "exact", (3,))
  d = _check(gaussian_delta(sig, 1.0), DeltaResult, "delta", "gaussian", "exact", (3,))
  with jax.enable_x64(True):
    je = jax.jit(gaussian_epsilon)(sig, 1e-6)
    jd = jax.jit(gaussian_delta)(sig, 1.0)
    ve = jax.vmap(gaussian_epsilon, in_axes=(0, None))(sig, 1e-6)
  assert je.method == "gaussian" and je.bound == "exact" and jd.bound == "exact"
  np.testing.assert_allclose(np.asarray(je.epsilon), e, rtol=1e-13)
  np.testing.assert_allclose(np.asarray(jd.delta), d, rtol=1e-13)
  np.testing.assert_allclose(np.asarray(ve.epsilon), e, rtol=1e-13)
  assert float(je.delta) == 1e-6 and float(jd.epsilon) == 1.0


@pytest.mark.parametrize("method", ["tight", "classic"])
def test_rdp_conversion_doors_return_results_and_jit_equals_eager(method):
  import jaxacct
  orders = DEFAULT_ORDERS
  rdp = np.linspace(0.01, 1.0, 4)[:, None] * orders[None, :]
  r = jaxacct.mechanisms.rdp_to_epsilon(orders, rdp, 1e-6, method=method)
  e = _check(r, EpsilonResult, "epsilon", "rdp_" + method, "upper", (4,))
  assert np.asarray(r.order).shape == (4,) and np.all(np.isin(np.asarray(r.order), orders))
  q = jaxacct.mechanisms.rdp_to_delta(orders, rdp, 1.0, method=method)
  d = _check(q, DeltaResult, "delta", "rdp_" + method, "upper", (4,))
  with jax.enable_x64(True):
    je = jax.jit(lambda x, dl: jaxacct.mechanisms.rdp_to_epsilon(orders, x, dl, method=method))(rdp, 1e-6)
    jd = jax.jit(lambda x, ep: jaxacct.mechanisms.rdp_to_delta(orders, x, ep, method=method))(rdp, 1.0)
  assert je.method == "rdp_" + method and je.bound == "upper" and jd.bound == "upper"
  np.testing.assert_allclose(np.asarray(je.epsilon), e, rtol=1e-13)
  np.testing.assert_array_equal(np.asarray(je.order), np.asarray(r.order))
  np.testing.assert_allclose(np.asarray(jd.delta), d, rtol=1e-13)
  np.testing.assert_array_equal(np.asarray(jd.order), np.asarray(q.order))


def test_poisson_pld_doors_return_results():
  from jaxacct import poisson
  kw = dict(sigma=2.0, q=0.1, num_steps=20, method="pld")
  r = poisson.epsilon(**kw, delta=1e-5)
  e = _check(r, EpsilonResult, "epsilon", "pld", "upper")
  assert float(r.delta) == 1e-5
  _check(poisson.epsilon(**kw, delta=np.array([1e-8, 1e-5])), EpsilonResult,
         "epsilon", "pld", "upper", (2,))
  d = _check(poisson.delta(**kw, epsilon=float(e)), DeltaResult, "delta", "pld",
             "upper")
  assert d <= 1e-5 * (1 + 1e-6)


def test_allocation_bound_doors_return_results():
  # one method through the front door: ``methods=(name,)`` (issue 29)
  from jaxacct import allocation
  kw = dict(sigma=1.0, steps_per_epoch=100)
  for method, direction in (("direct_add", "add"), ("decomposition", "both")):
    name = "/".join(f"{d}:{method}" for d in
                    (("remove", "add") if direction == "both" else (direction,)))
    _check(allocation.epsilon(**kw, delta=1e-6, methods=(method,), direction=direction),
           EpsilonResult, "epsilon", name, "upper")
    _check(allocation.delta(**kw, epsilon=1.0, methods=(method,), direction=direction),
           DeltaResult, "delta", name, "upper")
  _check(allocation.epsilon(sigma=1.2, steps_per_epoch=20, delta=1e-8, direction="remove",
                            methods=("decomposition_pld",)),
         EpsilonResult, "epsilon", "remove:decomposition_pld", "upper")


def test_allocation_recursive_doors_return_results():
  from jaxacct import allocation
  kw = dict(sigma=4.0, steps_per_epoch=1000, direction="remove")
  tp = ("truncated_poisson",)
  e = _check(allocation.epsilon(**kw, delta=1e-6, methods=tp, method_options={
      "truncated_poisson": dict(tail_fractions=(0.5,))}),
             EpsilonResult, "epsilon", "remove:truncated_poisson", "upper")
  assert np.isfinite(e)
  _check(allocation.delta(**kw, epsilon=1.0, methods=tp, method_options={
      "truncated_poisson": dict(tail_budgets=(1e-8,))}), DeltaResult,
         "delta", "remove:truncated_poisson", "upper")
  kw = dict(sigma=2.5, steps_per_epoch=100, direction="remove", methods=("recursive",))
  _check(allocation.epsilon(**kw, delta=1e-8, method_options={
      "recursive": dict(bootstrap=("direct",), tail_fractions=(0.1,))}), EpsilonResult,
         "epsilon", "remove:recursive", "upper")
  _check(allocation.delta(**kw, epsilon=1.0, method_options={
      "recursive": dict(bootstrap=("direct",), eps_prime=[0.3])}), DeltaResult, "delta",
         "remove:recursive", "upper")


def test_experimental_variation_ratio_rows_are_estimates():
  import math
  from jaxacct import experimental as xvr
  opts = dict(mechanism="k_rr", eps0=math.log(3), k=4)
  d = _check(xvr.row_delta_unsafe(math.log(2), n=3, **opts), DeltaResult, "delta",
             "variation_ratio_row", "estimate")
  assert abs(float(d) - 7 / 216) < 1e-14
  _check(xvr.row_epsilon_unsafe(1e-6, n=16, **opts), EpsilonResult, "epsilon",
         "variation_ratio_row", "estimate")
