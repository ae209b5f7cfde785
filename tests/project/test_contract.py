"""Contract suite run over every scheme's epsilon front door.

Each row is ``fn(noise, steps, delta) -> EpsilonResult`` where ``noise`` is
the privacy knob that makes the bound smaller as it grows (sigma, or -eps0 for
the shuffle model) and ``steps`` the count that makes it larger. For each row:

* the result is an ``EpsilonResult`` with a bound from the closed vocabulary,
  epsilon finite and >= 0, ``lower <= epsilon`` where a lower end is given;
* epsilon is monotone: non-increasing in noise, non-decreasing in steps,
  non-increasing in delta (with a relative slack for grid-based methods);
* the user's float32 config is untouched and the answer is float64;
* delta doors: the same checks, and delta(epsilon(delta0)) <= delta0;
* traced input: the traceable door equals eager under jit and vmap and maps
  invalid traced input to NaN; host-only doors raise under jit;
* no retrace: a second call with *new values* of the same shapes compiles
  nothing (XLA backend compilations counted by ``jax.monitoring``).
"""

import ast
import json
import pathlib

import jax
import numpy as np
import pytest

from jaxacct import accounting, allocation, calibrator, dpsgd, poisson, sampling, shuffle
from jaxacct import risk, tracking
from jaxacct import DeltaResult, EpsilonResult
from jaxacct.__main__ import main
from jaxacct._core.results import BOUNDS
from jaxacct.accounting import events as ev
from jaxacct.allocation import pld as apld


# Each scheme's two doors: (epsilon door, delta door, fixed keywords, name of
# the steps keyword, whether the noise knob is -eps0). A row's fn(noise,
# steps, value) passes value as delta (epsilon door) or epsilon (delta door).
DOORS = {
    "poisson_rdp": (poisson.epsilon, poisson.delta, dict(q=0.01), "num_steps", False),
    "poisson_pld": (poisson.epsilon, poisson.delta, dict(q=0.01, method="pld"),
                    "num_steps", False),
    "allocation_pld": (apld.allocation_pld_epsilon, apld.allocation_pld_delta,
                       dict(grid_size=256), "steps_per_epoch", False),
    "allocation_pld_epochs": (apld.allocation_pld_epsilon, apld.allocation_pld_delta,
                              dict(grid_size=256, num_epochs=3), "steps_per_epoch", False),
    "allocation_rdp": (allocation.epsilon, allocation.delta,
                       dict(methods=("rdp_direct", "rdp_add")), "steps_per_epoch", False),
    "shuffle": (shuffle.epsilon, shuffle.delta, {}, "n", True),
}


def _door(name, quantity):
  eps_door, delta_door, fixed, steps_key, neg_eps0 = DOORS[name]

  def call(noise, steps, value):
    knob = {"eps0": -noise} if neg_eps0 else {"sigma": noise}
    if quantity == "epsilon":
      return eps_door(**knob, **{steps_key: steps}, delta=value, **fixed)
    return delta_door(**knob, **{steps_key: steps}, epsilon=value, **fixed)

  call.__name__ = f"{name}_{quantity}"
  return call


# name, fn, noise values (increasing), step values (increasing), deltas
# (increasing), sign of d eps / d steps (+1: total steps compose; -1: steps per
# epoch or users amplify).
ROWS = [
    ("poisson_rdp", _door("poisson_rdp", "epsilon"),
     (0.8, 1.0, 1.3), (100, 1000), (1e-7, 1e-5), +1),
    ("poisson_pld", _door("poisson_pld", "epsilon"),
     (0.8, 1.0, 1.3), (100, 1000), (1e-7, 1e-5), +1),
    ("allocation_pld", _door("allocation_pld", "epsilon"),
     (0.8, 1.0, 1.3), (100, 1000), (1e-7, 1e-5), -1),
    ("allocation_pld_epochs", _door("allocation_pld_epochs", "epsilon"),
     (0.8, 1.0, 1.3), (100, 1000), (1e-7, 1e-5), -1),
    ("allocation_rdp", _door("allocation_rdp", "epsilon"),
     (0.8, 1.0, 1.3), (100, 1000), (1e-7, 1e-5), -1),
    ("shuffle", _door("shuffle", "epsilon"),
     (-2.0, -1.5, -1.0), (1000, 10000), (1e-7, 1e-5), -1),
]

