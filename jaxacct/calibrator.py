r"""The one calibrator: the parameter of an event family that meets (epsilon, delta).

``make_event(x)`` maps the parameter to a DpEvent; :func:`calibrate` finds, per
(epsilon, delta) target, the least private ``x`` whose certified upper epsilon (the
evaluator's, :func:`jaxacct.accounting.evaluator.bracket`) meets the target. Proofs
and sources: docs/bounds/numerics.md.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from jaxacct._core import checks, sharding
from jaxacct._core import progress as _progress
from jaxacct._core.dtype import HostDoor, OUTSIDE_JIT, host_door, public_surface
from jaxacct._core.progress import check_progress_arg
from jaxacct._core import clt
from jaxacct._core.solve import (largest_feasible_int_host, predict_root,
                                 search_decreasing_host)
from jaxacct.accounting import evaluator

#: a calibration is a host root search over lanes
CALIBRATE_ON_HOST = HostDoor(f"{OUTSIDE_JIT}: it is a host root search; it takes an array of "
                             "targets (one lane each).")


# ``calibrate`` is public at the top level (``jaxacct.calibrate``), its one place
__all__ = ["upper_epsilon"]

SAFETY = 1e-10    # feasible means upper epsilon <= target * (1 - SAFETY)
ACCOUNTANTS = ("pld", "rdp")


def upper_epsilon(events, delta, *, accountant: str = "pld") -> np.ndarray:
  """Certified upper epsilon of each event at its delta (what :func:`calibrate` meets).

  Args:
    events: a sequence of DpEvents (the lanes).
    delta: in (0, 1); scalar or one per event.
    accountant: ``"pld"`` (the evaluator's bracket,
      :func:`jaxacct.accounting.evaluator.bracket`: the accountant's epsilon) or
      ``"rdp"`` (Poisson-subsampled and plain Gaussian events only, all lanes in
      one compiled call; looser, much faster for many targets).

  Returns:
    float64 numpy array, one epsilon per event.

  Bound: upper.
  """
  events = list(events)
  checks.check_delta(delta)
  checks.check_choice("accountant", accountant, ACCOUNTANTS)
  d = np.broadcast_to(np.asarray(delta, np.float64), (len(events),))
  return evaluator.upper(events, d, accountant=accountant, host=evaluator.is_host(d, None))


def _noise_scale(make_event, lo, hi):
  """``(family, key, c)`` when ``make_event(x)`` is one desk's lanes with sigma = c x."""
  a, b = evaluator.noise_scale(make_event(lo)), evaluator.noise_scale(make_event(hi))
  if a is None or b is None or a[:2] != b[:2] or not a[2] or not b[2]:
    return None
  c = a[2] / lo
  return (a[0], a[1], c) if math.isclose(b[2] / hi, c, rel_tol=1e-9) else None


_MAX_ROUNDS = 8   # then search_decreasing_host goes on from the points evaluated
_K_SECANT = 3.0   # error of a secant root ~ K |u1 - u*| |u2 - u*| (log-log, measured <= 1)


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
  rounds = evaluator.clt_rounds(fam, key)
  m = target.size
  ulo, uhi = math.log(lo * c), math.log(hi * c)
  L0 = math.log1p(rtol)
  L = L0 * 0.98
  lt = np.log(target)
  # a hair (1e-9) above the model's root: where the model is exact (one Gaussian
  # step), the first probe then lies on the feasible side of the round-off
  u = np.log(np.clip(clt.model_sigma(target, d, rounds) * (1.0 + 1e-9), lo * c, hi * c))
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
      r = np.where(ok, a / np.maximum(clt.model_eps(np.exp(u), d, rounds), 1e-300), 1.0)
      pred = np.log(np.clip(clt.model_sigma(target / r, d, rounds), lo * c, hi * c))
      err = np.where(ok, 0.3 * np.abs(pred - u), np.inf)
      pred = np.where(ok, pred, u + math.log(2.0))
    else:
      pred, err = predict_root(U, G, k, _K_SECANT)
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
    less privacy evaluated infeasible, unless ``x`` is that bracket end. An
    ``x`` the PLD refuses (a noise multiplier too small for its grid, or too
    many steps at it) counts as infeasible: the result is then the least
    private ``x`` it certifies.

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
  host = evaluator.is_host(e, d)   # the host-or-jit choice of this question, made once
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
      out = evaluator.upper(evs, d[idx], accountant=accountant, host=host, refused=np.inf)
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
