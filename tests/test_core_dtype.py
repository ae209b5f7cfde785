"""The float64 policy of :mod:`jaxacct._core.dtype`, checked at the public surface.

float64 is entered once per call, where the call crosses the public surface:
``dtype.dispatch`` for the kernels, ``x64_boundary`` for a door that does
float64 work of its own; a door that only validates, works in NumPy and calls
other doors has no boundary of its own. Whatever the route, with the user's
global config x64 OFF every public door returns float64 and leaves the config
off, and a float32 trace of a door never yields a number.

* ``test_every_public_callable_x64_off`` (slow: ~160 first calls, minutes of
  compilation) calls every public callable of ``tests/test_api_validation.py``
  (its ``BASE`` valid arguments) once with x64 off;
* the fast tests call the doors that rely on the doors they call (no
  boundary of their own), on their NumPy and their array paths.
"""

import jax
import numpy as np
import pytest

from jaxacct import accounting, allocation, calibrator, dpsgd, pld, risk, shuffle
from jaxacct._core.dtype import x64_boundary, x64_enabled
from jaxacct.accounting import events

import test_api_validation as api


def _float_leaves(x):
  """Floating leaves of a result (pytrees, NamedTuples, dataclasses, dicts)."""
  out = []

  def rec(v):
    if isinstance(v, (np.ndarray, jax.Array, np.floating, float)) and not isinstance(v, bool):
      a = np.asarray(v)
      if a.dtype.kind == "f":
        out.append(a)
    elif isinstance(v, (tuple, list)):
      for e in v:
        rec(e)
    elif isinstance(v, dict):
      for e in v.values():
        rec(e)
    elif hasattr(v, "__dataclass_fields__"):
      for k in v.__dataclass_fields__:
        rec(getattr(v, k))

  rec(x)
  return out


def _check_x64_off_call(call):
  assert not jax.config.jax_enable_x64
  r = call()
  assert not jax.config.jax_enable_x64, "the user's float32 config was changed"
  leaves = _float_leaves(r)
  bad = [a.dtype for a in leaves if a.dtype != np.float64]
  assert not bad, bad
  return r, leaves


_E0 = float(np.log(3.0))

# Doors without a boundary of their own (they call doors / dispatch and work in
# NumPy), on the paths the sweep of BASE does not take.
NO_OWN_BOUNDARY = {
    "poisson.epsilon[pld, array]": lambda: __import__("jaxacct").poisson.epsilon(
        sigma=np.array([1.0, 1.5]), q=0.1, num_steps=10, delta=1e-5, method="pld"),
    "poisson.delta[pld, scalar]": lambda: __import__("jaxacct").poisson.delta(
        sigma=1.0, q=0.1, num_steps=10, epsilon=1.0, method="pld"),
    "pld.from_pair": lambda: pld.from_pair(np.array([0.7, 0.3]), np.array([0.3, 0.7]),
                                           step=0.1),
    "pld.randomized_response": lambda: pld.randomized_response(1.0, step=0.5),
    "shuffle.epsilon[rounds=1]": lambda: shuffle.epsilon(delta=1e-6, n=100, eps0=_E0),
    "allocation.epsilon[truncated_poisson, authors]": lambda: allocation.epsilon(
        sigma=1.0, steps_per_epoch=10, delta=1e-5, methods=("truncated_poisson",),
        method_options={"truncated_poisson": dict(step=1e-2, split="authors")}),
    "allocation.delta[truncated_poisson]": lambda: allocation.delta(
        sigma=1.0, steps_per_epoch=10, epsilon=1.0, methods=("truncated_poisson",),
        method_options={"truncated_poisson": dict(step=1e-2, tail_budgets=(1e-8,))}),
    "allocation.epsilon[decomposition_pld, k=2]": lambda: allocation.epsilon(
        sigma=1.0, steps_per_epoch=20, num_selected=2, delta=1e-5,
        methods=("decomposition_pld",), method_options={"decomposition_pld": dict(step=1e-2)}),
    "accounting.regrid": lambda: accounting.regrid(pld.randomized_response(1.0), 0.1),
    "accounting.from_profile": lambda: accounting.from_profile(
        np.array([0.0, 0.5, 1.0]), np.array([0.3, 0.1, 0.01]), step=0.1),
}


