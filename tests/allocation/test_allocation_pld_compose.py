"""k-of-t allocation over E epochs through the jitted fixed-grid composition.

jaxacct.allocation.pld composes the Lemma 3.2 rounds (Feldman & Shenfeld,
arXiv:2502.08202v3: (k - rho) E rounds of 1-of-floor(t/k), rho E rounds of
1-of-(floor(t/k) + 1)) on a loss lattice inside jit. Oracles:

* exact enumeration of the composed rounds of randomized response
  (Kairouz et al., arXiv:1311.0776v4 Thm 3.4): the ratio of a 1-of-t round is
  S/t = (j e^eps0 + (t - j) e^-eps0) / t, j ~ Bin(t, 1/(1 + e^eps0)) under Q,
  and the composition multiplies independent ratios (products enumerated);
* the eager composition of the same rounds' PLDs by jaxacct.pld
  (tests/allocation/allocation_pld_oracle.py: each round's connect-the-dots upper and
  rounded-down lower PLDs, FFT ``compose_many``), an independent code path
  (its lower is first order in the step, ours second order); the PLD export
  ``allocation_plds`` (this engine's window as PLDs) is held against it and
  against the doors;
* the identities of Lemma 3.2 (k-of-(k f) = k epochs of 1-of-f) and of the
  k = E = 1 path (no lattice), and monotonicity in sigma and in E.

Default tests share grid_size 256 and composition_size 4096 (a few compiles).
"""

import itertools
import math

import numpy as np
import pytest
from scipy.special import gammaln

import jaxacct
from jaxacct import pld as jpld
from jaxacct.accounting import events
from jaxacct.allocation import pld
from allocation_pld_oracle import eager_allocation_plds

N = 256
M = 4096
KW = dict(grid_size=N, composition_size=M)


def _rr_round(t, eps0=1.0):
  """Atoms (ratio, Q-mass) of one 1-of-t round of RR(eps0) (exact)."""
  qa = 1.0 / (1.0 + math.exp(eps0))
  j = np.arange(t + 1)
  w = np.exp(gammaln(t + 1) - gammaln(j + 1) - gammaln(t - j + 1) + j * math.log(qa)
             + (t - j) * math.log1p(-qa))
  return (j * math.exp(eps0) + (t - j) * math.exp(-eps0)) / t, w


def _rr_composed_exact(t, k, E, eps):
  """(remove, add) deltas of the Lemma 3.2 rounds of k-of-t RR(1), E epochs."""
  f, rho = divmod(t, k)
  rounds = [_rr_round(f)] * ((k - rho) * E) + [_rr_round(f + 1)] * (rho * E)
  x, w = np.ones(1), np.ones(1)
  for xs, ws in rounds:
    x = (x[:, None] * xs[None, :]).ravel()
    w = (w[:, None] * ws[None, :]).ravel()
  g = math.exp(eps)
  return float(np.sum(w * np.maximum(x - g, 0.0))), float(np.sum(w * np.maximum(1 - g * x, 0)))


RR_CASES = [(10, 2, 2, 0.3), (11, 2, 2, 0.3), (6, 3, 3, 0.8), (10, 2, 2, 1.5),
            (11, 2, 2, 1.2), (6, 3, 3, 0.0), (4, 1, 3, 0.5), (7, 7, 2, 0.4)]


def test_randomized_response_composed_exact_enumeration():
  # RR as an exact PLD (step eps0): one call for 8 lanes mixing one and two
  # round types (t mod k = 0 and != 0), k = t (rounds of 1-of-1) and E > 1.
  t, k, E, e = map(np.array, zip(*RR_CASES))
  r = pld.allocation_pld_delta(mechanism=jpld.randomized_response(1.0), steps_per_epoch=t,
                               num_selected=k, num_epochs=E, epsilon=e, **KW)
  for i, c in enumerate(RR_CASES):
    rem, add = _rr_composed_exact(*c)
    (ru, rl), (au, al) = [(float(u[i]), float(lo[i])) for u, lo in
                          (r.by_direction["remove"], r.by_direction["add"])]
    assert rl <= rem <= ru, (c, rl, rem, ru)
    assert al <= add <= au, (c, al, add, au)
    # measured gaps (N = 256, M = 4096) are below 2e-3 relative; 1e-2 allowed
    assert ru - rl <= 1e-2 * rem + 1e-12 and au - al <= 1e-2 * add + 1e-12, (c, rl, ru, al, au)
    assert float(r.upper[i]) == max(ru, au) and float(r.lower[i]) == max(rl, al)


