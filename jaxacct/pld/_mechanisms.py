r"""PLD constructors for standard mechanisms (dominating discretisations).

Continuous mechanisms whose privacy loss is monotone in the output are
discretised interval by interval: for the loss interval
``I_k = [loss_k, loss_{k+1})`` the exact P-mass ``P_k`` and Q-mass ``Q_k``
are computed in log space, and split as in "connect the dots" (Doroshenko,
Ghazi, Kamath, Kumar, Manurangsi, arXiv:2207.04380v1, Sec. 3):

.. math:: b_k = \frac{P_k - e^{\text{loss}_k} Q_k}{1 - e^{-h}} \text{ to }
          \text{loss}_{k+1},\qquad a_k = P_k - b_k \text{ to loss}_k,

which keeps both masses, so the discrete pair dominates the true one (its
hockey-stick curve is the chord of the true convex curve in ``e^eps``).
Mass below the grid moves up to the first point; mass above it goes to
``inf_mass`` (pessimistic).  Optimistic PLDs put ``P_k`` at ``loss_k``.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxacct._core import batching, checks
from jaxacct._core.dtype import host_door, require_x64
from jaxacct._core.gaussian import normal_tail_z
from jaxacct._core.logmath import log_laplace_cells, log_ndtr_diff
from jaxacct._core.namespace import HOST, JAX, host_call
from jaxacct.pld._core import (BUILD_ON_HOST, PLD, PairPLD, device_array, fast_len, from_losses,
                               truncate_host)
from jaxacct.pld._windows import MAX_WINDOW
from jaxacct._core.compiled import jit

DEFAULT_STEP = 1e-4
_DEFAULT_TAIL = 1e-20


def _assemble(log_mass, lo_idx, size, step, pessimistic, ns=JAX):
  """Grid PLD from an interval mass function (see module docstring)."""
  xp = ns.xp
  h = xp.asarray(step, xp.float64)
  e = (lo_idx + xp.arange(size, dtype=xp.float64)) * h
  inf1 = xp.full((1,), xp.inf)
  # one call: (-inf, e_0), [e_0, e_1), ..., [e_{n-1}, +inf)
  lp_all, lq_all = log_mass(xp.concatenate([-inf1, e]),
                            xp.concatenate([e, inf1]))
  lp, lq = lp_all[1:-1], lq_all[1:-1]
  lp_below, lp_above = lp_all[0], lp_all[-1]
  pk = xp.exp(lp)
  ok = lp > -xp.inf
  ratio = xp.where(ok, e[:-1] + lq - xp.where(ok, lp, 0.0), 0.0)
  ratio = xp.minimum(ratio, 0.0)
  frac = xp.clip(-xp.expm1(ratio) / (-xp.expm1(-h)), 0.0, 1.0)
  b = xp.where(ok, pk * frac, 0.0)
  a = pk - b
  pess = ns.add_at(xp.pad(a, (0, 1)) + xp.pad(b, (1, 0)), 0, xp.exp(lp_below))
  opt = ns.add_at(xp.pad(pk, (0, 1)), -1, xp.exp(lp_above))
  probs = xp.where(pessimistic, pess, opt)
  inf = xp.where(pessimistic, xp.exp(lp_above), 0.0)
  return probs, inf


def _scaled_param(name, value, step, sensitivity, pessimistic):
  """Checks a mechanism's arguments; returns ``value / sensitivity`` (float)."""
  checks.check_positive(name, value, scalar=True)
  checks.check_positive("step", step, scalar=True)
  checks.check_positive("sensitivity", sensitivity, scalar=True)
  checks.check_bool("pessimistic", pessimistic)
  return float(value) / float(sensitivity)


def _check_grid(points, what: str, step, accounted: str, advice: str) -> None:
  """``OneStepTooLarge`` (a ``ValueError``) when a one-step grid of ``points``
  points (inf and NaN included) is over the PLD engine's ``MAX_WINDOW``: refused
  before anything is allocated, with ``what`` (the user's arguments) and the
  range ``accounted`` at this ``step``."""
  if not points <= MAX_WINDOW:
    raise checks.OneStepTooLarge(
        f"{what} at step {float(step):g}: the PLD's grid would span about {points:.3g} "
        f"points, more than the PLD engine runs ({MAX_WINDOW}); {accounted} at this "
        "step." + (f" {advice}" if advice else ""), points)


