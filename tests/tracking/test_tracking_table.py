"""The per-step epsilon table of jaxacct.tracking (issue 44).

Oracles: ``PLDAccountant(...).compose(event, n).get_epsilon(delta)`` step by
step (the accountant the table reports); a direct, FFT-free convolution of
the accountant's per-event PLD pair (``np.convolve``: sums of non-negative
terms, relatively exact); bisection on the accountant for the budget
crossing; and, for a step inside a balls-in-bins epoch, the prefix's
hockey-stick divergences integrated from the densities of the released
outputs (one coordinate in closed form, the other by ``scipy.integrate.quad``).

Tolerances (each with its reason):

* every table entry and the accountant: rel 1e-12 (issue 44's criterion; the
  accountant answers one event repeated with the table's engine, and a count's
  number does not depend on the others asked: measured equal to the last bit
  for Poisson, shuffling and the closed form; allocation epoch ends are the
  accountant's own calls);
* direct convolution: rel 1e-11 (the engine's own round-off; the FFT
  composition of ``jaxacct.pld.compose`` is 8.5e-7 high at delta = 1e-10 there).
"""

import json
import math
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from jaxacct import pld as jpld
from jaxacct import tracking
from jaxacct.accounting import NeighboringRelation, PLDAccountant, events as ev

DELTA = 1e-5


def _poisson(q, sigma, h):
  return tracking.EventAccountant(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(sigma)),
                                  value_discretization_interval=h, progress=False)


def _against_accountant(acc, steps, counts, rel):
  tab = tracking.epsilon_table(acc, num_steps=steps, delta=DELTA)
  assert tab[0] == 0.0 and np.all(np.diff(tab) >= 0)
  ref = np.array([acc.epsilon_after(int(c), DELTA) for c in counts])
  np.testing.assert_allclose(tab[counts], ref, rtol=rel, atol=0.0)
  return tab


def test_poisson_table_is_the_accountant_step_by_step(x64):
  counts = np.concatenate([np.arange(1, 41), [57, 100, 171, 300]])
  _against_accountant(_poisson(0.02, 0.9, 1e-3), 300, counts, 1e-12)


@pytest.mark.slow
def test_poisson_table_every_step_to_300_and_sampled_to_10000(x64):
  # the run (q = 256/60000, sigma = 1, dp_accounting's grid 1e-4)
  acc = _poisson(256 / 60000, 1.0, 1e-4)
  counts = np.unique(np.concatenate([np.arange(1, 301),
                                     np.geomspace(301, 10_000, 40).astype(int)]))
  tab = _against_accountant(acc, 10_000, counts, 1e-12)
  # issue 44's rows: 0.29077 at 100, 0.53350 at 500, 0.79286 at 1200 (the old
  # grid charged 0.38113, 0.74742, 1.09993)
  np.testing.assert_allclose(tab[[100, 500, 1200]], [0.29077, 0.53350, 0.79286], atol=5e-6)


@pytest.mark.parametrize("delta", [1e-5, 1e-10])
def test_table_equals_a_direct_convolution(x64, delta):
  # The accountant's per-step pair, convolved 2 and 3 times without FFT.
  # (replace-one neighbours: the general path, whose per-step pair composed_plds gives)
  event = ev.PoissonSampledDpEvent(0.02, ev.GaussianDpEvent(0.9))
  rel = NeighboringRelation.REPLACE_ONE
  acc = tracking.EventAccountant(event, neighboring_relation=rel,
                                 value_discretization_interval=1e-3, progress=False)
  tab = tracking.epsilon_table(acc, num_steps=4, delta=delta)
  pair = PLDAccountant(rel, 1e-3).compose(event).composed_plds()[0]
  for n in (2, 3):
    eps = []
    for p in pair:
      probs, conv = np.asarray(p.probs, np.float64), np.asarray(p.probs, np.float64)
      for _ in range(n - 1):
        conv = np.convolve(conv, probs)
      inf = -math.expm1(n * math.log1p(-float(p.inf_mass)))
      eps.append(float(jpld.epsilon(jpld.PLD(conv, n * int(p.offset), 1e-3, inf, True), delta)))
    assert tab[n] == pytest.approx(max(eps), rel=1e-11, abs=0.0)


def test_full_batch_table_is_the_closed_form(x64):
  acc = tracking.EventAccountant(ev.GaussianDpEvent(2.0), progress=False)
  counts = np.concatenate([np.arange(1, 31), [64, 155, 300]])
  _against_accountant(acc, 300, counts, 1e-15)


