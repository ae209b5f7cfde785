r"""DP-SGD aggregation whose divisor is a declared constant (what is trained is what is accounted).

:func:`dp_aggregate` clips per-example gradients, sums them over a padded
batch (rows with mask 0 contribute exactly zero), adds N(0, (sigma C)^2) per
coordinate and divides by the declared ``expected_batch_size``: a constant
fixed before training, never the padded length nor the count of real rows.
Bound: the released update is the accounted Gaussian sum times a constant.
"""

from __future__ import annotations

import functools
import zlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxacct._core import checks
from jaxacct.tracking._hook import PrivacyScheduleChanged, host_flag_set
from jaxacct.tracking._settings import register_aggregate


class DPAggregateState(NamedTuple):
  """State of :func:`dp_aggregate`.

  Attributes:
    rng_key: PRNG key of the next step's noise.
    settings_id: int32 scalar, fingerprint of (l2_norm_clip,
      noise_multiplier, expected_batch_size) recorded by ``init``.
    settings_changed: bool scalar, True once an update ran with settings
      other than the recorded ones (that update and every later one is
      refused: zeros).
  """
  rng_key: jax.Array
  settings_id: jax.Array
  settings_changed: jax.Array


def _fingerprint(*values) -> int:
  return zlib.crc32(np.asarray(values, np.float64).tobytes()) & 0x7FFFFFFF


def _concrete_number(name, x):
  checks.check_not_text(name, x)
  checks.check_not_bool(name, x)   # True, np.bool_ or a bool array: not the number 1
  if x is None or isinstance(x, (bool, jax.core.Tracer)) or np.ndim(x) != 0:
    raise ValueError(f"{name} must be a concrete scalar (a Python or NumPy number fixed "
                     "before training, not a traced or per-step value: a schedule that "
                     f"changes mid-run is not what the accountant analyses); got {x!r}.")
  return float(x)


def _leading_length(flat, mask) -> int:
  """The per-example axis length L shared by every leaf and the mask, or a ValueError."""
  if not flat:
    raise ValueError("updates must hold at least one array of per-example gradients; got "
                     "an empty pytree.")
  shapes = [jnp.shape(g) for g in flat]
  if any(len(sh) == 0 for sh in shapes):
    raise ValueError("updates must be per-example gradients: every leaf needs a leading "
                     f"example axis; got leaf shapes {shapes}.")
  lengths = sorted({sh[0] for sh in shapes})
  if len(lengths) != 1:
    raise ValueError("updates' leaves must share one leading (per-example) axis length; got "
                     f"leaf shapes {shapes}.")
  length = lengths[0]
  if mask is not None and int(np.prod(jnp.shape(mask), dtype=np.int64)) != length:
    raise ValueError(f"mask must have one entry per example, shape ({length},) like the "
                     f"updates' leading axis; got shape {tuple(jnp.shape(mask))}.")
  return length


def _to_dtype(x, dtype):
  """``x`` in ``dtype``, saturated at its largest finite value (a float16 update
  never turns into inf; the clamp is 1-Lipschitz per coordinate, a post-processing)."""
  if jnp.dtype(dtype) == x.dtype:
    return x
  top = float(jnp.finfo(dtype).max) if jnp.issubdtype(dtype, jnp.floating) else None
  return (jnp.clip(x, -top, top) if top is not None else x).astype(dtype)


def clipped_sums(flat, length, c, mask=None):
  """The per-example clipped sums of ``flat`` (leaves with a leading example axis
  ``length``), one per leaf, in the leaf's dtype promoted to at least float32.

  Each example's row (its entries in every leaf) is scaled to global L2 norm
  <= ``c``; a row whose norm is not finite (a NaN or inf entry, or a norm that
  overflows even in float32) is scaled to 0, as a padding row (``mask`` 0) is.
  Squares, norms and sums are taken in at least float32 whatever the
  gradients' dtype (a float16 sum past 65,504 would be inf).
  """
  wide = [jnp.promote_types(jnp.result_type(g), jnp.float32) for g in flat]
  norm_dt = functools.reduce(jnp.promote_types, wide)
  sq = sum(jnp.sum(jnp.reshape(g, (length, -1)).astype(norm_dt) ** 2, axis=1) for g in flat)
  norms = jnp.sqrt(sq)
  finite = jnp.isfinite(norms)
  scale = jnp.where(finite, jnp.minimum(1.0, c / jnp.where(finite & (norms > 0), norms, 1.0)),
                    0.0)
  if mask is not None:
    keep = jnp.reshape(jnp.asarray(mask), (length,)) > 0
    scale = jnp.where(keep, scale, 0.0)
  out = []
  for g, dt in zip(flat, wide):
    x = jnp.asarray(g).astype(dt)
    w = jnp.reshape(scale, (length,) + (1,) * (x.ndim - 1)).astype(dt)
    # where, not w * g: a zeroed row's non-finite gradient contributes 0, not NaN
    out.append(jnp.sum(jnp.where(w > 0, w * x, jnp.zeros_like(x)), axis=0))
  return out


