"""jaxacct.dpsgd.statement: the structured DP-SGD privacy statement (issue 31, item 3).

Reference configuration (issue 17, tests/dpsgd/test_dpsgd.py): N = 60,000, B = 256,
E = 10, delta = 1e-5, sigma = 0.7341 (balls_in_bins: t = 234 steps per epoch,
T = 2340). Sources of the numbers:

* the bracket is :func:`jaxacct.dpsgd.epsilon` itself (tight allocation PLD,
  2.357 at sigma 0.7341: tests/dpsgd/test_dpsgd.py, issue 17);
* the Poisson column against dp_accounting 0.6.0's PLDAccountant
  (value_discretization_interval 1e-4), computed live: 2.481879102 at
  q = 256/60000, T = 2340 (jaxacct 2.481879101; absolute tolerance 1e-3);
* the full-batch column against the Gaussian mechanism's exact delta
  (Balle & Wang, arXiv:1805.06530v2, Thm 8) evaluated here with scipy's
  log_ndtr: delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu),
  mu = sqrt(T) / sigma.
"""

import json
import math

import numpy as np
import pytest

from jaxacct import dpsgd
from jaxacct.dpsgd import PrivacyStatement, statement

N, B, E, DELTA, SIGMA = 60_000, 256, 10, 1e-5, 0.7341
CONFIG = dict(num_examples=N, batch_size=B, num_epochs=E, delta=DELTA)


@pytest.fixture(scope="session")
def bib():
  return statement(noise_multiplier=SIGMA, progress=False, **CONFIG)


@pytest.fixture(scope="session")
def shuffled():
  return statement(noise_multiplier=SIGMA, sampling="shuffle", progress=False, **CONFIG)


def _gaussian_log_delta(mu, eps):
  """log delta(eps) of the Gaussian mechanism with mu = sensitivity / sigma (exact)."""
  from scipy.special import log_ndtr
  a = log_ndtr(mu / 2 - eps / mu)
  b = eps + log_ndtr(-mu / 2 - eps / mu)
  return a + math.log1p(-math.exp(b - a))


def test_units_and_bracket(bib):
  assert isinstance(bib, PrivacyStatement)
  assert (bib.sampling, bib.neighbouring, bib.noise_multiplier_source) == (
      "balls_in_bins", "add_remove", "given")
  assert (bib.num_examples, bib.batch_size, bib.num_epochs) == (N, B, E)
  assert bib.steps_per_epoch == 234 and bib.total_steps == 2340    # floor(N/B), t E
  assert bib.sampling_probability == B / N and bib.divisor == B
  ref = dpsgd.epsilon(noise_multiplier=SIGMA, progress=False, **CONFIG)
  assert bib.epsilon_upper == ref.epsilon and bib.epsilon_lower == ref.lower
  assert bib.epsilon_upper == pytest.approx(2.357, abs=2e-3)        # issue 17
  assert bib.epsilon_lower <= bib.epsilon_upper
  assert bib.epsilon_upper - bib.epsilon_lower < 1e-2               # tight bracket


def test_comparison_columns(bib):
  poisson, none = bib.comparison
  assert (poisson.name, poisson.sampling_probability, poisson.total_steps, poisson.bound) == (
      "poisson", B / N, 2340, "upper")
  assert poisson.epsilon == pytest.approx(2.481879, abs=1e-5)   # dp_accounting: 2.481879102
  assert (none.name, none.sampling_probability, none.total_steps, none.bound) == (
      "full_batch", 1.0, 2340, "exact")
  mu = math.sqrt(2340) / SIGMA
  # the exact root of delta(eps) = 1e-5, to 1e-9 relative (upper side)
  assert _gaussian_log_delta(mu, none.epsilon) <= math.log(DELTA) + 1e-9
  assert _gaussian_log_delta(mu, none.epsilon * (1 - 1e-9)) > math.log(DELTA)
  assert none.epsilon == pytest.approx(2451.144, rel=1e-6)
  # ordering at these settings: allocation <= Poisson (same rate, same steps)
  # << full batch (every example in every step)
  assert bib.epsilon_upper < poisson.epsilon < none.epsilon
  assert none.epsilon > 100 * poisson.epsilon


