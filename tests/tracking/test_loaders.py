"""Every registered sampler trains: a loader whose dp_transform tracks dpsgd.epsilon (issue 64 item 3).

For each registered sampler (``jaxacct.dpsgd.samplers.names()``) the training
sampler ``jaxacct.sampling.loader(name, ...)`` runs its whole schedule through
``dp_transform`` (``dp_aggregate`` + ``track_privacy`` of the record's
``block``), under x64; the epsilon the optimizer state reports after the last
update is compared with ``jaxacct.dpsgd.epsilon`` of the same configuration
(the oracle: the package's offline door for the whole run's event) for
equality, bit for bit (tolerance 0: the tracker asks the same accountant for
the same count, ``PLDAccountant.epsilons_for_counts`` is bitwise its
``get_epsilon``; shuffle's closed form is the same Gaussian formula).
``tracking.accountant_for`` takes the registered names; the previous release's
scheme words warn and mean the same accountant.

Records without a ``block`` (fixed_size, fixed_size_with_replacement and
truncated_poisson at the time of writing) get the block of :data:`BLOCKS`
for the test (one step, as their run event composes it; replace-one where the
accountant requires it); where the registry has its own it is used.
"""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxacct import accounting, dpsgd, sampling, tracking
from jaxacct.dpsgd import samplers

DELTA = 1e-5
SIGMA = 4.0


def _fixed_size_block(sched, sigma):
  ev = accounting.events
  return (ev.SampledWithoutReplacementDpEvent(sched.num_examples, int(sched.batch_size),
                                              ev.GaussianDpEvent(sigma)),
          {"neighboring_relation": "REPLACE_ONE", "evaluate_every": sched.steps_per_epoch})


def _with_replacement_block(sched, sigma):
  ev = accounting.events
  return (ev.SampledWithReplacementDpEvent(sched.num_examples, int(sched.batch_size),
                                           ev.GaussianDpEvent(sigma)),
          {"neighboring_relation": "REPLACE_ONE", "evaluate_every": sched.steps_per_epoch})


def _truncated_block(sched, sigma):
  ev = accounting.events
  return (ev.TruncatedSubsampledGaussianDpEvent(
      dataset_size=sched.num_examples, sampling_probability=sched.sampling_probability,
      truncated_batch_size=int(sched.settings.max_batch_size), noise_multiplier=sigma),
          {"evaluate_every": math.ceil(sched.total_steps / sched.num_epochs)})


#: the block each record without one needs (the event of one step and its options)
BLOCKS = {"fixed_size": _fixed_size_block,
          "fixed_size_with_replacement": _with_replacement_block,
          "truncated_poisson": _truncated_block}

#: one small run per registered sampler (T = 4 to 8 steps)
CONFIGS = {
    "balls_in_bins": dict(num_examples=40, batch_size=10, num_epochs=2),
    "poisson": dict(num_examples=40, batch_size=10, num_epochs=2),
    "shuffle": dict(num_examples=22, batch_size=5, num_epochs=2),
    "fixed_size": dict(num_examples=20, batch_size=10, num_epochs=2),
    "fixed_size_with_replacement": dict(num_examples=4, batch_size=1, num_epochs=1),
    "truncated_poisson": dict(num_examples=8, batch_size=2, max_batch_size=3, num_epochs=1),
    "cyclic_poisson": dict(num_examples=40, batch_size=5, cycle_length=2, num_epochs=1),
}
#: the samplers whose dpsgd.epsilon builds the run's PLD pair for N and B (10-20 s
#: each on a shared 2-core machine, at these tiny runs): their dpsgd comparison is
#: marked slow; by default fixed_size's tracker is compared with the accountant's
#: upper of the run event (1.5 s), the other two's with it under slow too
SLOW = ("fixed_size", "fixed_size_with_replacement", "truncated_poisson")


@pytest.fixture
def blocks():
  """Records without a block get :data:`BLOCKS`' for the test (restored after)."""
  patched = []
  for name in samplers.names():
    if name in BLOCKS and name in CONFIGS:
      rec = sampling.loader(name, **CONFIGS[name]).record
      if rec.block is None:
        object.__setattr__(rec, "block", BLOCKS[name])   # a frozen record, put back below
        patched.append(rec)
  yield
  for rec in patched:
    object.__setattr__(rec, "block", None)


def test_every_registered_sampler_has_a_loader():
  assert set(samplers.names()) <= set(CONFIGS), "a new sampler needs a CONFIGS entry"
  for name in samplers.names():
    s = sampling.loader(name, **CONFIGS[name])
    assert s.sampling == name and s.record.name == name
    sched = dpsgd.schedule(sampling=name, **CONFIGS[name])
    assert len(s) == s.num_steps == sched.total_steps
  with pytest.raises(ValueError, match="sampling"):
    sampling.loader("no_such_sampler", num_examples=10, batch_size=2, num_epochs=1)


