"""The one calibrator, ``jaxacct.calibrate`` (issue 29), and its doors.

``jaxacct.calibrate(make_event, target_epsilon, delta, bracket=...)`` drives
the host solver (``jaxacct._core.solve``) with ``jaxacct.calibrator.upper_epsilon``,
one vectorised door per event family. Checked here, with the door itself as
the oracle (the calibrator must invert exactly the function it evaluates):

* feasible side: the returned x is evaluated feasible (upper epsilon <= the
  target) and x moved by (1 + rtol) towards less privacy is not (by 1 when
  ``discrete``), per target of a vector, in both directions;
* the Gaussian family against the exact Gaussian profile (Balle & Wang,
  arXiv:1805.06530v2, Thm 8, scipy's brentq on it: an independent root);
* compile counts: a calibration after an epsilon question at the same setting,
  and a second calibration at a new target, compile nothing (allocation door);
* every door returns the accountant's epsilon for the same event
  (``PLDAccountant().compose(event).get_epsilon``);
* bad input: a ValueError naming the parameter.
"""

import math

import numpy as np
import pytest
from scipy import optimize, stats

import jaxacct
from jaxacct import calibrator, dpsgd
from jaxacct.accounting import PLDAccountant, evaluator
from jaxacct.accounting import events as ev
from jaxacct.allocation import pld

RTOL = 1e-3
# just past the tolerance: the bracket's ratio is <= (1 + rtol)^(1 + 1e-9)
MISS = 1 + RTOL * (1 + 1e-6)
DELTA = 1e-5


def _up(events, delta=DELTA):
  return calibrator.upper_epsilon(events, delta)


def _gauss(n):
  return lambda s: ev.SelfComposedDpEvent(ev.GaussianDpEvent(s), n)


def _gauss_delta(mu, eps):
  """Exact mu-Gaussian profile (Balle & Wang 2018, Thm 8), scipy."""
  return stats.norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * stats.norm.cdf(-mu / 2 - eps / mu)


# ---------------------------------------------------------------- the spine

def test_gaussian_sigma_vector_feasible_tight_and_exact():
  eps = np.array([0.5, 1.0, 2.0])
  mk = _gauss(4)
  s = jaxacct.calibrate(mk, eps, DELTA, bracket=(0.1, 100.0), rtol=RTOL)
  assert s.shape == (3,)
  assert np.all(_up([mk(x) for x in s]) <= eps)
  assert np.all(_up([mk(x / MISS) for x in s]) > eps)
  # the root of the exact profile (independent: scipy brentq on the formula)
  for e, x in zip(eps, s):
    mu = optimize.brentq(lambda m: _gauss_delta(m, e) - DELTA, 1e-3, 50.0, xtol=1e-14)
    assert 2.0 / mu <= x <= 2.0 / mu * (1 + RTOL) * (1 + 1e-7)


def test_increasing_parameter_returns_the_largest_feasible():
  # x = 1 / sigma (a "rate"): epsilon increases with x; detected from the
  # bracket ends (increasing=None) and given, the same answer
  mk = lambda x: ev.GaussianDpEvent(1.0 / x)
  eps = np.array([0.5, 1.0])
  x = jaxacct.calibrate(mk, eps, DELTA, bracket=(0.01, 10.0), rtol=RTOL)
  assert np.all(_up([mk(v) for v in x]) <= eps)
  assert np.all(_up([mk(v * MISS) for v in x]) > eps)
  x2 = jaxacct.calibrate(mk, eps, DELTA, bracket=(0.01, 10.0), rtol=RTOL, increasing=True)
  np.testing.assert_allclose(x2, x, rtol=2 * RTOL)