def _kernel_pld(kernel, params, lo_idx, step, pessimistic, size, **static) -> PLD:
  """Runs a mechanism kernel on float64 ``params`` and wraps its output in a PLD."""
  probs, inf = kernel(*(jnp.asarray(v, jnp.float64) for v in params), lo_idx,
                      float(step), jnp.asarray(bool(pessimistic)), size=size,
                      **static)
  return PLD(probs, lo_idx, float(step), inf, bool(pessimistic))


def _host_pld(core, param, lo_idx, step, pessimistic, size) -> PLD:
  """A mechanism's PLD by its formula ``core`` in NumPy (no program)."""
  probs, inf = host_call(core, np.float64(param), lo_idx, float(step), bool(pessimistic),
                         size=size)
  return PLD(probs, lo_idx, float(step), np.float64(inf), bool(pessimistic))


def _mechanism_pld(core, kernel, param, lo_idx, step, pessimistic, size) -> PLD:
  """A mechanism's PLD: on the host on the CPU layout (:func:`_host_pld`; a first
  answer compiles nothing), by its compiled ``kernel`` on the device where arrays
  run in block programs (the accelerator layout, a lanes mesh)."""
  if batching.on_host():
    return _host_pld(core, param, lo_idx, step, pessimistic, size)
  return _kernel_pld(kernel, (param,), lo_idx, step, pessimistic, size)


# ---------------------------------------------------------------- Gaussian


def _gaussian_core(sigma, lo_idx, step, pessimistic, *, size, ns=JAX):
  if not ns.is_host:
    require_x64("jaxacct.pld.gaussian")
  mu = 0.5 / sigma**2
  s = 1.0 / sigma

  def log_mass(lo, hi):
    return (log_ndtr_diff((lo - mu) / s, (hi - mu) / s, ns),
            log_ndtr_diff((lo + mu) / s, (hi + mu) / s, ns))

  return _assemble(log_mass, lo_idx, size, step, pessimistic, ns)


_gaussian_kernel = jit(_gaussian_core, static_argnames=("size",))


def _gaussian_pld(sig, step, pessimistic, tail_mass, ns) -> PLD:
  """The Gaussian PLD of :func:`gaussian` (validated, sensitivity 1); ``ns`` as above."""
  mu, s = 0.5 / sig**2, 1.0 / sig
  z = normal_tail_z(tail_mass)
  lo_idx = int(math.floor((mu - z * s) / step))
  hi_idx = int(math.ceil((mu + z * s) / step))
  size = fast_len(hi_idx - lo_idx + 1)  # bucketed: fewer compiles
  if ns.is_host:
    return _host_pld(_gaussian_core, sig, lo_idx, step, pessimistic, size)
  return _mechanism_pld(_gaussian_core, _gaussian_kernel, sig, lo_idx, step, pessimistic, size)


@host_door(BUILD_ON_HOST)
def gaussian(sigma, *, step=DEFAULT_STEP, pessimistic: bool = True,
             tail_mass: float = _DEFAULT_TAIL, sensitivity=1.0) -> PLD:
  r"""PLD of the Gaussian mechanism (both directions are the same).

  P = N(0, sigma^2), Q = N(sensitivity, sigma^2): the loss is
  ``N(mu, s^2)`` under P and ``N(-mu, s^2)`` under Q, ``s = sens/sigma``,
  ``mu = s^2/2`` (Balle & Wang, "Improving the Gaussian mechanism",
  arXiv:1805.06530v2, Thm 8).

  Args:
    sigma: noise standard deviation > 0 (concrete); ``sigma / sensitivity`` above
      ``SIGMA_MAX`` (1e100) is accounted at it (more noise is a post-processing:
      an upper bound, the same PLD in float64). A ratio whose grid would be over
      ``MAX_WINDOW`` points is refused, naming the accounted range.
    step: grid spacing > 0.
    pessimistic: dominating (True) or optimistic (False).
    tail_mass: grid covers the loss up to tails of this P-mass.
    sensitivity: > 0.

  Returns:
    :class:`PLD`: built in NumPy on the CPU layout (no compiled program), by the
    compiled kernel on the accelerator layout or under a lanes mesh.

  Bound: upper (pessimistic) / lower (optimistic).
  """
  sig = _scaled_param("sigma", sigma, step, sensitivity, pessimistic)
  # more noise is a post-processing of less: the PLD at SIGMA_MAX dominates (and is
  # the same in float64: the loss is 0 to 1e-100 there)
  sig = min(sig, checks.SIGMA_MAX)
  _check_gaussian_grid(sig, float(step), normal_tail_z(tail_mass), sigma, sensitivity)
  return _gaussian_pld(sig, step, pessimistic, tail_mass, JAX)


