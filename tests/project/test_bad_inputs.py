"""Every public door refuses a bad value of every parameter, naming it (issue 67 item 2).

One table: the public doors and their valid arguments are
``tests/project/test_api_validation.py``'s (``PUBLIC``: every callable a public
``__all__`` lists; ``BASE``: valid arguments), so a new door or parameter joins
this table by itself. Each parameter (but the keywords, flags and choices that
table checks) gets, one at a time, the same bad values: ``True`` and
``np.bool_(True)`` (booleans were read as the number 1), an empty array, a list
where one number goes, NaN, inf, -1, 0 and 1e300. Each call must raise a
``ValueError`` whose message names the parameter, before anything is computed
(in well under a second): no ``IndexError``, ``TypeError``, ``OverflowError``,
``RecursionError``, ... escapes.

* ``VALID``: the values a parameter takes (a list where a door takes arrays, 0
  or -1 for a lower end or a seed, inf or 1e300 with a limit): those calls
  compute, so they run with ``-m slow``, and must return or raise the named
  ``ValueError``;
* no row is expected to fail (the last 276 were fixed in their doors).

The named cases of issue 67 (noise multipliers 1e-6 and 1e300 for every
sampler, fixed_size at delta 1 - 1e-16 and 10^9 epochs) are tests below the table.
"""

import inspect
import math
import time
import warnings

import numpy as np
import pytest

import test_api_validation as api

#: the bad values, made afresh for each call (a door must not see another's list)
BAD = {"True": lambda: True, "np.bool_": lambda: np.bool_(True), "empty": lambda: np.array([]),
       "list": lambda: [2, 3], "nan": lambda: math.nan, "inf": lambda: math.inf,
       "-1": lambda: -1, "0": lambda: 0, "huge": lambda: 1e300}
#: never a valid number, for any parameter
NEVER = ("True", "np.bool_", "empty", "nan")
#: parameters test_api_validation checks (choices, flags) and the progress switch
SKIP = api.CHOICE | api.CHOICE_SEQ | api.FLAGS | {"progress", "devices", "with_lower"}
#: errors that must never escape a door: a bad value is the user's, a ValueError names it
ESCAPES = (IndexError, TypeError, OverflowError, RecursionError, AttributeError,
           ZeroDivisionError, KeyError, MemoryError, FloatingPointError)