# Front doors whose array shapes depend on the values (eager grid sizing,
# bucketed to lengths 2^a or 3 * 2^(a-2)): the no-retrace check uses a new
# noise value in the same bucket. The Poisson PLD's loss range scales with
# 1/sigma^2, so sigma = 1.0 -> 1.3 moves to another bucket (measured: 1.02
# compiles nothing; 1.05 and 1.3 compile the truncation/composition again).
SAME_BUCKET_NOISE = {"poisson_pld": 1.02}

_SLACK = 1e-9   # relative slack for monotonicity of grid-based bounds


def _eps(r):
  assert isinstance(r, EpsilonResult), type(r)
  assert r.bound in BOUNDS
  e = float(np.asarray(r.epsilon))
  assert np.isfinite(e) and e >= 0.0
  if r.lower is not None:
    lo = float(np.asarray(r.lower))
    assert lo <= e * (1 + 1e-12) + 1e-15, (lo, e)
  return e


@pytest.mark.parametrize("name,fn,noises,steps,deltas,sign", ROWS, ids=[r[0] for r in ROWS])
def test_contract(name, fn, noises, steps, deltas, sign, compile_counter):
  assert not jax.config.jax_enable_x64
  base = fn(noises[1], steps[0], deltas[0])
  e0 = _eps(base)
  assert np.asarray(base.epsilon).dtype == np.float64
  assert not jax.config.jax_enable_x64, "the user's float32 config was changed"
  # no retrace for a new value of the same shape
  with compile_counter as c:
    r = fn(SAME_BUCKET_NOISE.get(name, noises[2]), steps[0], deltas[0])
  if name in SAME_BUCKET_NOISE:
    assert _eps(r) < e0   # a different value was computed, not a cached one
    r = fn(noises[2], steps[0], deltas[0])
  e_hi_noise = _eps(r)
  assert c.count == 0, f"{name}: {c.count} compilations for a new noise value"
  # monotone in noise, steps and delta
  e_lo_noise = _eps(fn(noises[0], steps[0], deltas[0]))
  assert e_lo_noise >= e0 * (1 - _SLACK) and e0 >= e_hi_noise * (1 - _SLACK)
  e_more_steps = _eps(fn(noises[1], steps[1], deltas[0]))
  if sign > 0:
    assert e_more_steps >= e0 * (1 - _SLACK)
  else:
    assert e_more_steps <= e0 * (1 + _SLACK)
  e_more_delta = _eps(fn(noises[1], steps[0], deltas[1]))
  assert e_more_delta <= e0 * (1 + _SLACK)


# ------------------------------------------------------------- delta doors --

# name, fn(noise, steps, epsilon), noises (increasing), steps, epsilons
# (increasing), sign of d delta / d steps.
DELTA_ROWS = [
    ("poisson_rdp", _door("poisson_rdp", "delta"),
     (0.8, 1.0, 1.3), (100, 1000), (1.0, 2.0), +1),
    ("poisson_pld", _door("poisson_pld", "delta"),
     (0.8, 1.0, 1.02), (100, 1000), (1.0, 2.0), +1),
    ("allocation_pld", _door("allocation_pld", "delta"),
     (0.8, 1.0, 1.3), (100, 1000), (0.3, 0.6), -1),
    ("allocation_rdp", _door("allocation_rdp", "delta"),
     (0.8, 1.0, 1.3), (100, 1000), (0.3, 0.6), -1),
    ("shuffle", _door("shuffle", "delta"),
     (-2.0, -1.5, -1.0), (1000, 10000), (0.3, 0.6), -1),
]


def _dlt(r):
  assert isinstance(r, DeltaResult), type(r)
  assert r.bound in BOUNDS
  d = float(np.asarray(r.delta))
  assert 0.0 <= d <= 1.0, d
  if r.lower is not None:
    assert float(np.asarray(r.lower)) <= d * (1 + 1e-9) + 1e-300
  return d


