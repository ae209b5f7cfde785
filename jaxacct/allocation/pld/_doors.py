"""The allocation PLD's public doors (re-exported by :mod:`jaxacct.allocation.pld`):
validation, lanes (host or jitted program) and the epsilon/delta/PLD queries.

Proofs and sources: docs/bounds/allocation_pld.md.
"""

from __future__ import annotations

import copy

import jax
import numpy as np

from jaxacct._core.batching import layout, padded_lanes
from jaxacct._core import checks, sharding
from jaxacct._core.dtype import OUTSIDE_JIT, HostDoor, host_door
from jaxacct._core.lazy import LazyModule
from jaxacct._core.namespace import for_inputs
from jaxacct._core.progress import progress
from jaxacct._core.results import DeltaResult, EpsilonResult
from jaxacct._core.units import per_epoch_steps
from jaxacct.allocation.pld import _compose as cp
from jaxacct.allocation.pld import _query as qy
from jaxacct.allocation.pld._query import SWEEP_BRACKET, SWEEP_TILTS, sweep_size
from jaxacct.allocation.pld._export import AllocationPLDs, composed_plds
from jaxacct.allocation.pld._input import (OneStep, lower_one_step, pld_final_laws,
                                           pld_mechanism_laws, upper_one_step)
from jaxacct.allocation.pld._laws import (DEFAULT_GRID_SIZE, DEFAULT_TAIL, TAIL_FACTOR,
                                          FinalLaws, delta_one, final_laws,
                                          laws_batch)

#: what a caller inside jit/vmap uses instead of the allocation PLD (an upper bound)
RDP_INSTEAD = ("inside jit/vmap use the jittable RDP curve "
               "jaxacct.allocation.allocation_rdp (sigma may be traced) with "
               "jaxacct.mechanisms.rdp_to_epsilon or jaxacct.mechanisms.rdp_to_delta")
_ON_HOST = HostDoor(
    f"{OUTSIDE_JIT}: it takes arrays (sigma, steps_per_epoch, num_selected, num_epochs and "
    "the target broadcast) and runs its own jitted programs, one call for a whole sweep; "
    f"{RDP_INSTEAD} (an upper bound), or the jittable laws "
    "jaxacct.allocation.pld.allocation_pld_laws.")


#: the event types, loaded when an event is answered (they bring dp_accounting)
_events = LazyModule("jaxacct._core.events")

DEFAULT_COMPOSITION_SIZE = cp.DEFAULT_SIZE
TAU_FACTOR = 1e-7       # composition window tail (eps queries): TAU_FACTOR * delta
DELTA_TAU = 1e-22       # composition window tail for delta(eps) queries
_MAX_COUNT = 1 << 20    # k * E (composed rounds) at most


# ----------------------------------------------------------------------------
# validation and lanes
# ----------------------------------------------------------------------------

def _check_common(sigma, steps_per_epoch, num_selected, num_epochs, direction, grid_size,
                  mechanism, composition_size):
  """Validates the shared arguments; returns the PLD mechanism's one-step laws
  (None for "gaussian"/"laplace")."""
  laws = None
  if isinstance(mechanism, str):
    checks.check_choice("mechanism", mechanism, ("gaussian", "laplace"))
    if sigma is None:
      raise ValueError(f"sigma is required for mechanism={mechanism!r}.")
    checks.check_sigma("sigma", sigma)
  else:
    if sigma is not None:
      raise ValueError("sigma must be None when the mechanism is given as a PLD.")
    laws = pld_mechanism_laws(mechanism)
  checks.check_int("steps_per_epoch", steps_per_epoch, min_value=1, max_value=2**30)
  checks.check_int("num_selected", num_selected, min_value=1, max_value=2**30)
  checks.check_int("num_epochs", num_epochs, min_value=1, max_value=_MAX_COUNT)
  checks.check_direction(direction)
  _check_static_int("grid_size", grid_size, 16)
  cs = composition_size
  if cs is None:
    return laws
  _check_static_int("composition_size", cs, 256)
  if int(cs) & (int(cs) - 1):
    raise ValueError(f"composition_size must be a power of two >= 256; got {cs!r}.")
  return laws