def _check_gaussian_grid(sig, h, z, sigma, sensitivity) -> None:
  """The Gaussian grid spans ``mu +- z s`` (``s = 1 / sig``, ``mu = s^2 / 2``):
  refused when over ``MAX_WINDOW`` points or when ``mu / h`` is past float64's
  integers (no grid index); computed without overflow."""
  s = 1.0 / sig
  points = 2.0 * z * s / h
  if not 0.5 * s * s / h < 2.0**53:
    points = math.inf
  smallest = max(2.0 * z / (MAX_WINDOW * h), 2.0**-27 / math.sqrt(h))
  _check_grid(points, f"sigma / sensitivity = {sig:.6g} (sigma {float(sigma):g}, sensitivity "
              f"{float(sensitivity):g}) is too small for the Gaussian PLD", h,
              f"sigma / sensitivity >= {smallest:.3g} is accounted",
              "Use a larger sigma, a smaller sensitivity or a coarser step.")


# ----------------------------------------------------------------- Laplace


def _laplace_core(b, lo_idx, step, pessimistic, *, size, ns=JAX):
  xp = ns.xp
  if not ns.is_host:
    require_x64("jaxacct.pld.laplace")
  top = 1.0 / b
  lhalf = math.log(0.5)

  def log_mass(lo, hi):
    # continuous part: loss (1-2x)/b for x in (0,1); L in [lo,hi) <->
    # x in ((1-b hi)/2, (1-b lo)/2].
    x1 = xp.clip((1.0 - b * hi) / 2.0, 0.0, 1.0)
    x2 = xp.clip((1.0 - b * lo) / 2.0, 0.0, 1.0)
    lp, lq = log_laplace_cells(x1, x2, b, xp)
    in_top = (lo <= top) & (top < hi)
    in_bot = (lo <= -top) & (-top < hi)
    lp = xp.where(in_top, xp.logaddexp(lp, lhalf), lp)
    lq = xp.where(in_top, xp.logaddexp(lq, lhalf - top), lq)
    lp = xp.where(in_bot, xp.logaddexp(lp, lhalf - top), lp)
    lq = xp.where(in_bot, xp.logaddexp(lq, lhalf), lq)
    return lp, lq

  return _assemble(log_mass, lo_idx, size, step, pessimistic, ns)


_laplace_kernel = jit(_laplace_core, static_argnames=("size",))