@pytest.mark.parametrize("name,fn,noises,steps,epsilons,sign", DELTA_ROWS,
                         ids=[r[0] for r in DELTA_ROWS])
def test_delta_contract(name, fn, noises, steps, epsilons, sign, compile_counter):
  assert not jax.config.jax_enable_x64
  base = fn(noises[1], steps[0], epsilons[0])
  d0 = _dlt(base)
  assert d0 > 0.0, "pick a setting where delta is not 0"
  assert np.asarray(base.delta).dtype == np.float64
  assert not jax.config.jax_enable_x64, "the user's float32 config was changed"
  with compile_counter as c:
    d_hi_noise = _dlt(fn(noises[2], steps[0], epsilons[0]))
  assert c.count == 0, f"{name}: {c.count} compilations for a new noise value"
  assert d_hi_noise < d0   # a new value was computed, and it is smaller
  slack = 1e-9
  assert _dlt(fn(noises[0], steps[0], epsilons[0])) >= d0 * (1 - slack)
  d_steps = _dlt(fn(noises[1], steps[1], epsilons[0]))
  assert (d_steps >= d0 * (1 - slack)) if sign > 0 else (d_steps <= d0 * (1 + slack))
  assert _dlt(fn(noises[1], steps[0], epsilons[1])) <= d0 * (1 + slack)


@pytest.mark.parametrize("row", [r for r in ROWS if r[0] in ("poisson_rdp", "shuffle",
                                                            "allocation_pld")],
                         ids=lambda r: r[0])
def test_epsilon_and_delta_doors_agree(row):
  """The two doors of one scheme describe one privacy profile. With e = the
  epsilon door's upper at d0, the true delta(e) <= d0; so the delta door's
  certified lower at e is <= d0 (its upper may exceed d0 on a coarser grid:
  measured 1.046e-6 at grid 256 for allocation, 9.56e-7 at grid 4096). Where
  the epsilon door brackets, the true delta at its lower end is >= d0, so the
  delta door's upper there is too. Doors without a bracket: delta(e) <= d0
  and delta(0.98 e) > d0 (the epsilon is within 2 % of the delta door's)."""
  name = row[0]
  eps_fn = dict((r[0], r[1]) for r in ROWS)[name]
  dlt_fn = dict((r[0], r[1]) for r in DELTA_ROWS)[name]
  noise, steps, d0 = row[2][1], row[3][0], 1e-6
  r = eps_fn(noise, steps, d0)
  e = float(np.asarray(r.epsilon))
  back = dlt_fn(noise, steps, e)
  if back.lower is not None and r.lower is not None:
    assert float(np.asarray(back.lower)) <= d0 * (1 + 1e-9), (name, e, back)
    e_lo = float(np.asarray(r.lower))
    assert float(np.asarray(dlt_fn(noise, steps, e_lo).delta)) >= d0 * (1 - 1e-9), name
  else:
    assert float(np.asarray(back.delta)) <= d0 * (1 + 1e-6), (name, e, back)
    assert float(np.asarray(dlt_fn(noise, steps, e * 0.98).delta)) > d0 * (1 - 1e-6), name


# ------------------------------------------------ traced input (jit / vmap) --