def _check_static_int(name, v, lo):
  if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < lo:
    raise ValueError(f"{name} must be an int >= {lo}; got {v!r}.")


def _check_tail(tail):
  if tail is not None:
    checks.check_range("tail", tail, 0.0, 1.0, lo_open=True, hi_open=True)


class _Lanes:
  """Broadcast, flattened, padded lanes of one front-door call (``batching.padded_lanes``)."""

  def __init__(self, sigma, steps_per_epoch, num_selected, num_epochs, query):
    # the host-or-jitted choice, once (NumPy laws and composition: no program)
    self.ns = for_inputs(sigma, steps_per_epoch, num_selected, num_epochs, query,
                         max_lanes=HOST_LANES)
    arrs = np.broadcast_arrays(np.asarray(0.0 if sigma is None else sigma, np.float64),
                               np.asarray(steps_per_epoch), np.asarray(num_selected),
                               np.asarray(num_epochs), np.asarray(query, np.float64))
    self.shape = arrs[0].shape
    self.size = arrs[0].size
    b = padded_lanes(self.size, qy.sweep_chunk(), host=self.ns.is_host)
    pad = lambda a: np.concatenate([a.ravel(), np.repeat(a.ravel()[-1:], b - self.size)])
    s, t, k, e, value = (pad(a) for a in arrs)
    t, k, e = (np.round(a).astype(np.int64) for a in (t, k, e))
    if np.any(k > t):
      i = int(np.argmax(k > t))
      raise ValueError(f"num_selected must be <= steps_per_epoch; got {k[i]} > {t[i]}.")
    if np.any(k * e > _MAX_COUNT):
      raise ValueError(f"num_selected * num_epochs must be <= {_MAX_COUNT}; got "
                       f"{int(np.max(k * e))}.")
    f, rho = np.divmod(t, k)
    self.s, self.t, self.k, self.e, self.value = s, t, k, e, value
    self.f, self.rho = f, rho
    self.c1 = ((k - rho) * e).astype(np.float64)
    self.c2 = (rho * e).astype(np.float64)

  def tails(self, tail, mode):
    kE = (self.k * self.e).astype(np.float64)
    if tail is not None:
      return np.full(self.value.shape, float(tail))
    if mode == "eps":
      return np.clip(TAIL_FACTOR * self.value, 1e-30, 1e-12) / kE
    return np.full(self.value.shape, DEFAULT_TAIL) / kE

  def tau(self, mode):
    if mode == "eps":
      return np.clip(TAU_FACTOR * self.value, 1e-300, 1e-10)
    return np.full(self.value.shape, DELTA_TAU)

  def unpad(self, x):   # host side (NumPy: no eager program per shape)
    return np.asarray(x)[:self.size].reshape(self.shape)

  def take(self, sl):
    """The lanes of slice ``sl`` (one compiled shape per chunk)."""
    out = copy.copy(self)
    out.__dict__.update({k: getattr(self, k)[sl] for k in ("s", "t", "k", "e", "value", "f", "rho",
                                                            "c1", "c2")})
    return out


def _round_laws(s, t, tl, *, n, mechanism, lower, host, aot=None):
  """Laws of 1-of-t rounds for lanes (s, t, tl): the one jitted law program
  (``host=False``), or NumPy laws built on the host, no program
  (``host=True``: :func:`._laws.laws_batch`); ``aot``: the jitted
  program compiled only, or its output shapes (``laws_batch``'s ``aot``)."""
  return laws_batch(np.asarray(s, np.float64), np.asarray(t, np.int32),
                    np.asarray(tl, np.float64), n=n, mechanism=mechanism, lower=lower,
                    host=host, aot=aot)   # NumPy in: no eager device-put program


