"""jaxacct.tracking.dp_aggregate and the hook's fixed-schedule guard (issue 31, items 1-2).

What is trained is what is accounted:
* the released update is the same function of the sampled examples for
  datasets of N and N + 1 examples (same key, same sampled real examples ->
  bitwise identical update), under the sampler's declared capacity; optax's
  ``differentially_private_aggregate`` on the legacy (n-derived) padding is
  shown to differ by the ratio of the padded lengths (the bug);
* on overflow (batch padded past the capacity) the divisor is unchanged:
  the update equals the one of the same rows at any other padded length
  (float64, 1e-15 absolute on values of order 1: a sum of <= 128 terms in a
  different reduction tree), and with sigma = 0 it is sum(clip(g_i)) / m from
  an independent NumPy computation (1e-14 relative);
* padding rows (mask 0) contribute exactly zero, even when non-finite;
* the noise has std sigma C / m per coordinate (10 % on 20 000 coordinates:
  5 sigma of the sample std's relative error 1/sqrt(2 d) = 0.5 %, loose);
* a schedule change (new sigma, clip or batch size in dp_aggregate; a new
  accountant in track_privacy) on a carried-over state is refused: raised
  eagerly, masked and flagged under jit, raised by privacy_spent on the host.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from jaxacct import sampling, tracking
from jaxacct.accounting import PLDAccountant, events as ev


def _data(n, d=5, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(n, d)), rng.normal(size=n)


def _per_example_grads(w, x, y):
  """Per-example gradients of 0.5 (x.w - y)^2 as a pytree {w: (L, d), b: (L,)}."""
  r = x @ w - y
  return {"w": r[:, None] * x, "b": 2.0 * r}


def _update(tx, state, grads, mask):
  return jax.jit(lambda g, s, m: tx.update(g, s, mask=m))(grads, state, mask)


def _clipped_sum_np(grads, mask, c):
  flat = np.concatenate([np.asarray(grads["w"]), np.asarray(grads["b"])[:, None]], axis=1)
  norms = np.linalg.norm(flat, axis=1)
  scale = np.minimum(1.0, c / np.where(norms > 0, norms, 1.0)) * (np.asarray(mask) > 0)
  return {"w": (scale[:, None] * np.asarray(grads["w"])).sum(0),
          "b": (scale * np.asarray(grads["b"])).sum(0)}


def test_update_is_the_same_function_of_the_sample_for_n_and_n_plus_1(x64):
  m, q, steps, sigma, c = 16.0, 0.1, 30, 1.3, 0.7
  n = 160
  x1, y1 = _data(n + 1)
  x0, y0 = x1[:n], y1[:n]                     # dataset N; N + 1 adds one example
  s0 = sampling.PoissonSampler(num_examples=n, sampling_probability=q, num_steps=steps, seed=3,
                               expected_batch_size=m)
  s1 = sampling.PoissonSampler(num_examples=n + 1, sampling_probability=q, num_steps=steps, seed=3,
                               expected_batch_size=m)
  assert s0.pad_size == s1.pad_size == sampling.capacity_for(expected_batch_size=m,
                                                             num_steps=steps)
  assert s0.neighbouring == s1.neighbouring == "add_remove"
  w = jnp.asarray(np.linspace(-1, 1, 5))
  params = {"w": w, "b": jnp.zeros(())}
  tx = tracking.dp_aggregate(l2_norm_clip=c, noise_multiplier=sigma, expected_batch_size=m,
                             key=jax.random.key(7))
  st0 = st1 = tx.init(params)
  same = with_x = 0
  for b0, b1 in zip(s0, s1):
    g0 = _per_example_grads(w, jnp.asarray(x0)[b0.indices], jnp.asarray(y0)[b0.indices])
    g1 = _per_example_grads(w, jnp.asarray(x1)[b1.indices], jnp.asarray(y1)[b1.indices])
    u0, st0 = _update(tx, st0, g0, jnp.asarray(b0.mask))
    u1, st1 = _update(tx, st1, g1, jnp.asarray(b1.mask))
    if n not in b1.indices[b1.mask > 0]:     # the added example was not sampled
      np.testing.assert_array_equal(b0.indices, b1.indices)
      for k in u0:                           # bitwise
        assert np.array_equal(np.asarray(u0[k]), np.asarray(u1[k])), (b0.step, k)
      same += 1
    else:                                    # it was: the difference is its clipped grad / m
      gx = _per_example_grads(w, jnp.asarray(x1[n:]), jnp.asarray(y1[n:]))
      cx = _clipped_sum_np(gx, np.ones(1), c)
      for k in u0:
        np.testing.assert_allclose(np.asarray(u1[k]) - np.asarray(u0[k]), cx[k] / m,
                                   rtol=0, atol=1e-14)
      with_x += 1
  assert same >= 20 and with_x >= 1, (same, with_x)


def test_legacy_optax_divisor_depends_on_n(x64):
  """The bug: optax divides by the padded length, which a capacity from the
  dataset size n (the legacy rule: the smallest multiple of 8 with
  steps * P(Bin(n, p) > B) <= 1e-6, here from scipy) derives from n."""
  p, steps = 0.1, 30
  pads = {n: 8 * math.ceil(stats.binom.isf(1e-6 / steps, n, p) / 8)
          for n in range(150, 400)}
  n = next(k for k in pads if pads[k + 1] != pads[k])
  g = jnp.zeros((pads[n + 1], 3)).at[:4].set(0.1)
  opt = optax.contrib.differentially_private_aggregate(1.0, 0.0, key=jax.random.key(0))
  u_n, _ = opt.update(g[:pads[n]], opt.init(jnp.zeros(3)))
  u_n1, _ = opt.update(g, opt.init(jnp.zeros(3)))
  np.testing.assert_allclose(np.asarray(u_n) / np.asarray(u_n1), pads[n + 1] / pads[n],
                             rtol=1e-12)
  ours = tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=0.0, expected_batch_size=16,
                               key=0)
  v_n, _ = ours.update(g[:pads[n]], ours.init(jnp.zeros(3)))
  v_n1, _ = ours.update(g, ours.init(jnp.zeros(3)))
  assert np.array_equal(np.asarray(v_n), np.asarray(v_n1))


def test_overflow_keeps_the_divisor(x64):
  m, c, sigma = 100.0, 1.0, 0.8
  s = sampling.BallsInBinsSampler(num_examples=400, steps_per_epoch=4, num_epochs=1, seed=0,
                                  pad_size=64, expected_batch_size=m)
  with pytest.warns(RuntimeWarning, match="no example dropped"):
    batches = s.epoch_batches(0)
  x, y = _data(400, seed=1)
  w = jnp.asarray(np.linspace(-1, 1, 5))
  params = {"w": w, "b": jnp.zeros(())}
  for b in batches:
    assert b.indices.shape[0] == 128 and b.size > 64          # overflowed: padded to 2 x 64
    real = b.indices[b.mask > 0]
    g_over = _per_example_grads(w, jnp.asarray(x)[b.indices], jnp.asarray(y)[b.indices])
    wide = np.zeros(256, np.int32)
    wide[:real.size] = real
    wmask = np.zeros(256)
    wmask[:real.size] = 1.0
    g_wide = _per_example_grads(w, jnp.asarray(x)[wide], jnp.asarray(y)[wide])
    for sig in (sigma, 0.0):
      tx = tracking.dp_aggregate(l2_norm_clip=c, noise_multiplier=sig, expected_batch_size=m,
                                 key=jax.random.key(b.step))
      u_over, _ = _update(tx, tx.init(params), g_over, jnp.asarray(b.mask))
      u_wide, _ = _update(tx, tx.init(params), g_wide, jnp.asarray(wmask))
      for k in u_over:
        np.testing.assert_allclose(np.asarray(u_over[k]), np.asarray(u_wide[k]),
                                   rtol=0, atol=1e-15)
      if sig == 0.0:                       # divisor m, not 128 nor b.size
        ref = _clipped_sum_np(g_over, b.mask, c)
        for k in u_over:
          np.testing.assert_allclose(np.asarray(u_over[k]), ref[k] / m, rtol=1e-14)


def test_padding_rows_contribute_zero_and_mask_none_means_all_real(x64):
  tx = tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=0.5, expected_batch_size=3.0,
                             key=0)
  g = jnp.array([[3.0, 4.0], [0.3, 0.4], [jnp.nan, jnp.inf], [1e30, 0.0]])
  mask = jnp.array([1.0, 1.0, 0.0, 0.0])
  u, _ = tx.update(g, tx.init(jnp.zeros(2)), mask=mask)
  v, _ = tx.update(g[:2], tx.init(jnp.zeros(2)))
  assert np.all(np.isfinite(np.asarray(u)))
  np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
  # doctest value: (0.6, 0.8) + (0.3, 0.4) over m = 3 when sigma = 0
  tx0 = tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=0.0, expected_batch_size=3.0,
                              key=0)
  u0, _ = tx0.update(g, tx0.init(jnp.zeros(2)), mask=mask)
  np.testing.assert_allclose(np.asarray(u0), [0.3, 0.4], rtol=1e-15)


def test_noise_std_is_sigma_c_over_m(x64):
  c, sigma, m, d = 0.5, 2.0, 8.0, 20_000
  tx = tracking.dp_aggregate(l2_norm_clip=c, noise_multiplier=sigma, expected_batch_size=m,
                             key=1)
  u, st = tx.update(jnp.zeros((4, d)), tx.init(jnp.zeros(d)))
  np.testing.assert_allclose(float(jnp.std(u)), sigma * c / m, rtol=0.1)
  u2, _ = tx.update(jnp.zeros((4, d)), st)
  assert not np.array_equal(np.asarray(u), np.asarray(u2))   # the key advances


def test_one_compile_per_padded_length(compile_counter):
  tx = tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=1.0, expected_batch_size=8,
                             key=0)
  upd = jax.jit(lambda g, s, m: tx.update(g, s, mask=m))
  st = tx.init(jnp.zeros(3))
  gs = [jnp.asarray(np.full((16, 3), float(i), np.float32)) for i in range(6)]
  masks = [jnp.asarray((np.arange(16) < i).astype(np.float32)) for i in range(6)]
  _, st = upd(gs[0], st, masks[0])                     # warm up: the one compile
  with compile_counter as cc:
    for g, mk in zip(gs[1:], masks[1:]):              # new values, same shapes
      _, st = upd(g, st, mk)
  assert cc.count == 0


@pytest.mark.parametrize("kw, match", [
    (dict(l2_norm_clip=0.0), "l2_norm_clip"),
    (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(expected_batch_size=0.0), "expected_batch_size"),
    (dict(expected_batch_size=jnp.ones(2)), "expected_batch_size"),
    (dict(key="0"), "key"),
    # issue 67: np.bool_ was read as the number 1
    (dict(l2_norm_clip=np.bool_(True)), "l2_norm_clip must be a number, not a boolean"),
    (dict(noise_multiplier=np.bool_(True)), "noise_multiplier must be a number, not a boolean"),
    (dict(expected_batch_size=np.bool_(True)), "expected_batch_size must be a number, not a"),
    (dict(expected_batch_size=jnp.asarray(True)), "expected_batch_size must be a number, not"),
])
def test_bad_arguments(kw, match):
  base = dict(l2_norm_clip=1.0, noise_multiplier=1.0, expected_batch_size=8.0, key=0)
  with pytest.raises(ValueError, match=match):
    tracking.dp_aggregate(**{**base, **kw})
  if "l2_norm_clip" in kw:
    with pytest.raises(ValueError, match=match):
      tracking.clip_and_sum(kw["l2_norm_clip"])


def test_settings_are_checked_statically_inside_jit(x64):
  """Built inside a jitted step from Python numbers, the aggregate takes traced
  gradients and mask (the settings' checks are static), and gives the eager update."""
  g = jnp.array([[3.0, 4.0], [0.3, 0.4], [9.0, 9.0]])
  mask = jnp.array([1.0, 1.0, 0.0])

  def step(g, mask):
    tx = tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=0.0,
                               expected_batch_size=4.0, key=0)
    u, _ = tx.update(g, tx.init(jnp.zeros(2)), mask=mask)
    return u, tracking.clip_and_sum(1.0).update(g, optax.EmptyState())[0]

  eager, jitted = step(g, mask), jax.jit(step)(g, mask)
  # (0.6, 0.8) + (0.3, 0.4) over m = 4; clip_and_sum: the three clipped rows
  np.testing.assert_allclose(np.asarray(eager[0]), [0.225, 0.3], rtol=1e-12)
  np.testing.assert_allclose(np.asarray(eager[1]),
                             [0.6 + 0.3 + 9 / math.hypot(9, 9), 0.8 + 0.4 + 9 / math.hypot(9, 9)],
                             rtol=1e-12)
  for a, b in zip(eager, jitted):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12)