def test_poisson_column_matches_dp_accounting(bib):
  dpa = pytest.importorskip("dp_accounting")
  from dp_accounting.pld import pld_privacy_accountant
  poisson = bib.comparison[0]
  acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
  acc.compose(dpa.PoissonSampledDpEvent(poisson.sampling_probability,
                                        dpa.GaussianDpEvent(SIGMA)), poisson.total_steps)
  assert poisson.epsilon == pytest.approx(acc.get_epsilon(DELTA), abs=1e-3)


def test_to_dict_json_round_trip(bib):
  d = bib.to_dict()
  assert json.loads(json.dumps(d)) == d
  assert d["epsilon"] == {"upper": bib.epsilon_upper, "lower": bib.epsilon_lower,
                          "method": bib.method}
  for key in ("noise_multiplier", "delta", "sampling", "sampling_probability", "steps_per_epoch",
              "total_steps", "num_epochs", "num_examples", "batch_size", "divisor"):
    assert d[key] == getattr(bib, key)
  assert d["sampling_rate"] == d["sampling_probability"]   # the deprecated key (issue 56)
  assert set(d["comparison"]) == {"poisson", "full_batch"}
  assert all(isinstance(a, str) for a in d["assumptions"]) and len(d["assumptions"]) == 4
  for word in ("adding or removing", "non-adaptive", "balls_in_bins", "divisor"):
    assert any(word in a for a in d["assumptions"]), word


def test_immutable(bib):
  with pytest.raises(AttributeError):
    bib.noise_multiplier = 1.0
  with pytest.raises(AttributeError):
    bib.comparison[0].epsilon = 0.0
  assert isinstance(bib.assumptions, tuple) and isinstance(bib.comparison, tuple)


def test_str_has_the_key_numbers(bib):
  s = str(bib)
  assert len(s.splitlines()) > 10
  for x in (f"{bib.epsilon_upper:.6g}", f"{bib.epsilon_lower:.6g}", "0.7341", "2340", "234",
            "60000", "256", "1e-05", f"{bib.comparison[0].epsilon:.6g}",
            f"{bib.comparison[1].epsilon:.6g}", "balls_in_bins", "add_remove"):
    assert x in s, x


def test_shuffle_is_the_gaussian_over_epochs(shuffled, bib):
  # no amplification from shuffling: E Gaussian steps = sigma / sqrt(E)
  mu = math.sqrt(E) / SIGMA
  assert _gaussian_log_delta(mu, shuffled.epsilon_upper) <= math.log(DELTA) + 1e-9
  assert shuffled.epsilon_upper == pytest.approx(26.9575, abs=1e-4)
  assert shuffled.epsilon_lower is None            # 256 does not divide 60000
  assert (shuffled.steps_per_epoch, shuffled.total_steps) == (234, 2340)
  # same rate and steps as balls_in_bins here: the same comparison numbers
  assert shuffled.comparison == bib.comparison
  assert bib.epsilon_upper < shuffled.epsilon_upper < shuffled.comparison[1].epsilon


def test_shuffle_replace_one_doubles_the_sensitivity(shuffled):
  r = statement(noise_multiplier=SIGMA, sampling="shuffle", neighbouring="replace_one",
                progress=False, **CONFIG)
  half = dpsgd.epsilon(noise_multiplier=SIGMA / 2, sampling="shuffle", progress=False,
                       **CONFIG)   # the sum moves by <= 2C: sensitivity 2 = sigma / 2
  assert r.epsilon_upper == half.epsilon > shuffled.epsilon_upper
  assert _gaussian_log_delta(2 * math.sqrt(E) / SIGMA, r.epsilon_upper) <= math.log(DELTA) + 1e-9
  mu = 2 * math.sqrt(2340) / SIGMA
  assert _gaussian_log_delta(mu, r.comparison[1].epsilon) <= math.log(DELTA) + 1e-9
  assert _gaussian_log_delta(mu, r.comparison[1].epsilon * (1 - 1e-9)) > math.log(DELTA)
  assert r.comparison[0].epsilon is None                    # no replace-one Poisson here
  assert json.loads(json.dumps(r.to_dict())) == r.to_dict()
  assert "replacing one example" in r.assumptions[0]


