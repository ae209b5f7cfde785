"""jaxacct.sampling: batches formed as the accountants assume.

Checks (fixed seeds, so every statistic below is deterministic; the chi-square
thresholds p > 1e-3 are what a correct sampler passes with probability 0.999
per test at a random seed):
* balls-in-bins: every example in exactly k distinct steps of every epoch;
  step (k = 1) and subset (k = 2) frequencies uniform (chi-square); fresh
  epochs independent (chi-square on the (epoch 0, epoch 1) contingency
  table), fixed bins identical across epochs;
* fixed shapes: every batch has length pad_size and the mask marks exactly
  the sampled examples; pad_size is the exact binomial quantile (scipy);
  overflow pads to a multiple (warning), never drops an example;
* Poisson: inclusion counts per step Binomial(n, q) (chi-square on per-example
  totals);
* the accountant from the sampler is the matching one (fixed bins never get
  the fresh-draw accountant), and the training example's epsilon equals it;
* declared capacity (issue 31): ``capacity_for`` reads only the declared
  expected batch size m, the steps and the overflow probability (same capacity
  for n and n + 1); it is the smallest multiple with the Poisson(m + 1) tail
  under the target (scipy); that tail bounds the exact binomial tail of every
  n with n p <= m + 1 (Anderson & Samuels 1967; checked on a grid with scipy);
  ``overflow_bound`` and ``delta_with_overflow`` follow their formulas; the
  samplers name their relation (``neighbouring = "add_remove"``).
"""

import math

import numpy as np
import pytest
from scipy import stats

from jaxacct import allocation, sampling, tracking

from support import example_module



def _epoch_counts(s, epoch):
  """(n,) inclusion counts and the per-example step lists of one epoch."""
  cnt = np.zeros(s.n, int)
  steps = [[] for _ in range(s.n)]
  for b in s.epoch_batches(epoch):
    real = b.indices[b.mask > 0]
    assert real.size == b.size and np.all(b.indices[b.mask == 0] == 0)
    assert len(np.unique(real)) == real.size        # no example twice in a step
    cnt[real] += 1
    for i in real:
      steps[i].append(b.step - epoch * s.t)
  return cnt, steps


@pytest.mark.parametrize("k", [1, 3])
def test_balls_in_bins_exactly_k_per_epoch(k):
  s = sampling.BallsInBinsSampler(num_examples=500, steps_per_epoch=10, num_epochs=3,
                                  num_selected=k, seed=4)
  for e in range(3):
    cnt, steps = _epoch_counts(s, e)
    assert np.all(cnt == k)
    assert all(len(set(st)) == k for st in steps)
    np.testing.assert_array_equal(np.sort(s.assignment(e), axis=1),
                                  np.sort(np.array(steps), axis=1))


def test_step_frequencies_uniform_k1():
  s = sampling.BallsInBinsSampler(num_examples=20_000, steps_per_epoch=10, num_epochs=2, seed=0)
  for e in range(2):
    sizes = np.array([b.size for b in s.epoch_batches(e)])
    assert sizes.sum() == 20_000
    p = stats.chisquare(sizes).pvalue      # H0: multinomial(n, 1/t)
    assert p > 1e-3, p


def test_subset_frequencies_uniform_k2():
  t, k, n = 5, 2, 20_000
  s = sampling.BallsInBinsSampler(num_examples=n, steps_per_epoch=t, num_epochs=1,
                                  num_selected=k, seed=1)
  a = s.assignment(0)
  codes = a[:, 0] * t + a[:, 1]
  subsets = [i * t + j for i in range(t) for j in range(i + 1, t)]
  freq = np.array([np.sum(codes == c) for c in subsets])
  assert freq.sum() == n                    # every row a valid ascending pair
  p = stats.chisquare(freq).pvalue          # H0: uniform over the C(5, 2) = 10 subsets
  assert p > 1e-3, p