def test_traced_noise_multiplier_is_refused():
  @jax.jit
  def f(s):
    tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=s, expected_batch_size=8.0,
                          key=0)
    return s
  with pytest.raises(ValueError, match="noise_multiplier must be a concrete scalar"):
    f(1.0)


# ------------------------------------------------------ fixed schedule (item 2)

def _chain(sigma, m, accountant_sigma=None):
  acc = tracking.EventAccountant(ev.GaussianDpEvent(
      sigma if accountant_sigma is None else accountant_sigma))
  return optax.chain(
      tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=sigma, expected_batch_size=m,
                            key=0),
      tracking.track_privacy(acc, num_steps=10, delta=1e-5),
      optax.sgd(0.1))


@pytest.mark.parametrize("new", [dict(sigma=2.0, m=4.0), dict(sigma=1.0, m=8.0)],
                         ids=["noise_multiplier", "batch_size"])
def test_schedule_change_is_refused(new):
  g = jnp.ones((4, 3))
  p = jnp.zeros(3)
  old = _chain(1.0, 4.0)
  st = old.init(p)
  _, st = old.update(g, st, p)
  # rebuilt with the same schedule: accepted (same fingerprints)
  _, st = _chain(1.0, 4.0).update(g, st, p)
  assert int(optax.tree.get(st, "count")) == 2
  changed = _chain(**new)
  with pytest.raises(tracking.PrivacyScheduleChanged, match="fixed in advance"):
    changed.update(g, st, p)                       # eager: raised at once
  u, st2 = jax.jit(changed.update)(g, st, p)       # jit: refused, flagged
  assert np.all(np.asarray(u) == 0)
  assert bool(optax.tree.get(st2, "settings_changed"))
  with pytest.raises(tracking.PrivacyScheduleChanged):
    tracking.privacy_spent(st2)                    # the host-side check
  u, st3 = jax.jit(old.update)(g, st2, p)          # sticky: refused from then on
  assert np.all(np.asarray(u) == 0)