def _block_laws(lanes, tl, *, grid_size, mechanism, laws, lower=True, host=False):
  """(Fr1, Fa1, Fr2, Fa2, shared): laws of the 1-of-f (and 1-of-(f+1)) rounds.

  The 1-of-(f+1) laws are built only where some lane has rho = t mod k > 0
  (a second call of the same shape: no new program); else F2 is F1 (its
  count c2 is 0 in every lane, which leaves it out exactly).
  """
  n = int(grid_size)
  two = bool(np.any(lanes.rho > 0))
  if laws is None:   # NumPy in: no eager device-put program
    s, tl = np.asarray(lanes.s, np.float64), np.asarray(tl, np.float64)
    kw = dict(n=n, mechanism=mechanism, lower=lower, host=host)
    Fr1 = laws_batch(s, np.asarray(lanes.f, np.int32), tl, **kw)
    Fr2 = laws_batch(s, np.asarray(lanes.f + 1, np.int32), tl, **kw) if two else Fr1
    Fa1, Fa2, shared = Fr1, Fr2, True
  else:
    B = lanes.f.shape[0]    # one call for both round types (one mixture size)
    Fr, Fa = pld_final_laws(laws, np.concatenate([lanes.f, lanes.f + 1]) if two else lanes.f,
                            np.concatenate([tl, tl]) if two else tl, n)
    shared = Fa is Fr
    head = lambda F: jax.tree.map(lambda a: a[:B], F)
    tail_ = lambda F: jax.tree.map(lambda a: a[B:], F) if two else head(F)
    Fr1, Fa1, Fr2, Fa2 = head(Fr), head(Fa), tail_(Fr), tail_(Fa)
    if host:
      Fr1, Fa1, Fr2, Fa2 = (jax.tree.map(np.asarray, F) for F in (Fr1, Fa1, Fr2, Fa2))
  return Fr1, Fa1, Fr2, Fa2, shared


#: Questions of at most this many lanes (broadcast settings) are answered on
#: the host (NumPy laws and composition: no XLA program; the ``max_lanes`` of
#: :func:`jaxacct._core.namespace.for_inputs`); larger ones in chunks.
HOST_LANES = 4


def _run_chunks(lanes, tails, taus, *, mode, auto, kw, grid_size, mechanism, laws):
  """A question of more than ``HOST_LANES`` lanes: equal chunks of one compiled
  shape, laws then query (:func:`._query.run_chunks`); padded parts."""
  def round_laws(sl):  # stage 1 of a chunk of lanes: its round laws
    ln = lanes.take(sl)
    *F, shared = _block_laws(ln, tails[sl], grid_size=grid_size, mechanism=mechanism, laws=laws)
    return sl, ln, F, shared

  def query(sl, ln, F, shared, precompile=False, host_settings=False):
    args = (*F, *(np.asarray(a, np.float64) for a in (ln.c1, ln.c2, ln.value, taus[sl])))
    qkw = dict(kw, shared=shared, batch=chunk, precompile=precompile)
    if auto and mode == "eps" and not host_settings:   # the sweep ladder, coarser grid
      qkw.update(sweep=True, size=sweep_size(ln.c1 + ln.c2, taus[sl]), tilts=SWEEP_TILTS)
    return qy.query_batch(*args, **qkw)

  def answer(st):       # stage 2: its query
    out = query(*st)
    if auto and mode == "eps" and qy.too_wide(out, st[1].c1 + st[1].c2):
      with qy.RERUN:   # one thread compiles the host settings' program
        out = query(*st, host_settings=True)
    return out

  # Big sweeps run as equal chunks of one compiled shape (a 1,000-sigma sweep
  # compiles what a 128-sigma one does), laws and query, with progress.
  total = lanes.f.shape[0]          # a power of two, or a multiple of the chunk
  chunk = min(total, qy.sweep_chunk())   # chunks tile the lanes
  first = slice(0, chunk)

  def prepare(stage):   # run_chunks' prepares: the first chunk's programs compiled, not run
    ln = lanes.take(first)
    F = _round_laws(ln.s, ln.f, tails[first], n=int(grid_size), mechanism=mechanism,
                    lower=True, host=False, aot="shapes" if stage else "compile")
    if stage:           # the query's, from the laws' shapes
      query(first, ln, (F,) * 4, True, precompile=True)

  with progress(total=total // chunk, desc=f"allocation PLD: {lanes.size} lanes",
                enabled=None if total > chunk else False) as bar:
    outs = qy.run_chunks((round_laws, answer),
                         [slice(i, i + chunk) for i in range(0, total, chunk)], bar.update,
                         keys=_stage_keys(lanes, taus, chunk, mode, auto, kw, grid_size,
                                          mechanism, laws),
                         prepares=None if laws is not None else (lambda: prepare(0),
                                                                 lambda: prepare(1)))
  return tuple(np.concatenate([np.asarray(a) for a in o]) for o in zip(*outs)) \
      if len(outs) > 1 else outs[0]