def test_fresh_epochs_independent_fixed_identical():
  t, n = 4, 20_000
  fresh = sampling.BallsInBinsSampler(num_examples=n, steps_per_epoch=t, num_epochs=2, seed=2)
  a0, a1 = fresh.assignment(0)[:, 0], fresh.assignment(1)[:, 0]
  table = np.zeros((t, t))
  np.add.at(table, (a0, a1), 1)
  p = stats.chisquare(table.ravel()).pvalue  # H0: uniform over t^2 (epoch draws independent)
  assert p > 1e-3, p
  fixed = sampling.BallsInBinsSampler(num_examples=n, steps_per_epoch=t, num_epochs=3,
                                      seed=2, fresh_each_epoch=False)
  b0 = fixed.epoch_batches(0)
  b2 = fixed.epoch_batches(2)
  for x, y in zip(b0, b2):
    np.testing.assert_array_equal(x.indices, y.indices)
    assert y.step == x.step + 2 * t and y.epoch == 2


def test_shapes_fixed_and_pad_size_exact():
  n, t, E = 5000, 50, 4
  s = sampling.BallsInBinsSampler(num_examples=n, steps_per_epoch=t, num_epochs=E, seed=3)
  shapes = {(b.indices.shape, b.mask.shape, b.indices.dtype, b.mask.dtype) for b in s}
  assert shapes == {((s.pad_size,), (s.pad_size,), np.dtype(np.int32), np.dtype(np.float32))}
  assert len(s) == t * E == sum(1 for _ in s)
  # pad size: smallest multiple of 8 with (t E) P(Bin(n, 1/t) > B) <= 1e-6
  target = 1e-6 / (t * E)
  B = s.pad_size
  assert B % 8 == 0 and stats.binom.sf(B, n, 1 / t) <= target
  assert stats.binom.sf(B - 8, n, 1 / t) > target
  assert sampling.BallsInBinsSampler(num_examples=n, steps_per_epoch=t, num_epochs=1,
                                     pad_size="max").pad_size == n


def test_overflow_pads_never_drops():
  s = sampling.BallsInBinsSampler(num_examples=400, steps_per_epoch=4, num_epochs=1,
                                  seed=0, pad_size=64)
  with pytest.warns(RuntimeWarning, match="no example dropped"):
    batches = s.epoch_batches(0)
  assert all(b.indices.shape[0] % 64 == 0 and b.indices.shape[0] >= b.size for b in batches)
  seen = np.concatenate([b.indices[b.mask > 0] for b in batches])
  np.testing.assert_array_equal(np.sort(seen), np.arange(400))


def test_poisson_sampler():
  n, q, T = 2000, 0.05, 400
  s = sampling.PoissonSampler(num_examples=n, sampling_probability=q, num_steps=T, seed=5)
  tot = np.zeros(n, int)
  sizes = []
  for b in s:
    assert b.indices.shape == (s.pad_size,)
    tot[b.indices[b.mask > 0]] += 1
    sizes.append(b.size)
  # each example's count over T steps is Binomial(T, q): chi-square on binned counts
  edges = np.array([0, 14, 17, 20, 23, 26, 1000])
  obs = np.histogram(tot, bins=edges)[0]
  exp = n * np.diff(stats.binom.cdf(edges - 1, T, q))
  p = stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue
  assert p > 1e-3, p
  # batch sizes: mean n q within 5 standard errors
  assert abs(np.mean(sizes) - n * q) < 5 * math.sqrt(n * q * (1 - q) / T)
  # regenerable: the same seed and step give the same batch
  np.testing.assert_array_equal(s.batch(7).indices, s.batch(7).indices)


