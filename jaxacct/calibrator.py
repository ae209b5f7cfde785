r"""The one calibrator: the parameter of an event family that meets (epsilon, delta).

:func:`calibrate` is the spine of every calibration in jaxacct (noise
multiplier, epochs, steps, sampling rate, batch size...): ``make_event(x)``
maps the parameter to a DpEvent (:mod:`jaxacct.accounting.events`), and the
calibrator finds, per (epsilon, delta) target, the least private ``x`` whose
certified upper epsilon meets the target.
:func:`jaxacct.dpsgd.calibrate_noise_multiplier` is a thin adapter over it
(schedule -> :func:`jaxacct.dpsgd.event` -> :func:`calibrate`);
:func:`jaxacct.risk.calibrate_noise_multiplier` (TPR / advantage targets, not
epsilon) drives the same host solver.

Proofs and sources: docs/bounds/numerics.md ("Bounds and proofs /
Numerics").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Optional

import numpy as np

from jaxacct import poisson
from jaxacct._core import checks, sharding
from jaxacct._core import progress as _progress
from jaxacct._core.dtype import HostDoor, OUTSIDE_JIT, host_door, public_surface
from jaxacct._core.lazy import LazyModule
from jaxacct._core.progress import check_progress_arg
from jaxacct._core.solve import largest_feasible_int_host, search_decreasing_host
# the evaluator's doors (tests/test_calibrate counts and spies on them as calibrator's)
from jaxacct.accounting.evaluator import (accountant_for, allocation_upper, gaussian_upper,
                                          is_host, min_no_amplification, poisson_run)

#: a calibration is a host root search over lanes
CALIBRATE_ON_HOST = HostDoor(f"{OUTSIDE_JIT}: it is a host root search; it takes an array of "
                             "targets (one lane each).")


if TYPE_CHECKING:
  from jaxacct._core import events
else:   # imported at the first lane: dp_accounting (when installed) comes with the events
  events = LazyModule("jaxacct._core.events")

# ``calibrate`` is public at the top level (``jaxacct.calibrate``), its one place
__all__ = ["upper_epsilon"]

SAFETY = 1e-10    # feasible means upper epsilon <= target * (1 - SAFETY)


# ---------------------------------------------------------------------------
# the families: one lane = one event, grouped by family and static key
# ---------------------------------------------------------------------------

def lane(event):
  """``(family, key, sigma)`` of an event: the vectorised door that evaluates it.

  ``family`` is ``"allocation"`` (key ``(t, k, E)``; Gaussian noise),
  ``"poisson"`` (key ``(q, num_steps)``), ``"gaussian"`` (key ``()``, ``sigma``
  the effective single-step noise sigma / sqrt(n)) or ``"accountant"`` (key:
  the lane's own event; ``sigma`` None): :func:`jaxacct._core.events.family`,
  the one table of event kinds.
  """
  f = events.family(event)
  if f.name == "allocation" and isinstance(f.mechanism, str) and f.mechanism == "gaussian":
    return "allocation", f.key, f.sigma
  if f.name in ("poisson", "gaussian"):
    return f.name, f.key, f.sigma
  return "accountant", event, None


def _family_upper(family, key, sigma, delta, events, host=None):
  """Upper epsilons of one family's lanes; ``host``: the question's host-or-jit
  choice, made once by the caller (:func:`jaxacct.accounting.evaluator.is_host`;
  None: these lanes'). The host doors answer one lane, so more lanes run jitted."""
  host = is_host(sigma, delta) if host is None else (bool(host) and sigma.size == 1)
  if family == "allocation":
    t, k, E = key
    up = allocation_upper(sigma, delta, t, k, E, host)
    return min_no_amplification(up, sigma, delta, k * E, host=host)[0]
  if family == "poisson":
    return poisson_run(sigma, delta, *key, host=host)[0]
  if family == "gaussian":
    return gaussian_upper(sigma, delta, host)
  # the accountant loads on first use (it brings dp_accounting)
  return np.array([accountant_for(e).get_epsilon(float(d)) for e, d in zip(events, delta)])


ACCOUNTANTS = ("pld", "rdp")


def upper_epsilon(events, delta, *, accountant: str = "pld") -> np.ndarray:
  """Certified upper epsilon of each event at its delta (what :func:`calibrate` meets).

  Args:
    events: a sequence of DpEvents (the lanes).
    delta: in (0, 1); scalar or one per event.
    accountant: ``"pld"`` (the doors of the module table; the accountant's
      epsilon) or ``"rdp"`` (Poisson-subsampled and plain Gaussian events
      only: ``poisson.epsilon(method="rdp")``, all lanes in one compiled
      call; looser, much faster for many targets).

  Returns:
    float64 numpy array, one epsilon per event: the family's door (module
    table), lanes of one family and key evaluated together.

  Bound: upper.
  """
  events = list(events)
  checks.check_delta(delta)
  checks.check_choice("accountant", accountant, ACCOUNTANTS)
  d = np.broadcast_to(np.asarray(delta, np.float64), (len(events),))
  return _upper(events, d, accountant, host=is_host(d, None))


def _rdp_upper(lanes, d):
  """``poisson.epsilon(method="rdp")`` of Poisson / Gaussian lanes, one call."""
  if any(f not in ("poisson", "gaussian") for f, _, _ in lanes):
    raise ValueError("accountant='rdp' takes Poisson-subsampled or plain Gaussian events "
                     "only; use accountant='pld' for the others.")
  q = np.array([k[0] if f == "poisson" else 1.0 for f, k, _ in lanes])
  T = np.array([k[1] if f == "poisson" else 1 for f, k, _ in lanes], np.float64)
  sig = np.array([s for _, _, s in lanes])
  return np.asarray(poisson.epsilon(q=q, sigma=sig, num_steps=T, delta=d).epsilon, np.float64)


def _upper(events, d, accountant="pld", host=None):
  lanes = [lane(e) for e in events]
  if accountant == "rdp":
    return _rdp_upper(lanes, d)
  groups = {}
  for i, (fam, key, _) in enumerate(lanes):
    groups.setdefault((fam, key if fam != "accountant" else i), []).append(i)
  out = np.empty(len(events))
  for (fam, key), idx in groups.items():
    idx = np.asarray(idx)
    sig = np.array([lanes[i][2] or 0.0 for i in idx], np.float64)
    out[idx] = _family_upper(fam, key, sig, d[idx].copy(), [events[i] for i in idx], host)
  return out


# ---------------------------------------------------------------------------
# the Gaussian-DP (CLT) model of a noise-scale family: the search's start
# ---------------------------------------------------------------------------

def _rounds(family, key):
  """[(count c_i, 1/rate f_i)]: mu^2 = sum c_i min((e^{1/s^2} - 1) / f_i, 1 / s^2)."""
  if family == "allocation":
    t, k, E = key
    f, rho = divmod(t, k)
    return [((k - rho) * E, f), (rho * E, f + 1)]
  if family == "poisson":
    q, T = key
    return [(T, 1.0 / q)]
  return [(1, 1.0)]


def _mu2(s, rounds):
  with np.errstate(over="ignore"):
    return sum(c * np.minimum(np.expm1(1.0 / s**2) / f, 1.0 / s**2) for c, f in rounds if c)


def _bisect_log(f, lo, hi, iters=64):
  """x in [lo, hi] (log scale, vectorised) with f(x) changing sign from <= 0 to > 0."""
  a, b = np.log(lo), np.log(hi)
  for _ in range(iters):
    m = 0.5 * (a + b)
    up = f(np.exp(m)) > 0
    a, b = np.where(up, a, m), np.where(up, m, b)
  return np.exp(0.5 * (a + b))


def _log_delta_excess(eps, mu, delta):
  """log delta(eps; mu-GDP) - log delta (Dong, Roth & Su, Cor. 2.13)."""
  from scipy.special import log_ndtr
  la, lb = log_ndtr(-eps / mu + mu / 2), log_ndtr(-eps / mu - mu / 2)
  with np.errstate(divide="ignore", invalid="ignore"):
    return la + np.log(-np.expm1(np.minimum(eps + lb - la, 0.0))) - np.log(delta)


def _model_sigma(eps, delta, rounds):
  mu = _bisect_log(lambda m: _log_delta_excess(eps, m, delta), np.full(eps.shape, 1e-8),
                   np.full(eps.shape, 1e3))
  return _bisect_log(lambda s: mu**2 - _mu2(s, rounds), np.full(eps.shape, 1e-3),
                     np.full(eps.shape, 1e6))


def _model_eps(sigma, delta, rounds):
  mu = np.sqrt(_mu2(sigma, rounds))
  hi = mu**2 / 2 + mu * np.sqrt(2 * np.log(1 / delta)) + 1.0
  return _bisect_log(lambda e: -_log_delta_excess(e, mu, delta),
                     np.full(np.shape(mu), 1e-12), hi)


def _noise_scale(make_event, lo, hi):
  """``(family, key, c)`` when ``make_event(x)`` is one family with sigma = c x, else None."""
  (fa, ka, sa), (fb, kb, sb) = lane(make_event(lo)), lane(make_event(hi))
  if fa != fb or fa == "accountant" or ka != kb or not sa or not sb:
    return None
  c = sa / lo
  return (fa, ka, c) if math.isclose(sb / hi, c, rel_tol=1e-9) else None


_MAX_ROUNDS = 8   # then search_decreasing_host goes on from the points evaluated
_K_SECANT = 3.0   # error of a secant root ~ K |u1 - u*| |u2 - u*| (log-log, measured <= 1)


def _predict(U, G, k):
  """Root of g(u) per lane from the evaluated points ``U``, ``G`` (rows =
  rounds): inverse quadratic through the 3 finite points nearest the root
  when it lands between the nearest feasible and infeasible ones, else
  secant through the nearest 2. Returns ``(root, error estimate)``."""
  m = U.shape[1]
  cols = np.arange(m)
  fin = np.isfinite(G)
  order = np.argsort(np.where(fin, np.abs(G), np.inf), axis=0)
  u1, g1 = U[order[0], cols], G[order[0], cols]
  u2, g2 = U[order[1], cols], G[order[1], cols]
  with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
    sec = u1 - g1 * (u2 - u1) / (g2 - g1)
    root = sec
    if k >= 3:
      u3, g3 = U[order[2], cols], G[order[2], cols]
      iqi = (u1 * g2 * g3 / ((g1 - g2) * (g1 - g3)) + u2 * g1 * g3 / ((g2 - g1) * (g2 - g3))
             + u3 * g1 * g2 / ((g3 - g1) * (g3 - g2)))
      good = np.isfinite(iqi) & np.isfinite(g3) & (np.abs(iqi - sec) < np.abs(sec - u1) + 1e-12)
      root = np.where(good, iqi, sec)
    err = _K_SECANT * np.abs((u1 - root) * (u2 - root))
  ok = np.isfinite(root) & np.isfinite(g1) & np.isfinite(g2) & (np.abs(g2 - g1) > 0)
  return np.where(ok, root, np.nan), np.where(ok, err, np.inf)


def _model_search(scale, upper, target, d, lo, hi, rtol):
  """Points ``(xs, ups)`` that bracket each lane's root to ``rtol`` in few evaluations.

  Round 1 evaluates the Gaussian-DP (CLT) model's root (free: NumPy); round
  2 the model's root rescaled by the measured ratio; later rounds inverse
  quadratic / secant interpolation of log epsilon against log x (nearly
  linear: the root is within ~1e-5 relative once two points lie within a
  few per cent). Each probe is placed so that it can close the bracket:
  ``lo + L`` where the evaluated-infeasible ``lo`` is within ``L`` (=
  log(1 + rtol) less 2 %) of the predicted root, ``hi - L`` where the
  evaluated-feasible ``hi`` is, else the root moved ``L / 2`` towards the
  missing side once its error estimate is below ``L / 2``, else the root.
  Nothing here is assumed: the points are only evaluations, and
  :func:`jaxacct._core.solve.search_decreasing_host` takes them as
  ``known`` (it returns at once where they bracket to ``rtol``, else goes
  on with bracketing and secant steps). Lanes whose bracket is closed are
  not evaluated again.
  """
  fam, key, c = scale
  rounds = _rounds(fam, key)
  m = target.size
  ulo, uhi = math.log(lo * c), math.log(hi * c)
  L0 = math.log1p(rtol)
  L = L0 * 0.98
  lt = np.log(target)
  # a hair (1e-9) above the model's root: where the model is exact (one Gaussian
  # step), the first probe then lies on the feasible side of the round-off
  u = np.log(np.clip(_model_sigma(target, d, rounds) * (1.0 + 1e-9), lo * c, hi * c))
  U, G, A = np.empty((0, m)), np.empty((0, m)), np.empty((0, m))
  open_ = np.arange(m)
  for k in range(1, _MAX_ROUNDS + 1):
    a = A[-1].copy() if k > 1 else np.zeros(m)
    a[open_] = upper(np.exp(u[open_]) / c, open_)   # closed lanes repeat their last point
    ok = np.isfinite(a) & (a > 0)
    U, A = np.vstack([U, u]), np.vstack([A, a])
    G = np.vstack([G, np.where(ok, np.log(np.where(ok, a, 1.0)) - lt, np.inf)])
    feas = G <= 0
    hi_u = np.where(feas, U, np.inf).min(0)
    lo_u = np.where(~feas, U, -np.inf).max(0)
    done = ((hi_u - lo_u <= L0 * (1 + 1e-9)) | (hi_u <= ulo + 1e-12)   # closed / at the floor
            | (lo_u >= uhi - 1e-12))                                   # unmet: the solver says so
    open_ = np.flatnonzero(~done)
    if not open_.size or k == _MAX_ROUNDS:
      break
    if k == 1:   # the model rescaled by the measured ratio
      r = np.where(ok, a / np.maximum(_model_eps(np.exp(u), d, rounds), 1e-300), 1.0)
      pred = np.log(np.clip(_model_sigma(target / r, d, rounds), lo * c, hi * c))
      err = np.where(ok, 0.3 * np.abs(pred - u), np.inf)
      pred = np.where(ok, pred, u + math.log(2.0))
    else:
      pred, err = _predict(U, G, k)
      mid = np.where(np.isfinite(lo_u) & np.isfinite(hi_u), 0.5 * (lo_u + hi_u),
                     np.where(np.isfinite(hi_u), hi_u - math.log(2.0), lo_u + math.log(2.0)))
      inside = np.isfinite(pred) & (pred > lo_u) & (pred < hi_u)
      pred, err = np.where(inside, pred, mid), np.where(inside, err, np.inf)
    safe = err + 0.02 * L
    close_lo = np.isfinite(lo_u) & (pred - lo_u <= L - safe)
    close_hi = np.isfinite(hi_u) & (hi_u - pred <= L - safe)
    side = np.where(np.isfinite(hi_u), -1.0, 1.0)
    nu = np.where(close_lo, lo_u + L, np.where(close_hi, hi_u - L,
                  np.where(err <= L / 2, pred + side * L / 2, pred)))
    u = u.copy()
    u[open_] = np.clip(nu, ulo, uhi)[open_]
  return np.exp(U) / c, A


# ---------------------------------------------------------------------------
# the calibrator
# ---------------------------------------------------------------------------

@host_door(CALIBRATE_ON_HOST)
def calibrate(make_event: Callable, target_epsilon, delta, *, bracket, discrete: bool = False,
              increasing: Optional[bool] = None, rtol: float = 1e-3, name: str = "x",
              accountant: str = "pld", progress: Optional[bool] = None, devices=None):
  """The least private parameter ``x`` whose event meets each (epsilon, delta) target.

  Args:
    make_event: ``x -> DpEvent`` (:mod:`jaxacct.accounting.events`; e.g.
      ``lambda s: jaxacct.dpsgd.event(noise_multiplier=s, ...)``). Called
      once per lane and evaluation (cheap: events only describe).
    target_epsilon: target(s) > 0; array broadcast with ``delta``.
    delta: in (0, 1).
    bracket: ``(lo, hi)``, the range searched; ``0 < lo < hi`` (continuous)
      or integers ``lo < hi`` (``discrete``).
    discrete: ``x`` is an integer (epochs, steps, batch size).
    increasing: whether epsilon increases with ``x`` (epochs, steps, rate;
      the largest feasible ``x`` is returned) or decreases (a noise scale;
      the smallest); None: known for a noise scale, else read from one
      evaluation at each bracket end.
    rtol: relative tolerance on ``x`` (continuous), in (0, 0.1].
    name: the parameter's name in error messages.
    accountant: ``"pld"`` (default: tight, the accountant's epsilon) or
      ``"rdp"`` (Poisson / Gaussian events; see :func:`upper_epsilon`).
    progress: None (global switch), True or False.
    devices: None (the default device), or jax devices or a
      ``jax.sharding.Mesh``: each evaluation's lanes run on them (the array
      doors' ``devices=``); the result is that of one device.

  Returns:
    float or int (scalar targets), else a numpy array of the broadcast shape:
    ``x`` with ``upper_epsilon(make_event(x)) <= target`` (evaluated), and
    ``x`` moved by a factor ``1 + rtol`` (by 1 when ``discrete``) towards
    less privacy evaluated infeasible, unless ``x`` is that bracket end.

  Raises:
    ValueError: invalid input (naming the parameter), or a target not met
      anywhere in the bracket (naming it).

  Bound: upper (the returned ``x`` is certified sufficient; conservative).
  """
  if not callable(make_event):
    raise ValueError(f"make_event must be a callable x -> DpEvent; got {make_event!r}.")
  check_progress_arg(progress)
  checks.check_positive("target_epsilon", target_epsilon)
  checks.check_delta(delta)
  checks.check_bool("discrete", discrete)
  if increasing is not None:
    checks.check_bool("increasing", increasing)
  checks.check_range("rtol", rtol, 0.0, 0.1, lo_open=True)
  checks.check_choice("accountant", accountant, ACCOUNTANTS)
  if isinstance(name, bytes) or not isinstance(name, str):
    raise ValueError(f"name must be a str; got {name!r}.")
  checks.check_bracket("bracket", bracket, lo=-np.inf if discrete else 0.0)
  with sharding.use_devices(devices):   # every evaluation's block programs on them
    return _calibrate(make_event, target_epsilon, delta, bracket, discrete, increasing, rtol,
                      name, accountant, progress)


def _calibrate(make_event, target_epsilon, delta, bracket, discrete, increasing, rtol, name,
               accountant, progress):
  lo, hi = (float(v) for v in bracket)
  if discrete and not (lo.is_integer() and hi.is_integer()):
    raise ValueError(f"bracket must hold integers with discrete=True; got {bracket!r}.")
  e, d = np.broadcast_arrays(np.asarray(target_epsilon, np.float64),
                             np.asarray(delta, np.float64))
  shape, e, d = e.shape, e.ravel().copy(), d.ravel().copy()
  target = e * (1.0 - SAFETY)
  m = e.size
  host = is_host(e, d)   # the host-or-jit choice of this question, made once, passed down
  scale = None if discrete else _noise_scale(make_event, lo, hi)
  # all lanes each evaluation where one call takes them all (one family and key
  # at every x, or the RDP door): one compiled shape
  batched = scale is not None or accountant == "rdp"
  desc = f"jaxacct.calibrate: calibrating {name} ({m} target{'s' if m > 1 else ''})"
  with _progress.progress(total=None, desc=desc, enabled=progress) as bar:
    park = np.full(m, math.sqrt(lo * hi) if lo > 0 else 0.5 * (lo + hi))

    def upper(xs, idx=None):   # upper epsilons of the lanes idx (default all) at xs
      idx = np.arange(m) if idx is None else np.asarray(idx)
      xs = np.broadcast_to(np.asarray(xs, np.float64), idx.shape)
      park[idx] = xs
      sel = None
      if batched and idx.size < m:   # all lanes each time: one compiled shape
        xs, sel, idx = park.copy(), idx, np.arange(m)
      evs = [make_event(int(x) if discrete else float(x)) for x in xs]
      out = _upper(evs, d[idx], accountant, host)
      bar.update(1)
      return out if sel is None else out[sel]

    known = None
    if increasing is None:
      if scale is not None:
        increasing = False
      else:
        u_lo, u_hi = upper(np.full(m, lo)), upper(np.full(m, hi))
        if np.all(u_lo >= u_hi) and np.any(u_lo > u_hi):
          increasing = False
        elif np.all(u_lo <= u_hi) and np.any(u_lo < u_hi):
          increasing = True
        else:
          raise ValueError(f"cannot tell from the bracket ends whether epsilon increases "
                           f"with {name} (epsilon {u_lo[0]:g} at {lo:g}, {u_hi[0]:g} at "
                           f"{hi:g}); pass increasing=True or False.")
        known = (np.array([np.full(m, lo), np.full(m, hi)]), np.array([u_lo, u_hi]))
    unmet = ValueError(f"no {name} in [{lo:g}, {hi:g}] meets epsilon <= {float(np.min(e)):g} "
                       f"at delta={float(np.min(d)):g}; widen the bracket or relax the target.")
    if discrete:
      try:
        out = _search_int(upper, target, lo, hi, increasing, name)
      except ValueError as err:   # the solver's own message names the range as searched
        if not str(err).startswith(f"no {name} in"):
          raise
        raise unmet from None
      out = out.astype(np.int64).reshape(shape)
      return int(out) if out.ndim == 0 else out
    if increasing:   # y = 1 / x: epsilon decreases in y
      fn = lambda y, idx: upper(1.0 / y, idx)
      bounds = (1.0 / hi, 1.0 / lo)
      known = None if known is None else (1.0 / known[0], known[1])
      hint = np.full(m, 1.0 / math.sqrt(lo * hi))
    else:
      fn, bounds = upper, (lo, hi)
      hint = np.full(m, math.sqrt(lo * hi))
      if scale is not None:
        known = _model_search(scale, upper, target, d, lo, hi, float(rtol))
        hint = known[0][-1]
    try:
      y = search_decreasing_host(fn, target, hint, tight_hint=False, rtol=float(rtol),
                                 bounds=bounds, name=name, bar=bar, known=known)
    except ValueError as err:   # (in 1/x when increasing): restated in x
      if not str(err).startswith(f"no {name} in"):
        raise
      raise unmet from None
  x = (1.0 / y if increasing else y).reshape(shape)
  return float(x) if x.ndim == 0 else x


def _search_int(upper, target, lo, hi, increasing, name):
  """Integer search: the largest (increasing) or smallest feasible integer per lane."""
  sgn = 1 if increasing else -1
  a, b = (int(lo), int(hi)) if increasing else (-int(hi), -int(lo))

  def feasible(ns, idx):   # in n' = sgn x: feasible for small n'
    return upper(sgn * np.asarray(ns, np.float64), idx) <= target[idx]

  return sgn * largest_feasible_int_host(feasible, a, b, target.size, name=name,
                                         target="its epsilon target")

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