#: "door:parameter" -> the bad values it takes as valid (the call computes: -m slow)
VALID = {
    "shuffle.krr_epsilon_closed_form:n": "list",
    "shuffle.krr_epsilon_closed_form:k": "list",
    "accounting.PLDAccountant:component_cache": "list inf -1 0 huge",
    "accounting.PLDAccountant:value_discretization_interval": "huge",
    "accounting.from_profile:delta_add": "0",
    "accounting.from_profile:delta_remove": "0",
    "accounting.from_profile:step": "huge",
    "allocation.allocation_add_rdp:max_order": "list",
    "allocation.allocation_add_rdp:orders": "list",
    "allocation.allocation_add_rdp:sigma": "list huge",
    "allocation.allocation_add_rdp:steps_per_epoch": "list",
    "allocation.allocation_rdp:num_epochs": "list huge",
    "allocation.allocation_rdp:num_selected": "list",
    "allocation.allocation_rdp:sigma": "list huge",
    "allocation.allocation_rdp:steps_per_epoch": "list",
    "allocation.allocation_remove_rdp:sigma": "list huge",
    "allocation.allocation_remove_rdp:steps_per_epoch": "list",
    "allocation.delta:epsilon": "-1 0 huge",
    "allocation.delta:max_order": "list",
    "allocation.delta:sigma": "huge",
    "allocation.delta_lower_bound:epsilon": "list -1 0 huge",
    "allocation.delta_lower_bound:num_epochs": "list huge",
    "allocation.delta_lower_bound:num_selected": "list",
    "allocation.delta_lower_bound:sigma": "list huge",
    "allocation.delta_lower_bound:steps_per_epoch": "list",
    "allocation.delta_lower_bound:thresholds": "list inf -1 0 huge",
    "allocation.delta_monte_carlo:epsilon": "list -1 0 huge",
    "allocation.delta_monte_carlo:seed": "0",
    "allocation.delta_monte_carlo:sigma": "huge",
    "allocation.epsilon:max_order": "list",
    "allocation.epsilon:num_epochs": "huge",
    "allocation.epsilon:sigma": "huge",
    "allocation.fixed_bins_pld_delta:epsilon": "list 0 huge",
    "allocation.fixed_bins_pld_delta:laplace_step": "list huge",
    "allocation.fixed_bins_pld_delta:num_epochs": "huge",
    "allocation.fixed_bins_pld_delta:num_selected": "list",
    "allocation.fixed_bins_pld_delta:sigma": "list huge",
    "allocation.fixed_bins_pld_delta:steps_per_epoch": "list",
    "allocation.fixed_bins_pld_epsilon:laplace_step": "list huge",
    "allocation.fixed_bins_pld_epsilon:num_epochs": "huge",
    "allocation.fixed_bins_pld_epsilon:num_selected": "list",
    "allocation.fixed_bins_pld_epsilon:sigma": "list huge",
    "allocation.fixed_bins_pld_epsilon:steps_per_epoch": "list",
    "allocation.pld.allocation_pld_delta:epsilon": "list 0 huge",
    "allocation.pld.allocation_pld_delta:num_epochs": "list",
    "allocation.pld.allocation_pld_delta:num_selected": "list",
    "allocation.pld.allocation_pld_delta:sigma": "list huge",
    "allocation.pld.allocation_pld_delta:steps_per_epoch": "list",
    "allocation.pld.allocation_pld_epsilon:num_epochs": "list",
    "allocation.pld.allocation_pld_epsilon:num_selected": "list",
    "allocation.pld.allocation_pld_epsilon:sigma": "list huge",
    "allocation.pld.allocation_pld_epsilon:steps_per_epoch": "list",
    "allocation.pld.allocation_pld_laws:sigma": "huge",
    "allocation.pld.allocation_plds:composition_step": "huge",
    "allocation.pld.allocation_plds:sigma": "huge",
    "allocation.pld.event_delta:epsilon": "list 0 huge",
    "allocation.true_allocation_delta_monte_carlo:epsilon": "list 0",
    "allocation.true_allocation_delta_monte_carlo:seed": "0",
    "allocation.true_allocation_epsilon_monte_carlo:seed": "0",
    "calibrate:target_epsilon": "list huge",
    "dpsgd.calibrate_noise_multiplier:epsilon": "list huge",
    "dpsgd.epsilon:noise_multiplier": "list huge",
    "dpsgd.event:noise_multiplier": "huge",
    "experimental.row_delta_unsafe:eps": "list 0 huge",
    "experimental.row_delta_unsafe:n": "list",
    "experimental.row_epsilon_unsafe:n": "list",
    "mechanisms.EpsilonDelta:delta0": "0",
    "mechanisms.EpsilonDelta:eps0": "0 huge",
    "mechanisms.Gaussian:noise_multiplier": "huge",
    "mechanisms.Gaussian:sensitivity": "huge",
    "mechanisms.Laplace:scale": "huge",
    "mechanisms.Laplace:sensitivity": "huge",
    "mechanisms.RandomizedResponse:num_buckets": "huge",
    "mechanisms.laplace_rdp:orders": "list huge",
    "mechanisms.laplace_rdp:scale": "list huge",
    "mechanisms.pure_dp_rdp:eps0": "list 0 huge",
    "mechanisms.pure_dp_rdp:orders": "list huge",
    "mechanisms.rdp_to_delta:epsilon": "list -1 0 huge",
    "pld.delta:epsilon": "list inf -1 0 huge",
    "pld.from_losses:inf_mass": "0",
    "pld.from_losses:offset": "-1 0 huge",
    "pld.from_losses:probs": "list inf -1 0 huge",
    "pld.from_losses:step": "huge",
    "pld.from_pair:p": "list",
    "pld.from_pair:q": "list",
    "pld.from_pair:step": "huge",
    "pld.gaussian:step": "huge",
    "pld.laplace:scale": "huge",
    "pld.laplace:step": "huge",
    "pld.poisson_gaussian:q": "0",
    "pld.poisson_gaussian:step": "huge",
    "pld.poisson_gaussian_composed:q": "0",
    "pld.poisson_gaussian_composed:sigma": "huge",
    "pld.poisson_gaussian_composed:step": "huge",
    "pld.randomized_response:delta0": "0",
    "pld.randomized_response:step": "huge",
    "poisson.delta:epsilon": "list -1 0 huge",
    "poisson.delta:num_steps": "list huge",
    "poisson.delta:orders": "list huge",
    "poisson.delta:q": "0",
    "poisson.delta:sigma": "list huge",
    "poisson.epsilon:num_steps": "list huge",
    "poisson.epsilon:orders": "list huge",
    "poisson.epsilon:q": "0",
    "poisson.epsilon:sigma": "list huge",
    "poisson.poisson_gaussian_rdp:orders": "list huge",
    "poisson.poisson_gaussian_rdp:q": "0",
    "poisson.poisson_gaussian_rdp:sigma": "list huge",
    "sampling.BallsInBinsSampler:seed": "0",
    "sampling.PoissonSampler:seed": "0",
    "shuffle.amplify_epsilon_delta:delta": "0",
    "shuffle.amplify_epsilon_delta:epsilon": "list inf 0 huge",
    "shuffle.binary_rr_delta:eps": "list 0 huge",
    "shuffle.binary_rr_delta:ms": "list",
    "shuffle.binary_rr_epsilon:ms": "list",
    "shuffle.bounds.check_in_first_cut_epsilon:delta0": "0",
    "shuffle.bounds.check_in_first_cut_epsilon:eps0": "0 huge",
    "shuffle.bounds.check_in_first_cut_epsilon:p": "0",
    "shuffle.bounds.check_in_gaussian_rdp:n": "list huge",
    "shuffle.bounds.check_in_gaussian_rdp:orders": "list",
    "shuffle.bounds.check_in_gaussian_rdp:p": "0",
    "shuffle.bounds.check_in_gaussian_rdp:sigma": "list huge",
    "shuffle.bounds.check_in_gaussian_rdp_lower:n": "list huge",
    "shuffle.bounds.check_in_gaussian_rdp_lower:orders": "list",
    "shuffle.bounds.check_in_gaussian_rdp_lower:p": "0",
    "shuffle.bounds.check_in_gaussian_rdp_lower:sigma": "list huge",
    "shuffle.bounds.check_in_ldp_rdp:eps0": "list 0 huge",
    "shuffle.bounds.check_in_ldp_rdp:n": "list huge",
    "shuffle.bounds.check_in_ldp_rdp:orders": "list",
    "shuffle.bounds.check_in_ldp_rdp:p": "0",
    "shuffle.bounds.check_in_secagg_gaussian_rdp:n": "list huge",
    "shuffle.bounds.check_in_secagg_gaussian_rdp:orders": "list",
    "shuffle.bounds.check_in_secagg_gaussian_rdp:p": "0",
    "shuffle.bounds.check_in_secagg_gaussian_rdp:sigma": "list huge",
    "shuffle.bounds.chen_asymptotic_rdp:eps0": "list 0 huge",
    "shuffle.bounds.chen_asymptotic_rdp:n": "list",
    "shuffle.bounds.chen_asymptotic_rdp:orders": "list huge",
    "shuffle.bounds.chen_exact_rdp:eps0": "list 0 huge",
    "shuffle.bounds.chen_exact_rdp:n": "list",
    "shuffle.bounds.chen_exact_rdp:orders": "list huge",
    "shuffle.bounds.chen_gdp_mu:eps0": "list 0 huge",
    "shuffle.bounds.chen_gdp_mu:n": "list",
    "shuffle.bounds.efm19_rdp:eps0": "list 0 huge",
    "shuffle.bounds.efm19_rdp:n": "list",
    "shuffle.bounds.efm19_rdp:orders": "list huge",
    "shuffle.bounds.enumerate_delta:eps": "-1 0",
    "shuffle.bounds.enumerate_delta:x0": "0",
    "shuffle.bounds.enumerate_delta:x1": "0",
    "shuffle.bounds.girgis_cor1_rdp:eps0": "list 0 huge",
    "shuffle.bounds.girgis_cor1_rdp:n": "list",
    "shuffle.bounds.girgis_cor1_rdp:orders": "list",
    "shuffle.bounds.girgis_cor2_rdp:eps0": "list 0 huge",
    "shuffle.bounds.girgis_cor2_rdp:n": "list",
    "shuffle.bounds.girgis_cor2_rdp:orders": "list",
    "shuffle.bounds.girgis_lower_rdp:eps0": "list 0 huge",
    "shuffle.bounds.girgis_lower_rdp:n": "list",
    "shuffle.bounds.girgis_lower_rdp:orders": "list huge",
    "shuffle.bounds.girgis_mixture_rdp:eps0": "list 0 huge",
    "shuffle.bounds.girgis_mixture_rdp:n": "list",
    "shuffle.bounds.girgis_mixture_rdp:orders": "list",
    "shuffle.bounds.girgis_subsampled_rdp:eps0": "list 0 huge",
    "shuffle.bounds.girgis_subsampled_rdp:n": "list",
    "shuffle.bounds.girgis_subsampled_rdp:orders": "list",
    "shuffle.bounds.girgis_subsampled_rdp:sampling_probability": "0",
    "shuffle.bounds.girgis_thm1_rdp:eps0": "list 0 huge",
    "shuffle.bounds.girgis_thm1_rdp:n": "list",
    "shuffle.bounds.girgis_thm1_rdp:orders": "list",
    "shuffle.bounds.girgis_thm2_rdp:eps0": "list 0 huge",
    "shuffle.bounds.girgis_thm2_rdp:n": "list",
    "shuffle.bounds.girgis_thm2_rdp:orders": "list huge",
    "shuffle.bounds.krr_thm41_delta:eps": "list 0 huge",
    "shuffle.bounds.krr_thm41_delta:eps0": "list huge",
    "shuffle.bounds.krr_thm41_delta:k": "list",
    "shuffle.bounds.krr_thm41_delta:n": "list",
    "shuffle.bounds.krr_thm41_epsilon:eps0": "list huge",
    "shuffle.bounds.krr_thm41_epsilon:k": "list",
    "shuffle.bounds.krr_thm41_epsilon:n": "list",
    "shuffle.bounds.pair_pmfs:p": "huge",
    "shuffle.bounds.pair_pmfs:q0": "huge",
    "shuffle.bounds.pair_pmfs:q1": "huge",
    "shuffle.bounds.shuffle_gaussian_rdp_lower:n": "list huge",
    "shuffle.bounds.shuffle_gaussian_rdp_lower:orders": "list",
    "shuffle.bounds.shuffle_gaussian_rdp_lower:sigma": "list huge",
    "shuffle.bounds.variation_ratio_lower_delta:eps": "list 0 huge",
    "shuffle.bounds.variation_ratio_lower_delta:max_n": "list",
    "shuffle.bounds.variation_ratio_lower_delta:n": "list",
    "shuffle.bounds.variation_ratio_lower_delta:p": "huge",
    "shuffle.bounds.variation_ratio_lower_delta:q0": "list",
    "shuffle.bounds.variation_ratio_lower_delta:q1": "list",
    "shuffle.bounds.variation_ratio_lower_epsilon:max_n": "list",
    "shuffle.bounds.variation_ratio_lower_epsilon:n": "list",
    "shuffle.bounds.variation_ratio_lower_epsilon:p": "huge",
    "shuffle.bounds.variation_ratio_lower_epsilon:q0": "list",
    "shuffle.bounds.variation_ratio_lower_epsilon:q1": "list",
    "shuffle.bounds.variation_ratio_pair_delta:eps": "list 0 huge",
    "shuffle.bounds.variation_ratio_pair_delta:n": "list",
    "shuffle.bounds.variation_ratio_pair_delta:p": "huge",
    "shuffle.bounds.variation_ratio_pair_delta:q0": "huge",
    "shuffle.bounds.variation_ratio_pair_delta:q1": "huge",
    "shuffle.bounds.variation_ratio_pair_epsilon:n": "list",
    "shuffle.bounds.variation_ratio_pair_epsilon:p": "huge",
    "shuffle.bounds.variation_ratio_pair_epsilon:q0": "huge",
    "shuffle.bounds.variation_ratio_pair_epsilon:q1": "huge",
    "shuffle.bounds.worst_case_delta:eps": "-1 0",
    "shuffle.check_blanket_condition:eps0": "0 huge",
    "shuffle.check_blanket_condition:rtol": "0",
    "shuffle.check_in_epsilon:eps0": "list 0 huge",
    "shuffle.check_in_epsilon:n": "list huge",
    "shuffle.check_in_epsilon:orders": "list",
    "shuffle.check_in_epsilon:p": "0",
    "shuffle.check_in_epsilon:rounds": "list",
    "shuffle.check_in_gaussian_epsilon:n": "list huge",
    "shuffle.check_in_gaussian_epsilon:num_terms": "list",
    "shuffle.check_in_gaussian_epsilon:orders": "list",
    "shuffle.check_in_gaussian_epsilon:p": "0",
    "shuffle.check_in_gaussian_epsilon:rounds": "list",
    "shuffle.check_in_gaussian_epsilon:sigma": "list huge",
    "shuffle.chen_epsilon:eps0": "list 0 huge",
    "shuffle.chen_epsilon:n": "list",
    "shuffle.chen_epsilon:orders": "list huge",
    "shuffle.chen_epsilon:rounds": "list",
    "shuffle.clone_delta:eps": "list 0 huge",
    "shuffle.clone_delta:eps0": "list huge",
    "shuffle.clone_delta:max_n": "list huge",
    "shuffle.clone_delta:n": "list huge",
    "shuffle.clone_epsilon:eps0": "list huge",
    "shuffle.clone_epsilon:max_n": "list huge",
    "shuffle.clone_epsilon:n": "list huge",
    "shuffle.clone_epsilon_approx_ldp:delta0": "0",
    "shuffle.clone_epsilon_approx_ldp:eps0": "huge",
    "shuffle.clone_epsilon_approx_ldp:n": "huge",
    "shuffle.clone_epsilon_approx_ldp:num_refine": "list 0 huge",
    "shuffle.clone_epsilon_closed_form:eps0": "list huge",
    "shuffle.clone_epsilon_closed_form:n": "list huge",
    "shuffle.clone_rdp:eps0": "huge",
    "shuffle.clone_rdp:orders": "list huge",
    "shuffle.delta:eps0": "huge",
    "shuffle.delta:epsilon": "0 huge",
    "shuffle.delta:rounds": "huge",
    "shuffle.delta:step": "list huge",
    "shuffle.epsilon:eps0": "huge",
    "shuffle.epsilon:rounds": "huge",
    "shuffle.epsilon:step": "list huge",
    "shuffle.girgis_epsilon:eps0": "list 0 huge",
    "shuffle.girgis_epsilon:n": "list",
    "shuffle.girgis_epsilon:orders": "list",
    "shuffle.girgis_epsilon:rounds": "list",
    "shuffle.girgis_epsilon:sampling_probability": "0",
    "shuffle.krr_epsilon_closed_form:eps0": "list huge",
    "shuffle.rr2_lower_delta:eps": "list 0 huge",
    "shuffle.rr2_lower_delta:eps0": "list huge",
    "shuffle.rr2_lower_delta:max_n": "list",
    "shuffle.rr2_lower_delta:n": "list",
    "shuffle.rr2_lower_epsilon:eps0": "list huge",
    "shuffle.rr2_lower_epsilon:max_n": "list",
    "shuffle.rr2_lower_epsilon:n": "list",
    "shuffle.stronger_clone_delta:eps": "list 0 huge",
    "shuffle.stronger_clone_delta:eps0": "list huge",
    "shuffle.stronger_clone_delta:max_n": "list",
    "shuffle.stronger_clone_delta:n": "list",
    "shuffle.stronger_clone_epsilon:eps0": "list huge",
    "shuffle.stronger_clone_epsilon:max_n": "list huge",
    "shuffle.stronger_clone_epsilon:n": "list huge",
    "shuffle.stronger_clone_rdp:eps0": "huge",
    "shuffle.stronger_clone_rdp:orders": "list huge",
    "shuffle.subsampled_delta:eps0": "huge",
    "shuffle.subsampled_delta:epsilon": "0 huge",
    "shuffle.subsampled_delta:n": "huge",
    "tracking.EpsilonTableAccountant:epsilons": "list",
    "tracking.EventAccountant:value_discretization_interval": "huge",
    "tracking.accountant_for:noise_multiplier": "huge",
    "tracking.clip_and_sum:l2_norm_clip": "huge",
    "tracking.dp_aggregate:expected_batch_size": "huge",
    "tracking.dp_aggregate:l2_norm_clip": "huge",
    "tracking.dp_aggregate:noise_multiplier": "0 huge",
    "tracking.gaussian_noise:stddev": "list 0 huge",
    "tracking.track_privacy:max_epsilon": "inf huge",
    "dpsgd.statement:noise_multiplier": "huge",
    "pld.from_losses:losses": "list",
    "pld.gaussian:sigma": "huge",
    "pld.poisson_gaussian:sigma": "huge",
}