@pytest.mark.slow
def test_full_batch_every_step_to_300_and_sampled_to_10000(x64):
  acc = tracking.EventAccountant(ev.GaussianDpEvent(2.0), progress=False)
  counts = np.unique(np.concatenate([np.arange(1, 301),
                                     np.geomspace(301, 10_000, 30).astype(int)]))
  _against_accountant(acc, 10_000, counts, 1e-15)


def test_shuffle_rounds_table_is_the_accountant(x64):
  acc = tracking.EventAccountant(ev.ShuffleDpEvent(n=500, eps0=1.0),
                                 neighboring_relation=NeighboringRelation.REPLACE_ONE,
                                 value_discretization_interval=1e-3, progress=False)
  _against_accountant(acc, 20, np.array([1, 2, 3, 4, 5, 20]), 1e-12)


@pytest.mark.slow
def test_shuffle_every_round_to_60_and_sampled_to_300(x64):
  acc = tracking.EventAccountant(ev.ShuffleDpEvent(n=500, eps0=1.0),
                                 neighboring_relation=NeighboringRelation.REPLACE_ONE,
                                 progress=False)
  counts = np.concatenate([np.arange(1, 61), [97, 150, 222, 300]])
  _against_accountant(acc, 300, counts, 1e-12)


def test_ledger_prefix_is_composed_first(x64):
  # events spent before training stay in the accountant's ledger
  led = PLDAccountant(None, 1e-3).compose(ev.GaussianDpEvent(5.0), 3)
  acc = tracking.EventAccountant(ev.PoissonSampledDpEvent(0.02, ev.GaussianDpEvent(0.9)),
                                 accountant=led, progress=False)
  _against_accountant(acc, 50, np.array([1, 2, 7, 50]), 1e-9)


def test_balls_in_bins_epoch_ends_are_the_accountant(x64):
  t, epochs, sigma = 10, 3, 1.2
  acc = tracking.EventAccountant(ev.RandomAllocationDpEvent(noise_multiplier=sigma, steps_per_epoch=t),
                                 block_size=t, progress=False)
  tab = tracking.epsilon_table(acc, num_steps=epochs * t, delta=DELTA)
  # the accountant in a fresh process: its host laws in NumPy's loops (the
  # table's process holds the compiled loops, which its laws then use: the
  # same bits, held here end to end)
  code = ("import sys, json\n"
          "from jaxacct.accounting import PLDAccountant, events as ev\n"
          f"print(json.dumps([PLDAccountant().compose(ev.RandomAllocationDpEvent("
          f"noise_multiplier={sigma!r}, steps_per_epoch={t}, num_epochs=e)).get_epsilon({DELTA!r})"
          f" for e in range(1, {epochs + 1})]))\n")
  run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]
  fresh = json.loads(run.stdout.strip().splitlines()[-1])
  for e in range(1, epochs + 1):
    whole = ev.RandomAllocationDpEvent(noise_multiplier=sigma, steps_per_epoch=t, num_epochs=e)
    assert tab[e * t] == PLDAccountant().compose(whole).get_epsilon(DELTA) == fresh[e - 1]
    part = tab[(e - 1) * t + 1: e * t]
    # inside an epoch: the prefix's bound, below the whole epoch's
    assert np.all(part < tab[e * t]) and np.all(part >= tab[(e - 1) * t])
  assert np.all(np.diff(tab) >= 0)