def test_accountant_matches_sampler():
  from jaxacct.accounting import PLDAccountant
  kw = dict(num_examples=100, steps_per_epoch=10, num_epochs=3)
  fresh = sampling.BallsInBinsSampler(**kw)
  acc = fresh.accountant(noise_multiplier=1.0)
  assert isinstance(acc, tracking.EventAccountant) and acc.block_size == 10
  # the whole run's table entry is the accountant's epsilon of the sampler's event
  tab_fresh = tracking.epsilon_table(acc, num_steps=30, delta=1e-5)
  assert tab_fresh[-1] == PLDAccountant().compose(fresh.event(noise_multiplier=1.0)).get_epsilon(1e-5)
  fixed = sampling.BallsInBinsSampler(fresh_each_epoch=False, **kw)
  acc_f = fixed.accountant(noise_multiplier=1.0, delta=1e-5)
  tab = tracking.epsilon_table(acc_f, num_steps=30, delta=1e-5)
  assert tab[-1] == PLDAccountant().compose(fixed.event(noise_multiplier=1.0)).get_epsilon(1e-5)
  # the tight allocation PLD: below the front door's default methods (which
  # the fixed-bin table held before issue 29)
  ref = allocation.epsilon(sigma=1.0 / math.sqrt(3), steps_per_epoch=10, delta=1e-5)
  assert tab[-1] <= fixed.epsilon(noise_multiplier=1.0, delta=1e-5).epsilon == ref.epsilon
  assert tab_fresh[-1] < tab[-1]       # the fresh table would under-report fixed bins
  assert tab[10] == tab[1] and tab[11] == tab[20]   # a partial epoch is charged whole
  pois = sampling.PoissonSampler(num_examples=100, sampling_probability=0.1, num_steps=12,
                                 steps_per_epoch=10)
  acc_p = pois.accountant(noise_multiplier=1.0)
  assert acc_p.evaluate_every == 10 and acc_p.block_size == 1
  tab_p = tracking.epsilon_table(acc_p, num_steps=12, delta=1e-5)
  assert tab_p[-1] == PLDAccountant().compose(pois.event(noise_multiplier=1.0)).get_epsilon(1e-5)
  assert fixed.accounting_kwargs()["fresh_each_epoch"] is False


#: the training samplers of this module, by the registered sampler they draw
TRAINING_SAMPLERS = {cls.sampling: cls for cls in (getattr(sampling, n) for n in sampling.__all__)
                     if isinstance(getattr(cls, "sampling", None), str)}


def test_every_training_sampler_is_a_registered_one():
  from jaxacct.dpsgd import samplers
  assert set(TRAINING_SAMPLERS) == {"balls_in_bins", "poisson"}
  assert set(TRAINING_SAMPLERS) <= set(samplers.names())
  # every registered sampler has one through sampling.loader: tests/tracking/test_loaders.py


@pytest.mark.parametrize("name", sorted(TRAINING_SAMPLERS))
def test_one_number_for_one_training_run(name):
  """sampler.epsilon, dpsgd.epsilon and the accountant of sampler.event give one
  number (1e-12) for one run: N=200, B=10 (t=20 steps an epoch, or q=0.05 for
  T=40 steps), E=2, sigma=1, delta=1e-5; arrays lane by lane."""
  from jaxacct import dpsgd
  from jaxacct.accounting import PLDAccountant
  kw = dict(num_examples=200, batch_size=10, num_epochs=2)
  s = TRAINING_SAMPLERS[name](**kw)
  got = s.epsilon(noise_multiplier=1.0, delta=1e-5)
  ref = dpsgd.epsilon(noise_multiplier=1.0, delta=1e-5, sampling=name, **kw)
  acc = PLDAccountant().compose(s.event(noise_multiplier=1.0)).get_epsilon(1e-5)
  assert got.epsilon == pytest.approx(ref.epsilon, rel=1e-12, abs=0)
  assert got.epsilon == pytest.approx(acc, rel=1e-12, abs=0)
  assert got.bound == "upper" and got.method == ref.method
  both = s.epsilon(noise_multiplier=np.array([0.8, 1.0]), delta=1e-5).epsilon
  # (2e-12 here: the scalar Poisson door's repeated-event engine rounds up by 1e-12,
  # the array program by jaxacct.pld.epsilon's 1e-13)
  assert both.shape == (2,) and both[1] == pytest.approx(got.epsilon, rel=2e-12)
  assert both[0] > both[1]


