"""Every public function refuses unknown choices and string numbers (issue 20.3).

The public API is discovered by introspection (``__all__`` of each public
module below, or its public functions defined there when it has none; an
object re-exported under several names is tested once); every public callable must appear in ``BASE`` (valid values
for its required arguments, so that exactly one bad argument is passed at a
time) or in ``EXEMPT`` (with the reason).  A new public function therefore
fails :func:`test_every_public_callable_is_covered` until it is listed.

For each parameter of each listed function (found from its signature, so
new parameters are covered automatically):

* a choice parameter (``CHOICE``: a string keyword such as ``direction``,
  ``method``, ``conversion``) gets ``"foo"``, ``""``, ``1`` and ``None``;
* a choice-tuple parameter (``methods``, ``bootstrap``) gets ``("foo",)``;
* a flag (``pessimistic``, ``exact``, ...) gets the string ``"False"``;
* every other parameter whose valid value (from ``BASE`` or the default) is
  a number or an array of numbers gets that value as text
  (``num_steps="100"``, ``delta="1e-05"``, ``orders=array(["2.0", ...])``);

and the call must raise ``ValueError`` whose message names the parameter.
"""

import importlib
import inspect
import math
import time

import numpy as np
import pytest

import jaxacct

MODULES = (
    "jaxacct", "jaxacct.mechanisms", "jaxacct.poisson", "jaxacct.pld",
    "jaxacct.allocation", "jaxacct.allocation.pld",
    "jaxacct.shuffle", "jaxacct.shuffle.bounds", "jaxacct.tracking", "jaxacct.experimental",
    "jaxacct.dpsgd", "jaxacct.sampling",
    "jaxacct.accounting",
)

CHOICE = {"direction", "method", "conversion", "randomizer", "mechanism",
          "bound", "on_budget", "rounding", "azuma", "split", "base",
          "scheme", "sampling", "neighboring_relation"}
CHOICE_SEQ = {"methods", "bootstrap"}
FLAGS = {"pessimistic", "exact", "lower", "use_add_rdp", "paper_caps",
         "log_scale", "increasing", "fresh_each_epoch", "shortcuts", "discrete", "compare"}

# Public callables with nothing to validate here, and why.
EXEMPT = {
    "jaxacct.EpsilonResult": "result container (built by the library; a pytree)",
    "jaxacct.DeltaResult": "result container (built by the library; a pytree)",
    "jaxacct.pld.PLD": "data container and jit pytree (fields may be tracers)",
    "jaxacct.pld.PairPLD": "data container (two PLDs)",
    "jaxacct.tracking.PrivacyBudgetExceeded": "exception class",
    "jaxacct.tracking.PrivacyScheduleChanged": "exception class",
    "jaxacct.shuffle.bounds.check_in_ldp_rdp_clones": "kernel of check_in_ldp_rdp (validated there)",
    "jaxacct.shuffle.bounds.check_in_first_cut_dp": "kernel of check_in_first_cut_epsilon",
    "jaxacct.tracking.privacy_spent": "takes an optax state only",
    "jaxacct.pld.to_dp_accounting": "takes PLD objects only (conversion)",
    "jaxacct.dpsgd.PrivacyStatement": "result container (built by dpsgd.statement)",
    "jaxacct.StepsUnitWarning": "warning class",
    # jaxacct.experimental (Liew et al. as printed): reproductions of formulas as printed
    # (not accountants; several are known unsound), kept for the paper tables.
    "jaxacct.experimental.paper_approach_rdp": "paper reproduction (experimental)",
    "jaxacct.experimental.paper_lemma1_rdp": "paper reproduction (experimental)",
    "jaxacct.experimental.paper_table2_epsilon": "paper reproduction (experimental)",
    "jaxacct.experimental.subsampled_shuffle_gaussian_rdp_estimate":
        "estimate, not a bound (experimental)",
    "jaxacct.enable_compilation_cache": "sets JAX's global cache config (tests/dpsgd/test_dpsgd.py)",
    "jaxacct.set_progress": "global switch taking a bool (tests/dpsgd/test_dpsgd.py)",
    "jaxacct.set_layout": "global switch taking a layout name (its ValueError: "
                          "tests/project/test_accelerator_layout.py)",
    "jaxacct.set_backend": "global switch taking a backend name (its ValueError: "
                           "tests/_core/test_float64_device.py)",
    "jaxacct.dpsgd.Schedule": "result container",
    "jaxacct.accounting.NeighboringRelation": "enum",
    "jaxacct.accounting.UnsupportedEventError": "exception class",
    "jaxacct.accounting.TradeOff": "result container",
    "jaxacct.sampling.Batch": "data container (index batch and mask)",
}