def _prefix_deltas(eps, sigma, s, t):
  """Brute force: (remove, add) hockey sticks at ``eps`` of the first s of t
  steps of 1-of-t allocation, Gaussian noise sigma, sensitivity 1: P0 =
  N(0, sigma^2 I_s), P1 = (1 - s/t) P0 + (1/t) sum_i N(e_i, sigma^2 I_s).

  With u_i = e^{(y_i - 1/2)/sigma^2} = dN(1, sigma^2)/dN(0, sigma^2), the ratio
  is L = (1 - s/t) + (u_1 + ... + u_s)/t; remove E_P0 (L - e^eps)_+, add
  E_P0 (1 - e^eps L)_+. The last coordinate is integrated in closed form
  (E_P0[u 1{y > c}] = Phi_bar((c - 1)/sigma)), the others by quadrature
  (s <= 2)."""
  ee, b = math.exp(eps), 1.0 / t
  sf, cdf = stats.norm.sf, stats.norm.cdf

  def inner(a):   # E over the last coordinate of (a + b u - e^eps)_+ and (1 - e^eps (a + b u))_+
    c = a - ee
    if c >= 0:
      rem = c + b
    else:
      y = sigma ** 2 * math.log(-c / b) + 0.5       # a + b u(y) = e^eps
      rem = c * sf(y / sigma) + b * sf((y - 1) / sigma)
    c2 = 1 - ee * a
    if c2 <= 0:
      add = 0.0
    else:
      y = sigma ** 2 * math.log(c2 / (ee * b)) + 0.5  # e^eps (a + b u(y)) = 1
      add = c2 * cdf(y / sigma) - ee * b * cdf((y - 1) / sigma)
    return np.array([rem, add])
  a0 = 1.0 - s / t
  if s == 1:
    return tuple(inner(a0))
  kw = dict(limit=400, epsabs=1e-15, epsrel=1e-11)
  lo, hi = -14 * sigma, 14 * sigma + 1
  out = []
  for k in (0, 1):
    f = lambda y, k=k: inner(a0 + b * math.exp((y - 0.5) / sigma ** 2))[k] * stats.norm.pdf(
        y, 0.0, sigma)
    out.append(integrate.quad(f, lo, hi, **kw)[0])
  return tuple(out)


@pytest.mark.parametrize("s", [1, 2])
@pytest.mark.parametrize("delta,sigma", [(1e-3, 1.0), (1e-5, 1.0), (1e-8, 0.5), (1e-10, 0.3)])
def test_partial_epoch_bound_brute_force(x64, s, delta, sigma):
  # After s of t = 3 steps of 1-of-t allocation: a valid bound (the true
  # delta at the table's epsilon is at most delta; measured 0.998 delta), tight
  # to the grid (1e-3 less epsilon is not valid), below the whole epoch's bound.
  # Prefix 1's law is NumPy's, prefix 2's the compiled loops' (shared_upper_laws).
  t = 3
  acc = tracking.EventAccountant(ev.RandomAllocationDpEvent(noise_multiplier=sigma, steps_per_epoch=t),
                                 block_size=t, progress=False)
  tab = tracking.epsilon_table(acc, num_steps=t, delta=delta)
  d_rem, d_add = _prefix_deltas(tab[s], sigma, s, t)
  assert max(d_rem, d_add) <= delta * (1 + 1e-6)
  assert max(_prefix_deltas(tab[s] * (1 - 1e-3), sigma, s, t)) > delta
  assert tab[s] < tab[t]


def test_budget_stop_is_the_accountants_crossing(x64):
  acc = _poisson(0.02, 0.9, 1e-3)
  steps, budget = 300, 1.3
  eps = lambda c: acc.epsilon_after(c, DELTA)
  lo, hi = 1, steps               # bisection: eps(lo) <= budget < eps(hi)
  assert eps(lo) <= budget < eps(hi)
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if eps(mid) <= budget else (lo, mid)
  tx = tracking.track_privacy(acc, num_steps=steps, delta=DELTA, max_epsilon=budget)
  st = tx.init(jnp.zeros(2))
  upd = jax.jit(tx.update)

  def body(st, _):
    u, st = upd(jnp.ones(2), st)
    return st, u[0]
  st, applied = jax.lax.scan(lambda c, x: body(c, x), st, None, length=steps)
  # the update that moves count to hi is the first one masked: on time
  assert int(st.count) == hi - 1 and bool(st.budget_exhausted)
  assert np.all(np.asarray(applied)[:hi - 1] == 1.0) and np.all(np.asarray(applied)[hi - 1:] == 0)
  assert float(st.eps) <= budget
  assert float(st.eps) == pytest.approx(eps(hi - 1), rel=1e-9, abs=0.0)


def test_grid_mode_overstates_between_its_counts(x64):
  # max_evaluations: the cheaper mode; an upper bound, above the exact table
  ex = tracking.epsilon_table(_poisson(0.02, 0.9, 1e-3), num_steps=200, delta=DELTA)
  acc = tracking.EventAccountant(ev.PoissonSampledDpEvent(0.02, ev.GaussianDpEvent(0.9)),
                                 value_discretization_interval=1e-3, max_evaluations=8,
                                 progress=False)
  grid = tracking.epsilon_table(acc, num_steps=200, delta=DELTA)
  assert np.all(grid >= ex * (1 - 1e-9))
  assert grid[100] > 1.05 * ex[100]


