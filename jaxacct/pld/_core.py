r"""Discretised privacy loss distributions (PLDs): representation, composition, queries.

A :class:`PLD` stores the P-mass of the privacy loss ``L = log(P(o)/Q(o))``,
``o ~ P``, on the uniform grid ``loss_i = (offset + i) * step``, plus
``inf_mass`` (mass at ``L = +inf``, and every truncated tail that is charged
to delta).  The hockey-stick divergence is

.. math:: \delta(\varepsilon) = \text{inf\_mass}
          + \sum_i p_i\,(1 - e^{\varepsilon - \text{loss}_i})_+ ,

and composition is convolution of the P-distributions of the losses (done by
FFT).  References: Koskela, Jalko, Honkela, "Computing tight differential
privacy guarantees using FFT", arXiv:1906.03049v2 (FFT accountant, aliasing);
Meiser & Mohammadi, "Tight on budget?", CCS 2018 (privacy-loss buckets);
Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, "Connect the dots: tighter
discrete approximations of privacy loss distributions", arXiv:2207.04380v1,
Sec. 3 (the dominating discretisation used here by default).

Rounding and the Q-side mass.  Each atom (loss ``L``, P-mass ``p``) also
carries Q-mass ``p e^{-L}``.

* ``"connect_dots"`` (pessimistic default): an atom with
  ``loss_i <= L < loss_{i+1}`` is split into ``a`` at ``loss_i`` and ``b`` at
  ``loss_{i+1}`` with ``a + b = p`` AND ``a e^{-loss_i} + b e^{-loss_{i+1}} =
  p e^{-L}`` (both the P- and the Q-mass are kept).  Its hockey-stick
  contribution is then the chord (in ``e^eps``) of the convex original one,
  hence >= it for every eps: the discrete pair dominates the true pair, so
  compositions stay valid upper bounds.  The error is second order in step.
* ``"ceil"`` (pessimistic): loss rounded up; the Q-mass drops (the missing
  Q-mass sits where P = 0, which does not change any delta): dominating.
* optimistic (``pessimistic=False``): loss rounded down.  The implied Q-mass
  exceeds 1 (not a valid pair), but by the coupling ``sum of rounded-down
  losses <= true sum`` every delta is a lower estimate.

Truncation: pessimistic PLDs move tail mass below the grid up to the first
grid point, and charge tail mass above the grid (and FFT windows' upper
tails, bounded by a Chernoff bound) to ``inf_mass``.  Optimistic PLDs round
the upper tail down to the last point and drop the lower one.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks
from jaxacct._core.dtype import require_x64, x64_boundary

__all__ = ["PLD", "PairPLD", "from_losses", "from_pair", "compose",
           "compose_many", "delta", "epsilon", "delta_both", "epsilon_both",
           "truncate", "DEFAULT_TAIL_MASS"]

DEFAULT_TAIL_MASS = 1e-18
# Chernoff orders (per unit of loss) used to size the FFT windows.
_LAMBDAS = np.geomspace(1e-3, 1e9, 97)
# Tilts: plain FFT plus tilted means at these fractions mean -> window top.
_TILT_FRACTIONS = (0.0, 0.3, 0.55, 0.8)


class PLD(NamedTuple):
  """Privacy loss distribution on the grid ``loss_i = (offset + i) * step``.

  Attributes:
    probs: float64 array (N,), P-mass at each grid loss.
    offset: int, grid index of ``probs[0]``.
    step: float > 0, grid spacing (loss units).
    inf_mass: float64 scalar, mass at loss +inf plus charged truncations.
    pessimistic: bool, True = dominating (deltas are upper bounds), False =
      optimistic (lower estimates).
  """
  probs: Any
  offset: Any
  step: Any
  inf_mass: Any
  pessimistic: Any


def _pld_flatten(p):
  step = p.step
  if isinstance(step, (int, float, np.floating, np.integer)):
    return (p.probs, p.offset, p.inf_mass), (float(step), p.pessimistic, True)
  return (p.probs, p.offset, p.inf_mass, step), (None, p.pessimistic, False)


def _pld_unflatten(aux, children):
  step, pess, static_step = aux
  if static_step:
    probs, offset, inf = children
  else:
    probs, offset, inf, step = children
  return PLD(probs, offset, step, inf, pess)


# ``step`` (a Python float) and ``pessimistic`` (a bool) are static pytree
# data: under jit they stay concrete, so grids can be checked and the
# rounding kind is known at trace time.
jax.tree_util.register_pytree_node(PLD, _pld_flatten, _pld_unflatten)


class PairPLD(NamedTuple):
  """Both directions of a mechanism: ``remove`` = PLD(P=D, Q=D'), ``add``."""
  remove: PLD
  add: PLD


def _concrete_bool(x, name):
  if checks.is_concrete(x):
    return checks.check_bool(name, x)
  raise ValueError(f"{name} must be a concrete bool (not traced).")


# --------------------------------------------------------------------------
# construction from atoms


def fast_len(n: int) -> int:
  """Smallest 2^a or 3*2^a >= n (few distinct shapes -> few compiles)."""
  n = max(int(n), 1)
  p = 1 << (n - 1).bit_length()
  if 3 * p // 4 >= n and p >= 4:
    return 3 * p // 4
  return p


@functools.partial(jax.jit, static_argnames=("size", "rounding"))
def _from_losses_kernel(losses, probs, step, offset, inf_mass, pessimistic, *,
                        size, rounding):
  require_x64("jaxacct.pld.from_losses")
  losses = jnp.ravel(losses).astype(jnp.float64)
  probs = jnp.ravel(probs).astype(jnp.float64)
  step = jnp.asarray(step, jnp.float64)
  active = probs > 0
  at_inf = active & (losses == jnp.inf)
  finite = active & jnp.isfinite(losses)
  safe_l = jnp.where(finite, losses, 0.0)
  t = safe_l / step - offset  # position in grid units
  pw = jnp.where(finite, probs, 0.0)
  extra_inf = jnp.sum(jnp.where(at_inf, probs, 0.0))
  pess = jnp.zeros(size + 1, jnp.float64)  # last slot: above the grid
  if rounding == "connect_dots":
    i = jnp.floor(t)
    below = i < 0
    i = jnp.clip(i, 0, size)  # size -> above the grid
    frac = jnp.where(below, 0.0, (t - i) * step)  # L - loss_i in [0, step)
    frac = jnp.clip(frac, 0.0, step)
    # b = p (1 - e^{-frac}) / (1 - e^{-step}),  a = p - b.
    b = pw * (-jnp.expm1(-frac)) / (-jnp.expm1(-step))
    b = jnp.clip(b, 0.0, pw)
    ii = i.astype(jnp.int32)
    pess = pess.at[ii].add(pw - b)
    pess = pess.at[jnp.minimum(ii + 1, size)].add(b)
  else:  # ceil: below -> 0 (rounded up), above -> inf
    k = jnp.clip(jnp.ceil(t), 0, size)
    pess = pess.at[k.astype(jnp.int32)].add(pw)
  # optimistic: floor; below the grid dropped, above rounded down to the top
  k = jnp.floor(t)
  keep = k >= 0
  k = jnp.clip(k, 0, size - 1)
  opt = jnp.zeros(size + 1, jnp.float64).at[k.astype(jnp.int32)].add(
      jnp.where(keep, pw, 0.0))
  out = jnp.where(pessimistic, pess, opt)
  inf_total = jnp.asarray(inf_mass, jnp.float64) + extra_inf + out[size]
  return out[:size], inf_total


@x64_boundary
def from_losses(losses, probs, *, step, pessimistic: bool = True,
                inf_mass=0.0, rounding: str = "connect_dots", offset=None,
                size=None) -> PLD:
  r"""PLD from atoms (privacy-loss values and their P-masses).

  Args:
    losses: float array, loss values ``log(P(o)/Q(o))``; ``+inf`` allowed
      (mass goes to ``inf_mass``); atoms with zero P-mass are ignored.
    probs: float array, same shape, P-masses >= 0 (need not sum to 1).
    step: grid spacing > 0.
    pessimistic: True -> dominating discretisation (upper bounds); False ->
      losses rounded down (lower estimate).
    inf_mass: extra mass at +inf, in [0, 1].
    rounding: ``"connect_dots"`` (default; keeps P- and Q-mass, dominating,
      second-order error) or ``"ceil"`` (losses rounded up); pessimistic only.
    offset, size: grid start index and length.  Computed from the finite
      losses when omitted (needs concrete input); give both to call it
      under ``jit`` (``size`` static).  Atoms outside the grid: pessimistic
      -> below moved up to the first point, above charged to ``inf_mass``.

  Returns:
    :class:`PLD` with ``probs`` float64 (size,).

  Bound: upper (pessimistic) / lower estimate (optimistic) of every delta.
  """
  checks.check_positive("step", step)
  checks.check_choice("rounding", rounding, ("connect_dots", "ceil"))
  checks.check_probability("inf_mass", inf_mass)
  checks.check_not_text("losses", losses)
  checks.check_not_text("probs", probs)
  if offset is not None:
    checks.check_int("offset", offset, min_value=-2**62)
  if size is not None:
    checks.check_int("size", size, min_value=1)
  pessimistic = _concrete_bool(pessimistic, "pessimistic")
  if offset is None or size is None:
    if not checks.is_concrete((losses, probs, step)):
      raise ValueError("from_losses under jit needs static `offset` and "
                       "`size`.")
    lv = np.ravel(np.asarray(losses, np.float64))
    pv = np.ravel(np.asarray(probs, np.float64)) * np.ones_like(lv)
    if np.any(np.isnan(lv)) or np.any(np.isnan(pv)) or np.any(pv < 0):
      raise ValueError("losses must not be NaN and probs must be >= 0.")
    fin = np.isfinite(lv) & (pv > 0)
    if np.any((lv == -np.inf) & (pv > 0)):
      raise ValueError("an atom with loss -inf must have P-mass 0.")
    h = float(step)
    if not np.any(fin):
      lo_i, hi_i = 0, 0
    else:
      lo_i = int(math.floor(lv[fin].min() / h))
      hi_i = int(math.floor(lv[fin].max() / h)) + 1
    offset = lo_i if offset is None else int(offset)
    size = fast_len(hi_i - offset + 1) if size is None else int(size)
    losses, probs = lv, pv
  size = int(size)
  if size < 1:
    raise ValueError(f"size must be >= 1; got {size}.")
  probs_b = jnp.broadcast_to(jnp.asarray(probs, jnp.float64),
                             jnp.shape(losses))
  p, inf = _from_losses_kernel(losses, probs_b, step, offset, inf_mass,
                               jnp.asarray(pessimistic), size=size,
                               rounding=rounding)
  off = int(offset) if checks.is_concrete(offset) else offset
  st = float(step) if checks.is_concrete(step) else step
  return PLD(p, off, st, inf, pessimistic)


@x64_boundary
def from_pair(p, q, *, step, pessimistic: bool = True,
              rounding: str = "connect_dots") -> PLD:
  r"""PLD of the pair (P = p, Q = q) of discrete distributions.

  ``L(o) = log p(o) - log q(o)`` with P-mass ``p(o)``; outcomes with
  ``q(o) = 0 < p(o)`` go to ``inf_mass``.  The add direction of a
  (remove-direction) pair is ``from_pair(q, p)``.

  Args:
    p, q: float arrays of the same shape, probability vectors (>= 0).
    step: grid spacing > 0.
    pessimistic, rounding: see :func:`from_losses`.

  Returns:
    :class:`PLD`.

  Bound: upper (pessimistic) / lower estimate (optimistic).
  """
  checks.check_not_text("p", p)
  checks.check_not_text("q", q)
  checks.check_bool("pessimistic", pessimistic)
  checks.check_choice("rounding", rounding, ("connect_dots", "ceil"))
  pv = np.asarray(p, np.float64)
  qv = np.asarray(q, np.float64)
  if pv.shape != qv.shape:
    raise ValueError(f"p and q must have the same shape; got {pv.shape} and "
                     f"{qv.shape}.")
  if np.any(~np.isfinite(pv)) or np.any(pv < 0) or np.any(
      ~np.isfinite(qv)) or np.any(qv < 0):
    raise ValueError("p and q must be finite and >= 0.")
  with np.errstate(divide="ignore", invalid="ignore"):
    losses = np.where(pv > 0, np.where(qv > 0, np.log(pv) - np.log(qv),
                                       np.inf), 0.0)
  return from_losses(losses, pv, step=step, pessimistic=pessimistic,
                     rounding=rounding)


# --------------------------------------------------------------------------
# composition


def _log_mgf(probs, step, lams):
  """log sum_j p_j exp(lam * j * step) for each lam (relative losses)."""
  j = jnp.arange(probs.shape[0], dtype=jnp.float64) * step
  lp = jnp.where(probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)),
                 -jnp.inf)
  return jax.vmap(lambda lam: jax.scipy.special.logsumexp(lp + lam * j))(lams)