_ORD = np.array([2.0, 3.0, 4.5])
_IORD = np.array([2.0, 3.0, 4.0])
_E0 = math.log(3.0)
_KRR = np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]])


class _Lazy:
  """A value built when the call is made (PLD objects, accountants)."""

  def __init__(self, make):
    self.make = make


def _gaussian_event():
  return _dp_gaussian()


def _dp_gaussian():
  dp_accounting = pytest.importorskip("dp_accounting")
  return dp_accounting.GaussianDpEvent(1.0)


def _gaussian_step(sigma):
  from jaxacct.accounting import events
  return events.GaussianDpEvent(sigma)


def _rr_pld():
  from jaxacct import pld
  return pld.randomized_response(1.0)


def _rr_pair():
  from jaxacct import pld
  p = pld.randomized_response(1.0)
  return pld.PairPLD(p, p)


def _allocation_event():
  from jaxacct.accounting import events
  return events.RandomAllocationDpEvent(noise_multiplier=1.0, steps_per_epoch=10)


def _event_acc():
  from jaxacct import tracking
  return tracking.EventAccountant(_gaussian_event())


# Valid values for the required (and some optional) arguments; callables are
# evaluated lazily (PLD objects, accountants).
_SH = dict(n=100, eps0=_E0)
BASE = {
    # jaxacct
    "jaxacct.mechanisms.rdp_to_epsilon": dict(orders=_ORD, rdp=np.array([0.1, 0.2, 0.3]),
                                   delta=1e-5),
    "jaxacct.mechanisms.rdp_to_delta": dict(orders=_ORD, rdp=np.array([0.1, 0.2, 0.3]),
                                 epsilon=1.0),
    "jaxacct.mechanisms.laplace_rdp": dict(orders=_ORD, scale=1.0),
    "jaxacct.mechanisms.pure_dp_rdp": dict(orders=_ORD, eps0=1.0),
    "jaxacct.mechanisms.Gaussian": dict(noise_multiplier=1.0),
    "jaxacct.mechanisms.Laplace": dict(scale=1.0),
    "jaxacct.mechanisms.RandomizedResponse": dict(noise_parameter=0.5, num_buckets=4),
    "jaxacct.mechanisms.EpsilonDelta": dict(eps0=1.0),
    "jaxacct.poisson.poisson_gaussian_rdp": dict(orders=_ORD, q=0.01, sigma=1.0),
    # poisson
    "jaxacct.poisson.epsilon": dict(q=0.01, sigma=1.0, num_steps=100, delta=1e-5,
                                    orders=_ORD),
    "jaxacct.poisson.delta": dict(q=0.01, sigma=1.0, num_steps=100, epsilon=1.0,
                                  orders=_ORD),
    # pld
    "jaxacct.pld.from_losses": dict(losses=np.array([1.0, -1.0]),
                                    probs=np.array([0.7, 0.3]), step=0.1,
                                    offset=-10, size=32),
    "jaxacct.pld.from_pair": dict(p=np.array([0.7, 0.3]), q=np.array([0.3, 0.7]),
                                  step=0.1),
    "jaxacct.pld.compose": dict(pld=_Lazy(_rr_pld), count=2, size=8),
    "jaxacct.pld.compose_many": dict(plds=_Lazy(lambda: [_rr_pld()]), counts=[2],
                                     size=8),
    "jaxacct.pld.delta": dict(pld=_Lazy(_rr_pld), epsilon=0.5),
    "jaxacct.pld.epsilon": dict(pld=_Lazy(_rr_pld), delta=1e-3),
    "jaxacct.pld.gaussian": dict(sigma=1.0, step=1e-2),
    "jaxacct.pld.laplace": dict(scale=1.0, step=1e-2),
    "jaxacct.pld.poisson_gaussian": dict(sigma=1.0, q=0.1, step=1e-2),
    "jaxacct.pld.randomized_response": dict(eps0=1.0, delta0=0.0, step=0.5),
    "jaxacct.pld.poisson_gaussian_composed": dict(sigma=1.0, q=0.1, num_steps=10,
                                                  step=1e-2),
    # allocation (steps per epoch: steps_per_epoch; num_steps is its deprecated alias)
    "jaxacct.allocation.epsilon": dict(sigma=1.0, steps_per_epoch=10, num_epochs=1, delta=1e-5,
                                       methods=("local",)),
    "jaxacct.allocation.delta": dict(sigma=1.0, steps_per_epoch=10, num_epochs=1, epsilon=1.0,
                                     methods=("local",)),
    "jaxacct.allocation.allocation_rdp": dict(sigma=1.0, steps_per_epoch=10),
    "jaxacct.allocation.allocation_remove_rdp": dict(sigma=1.0, steps_per_epoch=10),
    "jaxacct.allocation.allocation_add_rdp": dict(orders=_ORD, sigma=1.0,
                                                  steps_per_epoch=10),
    "jaxacct.allocation.allocation_remove_rdp_from_moments": dict(
        log_moments=np.zeros((1, 4)), steps_per_epoch=10),
    "jaxacct.allocation.delta_monte_carlo": dict(sigma=1.0, steps_per_epoch=10, epsilon=1.0,
                                                 num_samples=1000, batch_size=1000),
    "jaxacct.allocation.delta_lower_bound": dict(sigma=1.0, steps_per_epoch=10, epsilon=1.0),
    "jaxacct.allocation.true_allocation_delta_monte_carlo": dict(
        sigma=1.0, steps_per_epoch=10, epsilon=1.0, num_samples=1000),
    "jaxacct.allocation.true_allocation_epsilon_monte_carlo": dict(
        sigma=1.0, steps_per_epoch=10, delta=1e-3, num_samples=1000),
    "jaxacct.allocation.pld.allocation_pld_epsilon": dict(
        sigma=1.0, delta=1e-5, steps_per_epoch=10, num_epochs=1, tail=1e-12),
    "jaxacct.allocation.pld.allocation_pld_delta": dict(
        sigma=1.0, epsilon=1.0, steps_per_epoch=10, num_epochs=1, tail=1e-12),
    "jaxacct.allocation.pld.allocation_pld_laws": dict(sigma=1.0, steps_per_epoch=10),
    "jaxacct.allocation.pld.allocation_plds": dict(sigma=1.0, steps_per_epoch=10, num_epochs=1,
                                                   tail=1e-12),
    "jaxacct.allocation.pld.event_epsilon": dict(event=_Lazy(_allocation_event), delta=1e-5),
    "jaxacct.allocation.pld.event_delta": dict(event=_Lazy(_allocation_event), epsilon=1.0),
    # shuffle
    "jaxacct.shuffle.epsilon": dict(delta=1e-6, **_SH),
    "jaxacct.shuffle.delta": dict(epsilon=0.5, **_SH),
    "jaxacct.shuffle.clone_delta": dict(eps=0.5, max_n=200, **_SH),
    "jaxacct.shuffle.clone_epsilon": dict(delta=1e-6, max_n=200, **_SH),
    "jaxacct.shuffle.clone_epsilon_closed_form": dict(delta=1e-6, **_SH),
    "jaxacct.shuffle.clone_epsilon_approx_ldp": dict(delta=1e-6, delta0=1e-8,
                                                     **_SH),
    "jaxacct.shuffle.clone_rdp": dict(orders=_ORD, **_SH),
    "jaxacct.shuffle.krr_epsilon_closed_form": dict(delta=1e-6, k=3, **_SH),
    "jaxacct.shuffle.bounds.krr_thm41_delta": dict(eps=0.5, k=3, **_SH),
    "jaxacct.shuffle.bounds.krr_thm41_epsilon": dict(delta=1e-6, k=3, **_SH),
    "jaxacct.shuffle.rr2_lower_delta": dict(eps=0.5, max_n=200, **_SH),
    "jaxacct.shuffle.rr2_lower_epsilon": dict(delta=1e-6, max_n=200, **_SH),
    "jaxacct.shuffle.stronger_clone_delta": dict(eps=0.5, max_n=200, **_SH),
    "jaxacct.shuffle.stronger_clone_epsilon": dict(delta=1e-6, max_n=200, **_SH),
    "jaxacct.shuffle.stronger_clone_rdp": dict(orders=_ORD, **_SH),
    "jaxacct.shuffle.bounds.variation_ratio_lower_delta": dict(
        eps=0.5, n=100, p=3.0, beta=0.5, q0=3.0, q1=3.0, max_n=200),
    "jaxacct.shuffle.bounds.variation_ratio_lower_epsilon": dict(
        delta=1e-6, n=100, p=3.0, beta=0.5, q0=3.0, q1=3.0, max_n=200),
    "jaxacct.shuffle.check_blanket_condition": dict(matrix=_KRR, eps0=_E0),
    "jaxacct.shuffle.binary_rr_delta": dict(eps=0.5, n=10, eps0=_E0, ms=[0, 1]),
    "jaxacct.shuffle.binary_rr_epsilon": dict(delta=1e-3, n=10, eps0=_E0,
                                              ms=[0, 1]),
    "jaxacct.shuffle.bounds.enumerate_delta": dict(matrix=_KRR, x0=0, x1=1,
                                            others=(0, 2), eps=0.5),
    "jaxacct.shuffle.bounds.worst_case_delta": dict(matrix=_KRR, n=3, eps=0.5,
                                             pairs=[(0, 1)]),
    "jaxacct.shuffle.bounds.pair_pmfs": dict(n=10, p=3.0, beta=0.5, q0=3.0, q1=3.0),
    "jaxacct.shuffle.dominating_pairs": dict(**_SH),
    "jaxacct.shuffle.bounds.variation_ratio_pair_delta": dict(eps=0.5, n=10, p=3.0, beta=0.5,
                                                             q0=3.0),
    "jaxacct.shuffle.bounds.variation_ratio_pair_epsilon": dict(delta=1e-3, n=10, p=3.0,
                                                               beta=0.5, q0=3.0),
    "jaxacct.shuffle.subsampled_epsilon": dict(n=100, m=10, eps0=_E0, delta=1e-6),
    "jaxacct.shuffle.subsampled_delta": dict(n=100, m=10, eps0=_E0, epsilon=0.5),
    "jaxacct.shuffle.amplify_epsilon_delta": dict(epsilon=1.0, delta=1e-6,
                                                  rate=0.1),
    "jaxacct.shuffle.bounds.chen_exact_rdp": dict(orders=_ORD, **_SH),
    "jaxacct.shuffle.bounds.chen_asymptotic_rdp": dict(orders=_ORD, **_SH),
    "jaxacct.shuffle.bounds.chen_gdp_mu": dict(**_SH),
    "jaxacct.shuffle.chen_epsilon": dict(delta=1e-6, orders=_ORD, **_SH),
    "jaxacct.shuffle.bounds.girgis_thm1_rdp": dict(orders=_IORD, **_SH),
    "jaxacct.shuffle.bounds.girgis_cor1_rdp": dict(orders=_IORD, **_SH),
    "jaxacct.shuffle.bounds.girgis_thm2_rdp": dict(orders=_ORD, **_SH),
    "jaxacct.shuffle.bounds.efm19_rdp": dict(orders=_ORD, **_SH),
    "jaxacct.shuffle.bounds.girgis_mixture_rdp": dict(orders=_IORD, **_SH),
    "jaxacct.shuffle.bounds.girgis_lower_rdp": dict(orders=_ORD, **_SH),
    "jaxacct.shuffle.bounds.girgis_cor2_rdp": dict(orders=_IORD, **_SH),
    "jaxacct.shuffle.bounds.girgis_subsampled_rdp": dict(orders=_IORD, sampling_probability=0.1,
                                                  **_SH),
    "jaxacct.shuffle.girgis_epsilon": dict(delta=1e-6, orders=_IORD,
                                           sampling_probability=0.5, **_SH),
    "jaxacct.shuffle.bounds.check_in_ldp_rdp": dict(orders=_IORD, n=100, p=0.5,
                                             eps0=_E0),
    "jaxacct.shuffle.bounds.check_in_gaussian_rdp": dict(orders=_IORD, n=100, p=0.5,
                                                  sigma=1.0),
    "jaxacct.shuffle.bounds.check_in_gaussian_rdp_lower": dict(
        orders=_IORD, n=100, p=0.5, sigma=1.0, num_terms=50),
    "jaxacct.shuffle.bounds.check_in_secagg_gaussian_rdp": dict(
        orders=_IORD, n=100, p=0.5, sigma=1.0, num_terms=50),
    "jaxacct.shuffle.bounds.shuffle_gaussian_rdp_lower": dict(orders=_IORD, n=100,
                                                       sigma=1.0),
    "jaxacct.shuffle.check_in_epsilon": dict(n=100, p=0.5, eps0=_E0, delta=1e-6,
                                             orders=_IORD),
    "jaxacct.shuffle.check_in_gaussian_epsilon": dict(
        n=100, p=0.5, sigma=1.0, delta=1e-6, orders=_IORD, num_terms=50),
    "jaxacct.shuffle.bounds.check_in_first_cut_epsilon": dict(
        n=100, p=0.5, eps0=_E0, delta0=1e-8, delta=1e-6),
    # tracking
    "jaxacct.tracking.track_privacy": dict(accountant=_Lazy(_event_acc), num_steps=10,
                                           delta=1e-5, max_epsilon=10.0),
    "jaxacct.tracking.EpsilonTableAccountant": dict(
        epsilons=np.array([0.1, 0.2, 0.3]), delta=1e-5),
    "jaxacct.tracking.epsilon_table": dict(accountant=_Lazy(_event_acc), num_steps=10,
                                           delta=1e-5),
    "jaxacct.tracking.accountant_for": dict(sampling="shuffle", noise_multiplier=1.0,
                                            num_examples=1000, num_epochs=1,
                                            batch_size=100, progress=False),
    "jaxacct.tracking.clip_and_sum": dict(l2_norm_clip=1.0),
    "jaxacct.tracking.gaussian_noise": dict(stddev=1.0, key=0),
    "jaxacct.tracking.dp_aggregate": dict(l2_norm_clip=1.0, noise_multiplier=1.0,
                                          expected_batch_size=8.0, key=0),
    # experimental
    "jaxacct.experimental.row_delta_unsafe": dict(
        eps=0.5, n=100, mechanism="generic", eps0=_E0),
    # dpsgd recipe
    "jaxacct.dpsgd.epsilon": dict(noise_multiplier=1.0, num_examples=1000, batch_size=100,
                                  num_epochs=2, delta=1e-5, progress=False),
    "jaxacct.dpsgd.calibrate_noise_multiplier": dict(
        epsilon=1.0, delta=1e-5, num_examples=1000, batch_size=100, num_epochs=2,
        progress=False),
    "jaxacct.dpsgd.schedule": dict(num_examples=1000, batch_size=100, num_epochs=2),
    "jaxacct.dpsgd.statement": dict(num_examples=1000, batch_size=100, num_epochs=2,
                                    delta=1e-5, noise_multiplier=1.0, progress=False),
    "jaxacct.dpsgd.event": dict(noise_multiplier=1.0, num_examples=1000, batch_size=100,
                                num_epochs=2),
    "jaxacct.calibrate": dict(make_event=_Lazy(lambda: _gaussian_step), target_epsilon=1.0,
                              delta=1e-5, bracket=(0.1, 10.0), progress=False),
    # accounting
    "jaxacct.tracking.EventAccountant": dict(event=_Lazy(_gaussian_event), block_size=2,
                                             max_evaluations=8, evaluate_every=2),
    "jaxacct.accounting.PLDAccountant": dict(),
    "jaxacct.accounting.from_profile": dict(epsilons=np.array([0.0, 0.5, 1.0]),
                                            delta_remove=np.array([0.3, 0.1, 0.01]),
                                            step=0.1),
    # samplers
    "jaxacct.sampling.capacity_for": dict(expected_batch_size=64.0, num_steps=10),
    "jaxacct.sampling.loader": dict(sampling="shuffle", num_examples=100, batch_size=10,
                                    num_epochs=2),
    "jaxacct.sampling.BallsInBinsSampler": dict(num_examples=100, steps_per_epoch=10,
                                                num_epochs=2),
    "jaxacct.sampling.PoissonSampler": dict(num_examples=100, sampling_probability=0.1,
                                            num_steps=10),
    # fixed bins
    "jaxacct.allocation.fixed_bins_pld_epsilon": dict(
        sigma=1.0, delta=1e-5, steps_per_epoch=10, num_epochs=2, grid_size=64),
    "jaxacct.allocation.fixed_bins_pld_delta": dict(
        sigma=1.0, epsilon=1.0, steps_per_epoch=10, num_epochs=2, grid_size=64),
    "jaxacct.experimental.row_epsilon_unsafe": dict(
        delta=1e-6, n=100, mechanism="generic", eps0=_E0),
}