@pytest.mark.parametrize("kw, name", [
    (dict(num_examples=-5), "num_examples"),
    (dict(num_examples=0), "num_examples"),
    (dict(batch_size=60_001), "batch_size"),
    (dict(batch_size=0), "batch_size"),
    (dict(num_epochs=0), "num_epochs"),
    (dict(num_epochs=1.5), "num_epochs"),
    (dict(delta=0.0), "delta"),
    (dict(delta=1.5), "delta"),
    (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(noise_multiplier="1"), "noise_multiplier"),
    (dict(noise_multiplier=None, target_epsilon=0.0), "target_epsilon"),
    (dict(target_epsilon=3.0), "exactly one of noise_multiplier"),     # both
    (dict(noise_multiplier=None), "exactly one of noise_multiplier"),  # neither
    (dict(sampling="fixed"), "sampling"),
    (dict(neighbouring="replace"), "neighbouring"),
    (dict(neighbouring="replace_one"), "neighbouring"),                # balls_in_bins
    (dict(neighbouring="replace_one", sampling="poisson"), "neighbouring"),
])
def test_bad_input_names_the_parameter(kw, name):
  args = dict(CONFIG, noise_multiplier=SIGMA)
  args.update(kw)
  with pytest.raises(ValueError, match=name):
    statement(**args)


def test_supported_neighbouring_table():
  # the table (module docstring) through the door: every sampling takes
  # "add_remove"; only "shuffle" also "replace_one" (the refusals are in
  # test_bad_input_names_the_parameter); any other relation or sampling is refused
  for kw, name in ((dict(sampling="shuffle", neighbouring="add_one"), "neighbouring"),
                   (dict(sampling="uniform"), "sampling")):
    with pytest.raises(ValueError, match=name):
      statement(**dict(CONFIG, noise_multiplier=SIGMA, **kw))
  assert dpsgd.statement is statement


def test_no_nan_is_certified_at_tiny_noise():
  # Issue 55 item 4: at sigma 0.09 the allocation PLD cannot certify (+inf; NaN
  # before 637b124); the run's upper
  # falls back to no amplification (k E = 10 exact Gaussian steps, itself a
  # certified bound: the run is a post-processing of them), never NaN.
  kw = dict(noise_multiplier=0.09, num_examples=60000, batch_size=256, num_epochs=10,
            delta=1e-5, progress=False)
  import jaxacct
  r = dpsgd.epsilon(**kw)
  local = jaxacct.mechanisms.Gaussian(0.09 / math.sqrt(10)).epsilon(1e-5).epsilon
  assert float(r.epsilon) == pytest.approx(float(local), rel=1e-9)
  assert float(r.epsilon) == pytest.approx(766.19332, rel=1e-6)
  assert float(r.lower) <= float(r.epsilon) and np.isfinite(float(r.epsilon))


@pytest.mark.slow
def test_statement_at_tiny_noise_prints_certified_numbers():
  st = statement(noise_multiplier=0.09, num_examples=60000, batch_size=256,
                               num_epochs=10, delta=1e-5, progress=False)
  text = str(st)
  assert "nan" not in text and "upper inf" not in text
  assert st.comparison[0].epsilon == pytest.approx(1631.75, rel=1e-5)   # RDP, finite