def test_traceable_front_door_eager_jit_vmap_agree():
  """poisson.epsilon/delta (RDP) trace: under the user's float64 jit and vmap
  they equal the eager call (1e-13 relative: another compilation may round
  differently), and traced invalid input gives NaN instead of raising."""
  s = np.array([0.8, 1.0, 1.3])
  d = np.array([1e-7, 1e-5, 1e-3])
  eager = np.asarray(poisson.epsilon(q=0.01, sigma=s, num_steps=500, delta=d).epsilon)
  eager_d = np.asarray(poisson.delta(q=0.01, sigma=s, num_steps=500, epsilon=2.0).delta)
  with jax.enable_x64(True):
    f = lambda s, d: poisson.epsilon(q=0.01, sigma=s, num_steps=500, delta=d)  # noqa: E731
    g = lambda s: poisson.delta(q=0.01, sigma=s, num_steps=500, epsilon=2.0)  # noqa: E731
    jitted = np.asarray(jax.jit(f)(s, d).epsilon)
    vmapped = np.asarray(jax.vmap(f)(s, d).epsilon)
    jv = np.asarray(jax.jit(jax.vmap(g))(s).delta)
    bad = jax.jit(f)(np.array([1.0, -1.0, 1.0]), np.array([1e-5, 1e-5, 1.5]))
  np.testing.assert_allclose(jitted, eager, rtol=1e-13)
  np.testing.assert_allclose(vmapped, eager, rtol=1e-13)
  np.testing.assert_allclose(jv, eager_d, rtol=1e-13)
  be = np.asarray(bad.epsilon)
  assert np.isfinite(be[0]) and np.isnan(be[1]) and np.isnan(be[2]), be
  with pytest.raises(ValueError, match="sigma"):
    poisson.epsilon(q=0.01, sigma=-1.0, num_steps=500, delta=1e-5)


def test_traceable_front_door_in_float32_trace_says_enable_x64():
  assert not jax.config.jax_enable_x64
  f = lambda s: poisson.epsilon(q=0.01, sigma=s, num_steps=500, delta=1e-5)  # noqa: E731
  with pytest.raises(RuntimeError, match="x64"):
    jax.jit(f)(1.0)
  assert not jax.config.jax_enable_x64


_HOST_ONLY = [r for r in ROWS if r[0] not in ("poisson_rdp",)]


@pytest.mark.parametrize("name,fn,noises,steps,deltas,sign", _HOST_ONLY,
                         ids=[r[0] for r in _HOST_ONLY])
def test_host_front_doors_refuse_tracers_loudly(name, fn, noises, steps, deltas, sign):
  """Front doors that size their computation from the values (grids, windows,
  method choice) need concrete input: under jit they raise -- never return a
  number computed from a placeholder."""
  with jax.enable_x64(True):
    with pytest.raises((jax.errors.ConcretizationTypeError,
                        jax.errors.TracerArrayConversionError,
                        jax.errors.TracerIntegerConversionError,
                        jax.errors.TracerBoolConversionError, ValueError, TypeError)):
      jax.jit(lambda x: fn(x, steps[0], deltas[0]))(noises[1])


# ------------------------------------------------- one run, every door --
#
# A single-event run gives the same epsilon through every door that answers
# it: the accountant (``PLDAccountant().compose(e).get_epsilon(d)``), the
# calibrator's lanes (``calibrator.upper_epsilon``), ``dpsgd.epsilon`` and
# ``dpsgd.statement``, the command line (``jaxacct dpsgd --json``), the
# tracker (``tracking.EventAccountant.epsilon_after``), the samplers
# (``sampling.*Sampler``: their event, their tracker, their scheme door), the
# jax_privacy config (``JaxacctPldAccountantConfig``) and the scheme's own
# door. Doors that agree today agree pairwise to 1e-12 (relative). Doors that
# do not are listed in EXPECTED_GAPS with the measured gap and its reason:
# the test fails when a discretisation gap changes (closing it included: then the pair
# moves to the agreeing doors).

N, B, EPOCHS, SIGMA, DELTA = 1000, 10, 2, 1.0, 1e-5
T_STEPS, Q = EPOCHS * N // B, B / N            # Poisson: 200 steps at q = 0.01
T_EPOCH = N // B                              # balls_in_bins: 100 steps per epoch
_RTOL = 1e-12

# (door, reference door) -> (relative gap (door - reference) / reference, reason)
EXPECTED_GAPS = {
    ("calibrator", "accountant"): (
        1.476e-11,
        "the calibrator's allocation lane is one compiled program vmapped over "
        "sigma; the accountant's is the host door (allocation_pld_epsilon): the same "
        "PLD, FFT and epsilon rounded differently"),
}


def _dpsgd_kw(sampling):
  return dict(num_examples=N, batch_size=B, num_epochs=EPOCHS, delta=DELTA,
              sampling=sampling)


