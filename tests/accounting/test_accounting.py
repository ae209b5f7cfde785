"""jaxacct.accounting: the PLD accountant against closed forms (no peer needed).

References used here (all independent of the PLD engine):
* Gaussian mechanisms compose to one Gaussian, mu = sqrt(sum c_i / sigma_i^2)
  (Dong, Roth, Su, arXiv:1905.02383v3, Cor. 3.3); profile of Balle & Wang,
  arXiv:1805.06530v2, Thm 8 (``jaxacct._core.gaussian.gaussian_epsilon``, bisection).
* (eps0, delta0) pairs compose exactly by binomial enumeration (scipy).
* Trade-off of mu-GDP: TPR = Phi(Phi^-1(FPR) + mu) (scipy).
"""

import json
import math
import subprocess
import sys
import os

import numpy as np
import pytest
from scipy import stats

import jaxacct
from jaxacct import pld as jpld
from jaxacct.accounting import (NeighboringRelation as NR, PLDAccountant,
                                UnsupportedEventError, events as ev, from_profile)
from jaxacct._core.gaussian import gaussian_delta, gaussian_epsilon

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _gauss_eps(mu, delta):
  return float(gaussian_epsilon(1.0 / mu, delta).epsilon)


def _gauss_delta(mu, eps):
  return float(gaussian_delta(1.0 / mu, eps).delta)


def test_gaussian_shortcut_is_the_closed_form():
  acc = PLDAccountant().compose(ev.GaussianDpEvent(2.0), 3).compose(
      ev.GaussianDpEvent(5.0), 7)
  mu = math.sqrt(3 / 4 + 7 / 25)
  r = acc.get_epsilon_bounds(1e-6)
  assert r.bound == "exact" and r.method == "gaussian_exact"
  assert r.epsilon == pytest.approx(_gauss_eps(mu, 1e-6), rel=1e-14)
  assert acc.get_delta(1.0) == pytest.approx(_gauss_delta(mu, 1.0), rel=1e-14)


def test_heterogeneous_gaussians_general_path_brackets_the_closed_form():
  # two noise levels -> two PLDs composed by one FFT; exact value from mu
  acc = PLDAccountant(shortcuts=False)
  acc.compose(ev.GaussianDpEvent(2.0), 3).compose(ev.GaussianDpEvent(5.0), 7)
  mu = math.sqrt(3 / 4 + 7 / 25)
  for delta in (1e-3, 1e-6, 1e-10):
    r = acc.get_epsilon_bounds(delta)
    exact = _gauss_eps(mu, delta)
    assert r.method == "pld"
    assert r.lower <= exact <= r.epsilon
    # connect-the-dots (upper) and exact merging (lower) are second order:
    # measured 2.8e-8 / 2.7e-8 at step 1e-4; allow 1e-6
    assert r.epsilon - exact < 1e-6 and exact - r.lower < 1e-6
  for eps in (0.0, 0.5, 2.0):
    d = acc.get_delta_bounds(eps)
    exact = _gauss_delta(mu, eps)
    assert d.lower <= exact * (1 + 1e-12) and exact <= d.delta * (1 + 1e-12)


def _eps_delta_exact_delta(parts, eps):
  """delta(eps) of the composition of (eps_i, delta_i) pairs x count_i (exact)."""
  losses, probs = np.zeros(1), np.ones(1)
  keep = 1.0
  for e0, d0, c in parts:
    k = np.arange(c + 1)
    pk = stats.binom.pmf(k, c, 1.0 / (1.0 + math.exp(-e0)))
    losses = (losses[:, None] + (2 * k - c)[None, :] * e0).ravel()
    probs = (probs[:, None] * pk[None, :]).ravel()
    keep *= (1.0 - d0) ** c
  hs = float(np.sum(probs * np.maximum(1.0 - np.exp(eps - losses), 0.0)))
  return 1.0 - keep + keep * hs