# an empty array that is a valid value there (and why)
EMPTY_OK = {"shuffle.bounds.enumerate_delta:others": "no users besides the two compared"}
for _key_ in EMPTY_OK:
  VALID[_key_] = " ".join(dict.fromkeys(VALID.get(_key_, "").split() + ["empty"]))

# the variation-ratio pair's p, beta, q0, q1 are grids: a list too
for _key_ in [f"shuffle.bounds.variation_ratio_pair_{q}:{k}" for q in ("delta", "epsilon")
              for k in ("p", "beta", "q0", "q1")]:
  VALID[_key_] = " ".join(dict.fromkeys(VALID.get(_key_, "").split() + ["list"]))


def _key(qual, name):
  return f"{qual.removeprefix('jaxacct.')}:{name}"


def _params(qual):
  for p in inspect.signature(api.PUBLIC[qual]).parameters.values():
    if (p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in SKIP
        or (qual, p.name) in api.NOT_NUMERIC):
      continue
    yield p.name


def _rows():
  for qual in api.PUBLIC:
    if qual not in api.BASE:
      continue
    for name in _params(qual):
      key = _key(qual, name)
      valid = VALID.get(key, "").split()
      for bad in BAD:
        marks = [pytest.mark.slow] if bad in valid else []
        yield pytest.param(qual, name, bad, marks=marks, id=f"{key}={bad}")