def test_hook_refuses_a_new_accountant_mid_run():
  g = jnp.ones((4, 3))
  p = jnp.zeros(3)
  old = _chain(1.0, 4.0)
  st = old.init(p)
  _, st = old.update(g, st, p)
  eps1 = float(tracking.privacy_spent(st)[0])
  # the aggregate keeps sigma = 1, the hook is rebuilt for sigma = 3: the table changed
  hook_only = _chain(1.0, 4.0, accountant_sigma=3.0)
  with pytest.raises(tracking.PrivacyScheduleChanged, match="arXiv:2602.06756"):
    hook_only.update(g, st, p)
  u, st2 = jax.jit(hook_only.update)(g, st, p)
  pts = optax.tree.get(st2, "PrivacyTrackerState")
  assert bool(pts.schedule_changed) and int(pts.count) == 1 and float(pts.eps) == eps1
  assert np.all(np.asarray(u) == 0)                # masked after the noise: nothing applied
  with pytest.raises(tracking.PrivacyScheduleChanged):
    tracking.privacy_spent(st2)


def test_accountants_name_their_relation():
  from jaxacct.accounting import NeighboringRelation
  poisson = ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.0))
  assert tracking.EventAccountant(poisson).neighbouring == "add_remove"
  alloc = ev.RandomAllocationDpEvent(noise_multiplier=1.0, steps_per_epoch=4)
  assert tracking.EventAccountant(alloc, block_size=4).neighbouring == "add_remove"
  assert tracking.EventAccountant(ev.GaussianDpEvent(1.0)).neighbouring == "add_remove"
  shuffle = tracking.EventAccountant(ev.ShuffleDpEvent(n=10, eps0=1.0),
                                     neighboring_relation=NeighboringRelation.REPLACE_ONE)
  assert shuffle.neighbouring == "replace_one"
  assert tracking.EpsilonTableAccountant(epsilons=np.array([0.0, 1.0]),
                                         delta=1e-5).neighbouring is None
  s = sampling.BallsInBinsSampler(num_examples=100, steps_per_epoch=10, num_epochs=1,
                                  expected_batch_size=10)
  assert s.neighbouring == s.accountant(noise_multiplier=1.0).neighbouring == "add_remove"