def test_discrete_steps_both_directions():
  # steps n of a Gaussian (sigma 5): the largest n per target
  mk = lambda n: ev.SelfComposedDpEvent(ev.GaussianDpEvent(5.0), int(n))
  eps = np.array([1.0, 2.0])
  n = jaxacct.calibrate(mk, eps, DELTA, bracket=(1, 1000), discrete=True)
  assert n.dtype == np.int64 and np.all(n >= 1)
  assert np.all(_up([mk(v) for v in n]) <= eps) and np.all(_up([mk(v + 1) for v in n]) > eps)
  # the smallest integer noise that meets the target (decreasing direction)
  mk2 = lambda s: ev.SelfComposedDpEvent(ev.GaussianDpEvent(float(s)), 10)
  s = jaxacct.calibrate(mk2, 1.0, DELTA, bracket=(1, 200), discrete=True, increasing=False)
  assert isinstance(s, int)
  assert _up([mk2(s)])[0] <= 1.0 < _up([mk2(s - 1)])[0]
  with pytest.raises(ValueError, match=r"no steps in \[1, 1000\]"):
    jaxacct.calibrate(mk, 0.01, DELTA, bracket=(1, 1000), discrete=True, increasing=True,
                      name="steps")


@pytest.mark.slow
def test_other_events_go_through_the_accountant():
  # a Laplace mechanism composed 3 times has no vectorised door: one
  # accountant per lane, same feasible side
  mk = lambda b: ev.SelfComposedDpEvent(ev.LaplaceDpEvent(b), 2)
  b = jaxacct.calibrate(mk, 1.0, 1e-6, bracket=(0.1, 100.0), rtol=RTOL, increasing=False)
  assert PLDAccountant().compose(mk(b)).get_epsilon(1e-6) <= 1.0
  assert PLDAccountant().compose(mk(b / MISS)).get_epsilon(1e-6) > 1.0


def test_unreachable_target_names_the_bracket():
  with pytest.raises(ValueError, match=r"no noise_multiplier in \[0.1, 1\]"):
    jaxacct.calibrate(_gauss(1), 1e-3, DELTA, bracket=(0.1, 1.0), name="noise_multiplier")
  with pytest.raises(ValueError, match="increasing"):   # flat: no direction
    jaxacct.calibrate(lambda x: ev.NoOpDpEvent(), 1.0, DELTA, bracket=(0.1, 1.0))


def test_noise_multipliers_the_pld_refuses_are_infeasible():
  # fixed_size at the accountant's step 1e-4 holds sigma >= 0.0274 (one step's loss
  # grid, jaxacct._core.checks.accountable_sigma); a search below it is told
  # "infeasible" at every probe and names its bracket, not an internal sigma
  run = dict(num_examples=60_000, batch_size=256, num_epochs=10, sampling="fixed_size")
  mk = lambda s: dpsgd.event(noise_multiplier=s, **run)   # noqa: E731
  with pytest.raises(ValueError, match=r"no noise_multiplier in \[0.001, 0.02\]"):
    jaxacct.calibrate(mk, 3.0, DELTA, bracket=(1e-3, 0.02), increasing=False,
                      name="noise_multiplier")
  with pytest.raises(ValueError, match=r"noise_multiplier \(sigma\) 0.02 is too small"):
    calibrator.upper_epsilon([mk(0.02)], DELTA)      # asked directly: the refusal itself


@pytest.mark.slow
def test_truncated_calibration_steps_over_refused_probes():
  # epsilon 50 at the README run: the search probes sigma 0.0247, below what the
  # truncated Poisson PLD accounts at step 1e-4: the search reads that refusal as
  # infeasible and goes on; the answer is certified and tight to rtol
  run = dict(num_examples=60_000, batch_size=256, num_epochs=10, delta=1e-5,
             sampling="truncated_poisson", max_batch_size=300, progress=False)
  s = dpsgd.calibrate_noise_multiplier(epsilon=50.0, rtol=RTOL, **run)
  assert dpsgd.epsilon(noise_multiplier=s, **run).epsilon <= 50.0
  assert dpsgd.epsilon(noise_multiplier=s / MISS, **run).epsilon > 50.0 * (1 - 1e-9)
  assert 0.3 < s < 0.4