@host_door(BUILD_ON_HOST)
def laplace(scale, *, step=DEFAULT_STEP, pessimistic: bool = True,
            sensitivity=1.0) -> PLD:
  r"""PLD of the Laplace mechanism (both directions are the same).

  P = Lap(0, b), Q = Lap(sensitivity, b): loss ``(|x-s| - |x|)/b``, atoms at
  ``+-s/b`` (P-masses 1/2 and e^{-s/b}/2) and a continuous part between.

  Args:
    scale: Laplace scale b > 0 (``scale / sensitivity`` whose grid would be over
      ``MAX_WINDOW`` points is refused, naming the accounted range).
    step: grid spacing > 0.
    pessimistic: dominating (True) or optimistic (False).
    sensitivity: > 0.

  Returns:
    :class:`PLD`: built in NumPy on the CPU layout (no compiled program), by the
    compiled kernel on the accelerator layout or under a lanes mesh.

  Bound: upper (pessimistic) / lower (optimistic).
  """
  b = _scaled_param("scale", scale, step, sensitivity, pessimistic)
  _check_grid(2.0 / b / float(step), f"scale / sensitivity = {b:.6g} (scale {float(scale):g}, "
              f"sensitivity {float(sensitivity):g}) is too small for the Laplace PLD", step,
              f"scale / sensitivity >= {2.0 / (MAX_WINDOW * float(step)):.3g} is accounted",
              "Use a larger scale, a smaller sensitivity or a coarser step.")
  lo_idx = int(math.floor(-1.0 / b / step))
  hi_idx = int(math.floor(1.0 / b / step)) + 1
  size = hi_idx - lo_idx + 1
  return _mechanism_pld(_laplace_core, _laplace_kernel, b, lo_idx, step, pessimistic, size)


# ------------------------------------------------- Poisson-subsampled Gauss


def _x_of_loss(ell, sigma, log_q, log_1mq, xp=jnp):
  """x with log(1-q + q e^{(2x-1)/(2 sigma^2)}) = ell (monotone inverse)."""
  u = ell - log_1mq
  ok = u > 0
  us = xp.where(ok, u, 1.0)
  us = xp.where(xp.isinf(us), 1.0, us)
  x = sigma**2 * (log_1mq + us + xp.log(-xp.expm1(-us)) - log_q) + 0.5
  x = xp.where(ok, x, -xp.inf)
  return xp.where(ell == xp.inf, xp.inf, x)


def _poisson_intervals(sigma, q, lo_idx, i, size, step, add, ns=JAX):
  """Connect-the-dots split of the intervals ``i`` (a float array of indices).

  Interval ``i`` of the grid ``e_j = (lo_idx + j) * step``, ``j < size``, is
  ``[e_{i-1}, e_i)`` with ``e_{-1} = -inf`` and ``e_size = +inf`` (as in
  :func:`_assemble`; the edges are computed here, as there, so the values
  are the same to the last bit). Both directions (``add`` may be traced)
  and every grid: returns ``(a, b, pk)``, the P-mass ``pk`` of each
  interval and its split ``a`` (to the lower end) + ``b`` (to the upper end).
  ``ns``: ``HOST`` (:func:`_poisson_grid`: every grid is built from concrete
  scalars, so no program is compiled for it) or ``JAX`` (jittable).
  """
  xp = ns.xp
  if not ns.is_host:
    require_x64("jaxacct.pld.poisson_gaussian")
  h = xp.asarray(step, xp.float64)
  e_lo = (lo_idx + (i - 1.0)) * h
  e_hi = (lo_idx + i) * h
  lo_e = xp.where(i == 0, -xp.inf, e_lo)
  hi_e = xp.where(i >= size, xp.inf, e_hi)
  log_q = xp.log(q)
  log_1mq = xp.log1p(-q)
  # remove: P = mixture, Q = N(0), loss increasing in x; add: P = N(0),
  # Q = mixture, loss = -ell(x) decreasing in x.
  x1 = _x_of_loss(xp.where(add, -hi_e, lo_e), sigma, log_q, log_1mq, xp)
  x2 = _x_of_loss(xp.where(add, -lo_e, hi_e), sigma, log_q, log_1mq, xp)
  l0, l1 = log_ndtr_diff(xp.stack([x1 / sigma, (x1 - 1.0) / sigma]),
                         xp.stack([x2 / sigma, (x2 - 1.0) / sigma]), ns)
  lmix = xp.logaddexp(log_1mq + l0, log_q + l1)
  lp = xp.where(add, l0, lmix)
  lq = xp.where(add, lmix, l0)
  pk = xp.exp(lp)
  ok = lp > -xp.inf
  ratio = xp.where(ok, lo_e + lq - xp.where(ok, lp, 0.0), 0.0)
  ratio = xp.minimum(ratio, 0.0)
  frac = xp.clip(-xp.expm1(ratio) / (-xp.expm1(-h)), 0.0, 1.0)
  b = xp.where(ok, pk * frac, 0.0)
  return pk - b, b, pk