def test_hook_refuses_a_budget_or_length_change_mid_run():
  acc = tracking.EventAccountant(ev.GaussianDpEvent(2.0))
  p = jnp.zeros(3)
  tx = tracking.track_privacy(acc, num_steps=10, delta=1e-5, max_epsilon=5.0)
  _, st = tx.update(p, tx.init(p))
  same = tracking.track_privacy(tracking.EventAccountant(ev.GaussianDpEvent(2.0)), num_steps=10,
                                delta=1e-5, max_epsilon=5.0)
  _, st = same.update(p, st)                        # an identical rebuild is accepted
  for kw in (dict(num_steps=10, max_epsilon=50.0), dict(num_steps=20, max_epsilon=5.0),
             dict(num_steps=10, max_epsilon=None)):
    with pytest.raises(tracking.PrivacyScheduleChanged):
      tracking.track_privacy(acc, delta=1e-5, **kw).update(p, st)


# ------------------------------------------- non-finite rows, shapes (issue 54 items 4, 10)

def test_nan_row_is_zeroed_like_padding(x64):
  """A sampled example whose gradient is NaN (or inf, or whose norm overflows) contributes 0.

  Before issue 54 a NaN row had scale min(1, C) (``norm > 0`` is false) and the update was
  NaN: whether a sampled example produced a NaN was released outside the Gaussian sum. The
  reference is the update with those rows masked out (bitwise: the same sum of the same
  finite terms), and with sigma = 0 the clipped sum (0.6, 0.8) + (0.3, 0.4) over m = 3.
  """
  g = jnp.array([[3.0, 4.0], [jnp.nan, 1.0], [0.3, 0.4], [jnp.inf, 0.0], [1e300, 1e300]])
  real = jnp.array([1.0, 0.0, 1.0, 0.0, 0.0])
  for sigma in (0.0, 0.5):
    tx = tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=sigma,
                               expected_batch_size=3.0, key=0)
    st = tx.init(jnp.zeros(2))
    u, _ = tx.update(g, st)                               # every row marked real
    uj, _ = jax.jit(tx.update)(g, st)
    v, _ = tx.update(g, st, mask=real)                    # the non-finite rows as padding
    assert np.all(np.isfinite(np.asarray(u)))
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    # jit fuses the noise division differently: 1 ulp (2e-16 relative measured)
    np.testing.assert_allclose(np.asarray(uj), np.asarray(v), rtol=1e-15, atol=0)
    if sigma == 0.0:
      np.testing.assert_allclose(np.asarray(u), [0.3, 0.4], rtol=1e-15)
  # a NaN in one leaf of a pytree zeroes the example's row in every leaf
  tx = tracking.dp_aggregate(l2_norm_clip=10.0, noise_multiplier=0.0, expected_batch_size=1.0,
                             key=0)
  tree = {"a": jnp.array([[1.0], [2.0]]), "b": jnp.array([[jnp.nan, 0.0], [1.0, 1.0]])}
  u, _ = tx.update(tree, tx.init({"a": jnp.zeros(1), "b": jnp.zeros(2)}))
  np.testing.assert_array_equal(np.asarray(u["a"]), [2.0])
  np.testing.assert_array_equal(np.asarray(u["b"]), [1.0, 1.0])