def _stage_keys(lanes, taus, chunk, mode, auto, kw, grid_size, mechanism, laws):
  """What the first chunk's law and query programs depend on, for
  :func:`._query.run_chunks` (a stage whose key ran before is not gated);
  None (always gated) for mechanisms given as PLDs."""
  if laws is not None:
    return None
  first = lanes.take(slice(0, chunk))
  two = bool(np.any(first.rho > 0))
  size = sweep_size(first.c1 + first.c2, taus[:chunk]) if auto and mode == "eps" \
      else kw["size"]
  base = (chunk, two, int(grid_size), str(mechanism), bool(jax.config.jax_enable_x64),
          jax.default_backend(), layout())
  one = first.c1 + first.c2 == 1     # the round types: which query programs run
  return ("laws",) + base, ("query", mode, auto, size, kw["tilts"], bool(np.any(one)),
                            bool(np.all(one))) + base


def _result(parts, direction, query, mode):
  ru, au, rl, al = parts
  if direction == "remove":
    up, lo, byd = ru, rl, {"remove": (ru, rl)}
  elif direction == "add":
    up, lo, byd = au, al, {"add": (au, al)}
  else:
    up, lo, byd = np.maximum(ru, au), np.maximum(rl, al), {"remove": (ru, rl),
                                                              "add": (au, al)}
  if mode == "eps":
    return EpsilonResult(epsilon=up, delta=query, method="allocation_pld", bound="upper",
                         lower=lo, by_direction=byd)
  return DeltaResult(delta=up, epsilon=query, method="allocation_pld", bound="upper",
                     lower=lo, by_direction=byd)


# ----------------------------------------------------------------------------
# front doors
# ----------------------------------------------------------------------------

def _query(mode, value, *, sigma, steps_per_epoch, num_selected, num_epochs, direction, grid_size,
           tail, mechanism, composition_size, laws, with_lower=True, devices=None):
  """The one query behind the front doors, on checked settings (``laws``: what
  :func:`_check_common` returned for them).

  ``mode`` is ``"eps"`` (``value`` is a delta; an ``EpsilonResult``) or
  ``"delta"`` (``value`` is an epsilon; a ``DeltaResult``).
  """
  if mode == "eps":
    checks.check_delta(value)
  else:
    checks.check_range("epsilon", value, 0.0, np.inf)
  _check_tail(tail)
  auto = composition_size is None
  kw = dict(mode=mode, size=DEFAULT_COMPOSITION_SIZE if auto else int(composition_size),
            tilts=int(cp.DEFAULT_TILTS))
  with sharding.use_devices(devices):   # chunks spread over the devices' lanes mesh
    lanes = _Lanes(sigma, steps_per_epoch, num_selected, num_epochs, value)
    tails, taus = lanes.tails(tail, mode), lanes.tau(mode)
    if lanes.ns.is_host:   # NumPy laws and composition: no XLA program
      *F, shared = _block_laws(lanes, tails, grid_size=grid_size, mechanism=mechanism,
                               laws=laws, host=True, lower=bool(with_lower) or laws is not None)
      parts = qy.query_host(*F, lanes.c1, lanes.c2, lanes.value, taus, shared=shared,
                            want_lower=bool(with_lower), **kw)
    else:
      parts = _run_chunks(lanes, tails, taus, mode=mode, auto=auto, kw=kw,
                          grid_size=grid_size, mechanism=mechanism, laws=laws)
    parts = tuple(lanes.unpad(p) for p in parts)
  if not with_lower:
    parts = (*parts[:2], *(np.full(np.shape(p), np.nan) for p in parts[2:]))
  return _result(parts, direction, value, mode)