def _cli_upper(sampling, capsys):
  status = main(["dpsgd", "--num-examples", str(N), "--batch-size", str(B), "--num-epochs",
                 str(EPOCHS), "--delta", str(DELTA), "--noise-multiplier", str(SIGMA),
                 "--sampling", sampling, "--json", "--quiet"])
  assert status == 0
  return json.loads(capsys.readouterr().out)["epsilon"]["upper"]


#: Gaps below this (relative) are float64 round-off of two evaluation orders:
#: bounded (within 10x the measured one), not pinned, since their exact value
#: follows XLA's fusion and vectorisation choices. Larger gaps are
#: discretisation choices, pinned to 5 % so a change in either door shows.
ROUND_OFF = 1e-9


def _check_gap(got, gap, what):
  if abs(gap) < ROUND_OFF:
    assert abs(got) <= 10 * abs(gap), (what, got, gap)
  else:
    assert got == pytest.approx(gap, rel=0.05), (what, got, gap)


def _check_doors(eps, expected=None):
  """Every pair of ``eps`` (name -> epsilon) agrees to 1e-12, except the
  pairs of ``expected`` ((door, reference) -> relative gap), whose gap must
  stay the measured one (:func:`_check_gap`)."""
  expected = expected or {}
  gapped = {a for a, _ in expected}
  for (door, ref), (gap, _) in expected.items():
    got = (eps[door] - eps[ref]) / eps[ref]
    _check_gap(got, gap, (door, ref))
  names = [n for n in eps if n not in gapped]
  for a in names:
    for b in names:
      assert eps[a] == pytest.approx(eps[b], rel=_RTOL, abs=0), (a, eps[a], b, eps[b])


def test_one_poisson_run_every_door(capsys):
  step = ev.PoissonSampledDpEvent(Q, ev.GaussianDpEvent(SIGMA))
  run = ev.SelfComposedDpEvent(step, T_STEPS)
  sampler = sampling.PoissonSampler(num_examples=N, sampling_probability=Q, num_steps=T_STEPS)
  stmt = dpsgd.statement(noise_multiplier=SIGMA, **_dpsgd_kw("poisson"))
  bins = dpsgd.statement(noise_multiplier=SIGMA, **_dpsgd_kw("balls_in_bins"))
  eps = {
      "accountant": accounting.PLDAccountant().compose(run).get_epsilon(DELTA),
      "accountant_count": accounting.PLDAccountant().compose(step, T_STEPS).get_epsilon(DELTA),
      "calibrator": float(calibrator.upper_epsilon([run], DELTA)[0]),
      "dpsgd.epsilon": float(dpsgd.epsilon(noise_multiplier=SIGMA,
                                           **_dpsgd_kw("poisson")).epsilon),
      "dpsgd.statement": stmt.epsilon_upper,
      "statement_comparison": dict((c.name, c.epsilon) for c in bins.comparison)["poisson"],
      "cli": _cli_upper("poisson", capsys),
      "tracking": tracking.EventAccountant(step).epsilon_after(T_STEPS, DELTA),
      "sampler_event": accounting.PLDAccountant().compose(
          sampler.event(noise_multiplier=SIGMA)).get_epsilon(DELTA),
      "sampler_tracker": sampler.accountant(noise_multiplier=SIGMA).epsilon_after(T_STEPS, DELTA),
      "sampler_door": float(sampler.epsilon(noise_multiplier=SIGMA, delta=DELTA, method="pld").epsilon),
      "poisson.epsilon": float(poisson.epsilon(q=Q, sigma=SIGMA, num_steps=T_STEPS,
                                               delta=DELTA, method="pld").epsilon),
  }
  _check_doors(eps)