def test_one_number_where_no_amplification_wins():
  """t = 1 (B = N): the allocation PLD (20.126116, arXiv:2602.17284v1, pessimistic)
  is above 3 exact Gaussian steps (20.125024, the run is their post-processing):
  the sampler takes the smaller, as dpsgd.epsilon, allocation.epsilon
  ("local") and the accountant's scheme door do."""
  from jaxacct import dpsgd
  from jaxacct.accounting import PLDAccountant
  s = sampling.BallsInBinsSampler(num_examples=10, batch_size=10, num_epochs=3)
  got = s.epsilon(noise_multiplier=0.5, delta=1e-5).epsilon
  ref = dpsgd.epsilon(noise_multiplier=0.5, delta=1e-5, num_examples=10, batch_size=10,
                      num_epochs=3).epsilon
  old = allocation.epsilon(sigma=0.5, steps_per_epoch=1, num_epochs=3, delta=1e-5).epsilon
  assert got == pytest.approx(ref, rel=1e-12, abs=0)
  assert got == pytest.approx(old, rel=1e-12, abs=0)
  assert got == pytest.approx(20.12502354588817, rel=1e-9)
  acc = PLDAccountant().compose(s.event(noise_multiplier=0.5))
  assert acc.get_epsilon(1e-5) == pytest.approx(got, rel=1e-12, abs=0)
  r = acc.get_epsilon_bounds(1e-5)   # the PLD's certified lower stays below
  assert 20.1247 < r.lower <= got
  # the three full-batch steps, exact (Balle & Wang), through the accountant's Gaussian path
  from jaxacct.accounting import events
  g3 = PLDAccountant().compose(events.GaussianDpEvent(0.5), 3)
  assert got == pytest.approx(g3.get_epsilon(1e-5), rel=1e-12, abs=0)
  assert acc.get_delta(20.0) == pytest.approx(g3.get_delta(20.0), rel=1e-12, abs=0)


def test_bad_arguments():
  with pytest.raises(ValueError, match="num_selected"):
    sampling.BallsInBinsSampler(num_examples=10, steps_per_epoch=3, num_epochs=1, num_selected=4)
  with pytest.raises(ValueError, match="fresh_each_epoch"):
    sampling.BallsInBinsSampler(num_examples=10, steps_per_epoch=3, num_epochs=1,
                                fresh_each_epoch="yes")
  with pytest.raises(ValueError, match="pad_size"):
    sampling.BallsInBinsSampler(num_examples=10, steps_per_epoch=3, num_epochs=1, pad_size="big")
  with pytest.raises(ValueError, match="sampling_probability"):
    sampling.PoissonSampler(num_examples=10, sampling_probability=0.0, num_steps=3)
  with pytest.raises(ValueError, match="delta"):
    sampling.BallsInBinsSampler(num_examples=10, steps_per_epoch=3, num_epochs=2,
                                fresh_each_epoch=False).accountant(noise_multiplier=1.0)


def _train_flax():
  pytest.importorskip("flax")
  return example_module("train_flax")


def _f32_up(x):
  y = np.float32(x)
  return float(np.nextafter(y, np.float32(np.inf)) if float(y) < x else y)


@pytest.mark.parametrize("scheme", ["allocation", "fixed_bins"])
def test_training_example_epsilon_equals_accountant(scheme):
  """The example's tracked epsilon is the accountant's for the sampler's event
  (float32 rounded up), and the budget stops the loop."""
  from jaxacct.accounting import PLDAccountant
  train_flax = _train_flax()
  kw = dict(num_epochs=2, n=256, batch_size=32, noise_multiplier=1.2, verbose=False)
  hist = train_flax.main(scheme, **kw)
  assert [h["step"] for h in hist] == [8, 16]
  s = train_flax.make_sampler(scheme, n=256, batch_size=32, num_epochs=2)
  ref = PLDAccountant().compose(s.event(noise_multiplier=1.2)).get_epsilon(1e-5)
  assert hist[-1]["eps"] == _f32_up(ref)
  assert hist[-1]["loss"] < 0.69                      # it learns (log 2 = chance)
  # a budget between the epoch-1 and epoch-2 values stops training inside
  # epoch 2: fixed bins are charged whole epochs (it stops after epoch 1);
  # balls-in-bins charges the released prefix of an epoch (issue 44), so the
  # first steps of epoch 2 may still fit the budget
  budget = 0.5 * (hist[0]["eps"] + hist[1]["eps"])
  stopped = train_flax.main(scheme, max_epsilon=budget, **kw)
  assert stopped[-1]["exhausted"] and stopped[-1]["eps"] <= budget
  if scheme == "fixed_bins":
    assert stopped[-1]["step"] == 8 and stopped[-1]["eps"] == hist[0]["eps"]
  else:
    assert 8 <= stopped[-1]["step"] < 16 and stopped[-1]["eps"] >= hist[0]["eps"]


# ------------------------------------------------ declared capacity (issue 31)