def test_epsilon_delta_events_bracket_the_binomial_composition():
  # off-grid eps0 (not multiples of the step): both discretisations matter
  parts = [(0.5003, 1e-7, 12), (0.2501, 0.0, 30)]
  acc = PLDAccountant()
  for e0, d0, c in parts:
    acc.compose(ev.EpsilonDeltaDpEvent(e0, d0), c)
  for eps in (0.5, 1.5, 3.0, 5.0):
    exact = _eps_delta_exact_delta(parts, eps)
    r = acc.get_delta_bounds(eps)
    assert r.lower <= exact <= r.delta, (eps, r.lower, exact, r.delta)
    # upper: measured 1.3e-13 relative. Lower: an atom off the grid can only
    # be merged down to the grid value below it (no garbling of the pair has
    # a larger likelihood ratio), a first-order loss at the top atom:
    # measured 2.5e-5 .. 1.5e-3 relative; allow 3e-3
    assert r.delta - exact <= 1e-9 * exact
    assert exact - r.lower <= 3e-3 * exact
  # 12 x delta0 = 1.2e-6 > 1e-6: no finite epsilon, on both ends
  r = acc.get_epsilon_bounds(1e-6)
  assert r.epsilon == math.inf and r.lower == math.inf


def test_one_by_one_equals_the_tree():
  e1 = ev.PoissonSampledDpEvent(0.05, ev.GaussianDpEvent(1.5))
  e2 = ev.LaplaceDpEvent(4.0)
  tree = ev.ComposedDpEvent([ev.SelfComposedDpEvent(e1, 20), e2,
                             ev.SelfComposedDpEvent(e1, 5)])
  a = PLDAccountant().compose(tree)
  b = PLDAccountant()
  for _ in range(25):
    b.compose(e1)
  b.compose(e2)
  ra, rb = a.get_epsilon_bounds(1e-5), b.get_epsilon_bounds(1e-5)
  assert ra.epsilon == rb.epsilon and ra.lower == rb.lower
  assert ra.lower <= ra.epsilon


@pytest.mark.parametrize("relation, event, culprit", [
    (NR.ADD_OR_REMOVE_ONE, ev.ShuffleDpEvent(n=100, eps0=1.0), "ShuffleDpEvent"),
    (NR.ADD_OR_REMOVE_ONE, ev.ShuffledCheckInDpEvent(n=100, p=0.5, eps0=1.0),
     "ShuffledCheckInDpEvent"),
    (NR.REPLACE_ONE, ev.RandomAllocationDpEvent(noise_multiplier=1.0, steps_per_epoch=10),
     "RandomAllocationDpEvent"),
    (NR.REPLACE_ONE, ev.PoissonSampledDpEvent(0.1, ev.LaplaceDpEvent(1.0)),
     "PoissonSampledDpEvent"),
    (NR.ADD_OR_REMOVE_ONE, ev.SampledWithoutReplacementDpEvent(
        100, 10, ev.GaussianDpEvent(1.0)), "SampledWithoutReplacementDpEvent"),
    (NR.ADD_OR_REMOVE_ONE, ev.UnsupportedDpEvent(), "UnsupportedDpEvent"),
])
def test_unsupported_events_are_refused_and_named(relation, event, culprit):
  acc = PLDAccountant(relation)
  wrapped = ev.ComposedDpEvent([ev.GaussianDpEvent(1.0), event])
  assert acc.supports(ev.GaussianDpEvent(1.0))
  assert not acc.supports(wrapped)
  with pytest.raises(UnsupportedEventError, match=culprit):
    acc.compose(wrapped)
  assert isinstance(acc.ledger, ev.NoOpDpEvent)   # nothing was recorded


def test_poisson_inner_event_unsupported_names_the_sub_event():
  bad = ev.PoissonSampledDpEvent(0.1, ev.RandomizedResponseDpEvent(0.5, 2))
  with pytest.raises(UnsupportedEventError, match="RandomizedResponseDpEvent"):
    PLDAccountant().compose(bad)


def test_events_check_their_fields():
  with pytest.raises(ValueError, match="num_selected"):
    ev.RandomAllocationDpEvent(noise_multiplier=1.0, steps_per_epoch=4, num_selected=5)
  with pytest.raises(ValueError, match="eps0"):
    ev.ShuffleDpEvent(n=10, eps0="1")
  with pytest.raises(ValueError, match="exactly one"):
    ev.ShuffledCheckInDpEvent(n=10, p=0.5)
  with pytest.raises(ValueError, match="delta"):
    ev.EpsilonDeltaDpEvent(1.0, 1.5)


