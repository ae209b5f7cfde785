"""The front doors of :mod:`jaxacct.allocation` (re-exported by the package):
:func:`epsilon` / :func:`delta` (min over the methods per direction, max over
the directions) and :func:`allocation_rdp`. The methods table is in the
package docstring."""

from __future__ import annotations

import warnings

import numpy as np

from jaxacct._core import checks, sharding
from jaxacct._core.dtype import OUTSIDE_JIT, HostDoor, host_door
from jaxacct._core.conversion import rdp_to_epsilon_kernel, rdp_to_delta_kernel
from jaxacct._core.gaussian import gaussian_delta_kernel
from jaxacct._core.namespace import HOST, for_inputs
from jaxacct._core.orders import DEFAULT_ORDERS
from jaxacct._core.results import DeltaResult, EpsilonResult
from jaxacct._core.units import per_epoch_steps, user_stacklevel
from jaxacct.allocation import _bounds as bounds
from jaxacct.allocation import _recursive as recursive
from jaxacct.allocation import pld as apld
from jaxacct.allocation._add_rdp import allocation_add_rdp
from jaxacct.allocation._fixed_bins import equivalent_sigma
from jaxacct.allocation.pld._doors import RDP_INSTEAD
from jaxacct.allocation._rdp import allocation_remove_rdp

_ON_HOST = HostDoor(
    f"{OUTSIDE_JIT}; {RDP_INSTEAD}; for grids outside jit use "
    "jaxacct.allocation.pld.allocation_pld_epsilon or "
    "jaxacct.allocation.pld.allocation_pld_delta (arrays in one call).")
#: the RDP curve: the counts are host loops, sigma traces
_COUNTS_ON_HOST = HostDoor(
    "Pass steps_per_epoch, num_selected and num_epochs as concrete numbers or arrays; sigma "
    "may be traced.", params=("steps_per_epoch", "num_selected", "num_epochs"))


DEFAULT_METHODS = ("rdp_direct", "rdp_add", "direct_add", "decomposition", "local")
# Every name ``methods`` accepts (the last four are opt-in).
METHODS = DEFAULT_METHODS + ("pld", "decomposition_pld", "truncated_poisson", "recursive")
_ALL_METHODS = METHODS
_DEFAULT_MAX_ORDER = 256
# The keywords a method takes through ``method_options``, per quantity
# (each the keyword of that method's implementation in ``_bounds`` / ``_recursive``).
_OPTIONS = {
    ("decomposition", "epsilon"): ("orders",),
    ("decomposition", "delta"): ("orders",),
    ("decomposition_pld", "epsilon"): ("step",),
    ("truncated_poisson", "epsilon"): ("azuma", "split", "tail_fractions", "step"),
    ("truncated_poisson", "delta"): ("azuma", "tail_budgets", "step"),
    ("recursive", "epsilon"): ("bootstrap", "tail_fractions", "step"),
    ("recursive", "delta"): ("bootstrap", "eps_prime", "step"),
}


