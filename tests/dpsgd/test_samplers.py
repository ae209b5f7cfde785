"""The sampler registry (jaxacct.dpsgd.samplers): a sampler is one record.

* A stand-in sampler, defined and registered in a temporary module with the
  public API only, goes through ``dpsgd.epsilon``, ``calibrate_noise_multiplier``,
  ``statement`` and ``jaxacct dpsgd`` (and, behind ``slow``, ``risk`` and
  ``plot``) without another file changing. Its run is E Gaussian steps, the run of ``sampling="shuffle"``, so its
  numbers are held to shuffle's (same event: same doors).
* For every registered sampler, ``dpsgd.epsilon`` and the accountant of the
  run's event (``dpsgd.event``) give one number (1e-12); the samplers that
  evaluate by their own doors are checked at the contract test's run
  (N = 1000, B = 10, E = 2, sigma = 1), the accountant-evaluated ones
  (fixed_size, fixed_size_with_replacement, truncated_poisson: their PLDs
  compile for tens of seconds) behind ``slow``.
"""

import importlib.util
import json
import textwrap

import numpy as np
import pytest

from jaxacct import accounting, dpsgd, plot, poisson, risk
from jaxacct.__main__ import main
from jaxacct.accounting import events as ev
from jaxacct.dpsgd import samplers

N, B, EPOCHS, SIGMA, DELTA = 1000, 10, 2, 1.0, 1e-5

STANDIN = textwrap.dedent('''
    from jaxacct import dpsgd
    from jaxacct.accounting import events as ev
    from jaxacct.dpsgd import samplers

    def schedule(req):
      if req.total_steps is not None:
        raise ValueError("total_steps: give num_epochs")
      n, t = req.num_examples, req.num_examples // int(req.batch_size)
      E = int(req.num_epochs)
      return dpsgd.Schedule("standin", n, float(req.batch_size), float(E), 1, t, t * E, None)

    def event(sched, sigma):
      return ev.SelfComposedDpEvent(ev.GaussianDpEvent(sigma), int(sched.num_epochs))

    SAMPLER = samplers.register(samplers.Sampler(
        name="standin", label="stand-in (one Gaussian step per epoch)",
        text="sampler standin: a stand-in, each example in one step per epoch",
        schedule=schedule, event=event, no_amplification=lambda s: int(s.num_epochs),
        relations=("add_remove", "replace_one")))
''')


@pytest.fixture
def standin(tmp_path):
  path = tmp_path / "standin_sampler.py"
  path.write_text(STANDIN)
  spec = importlib.util.spec_from_file_location("standin_sampler", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)   # registers "standin"
  try:
    yield module.SAMPLER
  finally:
    samplers.unregister("standin")


def _cfg(sampling):
  return dict(num_examples=N, batch_size=B, num_epochs=EPOCHS, sampling=sampling)