# One 16-lane epsilon call serves the Gaussian tests below (one compile):
# (sigma, t, k, E) lanes; delta = 1e-6 except where noted.
LANES = [
    (2.0, 100, 10, 1), (1.0, 23, 5, 2),                  # 0-1: eager-oracle cases
    (1.2, 60, 3, 1), (1.2, 20, 1, 3),                    # 2-3: Lemma 3.2 identity
    (0.8, 51, 2, 1), (0.8, 51, 2, 2), (0.8, 51, 2, 4),   # 4-12: sigma x E grid
    (1.0, 51, 2, 1), (1.0, 51, 2, 2), (1.0, 51, 2, 4),
    (1.5, 51, 2, 1), (1.5, 51, 2, 2), (1.5, 51, 2, 4),
    (0.9, 40, 1, 3), (2.0, 100, 10, 1), (3.0, 7, 7, 5),  # 13-15: misc (14 = 0, delta 1e-7)
]
DELTAS = np.array([1e-6] * 14 + [1e-7, 1e-6])


@pytest.fixture(scope="session")  # built once per worker (see conftest.py)
def eps_batch():
  s, t, k, E = map(np.array, zip(*LANES))
  return pld.allocation_pld_epsilon(sigma=s, steps_per_epoch=t, num_selected=k, num_epochs=E,
                                    delta=DELTAS, tail=1e-13, **KW)


def test_gaussian_composition_agrees_with_eager_oracle(eps_batch):
  # sigma = 2, 10 of 100 (10 rounds of 1-of-10) and sigma = 1, 5 of 23
  # (2 x 1-of-4 + 3 x 1-of-5, two epochs): our bracket and the eager one
  # (the eager oracle: same round laws, CtD / rounded-down PLDs at step 1e-3,
  # compose_many) intersect; the uppers agree to a tenth of the eager
  # bracket's width (measured: < 5e-6 absolute); our lower is tighter.
  for i in (0, 1):
    sg, tt, kk, ee = LANES[i]
    P = eager_allocation_plds(sigma=sg, steps_per_epoch=tt, num_selected=kk, num_epochs=ee,
                              grid_size=N, tail=1e-13, composition_step=1e-3)
    ou = max(float(jpld.epsilon(P[0], 1e-6)), float(jpld.epsilon(P[1], 1e-6)))
    ol = max(float(jpld.epsilon(P[2], 1e-6)), float(jpld.epsilon(P[3], 1e-6)))
    u, lo = float(eps_batch.upper[i]), float(eps_batch.lower[i])
    assert lo <= u and ol <= ou
    assert lo <= ou and ol <= u, (LANES[i], lo, u, ol, ou)
    assert abs(u - ou) <= 0.1 * (ou - ol), (LANES[i], u, ou, ol)
    assert lo >= ol - 1e-9, (LANES[i], lo, ol)


# The export (allocation_plds: this engine's composed window as PLDs) against
# the eager oracle and the doors, on the rounds' laws both build (grid N,
# tail 1e-13): (sigma, t, k, E, delta, mechanism); two round types, Laplace,
# a PLD mechanism.
EXPORT_CASES = [(1.0, 23, 5, 2, 1e-6, "gaussian"), (2.0, 30, 1, 3, 1e-8, "laplace"),
                (None, 10, 1, 2, 1e-5, "rr")]


@pytest.mark.parametrize("case", EXPORT_CASES)
def test_export_against_eager_oracle_and_door(case):
  sg, tt, kk, ee, d, mech = case
  step = 1e-4
  kw = dict(sigma=sg, steps_per_epoch=tt, num_selected=kk, num_epochs=ee, grid_size=N, tail=1e-13,
            mechanism=jpld.randomized_response(1.0) if mech == "rr" else mech)
  P = pld.allocation_plds(composition_step=step, **kw)
  O = eager_allocation_plds(composition_step=step, **kw)
  r = pld.allocation_pld_epsilon(delta=d, **kw)
  eps = lambda a, b, rnd, q=d: float(jpld.epsilon(jpld.PairPLD(a, b), q, rounding=rnd))
  up, lo = eps(P.remove_upper, P.add_upper, "up"), eps(P.remove_lower, P.add_lower, "down")
  ou, ol = eps(*O[:2], "up"), eps(*O[2:], "down")
  du, dl = float(r.upper), float(r.lower)
  assert lo <= dl <= du <= up + 1e-6 * du, (case, lo, dl, du, up)   # door: same laws
  assert abs(up - ou) <= 1e-5 * ou and lo >= ol - step, (case, up, ou, lo, ol)
  for q in (1e-3, 1e-10):   # every delta: the same PLD (measured gaps < 4e-6)
    a, b = eps(P.remove_upper, P.add_upper, "up", q), eps(*O[:2], "up", q)
    assert abs(a - b) <= 1e-5 * b, (case, q, a, b)