@pytest.mark.parametrize("updates, mask, match", [
    ({"a": jnp.ones((4, 2)), "b": jnp.ones((3,))}, None, "leading"),
    ({"a": jnp.ones((4, 2)), "b": jnp.ones(())}, None, "leading example axis"),
    (jnp.ones((4, 2)), jnp.ones(3), "mask"),
    (jnp.ones((4, 2)), jnp.ones((4, 2)), "mask"),
    ({}, None, "updates"),
], ids=["mismatched-leaves", "scalar-leaf", "short-mask", "2d-mask", "empty"])
def test_update_shapes_are_checked(updates, mask, match):
  tx = tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=1.0, expected_batch_size=4.0,
                             key=0)
  st = tx.init(None)
  with pytest.raises(ValueError, match=match):
    tx.update(updates, st, mask=mask)
  with pytest.raises(ValueError, match=match):          # shapes are static under jit too
    jax.jit(lambda u, s, m: tx.update(u, s, mask=m))(updates, st, mask)


# ------------------------------------------------- one set of settings (issue 55 item 2)

def test_mismatched_aggregate_and_accountant_are_refused(x64):
  # noise 0.3 / batch 120 trained, sigma 3.0 / batch 60 accounted: the hook
  # reported epsilon 0.175 for a run that spent far more; now refused
  from jaxacct.sampling import PoissonSampler
  import optax
  s = PoissonSampler(num_examples=1200, batch_size=60, num_epochs=1)
  tx = optax.chain(
      tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=0.3, expected_batch_size=120,
                            key=0),
      tracking.track_privacy(s.accountant(noise_multiplier=3.0), num_steps=s.num_steps, delta=1e-5))
  st = tx.init(jnp.zeros(2))
  _, st = tx.update(jnp.ones((8, 2)), st, mask=jnp.ones(8))
  with pytest.raises(ValueError, match="noise_multiplier: dp_aggregate 0.3, accountant 3"):
    tracking.privacy_spent(st)
  with pytest.raises(ValueError, match="expected_batch_size: dp_aggregate 120, accountant 60"):
    tracking.privacy_spent(st)