# (function, parameter): not tested with a string number, and why.
NOT_NUMERIC = {
    ("jaxacct.tracking.gaussian_noise", "key"): "a PRNG key or int seed",
    ("jaxacct.tracking.dp_aggregate", "key"): "a PRNG key or int seed",
}


def _public_callables():
  out = {}
  for mod_name in MODULES:
    mod = importlib.import_module(mod_name)
    names = getattr(mod, "__all__", None)
    if names is None:  # no __all__: the public functions defined there
      names = [n for n in dir(mod) if not n.startswith("_")
               and getattr(getattr(mod, n), "__module__", None) == mod_name]
    for name in names:
      obj = getattr(mod, name)
      if inspect.ismodule(obj) or not callable(obj):
        continue
      qual = f"{mod_name}.{name}"
      # one entry per object (re-exports are tested where first listed)
      if any(o is obj for o in out.values()):
        continue
      out[qual] = obj
  return out


PUBLIC = _public_callables()


def test_every_public_callable_is_covered():
  missing = sorted(q for q in PUBLIC if q not in BASE and q not in EXEMPT)
  assert not missing, (
      "public callables without a validation entry (add valid values to BASE "
      "in tests/project/test_api_validation.py, or an exemption with its reason): "
      f"{missing}")
  stale = sorted(q for q in list(BASE) + list(EXEMPT) if q not in PUBLIC)
  assert not stale, f"entries for callables that are not public: {stale}"