def test_lemma_3_2_identity_monotone_and_directions(eps_batch):
  u, lo = np.asarray(eps_batch.upper), np.asarray(eps_batch.lower)
  assert np.all(np.isfinite(u)) and np.all(u >= lo)
  # 3 of 60 is exactly 3 epochs of 1-of-20 (same rounds, same lattice)
  np.testing.assert_allclose([u[2], lo[2]], [u[3], lo[3]], rtol=1e-12)
  # decreasing in sigma, increasing in E; composed brackets are second order
  # (measured upper/lower < 1.003 at N = 256)
  g, gl = u[4:13].reshape(3, 3), lo[4:13].reshape(3, 3)
  assert np.all(np.diff(g, axis=0) < 0) and np.all(np.diff(g, axis=1) > 0)
  assert np.all(np.diff(gl, axis=0) < 0) and np.all(np.diff(gl, axis=1) > 0)
  assert np.all(u / lo < 1.01), u / lo
  # smaller delta, larger epsilon; max over the directions
  assert u[14] > u[0] and lo[14] > lo[0]
  ru, au = (np.asarray(eps_batch.by_direction[d][0]) for d in ("remove", "add"))
  np.testing.assert_array_equal(u, np.maximum(ru, au))
  assert eps_batch.bound == "upper" and eps_batch.method == "allocation_pld"


def test_broadcast_shapes(eps_batch):
  # sigma (3, 1) x num_epochs (1, 3), scalars elsewhere: one call (16 padded
  # lanes, the same compiled kernels), equal to lanes 4-12 of the batch.
  r = pld.allocation_pld_epsilon(sigma=np.array([[0.8], [1.0], [1.5]]), steps_per_epoch=51,
                                 num_selected=2, num_epochs=np.array([[1, 2, 4]]),
                                 delta=1e-6, tail=1e-13, **KW)
  assert np.shape(r.upper) == (3, 3) and np.shape(r.by_direction["add"][1]) == (3, 3)
  np.testing.assert_array_equal(np.asarray(r.upper).ravel(), np.asarray(eps_batch.upper)[4:13])
  np.testing.assert_array_equal(np.asarray(r.lower).ravel(), np.asarray(eps_batch.lower)[4:13])


def test_epsilon_and_delta_front_doors_agree(eps_batch):
  # Same round laws (same tail): delta_up(eps_up(delta)) ~ delta and
  # delta_lo(eps_lo(delta)) ~ delta; the two modes differ only in the
  # lattice window, the tail cuts and the tilts (measured: < 2e-5 relative;
  # 1e-3 allowed). (With default tails they differ more: delta queries cut
  # the rounds' laws at 1e-20 / (k E), epsilon queries at 1e-5 delta / (k E).)
  s, t, k, E = map(np.array, zip(*LANES))
  for key in ("remove", "add"):
    for side in (0, 1):
      e = np.asarray(eps_batch.by_direction[key][side])
      d = pld.allocation_pld_delta(sigma=s, steps_per_epoch=t, num_selected=k, num_epochs=E,
                                   epsilon=e, tail=1e-13, **KW)
      got = np.asarray(d.by_direction[key][side])
      ok = e > 0      # eps = 0 lanes: delta(0) <= delta only
      np.testing.assert_allclose(got[ok], DELTAS[ok], rtol=1e-3, err_msg=(key, side))


def test_bad_composition_arguments():
  base = dict(sigma=1.0, delta=1e-6, steps_per_epoch=10, num_epochs=2)
  for kw in (dict(composition_size=1000), dict(composition_size=128),
             dict(composition_size="4096"), dict(num_selected=11),
             dict(num_selected=np.array([2, 11]))):
    with pytest.raises(ValueError):
      pld.allocation_pld_epsilon(**{**base, **kw})


@pytest.mark.slow
def test_calibration_issue_17_setting():
  # Issue 17: N = 60,000, B = 256 (t = 234), E = 10, delta = 1e-5, epsilon = 3.
  # The calibrated sigma (measured 0.68361) is certified and within 0.1 % of
  # the smallest sigma whose tight upper epsilon meets 3; through the one
  # calibrator on the allocation event (this module's programs).
  s = float(jaxacct.calibrate(
      lambda x: events.RandomAllocationDpEvent(noise_multiplier=x, steps_per_epoch=234, num_epochs=10),
      3.0, 1e-5, bracket=(0.3, 50.0)))
  assert 0.680 < s < 0.688
  ev = lambda x: np.asarray(pld.allocation_pld_epsilon(sigma=x, delta=1e-5, steps_per_epoch=234,
                                                       num_epochs=10).upper)
  e = ev(np.array([s, s / 1.001]))
  assert e[0] <= 3.0 < e[1], e