@host_door(_COUNTS_ON_HOST)
@per_epoch_steps
def allocation_rdp(*, sigma, steps_per_epoch, num_selected=1, num_epochs=1,
                   direction: str = "both", max_order: int = _DEFAULT_MAX_ORDER,
                   devices=None):
  r"""RDP curve at integer orders 2..max_order of k-of-t allocation over E epochs.

  Feldman & Shenfeld, arXiv:2502.08202v3: ``remove`` is m = kE times the
  exact 1-of-floor(t/k) remove RDP (Thm 4.8 + Lemma 3.2); ``add`` is m times
  the exact add-direction RDP of :func:`allocation_add_rdp` (quadrature);
  ``both`` is the elementwise max (an RDP curve valid for both directions).

  Args:
    sigma: > 0, any shape (broadcast with steps_per_epoch).
    steps_per_epoch: t >= 1 (scalar or array). num_selected: k in [1, t] (scalar).
    num_epochs: E >= 1 (scalar). direction: "remove", "add" or "both".
    max_order: largest integer order (static).
    devices: None (the default device), or jax devices or a
      ``jax.sharding.Mesh``: arrays run in blocks spread over them (values
      bitwise those of one device; :mod:`jaxacct.sweep` across hosts).

  Returns:
    (orders, rdp): orders ``2..max_order`` (float64 numpy) and rdp of shape
    ``broadcast(sigma, steps_per_epoch).shape + (max_order-1,)``.

  Bound: exact (remove; add to quadrature accuracy) given Lemma 3.2 for k > 1,
  i.e. an upper bound on the scheme.
  """
  bounds.check_scheme(sigma, steps_per_epoch, num_selected, num_epochs)
  checks.check_direction(direction)
  checks.check_int("max_order", max_order, min_value=2, max_value=4096, scalar=True)
  t, m = bounds.split_rounds(steps_per_epoch, num_selected, num_epochs)
  orders = np.arange(2, int(max_order) + 1, dtype=np.float64)
  with sharding.use_devices(devices):
    return orders, _rdp_curve(sigma, t, m, orders, direction, max_order)


def _rdp_curve(sigma, t, m, orders, direction, max_order):
  # one question: its (concrete) curves combined in NumPy, no compiled op
  xp = for_inputs(sigma, t, m).xp
  out = None
  if direction in ("remove", "both"):
    out = _times(allocation_remove_rdp(sigma=sigma, steps_per_epoch=t.astype(np.int64),
                                       max_order=max_order), m, xp)
  if direction in ("add", "both"):
    add = _times(allocation_add_rdp(orders, sigma=sigma, steps_per_epoch=t.astype(np.int64)), m, xp)
    out = add if out is None else xp.maximum(out, add)
  return out


def _times(rdp, m, xp):
  """``rdp * m`` per lane."""
  return xp.asarray(rdp) * xp.asarray(m)[..., None]


def _direction_rdp(sigma, t, k, E, d, max_order):
  """(orders, m * RDP) for one direction: remove on 2..max_order (integer
  orders only), add on ``DEFAULT_ORDERS`` (fractional orders and up to 1024;
  the add optimum sits at large alpha when t is large)."""
  if d == "remove":
    return allocation_rdp(sigma=sigma, steps_per_epoch=t, num_selected=k, num_epochs=E,
                          direction="remove", max_order=max_order)
  tr, m = bounds.split_rounds(t, k, E)
  # one question: the RDP curve comes to the host (no eager jnp op compiles)
  return DEFAULT_ORDERS, np.asarray(allocation_add_rdp(DEFAULT_ORDERS, sigma=sigma,
                                                       steps_per_epoch=int(tr))) * float(m)


def _check_methods(methods):
  return checks.check_choices("methods", methods, _ALL_METHODS)


def _check_scalar(**kw):
  checks.check_scalar("jaxacct.allocation.epsilon/delta",
                      "(use allocation_rdp, jaxacct.calibrate or allocation.pld for grids).",
                      **kw)


def _check_options(method_options, methods, quantity):
  """``{method: {keyword: value}}`` from ``method_options`` (validated: each
  method asked for in ``methods`` and each keyword one it takes)."""
  if method_options is None:
    return {}
  if not isinstance(method_options, dict):
    raise ValueError("method_options must be a dict {method: {keyword: value}} or None; "
                     f"got {method_options!r}.")
  takes = {m: kws for (m, q), kws in _OPTIONS.items() if q == quantity}
  out = {}
  for name, opts in method_options.items():
    if name not in takes or name not in methods:
      raise ValueError(f"method_options: {name!r} must be one of the methods asked for that "
                       f"take options in {quantity}, {sorted(set(takes) & set(methods))}.")
    if not isinstance(opts, dict) or not set(opts) <= set(takes[name]):
      raise ValueError(f"method_options[{name!r}] must be a dict with keys in "
                       f"{takes[name]}; got {opts!r}.")
    out[name] = dict(opts)
  return out