def test_nonprivate_and_noop():
  acc = PLDAccountant().compose(ev.NoOpDpEvent())
  assert acc.get_epsilon(1e-5) == 0.0 and acc.get_delta(0.0) == 0.0
  acc.compose(ev.GaussianDpEvent(0.0))
  assert acc.get_epsilon(1e-5) == math.inf and acc.get_delta(1.0) == 1.0


def test_regrid_keeps_the_direction_of_the_bound():
  # a PLDDpEvent on step 1e-4 composed once by an accountant on 3.7e-4: the
  # accountant re-discretises both PLDs (pessimistic by connect-the-dots,
  # optimistic by rounding down), so the upper can only rise, the lower fall
  up = jpld.gaussian(1.0, step=1e-4)
  lo = jpld.gaussian(1.0, step=1e-4, pessimistic=False)
  eps = np.array([0.0, 0.3, 1.0, 2.5])
  acc = PLDAccountant(None, 3.7e-4).compose(ev.PLDDpEvent(upper=up, lower=lo, name="g"))
  up3, lo3 = (pair.remove for pair in acc.composed_plds())
  assert up3.step == pytest.approx(3.7e-4, rel=1e-12) and not lo3.pessimistic
  assert np.all(np.asarray(jpld.delta(up3, eps)) >= np.asarray(jpld.delta(up, eps)))
  assert np.all(np.asarray(jpld.delta(lo3, eps)) <= np.asarray(jpld.delta(lo, eps)))


def test_pld_event_on_another_grid_is_regridded():
  sigma, T = 3.0, 6
  ev_pld = ev.PLDDpEvent(upper=jpld.gaussian(sigma, step=2.5e-4),
                         lower=jpld.gaussian(sigma, step=2.5e-4, pessimistic=False),
                         name="gaussian as PLD")
  r = PLDAccountant().compose(ev_pld, T).get_epsilon_bounds(1e-6)
  exact = _gauss_eps(math.sqrt(T) / sigma, 1e-6)
  # the optimistic input was rounded down at 2.5e-4 (first order): the
  # bracket is valid and ~T * 1.25e-4 wide (measured 7.5e-4)
  assert r.lower <= exact <= r.epsilon and r.epsilon - r.lower < 2e-3
  with pytest.raises(ValueError, match="value_discretization_interval"):
    PLDAccountant(None, "1e-4")


def test_from_profile_of_the_gaussian_profile():
  # the pair under the exact Gaussian profile composes to (just above) the
  # exact composition: profile grid 2000 points, step 1e-4
  sigma, T = 2.0, 8
  eps = np.concatenate([[0.0], np.geomspace(1e-5, 12.0, 2000)])
  d = np.asarray(gaussian_delta(sigma, eps).delta)
  pair = from_profile(eps, d, d, step=1e-4)
  c = jpld.compose(pair.remove, T)
  exact = _gauss_eps(math.sqrt(T) / sigma, 1e-6)
  got = float(jpld.epsilon(c, 1e-6))
  assert exact <= got <= exact + 1e-3      # measured +3.4e-6
  # single point: the (eps, delta) pair
  one = from_profile([0.7], [1e-4], step=1e-4)
  # the accountant's (eps, delta) pair (its upper PLD of an EpsilonDeltaDpEvent)
  ref = PLDAccountant(None, 1e-4).compose(ev.EpsilonDeltaDpEvent(0.7, 1e-4)).composed_plds()[0]
  for e in (0.0, 0.35, 0.7, 1.0):
    assert float(jpld.delta(one.remove, e)) == pytest.approx(
        float(jpld.delta(ref.remove, e)), rel=1e-9, abs=1e-15)


def _gaussian_profile_scipy(mu, eps):
  # delta(eps) of N(mu, 1) against N(0, 1) (Balle & Wang, arXiv:1805.06530v2, Thm 8),
  # in log space (scipy.special.log_ndtr): finite past e^eps's overflow at 709.8
  from scipy.special import log_ndtr
  a = np.exp(log_ndtr(-eps / mu + mu / 2))
  b = np.exp(eps + log_ndtr(-eps / mu - mu / 2))
  return np.clip(a - b, 0.0, 1.0)