@pytest.mark.parametrize("sigma,q,steps,delta", [(0.3, 0.5, 10, 1e-15), (0.1, 0.01, 6, 1e-12),
                                                 (0.8, 0.2, 12, 1e-14), (0.3, 0.5, 23, 1e-15),
                                                 (0.8, 0.3, 4, 1e-15)])
def test_repeated_event_at_extremes_is_a_direct_convolution(x64, sigma, q, steps, delta):
  # The accountant's general path (the repeated-event engine) for one event
  # composed `steps` times, against np.convolve of its own per-step pair (sums
  # of non-negative terms), grid 1e-2 to keep the convolution small. Before the
  # engine tilted its first pass at the Chernoff point and read the support's
  # true top, the add direction at (0.3, 0.5, 10, 1e-15) came out 9.35 for 7.00
  # (a plain FFT's noise read as tail mass: an over-report).
  step = ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(sigma))
  acc = PLDAccountant(None, 1e-2, shortcuts=False)
  pair = acc.copy().compose(step).composed_plds()[0]
  got = acc.copy().compose(step, steps).get_epsilon_bounds(delta)
  eps = []
  for p in pair:
    probs = np.asarray(p.probs, np.float64)
    conv = probs
    for _ in range(steps - 1):
      conv = np.convolve(conv, probs)
    inf = -math.expm1(steps * math.log1p(-float(p.inf_mass)))
    eps.append(float(jpld.epsilon(jpld.PLD(conv, steps * int(p.offset), 1e-2, inf, True), delta)))
  assert got.epsilon == pytest.approx(max(eps), rel=1e-9, abs=0.0)
  assert got.epsilon >= max(eps)             # an upper bound: never below the convolution
  assert got.lower <= got.epsilon


def test_hook_reads_the_table_as_it_is_produced(x64):
  # Issue 55 item 1: the hook's table is produced on a background thread and
  # fetched a window at a time; every step's eps is the one-go table's entry,
  # to the last bit, across window refetches (300 > WINDOW = 256), eagerly, under
  # jit and under vmap; a state of an eagerly-built hook is refused.
  acc = _poisson(0.02, 0.9, 1e-3)
  steps = 300
  tx = tracking.track_privacy(acc, num_steps=steps, delta=DELTA)
  whole = tracking.epsilon_table(_poisson(0.02, 0.9, 1e-3), num_steps=steps, delta=DELTA)
  st = tx.init(jnp.zeros(2))
  assert st.table_eps.shape == (257,)
  upd = jax.jit(tx.update)

  def body(st, _):
    _, st = upd(jnp.ones(2), st)
    return st, st.eps
  st, seen = jax.lax.scan(body, st, None, length=steps + 2)
  assert np.array_equal(np.asarray(seen)[:steps], whole[1:])
  assert np.all(np.isinf(np.asarray(seen)[steps:]))        # beyond the plan
  st = tx.init(jnp.zeros(2))
  for _ in range(3):
    _, st = tx.update(jnp.ones(2), st)                    # eager
  assert float(st.eps) == whole[3]
  sts = jax.vmap(lambda _: tx.init(jnp.zeros(2)))(jnp.arange(2))
  for _ in range(3):
    _, sts = jax.jit(jax.vmap(tx.update))(jnp.ones((2, 2)), sts)
  assert np.array_equal(np.asarray(sts.eps), [whole[3]] * 2)
  eager = tracking.track_privacy(tracking.EventAccountant(ev.GaussianDpEvent(2.0)),
                                 num_steps=steps, delta=DELTA)
  with pytest.raises(tracking.PrivacyScheduleChanged):
    tx.update(jnp.ones(2), eager.init(jnp.zeros(2)))


def test_balls_in_bins_hook_is_the_table_at_every_step(x64):
  # the epoch-by-epoch pieces (epoch 1 a few prefixes at a time) as the jitted
  # hook reads them, against the table read whole, step by step, bit for bit
  t, epochs, sigma = 10, 3, 1.2      # the setting of the epoch-ends test (shared compiles)
  mk = lambda: tracking.EventAccountant(  # noqa: E731
      ev.RandomAllocationDpEvent(noise_multiplier=sigma, steps_per_epoch=t), block_size=t, progress=False)
  steps = epochs * t - 4               # a partial last epoch
  tx = tracking.track_privacy(mk(), num_steps=steps, delta=DELTA)
  upd = jax.jit(tx.update)

  def body(st, _):
    _, st = upd(jnp.ones(2), st)
    return st, st.eps
  _, seen = jax.lax.scan(body, tx.init(jnp.zeros(2)), None, length=steps)
  tab = tracking.epsilon_table(mk(), num_steps=steps, delta=DELTA)
  assert np.array_equal(np.asarray(seen), tab[1:])
  assert tab[2 * t] == PLDAccountant().compose(ev.RandomAllocationDpEvent(
      noise_multiplier=sigma, steps_per_epoch=t, num_epochs=2)).get_epsilon(DELTA)