def _poisson_grid(sigma, q, lo_idx, step, pessimistic, size, add, ns=JAX):
  """The Poisson-subsampled Gaussian grid PLD (same values as :func:`_assemble`).

  On the grid ``(lo_idx + i) * step``, ``i < size``. The intervals are
  evaluated on the host (the arguments are concrete scalars: NumPy/SciPy, no
  compiled program, whatever the grid); ``ns=JAX`` hands the result to the
  device (for the jitted composition), ``ns=HOST`` keeps NumPy arrays.
  """
  # intervals (-inf, e_0), [e_0, e_1), ..., [e_{n-1}, +inf)
  n_iv = size + 1
  a, b, pk = host_call(_poisson_intervals, np.float64(sigma), np.float64(q), np.int64(lo_idx),
                       np.arange(n_iv, dtype=np.float64), np.float64(size), np.float64(step),
                       bool(add))
  below, above = pk[0], pk[size]
  a, b, pk = a[1:size], b[1:size], pk[1:size]
  if pessimistic:
    probs = np.concatenate([a, [0.0]]) + np.concatenate([[0.0], b])
    probs[0] += below
    inf = above
  else:
    probs = np.concatenate([pk, [0.0]])
    probs[-1] += above
    inf = 0.0
  if ns.is_host:
    return probs, np.float64(inf)
  return device_array(probs), device_array(inf)


def _loss_remove(x, sigma, q):
  return float(np.logaddexp(np.log1p(-q), np.log(q) + (2 * x - 1) /
                            (2 * sigma**2)))


@host_door(BUILD_ON_HOST)
def poisson_gaussian(sigma, q, *, direction: str = "remove",
                     step=DEFAULT_STEP, pessimistic: bool = True,
                     tail_mass: float = _DEFAULT_TAIL) -> PLD:
  r"""PLD of one Poisson-subsampled Gaussian step, one direction.

  remove: P = (1-q) N(0, sigma^2) + q N(1, sigma^2), Q = N(0, sigma^2);
  add: P = N(0, sigma^2), Q = the mixture.  Loss
  ``ell(x) = log(1 - q + q e^{(2x-1)/(2 sigma^2)})`` (negated for add), monotone
  in x, inverted in closed form; interval masses are Gaussian CDF differences
  in log space (Zhu, Dong, Wang, "Optimal accounting of differential privacy
  via characteristic function", arXiv:2106.08567v2, Sec. 5 / dp-accounting's
  dominating pairs).

  Args:
    sigma: noise multiplier > 0; above ``SIGMA_MAX`` (1e100) accounted at it (an
      upper bound, the same PLD in float64); one whose grid would be over
      ``MAX_WINDOW`` points is refused, naming the accounted range.
    q: sampling probability in [0, 1].
    direction: ``"remove"`` or ``"add"``.
    step: grid spacing > 0.
    pessimistic: dominating (True) or optimistic (False).
    tail_mass: the grid covers ``x`` within ``z(tail_mass)`` sigmas.

  Returns:
    :class:`PLD`.

  Bound: upper (pessimistic) / lower (optimistic).
  """
  checks.check_sigma("sigma", sigma, scalar=True)
  checks.check_probability("q", q, scalar=True)
  checks.check_positive("step", step, scalar=True)
  checks.check_choice("direction", direction, ("remove", "add"))
  checks.check_bool("pessimistic", pessimistic)
  z = normal_tail_z(tail_mass)
  # more noise is a post-processing of less: the PLD at SIGMA_MAX dominates (the
  # same in float64 as at any larger sigma)
  sigma, q, step = min(float(sigma), checks.SIGMA_MAX), float(q), float(step)
  if 0.0 < q < 1.0:   # (q = 1: the Gaussian PLD, checked there)
    # the grid reaches from log(1 - q) <= 0 to past log(q) + (1 + 2 z sigma) / (2 sigma^2):
    # at least this many points (s = 1 / sigma; no overflow)
    s, room = 1.0 / sigma, MAX_WINDOW * step - math.log(q)
    points = (math.log(q) + 0.5 * s * s + z * s) / step
    _check_grid(points, f"sigma {sigma:.6g} is too small for the Poisson-subsampled Gaussian "
                f"PLD at q={q:g}", step,
                f"sigma >= {1.0 / (math.sqrt(z * z + 2.0 * room) - z):.3g} is accounted",
                "Use a larger sigma or a coarser step.")
  return _poisson_gaussian(sigma, q, direction, step, pessimistic, tail_mass, JAX)