def _fresh(fresh_each_epoch):
  if not isinstance(fresh_each_epoch, (bool, np.bool_)):
    raise ValueError("fresh_each_epoch must be a bool (True: a new k-of-t draw every epoch; "
                     f"False: fixed bins); got {fresh_each_epoch!r}.")
  return bool(fresh_each_epoch)


def _fixed_sigma(sigma, num_epochs):
  return float(equivalent_sigma(sigma, num_epochs))


def _value(r):
  """The number of an EpsilonResult / DeltaResult (``epsilon`` / ``delta``), as a float."""
  return float(r.epsilon if isinstance(r, EpsilonResult) else r.delta)


def _pick(vals, dirs, methods):
  best = {}
  for d in dirs:
    if not vals[d]:
      raise ValueError(f"no method in {methods} bounds the {d} direction; "
                       "add 'local' (always valid).")
    name = min(vals[d], key=vals[d].get)
    best[d] = (name, vals[d][name])
  worst = max(best, key=lambda d: best[d][1])
  return best, worst


def _query(quantity, value, *, sigma, steps_per_epoch, num_selected, num_epochs, direction,
           methods, max_order, fresh_each_epoch, method_options=None):
  """The one query behind :func:`epsilon` and :func:`delta`.

  ``quantity`` is ``"epsilon"`` (``value`` is a delta) or ``"delta"``
  (``value`` is an epsilon). Per direction the minimum over the methods that
  apply, then the maximum over the directions.
  """
  is_eps = quantity == "epsilon"
  given = "delta" if is_eps else "epsilon"
  bounds.check_scheme(sigma, steps_per_epoch, num_selected, num_epochs)
  if is_eps:
    checks.check_delta(value)
  else:
    checks.check_range("epsilon", value)
  checks.check_direction(direction)
  checks.check_int("max_order", max_order, min_value=2, max_value=4096, scalar=True)
  _check_scalar(sigma=sigma, steps_per_epoch=steps_per_epoch, num_selected=num_selected,
                num_epochs=num_epochs, **{given: value})
  if not _fresh(fresh_each_epoch):
    front = epsilon if is_eps else delta
    r = front(sigma=_fixed_sigma(sigma, num_epochs), steps_per_epoch=steps_per_epoch,
              **{given: value}, num_selected=num_selected, num_epochs=1, direction=direction,
              methods=methods, max_order=max_order, method_options=method_options)
    return r._replace(method="fixed_bins:" + r.method)
  k, E, t = int(num_selected), int(num_epochs), int(steps_per_epoch)
  if methods is None:
    methods = DEFAULT_METHODS + (("pld",) if is_eps else ())
  methods = _check_methods(methods)
  opts = _check_options(method_options, methods, quantity)
  dirs = ("remove", "add") if direction == "both" else (direction,)
  vals = {d: {} for d in dirs}
  orders_won = {}
  arg = {given: value}                       # the given quantity, by name
  scheme = dict(num_selected=k, num_epochs=E)
  convert = rdp_to_epsilon_kernel if is_eps else rdp_to_delta_kernel
  for mth, d in (("rdp_direct", "remove"), ("rdp_add", "add")):
    if mth in methods and d in dirs:
      orders, rdp = _direction_rdp(sigma, t, k, E, d, max_order)
      with np.errstate(all="ignore"):   # the scalar question's conversion, in NumPy
        v, o = convert(np.asarray(orders), np.asarray(rdp), float(value), "tight", ns=HOST)
      vals[d][mth] = float(v)
      orders_won[mth] = float(o)
      if is_eps and float(o) >= orders[-1]:
        warnings.warn(f"{mth}: optimal Renyi order is the largest one tried ({max_order}); "
                      "increase max_order for a tighter bound.", stacklevel=user_stacklevel())
  if "direct_add" in methods and "add" in dirs:
    fn = bounds.direct_add_epsilon if is_eps else bounds.direct_add_delta
    vals["add"]["direct_add"] = _value(fn(sigma=sigma, steps_per_epoch=t, **arg, **scheme))
  if "decomposition" in methods and k == 1 and E == 1 and t >= 2:
    fn = bounds.decomposition_epsilon if is_eps else bounds.decomposition_delta
    for d in dirs:
      vals[d]["decomposition"] = _value(fn(sigma=sigma, steps_per_epoch=t, **arg, direction=d,
                                           **opts.get("decomposition", {})))
  if is_eps and "decomposition_pld" in methods and t // k >= 2:
    for d in dirs:
      vals[d]["decomposition_pld"] = float(bounds.decomposition_pld_epsilon(
          sigma=sigma, steps_per_epoch=t, delta=value, direction=d, **scheme,
          **opts.get("decomposition_pld", {})).epsilon)
  if "truncated_poisson" in methods:
    fn = recursive.truncated_poisson_epsilon if is_eps else recursive.truncated_poisson_delta
    for d in dirs:
      vals[d]["truncated_poisson"] = _value(fn(sigma=sigma, steps_per_epoch=t, **arg, **scheme,
                                               direction=d, **opts.get("truncated_poisson", {})))
  if "recursive" in methods and t // k >= 2 and (is_eps or value > 0):
    fn = recursive.recursive_epsilon if is_eps else recursive.recursive_delta
    for d in dirs:
      rec = {"bootstrap": ("pld", "direct"), **opts.get("recursive", {})}
      vals[d]["recursive"] = _value(fn(sigma=sigma, steps_per_epoch=t, **arg, **scheme, direction=d,
                                       **rec))
  if "local" in methods:
    if is_eps:
      loc = float(bounds.local_epsilon(sigma=sigma, delta=value, **scheme).epsilon)
    else:
      loc = float(gaussian_delta_kernel(float(sigma) / np.sqrt(k * E), float(value), ns=HOST))
    for d in dirs:
      vals[d]["local"] = loc
  if is_eps and "pld" in methods:
    try:   # one call answers both directions (their round laws are shared)
      r = apld.allocation_pld_epsilon(sigma=sigma, delta=value, steps_per_epoch=t,
                                     num_selected=k, num_epochs=E, direction=direction)
    except Exception as err:  # noqa: BLE001 -- peer engine unsupported case / failure:
      # skipping a method never invalidates the others (each is an upper bound).
      warnings.warn(f"allocation.pld skipped ({type(err).__name__}: {err})",
                    stacklevel=user_stacklevel())
    else:
      for d in dirs:
        vals[d]["pld"] = float(r.by_direction[d][0])
  best, worst = _pick(vals, dirs, methods)
  name = best[worst][0]
  answer = best[worst][1] if is_eps else min(best[worst][1], 1.0)
  cls = EpsilonResult if is_eps else DeltaResult
  return cls(**{quantity: answer, given: value},
             method="/".join(f"{d}:{best[d][0]}" for d in dirs), bound="upper",
             order=orders_won.get(name) if name in ("rdp_direct", "rdp_add") else None,
             details=vals)