@host_door(_ON_HOST)
@per_epoch_steps
def allocation_pld_epsilon(*, sigma=None, delta, steps_per_epoch, num_selected=1, num_epochs=1,
                           direction: str = "both", grid_size: int = DEFAULT_GRID_SIZE,
                           tail=None, mechanism="gaussian",
                           composition_size=None,
                           with_lower: bool = True, devices=None) -> EpsilonResult:
  r"""Epsilon of k-of-t random allocation over E epochs from its tight PLD: upper and lower.

  Feldman & Shenfeld, "Efficient privacy loss accounting for subsampling and
  random allocation", arXiv:2602.17284v1 (ICML 2026); k > 1 by Lemma 3.2 of
  Feldman & Shenfeld, "Privacy amplification by random allocation",
  arXiv:2502.08202v3; convex-order rounding and the fixed-grid composition as
  in this module's docstring.

  .. math:: \varepsilon(\delta) = \min\{\varepsilon : E_Q[(S/t - e^\varepsilon)_+]
            \le \delta\} \text{ (remove, one round; add analogous)}

  Args:
    sigma: noise multiplier (> 0), or Laplace scale when
      ``mechanism="laplace"``; array, broadcasts with every other numeric
      argument.
    delta: in (0, 1); broadcasts.
    steps_per_epoch: steps per epoch t >= 1 (int, <= 2**30); broadcasts.
    num_selected: k >= 1, <= steps_per_epoch; broadcasts. k > 1 uses Lemma 3.2
      (rounds of 1-of-floor(t/k) and 1-of-ceil(t/k)); ``lower`` then bounds
      the reduced object only.
    num_epochs: E >= 1 (composition); broadcasts.
    direction: "remove", "add" or "both" (max).
    grid_size: static number of lattice knots n of a round's law (cost
      O(n^2 log t)).
    tail: mass / moment cut per stage (tightness only, never validity);
      None: ``TAIL_FACTOR * delta / (k E)`` clipped to [1e-30, 1e-12] / (k E).
    mechanism: "gaussian" or "laplace" (then ``sigma`` is required), or the
      mechanism as discrete PLDs (then ``sigma=None``): a pessimistic
      ``jaxacct.pld.PLD`` (upper and lower from it; the lower bounds that
      discrete pair), a ``PairPLD(remove, add)``, or a tuple ``(upper, lower)``
      of PLDs/PairPLDs with ``upper`` pessimistic and ``lower`` optimistic or
      exact (see the module docstring).
    composition_size: static lattice size N (a power of two >= 256) of the
      composition used where k E > 1. None (default): DEFAULT_COMPOSITION_SIZE
      (2**15) for a question of at most ``HOST_LANES`` lanes (the host path);
      a jitted epsilon sweep picks N per chunk of lanes from the ladder
      2**11 .. 2**15 by the number of composed rounds (:func:`sweep_size`),
      with a coarser Chernoff grid (tightness
      only: both sides stay certified; the upper moves by about 1e-4
      relative or less), and runs a chunk again with the host settings
      where a composed lane's bracket is wider than ``SWEEP_BRACKET``
      (a single round's bracket is its laws'); delta sweeps use
      2**15.
    with_lower: False skips the certified lower bound (``lower`` and the
      lower entries of ``by_direction`` are then NaN): about a third of the
      work of a scalar question (calibration evaluates only the upper).
    devices: None (one device), jax devices or a ``jax.sharding.Mesh`` (also
      across hosts): the sweep's chunks spread over them, values unchanged.

  Returns:
    EpsilonResult: ``epsilon`` (= ``upper``) the upper bound, ``lower`` the
    lower bound, ``by_direction`` {"remove": (upper, lower), "add": ...};
    float64 arrays of the broadcast shape. ``method="allocation_pld"``.

  Bound: upper (``epsilon``) and lower (``lower``). ``epsilon`` is +inf if
  delta is below the tail floor, or where the composed losses pass about 709
  (the lattice is in x = e^loss: float64's range; the delta door's upper is
  then >= 1); sigma in [0.3, 50], t <= 1e7 tested. Calls
  with new values of the same shapes (padded to powers of two) do not
  recompile.

  Example (randomized response, exact pair)::

    >>> from jaxacct import pld as jpld
    >>> from jaxacct.allocation.pld import allocation_pld_epsilon
    >>> r = allocation_pld_epsilon(mechanism=jpld.randomized_response(1.0),
    ...                            steps_per_epoch=10_000, delta=1e-8)
  """
  laws = _check_common(sigma, steps_per_epoch, num_selected, num_epochs, direction, grid_size,
                       mechanism, composition_size)
  return _query("eps", delta, sigma=sigma, steps_per_epoch=steps_per_epoch,
                num_selected=num_selected, num_epochs=num_epochs, direction=direction,
                grid_size=grid_size, tail=tail, mechanism=mechanism,
                composition_size=composition_size, laws=laws, with_lower=with_lower,
                devices=devices)