@pytest.mark.slow
def test_dp_accounting_event_value_setting():
  # sigma = 2, k = 10, t = 100, delta = 1e-6 (dp_accounting's random-allocation
  # event test, unreleased value 2.4265 as recorded in issue 17): our upper is
  # below it; our upper inside the eager bracket ([2.4232, 2.4246], issue 17). The
  # lower sums run on the 2x coarser lattice since (tests/allocation/test_lower_coarse.py): a
  # certified lower within 2e-3 below the exact-lattice one (2.42366 then, 2.42299
  # now, 2026-11-25).
  r = pld.allocation_pld_epsilon(sigma=2.0, steps_per_epoch=100, num_selected=10, delta=1e-6,
                                 num_epochs=1)
  u, lo = float(r.upper), float(r.lower)
  assert lo <= u <= 2.4265
  assert 2.42366 * (1 - 2e-3) <= lo <= 2.42366 and 2.4232 <= u <= 2.4247


def test_accelerator_powering_runs_static_masked_levels(x64):
  """The composition's binary powering (``tilted_fft.ipow``) on the
  accelerator layout: a static count of masked levels
  (``Namespace.with_max_trips``, 21 = the bit length of the doors' cap
  num_selected * num_epochs <= 2**20) in place of a loop whose trip count is
  decided per lane at run time. Vmapped over lanes of counts 0 .. 2**21 - 1
  it is bit for bit the run-time loop (np.array_equal); its optimised HLO
  holds no while loop of unknown trip count (the run-time loop's holds one);
  a count past 2**21 - 1 gives NaN, never a short power."""
  import os
  import sys

  import jax
  import jax.numpy as jnp
  from jaxacct._core import tilted_fft
  from jaxacct._core.namespace import JAX
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  import hlo_loops

  rng = np.random.default_rng(3)
  counts = np.array([0, 1, 2, 3, 7, 234, 2340, 4095, 23400, (1 << 20) - 1, 1 << 20,
                     (1 << 21) - 1], np.float64)
  z = rng.uniform(-1, 1, (counts.size, 6, 33)) + 1j * rng.uniform(-1, 1, (counts.size, 6, 33))
  z = z / np.maximum(np.abs(z), 1.0)
  z[:, 0, :3] = [0.0, 1.0, -1.0]
  masked = JAX.with_max_trips(21)
  run = {name: jax.jit(jax.vmap(lambda z, c, ns=ns: tilted_fft.ipow(z, c, ns)))
         for name, ns in (("loop", JAX), ("masked", masked))}
  got = {k: np.asarray(f(jnp.asarray(z), jnp.asarray(counts))) for k, f in run.items()}
  assert np.array_equal(got["masked"], got["loop"])
  assert np.all(np.isfinite(got["masked"]))
  texts = {k: f.lower(jnp.asarray(z), jnp.asarray(counts)).compile().as_text()
           for k, f in run.items()}
  assert [n for _, n in hlo_loops.while_loops(texts["masked"]) if n is None] == []
  assert [n for _, n in hlo_loops.while_loops(texts["loop"]) if n is None] == [None]
  far = np.asarray(run["masked"](jnp.asarray(z[:2]), jnp.asarray([float(1 << 21), 5.0])))
  assert np.all(np.isnan(far[0]))
  np.testing.assert_array_equal(far[1], np.asarray(run["loop"](jnp.asarray(z[:2]),
                                                               jnp.asarray([3.0, 5.0])))[1])


def test_composed_sweep_on_threads_equals_its_chunks():
  """A composed sweep (k E = 10 > 1: the laws and the composition, two stages)
  of 256 sigmas runs two chunks of 128 lanes on one thread per core, the
  stages in the scheduler's order (the last chunk's laws before the query
  ahead of it); each lane's values are bit for bit those of the chunk run
  alone in one call with no threads: the order of the stages on the threads
  never moves a value, and the chunks come back in order."""
  # the default grid: every chunk's bracket within SWEEP_BRACKET (no rerun with
  # the host settings, whose 2**15 lattice would cost more than the rest)
  s = np.geomspace(0.8, 3.0, 256)
  kw = dict(steps_per_epoch=234, num_epochs=10, delta=1e-5)
  whole = pld.allocation_pld_epsilon(sigma=s, **kw)
  parts = [pld.allocation_pld_epsilon(sigma=s[i:i + 128], **kw) for i in (0, 128)]
  for d in ("remove", "add"):
    for j in range(2):
      np.testing.assert_array_equal(whole.by_direction[d][j],
                                    np.concatenate([p.by_direction[d][j] for p in parts]))
  assert np.all(np.isfinite(whole.epsilon)) and np.all(whole.lower > 0)
  assert np.all(whole.epsilon >= whole.lower)
