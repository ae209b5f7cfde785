"""The float64 policy of :mod:`jaxacct._core.dtype`, checked at the public surface.

float64 is entered once per call, where the call crosses the public surface,
by construction: every function a public ``__all__`` lists is a public door
(``dtype.public_surface`` / ``lazy_exports(float64=True)``), the accountant's
methods are entered by the class form of ``x64_boundary``, kernels called
inside jaxacct enter through ``dtype.dispatch``. With the user's global
config x64 OFF every public door returns float64 and leaves the config off,
and a float32 trace of a door raises the require_x64 error naming it.

* ``test_every_public_function_is_a_door`` (fast) checks that every function
  in every public ``__all__`` is entered under float64 (and keeps its name,
  docstring and signature); ``test_a_door_enters_float64_once`` checks what a
  door does, on a probe function;
* ``test_every_public_callable_x64_off`` (slow: ~160 first calls, minutes of
  compilation) calls every public callable of ``tests/project/test_api_validation.py``
  (its ``BASE`` valid arguments) once with x64 off;
* the fast probes call doors whose bodies are NumPy glue over other doors, on
  their NumPy and their array paths (the same bits as under float64).
"""

import inspect
import pathlib
import re

import jax
import numpy as np
import pytest

import jaxacct
from jaxacct import accounting, allocation, calibrator, dpsgd, pld, risk, shuffle
from jaxacct._core.dtype import (NotTraceableError, is_public_door, public_door, public_surface,
                                 x64_boundary, x64_enabled)
from jaxacct.accounting import events

import test_api_validation as api
from support import public_functions


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

# Doors whose bodies validate, work in NumPy and call other doors / dispatch,
# on the paths the sweep of BASE does not take.
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


# Slower doors of that kind (FFT compositions, searches).
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
  """The jittable laws door is a public door (a concrete call with x64 off
  raised the kernel's require_x64 error before it had one; see the slow test
  below)."""
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


# A float32 trace of a door: the require_x64 error naming the door, or, from a
# host-side door (declared by host_door), its NotTraceableError naming the door (x64 would
# not make it traceable); never a number.
_REFUSALS = (RuntimeError, NotTraceableError, jax.errors.ConcretizationTypeError,
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
  # every public door refuses a tracer itself, naming its public path
  assert isinstance(err.value, (RuntimeError, NotTraceableError)), err.value
  door = "jaxacct." + name.split("[")[0]
  said = "cannot be traced" if isinstance(err.value, NotTraceableError) else "needs float64"
  assert door in str(err.value) and said in str(err.value), err.value
  assert not jax.config.jax_enable_x64


def test_x64_boundary_names_the_door_under_a_float32_trace():
  with pytest.raises(RuntimeError,
                     match=r"jaxacct\.allocation\.delta_lower_bound needs float64"):
    jax.jit(lambda e: allocation.delta_lower_bound(sigma=1.0, steps_per_epoch=10, epsilon=e))(1.0)


# Public modules whose functions are not entered at the surface, and why.
NOT_ENTERED = {
    "jaxacct.tracking": "optax transforms work in the user's dtype (NOT_A_FLOAT64_DOOR); "
                        "its other functions call public doors",
    "jaxacct.sampling": "host samplers (NumPy); accounting through the public doors",
    "jaxacct.__main__": "the command line (calls public doors)",
}


def _surface_functions():
  return public_functions(skip=NOT_ENTERED)


def test_every_public_function_is_a_door():
  """Every function in every public ``__all__`` is entered under float64, keeps
  what ``help`` / ``inspect.signature`` show, and is one object wherever listed."""
  doors = _surface_functions()
  assert len(doors) > 50, len(doors)   # the sweep reached the public modules
  bad = sorted(q for q, fn in doors.items() if not is_public_door(fn))
  assert not bad, f"public functions not entered under float64: {bad}"
  for qual, fn in doors.items():
    real = fn.__wrapped__
    assert not is_public_door(real), qual                  # entered once, not nested
    assert fn.__name__ == real.__name__ and fn.__doc__ == real.__doc__, qual
    assert str(inspect.signature(fn)) == str(inspect.signature(real)), qual
  # one door per function: a lazy re-export is the object its module lists
  assert jaxacct.mechanisms.laplace_rdp is public_door(jaxacct.mechanisms.laplace_rdp, "x")


def test_a_door_enters_float64_once():
  seen = []

  def probe(x, *, y=2.0):
    """Probe docstring."""
    seen.append(x64_enabled())
    return np.float64(x) + y

  namespace = {"__name__": "jaxacct.probe", "__all__": ["probe", "K"], "probe": probe,
               "K": 3, "helper": probe}
  public_surface(namespace)
  door = namespace["probe"]
  assert is_public_door(door) and door is not probe and namespace["helper"] is probe
  assert namespace["K"] == 3 and public_door(door, "again") is door
  assert door.__doc__ == "Probe docstring." and str(inspect.signature(door)) == "(x, *, y=2.0)"
  assert not jax.config.jax_enable_x64
  assert door(1.0) == 3.0 and seen == [True]
  assert not jax.config.jax_enable_x64, "the user's float32 config was changed"
  with jax.enable_x64(True):                # already float64: the door adds nothing
    assert door(1.0, y=1.0) == 2.0 and seen == [True, True]
  with pytest.raises(RuntimeError, match=r"jaxacct\.probe\.probe needs float64"):
    jax.jit(door)(1.0)


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


def test_core_dtype_names_no_upper_package():
  """The float64 boundary sits at the bottom of the house: a host-side door is
  declared where it is defined (``@host_door(...)``), so ``_core/dtype.py``
  names no public path of an upper package, neither as an import nor as text."""
  text = (pathlib.Path(jaxacct.__file__).parent / "_core" / "dtype.py").read_text()
  uppers = sorted({m.group(1) for m in re.finditer(r"jaxacct\.(\w+)", text)} - {"_core"})
  assert uppers == [], uppers