def test_one_constructor_run_is_the_accountants_epsilon(x64):
  from jaxacct.sampling import BallsInBinsSampler
  s = BallsInBinsSampler(num_examples=200, batch_size=20, num_epochs=2, seed=1)
  assert (s.t, s.expected_batch_size) == (10, 20.0)
  tx = s.dp_transform(l2_norm_clip=1.0, noise_multiplier=1.3, delta=1e-5, key=0)
  st = tx.init(jnp.zeros(3))
  upd = jax.jit(tx.update)
  for b in s:
    _, st = upd(jnp.ones((s.pad_size, 3)), st, mask=jnp.asarray(b.mask))
  eps, delta = tracking.privacy_spent(st)
  assert isinstance(eps, float) and isinstance(delta, float) and delta == 1e-5
  ref = PLDAccountant().compose(ev.RandomAllocationDpEvent(
      noise_multiplier=1.3, steps_per_epoch=10, num_epochs=2)).get_epsilon(1e-5)
  assert eps == ref


# ---------------------------- no NaN released, on every path (issue 67 item 3)

def test_clip_and_sum_zeroes_non_finite_rows_like_dp_aggregate(x64):
  """clip_and_sum (the gradient-accumulation path) releases no NaN either: a row
  with a NaN, an inf or an overflowing norm contributes 0, as in dp_aggregate.
  Before issue 67 it was optax.per_example_global_norm_clip, whose NaN row made the
  whole sum NaN. Reference: the finite rows' clipped sum from NumPy,
  (0.6, 0.8) + (0.3, 0.4) = (0.9, 1.2), 1e-15 relative."""
  g = jnp.array([[3.0, 4.0], [jnp.nan, 1.0], [0.3, 0.4], [jnp.inf, 0.0], [1e300, 1e300]])
  tx = tracking.clip_and_sum(1.0)
  for upd in (tx.update, jax.jit(tx.update)):
    u, _ = upd(g, tx.init(jnp.zeros(2)))
    assert np.all(np.isfinite(np.asarray(u)))
    np.testing.assert_allclose(np.asarray(u), [0.9, 1.2], rtol=1e-15)
  # the same rows through dp_aggregate (sigma 0, m = 1): the same sum
  agg = tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=0.0, expected_batch_size=1.0,
                              key=0)
  v, _ = agg.update(g, agg.init(jnp.zeros(2)))
  np.testing.assert_array_equal(np.asarray(v), np.asarray(u))
  # a NaN in one leaf zeroes the example in every leaf
  tree = {"a": jnp.array([[1.0], [2.0]]), "b": jnp.array([[jnp.nan, 0.0], [1.0, 1.0]])}
  u, _ = tracking.clip_and_sum(10.0).update(tree, optax.EmptyState())
  np.testing.assert_array_equal(np.asarray(u["a"]), [2.0])
  np.testing.assert_array_equal(np.asarray(u["b"]), [1.0, 1.0])