def _wrap(x, n_out):
  n = x.shape[0]
  if n <= n_out:
    return jnp.pad(x, (0, n_out - n))
  reps = -(-n // n_out)
  return jnp.pad(x, (0, reps * n_out - n)).reshape(reps, n_out).sum(0)


def _window(probs_list, counts, step, tail_mass):
  """Chernoff-bounded index range [lo, hi] of the composed relative sum."""
  lam = jnp.asarray(_LAMBDAS, jnp.float64)
  up = sum(c * _log_mgf(p, step, lam) for p, c in zip(probs_list, counts))
  dn = sum(c * _log_mgf(p, step, -lam) for p, c in zip(probs_list, counts))
  lt = math.log(tail_mass)
  x_hi = jnp.min((up - lt) / lam)
  x_lo = jnp.max((lt - dn) / lam)
  return x_lo / step, x_hi / step, up, lam


@functools.partial(jax.jit, static_argnames=("tail_mass",))
def _window_range(probs_list, step, counts, *, tail_mass):
  counts = tuple(jnp.asarray(c, jnp.float64) for c in counts)
  lo, hi, _, _ = _window(probs_list, counts, step, tail_mass)
  return lo, hi


def _log_mgf_rel(probs, step, lams, ref):
  """log sum_j p_j exp(lam (j - ref) step): the log-MGF shifted by ``lam ref step``.

  ``log M(lam) = lam * ref * step + _log_mgf_rel(...)`` exactly.  With ``ref``
  the top atom the shifted exponents are <= log p_j for lam >= 0, so the
  result keeps relative accuracy at large lam, where ``log M(lam)`` itself is
  ~``lam * ref * step`` (1e9 and more) and its ulp (1e-7) would swamp
  ``log p_ref`` (issue 20).
  """
  j = (jnp.arange(probs.shape[0]) - ref).astype(jnp.float64) * step
  lp = jnp.where(probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)),
                 -jnp.inf)
  return jax.vmap(lambda lam: jax.scipy.special.logsumexp(lp + lam * j))(lams)


