"""Poisson-subsampled Gaussian front doors of :mod:`jaxacct.pld`: the grid step,
the composed pair and the (epsilon, delta) queries (re-exported by the package)."""

from __future__ import annotations

import functools
import math

import numpy as np

from jaxacct._core import checks
from jaxacct._core.checks import WindowTooLarge
from jaxacct._core.batching import block_programs, host_lanes
from jaxacct._core.namespace import for_inputs
from jaxacct._core.parallel import host_map
from jaxacct._core.results import DeltaResult, EpsilonResult, host_f64
from jaxacct._core.dtype import HOST_ONLY, host_door
from jaxacct.pld._compose import compose
from jaxacct.pld._core import BUILD_ON_HOST, DEFAULT_TAIL_MASS, PLD, PairPLD
from jaxacct.pld._poisson_blocks import door_blocks
from jaxacct.pld._host_law import law
from jaxacct.pld._powers import (direction_delta, direction_epsilons, pair_epsilons,
                                 window_fits)
from jaxacct.pld._windows import MAX_WINDOW
from jaxacct.pld._query import delta_both, epsilon_both
from jaxacct.pld._mechanisms import (DEFAULT_STEP, truncate_to_bucket, truncate_to_bucket_host,
                                    poisson_gaussian_host, poisson_gaussian_pair)

_MAX_STEP_GRID = 4_000_000


def _at_most_sigma_max(sigma):
  """``min(sigma, checks.SIGMA_MAX)`` of concrete input (float, or an array): more
  noise is a post-processing, so the answer there bounds every larger sigma."""
  if np.ndim(sigma):
    return np.minimum(np.asarray(sigma, np.float64), checks.SIGMA_MAX)
  return min(float(sigma), checks.SIGMA_MAX)


def default_step(sigma, q, num_steps, *, span=None, at_most=None) -> float:
  """Grid step used by the front doors for a Poisson-subsampled Gaussian.

  ``min(1e-4, s/1000)`` where ``s`` is the standard deviation of the privacy
  loss composed over ``min(num_steps, 10^4)`` steps (``sqrt(min(num_steps,
  10^4)) * q * sqrt(e^{1/sigma^2} - 1)``), so that small-q / large-sigma
  settings still have ~1000 grid points per standard deviation, and a long run
  a tenth of one step's loss spread (a coarser grid rounds each step's few cells
  and, over many steps, the rounding decides the answer: docs/bounds/poisson.md,
  "The grid of a long run"); coarsened if one step would need more than 4e6
  points. ``span``
  (nats), if given, is one step's loss range where the step's PLD is wider than
  the Poisson pair's (a step with a whole Gaussian branch,
  :func:`jaxacct._core.checks.gaussian_loss_span`): the 4e6 points hold the wider.
  ``at_most``, if given, caps the step before that coarsening (a finer grid a caller
  needs, :func:`jaxacct.accounting.evaluator.lower_grid_step`).
  """
  checks.check_positive("sigma", sigma, scalar=True)   # a grid for any sigma: callers halve it
  checks.check_probability("q", q, scalar=True)
  checks.check_int("num_steps", num_steps, min_value=1, scalar=True)
  sigma, q, num_steps = _at_most_sigma_max(sigma), float(q), float(num_steps)
  s2 = max(sigma * sigma, 1e-300)   # sigma below ~1e-154 squares to 0
  var1 = q * q * math.expm1(min(1.0 / s2, 700.0))
  s = math.sqrt(min(num_steps, 10_000.0) * var1)
  h = min(DEFAULT_STEP, max(s / 1000.0, 1e-9))
  if at_most is not None:
    checks.check_positive("at_most", at_most, scalar=True)
    h = min(h, float(at_most))
  # the per-step grid spans about [log(1-q), ell(1 + 10 sigma)]
  top = float(np.logaddexp(np.log1p(-min(q, 0.999999)),
                           np.log(max(q, 1e-300)) + (2 * (1 + 10 * sigma) - 1)
                           / (2 * s2)))
  width = top - math.log1p(-min(q, 0.999999))
  if span is not None:
    checks.check_range("span", span, 0.0, np.inf, lo_open=True, allow_inf=True, scalar=True)
    width = max(width, float(span))
  return max(h, width / _MAX_STEP_GRID)