@pytest.mark.slow   # 3.5 s
def test_statement_where_the_poisson_pld_refuses_compares_by_rdp():
  # sigma 0.0777 (what calibrating to epsilon 1000 gives) is where the Poisson
  # PLD refuses T = 2340 steps (its window is too large): the comparison row is
  # the RDP upper of the same q, sigma and T, not an error ending the statement.
  from jaxacct import poisson as poisson_door
  sigma = 0.0777344
  st = statement(noise_multiplier=sigma, num_examples=60000, batch_size=256, num_epochs=10,
                 delta=1e-5, progress=False)
  row = st.comparison[0]
  ref = poisson_door.epsilon(q=256 / 60000, sigma=sigma, num_steps=2340, delta=1e-5,
                            method="rdp")
  assert row.epsilon == float(ref.epsilon) and "poisson.rdp" in row.method
  assert "nan" not in str(st) and "upper inf" not in str(st)


# ----------------------------------------------------------------------------
# issue 67 item 7: every statement says only what is true. Small settings, N = 1000,
# B = 10 (q = 0.01): E = 20 at sigma 0.1, where the Poisson PLD refuses T = 2000 steps
# (its window is too large); E = 2 at sigma 0.01, where the allocation lower bound is 0
# (replace_one: no Poisson row, whose refusal at sigma 0.01 takes seconds).
SMALL = dict(num_examples=1000, batch_size=10, num_epochs=20, delta=1e-5, progress=False)
TINY = dict(SMALL, num_epochs=2)


def test_one_rule_decides_every_poisson_row():
  # Poisson was refused as the main row (WindowTooLarge) but printed from RDP as
  # the comparison row of the other samplers: both are now the PLD, else the RDP
  # upper of the same q, sigma and T (valid at any T): one number in both places
  from jaxacct import poisson as poisson_door
  ref = float(poisson_door.epsilon(q=0.01, sigma=0.1, num_steps=2000, delta=1e-5,
                                   method="rdp").epsilon)
  main = statement(noise_multiplier=0.1, sampling="poisson", **SMALL)
  row = statement(noise_multiplier=0.1, sampling="shuffle", **SMALL).comparison[0]
  assert main.total_steps == row.total_steps == 2000
  assert main.epsilon_upper == row.epsilon == ref == pytest.approx(2051.183, rel=1e-6)
  assert main.comparison[0].epsilon == ref and main.epsilon_lower is None
  assert main.method == row.method and "poisson.rdp" in main.method


def test_a_lower_bound_of_zero_is_none():
  # dpsgd.epsilon's lower is 0 here (true and empty: epsilon >= 0 always); the
  # statement says "none", in the text, the JSON and the brief line
  raw = dpsgd.epsilon(noise_multiplier=0.01, sampling="shuffle", **TINY)
  assert float(raw.lower) == 0.0
  st = statement(noise_multiplier=0.01, sampling="shuffle", neighbouring="replace_one",
                 **TINY)
  assert st.epsilon_lower is None and st.to_dict()["epsilon"]["lower"] is None
  assert "lower none known" in str(st) and "lower 0" not in str(st)
  assert "epsilon_lower=none" in st.brief()


def test_each_relation_is_named_as_what_it_is(bib, shuffled):
  # shuffle's add_remove keeps N and every batch: the zero-out relation (under the
  # usual add/remove, where an added example displaces another, B = N = 1000 has a
  # lower bound of 9.99 against the 4.38 reported); named so in the statement, the
  # JSON and the brief line; the option given stays in `neighbouring`
  st = shuffled
  assert (st.neighbouring, st.neighbouring_relation) == ("add_remove", "zero_out")
  d = st.to_dict()
  assert (d["neighbouring"], d["neighbouring_relation"]) == ("add_remove", "zero_out")
  assert "neighbouring relation: zero_out (the add_remove option of sampling shuffle)" \
      in str(st)
  assert st.assumptions[0].startswith("zero_out: ") and "displaces" in st.assumptions[0]
  assert "neighbouring=zero_out" in st.brief()
  # balls_in_bins: the others' batches do not depend on the example
  assert bib.neighbouring_relation == "add_remove" and "neighbouring relation: add_remove\n" \
      in str(bib)
  assert bib.assumptions[0].startswith("add_remove: ") and "zero" not in bib.assumptions[0]
  r = statement(noise_multiplier=SIGMA, sampling="shuffle", neighbouring="replace_one",
                progress=False, **CONFIG)
  assert r.neighbouring_relation == "replace_one" and r.assumptions[0].startswith(
      "replace_one: ")