def _top_index(probs):
  """Index of the last positive entry (0 if none), int64."""
  idx = jnp.arange(probs.shape[0], dtype=jnp.int64)
  return jnp.max(jnp.where(probs > 0, idx, 0))


def _upper_tail_bound(up_rel, lam, gap):
  """Chernoff bound on P(relative composed loss >= x).

  ``up_rel`` is the composed log-MGF relative to the top atom index ``J``
  (see :func:`_log_mgf_rel`) and ``gap = (J - x / step) * step`` (exact
  from integers), so ``up - lam x = up_rel + lam * gap`` without cancellation.
  """
  return jnp.minimum(jnp.exp(jnp.min(up_rel + lam * gap)), 1.0)


def _cpow(z, c):
  """z**c for complex z and a (traced) integer count c >= 1, via polar form.

  Relative error ~ c * 1e-16 (as repeated squaring); exact 0 at z = 0.
  """
  mag = jnp.abs(z)
  safe = jnp.where(mag > 0, mag, 1.0)
  lmag = jnp.where(mag > 0, c * jnp.log(safe), -jnp.inf)
  ph = c * jnp.angle(z)
  r = jnp.exp(lmag)
  return r * jnp.cos(ph) + 1j * (r * jnp.sin(ph))


@functools.partial(jax.jit, static_argnames=("size", "tail_mass"))
def _compose_kernel(probs_list, offsets, infs, step, pessimistic, counts, *,
                    size, tail_mass):
  require_x64("jaxacct.pld.compose")
  step = jnp.asarray(step, jnp.float64)
  counts_i = counts
  counts = tuple(jnp.asarray(c, jnp.float64) for c in counts)
  max_idx = sum(c * (p.shape[0] - 1) for p, c in zip(probs_list, counts))
  lo, _, _, lam = _window(probs_list, counts, step, tail_mass)
  lo = jnp.clip(jnp.floor(lo), 0, max_idx)
  m = jnp.clip(jnp.minimum(lo, max_idx + 1 - size), 0, max_idx)
  m = m.astype(jnp.int64)
  # Exponential tilting (Esscher transform) against FFT round-off: the plain
  # FFT has ~count * 1e-16 absolute error on every point, which swamps
  # upper-tail masses (delta ~ 1e-12 at 1e5 steps).  Tilting the inputs by
  # e^{lam L} / M(lam) moves the composed mass to the tail, where the result
  # p(s) = tilted(s) * exp(count log M(lam) - lam s h) then has relative
  # accuracy; per grid point we keep the version with the smallest error
  # factor exp(count log M(lam) - lam s h) (1 for the plain FFT).
  # All log-MGFs are taken relative to each input's top atom index (integer
  # bookkeeping), so the untilting exponent is
  #   sum_k c_k R_k(lam) + lam h (J - s),  J = sum_k c_k top_k,
  # with no cancellation of the large terms lam * L (issue 20: at lam = 1e9
  # the absolute form lost 2e-7 per factor on discrete PLDs).
  s_idx = m + jnp.arange(size)
  mean_idx = sum(c * jnp.sum(jnp.arange(p.shape[0]) * p) /
                 jnp.maximum(jnp.sum(p), 1e-300)
                 for p, c in zip(probs_list, counts))
  tops = tuple(_top_index(p) for p in probs_list)
  top_j = sum(c * t for t, c in zip(tops, counts_i))  # int64
  top_idx = (m + size - 1).astype(jnp.float64)
  total_count = sum(counts)
  log_fft_err = jnp.log(2.2e-16 * jnp.maximum(total_count, 1.0))
  mu = lam[::4]
  fr = jnp.asarray(_TILT_FRACTIONS, jnp.float64)
  targets = (mean_idx + fr * jnp.maximum(top_idx - mean_idx, 0.0)) * step
  up_rel = sum(c * _log_mgf_rel(p, step, lam, t)
               for p, t, c in zip(probs_list, tops, counts))
  up_abs = up_rel + lam * (top_j.astype(jnp.float64) * step)
  lam_t = lam[jnp.argmin(up_abs[None, :] - lam[None, :] * targets[:, None],
                         axis=1)]
  lam_t = jnp.where(fr == 0.0, 0.0, lam_t)  # (T,) tilts, first = plain
  nt = lam_t.shape[0]
  spec = None
  log_r_tot = jnp.zeros(nt, jnp.float64)
  up_t = jnp.zeros((nt, mu.shape[0]), jnp.float64)
  dn_t = jnp.zeros((nt, mu.shape[0]), jnp.float64)
  for p, t, c in zip(probs_list, tops, counts):
    log_r = _log_mgf_rel(p, step, lam_t, t)
    log_r_tot = log_r_tot + c * log_r
    up_t = up_t + c * _log_mgf_rel(p, step, (lam_t[:, None] + mu).ravel(), t
                                   ).reshape(nt, -1)
    dn_t = dn_t + c * _log_mgf_rel(p, step, (lam_t[:, None] - mu).ravel(), t
                                   ).reshape(nt, -1)
    j = (jnp.arange(p.shape[0]) - t).astype(jnp.float64) * step
    pt = p[None, :] * jnp.exp(jnp.minimum(
        lam_t[:, None] * j[None, :] - log_r[:, None], 700.0))
    f = jnp.fft.rfft(jax.vmap(lambda x: _wrap(x, size))(pt), axis=-1)
    f = _cpow(f, c)
    spec = f if spec is None else spec * f
  # (jnp.roll under jit mishandles int64 shifts beyond int32: reduce first)
  shift = jnp.mod(-m, size).astype(jnp.int32)
  yt = jnp.roll(jnp.fft.irfft(spec, size, axis=-1), shift, axis=-1)
  # Chernoff bounds on the tilted mass outside the window, per grid point:
  # mass above the window lands (circularly) on point i from s >= m+size+i,
  # mass below it on point i from s <= m+i-size.  A per-point bound (not one
  # number per tilt) keeps a steep tilt selectable near the window top when
  # its own top tail aliases onto the bottom (issue 20: composed RR at the
  # support edge kept a flatter tilt, 1e-8..1e-5 relative error in the top
  # atoms).  Integer gaps to the edges, in loss units.
  gap_hi = (top_j - (m + size)).astype(jnp.float64) * step
  gap_lo = ((m - size) - top_j).astype(jnp.float64) * step
  pos = jnp.arange(size, dtype=jnp.float64) * step
  base_hi = up_t - log_r_tot[:, None]  # (T, M)
  base_lo = dn_t - log_r_tot[:, None]

  def alias_min(carry, xs):
    a_hi, a_lo = carry
    mu_k, bh, bl = xs
    a_hi = jnp.minimum(a_hi, bh[:, None] + mu_k * (gap_hi - pos)[None, :])
    a_lo = jnp.minimum(a_lo, bl[:, None] + mu_k * (gap_lo + pos)[None, :])
    return (a_hi, a_lo), None

  init = jnp.full((nt, size), jnp.inf)
  (log_a_hi, log_a_lo), _ = jax.lax.scan(
      alias_min, (init, init), (mu, base_hi.T, base_lo.T))
  log_a_hi = jnp.where(m + size - 1 >= max_idx, -jnp.inf, log_a_hi)
  log_a_lo = jnp.where(m <= 0, -jnp.inf, log_a_lo)
  log_alias = jnp.minimum(jnp.logaddexp(log_a_hi, log_a_lo), 0.0)
  s_gap = (top_j - s_idx).astype(jnp.float64) * step  # exact: integers
  log_err = log_r_tot[:, None] + lam_t[:, None] * s_gap[None, :]
  crit = log_err + jnp.logaddexp(log_fft_err, log_alias)
  val = yt * jnp.exp(jnp.minimum(log_err, 50.0))
  pick = jnp.argmin(crit, axis=0)
  best_y = jnp.take_along_axis(val, pick[None, :], axis=0)[0]
  y = jnp.maximum(best_y, 0.0)
  tail = jnp.where(m + size - 1 >= max_idx, 0.0,
                   _upper_tail_bound(up_rel, lam, gap_hi))
  log_keep = sum(c * jnp.log1p(-i) for i, c in zip(infs, counts))
  inf = -jnp.expm1(log_keep)
  inf = jnp.where(pessimistic, jnp.minimum(inf + tail, 1.0), inf)
  offset = sum(c * o for o, c in zip(offsets, counts_i)) + m
  return y, offset, inf