def test_poisson_pieces_are_the_doors_buckets(x64):
  # The background table comes in the Poisson door's power-of-two buckets of
  # counts (1, 2, 3-4, 5-8, ...: one per-step pair each, no 32-count block
  # split between two pieces), and its entries are the accountant's batch over
  # all the counts at once, bit for bit (a count's value does not depend on
  # the others asked).
  acc = _poisson(0.02, 0.9, 1e-3)
  pieces = [np.asarray(p) for p in acc.step_segments(40, DELTA)]
  assert [p.size for p in pieces] == [1, 1, 2, 4, 8, 16, 8]
  whole = acc.accountant.epsilons_for_counts(acc.event, np.arange(1, 41), DELTA)
  assert np.array_equal(np.concatenate(pieces), np.maximum.accumulate(whole))


def test_columns_are_the_engine_factor_by_factor(x64):
  # A later epoch's prefixes (jaxacct.pld.pair_column_epsilons: the whole
  # epoch's power once, the prefixes as rows of one batched inverse FFT per
  # chunk of 32 sharing a read floor, tilt and FFT length) against the engine
  # asked factor by factor (pair_epsilons, the factor composed once): the same
  # compositions, windows and query; the shared choices move round-off only
  # (rel 2e-12, far inside the engine's 1e-11 to a direct convolution;
  # measured 4.8e-13 here, 1.6e-14 on the README run's 64 prefixes). 40
  # factors (two chunks, the second partial): Poisson-subsampled Gaussian
  # pairs (dense) and randomized response (two atoms: a sparse law) on the
  # grid of a repeated Poisson step (the engine is the same for any pair).
  h = 1e-3
  pg = lambda sigma, q: jpld.PairPLD(*[jpld.poisson_gaussian(  # noqa: E731
      sigma, q, direction=d, step=h) for d in ("remove", "add")])
  whole = jpld.law(pg(1.0, 0.05))
  qs = np.geomspace(0.01, 0.6, 36)
  facs = [pg(1.5, float(q)) for q in qs]
  rr = jpld.randomized_response(1.0, step=h)
  facs += [jpld.PairPLD(rr, rr)] * 4
  facs = [jpld.law(f) for f in facs]
  for count in (1, 3):
    col = jpld.pair_column_epsilons(whole, count, facs, DELTA, tail_mass=1e-20)
    one = [jpld.pair_epsilons(whole, np.array([count]), DELTA, factor=f, tail_mass=1e-20)[0]
           for f in facs]
    np.testing.assert_allclose(col, one, rtol=2e-12, atol=0.0)
    assert np.all(np.diff(col[:36]) >= 0)    # a larger rate: never more private
  assert jpld.pair_column_epsilons(whole, 2, [], DELTA).shape == (0,)


@pytest.mark.parametrize("sigma,delta,h", [
    (1.0, 1e-5, 1e-3), pytest.param(1.0, 1e-5, 2.5e-4, marks=pytest.mark.slow),
    pytest.param(0.35, 1e-12, 1e-3, marks=pytest.mark.slow)])