ROWS = list(_rows())


def test_the_table_is_current():
  """Every VALID entry names a door parameter of the table, and no value
  that is never a number is listed as valid."""
  keys = {_key(q, n) for q in api.PUBLIC if q in api.BASE for n in _params(q)}
  assert not set(VALID) - keys, sorted(set(VALID) - keys)
  assert not [k for k, v in VALID.items()
              if set(v.split()) & set(NEVER) - ({"empty"} if k in EMPTY_OK else set())]
  assert len(ROWS) > 2500


@pytest.mark.parametrize("qual,name,bad", ROWS)
def test_bad_value_is_refused_naming_the_parameter(qual, name, bad):
  valid = bad in VALID.get(_key(qual, name), "").split()
  start = time.perf_counter()
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      api._call(qual, name, BAD[bad]())
  except ValueError as err:
    assert name in str(err), f"{qual}({name}={bad}): ValueError not naming {name}: {err}"
    assert valid or time.perf_counter() - start < 5.0, (
        f"{qual}({name}={bad}) took {time.perf_counter() - start:.1f} s to refuse: "
        "validate before computing")
    return
  except ESCAPES as err:
    pytest.fail(f"{qual}({name}={bad}) raised {type(err).__name__}: {err}")
  assert valid, (f"{qual} accepted {name}={bad} (if it is a valid value there, list it in "
                 "VALID)")