def _train(s, noise_multiplier, *, jit=True):
  """Runs the loader's whole schedule through its dp_transform; the final state."""
  params = jnp.zeros(3)
  tx = optax.chain(s.dp_transform(l2_norm_clip=1.0, noise_multiplier=noise_multiplier,
                                  delta=DELTA, key=0), optax.sgd(0.1))
  st = tx.init(params)
  upd = jax.jit(tx.update) if jit else tx.update
  rng = np.random.default_rng(0)
  for b in s:
    grads = jnp.asarray(rng.normal(size=(b.indices.size, 3)))
    u, st = upd(grads, st, params, mask=jnp.asarray(b.mask))
    params = optax.apply_updates(params, u)
  assert int(optax.tree.get(st, "count")) == s.num_steps
  return st


@pytest.mark.parametrize("name", [n if n not in SLOW else pytest.param(n, marks=pytest.mark.slow)
                                  for n in CONFIGS])
def test_dp_transform_tracks_dpsgd_epsilon(x64, blocks, name):
  """The epsilon after the run's last update is dpsgd.epsilon of the run, exactly."""
  s = sampling.loader(name, **CONFIGS[name])
  eps, delta = tracking.privacy_spent(_train(s, SIGMA))
  ref = dpsgd.epsilon(noise_multiplier=SIGMA, delta=DELTA, sampling=name, progress=False,
                      **CONFIGS[name])
  assert delta == DELTA
  assert eps == ref.epsilon                       # tolerance 0
  assert s.epsilon(noise_multiplier=SIGMA, delta=DELTA).epsilon == ref.epsilon


@pytest.mark.parametrize("name", ["fixed_size"] + [
    pytest.param(n, marks=pytest.mark.slow) for n in SLOW if n != "fixed_size"])
def test_slow_samplers_track_the_accountants_upper(x64, blocks, name):
  """Default-suite stand-in of the test above for the slow samplers: the tracked
  epsilon is the accountant's upper of the run's event (what dpsgd.epsilon
  returns for them: the accountant's bracket), exactly."""
  s = sampling.loader(name, **CONFIGS[name])
  eps, _ = tracking.privacy_spent(_train(s, SIGMA))
  event = dpsgd.event(noise_multiplier=SIGMA, sampling=name, **CONFIGS[name])
  rel = {"add_remove": "ADD_OR_REMOVE_ONE", "replace_one": "REPLACE_ONE"}[s.neighbouring]
  acc = accounting.PLDAccountant(accounting.NeighboringRelation[rel])
  assert eps == acc.compose(event).get_epsilon(DELTA)
  assert s.accountant(noise_multiplier=SIGMA).neighbouring == s.neighbouring


@pytest.mark.parametrize("name", [n for n in CONFIGS if n not in SLOW])
def test_accountant_for_takes_every_registered_name(x64, blocks, name):
  """accountant_for(name) is the loader's accountant: its last entry is dpsgd.epsilon."""
  cfg = CONFIGS[name]
  acc = tracking.accountant_for(name, noise_multiplier=SIGMA, progress=False, **cfg)
  T = dpsgd.schedule(sampling=name, **cfg).total_steps
  tab = tracking.epsilon_table(acc, num_steps=T, delta=DELTA)
  ref = dpsgd.epsilon(noise_multiplier=SIGMA, delta=DELTA, sampling=name, progress=False,
                      **cfg).epsilon
  assert tab[-1] == ref
  mine = sampling.loader(name, **cfg).accountant(noise_multiplier=SIGMA)
  assert (acc.event, acc.block_size) == (mine.event, mine.block_size)


def test_accountant_for_slow_names_build(blocks):
  for name in SLOW:
    acc = tracking.accountant_for(name, noise_multiplier=SIGMA, **CONFIGS[name])
    mine = sampling.loader(name, **CONFIGS[name]).accountant(noise_multiplier=SIGMA)
    assert (acc.event, acc.block_size, acc.neighbouring) == (
        mine.event, mine.block_size, mine.neighbouring)


@pytest.mark.parametrize("old, new, batch_size", [("allocation", "balls_in_bins", 10),
                                                  ("gaussian", "shuffle", 10),
                                                  ("gaussian", "shuffle", None)])