def test_target_met_at_the_search_floor_is_not_called_smallest():
  # --target-epsilon 1e6 printed sigma 0.01 as the "smallest certified sigma with
  # epsilon <= 1e+06": 0.01 is the calibration's floor (its bracket is [0.01, 1e4]),
  # where epsilon (5301.08 for shuffle here: E = 2 exact Gaussian steps at sigma 0.01,
  # replace_one: sigma = 2 x 0.01 at sensitivity 2) is far below the target
  st = statement(target_epsilon=1e6, sampling="shuffle", neighbouring="replace_one", **TINY)
  assert st.noise_multiplier_source == "search_floor"
  assert st.noise_multiplier == pytest.approx(0.02, rel=1e-12)
  assert st.epsilon_upper == pytest.approx(10602.16, rel=1e-5) and st.epsilon_upper <= 1e6
  text = str(st)
  assert "calibration stopped at its search floor" in text and "smallest certified" not in text
  assert "10602.2, already meets the target" in text
  assert "source=search_floor" in st.brief()
  assert st.to_dict()["noise_multiplier_source"] == "search_floor"


def test_brief_is_one_line(bib):
  line = bib.brief()
  assert "\n" not in line
  assert line == (f"sampling=balls_in_bins sigma=0.7341 source=given "
                  f"epsilon_upper={bib.epsilon_upper:.6g} "
                  f"epsilon_lower={bib.epsilon_lower:.6g} delta=1e-05 neighbouring=add_remove")


def test_the_statement_has_a_place_for_the_truncation_caps(bib):
  # truncated_poisson: its cap b is stated (settings), and the smallest caps within 1%
  # and 10% of untruncated Poisson have their field (None until computed); balls_in_bins
  # has no settings and no caps
  assert bib.settings is None and bib.caps_near_poisson is None
  assert bib.to_dict()["caps_near_poisson"] is None and bib.to_dict()["settings"] is None
  assert "max_batch_size near" not in str(bib)


@pytest.mark.slow   # the truncated event's PLD accountant: ~15 s on 2 busy cores
def test_truncated_poisson_states_its_cap():
  st = statement(noise_multiplier=1.0, sampling="truncated_poisson", max_batch_size=20,
                 **dict(TINY, num_epochs=1))
  assert st.settings == {"max_batch_size": 20}
  assert st.to_dict()["settings"] == {"max_batch_size": 20}
  assert ", max_batch_size = 20" in str(st)
  # the smallest caps within 1% and 10% of untruncated Poisson's certified epsilon, read
  # back against dpsgd.epsilon: each cap meets its gap and the cap below does not
  caps = dict(st.caps_near_poisson)
  cfg = dict(noise_multiplier=1.0, delta=TINY["delta"], num_examples=TINY["num_examples"],
             batch_size=TINY["batch_size"], num_epochs=1)
  poisson = dpsgd.epsilon(sampling="poisson", **cfg).epsilon
  for gap, cap in caps.items():
    assert dpsgd.epsilon(sampling="truncated_poisson", max_batch_size=cap,
                         **cfg).epsilon <= (1 + gap) * poisson
    if cap > 1:
      assert dpsgd.epsilon(sampling="truncated_poisson", max_batch_size=cap - 1,
                           **cfg).epsilon > (1 + gap) * poisson
  assert f"{caps[0.01]} within 1%" in str(st)