def test_from_profile_past_exp_overflow_still_dominates():
  # sigma 0.03 (mu = 33.3): the profile runs to eps ~ 900 nats, past 709.8 where
  # gamma = e^eps overflows; the pair must lie above the closed-form profile
  # (Balle & Wang, computed in log space here) at every eps, past 700 nats too.
  mu = 1.0 / 0.03
  eps = np.arange(0.0, 1000.0, 0.5)
  d = _gaussian_profile_scipy(mu, eps)
  assert d[eps == 705.0][0] > 1e-6       # the profile is far from 0 past the overflow
  pair = from_profile(eps, d, d, step=1e-2)
  for e in (1.0, 100.0, 500.0, 650.0, 699.5, 705.0, 720.0, 800.0):
    got = float(jpld.delta(pair.remove, e))
    assert got >= float(_gaussian_profile_scipy(mu, np.array([e]))[0]) * (1 - 1e-9), e


@pytest.mark.parametrize("eps0", [705.0, 720.0, 800.0])
def test_epsilon_delta_event_past_exp_overflow(eps0):
  # eps0 past e^eps0's overflow at 709.8; the exact epsilon at delta > delta0 of the
  # (eps0, delta0) pair (Kairouz, Oh, Viswanath, arXiv:1311.0776v4, Thm 3.4; closed
  # form, mass 1 - delta0 at +-eps0): eps0 + log1p((delta0 - delta) / (1 - delta0)) up
  # to e^-eps0
  d0, delta = 1e-6, 1e-5
  exact = eps0 + math.log1p((d0 - delta) / (1.0 - d0))
  r = PLDAccountant().compose(ev.EpsilonDeltaDpEvent(eps0, d0)).get_epsilon_bounds(delta)
  assert r.lower <= exact <= r.epsilon <= exact + 1e-3


def test_dominated_on_grid_is_second_order():
  # exact Gaussian lower PLD vs rounding down: 1000-fold composition
  # the accountant's lower (dominated) PLD of one Gaussian mechanism
  lo = PLDAccountant(None, 1e-4).compose(ev.GaussianDpEvent(30.0)).composed_plds()[1].remove
  c = jpld.compose(lo, 1000)
  exact = _gauss_eps(math.sqrt(1000) / 30.0, 1e-5)
  got = float(jpld.epsilon(c, 1e-5))
  assert got <= exact and exact - got < 1e-5   # rounding down loses ~0.05


def test_tpr_and_gdp_of_a_composed_gaussian():
  sigma, T = 3.0, 4
  mu = math.sqrt(T) / sigma
  acc = PLDAccountant().compose(ev.GaussianDpEvent(sigma), T)
  fpr = np.array([1e-4, 1e-3, 0.01, 0.1, 0.5])
  tr = acc.tpr_at_fpr(fpr)
  exact = stats.norm.cdf(stats.norm.ppf(fpr) + mu)
  assert np.all(tr.lower <= exact) and np.all(exact <= tr.upper)
  # measured max gap 2.2e-6; allow 1e-4
  assert np.max(tr.upper - tr.lower) < 1e-4
  g = acc.gdp_mu()
  assert g.lower <= mu <= g.mu and g.mu - g.lower < 1e-3 * mu


def test_state_dict_round_trip_through_json():
  base = jpld.gaussian(4.0, step=1e-4)
  acc = PLDAccountant(NR.REPLACE_SPECIAL)
  acc.compose(ev.GaussianDpEvent(8.0), 3)
  acc.compose(ev.EpsilonDeltaDpEvent(0.2, 1e-9), 2)
  acc.compose(ev.ShuffleDpEvent(n=50, eps0=0.5, randomizer=("k_rr", 3)))
  acc.compose(ev.PLDDpEvent(upper=base, name="custom"))
  acc.compose(ev.PoissonSampledDpEvent(0.2, ev.GaussianDpEvent(1.5)), 4)
  sd = json.loads(json.dumps(acc.state_dict()))
  new = PLDAccountant(NR.REPLACE_SPECIAL).load_state_dict(sd)
  assert new.get_epsilon(1e-6) == pytest.approx(acc.get_epsilon(1e-6), rel=1e-12)
  assert [n for _, n in new.events] == [3, 2, 1, 1, 4]
  with pytest.raises(ValueError, match="settings"):
    PLDAccountant().load_state_dict(sd)
  bad = dict(sd, events=[{"event": {"event": "os.system", "fields": {}}, "count": 1}])
  with pytest.raises(ValueError, match="refusing"):
    PLDAccountant(NR.REPLACE_SPECIAL).load_state_dict(bad)
  assert new.get_epsilon(1e-6) == pytest.approx(acc.get_epsilon(1e-6), rel=1e-12)