def test_balls_in_bins_later_epoch_prefixes_are_a_direct_convolution(x64, sigma, delta, h):
  # Inside epochs 2 and 3 of 1-of-t allocation the table charges the prefix's
  # pair composed after the whole epochs (columns of batched FFTs), on the
  # rows' grid (_epochs.row_step: the accountant's step times up to 8, at
  # most 1e-3; here 1e-3 both times, 4 x 2.5e-4 in the second case). Oracle:
  # the same pairs (tracking.prefix_pair on that grid; their laws from the
  # jitted law program, the table's from the host: rounding apart) composed by np.convolve
  # (sums of non-negative terms, no FFT) and queried by jaxacct.pld.epsilon;
  # each entry is min(that, the accountant's epoch end), then a running max.
  # Rel 1e-10: the engine's 1e-11 to a direct convolution (module docstring),
  # with margin; and never below the oracle by more than that. Small sigma
  # with a tiny delta is the far tail.
  t = 5
  acc = tracking.EventAccountant(
      ev.RandomAllocationDpEvent(noise_multiplier=sigma, steps_per_epoch=t), block_size=t,
      value_discretization_interval=h, progress=False)
  tab = tracking.epsilon_table(acc, num_steps=3 * t, delta=delta)
  h = 1e-3                   # the rows' grid in both cases
  whole = tracking.prefix_pair(sigma, t, t, step=h)

  def direct(e, s):     # e - 1 whole epochs, then the prefix of s steps
    pre = tracking.prefix_pair(sigma, s, t, step=h)
    eps = []
    for d in ("remove", "add"):
      w, p = getattr(whole, d), getattr(pre, d)
      conv, off, keep = np.asarray(p.probs, np.float64), int(p.offset), 1.0 - float(p.inf_mass)
      for _ in range(e - 1):
        conv = np.convolve(conv, np.asarray(w.probs, np.float64))
        off += int(w.offset)
        keep *= 1.0 - float(w.inf_mass)
      eps.append(float(jpld.epsilon(jpld.PLD(conv, off, h, 1.0 - keep, True), delta)))
    return max(eps)
  run = tab[t]
  for e in (2, 3):
    for s in range(1, t):
      want = max(run, min(direct(e, s), tab[e * t]))
      run = want
      assert tab[(e - 1) * t + s] == pytest.approx(want, rel=1e-10, abs=0.0)
      assert tab[(e - 1) * t + s] >= want * (1.0 - 1e-10)


def test_balls_in_bins_rows_on_the_coarser_grid_stay_close_to_the_accountants_grid(x64):
  # The later epochs' rows run on row_step(h) = 8 h (h = 1e-4): each entry
  # inside epoch 2 is within 1e-4 relative of the same composition on the
  # accountant's grid (the engine with the prefix as factor, pairs at h);
  # measured 1e-5 at the README's run, a twentieth of the 64-prefix staircase.
  sigma, t, h = 1.0, 5, 1e-4
  acc = tracking.EventAccountant(
      ev.RandomAllocationDpEvent(noise_multiplier=sigma, steps_per_epoch=t), block_size=t,
      value_discretization_interval=h, progress=False)
  tab = tracking.epsilon_table(acc, num_steps=2 * t, delta=DELTA)
  whole = jpld.law(tracking.prefix_pair(sigma, t, t, step=h))
  for s in range(1, t):
    fine = jpld.pair_epsilons(whole, np.array([1]), DELTA,
                              factor=jpld.law(tracking.prefix_pair(sigma, s, t, step=h)))[0]
    want = min(fine, tab[2 * t])
    if tab[t + s] > tab[t + s - 1]:     # not a running maximum's carried value
      assert tab[t + s] == pytest.approx(want, rel=1e-4, abs=0.0)


def test_exit_joins_the_table_threads():
  """A script may end while the hook's table is still being computed on its
  threads. At exit they are stopped and joined after their current piece: a
  daemon thread still inside XLA when the interpreter finalises aborts the
  process ("FATAL: exception not rethrown", exit 134; seen in 4 of 70 runs of
  the README's balls-in-bins hook before). After the exit handlers no jaxacct
  thread is alive, and the process exits 0."""
  code = textwrap.dedent("""
      import atexit, json, threading
      import jax.numpy as jnp, optax
      from jaxacct import tracking
      from jaxacct.sampling import BallsInBinsSampler
      s = BallsInBinsSampler(num_examples=60000, batch_size=256, num_epochs=10)
      acc = s.accountant(noise_multiplier=1.0, progress=False)
      tx = optax.chain(tracking.track_privacy(acc, num_steps=s.num_steps, delta=1e-5),
                       optax.sgd(0.1))
      st = tx.init(jnp.zeros(10))
      tx.update(jnp.ones(10), st, jnp.zeros(10))   # the first step: the table is under way
      alive = lambda: sorted(t.name for t in threading.enumerate()
                             if t.name.startswith("jaxacct-") and t.is_alive())
      before = alive()
      atexit._run_exitfuncs()
      print(json.dumps({"before": before, "after": alive()}))
      """)
  run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]
  got = json.loads(run.stdout.strip().splitlines()[-1])
  assert "jaxacct-epoch-ends" in got["before"], got   # the case held: threads were running
  assert got["after"] == [], got