def test_a_standin_sampler_goes_through_every_door(standin, capsys):
  assert "standin" in samplers.names()
  # dpsgd.epsilon: the accountant of E Gaussian steps = shuffle's exact Gaussian
  got = dpsgd.epsilon(noise_multiplier=SIGMA, delta=DELTA, **_cfg("standin"))
  ref = dpsgd.epsilon(noise_multiplier=SIGMA, delta=DELTA, **_cfg("shuffle"))
  assert got.epsilon == pytest.approx(ref.epsilon, rel=1e-12)
  assert got.details["schedule"].sampling == "standin"
  # the calibrator: the same event family, the same sigma
  s_got = dpsgd.calibrate_noise_multiplier(epsilon=2.0, delta=DELTA, **_cfg("standin"))
  s_ref = dpsgd.calibrate_noise_multiplier(epsilon=2.0, delta=DELTA, **_cfg("shuffle"))
  assert s_got == pytest.approx(s_ref, rel=1e-12)
  # the statement: its own text, the same numbers, both relations
  st = dpsgd.statement(noise_multiplier=SIGMA, delta=DELTA, **_cfg("standin"))
  st_ref = dpsgd.statement(noise_multiplier=SIGMA, delta=DELTA, **_cfg("shuffle"))
  assert standin.text in st.assumptions
  assert st.epsilon_upper == pytest.approx(st_ref.epsilon_upper, rel=1e-12)
  st2 = dpsgd.statement(noise_multiplier=SIGMA, delta=DELTA, neighbouring="replace_one",
                        **_cfg("standin"))
  assert st2.epsilon_upper > st.epsilon_upper
  # the command line: the registered name is a --sampling choice
  assert main(["dpsgd", "--num-examples", str(N), "--batch-size", str(B), "--num-epochs",
               str(EPOCHS), "--delta", str(DELTA), "--noise-multiplier", str(SIGMA),
               "--sampling", "standin", "--json", "--quiet"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["epsilon"]["upper"] == pytest.approx(st.epsilon_upper, rel=1e-12)


@pytest.mark.slow
def test_a_standin_sampler_through_risk_and_plot(standin):
  """(slow: the accountant's composed PLDs compile, ~6 s; the risk search ~12 s)"""
  # risk: the accountant's composed PLDs, capped by the exact mu-GDP of E steps
  # (shuffle's upper); the lower from the accountant's optimistic PLDs
  adv = risk.advantage(noise_multiplier=SIGMA, **_cfg("standin"))
  adv_ref = risk.advantage(noise_multiplier=SIGMA, with_lower=False, **_cfg("shuffle"))
  assert adv.upper == pytest.approx(adv_ref.upper, rel=1e-9)
  assert 0.99 * adv.upper <= adv.lower <= adv.upper
  tr = risk.tpr_at_fpr([1e-3, 0.1], noise_multiplier=SIGMA, **_cfg("standin"))
  tr_ref = risk.tpr_at_fpr([1e-3, 0.1], noise_multiplier=SIGMA, with_lower=False,
                          **_cfg("shuffle"))
  np.testing.assert_allclose(tr.upper, tr_ref.upper, rtol=1e-9)
  s_risk = risk.calibrate_noise_multiplier(advantage=0.3, **_cfg("standin"))
  s_risk_ref = risk.calibrate_noise_multiplier(advantage=0.3, **_cfg("shuffle"))
  assert s_risk == pytest.approx(s_risk_ref, rel=2e-3)
  # plot: its label in the legend
  pytest.importorskip("matplotlib")
  import matplotlib
  matplotlib.use("Agg")
  ax = plot.epsilon([1.0, 2.0], num_examples=N, batch_size=B, num_epochs=EPOCHS, delta=DELTA,
                    samplings=["standin"])
  assert standin.label in [t.get_text() for t in ax.get_legend().get_texts()]


def test_registry_refuses_a_second_name_and_names_the_sampling(standin):
  with pytest.raises(ValueError, match="already registered"):
    samplers.register(standin)
  with pytest.raises(ValueError, match="sampling"):
    dpsgd.epsilon(noise_multiplier=SIGMA, delta=DELTA, **_cfg("no_such_sampler"))


@pytest.mark.parametrize("sampling", ["balls_in_bins", "poisson", "shuffle"])
def test_one_number_for_one_run(sampling):
  """``dpsgd.epsilon`` = the accountant of ``dpsgd.event`` (the run's one event)."""
  run = dpsgd.event(noise_multiplier=SIGMA, **_cfg(sampling))
  got = float(dpsgd.epsilon(noise_multiplier=SIGMA, delta=DELTA, **_cfg(sampling)).epsilon)
  ref = accounting.PLDAccountant().compose(run).get_epsilon(DELTA)
  assert got == pytest.approx(ref, rel=1e-12)


# the accountant-evaluated samplers, at small runs (each PLD compiles for 10-60 s)
NEW = [("fixed_size", {}, "REPLACE_ONE",
        lambda s: ev.SampledWithoutReplacementDpEvent(20, 5, ev.GaussianDpEvent(s))),
       ("fixed_size_with_replacement", {}, "REPLACE_ONE",
        lambda s: ev.SampledWithReplacementDpEvent(20, 5, ev.GaussianDpEvent(s))),
       ("truncated_poisson", {"max_batch_size": 6}, "ADD_OR_REMOVE_ONE",
        lambda s: ev.TruncatedSubsampledGaussianDpEvent(
            dataset_size=20, sampling_probability=0.25, truncated_batch_size=6,
            noise_multiplier=s)),
       # 4 steps, b = 2 groups: ceil(4 / 2) = 2 steps at rate 2 B / N = 0.5 (written below)
       ("cyclic_poisson", {"cycle_length": 2}, "ADD_OR_REMOVE_ONE", None)]


@pytest.mark.slow
@pytest.mark.parametrize("sampling,extra,relation,step", NEW, ids=[n[0] for n in NEW])
def test_new_samplers_equal_the_accountant(sampling, extra, relation, step, capsys):
  """``jaxacct dpsgd --sampling X`` (the statement), ``dpsgd.epsilon`` and the
  accountant of the events written out here by hand (N = 20, B = 5, E = 1: 4
  steps) give one number (1e-12)."""
  sigma, cfg = 2.0, dict(num_examples=20, batch_size=5, num_epochs=1, sampling=sampling)
  acc = accounting.PLDAccountant(accounting.NeighboringRelation[relation])
  if step is None:   # cyclic Poisson: 2 Poisson steps at rate 0.5
    ref = acc.compose(ev.PoissonSampledDpEvent(0.5, ev.GaussianDpEvent(sigma)),
                      2).get_epsilon_bounds(DELTA)
  else:
    ref = acc.compose(step(sigma), 4).get_epsilon_bounds(DELTA)
  got = dpsgd.epsilon(noise_multiplier=sigma, delta=DELTA, **cfg, **extra)
  assert got.epsilon == pytest.approx(ref.epsilon, rel=1e-12)
  assert got.lower == pytest.approx(ref.lower, rel=1e-12)
  argv = ["dpsgd", "--num-examples", "20", "--batch-size", "5", "--num-epochs", "1",
          "--delta", str(DELTA), "--noise-multiplier", str(sigma), "--sampling", sampling,
          "--json", "--quiet"]
  for key, value in extra.items():   # the flags built from the sampler's settings
    argv += ["--" + key.replace("_", "-"), str(value)]
  assert main(argv) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["epsilon"]["upper"] == pytest.approx(ref.epsilon, rel=1e-12)
  assert out["epsilon"]["lower"] == pytest.approx(ref.lower, rel=1e-12)
  assert out["neighbouring"] == ("replace_one" if relation == "REPLACE_ONE" else "add_remove")
  assert any(a.startswith(f"sampler {sampling}: ") for a in out["assumptions"])


def test_truncated_lower_is_the_larger_of_the_bracket_and_the_instance():
  """dpsgd's truncated lower: the larger of the bracket's lower and the exact
  instance's (each computed alone here, ==), below the upper."""
  from jaxacct.accounting import evaluator, truncated_lower
  run = dict(num_examples=200, batch_size=10, num_epochs=2, sampling="truncated_poisson",
             max_batch_size=12)
  r = dpsgd.epsilon(noise_multiplier=2.0, delta=1e-5, progress=False, **run)
  sched = dpsgd.schedule(**run)
  b = evaluator.bracket([dpsgd.event(noise_multiplier=2.0, **run)], [1e-5])
  own = truncated_lower.truncated_poisson_lower(200, sched.sampling_probability, 12, 2.0,
                                                sched.total_steps, 1e-5)
  assert r.epsilon == float(b.upper[0])
  assert r.lower == min(max(float(b.lower[0]), own), float(b.upper[0]))
  assert "exact instance" in r.details["lower_source"] and own > float(b.lower[0])


def test_every_registered_sampler_is_held_to_the_accountant():
  """A sampler registered in jaxacct joins one of the one-number tests here."""
  assert set(samplers.names()) == {"balls_in_bins", "poisson", "shuffle"} | {
      n[0] for n in NEW}


def test_truncated_poisson_needs_its_cap():
  """The cap is named when missing, refused by the other samplers, and checked."""
  cfg = dict(noise_multiplier=SIGMA, delta=DELTA, num_examples=N, batch_size=B,
             num_epochs=EPOCHS)
  with pytest.raises(ValueError, match="max_batch_size is required"):
    dpsgd.epsilon(sampling="truncated_poisson", **cfg)
  with pytest.raises(ValueError, match="max_batch_size applies to"):
    dpsgd.epsilon(sampling="poisson", max_batch_size=20, **cfg)
  with pytest.raises(ValueError, match="max_batch_size"):
    dpsgd.epsilon(sampling="truncated_poisson", max_batch_size=0, **cfg)
  sched = dpsgd.schedule(num_examples=N, batch_size=B, num_epochs=EPOCHS,
                         sampling="truncated_poisson", max_batch_size=20)
  assert (sched.total_steps, sched.sampling_probability, sched.settings.max_batch_size) == (
      200, 0.01, 20)


def test_a_run_too_long_for_the_pld_names_a_valid_rdp_bound():
  """A truncated run the PLD refuses names Poisson RDP at half the noise (which
  dominates it: docs/bounds/truncated_poisson.md), a cyclic one its own event's rate
  and steps, not the user's B/N and T as if the run were plain Poisson."""
  run = dict(noise_multiplier=0.5, delta=DELTA, num_examples=1000, batch_size=10,
             total_steps=10**8)
  with pytest.raises(ValueError, match=r"q=0\.01, sigma=noise_multiplier / 2, "
                                       r"num_steps=100000000, delta=\.\.\.\)"):
    dpsgd.epsilon(sampling="truncated_poisson", max_batch_size=15, **run)
  with pytest.raises(ValueError, match=r"q=0\.04, sigma=noise_multiplier, "
                                       r"num_steps=25000000, delta"):
    dpsgd.epsilon(sampling="cyclic_poisson", cycle_length=4, **run)
  with pytest.raises(ValueError, match="one step's privacy loss spans") as err:
    dpsgd.epsilon(sampling="truncated_poisson", max_batch_size=15,
                  **dict(run, noise_multiplier=0.02, total_steps=10))
  assert "count:" not in str(err.value)     # one step's refusal, not restated as a count


@pytest.mark.parametrize("sigma, steps", [(1.0, 2344), (0.7, 500)])
def test_half_noise_poisson_dominates_the_truncated_run(sigma, steps):
  """The domination the refusal above names, checked: T Poisson steps at q and
  sigma / 2 (RDP and the tight PLD, both upper) lie above the truncated run's upper
  (README run, cap 300: 3.05 below 11.08, 6.66 below 22.17)."""
  q = 256 / 60000
  acc = accounting.PLDAccountant().compose(ev.SelfComposedDpEvent(
      ev.TruncatedSubsampledGaussianDpEvent(dataset_size=60000, sampling_probability=q,
                                            truncated_batch_size=300,
                                            noise_multiplier=sigma), steps))
  half = poisson.epsilon(q=q, sigma=sigma / 2, num_steps=steps, delta=1e-5, method="pld")
  rdp = poisson.epsilon(q=q, sigma=sigma / 2, num_steps=steps, delta=1e-5, method="rdp")
  assert acc.get_epsilon(1e-5) < min(float(half.epsilon), float(rdp.epsilon))