def test_state_dict_names_the_events_public_module():
  # issue 46: the event types moved to jaxacct._core.events; saved states name their
  # public module, and states naming the former home of the stand-ins still load
  sd = PLDAccountant().compose(ev.EpsilonDeltaDpEvent(0.2, 1e-9), 2).state_dict()
  assert sd["events"][0]["event"]["event"] == "jaxacct.accounting.events.EpsilonDeltaDpEvent"
  old = json.loads(json.dumps(PLDAccountant().compose(ev.GaussianDpEvent(8.0)).state_dict()))
  old["events"][0]["event"]["event"] = "jaxacct.accounting._optional.GaussianDpEvent"
  new = PLDAccountant().load_state_dict(old)
  assert list(new.events) == [(ev.GaussianDpEvent(8.0), 1)]


def test_would_exceed_does_not_change_the_accountant():
  acc = PLDAccountant().compose(ev.GaussianDpEvent(4.0), 2)
  before = acc.get_epsilon(1e-5)
  big = ev.GaussianDpEvent(1.0)
  assert acc.would_exceed(big, max_epsilon=before + 0.5, delta=1e-5)
  assert not acc.would_exceed(ev.GaussianDpEvent(100.0), max_epsilon=before + 0.5,
                              delta=1e-5)
  assert acc.get_epsilon(1e-5) == before and len(acc.events) == 1


def test_check_in_goes_through_the_rdp_fallback():
  from jaxacct import shuffle as check_in
  n, p, eps0, T = 1000, 0.5, 1.0, 5
  acc = PLDAccountant(NR.REPLACE_ONE).compose(
      ev.ShuffledCheckInDpEvent(n=n, p=p, eps0=eps0), T)
  r = acc.get_epsilon_bounds(1e-6)
  direct = float(check_in.check_in_epsilon(n=n, p=p, eps0=eps0, delta=1e-6,
                                           rounds=T).epsilon)
  assert r.method == "pld+rdp" and r.details["rdp_fallback"]
  # the pair lies under the RDP profile sampled on 8000 linear eps points and
  # interpolates linearly in e^eps between them: the direct conversion plus a
  # second-order grid term (measured +1.1e-5), not far below it either
  assert direct - 0.05 <= r.epsilon <= direct + 1e-4
  assert r.lower == 0.0            # no lower bound for check-in
  mixed = acc.copy().compose(ev.GaussianDpEvent(10.0), 10)
  assert mixed.get_epsilon(1e-6) > r.epsilon


def test_zcdp_event():
  # rho-zCDP with rho = 1/(2 sigma^2) is the Gaussian's RDP: through the RDP
  # fallback the epsilon is >= the exact Gaussian one and <= its RDP conversion
  sigma = 3.0
  acc = PLDAccountant().compose(ev.ZCDpEvent(0.5 / sigma**2), 4)
  exact = _gauss_eps(2.0 / sigma, 1e-6)
  orders = np.arange(2, 257, dtype=np.float64)   # the accountant's RDP fallback orders
  rdp_eps = float(jaxacct.mechanisms.rdp_to_epsilon(orders, 4 * orders / (2 * sigma**2), 1e-6).epsilon)
  # (measured: rdp_eps + 3.9e-6, the profile grid term; exact is 0.39 lower)
  assert exact <= acc.get_epsilon(1e-6) <= rdp_eps + 1e-4