@pytest.mark.parametrize("kw, match", [
    (dict(target_epsilon=0.0), "target_epsilon"),
    (dict(target_epsilon=[1.0, -1.0]), "target_epsilon"),
    (dict(delta=1.0), "delta"),
    (dict(bracket=(2.0, 1.0)), "bracket"),
    (dict(bracket=(0.0, 1.0)), "bracket"),
    (dict(bracket=(1.5, 4), discrete=True), "bracket"),
    (dict(rtol=0.0), "rtol"),
    (dict(rtol=0.5), "rtol"),
    (dict(discrete="yes"), "discrete"),
    (dict(increasing=1), "increasing"),
    (dict(make_event=3), "make_event"),
    (dict(progress="no"), "progress"),
])
def test_bad_input_names_the_parameter(kw, match):
  base = dict(make_event=_gauss(1), target_epsilon=1.0, delta=DELTA, bracket=(0.1, 10.0))
  with pytest.raises(ValueError, match=match):
    jaxacct.calibrate(**{**base, **kw})


# -------------------------------------------- the allocation door (compiles)

def test_calibration_after_epsilon_question_compiles_nothing(compile_counter):
  # N = 1000, B = 50: t = 20 steps per epoch, k = 2, E = 2 (default grids);
  # the balls-in-bins event goes through allocation.pld's programs
  cfg = dict(num_examples=1000, batch_size=100, num_epochs=2, num_selected=2)
  dpsgd.epsilon(noise_multiplier=1.3, delta=DELTA, **cfg)      # the epsilon question
  with compile_counter as c:
    s = dpsgd.calibrate_noise_multiplier(epsilon=2.0, delta=DELTA, rtol=RTOL,
                                         progress=False, **cfg)
  assert c.count == 0
  up = lambda x: dpsgd.epsilon(noise_multiplier=x, delta=DELTA, **cfg).epsilon
  assert up(s) <= 2.0 < up(s / MISS)
  # a second calibration at new targets (a vector, delta per target) compiles nothing
  eps, dl = np.array([1.2, 3.0]), np.array([1e-5, 1e-8])
  mk = lambda x: dpsgd.event(noise_multiplier=x, **cfg)
  jaxacct.calibrate(mk, eps, dl, bracket=(0.01, 1e4), rtol=RTOL)   # its lane count
  with compile_counter as c:
    s2 = jaxacct.calibrate(mk, eps * 1.1, dl, bracket=(0.01, 1e4), rtol=RTOL)
  assert c.count == 0
  assert np.all(calibrator.upper_epsilon([mk(x) for x in s2], dl) <= eps * 1.1)
  assert np.all(calibrator.upper_epsilon([mk(x / MISS) for x in s2], dl) > eps * 1.1)


def test_target_met_at_the_bracket_floor_returns_the_floor():
  # every sigma in the bracket meets epsilon 100: the least sigma searched is
  # the bracket's lo (before 2026-11-25 the search stepped below it: 0.0947)
  s = jaxacct.calibrate(_gauss(1), 100.0, DELTA, bracket=(0.1, 100.0), rtol=RTOL)
  assert 0.1 <= s <= 0.1 * (1 + 1e-12)


# sigma of the solver before the few-evaluation search (5fd311a), same
# function inverted: both lie in [root, root (1 + rtol)], so they differ by < rtol
# MNIST (N = 60,000, B = 256, E = 10, epsilon 3: 5 evaluations then) and
# CIFAR-10 (N = 50,000, B = 4096, E = 73, epsilon 8: 4 then), delta 1e-5
FEW_EVALS = [((60000, 256, 10, 3.0), 0.6836079811930338, 4),
             ((50000, 4096, 73, 8.0), 1.623233655661578, 3)]