# ---------------------------------------------------------------------------
# the named cases of issue 67 (each failed on 4dae8d9)
# ---------------------------------------------------------------------------

SAMPLERS = ("balls_in_bins", "poisson", "shuffle", "fixed_size", "fixed_size_with_replacement",
            "truncated_poisson")
_RUN = dict(num_examples=1000, batch_size=100, num_epochs=2, delta=1e-5, progress=False)
_EXTRA = {"truncated_poisson": dict(max_batch_size=150)}
_ALLOCATION_INT32 = (
    "words (jaxacct/allocation/pld/_regrid.py, regrid_lower/regrid_upper): at sigma 1e-6 "
    "the cell index of a loss computed as int32 wraps (IndexError: index -2147483648); "
    "refuse before the regrid, naming sigma and the smallest sigma the lattice holds (or "
    "return +inf so dpsgd's no-amplification bound answers), and compute indices in int64")
_MECHANISMS_OVERFLOW = (
    "unowned (lead): jaxacct/pld/_mechanisms.py: sigma**2 overflows at sigma 1e300 "
    "(_loss_remove, gaussian): after sigma = float(sigma) in poisson_gaussian, "
    "poisson_gaussian_pair and gaussian add sigma = min(sigma, checks.SIGMA_MAX) (more "
    "noise is a post-processing: a valid upper bound) and write sigma * sigma")