@host_door(_ON_HOST)
@per_epoch_steps
def epsilon(*, sigma, steps_per_epoch, delta, num_selected=1, num_epochs=1,
            direction: str = "both", methods=None,
            max_order: int = _DEFAULT_MAX_ORDER,
            fresh_each_epoch: bool = True, method_options=None) -> EpsilonResult:
  """Epsilon upper bound at ``delta`` of k-out-of-t random allocation, Gaussian.

  Feldman & Shenfeld, arXiv:2502.08202v3 (methods in the module table): per
  direction the minimum over the methods, then the maximum over directions.

  Args:
    sigma: noise multiplier > 0 (scalar).
    steps_per_epoch: steps per epoch t >= 1. num_selected: k in [1, t].
    num_epochs: E >= 1. delta: in (0, 1).
    direction: "both" (default; the max), "remove" or "add".
    methods: subset of ("rdp_direct", "rdp_add", "direct_add",
      "decomposition", "local", "pld", "decomposition_pld",
      "truncated_poisson", "recursive"); default: the first five, plus
      "pld" when ``jaxacct.allocation.pld`` is available (the last three are
      opt-in: each builds FFT-composed Poisson PLDs, seconds per call).
    max_order: largest integer Renyi order for the RDP methods.
    fresh_each_epoch: True (default): a new k-of-t set per example every
      epoch (``jaxacct.sampling.BallsInBinsSampler``). False: fixed bins,
      the set drawn once and reused every epoch (jax_privacy 2.0
      ``BallsInBinsSampling(iterations=t*E, cycle_length=t)``); accounted
      exactly as one epoch at sigma / sqrt(E)
      (:func:`jaxacct.allocation.fixed_bins_pld_epsilon`), ``method`` then starts with
      ``"fixed_bins:"``.
    method_options: None (default) or ``{method: {keyword: value}}`` for the
      methods that take knobs (each one asked for in ``methods``):
      "decomposition" ``orders``; "decomposition_pld" ``step`` (PLD grid
      step); "truncated_poisson" ``azuma`` ("sinh", default, or "cosh" as
      printed), ``split`` ("optimized", default, or "authors": their code's
      0.99 / 0.005 / 0.005 split), ``tail_fractions`` (fractions of delta
      spent outside the Poisson part, default (0.5, 0.9, 0.99)), ``step``;
      "recursive" ``bootstrap`` (add-profile bounds of one round, any of
      "pld", "direct", "decomposition"; default ("pld", "direct")),
      ``tail_fractions`` (default (0.5, 0.1, 0.01)), ``step``.

  Returns:
    EpsilonResult(epsilon, delta, method, bound="upper", order, details):
    ``method`` is "remove:<winner>/add:<winner>", ``order`` the Renyi order
    when an RDP method won in the binding direction, ``details`` every
    method's epsilon per direction.

  Bound: upper (every method is a valid upper bound for the dominating pair
  of the Gaussian mechanism with sensitivity 1).
  """
  return _query("epsilon", delta, sigma=sigma, steps_per_epoch=steps_per_epoch,
                num_selected=num_selected, num_epochs=num_epochs, direction=direction,
                methods=methods, max_order=max_order, fresh_each_epoch=fresh_each_epoch,
                method_options=method_options)