@pytest.mark.parametrize("setting,old,max_evals", FEW_EVALS)
def test_dpsgd_calibration_few_allocation_evaluations(monkeypatch, setting, old, max_evals):
  # the allocation door is the cost of a calibration (lanes x rounds): count the
  # evaluator's lanes (every evaluation of a calibration asks evaluator.bracket)
  n, b, e, eps = setting
  lanes = []
  door = evaluator.bracket

  def counted(events, delta, **kw):
    lanes.append(len(events))
    return door(events, delta, **kw)

  monkeypatch.setattr(evaluator, "bracket", counted)
  rtol = 2.5e-4   # dpsgd's default
  s = dpsgd.calibrate_noise_multiplier(epsilon=eps, delta=DELTA, num_examples=n,
                                       batch_size=b, num_epochs=e, progress=False)
  assert 1 <= len(lanes) <= max_evals and sum(lanes) <= max_evals
  monkeypatch.undo()
  mk = lambda x: dpsgd.event(noise_multiplier=x, num_examples=n, batch_size=b, num_epochs=e)
  # feasible-side guarantee, re-evaluated here: s meets the target, s / (1 + rtol) does not
  assert _up([mk(s)])[0] <= eps < _up([mk(s / (1 + rtol * (1 + 1e-6)))])[0]
  assert abs(s / old - 1) <= rtol


@pytest.mark.parametrize("target", [1.0, [0.5, 1.0, 2.0]])
def test_host_or_jit_is_chosen_once_per_calibration_and_passed_down(monkeypatch, target):
  # one question, one choice: one lane runs on the host, several jitted, and every
  # evaluation of the search receives that choice (no door decides again)
  chosen, seen = [], []
  decide, door = evaluator.is_host, evaluator.bracket

  def once(*a):
    chosen.append(decide(*a))
    return chosen[-1]

  def asked(events, delta, *, with_lower=True, host=None):
    seen.append(host)
    return door(events, delta, with_lower=with_lower, host=host)

  monkeypatch.setattr(evaluator, "is_host", once)
  monkeypatch.setattr(evaluator, "bracket", asked)
  x = jaxacct.calibrate(lambda s: ev.GaussianDpEvent(s), target, DELTA, bracket=(0.1, 100.0))
  assert chosen == [np.ndim(target) == 0] and len(seen) >= 2
  assert set(seen) == set(chosen)
  monkeypatch.undo()
  # the same sigmas as the exact Gaussian's own door
  up = _up([ev.GaussianDpEvent(float(s)) for s in np.ravel(x)])
  assert np.all(up <= np.ravel(target))


@pytest.mark.slow
def test_dpsgd_calibration_where_the_gaussian_bound_wins():
  # t = 1 (B = N): the exact Gaussian is below the PLD upper (discretisation
  # slack), so the certified upper is the Gaussian one; the calibration's
  # cheap lower bound must defer to it.
  cfg = dict(num_examples=100, batch_size=100, num_epochs=1, delta=1e-5)
  r = dpsgd.epsilon(noise_multiplier=1.0, **cfg)
  assert r.epsilon == r.details["local"] < r.details["pld_upper"]
  s = dpsgd.calibrate_noise_multiplier(epsilon=2.0, rtol=1e-3, progress=False, **cfg)
  up = lambda x: dpsgd.epsilon(noise_multiplier=x, **cfg).epsilon
  assert up(s) <= 2.0 < up(s / MISS)


# ---------------------------------------- every door = the accountant

@pytest.mark.parametrize("q, sigma, steps, finer", [(256 / 60000, 1.0, 235, True),
                                                    (256 / 60000, 1.0, 2350, False)])
def test_poisson_door_is_the_accountant_on_its_grid(q, sigma, steps, finer):
  # One builder (accounting/_scheme_doors.py): jaxacct.poisson.epsilon(method="pld")
  # runs on its own grid (details["step"]: min(1e-4, s/1000), finer than 1e-4 at
  # T = 235) and PLDAccountant on that grid returns it; where the door's grid is
  # 1e-4 the default accountant (dp_accounting's grid) does. Measured difference
  # 0.0 (before the shared builder: 3.05e-6 and 1.8e-7 relative); rtol 1e-12.
  event = ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(sigma))
  door = jaxacct.poisson.epsilon(q=q, sigma=sigma, num_steps=steps, delta=DELTA, method="pld")
  assert (door.details["step"] < 1e-4) == finer
  acc = PLDAccountant(value_discretization_interval=door.details["step"]).compose(event, steps)
  np.testing.assert_allclose(acc.get_epsilon(DELTA), door.epsilon, rtol=1e-12)
  if not finer:
    np.testing.assert_allclose(PLDAccountant().compose(event, steps).get_epsilon(DELTA),
                               door.epsilon, rtol=1e-12)
  # the bracket: the door's upper per direction, the general path's certified lower
  b = acc.get_epsilon_bounds(DELTA)
  assert b.method == "poisson_pld" and b.epsilon == acc.get_epsilon(DELTA)
  assert max(b.by_direction["remove"][0], b.by_direction["add"][0]) == b.epsilon
  assert 0.99 * b.epsilon < b.lower <= b.epsilon, (b.lower, b.epsilon)