_TRUNCATED_GRID = (
    "unowned: jaxacct/accounting/mixtures.py, truncated_poisson_gaussian: sigma 1e-6 "
    "allocates a 48 PiB grid (through pld/_mechanisms._poisson_grid): call "
    "checks.accountable_sigma(sigma, step, max_points=pld.MAX_WINDOW) first (refuses, "
    "naming the noise multiplier and the smallest one the step holds; clamps 1e300)")
SIGMA_KNOWN = {}   # every sampler answers or names the noise multiplier (fixed this change)


@pytest.mark.parametrize("sigma", [1e-300, 1e-6, 1e300])
@pytest.mark.parametrize("sampling", SAMPLERS)
def test_extreme_noise_multiplier_answers_or_names_it(request, sampling, sigma):
  """Issue 67: sigma 1e-6 gave an int32 IndexError (balls_in_bins, shuffle) or asked
  for 192 PiB (fixed_size) / 48 PiB (truncated_poisson); sigma 1e300 a bare
  OverflowError. Now a valid epsilon (not NaN; 0 to float64 precision at 1e300) or a
  ValueError naming noise_multiplier, before anything large is allocated. At sigma
  1e-300 its square underflows: refused naming noise_multiplier."""
  from jaxacct import dpsgd
  if (sampling, sigma) in SIGMA_KNOWN:
    request.applymarker(pytest.mark.xfail(strict=True, reason=SIGMA_KNOWN[sampling, sigma]))
  try:
    res = dpsgd.epsilon(noise_multiplier=sigma, sampling=sampling, **_RUN,
                        **_EXTRA.get(sampling, {}))
  except ValueError as err:
    assert "noise_multiplier" in str(err), err
    return
  eps = float(np.asarray(res.epsilon))
  assert eps >= 0.0, eps   # NaN fails too
  if sigma > 1.0:
    assert eps < 1e-6, eps


