"""Public doors under the user's ``jax.jit`` / ``jax.vmap`` (issue 45, item 5).

A door that traces gives the eager values (rtol 1e-12) under ``jit`` and
``vmap``. A door that runs host-side code (declared where it is defined with
``jaxacct._core.dtype.host_door``)
refuses a tracer at its entry with a ``NotTraceableError`` (a ``TypeError``)
that names the door, the parameter and what to call instead, never a raw
``TracerArrayConversionError`` from deep inside. x64 is on only inside the
``x64`` fixture (``jax.enable_x64``), so the global config does not leak.
"""

import functools
import importlib
import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxacct
from jaxacct import allocation, dpsgd, mechanisms, pld, poisson, shuffle
from jaxacct._core.dtype import HostDoor, NotTraceableError

from support import public_functions

ORDERS = np.array([2.0, 4.0, 8.0, 16.0])
SIGMAS = (0.9, 1.3)
EPS0S = (0.5, 1.0)


@functools.cache
def _gaussian_pld():
  return pld.gaussian(1.0, step=1e-2)


def _value(r):
  """The array a door returns: a result's epsilon/delta, an (orders, rdp) pair's rdp."""
  if isinstance(r, jaxacct.EpsilonResult):
    return r.epsilon
  if isinstance(r, jaxacct.DeltaResult):
    return r.delta
  if isinstance(r, tuple):
    return r[1]
  return r


def _case(name, xs, call, slow=False):
  return pytest.param(name, xs, call, id=name, marks=[pytest.mark.slow] if slow else [])


# door, the traced argument's values, the call of one value. Each compiles in a
# few seconds on 2 cores; the slow ones (tens of seconds) run with -m slow.
TRACED = [
    _case("poisson.poisson_gaussian_rdp", SIGMAS,
          lambda s: poisson.poisson_gaussian_rdp(ORDERS, q=0.01, sigma=s)),
    _case("poisson.epsilon", SIGMAS,
          lambda s: poisson.epsilon(q=0.01, sigma=s, num_steps=100, delta=1e-5)),
    _case("poisson.delta", SIGMAS,
          lambda s: poisson.delta(q=0.01, sigma=s, num_steps=100, epsilon=1.0)),
    _case("allocation.allocation_rdp", SIGMAS,
          lambda s: allocation.allocation_rdp(sigma=s, steps_per_epoch=10, direction="remove",
                                              max_order=16)),
    _case("allocation.delta_lower_bound", (0.5, 1.0),
          lambda e: allocation.delta_lower_bound(sigma=1.0, steps_per_epoch=10, epsilon=e),
          slow=True),
    _case("mechanisms.laplace_rdp", SIGMAS, lambda s: mechanisms.laplace_rdp(ORDERS, s)),
    _case("mechanisms.pure_dp_rdp", EPS0S, lambda e: mechanisms.pure_dp_rdp(ORDERS, e)),
    _case("mechanisms.rdp_to_epsilon", SIGMAS,
          lambda s: mechanisms.rdp_to_epsilon(ORDERS, ORDERS / (2 * s**2), 1e-5)),
    _case("mechanisms.rdp_to_delta", SIGMAS,
          lambda s: mechanisms.rdp_to_delta(ORDERS, ORDERS / (2 * s**2), 1.0)),
    _case("pld.epsilon", (1e-5, 1e-7), lambda d: pld.epsilon(_gaussian_pld(), d)),
    _case("pld.delta", (0.5, 1.0), lambda e: pld.delta(_gaussian_pld(), e)),
    _case("shuffle.clone_epsilon_closed_form", EPS0S,
          lambda e: shuffle.clone_epsilon_closed_form(1e-6, n=1000, eps0=e)),
    _case("shuffle.krr_epsilon_closed_form", EPS0S,
          lambda e: shuffle.krr_epsilon_closed_form(1e-6, n=1000, eps0=e, k=4)),
    _case("allocation.allocation_rdp (both)", SIGMAS,
          lambda s: allocation.allocation_rdp(sigma=s, steps_per_epoch=10, max_order=16), slow=True),
    _case("allocation.allocation_add_rdp", SIGMAS,
          lambda s: allocation.allocation_add_rdp(ORDERS, sigma=s, steps_per_epoch=10,
                                                  num_outer=256, num_inner=128), slow=True),
    _case("shuffle.clone_epsilon", EPS0S,
          lambda e: shuffle.clone_epsilon(1e-6, n=1000, eps0=e, max_n=1000), slow=True),
    _case("shuffle.stronger_clone_epsilon", EPS0S,
          lambda e: shuffle.stronger_clone_epsilon(1e-6, n=1000, eps0=e, max_n=1000),
          slow=True),
    _case("shuffle.rr2_lower_epsilon", EPS0S,
          lambda e: shuffle.rr2_lower_epsilon(1e-6, n=1000, eps0=e, max_n=1000), slow=True),
    _case("shuffle.girgis_epsilon", EPS0S,
          lambda e: shuffle.girgis_epsilon(n=1000, eps0=e, delta=1e-6), slow=True),
]