@pytest.mark.parametrize("name", sorted(NO_OWN_BOUNDARY))
def test_doors_without_own_boundary_return_float64_with_x64_off(name):
  r, leaves = _check_x64_off_call(NO_OWN_BOUNDARY[name])
  assert leaves or isinstance(r, int), f"{name}: no floating result"
  # the same answer as under the user's own float64 config
  with jax.enable_x64(True):
    r64 = NO_OWN_BOUNDARY[name]()
  for a, b in zip(leaves, _float_leaves(r64)):
    np.testing.assert_array_equal(a, b)


# Slower doors without a boundary of their own (FFT compositions, searches).
SLOW_NO_OWN_BOUNDARY = {
    "shuffle.delta[rounds=3]": lambda: shuffle.delta(epsilon=0.5, n=100, eps0=_E0, rounds=3),
    "dpsgd.epsilon[balls_in_bins]": lambda: dpsgd.epsilon(
        noise_multiplier=1.0, num_examples=1000, batch_size=100, num_epochs=2, delta=1e-5,
        progress=False),
    "dpsgd.epsilon[poisson]": lambda: dpsgd.epsilon(
        noise_multiplier=1.0, num_examples=1000, batch_size=100, num_epochs=2, delta=1e-5,
        sampling="poisson", progress=False),
    "calibrator.upper_epsilon": lambda: calibrator.upper_epsilon(
        [events.PoissonSampledDpEvent(0.01, events.GaussianDpEvent(1.0)),
         events.GaussianDpEvent(2.0)], 1e-5),
    "jaxacct.calibrate": lambda: __import__("jaxacct").calibrate(
        events.GaussianDpEvent, 1.0, 1e-5, bracket=(0.1, 10.0), progress=False),
    "risk.advantage": lambda: risk.advantage(noise_multiplier=1.0, num_examples=1000,
                                             batch_size=100, num_epochs=1),
    "risk.tpr_at_fpr": lambda: risk.tpr_at_fpr(np.array([0.01, 0.1]), noise_multiplier=1.0,
                                               num_examples=1000, batch_size=100,
                                               num_epochs=1, progress=False),
    "accounting.PLDAccountant.tpr_at_fpr": lambda: accounting.PLDAccountant().compose(
        events.PoissonSampledDpEvent(0.01, events.GaussianDpEvent(1.0)), 50
    ).tpr_at_fpr(np.array([0.01, 0.1])),
    "accounting.PLDAccountant.load_state_dict": lambda: accounting.PLDAccountant(
    ).load_state_dict(accounting.PLDAccountant().compose(
        events.PoissonSampledDpEvent(0.01, events.GaussianDpEvent(1.0)), 50).state_dict()
    ).get_epsilon_bounds(1e-5),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_NO_OWN_BOUNDARY))
def test_slow_doors_without_own_boundary_return_float64_with_x64_off(name):
  _check_x64_off_call(SLOW_NO_OWN_BOUNDARY[name])


def test_allocation_pld_laws_float32_trace_names_the_door():
  """The jittable laws door has a boundary (a concrete call with x64 off raised
  the kernel's require_x64 error before; see the slow test below)."""
  from jaxacct.allocation import pld as apld
  with pytest.raises(RuntimeError, match="allocation_pld_laws needs float64"):
    jax.jit(lambda s: apld.allocation_pld_laws(s, 10, grid_size=64))(1.0)


@pytest.mark.slow
def test_allocation_pld_laws_x64_off():
  from jaxacct.allocation import pld as apld
  _check_x64_off_call(lambda: apld.allocation_pld_laws(1.0, 10, grid_size=64))