_QUERY_FRAC_ONE = (
    "unowned (lead): jaxacct/pld/_query.py, _epsilon_core: where the PLD's mass is below "
    "the target (frac clipped to 1 at k = 0), log1p(-1) = -inf and the rounding allowance "
    "adds +inf: NaN. Fix: eps = loss_k + log1p(-frac); eps = where(isfinite(eps), eps, "
    "where(k == 0, 0.0, loss_k)) before the allowance (and the same in epsilon_on_atoms, "
    "where math.log1p(-1.0) raises)")


def test_epsilon_at_delta_near_one_is_not_nan():
  """Issue 67: dpsgd.epsilon(sampling="fixed_size", delta=1-1e-16) was NaN (every other
  sampler 0). The cause is the PLD query: a PLD whose mass is below delta (the
  composed fixed-size PLD has its tail cut) has epsilon 0 there, not NaN. Here a
  PLD of total mass 0.99 (from_losses keeps what it is given), at delta 0.995 and
  1 - 1e-16: delta(0) <= 0.99 < delta, so epsilon is 0."""
  from jaxacct import pld
  p = pld.from_losses(losses=np.array([1.0, -1.0]), probs=np.array([0.5, 0.49]), step=0.1,
                      offset=-10, size=32)
  assert float(pld.epsilon(p, 0.5)) == 0.0
  for d in (0.995, 1 - 1e-16):
    assert float(pld.epsilon(p, d)) == 0.0, d


_RESTATE_NONE = (
    "lead: jaxacct/dpsgd/_recipe.py, _restate: the WindowTooLarge branch formats "
    "sched.sampling_probability with :.6g, None for fixed_size (TypeError inside the "
    "error message). Fix: when sched.sampling_probability is None, restate as "
    "f\"{what}{_given(sched)} give T = {sched.total_steps} steps: too many for the PLD "
    "accountant at this noise_multiplier ({err}) Use fewer epochs or a larger "
    "noise_multiplier.\"")


def test_fixed_size_at_a_billion_epochs_names_num_epochs():
  """Issue 67: fixed_size at num_epochs=10**9 failed inside its own error message
  (TypeError: unsupported format string passed to NoneType.__format__)."""
  from jaxacct import dpsgd
  with pytest.raises(ValueError, match="num_epochs=1000000000"):
    dpsgd.epsilon(noise_multiplier=1.0, sampling="fixed_size",
                  **{**_RUN, "num_epochs": 10**9})


def test_shuffle_local_epsilon_beyond_700_is_refused_not_nan():
  """eps0 710 gave epsilon NaN (e^eps0 overflows float64); eps0 is accounted in
  (0, 700], where the answer is finite (eps0 700 gives 700: no amplification)."""
  from jaxacct import shuffle
  assert float(shuffle.epsilon(n=100, eps0=700.0, delta=1e-6).epsilon) == pytest.approx(700.0)
  for eps0 in (710.0, 1e300):
    with pytest.raises(ValueError, match=r"eps0 must be in \(0, 700\]"):
      shuffle.epsilon(n=100, eps0=eps0, delta=1e-6)