def test_one_allocation_run_every_door(capsys):
  run = ev.RandomAllocationDpEvent(noise_multiplier=SIGMA, steps_per_epoch=T_EPOCH, num_epochs=EPOCHS)
  epoch = ev.RandomAllocationDpEvent(noise_multiplier=SIGMA, steps_per_epoch=T_EPOCH)
  sampler = sampling.BallsInBinsSampler(num_examples=N, steps_per_epoch=T_EPOCH,
                                        num_epochs=EPOCHS)
  stmt = dpsgd.statement(noise_multiplier=SIGMA, **_dpsgd_kw("balls_in_bins"))
  eps = {
      "accountant": accounting.PLDAccountant().compose(run).get_epsilon(DELTA),
      "calibrator": float(calibrator.upper_epsilon([run], DELTA)[0]),
      "dpsgd.epsilon": float(dpsgd.epsilon(noise_multiplier=SIGMA,
                                           **_dpsgd_kw("balls_in_bins")).epsilon),
      "dpsgd.statement": stmt.epsilon_upper,
      "cli": _cli_upper("balls_in_bins", capsys),
      "tracking": tracking.EventAccountant(epoch, block_size=T_EPOCH).epsilon_after(
          EPOCHS, DELTA),
      "sampler_event": accounting.PLDAccountant().compose(
          sampler.event(noise_multiplier=SIGMA)).get_epsilon(DELTA),
      "sampler_tracker": sampler.accountant(noise_multiplier=SIGMA).epsilon_after(EPOCHS, DELTA),
      "sampler_door": float(sampler.epsilon(noise_multiplier=SIGMA, delta=DELTA).epsilon),
      "allocation_pld_epsilon": float(apld.allocation_pld_epsilon(
          sigma=SIGMA, steps_per_epoch=T_EPOCH, num_epochs=EPOCHS, delta=DELTA).epsilon),
  }
  _check_doors(eps, EXPECTED_GAPS)


def test_one_gaussian_run_every_door(capsys):
  """Full batch (every example in each of T steps) and shuffling without
  amplification (each example in one step per epoch): T (or E) Gaussian steps."""
  g = ev.GaussianDpEvent(SIGMA)
  stmt = dpsgd.statement(noise_multiplier=SIGMA, **_dpsgd_kw("balls_in_bins"))
  full = {
      "accountant": accounting.PLDAccountant().compose(g, T_STEPS).get_epsilon(DELTA),
      "calibrator": float(calibrator.upper_epsilon([ev.SelfComposedDpEvent(g, T_STEPS)],
                                                   DELTA)[0]),
      "tracking": tracking.EventAccountant(g).epsilon_after(T_STEPS, DELTA),
      "statement_comparison": dict((c.name, c.epsilon) for c in stmt.comparison)["full_batch"],
  }
  _check_doors(full)
  shuffled = {
      "accountant": accounting.PLDAccountant().compose(g, EPOCHS).get_epsilon(DELTA),
      "calibrator": float(calibrator.upper_epsilon([ev.SelfComposedDpEvent(g, EPOCHS)],
                                                   DELTA)[0]),
      "tracking": tracking.EventAccountant(g, block_size=T_EPOCH).epsilon_after(EPOCHS, DELTA),
      "dpsgd.epsilon": float(dpsgd.epsilon(noise_multiplier=SIGMA,
                                           **_dpsgd_kw("shuffle")).epsilon),
      "cli": _cli_upper("shuffle", capsys),
  }
  _check_doors(shuffled)


def test_one_run_through_the_jax_privacy_config():
  jpa = pytest.importorskip("jax_privacy.accounting")
  from jax_privacy import batch_selection   # noqa: PLC0415 - optional dependency
  from jaxacct.accounting.jax_privacy import (  # noqa: PLC0415 - needs jax_privacy
      JaxacctPldAccountantConfig)
  from jaxacct.dpsgd.jax_privacy import balls_in_bins_event  # noqa: PLC0415
  params = jpa.DpParams(noise_multipliers=SIGMA, num_samples=N, batch_size=B, delta=DELTA)
  poisson_jp = jpa.DpsgdTrainingAccountant(JaxacctPldAccountantConfig()).compute_epsilon(
      T_STEPS, params)
  step = ev.PoissonSampledDpEvent(Q, ev.GaussianDpEvent(SIGMA))
  _check_doors({"jax_privacy": float(poisson_jp),
                "accountant": accounting.PLDAccountant().compose(step, T_STEPS).get_epsilon(
                    DELTA)})
  strategy = batch_selection.BallsInBinsSampling(iterations=T_EPOCH, cycle_length=T_EPOCH)
  alloc_jp = JaxacctPldAccountantConfig().create_accountant().compose(
      balls_in_bins_event(strategy, noise_multiplier=SIGMA, num_epochs=EPOCHS))
  run = ev.RandomAllocationDpEvent(noise_multiplier=SIGMA, steps_per_epoch=T_EPOCH, num_epochs=EPOCHS)
  _check_doors({"jax_privacy": alloc_jp.get_epsilon(DELTA),
                "dpsgd.epsilon": float(dpsgd.epsilon(noise_multiplier=SIGMA,
                                                     **_dpsgd_kw("balls_in_bins")).epsilon),
                "accountant": accounting.PLDAccountant().compose(run).get_epsilon(DELTA)})