@host_door(BUILD_ON_HOST)
def poisson_gaussian_composed(sigma, q, num_steps, *, step=None,
                              pessimistic: bool = True) -> PairPLD:
  """PairPLD of ``num_steps`` Poisson-subsampled Gaussian steps (eager).

  Bound: upper (pessimistic) / lower (optimistic) for each direction.
  """
  checks.check_sigma("sigma", sigma, scalar=True)
  checks.check_probability("q", q, scalar=True)
  checks.check_int("num_steps", num_steps, min_value=1, scalar=True)
  checks.check_bool("pessimistic", pessimistic)
  if step is not None:
    checks.check_positive("step", step, scalar=True)
  sigma = _at_most_sigma_max(sigma)
  if step is None:
    step = default_step(sigma=sigma, q=q, num_steps=num_steps)
  pair = poisson_gaussian_pair(sigma, q, step=step, pessimistic=pessimistic)
  tail = _tail_mass(num_steps)
  # power-of-two lengths: a new sigma (new truncated length) compiles nothing new
  return PairPLD(compose(truncate_to_bucket(pair.remove, tail), int(num_steps)),
                 compose(truncate_to_bucket(pair.add, tail), int(num_steps)))


def _tail_mass(num_steps):
  """Per-step truncation mass of :func:`poisson_gaussian_composed`: at most
  ``1e-16`` in all, on one PLD per power-of-two bucket of counts (counts
  ``2^(a-1) + 1 .. 2^a`` share it, so a table over counts composes few PLDs)."""
  return min(DEFAULT_TAIL_MASS, 1e-16 / (1 << (int(num_steps) - 1).bit_length()))


@functools.lru_cache(maxsize=2)
def _step_host(sigma, q, direction, step):
  """The per-step PLD before truncation, read-only and kept (the last pair only:
  its size grows as the step shrinks): a table's pieces (counts 1, 2, 3-4, ...)
  truncate the same one differently."""
  p = poisson_gaussian_host(sigma, q, direction=direction, step=step)
  np.asarray(p.probs).setflags(write=False)
  return p


def _step_pair_host(sigma, q, num_steps, step):
  """The truncated per-step pair the door composes ``num_steps`` times (host)."""
  tail = _tail_mass(num_steps)
  return PairPLD(*[truncate_to_bucket_host(_step_host(sigma, q, d, step), tail)
                   for d in ("remove", "add")])


def poisson_gaussian_epsilons(*, sigma, q, counts, delta, step):
  """The scalar door's epsilon (:func:`poisson_gaussian_epsilon` on the host) for
  each of ``counts`` (sorted ints >= 1), computed together: the same truncated
  per-step pairs, the same repeated-event engine (:mod:`jaxacct.pld._powers`),
  so each entry equals the door's answer for that count to the last bit."""
  counts = np.asarray(counts, np.int64)
  buckets = np.array([(int(n) - 1).bit_length() for n in counts])
  out = np.empty(counts.size)
  for b in np.unique(buckets):
    at = np.flatnonzero(buckets == b)
    pair = _step_pair_host(float(sigma), float(q), int(counts[at[0]]), float(step))
    out[at] = pair_epsilons(pair, counts[at], float(delta), tail_mass=DEFAULT_TAIL_MASS)
  return out


def _lane_fits(sigma, q, num_steps, step):
  """Whether one lane's composed window (both directions) is within ``MAX_WINDOW``."""
  n = int(num_steps)
  if n >= 2**53:
    return False
  h = default_step(sigma=sigma, q=q, num_steps=n) if step is None else float(step)
  pair = _step_pair_host(float(sigma), float(q), n, h)
  return all(window_fits(getattr(pair, d), n, tail_mass=DEFAULT_TAIL_MASS)
             for d in ("remove", "add"))