def _is_number(v):
  if isinstance(v, (bool, np.bool_)) or v is None:
    return False
  if isinstance(v, (int, float, np.integer, np.floating)):
    return True
  if isinstance(v, (list, tuple, np.ndarray)):
    try:
      arr = np.asarray(v)
    except Exception:  # noqa: BLE001 - ragged
      return False
    return arr.size > 0 and arr.dtype.kind in "iuf"
  return False


def _as_text(v):
  if isinstance(v, (list, tuple, np.ndarray)):
    return np.asarray(v).astype(str)
  return str(v)


def _cases():
  for qual, fn in PUBLIC.items():
    if qual not in BASE:
      continue
    sig = inspect.signature(fn)
    for p in sig.parameters.values():
      if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
        continue
      name = p.name
      if name in CHOICE:
        bads = ["foo", "", 1] + ([None] if p.default is not None else [])
        for b in bads:
          yield pytest.param(qual, name, b, id=f"{qual}:{name}={b!r}")
      elif name in CHOICE_SEQ:
        yield pytest.param(qual, name, ("foo",), id=f"{qual}:{name}=('foo',)")
      elif name in FLAGS:
        yield pytest.param(qual, name, "False", id=f"{qual}:{name}='False'")
      elif (qual, name) not in NOT_NUMERIC:
        base = BASE[qual].get(name, p.default)
        if _is_number(base):
          yield pytest.param(qual, name, _as_text(base),
                             id=f"{qual}:{name}=text")


