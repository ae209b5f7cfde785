r"""Base mechanisms as values: what each one knows, described once (see the package)."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import jax
import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import checks
from jaxacct._core.gaussian import gaussian_delta, gaussian_epsilon, gaussian_rdp
from jaxacct._core.lazy import LazyModule
from jaxacct._core.one_step import one_steps
from jaxacct._core.results import DeltaResult, EpsilonResult, host_f64
from jaxacct.mechanisms._kernels import laplace_rdp, pure_dp_rdp

if TYPE_CHECKING:
  from jaxacct._core import events
else:   # imported at the first event(): dp_accounting (when installed) comes with the events
  events = LazyModule("jaxacct._core.events")


# --------------------------------------------------------------------------
# values


def _number(name, value, lo=0.0, hi=math.inf, *, lo_open=True, hi_open=False) -> float:
  """A real scalar in the range, as a float (ValueError naming ``name`` else)."""
  checks.check_range(name, value, lo, hi, lo_open=lo_open, hi_open=hi_open)
  checks.check_scalar(name, **{name: value})
  return float(value)


def _set(obj, **fields):
  for k, v in fields.items():
    object.__setattr__(obj, k, v)


def _orders(orders):
  return checks.check_orders(orders)


def _step(value_discretization_interval, pessimistic):
  checks.check_bool("pessimistic", pessimistic)
  return _number("value_discretization_interval", value_discretization_interval)


def _eps_arg(epsilon):
  checks.check_range("epsilon", epsilon, -np.inf, np.inf, allow_inf=True)
  return np.asarray(epsilon, np.float64)


def _pair_delta(pairs, eps):
  """Hockey-stick divergence of finite pairs: max over ``pairs`` of
  sum(max(a - e^eps b, 0)) (NumPy, elementwise in ``eps``)."""
  e = np.asarray(eps, np.float64)[..., None]
  out = 0.0
  with np.errstate(over="ignore", invalid="ignore"):
    for a, b in pairs:
      d = np.sum(np.where(b > 0, np.maximum(a - np.exp(e) * b, 0.0), a), axis=-1)
      out = np.maximum(out, np.where(e[..., 0] == np.inf, np.sum(a[b == 0]), d))
  return np.minimum(out, 1.0)


def _one_pair_epsilon(a, b, delta):
  """Smallest eps >= 0 with sum(max(a - e^eps b, 0)) <= delta (exact, scalar delta)."""
  inf_mass = float(np.sum(a[(b == 0) & (a > 0)]))
  if inf_mass > delta:
    return math.inf
  keep = (a > 0) & (b > 0)
  a, b = a[keep], b[keep]
  loss = np.log(a) - np.log(b)
  order = np.argsort(-loss, kind="stable")
  a, b, loss = a[order], b[order], loss[order]
  # delta at eps in [loss[j+1], loss[j]]: A_j - e^eps B_j, A_j = inf + sum a[:j+1]
  cum_a, cum_b = inf_mass + np.cumsum(a), np.cumsum(b)
  lo_edges = np.append(loss[1:], -np.inf)
  # delta(eps) decreases; delta(loss[0]) = inf_mass <= delta, and each segment
  # starts where the one above it ended feasible
  for j in range(loss.size):
    if loss[j] <= 0:
      return 0.0
    lo = max(float(lo_edges[j]), 0.0)
    if cum_a[j] - math.exp(lo) * cum_b[j] > delta:    # the root is in (lo, loss[j]]
      root = math.log((cum_a[j] - delta) / cum_b[j])
      return min(max(math.nextafter(root, math.inf), lo), float(loss[j]))
  return 0.0


def _pair_epsilon(pairs, delta):
  checks.check_delta(delta)
  d = np.asarray(delta, np.float64)
  out = np.vectorize(lambda x: max(_one_pair_epsilon(a, b, float(x)) for a, b in pairs),
                     otypes=[np.float64])(d)
  return host_f64(out), host_f64(d)


def _pair_rdp(pairs, orders):
  """Renyi divergence of finite pairs at ``orders`` (max over ``pairs``; NumPy)."""
  a_ = _orders(orders)[:, None]
  out = np.zeros(a_.shape[0])
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    for p, q in pairs:
      if np.any((q == 0) & (p > 0)):
        return np.full(a_.shape[0], np.inf)
      keep = p > 0
      lp, lq = np.log(p[keep]), np.log(q[keep])
      t = a_ * lp + (1.0 - a_) * lq
      m = np.max(t, axis=1, keepdims=True)
      out = np.maximum(out, (m[:, 0] + np.log(np.sum(np.exp(t - m), axis=1))) / (a_[:, 0] - 1.0))
  return np.maximum(out, 0.0)


class _AdditiveNoise:
  """What the additive-noise mechanisms share: a symmetric pair (remove = add)
  given by one noise scale, ``_kind`` naming its :mod:`jaxacct.pld` builder and
  its random-allocation one-step law. A subclass is a dataclass whose fields are
  the noise scale (first) and ``sensitivity``, and it defines ``_kind``."""
  _kind: str

  def __post_init__(self):
    name = dataclasses.fields(self)[0].name
    _set(self, **{name: _number(name, getattr(self, name)),
                  "sensitivity": _number("sensitivity", self.sensitivity)})

  @property
  def _noise(self) -> float:
    """The noise scale as given (the first field)."""
    return getattr(self, dataclasses.fields(self)[0].name)

  @property
  def _unit(self) -> float:
    """The noise scale in units of the sensitivity."""
    return self._noise / self.sensitivity

  def pld(self, *, value_discretization_interval=jpld.DEFAULT_STEP,
          pessimistic: bool = True):
    """``PairPLD`` (both directions the same) from :func:`jaxacct.pld.gaussian`
    or :func:`jaxacct.pld.laplace`.

    Bound: upper (pessimistic) / lower (optimistic)."""
    h = _step(value_discretization_interval, pessimistic)
    build = jpld.gaussian if self._kind == "gaussian" else jpld.laplace
    one = build(self._noise, step=h, pessimistic=pessimistic, sensitivity=self.sensitivity)
    return jpld.PairPLD(one, one)

  def one_step_law(self, n: int, tail):
    """One-step laws of random allocation with this noise: NumPy, one lane
    (``Steps``: upper masses ``p``, ``q0``, ``minf``, lower ``a``, ``g``,
    lattice ``lo``, ``D``; wrap a lane as ``jaxacct.allocation.sum_law``'s
    ``UpperLaw(p, q0, minf)``, ``LowerLaw(a, g, 0)``, ``Lattice(lo, D, 0)``),
    at the noise in units of the sensitivity."""
    return one_steps(self._kind, self._unit, tail, n)


@dataclasses.dataclass(frozen=True)
class Gaussian(_AdditiveNoise):
  r"""The Gaussian mechanism: noise of standard deviation ``noise_multiplier``
  added to a sum that one neighbour moves by at most ``sensitivity`` (L2).

  Dominating pair P = N(0, s^2), Q = N(1, s^2) with ``s = sigma =
  noise_multiplier / sensitivity`` (Balle & Wang, arXiv:1805.06530v2, Thm 8;
  RDP: Mironov, arXiv:1702.07476v3, Prop. 7). For DP-SGD: ``sensitivity=1``
  under add/remove, ``2`` under replace-one (dp_accounting's GaussianDpEvent).

  Attributes:
    noise_multiplier: > 0. sensitivity: > 0.
  """
  noise_multiplier: float
  sensitivity: float = 1.0

  _kind = "gaussian"

  @property
  def sigma(self) -> float:
    """Noise in units of the sensitivity (the kernels' ``sigma``)."""
    return self._unit

  @property
  def gdp_mu(self) -> float:
    """mu of mu-GDP (Dong, Roth, Su, arXiv:1905.02383v3): sensitivity / noise."""
    return self.sensitivity / self.noise_multiplier

  @property
  def label(self) -> str:
    return f"gaussian({self.noise_multiplier:g})"

  def rdp(self, orders):
    """Exact RDP, ``orders / (2 sigma^2)`` (:func:`gaussian_rdp`)."""
    return gaussian_rdp(orders, self.sigma)

  def delta(self, epsilon) -> DeltaResult:
    """Exact delta(epsilon), any real epsilon (``jaxacct._core.gaussian.gaussian_delta``)."""
    return gaussian_delta(self.sigma, epsilon)

  def epsilon(self, delta) -> EpsilonResult:
    """Exact epsilon(delta) (``jaxacct._core.gaussian.gaussian_epsilon``: bisection, upper end)."""
    return gaussian_epsilon(self.sigma, delta)

  def event(self):
    """``GaussianDpEvent(sigma)`` (the pair under add/remove, sensitivity 1)."""
    return events.GaussianDpEvent(self.sigma)


@dataclasses.dataclass(frozen=True)
class Laplace(_AdditiveNoise):
  r"""The Laplace mechanism: noise of scale ``scale`` added to a sum that one
  neighbour moves by at most ``sensitivity`` (L1).

  Pair P = Lap(0, b), Q = Lap(1, b), ``b = scale / sensitivity``; with
  ``e0 = 1/b`` the exact profile is ``delta(eps) = 1 - e^{(eps - e0)/2}`` for
  ``|eps| < e0`` (``1 - e^eps`` below, 0 above; the loss is +-e0 on the two
  half-lines and linear between); RDP: Mironov, arXiv:1702.07476v3, Prop. 6.

  Attributes:
    scale: > 0. sensitivity: > 0.
  """
  scale: float
  sensitivity: float = 1.0

  _kind = "laplace"

  @property
  def b(self) -> float:
    """Scale in units of the sensitivity (the kernels' ``scale``)."""
    return self._unit

  gdp_mu = None

  @property
  def label(self) -> str:
    return f"laplace({self.scale:g})"

  def rdp(self, orders):
    """Exact RDP (:func:`laplace_rdp`)."""
    return laplace_rdp(orders, self.b)

  def delta(self, epsilon) -> DeltaResult:
    """Exact delta(epsilon), any real epsilon (closed form above)."""
    e = _eps_arg(epsilon)
    e0 = 1.0 / self.b
    with np.errstate(over="ignore"):
      d = np.where(e >= e0, 0.0, np.where(e > -e0, -np.expm1((e - e0) / 2.0),
                                           -np.expm1(np.minimum(e, 0.0))))
    return DeltaResult(host_f64(d), host_f64(e), method="laplace", bound="exact")

  def epsilon(self, delta) -> EpsilonResult:
    """Exact epsilon(delta) = max(0, e0 + 2 log(1 - delta))."""
    checks.check_delta(delta)
    d = np.asarray(delta, np.float64)
    eps = np.maximum(1.0 / self.b + 2.0 * np.log1p(-d), 0.0)
    return EpsilonResult(host_f64(eps), host_f64(d), method="laplace", bound="exact")

  def event(self):
    """``LaplaceDpEvent(b)`` (the pair under add/remove, sensitivity 1)."""
    return events.LaplaceDpEvent(self.b)


_RR_NEIGHBOURING = ("replace_one", "replace_special")


@dataclasses.dataclass(frozen=True)
class RandomizedResponse:
  r"""k-ary randomized response (dp_accounting's RandomizedResponseDpEvent).

  With probability ``noise_parameter`` the output is a uniform bucket of
  ``num_buckets``, else the true one: P(true) = hit = 1 - p + p/k, P(other
  given) = p/k. ``neighbouring="replace_one"``: R(x) against R(x') (outputs
  x, x', other); ``"replace_special"``: R(x) against the uniform output (a
  user replaced by the special record). The pair is finite, so every method
  is exact (the PLD up to the grid).

  Attributes:
    noise_parameter: in (0, 1]. num_buckets: integer >= 2.
    neighbouring: ``"replace_one"`` or ``"replace_special"``.
  """
  noise_parameter: float
  num_buckets: int
  neighbouring: str = "replace_one"

  def __post_init__(self):
    p = _number("noise_parameter", self.noise_parameter, 0.0, 1.0)
    checks.check_int("num_buckets", self.num_buckets, min_value=2)
    checks.check_scalar("num_buckets", num_buckets=self.num_buckets)
    checks.check_choice("neighbouring", self.neighbouring, _RR_NEIGHBOURING)
    _set(self, noise_parameter=p, num_buckets=int(self.num_buckets))

  gdp_mu = None

  @property
  def label(self) -> str:
    return f"randomized_response(p={self.noise_parameter:g}, k={self.num_buckets})"

  def outcome_pair(self):
    """``(a, b)``: the masses of the pair's outcomes (remove direction; add is (b, a))."""
    p, k = self.noise_parameter, self.num_buckets
    hit, miss = 1.0 - p + p / k, p / k
    if self.neighbouring == "replace_one":    # R(x) vs R(x'): outputs x, x', other
      other = max(1.0 - hit - miss, 0.0)      # k = 2: no other bucket (rounds to -1e-17)
      return np.array([hit, miss, other]), np.array([miss, hit, other])
    return np.array([hit, 1.0 - hit]), np.array([1.0 / k, 1.0 - 1.0 / k])

  def _both(self):
    a, b = self.outcome_pair()
    return ((a, b), (b, a))

  def rdp(self, orders):
    """Exact RDP of the pair (max of both directions; NumPy)."""
    return _pair_rdp(self._both(), orders)

  def delta(self, epsilon) -> DeltaResult:
    """Exact delta(epsilon) of the pair (max of both directions)."""
    e = _eps_arg(epsilon)
    return DeltaResult(host_f64(_pair_delta(self._both(), e)), host_f64(e),
                       method="randomized_response", bound="exact")

  def epsilon(self, delta) -> EpsilonResult:
    """Exact epsilon(delta) of the pair (piecewise inversion, both directions)."""
    eps, d = _pair_epsilon(self._both(), delta)
    return EpsilonResult(eps, d, method="randomized_response", bound="exact")

  def pld(self, *, value_discretization_interval=jpld.DEFAULT_STEP,
          pessimistic: bool = True):
    """``PairPLD(remove, add)`` from :func:`jaxacct.pld.from_pair`.

    Bound: upper (pessimistic) / lower (optimistic)."""
    h = _step(value_discretization_interval, pessimistic)
    a, b = self.outcome_pair()
    return jpld.PairPLD(jpld.from_pair(a, b, step=h, pessimistic=pessimistic),
                        jpld.from_pair(b, a, step=h, pessimistic=pessimistic))

  def event(self):
    """``RandomizedResponseDpEvent(p, k)`` (under REPLACE_ONE or REPLACE_SPECIAL,
    as ``neighbouring`` says)."""
    return events.RandomizedResponseDpEvent(self.noise_parameter, self.num_buckets)


@dataclasses.dataclass(frozen=True)
class EpsilonDelta:
  r"""Any (eps0, delta0)-DP mechanism; pure ``eps0``-DP when ``delta0=0``.

  Its dominating pair, which is also the worst such mechanism: P = (delta,
  (1-delta) e^eps/(1+e^eps), (1-delta)/(1+e^eps), 0), Q reversed (Kairouz,
  Oh, Viswanath, arXiv:1311.0776v4, Thm 3.4). RDP: :func:`pure_dp_rdp` when
  ``delta = 0``, else infinite (an outcome of loss +inf).

  Attributes:
    eps0: >= 0. delta0: in [0, 1) (the names of
    :func:`jaxacct.pld.randomized_response`).
  """
  eps0: float
  delta0: float = 0.0

  def __post_init__(self):
    _set(self, eps0=_number("eps0", self.eps0, lo_open=False),
         delta0=_number("delta0", self.delta0, 0.0, 1.0, lo_open=False, hi_open=True))

  gdp_mu = None

  @property
  def label(self) -> str:
    return f"epsilon_delta({self.eps0:g}, {self.delta0:g})"

  def _masses(self):
    hi = (1.0 - self.delta0) / (1.0 + math.exp(-self.eps0))
    if self.eps0 <= 700.0:
      lo = (1.0 - self.delta0) / (1.0 + math.exp(self.eps0))
    else:   # e^eps0 overflows: the same mass, written with e^-eps0
      lo = (1.0 - self.delta0) * math.exp(-self.eps0) / (1.0 + math.exp(-self.eps0))
    return hi, lo

  def outcome_pair(self):
    """``(a, b)``: the four outcomes' masses (symmetric: add is (b, a))."""
    hi, lo = self._masses()
    return np.array([self.delta0, hi, lo, 0.0]), np.array([0.0, lo, hi, self.delta0])

  def rdp(self, orders):
    """Exact RDP: :func:`pure_dp_rdp` (delta = 0), else +inf."""
    if self.delta0 == 0:
      return pure_dp_rdp(orders, self.eps0)
    return np.full(_orders(orders).shape, np.inf)

  def delta(self, epsilon) -> DeltaResult:
    """Exact delta(epsilon) of the pair."""
    e = _eps_arg(epsilon)
    return DeltaResult(host_f64(_pair_delta([self.outcome_pair()], e)), host_f64(e),
                       method="epsilon_delta", bound="exact")

  def epsilon(self, delta) -> EpsilonResult:
    """Exact epsilon(delta) of the pair."""
    eps, d = _pair_epsilon([self.outcome_pair()], delta)
    return EpsilonResult(eps, d, method="epsilon_delta", bound="exact")

  def pld(self, *, value_discretization_interval=jpld.DEFAULT_STEP,
          pessimistic: bool = True):
    """``PairPLD`` (both the same) from :func:`jaxacct.pld.from_losses` (losses
    +-epsilon, +inf mass delta; :func:`jaxacct.pld.randomized_response`'s pair).

    Bound: upper (pessimistic) / lower (optimistic)."""
    h = _step(value_discretization_interval, pessimistic)
    if not 2.0 * self.eps0 / h <= jpld.MAX_WINDOW:
      raise checks.OneStepTooLarge(
          f"eps0 {self.eps0:g} at value_discretization_interval {h:g}: the PLD's grid would "
          f"span {2.0 * self.eps0 / h:.3g} points, more than the PLD engine runs "
          f"({jpld.MAX_WINDOW}); eps0 <= {jpld.MAX_WINDOW * h / 2.0:.3g} is accounted at this "
          "interval.", 2.0 * self.eps0 / h)
    hi, lo = self._masses()
    one = jpld.from_losses(np.array([self.eps0, -self.eps0]), np.array([hi, lo]),
                           step=h, pessimistic=pessimistic, inf_mass=self.delta0)
    return jpld.PairPLD(one, one)

  def event(self):
    """``EpsilonDeltaDpEvent(epsilon, delta)``."""
    return events.EpsilonDeltaDpEvent(self.eps0, self.delta0)


for _cls in (Gaussian, Laplace, RandomizedResponse, EpsilonDelta):
  jax.tree_util.register_static(_cls)