def test_checks_refuse_booleans_empty_arrays_and_counts_past_int64():
  """The central checks every door calls (jaxacct._core.checks): a boolean is not
  the number 1 (np.bool_ was accepted everywhere), an empty array is not a value,
  a count past 2^63 has no machine integer, and scalar=True refuses a list."""
  from jaxacct._core import checks
  for bad, why in [(True, "not a boolean"), (np.bool_(True), "not a boolean"),
                   (np.array([True, False]), "not a boolean"), ([1.0, False], "not a boolean"),
                   (np.array([]), "must not be empty"), ([], "must not be empty")]:
    for check in (checks.check_positive, checks.check_finite, checks.check_int,
                  checks.check_probability):
      with pytest.raises(ValueError, match=f"sigma .*{why}"):
        check("sigma", bad)
  checks.check_int("num_steps", 2**62)
  for big in (2**63, 1e300):
    with pytest.raises(ValueError, match=r"num_steps must be an integer in \[1, "):
      checks.check_int("num_steps", big)
  checks.check_int("num_steps", [1, 2])
  with pytest.raises(ValueError, match="num_steps must be a single number, not a list"):
    checks.check_int("num_steps", [1, 2], scalar=True)
  assert checks.accountable_sigma(1e300, 1e-4, max_points=2**25) == checks.SIGMA_MAX
  with pytest.raises(ValueError, match=r"noise_multiplier \(sigma\) 1e-06 is too small .* "
                                       r"noise multipliers >= 0\.0137 are accounted"):
    checks.accountable_sigma(1e-6, 1e-4, max_points=2**25)


def test_tracking_noise_multiplier_whose_square_underflows_is_named():
  """The hook's accountant refuses sigma 1e-300 naming noise_multiplier, as dpsgd does
  (its square underflows: no sampler accounts it)."""
  from jaxacct import tracking
  for sampling in ("balls_in_bins", "poisson"):
    with pytest.raises(ValueError, match="noise_multiplier must be at least 1e-150"):
      tracking.accountant_for(sampling, noise_multiplier=1e-300, num_examples=1000,
                              batch_size=100, num_epochs=2, progress=False)


def test_doors_sigma_whose_square_underflows_is_named():
  """Sigma 1e-300 at the Poisson and allocation doors is refused naming sigma (no
  NaN, no NumPy error); every door checks sigma with jaxacct._core.checks.check_sigma.
  1e-150, the smallest accounted, still answers (an upper past 1e300)."""
  from jaxacct import allocation, poisson
  from jaxacct.allocation import pld as apld
  for door in (lambda s: poisson.epsilon(q=0.01, sigma=s, num_steps=10, delta=1e-5),
               lambda s: allocation.epsilon(sigma=s, steps_per_epoch=10, delta=1e-5),
               lambda s: apld.allocation_pld_epsilon(sigma=np.array([s, 1.0]),
                                                     steps_per_epoch=10, delta=1e-5)):
    with pytest.raises(ValueError, match="sigma must be at least 1e-150"):
      door(1e-300)
  assert float(poisson.epsilon(q=0.01, sigma=1e-150, num_steps=10, delta=1e-5).epsilon) > 1e300


def test_a_noise_multiplier_at_the_floor_answers_when_its_composition_is_below_it():
  """Shuffling at noise_multiplier 2e-150 over 10 epochs is one Gaussian at sigma
  2e-150 / sqrt(10), below the 1e-150 floor of a user's sigma: the composed
  Gaussian's closed form (Balle & Wang, checked against mpmath in
  tests/mechanisms/test_mechanisms.py) still answers, the floor applies only to what
  the user passed. Reference: z / sigma' + 1 / (2 sigma'^2) with sigma' = 2e-150 /
  sqrt(10), about 1.25e300."""
  from jaxacct import dpsgd
  r = dpsgd.epsilon(noise_multiplier=2e-150, sampling="shuffle", **dict(_RUN, num_epochs=10))
  s = 2e-150 / np.sqrt(10)
  assert 0.5 / s**2 <= float(r.epsilon) <= 0.5 / s**2 * (1 + 1e-9), r.epsilon