# The accountant's general path (``shortcuts=False``: the per-leaf pairs of
# jaxacct.accounting._composition and one FFT, the path of every composite
# ledger, and the PLDs ``composed_plds`` returns) against its scheme door for
# the same single event: (relative gap (general - door) / door, reason).
GENERAL_PATH_GAPS = {
    "allocation": (
        4.328e-4,
        "the general path composes the allocation PLDs of allocation_plds on the "
        "accountant's grid (step 1e-4) by one FFT; the door (allocation_pld_epsilon) "
        "composes its epochs on its own grid: two discretisations of one PLD"),
    "poisson": (
        -8.135e-11,
        "the general path composes the per-step pessimistic pair with compose_many "
        "(tail mass of the accountant); the door (jaxacct.pld's Poisson door) uses its "
        "own per-step truncation and tail masses on the same grid"),
}


@pytest.mark.slow
@pytest.mark.parametrize("scheme", sorted(GENERAL_PATH_GAPS))
def test_general_path_against_the_scheme_door_and_risk(scheme):
  """The measured gap of the general path to the door; ``risk`` (TPR at FPR,
  advantage) reads the general path's PLDs and agrees with them to 1e-12."""
  if scheme == "allocation":
    run, sampler = ev.RandomAllocationDpEvent(noise_multiplier=SIGMA, steps_per_epoch=T_EPOCH,
                                              num_epochs=EPOCHS), "balls_in_bins"
  else:
    run, sampler = ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(
        Q, ev.GaussianDpEvent(SIGMA)), T_STEPS), "poisson"
  door = accounting.PLDAccountant().compose(run).get_epsilon(DELTA)
  general = accounting.PLDAccountant(shortcuts=False).compose(run)
  got = (general.get_epsilon(DELTA) - door) / door
  _check_gap(got, GENERAL_PATH_GAPS[scheme][0], scheme)
  upper = general.composed_plds()[0]
  fpr = np.array([1e-3, 1e-2, 0.1])
  kw = dict(noise_multiplier=SIGMA, num_examples=N, batch_size=B, num_epochs=EPOCHS,
            sampling=sampler)
  np.testing.assert_allclose(np.asarray(risk.tpr_at_fpr(fpr, **kw).upper),
                             np.asarray(risk.tpr_from_plds(upper, fpr).upper), rtol=_RTOL)
  assert risk.advantage(**kw).upper == pytest.approx(
      risk.advantage_from_plds(upper).upper, rel=_RTOL, abs=0)


# A Poisson run where the Poisson door picks a finer grid than the
# accountant's default step 1e-4 (its own step: 6.14e-5 here): the door's
# doors (poisson.epsilon, dpsgd.epsilon, the calibrator's lane, the sampler's
# door) agree, the accountant's doors (PLDAccountant, tracking) agree, and the
# two groups differ by the grid. An accountant on the door's step gives the
# door's number.
FINER_GRID_GAP = (
    4.069e-5,
    "the accountant discretises on its value_discretization_interval (1e-4); the "
    "Poisson door (jaxacct.pld's) sizes its own step from sigma, q and T (finer here)")