def _poisson_gaussian(sigma, q, direction, step, pessimistic, tail_mass, ns):
  """:func:`poisson_gaussian` after validation; ``ns`` as in :func:`_poisson_grid`."""
  xp = ns.xp
  if q == 0.0:
    return PLD(xp.ones(1, xp.float64), 0, step, xp.zeros((), xp.float64), bool(pessimistic))
  if q == 1.0:
    if ns.is_host:
      return _gaussian_pld(sigma, step, pessimistic, tail_mass, HOST)
    return gaussian(sigma, step=step, pessimistic=pessimistic, tail_mass=tail_mass)
  z = normal_tail_z(tail_mass)
  l_top = _loss_remove(1.0 + z * sigma, sigma, q)
  l_bot = float(np.log1p(-q))
  if direction == "remove":
    lo_idx = int(math.floor(l_bot / step))
    hi_idx = int(math.ceil(l_top / step))
  else:
    lo_idx = int(math.floor(-l_top / step))
    hi_idx = int(math.floor(-l_bot / step)) + 1
  size = fast_len(max(hi_idx - lo_idx + 1, 2))  # the grid length (no compile depends on it)
  probs, inf = _poisson_grid(sigma, q, lo_idx, step, bool(pessimistic), size,
                             direction == "add", ns)
  return PLD(probs, lo_idx, step, inf, bool(pessimistic))


def poisson_grid_bounds(sigma, q, step, add, tail_mass: float = _DEFAULT_TAIL):
  """``(lo_idx, size)`` of :func:`_poisson_gaussian`'s grid for arrays of lanes.

  The same formulas as the scalar code there, as NumPy ufuncs over float64
  arrays ``sigma``, ``q`` (in (0, 1)), ``step`` and the bool array ``add``;
  returns int64 arrays (the first grid index and the bucketed grid length).
  Used by the accelerator layout's block programs (``_poisson_blocks``).
  """
  z = normal_tail_z(tail_mass)
  x = 1.0 + z * sigma
  l_top = np.logaddexp(np.log1p(-q), np.log(q) + (2 * x - 1) / (2 * sigma**2))
  l_bot = np.log1p(-q)
  lo = np.where(add, np.floor(-l_top / step), np.floor(l_bot / step))
  hi = np.where(add, np.floor(-l_bot / step) + 1, np.ceil(l_top / step))
  lo, hi = lo.astype(np.int64), hi.astype(np.int64)
  return lo, fast_lens(np.maximum(hi - lo + 1, 2))


def fast_lens(n):
  """:func:`jaxacct.pld._core.fast_len` of an int64 array (elementwise)."""
  return np.vectorize(fast_len, otypes=[np.int64])(np.asarray(n, np.int64))


#: :func:`_poisson_intervals` under a public name (the block programs use it).
poisson_intervals = _poisson_intervals


def poisson_gaussian_pair(sigma, q, **kwargs) -> PairPLD:
  """Both directions of :func:`poisson_gaussian` as a :class:`PairPLD`."""
  return PairPLD(poisson_gaussian(sigma, q, direction="remove", **kwargs),
                 poisson_gaussian(sigma, q, direction="add", **kwargs))


def poisson_gaussian_host(sigma: float, q: float, *, direction: str, step: float,
                          pessimistic: bool = True, tail_mass: float = _DEFAULT_TAIL) -> PLD:
  """:func:`poisson_gaussian` on the host (NumPy/SciPy, no compiled program).

  The same formula as the jitted grid kernel (:mod:`jaxacct._core.namespace`),
  for a scalar question; the caller has validated the (float) arguments.
  The PLD holds NumPy arrays. Bound: as :func:`poisson_gaussian`.
  """
  return _poisson_gaussian(float(sigma), float(q), direction, float(step), bool(pessimistic),
                           tail_mass, HOST)