def _check_same_grid(plds):
  steps = [p.step for p in plds]
  if all(checks.is_concrete(s) for s in steps):
    s0 = float(steps[0])
    for s in steps[1:]:
      if abs(float(s) - s0) > 1e-12 * s0:
        raise ValueError(
            f"PLDs on different grids (step {s0} vs {float(s)}); rebuild them "
            "with one step (jaxacct.pld does not re-grid).")
  pess = [_concrete_bool(p.pessimistic, "pessimistic") for p in plds]
  if len(set(pess)) > 1:
    raise ValueError("cannot compose pessimistic with optimistic PLDs.")
  return pess[0]


@x64_boundary
def compose_many(plds: Sequence[PLD], counts=None, *, size=None,
                 tail_mass: float = DEFAULT_TAIL_MASS) -> PLD:
  r"""Composition of heterogeneous PLDs: ``plds[k]`` composed ``counts[k]`` times.

  FFTs of length ``size``: every input is wrapped (aliased) to ``size``,
  the spectra are raised to their counts (polar form) and multiplied,
  and the window of the circular result starts at a Chernoff lower tail point
  (mass below it <= ``tail_mass``, it aliases onto higher losses, which only
  increases delta).  The mass above the window is bounded by the Chernoff
  bound ``min_lam exp(sum_k c_k log M_k(lam) - lam x)`` and, for pessimistic
  PLDs, charged to ``inf_mass``; ``inf_mass = 1 - prod (1 - inf_k)^{c_k}``.

  Round-off: a plain float64 FFT has ~``count * 1e-16`` absolute error at
  every point, which swamps tail masses (delta ~ 1e-12 after 1e5 steps).
  The composition is therefore also run on exponentially tilted inputs
  ``p_j e^{lam L_j} / M(lam)`` (three tilts, putting the tilted mean at 30%,
  55%, 80% of the way from the mean to the window top) and untilted by
  ``M(lam)^count e^{-lam L}``; each grid point takes the version with the
  smallest estimated absolute error: the untilting factor times (FFT
  round-off ``count * 2.2e-16`` + a Chernoff bound on the tilted mass that
  aliases onto that point from outside the window).  All log-MGFs are kept
  relative to each input's top atom (integer offsets), so the untilting
  exponent has no cancellation even at lam ~ 1e9 (issue 20).  This is the
  Esscher-transform trick (cf. saddlepoint methods); 4 FFT passes.

  Args:
    plds: sequence of :class:`PLD` on the same ``step`` (else ValueError) and
      of the same kind (pessimistic or not).
    counts: sequence of Python ints >= 1 (default all 1); static.
    size: FFT length (static).  Default: the Chernoff window at
      ``tail_mass`` on each side (needs concrete PLDs).
    tail_mass: truncation mass per side, in (0, 1e-3].

  Returns:
    :class:`PLD` with ``probs`` of length ``size``.

  Bound: pessimistic inputs -> upper bound on every delta of the composition;
  optimistic -> lower estimate (up to ``tail_mass`` aliasing).
  """
  plds = list(plds)
  if not plds:
    raise ValueError("compose_many needs at least one PLD.")
  counts = [1] * len(plds) if counts is None else list(counts)
  if len(counts) != len(plds):
    raise ValueError("counts must have one entry per PLD.")
  for c in counts:
    checks.check_int("counts", c, min_value=1)
  counts = tuple(int(c) for c in counts)
  checks.check_range("tail_mass", tail_mass, 0.0, 1e-3, lo_open=True)
  if size is not None:
    checks.check_int("size", size, min_value=1)
  pess = _check_same_grid(plds)
  step = plds[0].step
  probs_list = tuple(jnp.asarray(p.probs, jnp.float64) for p in plds)
  max_idx = sum(c * (p.shape[0] - 1) for p, c in zip(probs_list, counts))
  if size is None:
    if not checks.is_concrete((probs_list, step)):
      raise ValueError("compose under jit needs a static `size`.")
    lo, hi = _window_range(probs_list, jnp.asarray(step, jnp.float64),
                           tuple(float(c) for c in counts),
                           tail_mass=float(tail_mass))
    lo = max(0, int(math.floor(float(lo))))
    hi = min(max_idx, int(math.ceil(float(hi))))
    size = fast_len(max(hi - lo + 1, 2))
    if size > max_idx + 1:
      size = fast_len(max_idx + 1)
  size = int(size)
  # Pad inputs to few distinct lengths (fewer compiles).
  probs_list = tuple(
      jnp.pad(p, (0, min(fast_len(p.shape[0]), max(size, p.shape[0]))
                  - p.shape[0])) if p.shape[0] < size else p
      for p in probs_list)
  # Padding zeros changed max_idx; the kernel only uses it as a bound.
  offsets = tuple(jnp.asarray(p.offset, jnp.int64) for p in plds)
  infs = tuple(jnp.asarray(p.inf_mass, jnp.float64) for p in plds)
  y, off, inf = _compose_kernel(probs_list, offsets, infs, step,
                                jnp.asarray(pess),
                                tuple(jnp.asarray(c, jnp.int64) for c in counts),
                                size=size, tail_mass=float(tail_mass))
  if checks.is_concrete(off):
    off = int(off)
  return PLD(y, off, step, inf, pess)