def test_capacity_from_declared_numbers_only():
  m, T, target = 32.0, 500, 1e-6
  B = sampling.capacity_for(expected_batch_size=m, num_steps=T, overflow_prob=target)
  lam = m + 1
  assert B % 8 == 0 and B >= lam and T * stats.poisson.sf(B, lam) <= target
  assert T * stats.poisson.sf(B - 8, lam) > target or B - 8 < lam
  B1 = sampling.capacity_for(expected_batch_size=m, num_steps=T, overflow_prob=target,
                             multiple=1)
  assert T * stats.poisson.sf(B1, lam) <= target < T * stats.poisson.sf(B1 - 1, lam)
  # the same capacity for n and n + 1 (and n + 10): no n in it
  for cls, kw in ((sampling.PoissonSampler, dict(sampling_probability=0.1, num_steps=T)),
                  (sampling.BallsInBinsSampler, dict(steps_per_epoch=10, num_epochs=50))):
    pads = {cls(num_examples=n, expected_batch_size=m, **kw).pad_size for n in (300, 301, 310)}
    assert pads == {B}, (cls, pads)
  s = sampling.PoissonSampler(num_examples=320, sampling_probability=0.1, num_steps=T,
                              expected_batch_size=m)
  assert s.expected_batch_size == m and s.neighbouring == "add_remove"
  assert s.overflow_bound == pytest.approx(T * stats.poisson.sf(B, lam), rel=1e-12)
  assert s.overflow_bound <= target


@pytest.mark.parametrize("m", [4.0, 32.0, 200.0])
def test_poisson_tail_bounds_every_binomial_with_mean_up_to_m_plus_1(m):
  B = sampling.capacity_for(expected_batch_size=m, num_steps=100, multiple=1)
  bound = stats.poisson.sf(B, m + 1)
  for n in (int(m) + 2, 2 * int(m) + 3, 10 * int(m), 1000 * int(m)):
    for mean in (0.5 * m, m, m + 1):
      p = min(1.0, mean / n)
      assert stats.binom.sf(B, n, p) <= bound * (1 + 1e-9), (n, p)


def test_declared_capacity_checks_and_delta_with_overflow():
  with pytest.raises(ValueError, match="expected_batch_size"):     # n p = 50 > m + 1
    sampling.PoissonSampler(num_examples=500, sampling_probability=0.1, num_steps=10,
                            expected_batch_size=40)
  with pytest.raises(ValueError, match="expected_batch_size"):
    sampling.BallsInBinsSampler(num_examples=100, steps_per_epoch=10, num_epochs=1,
                                expected_batch_size=0)
  s = sampling.BallsInBinsSampler(num_examples=100, steps_per_epoch=10, num_epochs=2,
                                  expected_batch_size=10, pad_size=32)
  bound = 20 * stats.poisson.sf(32, 11.0)
  assert s.overflow_bound == pytest.approx(bound, rel=1e-12)
  assert s.delta_with_overflow(epsilon=2.0, delta=1e-5) == pytest.approx(
      1e-5 + (1 + math.exp(2.0)) * bound, rel=1e-12)
  assert sampling.BallsInBinsSampler(num_examples=100, steps_per_epoch=10, num_epochs=1,
                                     pad_size="max").overflow_bound == 0.0
  legacy = sampling.BallsInBinsSampler(num_examples=100, steps_per_epoch=10, num_epochs=2)
  assert legacy.expected_batch_size is None and legacy.neighbouring == "add_remove"
  assert legacy.overflow_bound == pytest.approx(
      20 * stats.binom.sf(legacy.pad_size, 100, 0.1), rel=1e-12)


@pytest.mark.parametrize("m,T,prob", [(64.0, 10**12, 1e-6), (3.0, 10, 1e-300),
                                      (1e9, 10**12, 1e-6)])
def test_capacity_where_scipy_isf_is_nan(m, T, prob):
  """A per-step target below about 1e-16 made ``poisson.isf`` NaN (``capacity_for``
  raised "cannot convert float NaN to integer", naming nothing): the capacity is
  still the smallest multiple of 8 at or above m + 1 whose Poisson(m + 1) tail is
  under the target (scipy's sf, the definition in the docstring)."""
  lam, target = m + 1.0, prob / T
  assert not np.isfinite(stats.poisson.isf(target, lam))
  B = sampling.capacity_for(expected_batch_size=m, num_steps=T, overflow_prob=prob)
  assert B % 8 == 0 and B >= lam and stats.poisson.sf(B, lam) <= target
  assert B - 8 < lam or stats.poisson.sf(B - 8, lam) > target
  B1 = sampling.capacity_for(expected_batch_size=m, num_steps=T, overflow_prob=prob,
                             multiple=1)
  assert stats.poisson.sf(B1, lam) <= target < stats.poisson.sf(B1 - 1, lam)