# ------------------------------------------------------ randomized response


@host_door(BUILD_ON_HOST)
def randomized_response(eps0, *, delta0=0.0, step=None,
                        pessimistic: bool = True) -> PLD:
  r"""PLD of the dominating pair of (eps0, delta0)-DP (randomized response).

  Kairouz, Oh, Viswanath, "The composition theorem for differential
  privacy", arXiv:1311.0776v4, Thm 3.4: P = (delta0, (1-delta0) e^eps0/(1+e^eps0),
  (1-delta0)/(1+e^eps0), 0), Q reversed; losses +inf, eps0, -eps0.

  Args:
    eps0: > 0 (refused, naming the accounted range, where the grid from
      ``-eps0`` to ``eps0`` would be over ``MAX_WINDOW`` points).
    delta0: in [0, 1).
    step: grid spacing; default ``eps0`` (exact: the composition then is
      the exact binomial sum), ``eps0 / ceil(eps0 / 700)`` above 700 (exact too).
    pessimistic: dominating (True) or optimistic (False).

  Returns:
    :class:`PLD`.

  Bound: exact when ``eps0/step`` is an integer; else upper/lower.
  """
  checks.check_positive("eps0", eps0, scalar=True)
  checks.check_range("delta0", delta0, 0.0, 1.0, hi_open=True, scalar=True)
  checks.check_bool("pessimistic", pessimistic)
  if step is not None:
    checks.check_positive("step", step, scalar=True)
  eps0 = float(eps0)
  advice = "" if step is None else "Use a coarser step (the default step is exact)."
  if step is None:   # eps0 / step an integer: exact; at most 700 (the queries' e^step is finite)
    step = eps0 if eps0 <= 700.0 else eps0 / math.ceil(eps0 / 700.0)
  step = float(step)
  _check_grid(2.0 * eps0 / step, f"eps0 {eps0:g} is too large for its PLD", step,
              f"eps0 <= {MAX_WINDOW * step / 2.0:.3g} is accounted",
              advice)
  p_hi = (1.0 - delta0) / (1.0 + math.exp(-eps0))
  if eps0 <= 700.0:
    p_lo = (1.0 - delta0) / (1.0 + math.exp(eps0))
  else:   # e^eps0 overflows: the same mass, written with e^-eps0
    p_lo = (1.0 - delta0) * math.exp(-eps0) / (1.0 + math.exp(-eps0))
  return from_losses(np.array([eps0, -eps0]), np.array([p_hi, p_lo]),
                     step=step, pessimistic=pessimistic, inf_mass=delta0)


def truncate_to_bucket_host(pld: PLD, tail_mass: float) -> PLD:
  """:func:`truncate_to_bucket` with NumPy arrays out (no device transfer)."""
  kept, lo, inf = truncate_host(pld, tail_mass)
  size = 1 << max(kept.size - 1, 0).bit_length()
  kept = np.concatenate([kept, np.zeros(size - kept.size)])
  return PLD(kept, int(pld.offset) + lo, pld.step, np.float64(inf), pld.pessimistic)


def truncate_to_bucket(pld: PLD, tail_mass: float) -> PLD:
  """:func:`jaxacct.pld.truncate` done on the host, padded to a power of two.

  Same rule as ``truncate`` (pessimistic: mass below the kept range moves up
  to its first point, mass above goes to ``inf_mass``; optimistic: the lower
  tail is dropped, the upper one moved down to the last point), then the
  kept P-masses are zero-padded (no mass) to a power-of-two length before
  they go to the device once. The compiled kernels that take the PLD
  (window, composition, queries) then see one of few shapes, and a new sigma
  (a new grid length) compiles nothing new.

  Bound: as the input.
  """
  p = truncate_to_bucket_host(pld, tail_mass)
  return p._replace(probs=device_array(p.probs), inf_mass=device_array(p.inf_mass))