@host_door(_ON_HOST)
@per_epoch_steps
def delta(*, sigma, steps_per_epoch, epsilon, num_selected=1, num_epochs=1,
          direction: str = "both", methods=None,
          max_order: int = _DEFAULT_MAX_ORDER,
          fresh_each_epoch: bool = True, method_options=None) -> DeltaResult:
  """Delta upper bound at ``epsilon`` of k-out-of-t random allocation, Gaussian.

  Same methods and rules as :func:`epsilon` ("pld" and
  "decomposition_pld" are ignored here: epsilon-only; "truncated_poisson"
  and "recursive" are opt-in). Args as there (``fresh_each_epoch`` too),
  with ``epsilon`` a real scalar; ``method_options`` as there, except
  "truncated_poisson" takes ``tail_budgets`` (delta budgets b = m(t' delta0
  + delta''), default 10^{-4..-16}) instead of ``split`` / ``tail_fractions``
  and "recursive" ``eps_prime`` (candidate eps', default epsilon x (1/2, 1,
  2, 4)) instead of ``tail_fractions``.

  Returns:
    DeltaResult(delta, epsilon, method, bound="upper", order, details).

  Bound: upper.
  """
  return _query("delta", epsilon, sigma=sigma, steps_per_epoch=steps_per_epoch,
                num_selected=num_selected, num_epochs=num_epochs, direction=direction,
                methods=methods, max_order=max_order, fresh_each_epoch=fresh_each_epoch,
                method_options=method_options)