def compose(pld: PLD, count: int = 1, *, size=None,
            tail_mass: float = DEFAULT_TAIL_MASS) -> PLD:
  """Self-composition of ``pld`` ``count`` times (see :func:`compose_many`).

  Bound: as the input (upper for pessimistic PLDs).
  """
  return compose_many([pld], [count], size=size, tail_mass=tail_mass)


@x64_boundary
def truncate(pld: PLD, tail_mass: float = DEFAULT_TAIL_MASS) -> PLD:
  """Drops negligible tails (eager): smaller grids for later compositions.

  Pessimistic: mass below the kept range (<= tail_mass) moves up to its first
  point; mass above (<= tail_mass) goes to ``inf_mass``.  Optimistic: the
  lower tail is dropped, the upper one moved down to the last point.

  Bound: as the input.
  """
  checks.check_range("tail_mass", tail_mass, 0.0, 1.0, lo_open=True,
                     hi_open=True)
  p = np.asarray(pld.probs, np.float64)
  c = np.cumsum(p)
  r = np.cumsum(p[::-1])[::-1]
  lo = int(np.searchsorted(c, tail_mass, side="right"))
  hi_candidates = np.nonzero(r > tail_mass)[0]
  hi = int(hi_candidates[-1]) if hi_candidates.size else len(p) - 1
  lo = min(lo, hi)
  below = float(c[lo - 1]) if lo > 0 else 0.0
  above = float(r[hi + 1]) if hi + 1 < len(p) else 0.0
  kept = p[lo:hi + 1].copy()
  inf = float(pld.inf_mass)
  if pld.pessimistic:
    kept[0] += below
    inf += above
  else:
    kept[-1] += above
  return PLD(jnp.asarray(kept), int(pld.offset) + lo, pld.step,
             jnp.asarray(inf, jnp.float64), pld.pessimistic)