@host_door(_ON_HOST)
@per_epoch_steps
def allocation_pld_delta(*, sigma=None, epsilon, steps_per_epoch, num_selected=1, num_epochs=1,
                         direction: str = "both", grid_size: int = DEFAULT_GRID_SIZE,
                         tail=None, mechanism="gaussian",
                         composition_size=None,
                         with_lower: bool = True, devices=None) -> DeltaResult:
  r"""Delta of k-of-t random allocation over E epochs from its tight PLD: upper and lower.

  Feldman & Shenfeld, arXiv:2602.17284v1; see :func:`allocation_pld_epsilon`.

  .. math:: \delta_{rem}(\varepsilon) = E_Q[(S/t - e^\varepsilon)_+],\quad
            \delta_{add}(\varepsilon) = E_Q[(1 - e^\varepsilon S/t)_+]
            \text{ (one round; composed over the Lemma 3.2 rounds and epochs)}

  Args:
    sigma, steps_per_epoch, num_selected, num_epochs, direction, grid_size, tail,
    mechanism, composition_size, with_lower, devices: as in :func:`allocation_pld_epsilon`
      (everything numeric broadcasts; ``tail`` default ``1e-20 / (k E)``).
    epsilon: >= 0; broadcasts.

  Returns:
    DeltaResult: ``delta`` (= ``upper``), ``lower``, ``by_direction``;
    float64 arrays of the broadcast shape.

  Bound: upper (``delta``) and lower (``lower``).
  """
  laws = _check_common(sigma, steps_per_epoch, num_selected, num_epochs, direction, grid_size,
                       mechanism, composition_size)
  return _query("delta", epsilon, sigma=sigma, steps_per_epoch=steps_per_epoch,
                num_selected=num_selected, num_epochs=num_epochs, direction=direction,
                grid_size=grid_size, tail=tail, mechanism=mechanism,
                composition_size=composition_size, laws=laws, with_lower=with_lower,
                devices=devices)