@pytest.mark.parametrize("name, xs, call", TRACED)
def test_traced_door_equals_eager(x64, name, xs, call):
  eager = [np.asarray(_value(call(x))) for x in xs]
  jitted = [np.asarray(_value(jax.jit(call)(x))) for x in xs]
  vmapped = np.asarray(_value(jax.vmap(call)(jnp.asarray(xs))))
  for e, j, v in zip(eager, jitted, vmapped):
    assert np.all(np.isfinite(e)), name
    np.testing.assert_allclose(j, e, rtol=1e-12, atol=0, err_msg=f"{name} under jit")
    np.testing.assert_allclose(v, e, rtol=1e-12, atol=0, err_msg=f"{name} under vmap")


def _door(path):
  module, name = path.rsplit(".", 1)
  return getattr(importlib.import_module(module), name)


def _host_doors():
  """``{public path: HostDoor}`` of every function a public ``__all__`` lists
  whose definition declares ``@host_door(...)``."""
  return {path: fn.host_door for path, fn in public_functions().items()
          if isinstance(getattr(fn, "host_door", None), HostDoor)}


HOST_DOORS = _host_doors()
#: the public doors that run host-side code today (a door that becomes jittable
#: drops its declaration and leaves this list; a new host-side door joins it)
KNOWN_HOST_DOORS = {
    *(f"jaxacct.poisson.{n}" for n in ("epsilon", "delta")),
    *(f"jaxacct.allocation.{n}" for n in (
        "epsilon", "delta", "allocation_rdp", "delta_lower_bound", "fixed_bins_pld_epsilon",
        "fixed_bins_pld_delta", "delta_monte_carlo", "true_allocation_delta_monte_carlo",
        "true_allocation_epsilon_monte_carlo")),
    *(f"jaxacct.allocation.pld.{n}" for n in (
        "allocation_pld_epsilon", "allocation_pld_delta", "allocation_plds", "event_epsilon",
        "event_delta")),
    *(f"jaxacct.shuffle.{n}" for n in (
        "epsilon", "delta", "dominating_pairs", "subsampled_epsilon", "subsampled_delta",
        "binary_rr_epsilon", "binary_rr_delta", "clone_epsilon_approx_ldp", "clone_rdp",
        "stronger_clone_rdp", "check_in_epsilon", "check_in_gaussian_epsilon",
        "amplify_epsilon_delta", "check_blanket_condition")),
    *(f"jaxacct.pld.{n}" for n in (
        "gaussian", "laplace", "poisson_gaussian", "randomized_response", "from_pair",
        "poisson_gaussian_composed", "to_dp_accounting")),
    *(f"jaxacct.dpsgd.{n}" for n in (
        "epsilon", "schedule", "event", "statement", "calibrate_noise_multiplier")),
    "jaxacct.calibrate",
}