def test_previous_scheme_words_warn_and_mean_the_same(old, new, batch_size):
  cfg = dict(num_examples=40, num_epochs=2)
  with pytest.warns(DeprecationWarning, match=new):
    acc = tracking.accountant_for(old, noise_multiplier=SIGMA, batch_size=batch_size, **cfg)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    ref = tracking.accountant_for(new, noise_multiplier=SIGMA,
                                  batch_size=40 if batch_size is None else batch_size, **cfg)
  assert (acc.event, acc.block_size) == (ref.event, ref.block_size)
  # full batch ("gaussian" without batch_size): one step an epoch
  assert acc.block_size == (1 if batch_size is None else 4)


@pytest.mark.parametrize("kw, match", [
    (dict(sampling="no_such"), "sampling"),
    (dict(sampling="shuffle", batch_size=None), "batch_size"),
    (dict(sampling="poisson", batch_size=50), "batch_size"),
    (dict(sampling="shuffle", noise_multiplier=0.0), "noise_multiplier"),
    (dict(sampling="shuffle", num_selected=2), "num_selected"),
])
def test_accountant_for_refusals_name_the_parameter(kw, match):
  args = {**dict(sampling="shuffle", noise_multiplier=1.0, num_examples=40, batch_size=10,
                num_epochs=1), **kw}
  with pytest.raises(ValueError, match=match):
    tracking.accountant_for(args.pop("sampling"), **args)


# ---------------------------------------------------------------- the batches

def test_shuffle_batches_are_a_permutation_cut_into_b():
  s = sampling.loader("shuffle", num_examples=22, batch_size=5, num_epochs=2, seed=3)
  assert s.steps_per_epoch == 4 and s.pad_size == 5
  for e in range(2):
    got = np.concatenate([s.batch(e * 4 + j).indices for j in range(4)])
    assert got.size == 20 and np.unique(got).size == 20       # 2 examples left out
    assert all(s.batch(e * 4 + j).size == 5 and s.batch(e * 4 + j).epoch == e
               for j in range(4))
  first = set(np.concatenate([s.batch(j).indices for j in range(4)]).tolist())
  second = set(np.concatenate([s.batch(4 + j).indices for j in range(4)]).tolist())
  assert first != second                                       # a fresh permutation


def test_fixed_size_batches():
  s = sampling.loader("fixed_size", num_examples=30, batch_size=7, num_epochs=3, seed=1)
  counts = np.zeros(30)
  for b in s:
    assert b.size == 7 == b.indices.size and np.unique(b.indices).size == 7
    assert np.all(b.mask == 1)
    counts[b.indices] += 1
  assert counts.sum() == 7 * s.num_steps
  w = sampling.loader("fixed_size_with_replacement", num_examples=5, batch_size=4,
                      num_epochs=4, seed=0)
  sizes = [np.unique(b.indices).size for b in w]
  assert all(b.size == 4 for b in w) and min(sizes) < 4         # repeats are kept


def test_truncated_poisson_keeps_at_most_the_cap():
  s = sampling.loader("truncated_poisson", num_examples=200, batch_size=20,
                      max_batch_size=21, total_steps=200, seed=0)
  sizes = np.array([b.size for b in s])
  assert s.pad_size == 21 and sizes.max() == 21 and s.overflow_bound == 0.0
  # below the cap the sizes are Binomial(200, 0.1): P(size <= 20) = 0.55917 (scipy)
  frac = np.mean(sizes < 21)
  assert abs(frac - 0.55917) < 5 * math.sqrt(0.55917 * 0.44083 / 200)


def test_cyclic_poisson_samples_its_group_at_rate_b_b_over_n():
  s = sampling.loader("cyclic_poisson", num_examples=1000, batch_size=50, cycle_length=4,
                      total_steps=400, seed=0)
  assert s.q == pytest.approx(0.2)
  assert sorted(np.concatenate(s.groups).tolist()) == list(range(1000))
  sizes = []
  for b in s:
    members = b.indices[b.mask > 0]
    assert np.all(np.isin(members, s.groups[b.step % 4]))
    sizes.append(b.size)
  # Binomial(250, 0.2) per step: mean 50, sd sqrt(40); 400 steps
  assert abs(np.mean(sizes) - 50) < 5 * math.sqrt(40 / 400)
  assert s.overflow_bound <= 1e-6


def test_previous_keyword_scheme_warns():
  with pytest.warns(DeprecationWarning, match="sampling"):
    acc = tracking.accountant_for(scheme="poisson", noise_multiplier=SIGMA, num_examples=40,
                                  batch_size=10, num_epochs=1)
  ref = tracking.accountant_for("poisson", noise_multiplier=SIGMA, num_examples=40,
                                batch_size=10, num_epochs=1)
  assert acc.event == ref.event