def _event_settings(event):
  """:func:`_query`'s settings of a ``RandomAllocationDpEvent``: its constructor
  checked its fields (the noise's sign among them), so only what it leaves open
  is checked here: a finite noise, and this door's limits on the counts."""
  mechanism = _events.require_allocation(event).mechanism
  if isinstance(mechanism, str):
    name = "noise_multiplier" if mechanism == "gaussian" else "scale"
    sigma, laws = getattr(event, name), None
    checks.check_finite(name, sigma)
  else:
    sigma, laws = None, pld_mechanism_laws(mechanism)
  checks.check_int("steps_per_epoch", event.steps_per_epoch, max_value=2**30)
  checks.check_int("num_selected", event.num_selected, max_value=2**30)
  checks.check_int("num_epochs", event.num_epochs, max_value=_MAX_COUNT)
  return dict(sigma=sigma, steps_per_epoch=int(event.steps_per_epoch),
              num_selected=int(event.num_selected), num_epochs=int(event.num_epochs),
              direction="both", grid_size=DEFAULT_GRID_SIZE, tail=None, mechanism=mechanism,
              composition_size=None, laws=laws)


@host_door(_ON_HOST)
def event_epsilon(event, *, delta, with_lower: bool = True) -> EpsilonResult:
  """:func:`allocation_pld_epsilon` of one ``RandomAllocationDpEvent`` (default settings).

  The accountant's door for a ledger of one random-allocation event
  (:mod:`jaxacct.accounting.evaluator`). The event checked its own fields
  when it was built, so they are not checked again here; ``delta`` is.

  Args:
    event: a :class:`jaxacct.accounting.events.RandomAllocationDpEvent`.
    delta: in (0, 1); array allowed.
    with_lower: as in :func:`allocation_pld_epsilon`.

  Returns:
    EpsilonResult, bitwise :func:`allocation_pld_epsilon`'s for the event's fields.

  Bound: upper (``epsilon``) and lower (``lower``).
  """
  return _query("eps", delta, **_event_settings(event), with_lower=with_lower)


@host_door(_ON_HOST)
def event_delta(event, *, epsilon, with_lower: bool = True) -> DeltaResult:
  """:func:`allocation_pld_delta` of one ``RandomAllocationDpEvent`` (default settings).

  See :func:`event_epsilon`; ``epsilon`` (>= 0, array allowed) is checked here.

  Bound: upper (``delta``) and lower (``lower``).
  """
  return _query("delta", epsilon, **_event_settings(event), with_lower=with_lower)