@pytest.mark.parametrize("q, sigma, steps, delta", [(0.5, 0.3, 10, 1e-10),
                                                    (1e-3, 0.5, 100_000, 1e-12),
                                                    (0.9, 1.0, 50, 1e-8)])
def test_poisson_door_shortcut_at_extremes_stays_above_the_certified_lower(q, sigma, steps,
                                                                          delta):
  # The accountant's Poisson shortcut (the door) against the general FFT path
  # (shortcuts=False, an independent composition) and its certified lower, at
  # small sigma, tiny delta, large q and T = 1e5: never below the lower; within
  # 1e-5 of the general upper (measured 1.9e-9, 2.6e-6, 1.0e-10).
  event = ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(sigma))
  door = PLDAccountant().compose(event, steps).get_epsilon_bounds(delta)
  general = PLDAccountant(shortcuts=False).compose(event, steps).get_epsilon_bounds(delta)
  assert door.method == "poisson_pld" and general.method == "pld"
  assert door.epsilon >= general.lower and door.lower <= door.epsilon
  np.testing.assert_allclose(door.epsilon, general.epsilon, rtol=1e-5)


@pytest.mark.parametrize("sampling, kw", [
    ("balls_in_bins", dict(num_epochs=2)),
    ("shuffle", dict(num_epochs=3)),
    pytest.param("poisson", dict(num_epochs=2), marks=pytest.mark.slow),
    pytest.param("balls_in_bins", dict(num_epochs=2, num_selected=2), marks=pytest.mark.slow),
])
def test_every_door_returns_the_accountants_epsilon(sampling, kw):
  # dpsgd.epsilon, calibrator.upper_epsilon (what calibrate meets) and the
  # accountant on dpsgd.event agree (rtol 1e-12, except as noted below; the dpsgd door takes the min
  # with no amplification, which does not win at sigma = 1.2 here). Poisson: the
  # accountant asks the Poisson door itself (accounting/_scheme_doors.py; before,
  # 1.2e-11 apart).
  tol = 1e-12
  cfg = dict(num_examples=1000, batch_size=50, sampling=sampling, **kw)
  event = dpsgd.event(noise_multiplier=1.2, **cfg)
  acc = PLDAccountant().compose(event).get_epsilon(DELTA)
  door = dpsgd.epsilon(noise_multiplier=1.2, delta=DELTA, **cfg).epsilon
  np.testing.assert_allclose(door, acc, rtol=tol)
  up = _up([event])[0]
  if sampling == "balls_in_bins":
    # calibrate evaluates a scalar allocation question without its certified
    # lower (allocation_pld_epsilon(with_lower=False)): the same upper, whose
    # float ledger lacks the lower's terms: at or above the door's, 8.9e-12
    # relative here (measured); the door itself is checked at 1e-12 below.
    assert acc <= up <= acc * (1 + 1e-10), (up, acc)
  else:
    np.testing.assert_allclose(up, acc, rtol=tol)
  if sampling == "balls_in_bins":   # the allocation PLD door itself
    t, k, E = event.steps_per_epoch, event.num_selected, event.num_epochs
    r = pld.allocation_pld_epsilon(sigma=1.2, delta=DELTA, steps_per_epoch=t, num_selected=k,
                                   num_epochs=E)
    np.testing.assert_allclose(float(r.epsilon), acc, rtol=1e-12)