def _most_steps(sigma, q, num_steps, step, pair=None):
  """About the largest count whose window fits, on ``num_steps``' per-step pair (a hint;
  ``pair``: that pair when the caller has it, which is slow to build at a tiny sigma)."""
  n = int(min(int(num_steps), 2**53 - 1))
  if pair is None:
    h = default_step(sigma=sigma, q=q, num_steps=n) if step is None else float(step)
    pair = _step_pair_host(float(sigma), float(q), n, h)
  pair = law(pair)
  lo, hi = 0, n
  while hi - lo > max(1, lo // 1000):      # 0.1 %: a hint, not a bound
    mid = (lo + hi) // 2
    if all(window_fits(getattr(pair, d), max(mid, 1), tail_mass=DEFAULT_TAIL_MASS)
           for d in ("remove", "add")):
      lo = mid
    else:
      hi = mid
  return lo


def _too_many_steps(sigma, q, num_steps, step, why="", pair=None):
  """The door's ``WindowTooLarge``, naming ``num_steps`` (what the user passed)."""
  most = _most_steps(sigma, q, num_steps, step, pair)
  fits = (f"about {most:.4g} steps fit at these sigma and q" if most >= 1 else
          "not even one step fits at these sigma and q")
  return WindowTooLarge(
      f"num_steps={int(num_steps)} is too many for the Poisson PLD at sigma={float(sigma):g}, "
      f"q={float(q):g}: the composed privacy loss needs more than {MAX_WINDOW} grid points "
      f"(the PLD engine's limit){why}; {fits}. Use method='rdp' "
      "(jaxacct.poisson.epsilon / delta: a valid upper bound at any num_steps) or fewer "
      "steps.", points=math.inf)


def _check_lanes(sigma, q, num_steps, step):
  """``WindowTooLarge`` naming ``num_steps`` if a lane's window is over ``MAX_WINDOW``.

  The window grows with num_steps and q and shrinks with sigma: the corner (largest
  num_steps and q, smallest sigma) is tried first; only if it is too large, each
  distinct lane."""
  arrs = np.broadcast_arrays(*(np.asarray(x, np.float64) for x in (sigma, q, num_steps)))
  s, qq, n = (a.ravel() for a in arrs)
  if s.size == 0 or _lane_fits(s.min(), qq.max(), n.max(), step):
    return
  for lane in sorted(set(zip(s.tolist(), qq.tolist(), n.tolist())), key=lambda x: -x[2]):
    if not _lane_fits(*lane, step):
      raise _too_many_steps(*lane, step)


def _broadcast_loop(fn, **kw):
  arrs = np.broadcast_arrays(*[np.asarray(v, np.float64) for v in kw.values()])
  out = np.empty(arrs[0].shape)
  for idx in np.ndindex(out.shape):
    out[idx] = fn(**{k: a[idx] for k, a in zip(kw.keys(), arrs)})
  return out if out.ndim else float(out)


def _host_lane(quantity, sigma, q, num_steps, value, step):
  """``({"remove": .., "add": ..}, step)`` of one question on the host, by the
  repeated-event engine (:mod:`jaxacct.pld._powers`): the accountant's and the
  tracking table's number for this count."""
  h = default_step(sigma=sigma, q=q, num_steps=num_steps) if step is None else float(step)
  if int(num_steps) >= 2**53:      # grid indices past float64's integers (and int64's)
    raise _too_many_steps(sigma, q, num_steps, step, " (num_steps >= 2^53)")
  pair, n = _step_pair_host(float(sigma), float(q), int(num_steps), h), int(num_steps)
  try:
    if quantity == "epsilon":
      by = {d: float(direction_epsilons(getattr(pair, d), [n], float(value),
                                        tail_mass=DEFAULT_TAIL_MASS)[0])
            for d in ("remove", "add")}
    else:
      by = {d: direction_delta(getattr(pair, d), n, float(value), tail_mass=DEFAULT_TAIL_MASS)
            for d in ("remove", "add")}
  except WindowTooLarge:
    raise _too_many_steps(sigma, q, num_steps, step, pair=pair) from None
  return by, h


def _poisson_gaussian_query(quantity, *, sigma, q, num_steps, value, step):
  """The one query behind the two front doors: ``quantity`` is "epsilon" or "delta".

  ``value`` is the delta (for epsilon) or the epsilon (for delta); inputs are
  validated here and broadcast, one composition per broadcast element.
  """
  checks.check_sigma("sigma", sigma)
  checks.check_probability("q", q)
  checks.check_int("num_steps", num_steps, min_value=1)
  if quantity == "epsilon":
    checks.check_delta(value)
    query, arg = epsilon_both, "delta"
  else:
    checks.check_range("epsilon", value)
    query, arg = delta_both, "epsilon"
  if step is not None:
    checks.check_positive("step", step, scalar=True)
  sigma = _at_most_sigma_max(sigma)
  q, num_steps, value = (np.asarray(x) if isinstance(x, (list, tuple)) else x
                         for x in (q, num_steps, value))

  def one(sigma, q, num_steps, **kw):
    pair = poisson_gaussian_composed(sigma=sigma, q=q, num_steps=int(num_steps),
                                     step=step)
    return float(query(pair, kw[arg]))

  cls = EpsilonResult if quantity == "epsilon" else DeltaResult
  if for_inputs(sigma, q, num_steps, value, max_lanes=host_lanes()).is_host:
    # on the host, lane by lane (each lane's answer is its scalar question's),
    # zero compiled programs
    arrs = np.broadcast_arrays(np.asarray(sigma, np.float64), np.asarray(q, np.float64),
                               np.asarray(num_steps), np.asarray(value, np.float64))
    lanes = list(zip(*(a.ravel().tolist() for a in arrs)))
    if len(lanes) > 1:    # a lane refused before any is composed (none waits on another)
      _check_lanes(sigma, q, num_steps, step)
    got = host_map(lambda lane: _host_lane(quantity, *lane, step), lanes)
    if len(got) == 1:
      by, h = got[0]
      return cls(host_f64(np.full(arrs[0].shape, max(by.values()))), host_f64(value),
                 method="pld", bound="upper", details=dict(by, step=h))
    shaped = lambda f: np.reshape([f(g) for g in got], arrs[0].shape)   # noqa: E731
    details = {d: shaped(lambda g: g[0][d]) for d in ("remove", "add")}
    details["step"] = shaped(lambda g: g[1])
    return cls(host_f64(np.maximum(details["remove"], details["add"])), host_f64(value),
               method="pld", bound="upper", details=details)
  _check_lanes(sigma, q, num_steps, step)   # before any lane is composed
  if block_programs():   # blocks of lanes, one program per shape bucket
    v = door_blocks(quantity, one, arg, sigma=sigma, q=q, num_steps=num_steps, value=value,
                    step=step, default_step=default_step, tail_mass=_tail_mass)
  else:
    v = _broadcast_loop(one, sigma=sigma, q=q, num_steps=num_steps, **{arg: value})
  return cls(host_f64(v), host_f64(value), method="pld", bound="upper")


def poisson_gaussian_epsilon(*, sigma, q, num_steps, delta, step=None):
  r"""Epsilon at ``delta`` of ``num_steps`` Poisson-subsampled Gaussian steps (PLD).

  max over the add and remove directions of the pessimistic (dominating,
  connect-the-dots) PLD composed by FFT; see :func:`poisson_gaussian`.

  Args:
    sigma: noise multiplier > 0.
    q: sampling probability in [0, 1].
    num_steps: integer >= 1.
    delta: in (0, 1).
    step: grid spacing; default :func:`default_step`.
    (All but ``step`` broadcast; one composition per broadcast element.)

  Returns:
    ``EpsilonResult(epsilon, delta, method="pld", bound="upper")``:
    ``epsilon`` a ``np.float64`` (scalar inputs) or float64 numpy array of
    the broadcast shape; ``delta`` the given delta (float64). A question
    answered on the host has ``details`` with each direction's value
    (``"remove"``, ``"add"``) and the grid ``"step"`` used, arrays of the
    broadcast shape for arrays (``PLDAccountant`` on that grid returns the
    same epsilon for the same event).

  Compiled programs: a scalar question (every argument a Python or NumPy
  scalar) compiles NONE: the grid, truncation, tilted FFT composition and
  query run on the host in NumPy/SciPy, the same formulas as the kernels
  (:mod:`jaxacct._core.namespace`), composed by the repeated-event engine
  (:mod:`jaxacct.pld._powers`, within 1e-11 of a direct convolution; the
  jitted path's tilted FFT is within ~1e-6 relative at delta 1e-10). NumPy
  arrays on the CPU layout: the same, lane by lane (each lane's value is its
  scalar question's), none compiled. Arrays on the accelerator layout (or a
  lanes mesh): the per-step grid and the FFT window
  are host glue (no program); the composition and the query are compiled
  once per shape bucket: the truncated per-step PLD has a power-of-two length
  and the composed window a length ``2^a`` or ``3 * 2^(a-2)``, both set by
  the values (sigma, q, num_steps); new values inside the buckets compile
  nothing, and delta never changes a shape.

  Bound: upper (valid for both neighbouring relations add/remove).
  """
  return _poisson_gaussian_query("epsilon", sigma=sigma, q=q, num_steps=num_steps,
                                 value=delta, step=step)


def poisson_gaussian_delta(*, sigma, q, num_steps, epsilon, step=None):
  r"""Delta at ``epsilon`` of ``num_steps`` Poisson-subsampled Gaussian steps (PLD).

  Same as :func:`poisson_gaussian_epsilon` with ``epsilon`` (real) instead of
  ``delta``; max of the two directions.

  Returns:
    ``DeltaResult(delta, epsilon, method="pld", bound="upper")``: ``delta``
    a ``np.float64`` (scalar inputs) or float64 numpy array of the broadcast
    shape; ``epsilon`` the given epsilon (float64).

  Compiled programs and shape buckets: as :func:`poisson_gaussian_epsilon`
  (epsilon never changes a shape).

  Bound: upper.
  """
  return _poisson_gaussian_query("delta", sigma=sigma, q=q, num_steps=num_steps,
                                 value=epsilon, step=step)


@host_door(HOST_ONLY)
def to_dp_accounting(pld: PLD, add: PLD | None = None):
  """Converts to ``dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution``.

  ``pld`` is the remove direction; ``add`` (optional) the add direction.
  Needs the optional ``dp_accounting`` package (imported here only).
  """
  from dp_accounting.pld import pld_pmf
  from dp_accounting.pld import privacy_loss_distribution as dpl

  def conv(p):
    return pld_pmf.DensePLDPmf(float(p.step), int(p.offset),
                               np.asarray(p.probs, np.float64),
                               float(p.inf_mass), bool(p.pessimistic))

  return dpl.PrivacyLossDistribution(conv(pld),
                                     None if add is None else conv(add))