def test_host_doors_are_declared_where_defined():
  """Every known host-side door declares it at its definition, and no other does."""
  assert set(HOST_DOORS) == KNOWN_HOST_DOORS


def _traced_param(door, host):
  """The first parameter the host door needs concrete."""
  names = list(inspect.signature(door).parameters)
  return host.params[0] if host.params else names[0]


@pytest.mark.parametrize("path", sorted(HOST_DOORS))
def test_host_door_refuses_a_tracer(x64, path):
  door, host = _door(path), HOST_DOORS[path]
  param = _traced_param(door, host)

  def call(x):
    return door(**dict(host.when), **{param: x})

  for transform, arg in ((jax.jit, 1.0), (jax.vmap, jnp.ones(2))):
    with pytest.raises(NotTraceableError) as err:
      transform(call)(arg)
    msg = str(err.value)
    assert path in msg and repr(param) in msg and host.instead in msg, msg
  assert issubclass(NotTraceableError, TypeError)


def test_host_door_declarations_are_current():
  """Every declaration is the one its public door was built with; its parameters
  exist; every jaxacct name its advice gives resolves."""
  for path, host in HOST_DOORS.items():
    door = _door(path)
    assert door.host_door is host, path
    params = inspect.signature(door).parameters
    assert set(host.params or ()) <= set(params), path
    assert {k for k, _ in host.when} <= set(params), path
    for name in re.findall(r"jaxacct(?:\.\w+)+", host.instead):
      assert callable(_door(name)), (path, name)


def test_allocation_pld_under_jit_and_vmap(x64):
  """The issue's case: a clear error, not a TracerArrayConversionError."""
  def call(s):
    return allocation.pld.allocation_pld_epsilon(sigma=s, steps_per_epoch=10, delta=1e-5)

  for transform, arg in ((jax.jit, 1.0), (jax.vmap, jnp.array([0.9, 1.1]))):
    with pytest.raises(TypeError, match=r"allocation_pld_epsilon .*'sigma' is a tracer.*"
                                        r"outside jit/vmap.*allocation_rdp"):
      transform(call)(arg)


def test_host_doors_refuse_realistic_calls(x64):
  with pytest.raises(NotTraceableError, match="'noise_multiplier'.*jaxacct.poisson.epsilon"):
    jax.vmap(lambda s: dpsgd.epsilon(noise_multiplier=s, num_examples=6000, batch_size=600,
                                     num_epochs=1, delta=1e-5))(jnp.array([0.9, 1.1]))
  with pytest.raises(NotTraceableError, match=r"method='pld'.*'sigma'.*method='rdp'"):
    jax.jit(lambda s: poisson.epsilon(q=0.01, sigma=s, num_steps=10, delta=1e-5,
                                      method="pld"))(1.0)
  with pytest.raises(NotTraceableError, match="jaxacct.calibrate.*'target_epsilon'"):
    jax.jit(lambda e: jaxacct.calibrate(
        lambda s: dpsgd.event(noise_multiplier=s, num_examples=6000, batch_size=600,
                              num_epochs=1, sampling="poisson"),
        e, 1e-5, bracket=(0.3, 5.0)))(2.0)
  with pytest.raises(NotTraceableError, match="allocation_rdp.*'steps_per_epoch'.*sigma may be"):
    jax.jit(lambda t: allocation.allocation_rdp(sigma=1.0, steps_per_epoch=t))(10)
  with pytest.raises(NotTraceableError, match="jaxacct.pld.gaussian.*'sigma'.*pytree"):
    jax.jit(lambda s: pld.gaussian(s))(1.0)


def test_host_door_error_comes_before_the_x64_error():
  """x64 off (the tests' default): the host-side door's error, which x64 would not fix."""
  assert not jax.config.jax_enable_x64
  with pytest.raises(NotTraceableError, match="allocation_pld_epsilon"):
    jax.jit(lambda s: allocation.pld.allocation_pld_epsilon(
        sigma=s, steps_per_epoch=10, delta=1e-5))(1.0)
