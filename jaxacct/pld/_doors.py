"""Poisson-subsampled Gaussian front doors of :mod:`jaxacct.pld`: the grid step,
the composed pair and the (epsilon, delta) queries (re-exported by the package)."""

from __future__ import annotations

import math

import numpy as np

from jaxacct._core import checks
from jaxacct._core.batching import block_programs
from jaxacct._core.namespace import host_scalars
from jaxacct._core.parallel import host_map
from jaxacct._core.results import DeltaResult, EpsilonResult, host_f64
from jaxacct.pld._compose import compose, compose_host
from jaxacct.pld._core import DEFAULT_TAIL_MASS, PLD, PairPLD
from jaxacct.pld._poisson_blocks import door_blocks
from jaxacct.pld._query import delta_both, delta_host, epsilon_both, epsilon_host
from jaxacct.pld._mechanisms import (DEFAULT_STEP, truncate_to_bucket, truncate_to_bucket_host,
                                    poisson_gaussian_host, poisson_gaussian_pair)

_MAX_STEP_GRID = 4_000_000


def default_step(*, sigma, q, num_steps) -> float:
  """Grid step used by the front doors for a Poisson-subsampled Gaussian.

  ``min(1e-4, s/1000)`` where ``s`` is the standard deviation of the composed
  privacy loss (``sqrt(num_steps) * q * sqrt(e^{1/sigma^2} - 1)``), so that
  small-q / large-sigma settings still have ~1000 grid points per standard
  deviation; coarsened if one step would need more than 4e6 points.
  """
  checks.check_positive("sigma", sigma)
  checks.check_probability("q", q)
  checks.check_int("num_steps", num_steps, min_value=1)
  sigma, q, num_steps = float(sigma), float(q), float(num_steps)
  var1 = q * q * math.expm1(min(1.0 / sigma**2, 700.0))
  s = math.sqrt(num_steps * var1)
  h = min(DEFAULT_STEP, max(s / 1000.0, 1e-9))
  # the per-step grid spans about [log(1-q), ell(1 + 10 sigma)]
  top = float(np.logaddexp(np.log1p(-min(q, 0.999999)),
                           np.log(max(q, 1e-300)) + (2 * (1 + 10 * sigma) - 1)
                           / (2 * sigma**2)))
  span = top - math.log1p(-min(q, 0.999999))
  return max(h, span / _MAX_STEP_GRID)


def poisson_gaussian_composed(*, sigma, q, num_steps, step=None,
                              pessimistic: bool = True) -> PairPLD:
  """PairPLD of ``num_steps`` Poisson-subsampled Gaussian steps (eager).

  Bound: upper (pessimistic) / lower (optimistic) for each direction.
  """
  checks.check_int("num_steps", num_steps, min_value=1)
  checks.check_bool("pessimistic", pessimistic)
  if step is not None:
    checks.check_positive("step", step)
  if step is None:
    step = default_step(sigma=sigma, q=q, num_steps=num_steps)
  pair = poisson_gaussian_pair(sigma, q, step=step, pessimistic=pessimistic)
  tail = _tail_mass(num_steps)
  # power-of-two lengths: a new sigma (new truncated length) compiles nothing new
  return PairPLD(compose(truncate_to_bucket(pair.remove, tail), int(num_steps)),
                 compose(truncate_to_bucket(pair.add, tail), int(num_steps)))


def _tail_mass(num_steps):
  """Per-step truncation mass of :func:`poisson_gaussian_composed`."""
  return min(DEFAULT_TAIL_MASS, 1e-16 / int(num_steps))


def _composed_host(sigma, q, num_steps, step):
  """:func:`poisson_gaussian_composed` (pessimistic) of a scalar question on the
  host: the same grid, truncation and composition formulas in NumPy/SciPy,
  no compiled program."""
  if step is None:
    step = default_step(sigma=sigma, q=q, num_steps=num_steps)
  tail = _tail_mass(num_steps)

  def one(direction):   # each direction built and composed on its own core
    p = poisson_gaussian_host(sigma, q, direction=direction, step=step)
    return compose_host(truncate_to_bucket_host(p, tail), int(num_steps))
  return PairPLD(*host_map(one, ("remove", "add")))


def _broadcast_loop(fn, **kw):
  arrs = np.broadcast_arrays(*[np.asarray(v, np.float64) for v in kw.values()])
  out = np.empty(arrs[0].shape)
  for idx in np.ndindex(out.shape):
    out[idx] = fn(**{k: a[idx] for k, a in zip(kw.keys(), arrs)})
  return out if out.ndim else float(out)


def _poisson_gaussian_query(quantity, *, sigma, q, num_steps, value, step):
  """The one query behind the two front doors: ``quantity`` is "epsilon" or "delta".

  ``value`` is the delta (for epsilon) or the epsilon (for delta); inputs are
  validated here and broadcast, one composition per broadcast element.
  """
  checks.check_positive("sigma", sigma)
  checks.check_probability("q", q)
  checks.check_int("num_steps", num_steps, min_value=1)
  if quantity == "epsilon":
    checks.check_delta(value)
    query, arg = epsilon_both, "delta"
  else:
    checks.check_range("epsilon", value)
    query, arg = delta_both, "epsilon"
  if step is not None:
    checks.check_positive("step", step)

  def one(sigma, q, num_steps, **kw):
    pair = poisson_gaussian_composed(sigma=sigma, q=q, num_steps=int(num_steps),
                                     step=step)
    return float(query(pair, kw[arg]))

  cls = EpsilonResult if quantity == "epsilon" else DeltaResult
  if host_scalars(sigma, q, num_steps, value):
    # a scalar question: on the host, zero compiled programs
    h = default_step(sigma=sigma, q=q, num_steps=num_steps) if step is None else float(step)
    pair = _composed_host(float(sigma), float(q), int(num_steps), h)
    at = epsilon_host if quantity == "epsilon" else delta_host
    by = {"remove": float(at(pair.remove, value)), "add": float(at(pair.add, value))}
    return cls(host_f64(max(by.values())), host_f64(value), method="pld", bound="upper",
               details=dict(by, step=h))
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
    the broadcast shape; ``delta`` the given delta (float64). A scalar
    question's ``details`` hold each direction's value (``"remove"``,
    ``"add"``) and the grid ``"step"`` used (``PLDAccountant`` on that grid
    returns the same epsilon for the same event).

  Compiled programs: a scalar question (every argument a Python or NumPy
  scalar) compiles NONE: the grid, truncation, tilted FFT composition and
  query run on the host in NumPy/SciPy, the same formulas as the kernels
  (:mod:`jaxacct._core.namespace`; values within ~1e-8 relative of the
  jitted path, FFT round-off). Arrays: the per-step grid and the FFT window
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