def test_event_tracker_equals_the_accountant():
  import jax.numpy as jnp
  import optax
  from jaxacct import tracking
  e = ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.2))
  h = 1e-3      # a coarse grid keeps the test fast; equality is what matters
  tr = tracking.EventAccountant(e, value_discretization_interval=h)
  tab = tracking.epsilon_table(tr, num_steps=6, delta=1e-5)
  # every count is composed at the largest count's FFT length (one program):
  # the largest equals the accountant exactly, the others to a longer window's
  # aliasing (measured 5e-13 relative; docstring: ~1e-10)
  for T in (1, 3, 6):
    direct = PLDAccountant(None, h).compose(e, T).get_epsilon(1e-5)
    assert tab[T] == (direct if T == 6 else pytest.approx(direct, rel=1e-9, abs=0.0))
  tx = tracking.track_privacy(tr, num_steps=6, delta=1e-5)
  st = tx.init(jnp.zeros(2))
  for _ in range(3):
    _, st = tx.update(jnp.ones(2), st)
  eps3 = float(optax.tree.get(st, "eps"))
  assert tab[3] <= eps3 <= tab[3] * (1 + 2.4e-7)   # float32, rounded up
  # coarse evaluation: exact at evaluated counts, never below in between
  tr2 = tracking.EventAccountant(e, value_discretization_interval=h,
                                 max_evaluations=5)
  counts = tr2.evaluated_counts(9)
  assert counts.tolist() == [1, 2, 3, 5, 9]
  tab2 = tracking.epsilon_table(tr2, num_steps=9, delta=1e-5)
  for T in (4, 5, 9):
    direct = PLDAccountant(None, h).compose(e, T).get_epsilon(1e-5)
    assert tab2[T] >= direct * (1 - 1e-9)
    assert T == 4 or tab2[T] == (direct if T == 9 else pytest.approx(direct, rel=1e-9, abs=0.0))
  assert tab2[4] == tab2[5]


def test_without_dp_accounting_in_a_subprocess():
  code = r"""
import sys
sys.modules["dp_accounting"] = None          # import fails: not installed
import jaxacct
from jaxacct.accounting import PLDAccountant, events as ev
# without dp_accounting the accountant's base is jaxacct's own (not dp_accounting's)
assert not any(c.__module__.startswith("dp_accounting") for c in PLDAccountant.__mro__)
acc = PLDAccountant(None, 1e-3).compose(ev.ComposedDpEvent([
    ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(2.0)), 3),
    ev.EpsilonDeltaDpEvent(0.1, 0.0)]))
# the stand-ins are saved under their public module, and load back
sd = acc.state_dict()
assert sd["events"][0]["event"]["event"] == "jaxacct.accounting.events.ComposedDpEvent", sd
assert PLDAccountant(None, 1e-3).load_state_dict(sd).get_epsilon(1e-5) == acc.get_epsilon(1e-5)
print(repr(acc.get_epsilon(1e-5)))
print(type(acc.ledger).__name__)
"""
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  eps, ledger = out.stdout.split()
  ref = PLDAccountant(None, 1e-3).compose(ev.ComposedDpEvent([
      ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(2.0)), 3),
      ev.EpsilonDeltaDpEvent(0.1, 0.0)])).get_epsilon(1e-5)
  assert float(eps) == ref and ledger == "ComposedDpEvent"


def test_state_dict_records_the_truncated_and_shortcuts_switches():
  # A ledger saved with truncated="dp_accounting" (their looser construction)
  # must not load into a default accountant, which would report a different
  # (tighter) epsilon for the same events; old states without the keys read
  # as the defaults.
  ev_t = ev.GaussianDpEvent(2.0)
  acc = PLDAccountant(truncated="dp_accounting", shortcuts=False).compose(ev_t, 2)
  sd = json.loads(json.dumps(acc.state_dict()))
  assert sd["truncated"] == "dp_accounting" and sd["shortcuts"] is False
  with pytest.raises(ValueError, match="truncated, shortcuts"):
    PLDAccountant().load_state_dict(sd)
  same = PLDAccountant(truncated="dp_accounting", shortcuts=False).load_state_dict(sd)
  assert same.get_epsilon(1e-6) == acc.get_epsilon(1e-6)
  old = {k: v for k, v in PLDAccountant().compose(ev_t).state_dict().items()
         if k not in ("truncated", "shortcuts")}
  assert PLDAccountant().load_state_dict(old).events == ((ev_t, 1),)