@host_door(_ON_HOST)
@per_epoch_steps
def allocation_plds(*, sigma=None, steps_per_epoch, num_selected=1, num_epochs=1,
                    grid_size: int = DEFAULT_GRID_SIZE, tail=None,
                    mechanism="gaussian", composition_step: float = 1e-4,
                    tail_mass: float = 1e-30) -> AllocationPLDs:
  """PLDs of k-of-t random allocation over E epochs, upper and lower (export).

  Feldman & Shenfeld, arXiv:2602.17284v1. The rounds' laws (Lemma 3.2) are
  composed by the engine of :func:`allocation_pld_epsilon` (the fixed-lattice
  tilted FFT of :mod:`._compose`, on the host), on a lattice that holds
  the grid of multiples of ``composition_step``, and the composed window is
  converted to ``jaxacct.pld`` PLDs: upper by connect-the-dots, lower with
  losses rounded down, the float ledger folded in (docs/bounds/allocation_pld.md,
  "The composed window as PLDs"). One round (k E = 1): its own laws. Convert
  with ``jaxacct.pld.to_dp_accounting(r.remove_upper, r.add_upper)`` to
  compose with dp_accounting events.

  Args:
    sigma: scalar > 0 (None for a PLD mechanism); steps_per_epoch, num_selected,
      num_epochs: ints >= 1.
    grid_size, tail, mechanism: as in :func:`allocation_pld_epsilon`
      (tail default 1e-20 / (k E)).
    composition_step: loss-grid step of the returned PLDs.
    tail_mass: tail of the composition window (charged to the upper PLDs'
      ``inf_mass``, dropped from the lower ones).

  Returns:
    AllocationPLDs(remove_upper, add_upper, remove_lower, add_lower).

  Bound: the ``*_upper`` PLDs dominate (pessimistic; FFT round-off certified);
  the ``*_lower`` PLDs are dominated (optimistic, on the reduced object when
  k > 1).
  """
  laws = _check_common(sigma, steps_per_epoch, num_selected, num_epochs, "both", grid_size,
                       mechanism, DEFAULT_COMPOSITION_SIZE)
  _check_tail(tail)
  checks.check_positive("composition_step", composition_step, scalar=True)
  checks.check_range("tail_mass", tail_mass, 0.0, 1.0, lo_open=True, hi_open=True)
  for name, v in (("sigma", sigma), ("steps_per_epoch", steps_per_epoch),
                  ("num_selected", num_selected), ("num_epochs", num_epochs)):
    if np.ndim(v):
      raise ValueError(f"allocation_plds takes a scalar {name}; got shape {np.shape(v)}.")
  k, E_ = int(num_selected), int(num_epochs)
  if k > int(steps_per_epoch):
    raise ValueError(f"num_selected must be <= steps_per_epoch; got {k} > {int(steps_per_epoch)}.")
  lanes = _Lanes(sigma, steps_per_epoch, num_selected, num_epochs, 0.0)
  tl = np.full(lanes.value.shape, DEFAULT_TAIL / (k * E_) if tail is None else float(tail))
  *F, shared = _block_laws(lanes, tl, grid_size=grid_size, mechanism=mechanism, laws=laws,
                           host=True)
  row = lambda G: jax.tree.map(lambda a: np.asarray(a)[0], G)
  return composed_plds(*(row(G) for G in F), lanes.c1[0], lanes.c2[0], shared,
                       step=float(composition_step), tail_mass=float(tail_mass))


@per_epoch_steps
def allocation_pld_laws(sigma, steps_per_epoch, *, grid_size: int = DEFAULT_GRID_SIZE,
                        tail: float = DEFAULT_TAIL, mechanism: str = "gaussian",
                        lower: bool = True) -> FinalLaws:
  """Upper and lower laws of S/t (1-of-t), jittable/vmappable in sigma, steps_per_epoch.

  Returns FinalLaws: upper masses ``up_p`` at losses ``up_loss`` = ln(x/t)
  (Q-masses; the remove PLD puts P-mass up_p e^{loss} at loss, plus
  ``up_minf_t`` at +inf; the add PLD puts Q-mass up_p at -loss, plus
  ``up_q0`` at +inf), and the lower atoms ``lo_a`` at ``lo_loss`` (plus
  ``lo_inf``, P-mass at +inf of the lower remove PLD; 0 for these mechanisms).
  ``rel``, ``eta`` and ``eta_lo`` are the floating-point ledger (relative mass
  error; log position error of the upper atoms, which involves the upper
  lattice only, and of the lower atoms). NaN policy: for an invalid traced
  sigma or steps_per_epoch ``rel`` is NaN (and the upper masses are NaN), so every
  profile computed from these laws is NaN. ``lower=False`` (static) skips the
  lower law (its masses are then 0 and ``eta_lo`` is meaningless); the upper
  law and ``eta`` are the same numbers either way.
  Bound: upper (convex-order dominating) and lower (dominated) laws.
  """
  checks.check_choice("mechanism", mechanism, ("gaussian", "laplace"))
  _check_static_int("grid_size", grid_size, 16)
  _check_tail(tail)
  if checks.is_concrete((sigma, steps_per_epoch)):   # one lane (vmap it for several)
    checks.check_sigma("sigma", sigma, scalar=True)
    checks.check_int("steps_per_epoch", steps_per_epoch, min_value=1, max_value=2**30,
                     scalar=True)
  return final_laws(sigma, steps_per_epoch, n=int(grid_size), tail=float(tail),
                    mechanism=mechanism, lower=checks.check_static_bool("lower", lower))