# --------------------------------------------------------------------------
# queries


_BLOCK = 256


def _tables(probs, step):
  """T_k = sum_{i>k} p_i e^{-(i-k)h};  D_k = sum_{i>k} p_i (1 - e^{-(i-k)h}).

  Both are sums of nonnegative terms (no cancellation).  T satisfies
  ``T_k = e^{-h}(p_{k+1} + T_{k+1})``, hence ``D_k = D_{k+1} + (e^h - 1) T_k``.
  Computed blockwise (blocks of 256: a triangular matrix product inside a
  block, a short scan over blocks for the carries), which compiles fast.
  """
  n = probs.shape[0]
  bsz = _BLOCK
  nb = -(-n // bsz)
  p = jnp.pad(probs, (0, nb * bsz - n)).reshape(nb, bsz)
  idx = jnp.arange(bsz, dtype=jnp.float64)
  diff = idx[None, :] - idx[:, None]  # i - k (row k, column i)
  geo = jnp.where(diff > 0, jnp.exp(-jnp.maximum(diff, 0.0) * step), 0.0)
  t_loc = p @ geo.T
  v = p @ jnp.exp(-idx * step)  # sum_i p_i e^{-(i - bB) h} per block
  rb = jnp.exp(-bsz * step)

  def carry_fn(u_next, v_b):  # u_b = v_b + e^{-Bh} u_{b+1}
    return v_b + rb * u_next, u_next

  _, u_next = jax.lax.scan(carry_fn, jnp.zeros((), p.dtype), v, reverse=True)
  t = t_loc + jnp.exp(-(bsz - idx) * step)[None, :] * u_next[:, None]
  upper = (diff >= 0).astype(p.dtype)  # sum over i >= k inside the block
  s_loc = t @ upper.T
  tot = jnp.sum(t, axis=1)

  def sum_fn(c, tb):
    return c + tb, c

  _, s_next = jax.lax.scan(sum_fn, jnp.zeros((), p.dtype), tot, reverse=True)
  d = jnp.expm1(step) * (s_loc + s_next[:, None])
  return t.reshape(-1)[:n], d.reshape(-1)[:n]


@jax.jit
def _delta_kernel(probs, offset, step, inf_mass, eps):
  require_x64("jaxacct.pld.delta")
  step = jnp.asarray(step, jnp.float64)
  n = probs.shape[0]
  t, d = _tables(probs, step)
  pos = eps / step - offset
  k = jnp.ceil(pos)
  beyond = k > n - 1
  kc = jnp.clip(k, 0, n - 1)
  ki = kc.astype(jnp.int32)
  gap = jnp.minimum((pos - kc) * step, 0.0)  # eps - loss_k <= 0
  val = d[ki] + (-jnp.expm1(gap)) * (probs[ki] + t[ki])
  val = jnp.where(beyond, 0.0, val)
  out = jnp.minimum(val + inf_mass, 1.0)
  return jnp.where(jnp.isnan(eps), jnp.nan, out)


@jax.jit
def _epsilon_kernel(probs, offset, step, inf_mass, dlt):
  require_x64("jaxacct.pld.epsilon")
  step = jnp.asarray(step, jnp.float64)
  t, d = _tables(probs, step)
  target = dlt - inf_mass
  k = jnp.searchsorted(-d, -target, side="left")
  k = jnp.clip(k, 0, probs.shape[0] - 1)
  denom = probs[k] + t[k]
  frac = (target - d[k]) / jnp.where(denom > 0, denom, 1.0)
  frac = jnp.where(denom > 0, jnp.clip(frac, 0.0, 1.0), 0.0)
  loss_k = (offset + k).astype(jnp.float64) * step
  eps = loss_k + jnp.log1p(-frac)
  eps = eps + 1e-13 * (1.0 + jnp.abs(eps))  # round to the safe side
  eps = jnp.maximum(eps, 0.0)
  eps = jnp.where(target <= 0, jnp.inf, eps)
  bad = jnp.isnan(dlt) | (dlt <= 0) | (dlt >= 1)
  return jnp.where(bad, jnp.nan, eps)


@x64_boundary
def delta(pld: PLD, epsilon):
  r"""Hockey-stick divergence ``delta(eps)`` of a PLD, vectorised over eps.

  .. math:: \delta(\varepsilon) = \text{inf\_mass} + \sum_i p_i
            (1 - e^{\varepsilon - \text{loss}_i})_+

  computed exactly for the discrete PLD by stable positive recurrences
  (no cancellation), O(N) + O(1) per query.

  Args:
    pld: :class:`PLD`.
    epsilon: float array (any real; broadcast shape kept).

  Returns:
    float64 array of ``epsilon``'s shape, in [0, 1].

  Bound: upper for pessimistic PLDs, lower estimate for optimistic ones.
  """
  if checks.is_concrete(epsilon):
    checks.check_range("epsilon", epsilon, allow_inf=True)
  eps = jnp.asarray(epsilon, jnp.float64)
  return _delta_kernel(jnp.asarray(pld.probs, jnp.float64), pld.offset,
                       pld.step, jnp.asarray(pld.inf_mass, jnp.float64), eps)


@x64_boundary
def epsilon(pld: PLD, delta):
  r"""Smallest ``eps >= 0`` with ``delta(eps) <= delta`` for a PLD, vectorised.

  Solved exactly on the segment where the discrete profile crosses the
  target (it is ``D_k + (1 - e^{eps - loss_k})(p_k + T_k)`` there), then
  nudged up by 1e-13 relative (safe side).  ``+inf`` when
  ``inf_mass >= delta``.

  Args:
    pld: :class:`PLD`.
    delta: float array in (0, 1).

  Returns:
    float64 array of ``delta``'s shape.

  Bound: upper for pessimistic PLDs, lower estimate for optimistic ones.
  NaN under jit for delta outside (0, 1).
  """
  checks.check_delta(delta)
  dl = jnp.asarray(delta, jnp.float64)
  return _epsilon_kernel(jnp.asarray(pld.probs, jnp.float64), pld.offset,
                         pld.step, jnp.asarray(pld.inf_mass, jnp.float64), dl)


@x64_boundary
def delta_both(pair: PairPLD, epsilon):
  """max(delta_remove, delta_add) at ``epsilon``. Bound: as the inputs."""
  return jnp.maximum(delta(pair.remove, epsilon), delta(pair.add, epsilon))


@x64_boundary
def epsilon_both(pair: PairPLD, delta):
  """max(eps_remove, eps_add) at ``delta``. Bound: as the inputs."""
  return jnp.maximum(epsilon(pair.remove, delta), epsilon(pair.add, delta))