def dp_aggregate(*, l2_norm_clip: float, noise_multiplier: float,
                 expected_batch_size: float, key) -> optax.GradientTransformationExtraArgs:
  r"""Clip, masked sum, Gaussian noise, divide by the declared expected batch size.

  DP-SGD's aggregation (Abadi et al., "Deep Learning with Differential
  Privacy", arXiv:1607.00133v2, Alg. 1) with the divisor taken out of the
  data:

  .. math:: u = \frac{1}{m}\Big(\sum_{i:\,\mathrm{mask}_i = 1}
     \mathrm{clip}_C(g_i) + \mathcal{N}(0, \sigma^2 C^2 I)\Big)

  with m = ``expected_batch_size``. For add/remove neighbours (the relation
  of :mod:`jaxacct.sampling` and of the Poisson/allocation accountants) the
  noisy sum has sensitivity C, and u is that sum times the constant 1/m: the
  accountant's (epsilon, delta) holds for u as it does for the sum.

  Why not ``optax.contrib.differentially_private_aggregate``: it divides the
  noisy sum by ``grads.shape[0]``, the padded batch length. A sampler pads
  to a length derived from the dataset size n (and, on overflow, from the
  realised batch), so optax's update is the noisy sum times a number that
  depends on n, which add/remove neighbours do not share, and on an overflow
  on the sampled batch itself: the released update is then not the
  mechanism the subsampled-Gaussian accountant analyses (opacus#819;
  arXiv:2605.15648). Dividing by the count of real rows is worse (the count
  is the data). Here the divisor is a declared constant, the noise a
  function of the key only, and padding rows contribute exactly zero, so
  the update is the same function of the sampled examples for any n and any
  padded length (tests/tracking/test_aggregate.py). A row whose norm is not
  finite (a NaN or inf gradient) is scaled to 0, as a padding row is.

  Args:
    l2_norm_clip: C > 0, per-example L2 clipping norm (global over leaves).
    noise_multiplier: sigma >= 0, noise std / C (0 only for debugging: the
      tracker's accountant must match the noise actually added).
    expected_batch_size: m > 0, declared before training (e.g. the
      sampler's ``expected_batch_size``: q n or k n / t for the dataset you
      plan for, fixed as a number). Never recomputed from the data.
    key: a ``jax.random.key`` or an int seed.

  The three settings must be concrete numbers (a traced or scheduled
  value raises ``ValueError``): the accountant analyses one fixed sigma and
  batch size. ``init`` records their fingerprint; an ``update`` by a
  transformation built with other settings on that state (e.g. an optimizer
  rebuilt mid-run with a new sigma and the old state carried over) is
  refused: eagerly it raises :class:`jaxacct.tracking.PrivacyScheduleChanged`;
  under ``jit`` it returns zeros and sets ``settings_changed`` (sticky), which
  :func:`jaxacct.tracking.privacy_spent` raises on once concrete.

  Returns:
    ``optax.GradientTransformationExtraArgs``; ``update(updates, state,
    params=None, *, mask=None)``: ``updates`` are per-example gradients
    (leading axis L, the padded length, any L); ``mask`` an (L,) 0/1 array
    (None: every row is real). Output leaves have the per-example shape and
    the gradients' dtype. State :class:`DPAggregateState`.

  Bound: exact post-processing (constant scaling) of the accounted noisy sum.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> tx = dp_aggregate(l2_norm_clip=1.0, noise_multiplier=0.0,
    ...                   expected_batch_size=4.0, key=0)
    >>> g = jnp.array([[3.0, 4.0], [0.3, 0.4], [9.0, 9.0]])   # last row: padding
    >>> u, _ = tx.update(g, tx.init(jnp.zeros(2)), mask=jnp.array([1.0, 1.0, 0.0]))
    >>> [round(float(v), 6) for v in u]
    [0.225, 0.3]
  """
  c = _concrete_number("l2_norm_clip", l2_norm_clip)
  checks.check_positive("l2_norm_clip", c)
  s = _concrete_number("noise_multiplier", noise_multiplier)
  checks.check_range("noise_multiplier", s, 0.0, np.inf)
  m = _concrete_number("expected_batch_size", expected_batch_size)
  checks.check_positive("expected_batch_size", m)
  if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
    key = jax.random.key(int(key))
  elif not isinstance(key, jax.Array):
    raise ValueError(f"key must be a jax.random.key or an int seed; got {key!r}.")
  noise_std = c * s
  sid = _fingerprint(c, s, m)
  register_aggregate(sid, s, m)   # privacy_spent refuses a tracker that accounts other settings
  settings = f"l2_norm_clip={c:g}, noise_multiplier={s:g}, expected_batch_size={m:g}"

  def init_fn(params):
    del params
    return DPAggregateState(rng_key=key, settings_id=jnp.asarray(sid, jnp.int32),
                            settings_changed=jnp.zeros([], bool))

  def update_fn(updates, state, params=None, *, mask=None, **extra_args):
    del params, extra_args
    changed = (state.settings_id != sid) | state.settings_changed
    if host_flag_set(changed):
      raise PrivacyScheduleChanged(
          "dp_aggregate: this optimizer state was initialised with other settings than "
          f"this transformation's ({settings}); a noise multiplier, clipping norm or "
          "batch size changed mid-run is not what the accountant analyses (the "
          "schedule must be fixed in advance). Start a new run (new init and accountant).")
    flat, tdef = jax.tree.flatten(updates)
    length = _leading_length(flat, mask)
    sums = clipped_sums(flat, length, c, mask)
    new_key, *ks = jax.random.split(state.rng_key, len(flat) + 1)
    out = []
    for g, total, k in zip(flat, sums, ks):
      # noise and divisor in the sum's dtype (at least float32), then the gradients'
      noisy = (total + noise_std * jax.random.normal(k, g.shape[1:], total.dtype)) / m
      noisy = _to_dtype(noisy, g.dtype)
      out.append(jnp.where(changed, jnp.zeros_like(noisy), noisy))
    return jax.tree.unflatten(tdef, out), DPAggregateState(
        rng_key=new_key, settings_id=state.settings_id, settings_changed=changed)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)