def _call(qual, override_name, override_value):
  fn = PUBLIC[qual]
  sig = inspect.signature(fn)
  kwargs = {k: (v.make() if isinstance(v, _Lazy) else v)
            for k, v in BASE[qual].items()}
  kwargs[override_name] = override_value
  args = []
  # positional-only parameters (none today) would go in args
  for p in sig.parameters.values():
    if p.kind == p.POSITIONAL_ONLY and p.name in kwargs:
      args.append(kwargs.pop(p.name))
  start = time.perf_counter()
  try:
    return fn(*args, **kwargs)
  finally:
    _call.elapsed = time.perf_counter() - start


@pytest.mark.parametrize("qual,name,bad", list(_cases()))
def test_public_function_rejects_bad_argument(qual, name, bad):
  with pytest.raises(ValueError) as err:
    _call(qual, name, bad)
  assert name in str(err.value), (
      f"{qual}({name}={bad!r}) raised ValueError without naming {name!r}: "
      f"{err.value}")
  # Validation happens at the front door, before any computation (measured:
  # all 780 calls in ~10 s together; the limit is generous for loaded machines).
  assert _call.elapsed < 5.0, (
      f"{qual} took {_call.elapsed:.1f} s to reject {name}={bad!r}: validate "
      "before computing.")


def test_compose_rdp_rejects_string_counts():
  # RDP composition, now internal (``jaxacct._core``): users add curves
  from jaxacct._core.conversion import compose_rdp
  with pytest.raises(ValueError, match="count"):
    compose_rdp((np.array([0.1, 0.2]), "3"))


def test_issue20_poisson_conversion_and_string_numbers():
  # The issue's reproductions: each returned a number before the fix.
  from jaxacct import poisson
  kw = dict(q=0.01, sigma=1.0, num_steps=100, delta=1e-5)
  for bad in ("foo", "", None, 1):
    with pytest.raises(ValueError, match="conversion"):
      poisson.epsilon(**kw, conversion=bad)
  with pytest.raises(ValueError, match="num_steps"):
    poisson.epsilon(**{**kw, "num_steps": "100"})
  with pytest.raises(ValueError, match="delta"):
    poisson.epsilon(**{**kw, "delta": "1e-5"})