def test_one_number_where_one_number_goes():
  """Issue 67: a list, a boolean or an out-of-range count is a ValueError naming the
  parameter, before anything is computed."""
  with pytest.raises(ValueError, match=r"expected_batch_size must be in \(0, 2\.14748e\+09\]"):
    sampling.capacity_for(expected_batch_size=1e300, num_steps=10)
  for kw, name in [(dict(num_steps=[2, 3]), "num_steps"), (dict(multiple=[2, 3]), "multiple"),
                   (dict(expected_batch_size=[8.0, 9.0]), "expected_batch_size")]:
    with pytest.raises(ValueError, match=f"{name} must be a single number"):
      sampling.capacity_for(**{"expected_batch_size": 8.0, "num_steps": 10, **kw})
  base = dict(num_examples=100, sampling_probability=0.1, num_steps=10)
  for bad in (True, np.bool_(True), [2, 3], 0, math.nan, math.inf):
    with pytest.raises(ValueError, match="steps_per_epoch"):
      sampling.PoissonSampler(**base, steps_per_epoch=bad)
  for name in ("seed", "pad_size", "multiple"):
    with pytest.raises(ValueError, match=f"{name} must be a single number"):
      sampling.PoissonSampler(**base, **{name: [2, 3]})
  with pytest.raises(ValueError, match="multiple"):
    sampling.BallsInBinsSampler(num_examples=100, steps_per_epoch=10, num_epochs=1,
                                pad_size="max", multiple=0)


def _capacity_by_scipy_stats(m, T, prob, multiple):
  """capacity_for's rule with scipy.stats.poisson itself (the reference)."""
  lam, target = float(m) + 1.0, float(prob) / int(T)
  q = stats.poisson.isf(target, lam)
  if np.isfinite(q):
    b = max(math.ceil(lam), int(q))
  else:
    b = math.ceil(lam)
    while stats.poisson.sf(b, lam) > target:
      b += 1
  while stats.poisson.sf(b, lam) > target:
    b += 1
  while b - 1 >= lam and stats.poisson.sf(b - 1, lam) <= target:
    b -= 1
  return -(-b // multiple) * multiple


@pytest.mark.parametrize("m", [1.0, 3.5, 32.0, 256.0, 4096.0, 1e6])
def test_capacity_is_scipy_stats_poisson_bit_for_bit(m):
  """The capacity and the overflow bound read the Poisson tail from scipy.special
  (scipy.stats.poisson's own functions, without importing scipy.stats): the same
  capacity as scipy.stats' rule and the same bound, ==, across targets and
  multiples."""
  for T, prob in ((1, 0.5), (100, 1e-6), (2340, 1e-9), (10**6, 1e-12), (10**12, 1e-6)):
    for multiple in (1, 8):
      B = sampling.capacity_for(expected_batch_size=m, num_steps=T, overflow_prob=prob,
                                multiple=multiple)
      assert B == _capacity_by_scipy_stats(m, T, prob, multiple), (T, prob, multiple)
  n = 10 * int(m) + 100                     # pad < n: the bound is the Poisson tail
  s = sampling.PoissonSampler(num_examples=n, sampling_probability=m / n, num_steps=100,
                              expected_batch_size=m)
  assert s.pad_size < n
  assert s.overflow_bound == min(1.0, 100 * float(stats.poisson.sf(s.pad_size, m + 1.0)))


def test_declared_capacity_loads_no_scipy_stats():
  """A sampler sized from its declared batch (the tracking hook's path) loads no
  scipy.stats (slow to import)."""
  import subprocess
  import sys
  code = ("import sys; from jaxacct.sampling import BallsInBinsSampler as S; "
          "s = S(num_examples=60000, batch_size=256, num_epochs=10); "
          "print(s.pad_size, 'scipy.stats' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, check=True).stdout.split()
  assert out[1] == "False" and int(out[0]) >= 257, out