def test_one_poisson_run_where_the_door_picks_a_finer_grid():
  sigma, q, steps, n = 0.8, 0.001, 1000, 100_000
  step = ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(sigma))
  run = ev.SelfComposedDpEvent(step, steps)
  door = poisson.epsilon(q=q, sigma=sigma, num_steps=steps, delta=DELTA, method="pld")
  sampler = sampling.PoissonSampler(num_examples=n, sampling_probability=q, num_steps=steps)
  by_door = {
      "poisson.epsilon": float(door.epsilon),
      "calibrator": float(calibrator.upper_epsilon([run], DELTA)[0]),
      "dpsgd.epsilon": float(dpsgd.epsilon(noise_multiplier=sigma, num_examples=n,
                                           batch_size=100, num_epochs=1, delta=DELTA,
                                           sampling="poisson").epsilon),
      "sampler_door": float(sampler.epsilon(noise_multiplier=sigma, delta=DELTA, method="pld").epsilon),
      "accountant_on_door_step": accounting.PLDAccountant(
          value_discretization_interval=door.details["step"]).compose(run).get_epsilon(DELTA),
  }
  _check_doors(by_door)
  by_accountant = {
      "accountant": accounting.PLDAccountant().compose(run).get_epsilon(DELTA),
      "tracking": tracking.EventAccountant(step).epsilon_after(steps, DELTA),
  }
  _check_doors(by_accountant)
  got = (by_accountant["accountant"] - by_door["dpsgd.epsilon"]) / by_door["dpsgd.epsilon"]
  assert got == pytest.approx(FINER_GRID_GAP[0], rel=0.05), got


# A composite ledger of allocation: the one-epoch event composed E times goes
# through the general path; the E-epoch event (and the tracker, which folds
# its epochs into num_epochs) through the allocation door.
EPOCHS_AS_COUNT_GAP = (
    5.061e-4,
    "compose(epoch, E) composes E one-epoch allocation PLDs by the general FFT "
    "on the accountant's grid; RandomAllocationDpEvent(num_epochs=E) is the door's "
    "own epoch composition (allocation_pld_epsilon): two discretisations")


@pytest.mark.slow
def test_allocation_epochs_as_a_count_against_the_door():
  epoch = ev.RandomAllocationDpEvent(noise_multiplier=SIGMA, steps_per_epoch=T_EPOCH)
  run = ev.RandomAllocationDpEvent(noise_multiplier=SIGMA, steps_per_epoch=T_EPOCH, num_epochs=EPOCHS)
  door = accounting.PLDAccountant().compose(run).get_epsilon(DELTA)
  count = accounting.PLDAccountant().compose(epoch, EPOCHS).get_epsilon(DELTA)
  assert (count - door) / door == pytest.approx(EPOCHS_AS_COUNT_GAP[0], rel=0.05)


# ------------------------------------------------------ one dispatcher --

def test_only_the_event_table_tells_event_types_apart():
  """Which code answers an event is decided in one table,
  ``jaxacct._core.events`` (``kind`` / ``family``): no other module tests an
  event against an event class (``isinstance(x, SomeDpEvent)``) or looks a
  class up by name (``standard_event``). Allowed: the bridge's stand-in
  builder (below the table: it mirrors dp_accounting's ``DpEventBuilder``)
  and the base-class test ``isinstance(x, DpEvent)`` (is it an event at all)."""
  root = pathlib.Path(accounting.__file__).parents[1]
  allowed = {root / "_core" / "events.py", root / "_core" / "dp_bridge.py"}
  bad = []
  for f in sorted(root.rglob("*.py")):
    if f in allowed:
      continue
    for node in ast.walk(ast.parse(f.read_text())):
      if not isinstance(node, ast.Call):
        continue
      name = ast.unparse(node.func)
      if name in ("isinstance", "issubclass") and len(node.args) == 2:
        cls = ast.unparse(node.args[1])
        if "DpEvent" in cls and not cls.endswith(("dp_bridge.DpEvent", "(DpEvent)")) \
            and cls != "DpEvent":
          bad.append(f"{f.relative_to(root)}:{node.lineno} {ast.unparse(node)}")
      elif name.endswith("standard_event"):
        bad.append(f"{f.relative_to(root)}:{node.lineno} {ast.unparse(node)}")
  assert bad == [], bad