def clip_and_sum(l2_norm_clip: float) -> optax.GradientTransformation:
  """Clips per-example gradients (leading axis) to ``l2_norm_clip`` and sums them.

  Stateless. The clipped sum of :func:`dp_aggregate` (:func:`clipped_sums`):
  a row whose norm is not finite (a NaN or inf gradient) contributes 0, and
  the sum is accumulated in at least float32 (returned in the gradients'
  dtype, saturated at its largest finite value).

  With ``optax.MultiSteps(inner, every_k_schedule=K)`` put it
  *outside* (``optax.chain(clip_and_sum(C), optax.MultiSteps(...))``):
  MultiSteps then averages K clipped sums, whose sensitivity is C / K, so the
  inner chain adds noise once per applied update with
  ``gaussian_noise(stddev=sigma * C / K, ...)`` and scales by
  ``K / expected_batch_size`` (the declared expected logical batch size: a
  constant, never the padded length K * micro_batch_size, which depends on
  the dataset size; see :func:`jaxacct.tracking.dp_aggregate`);
  ``track_privacy`` inside counts one step per applied update with noise
  multiplier sigma. The sampling scheme the
  accountant assumes applies to the *logical* batch (the union of the K
  micro-batches), e.g. Poisson at rate q over the dataset, then split into K
  fixed-size chunks padded with all-zero rows (which clip to zero).

  Example (the test suite runs this pattern)::

    tx = optax.chain(
        clip_and_sum(C),
        optax.MultiSteps(optax.chain(
            gaussian_noise(sigma * C / K, key),
            track_privacy(EventAccountant(PoissonSampledDpEvent(q, GaussianDpEvent(sigma))),
                          num_steps=T, delta=d),
            optax.scale(K / expected_batch_size), optax.sgd(lr)),
          every_k_schedule=K))

  Args:
    l2_norm_clip: > 0.
  """
  c = _concrete_number("l2_norm_clip", l2_norm_clip)
  checks.check_positive("l2_norm_clip", c)

  def update_fn(updates, state, params=None):
    del params
    flat, tdef = jax.tree.flatten(updates)
    sums = clipped_sums(flat, _leading_length(flat, None), c)
    return jax.tree.unflatten(tdef, [_to_dtype(s, g.dtype) for s, g in zip(sums, flat)]), state

  return optax.GradientTransformation(lambda p: optax.EmptyState(), update_fn)