def test_x64_boundary_on_a_class_wraps_its_public_methods_only():
  @x64_boundary
  class Acc:
    def public(self):
      return x64_enabled()

    def _private(self):
      return x64_enabled()

    @property
    def prop(self):
      return x64_enabled()

  a = Acc()
  assert not jax.config.jax_enable_x64
  assert a.public() and not a._private() and not a.prop
  assert not jax.config.jax_enable_x64
  with pytest.raises(RuntimeError, match=r"Acc\.public needs float64"):
    jax.jit(lambda x: Acc.public(x))(1.0)


# A float32 trace of a door: the require_x64 error (naming the door, or the
# door it calls), or the tracer refused by a door that needs concrete input;
# never a number.
_REFUSALS = (RuntimeError, jax.errors.ConcretizationTypeError,
             jax.errors.TracerArrayConversionError, jax.errors.TracerIntegerConversionError,
             jax.errors.TracerBoolConversionError)
TRACED = {
    "poisson.epsilon": lambda s: __import__("jaxacct").poisson.epsilon(
        q=0.01, sigma=s, num_steps=100, delta=1e-5),
    "poisson.epsilon[pld]": lambda s: __import__("jaxacct").poisson.epsilon(
        sigma=s, q=0.1, num_steps=10, delta=1e-5, method="pld"),
    "pld.gaussian": lambda s: pld.gaussian(s, step=1e-2),
    "pld.randomized_response": lambda s: pld.randomized_response(s, step=0.5),
    "allocation.epsilon[direct_add]": lambda s: allocation.epsilon(
        sigma=s, steps_per_epoch=10, delta=1e-5, direction="add", methods=("direct_add",)),
    "allocation.epsilon[truncated_poisson]": lambda s: allocation.epsilon(
        sigma=s, steps_per_epoch=10, delta=1e-5, methods=("truncated_poisson",),
        method_options={"truncated_poisson": dict(step=1e-2, tail_fractions=(0.1,))}),
    "shuffle.epsilon": lambda s: shuffle.epsilon(delta=1e-6, n=100, eps0=s),
    "shuffle.clone_rdp": lambda s: shuffle.clone_rdp(np.array([2.0, 3.0]), n=100, eps0=s),
}


@pytest.mark.parametrize("name", sorted(TRACED))
def test_float32_trace_of_a_door_never_yields_a_number(name):
  assert not jax.config.jax_enable_x64
  with pytest.raises(_REFUSALS) as err:
    jax.jit(TRACED[name])(1.0)
  if isinstance(err.value, RuntimeError):
    assert "needs float64" in str(err.value), err.value
  assert not jax.config.jax_enable_x64


def test_x64_boundary_names_the_door_under_a_float32_trace():
  with pytest.raises(RuntimeError,
                     match=r"jaxacct\.allocation\.epsilon needs float64"):
    jax.jit(lambda s: allocation.epsilon(sigma=s, steps_per_epoch=10, delta=1e-5,
                                         direction="add", methods=("direct_add",)))(1.0)


# Public callables that are not float64 doors (generic or user-dtype tools).
NOT_A_FLOAT64_DOOR = {
    "jaxacct.bisect": "generic solver: works in the dtype of the user's function and bracket",
    "jaxacct.tracking.gaussian_noise": "optax transform: noise in the user's parameter dtype",
    "jaxacct.tracking.clip_and_sum": "optax transform: the user's gradients' dtype",
    "jaxacct.tracking.dp_aggregate": "optax transform: the user's gradients' dtype",
    "jaxacct.tracking.track_privacy": "optax transform (state in the user's dtype)",
}


@pytest.mark.slow
@pytest.mark.parametrize("qual", sorted(q for q in api.BASE if q in api.PUBLIC
                                        and q not in NOT_A_FLOAT64_DOOR))
def test_every_public_callable_x64_off(qual):
  fn = api.PUBLIC[qual]

  def call():
    return fn(**{k: (v.make() if isinstance(v, api._Lazy) else v)
                 for k, v in api.BASE[qual].items()})

  try:
    _check_x64_off_call(call)
  except ValueError as err:   # a BASE entry the door rejects is not this test's subject
    pytest.skip(f"BASE arguments rejected: {err}")