def test_float16_gradients_accumulate_in_float32():
  """float16 gradients: squares, norms and sums in float32, the update in float16.

  700 rows of (100, 0) clipped at C = 100 sum to 70,000 > 65,504 (float16's
  largest): before issue 67 dp_aggregate released inf (the float16 sum overflowed),
  now (70,000 + noise) / 700 = 100 at sigma 0, exactly. A row of (300, 0) (square
  90,000 > 65,504) was scaled to 0 as non-finite; now it is clipped to norm 1."""
  g = jnp.zeros((700, 2), jnp.float16).at[:, 0].set(100.0)
  agg = tracking.dp_aggregate(l2_norm_clip=100.0, noise_multiplier=0.0,
                              expected_batch_size=700.0, key=0)
  u, _ = jax.jit(agg.update)(g, agg.init(jnp.zeros(2, jnp.float16)))
  assert u.dtype == jnp.float16
  np.testing.assert_array_equal(np.asarray(u, np.float64), [100.0, 0.0])
  noisy = tracking.dp_aggregate(l2_norm_clip=100.0, noise_multiplier=1.0,
                                expected_batch_size=700.0, key=0)
  u, _ = jax.jit(noisy.update)(g, noisy.init(jnp.zeros(2, jnp.float16)))
  assert np.all(np.isfinite(np.asarray(u, np.float64)))
  assert abs(float(u[0]) - 100.0) < 6 * 100.0 / 700.0 + 0.1      # 6 noise sds + f16 rounding
  big = jnp.array([[300.0, 0.0], [jnp.nan, 0.0]], jnp.float16)
  one = tracking.dp_aggregate(l2_norm_clip=1.0, noise_multiplier=0.0, expected_batch_size=1.0,
                              key=0)
  u, _ = jax.jit(one.update)(big, one.init(jnp.zeros(2, jnp.float16)))
  np.testing.assert_array_equal(np.asarray(u, np.float64), [1.0, 0.0])
  # clip_and_sum: the float32 sum, in float16, saturated at 65,504 (never inf)
  s, _ = jax.jit(tracking.clip_and_sum(100.0).update)(g, optax.EmptyState())
  assert s.dtype == jnp.float16 and float(s[0]) == 65504.0
  s, _ = jax.jit(tracking.clip_and_sum(1.0).update)(big, optax.EmptyState())
  np.testing.assert_array_equal(np.asarray(s, np.float64), [1.0, 0.0])
