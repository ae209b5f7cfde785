r"""From events to composed PLDs: per-event dominating pairs, then one FFT.

Every leaf event becomes a :class:`Component`: an *upper* pair of
pessimistic PLDs (remove, add) that dominates the mechanism, an optional
*lower* pair of optimistic PLDs that the mechanism dominates, or, where no
PLD exists, an upper RDP curve. A run is composed per direction:

* upper: ``jaxacct.pld.compose_many`` of all upper PLDs with their counts
  (pessimistic in, pessimistic out: the composition of dominating pairs
  dominates the composition); the RDP-only components are summed (RDP
  composes additively, Mironov, arXiv:1702.07476v3, Prop. 1), converted to
  a privacy profile on an epsilon grid and turned into one dominating pair
  (:func:`jaxacct.accounting.from_profile`), which then joins the FFT;
* lower: ``compose_many`` of the optimistic PLDs of the components that have
  one. A component without a lower PLD is left out, which keeps the result a
  lower bound (dropping a mechanism from a product only lowers every
  hockey-stick divergence: marginalisation is post-processing).

All PLDs live on the accountant's grid step; PLDs supplied on another step
are moved by :func:`jaxacct.accounting.regrid` (validity kept).

Neighbouring relations (dp_accounting's ``NeighboringRelation``):
``ADD_OR_REMOVE_ONE`` (default), ``REPLACE_SPECIAL`` (replace a record by a
fixed "zero" record: for additive-noise sums and random allocation this is
the add/remove pair; for shuffling and check-in it is a replacement), and
``REPLACE_ONE`` (sensitivity doubles for additive noise). A pair is
returned only where it is valid for the relation; otherwise the event is
unsupported and the error names it (dp_accounting's wording,
"neighboring_relation must be ..."). dp_accounting 0.6.0's newer events are
checked and built in ``jaxacct.accounting._newer_events``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, List, NamedTuple, Optional, Tuple

import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import dp_bridge
from jaxacct._core.events import kind
from jaxacct._core.lazy import LazyModule
from jaxacct.accounting import _mechanisms, _newer_events, _pairs, fixed_size
from jaxacct.accounting._lowers import Lazy
from jaxacct.allocation.pld import allocation_plds
from jaxacct.mechanisms import EpsilonDelta, Gaussian, Laplace, RandomizedResponse

if TYPE_CHECKING:
  from jaxacct import shuffle
  from jaxacct.shuffle import bounds
else:   # imported with the first shuffle or check-in event (not on the DP-SGD path)
  shuffle = LazyModule("jaxacct.shuffle")
  bounds = LazyModule("jaxacct.shuffle.bounds")

AOR, REPLACE, SPECIAL = "ADD_OR_REMOVE_ONE", "REPLACE_ONE", "REPLACE_SPECIAL"
RDP_ORDERS = _mechanisms.RDP_ORDERS


def relation_name(relation) -> str:
  """``"ADD_OR_REMOVE_ONE"``, ``"REPLACE_ONE"`` or ``"REPLACE_SPECIAL"``."""
  name = getattr(relation, "name", relation)
  if name not in (AOR, REPLACE, SPECIAL):
    raise ValueError("neighboring_relation must be a NeighboringRelation "
                     f"(ADD_OR_REMOVE_ONE, REPLACE_ONE, REPLACE_SPECIAL); got "
                     f"{relation!r}.")
  return name


class Component(NamedTuple):
  """One leaf event, ready to compose.

  Attributes:
    label: short description (for reports).
    upper: ``PairPLD`` of pessimistic PLDs (dominating), or None.
    lower: ``PairPLD`` of optimistic PLDs (dominated), a :class:`Lazy` one,
      or None.
    rdp: upper RDP curve on :data:`RDP_ORDERS` (both directions) where no
      PLD exists, else None.
    lower_scope: ``"mechanism"`` (a lower bound for the worst mechanism the
      event describes), ``"reduction"`` (only for the reduced object the
      upper bound is computed on: k-of-t allocation through Lemma 3.2) or
      ``"none"``.
    gaussian_mu: ``1/sigma_eff`` when the event is exactly a Gaussian
      mechanism (closed form composition), else None.
    nonprivate: True for events without any guarantee.
    noop: True for events that release nothing.
  """
  label: str
  upper: Any = None
  lower: Any = None
  rdp: Any = None
  lower_scope: str = "none"
  gaussian_mu: Optional[float] = None
  nonprivate: bool = False
  noop: bool = False


# --------------------------------------------------------------------------
# support check and flattening


def _err(event, msg):
  return dp_bridge.CompositionErrorDetails(invalid_event=event,
                                           error_message=msg)


def check_event(event, relation) -> Optional[Any]:
  """None if ``event`` can be accounted under ``relation``, else the
  ``CompositionErrorDetails`` naming the offending sub-event."""
  rel = relation_name(relation)
  k = kind(event)
  if k in ("noop", "non_private"):
    return None
  if k == "self_composed":
    if not isinstance(event.count, (int, np.integer)) or event.count < 0:
      return _err(event, f"count must be an int >= 0; got {event.count!r}.")
    return check_event(event.event, relation)
  if k == "composed":
    for e in event.events:
      r = check_event(e, relation)
      if r is not None:
        return r
    return None
  try:
    _leaf_kind(event, rel)
  except _Unsupported as u:
    return _err(u.event if u.event is not None else event, str(u))
  return None


_Unsupported = _newer_events.Unsupported


def _replacement_only(event, rel, what):
  _newer_events.need_relation(event, rel, (REPLACE, SPECIAL), f"{what} is accounted "
                      "for replacement neighbours: one user's input changes")


def _additive_kind(event):
  """``"gaussian"`` / ``"laplace"`` for those events (noise checked >= 0), else None."""
  k = kind(event)
  if k in ("gaussian", "laplace"):
    _nonneg(event, "noise_multiplier", event.noise_multiplier)
    return k
  return None


def _additive_leaf(event, rel):
  k = _additive_kind(event)
  if k == "laplace" and rel == REPLACE:
    _newer_events.need_relation(event, rel, (AOR, SPECIAL), "as dp_accounting: the "
                        "noise is relative to an L1 bound per record")
  return k


def _randomized_response_leaf(event, rel):
  _newer_events.need_relation(event, rel, (REPLACE, SPECIAL), "randomized response "
                      "replaces a user's bucket; it has no add/remove pair")
  p, k = event.noise_parameter, event.num_buckets
  if not (0 <= float(p) <= 1) or int(k) < 1:
    raise _Unsupported(f"noise_parameter must be in [0, 1] and num_buckets "
                       f">= 1; got {p!r}, {k!r}.", event)
  return "randomized_response"


def _poisson_leaf(event, rel):
  q = float(event.sampling_probability)
  if not 0 <= q <= 1:
    raise _Unsupported(f"sampling_probability must be in [0, 1]; got {q}.",
                       event)
  inner = event.event
  if kind(inner) == "laplace":
    _newer_events.need_relation(event, rel, (AOR, SPECIAL), "no replace-one pair of "
                        "Poisson-subsampled Laplace noise is implemented")
  k = _additive_kind(inner)
  if k is not None:
    return "poisson_" + k
  why = (" (no PLD of a subsampled zCDP mechanism is known and no subsampled-"
         "RDP bound for it is implemented)" if kind(inner) == "zcdp" else "")
  raise _Unsupported("the sub-event of PoissonSampledDpEvent must be a "
                     f"GaussianDpEvent or LaplaceDpEvent; found {inner}{why}.",
                     inner)


def _without_replacement_leaf(event, rel):
  if rel != REPLACE:
    raise _Unsupported(
        "SampledWithoutReplacementDpEvent is accounted for REPLACE_ONE "
        "neighbours only (fixed-size sampling changes size under add/remove; "
        "the amplification bound used is for substitution); found "
        f"{rel}.", event)
  n, m = int(event.source_dataset_size), int(event.sample_size)
  if not (n >= 1 and 0 <= m <= n):
    raise _Unsupported(f"need 0 <= sample_size <= source_dataset_size; got "
                       f"{m} and {n}.", event)
  inner = event.event
  if _additive_kind(inner) is not None:
    return "wor"
  raise _Unsupported("the sub-event of SampledWithoutReplacementDpEvent must "
                     f"be a GaussianDpEvent or LaplaceDpEvent; found {inner}.",
                     inner)


def _zcdp_leaf(event, rel):
  rho, xi = float(event.rho), float(getattr(event, "xi", 0.0))
  if not (rho >= 0 and xi >= 0):
    raise _Unsupported(f"rho and xi must be >= 0; got {rho}, {xi}.", event)
  return "zcdp"


def _allocation_leaf(event, rel):
  if rel == REPLACE:
    raise _Unsupported(
        "RandomAllocationDpEvent is accounted for ADD_OR_REMOVE_ONE or "
        "REPLACE_SPECIAL neighbours (no replacement analysis of random "
        "allocation is implemented); found REPLACE_ONE.", event)
  return "allocation"


def _dp_allocation_leaf(event, rel):
  try:
    _newer_events.from_dp_random_allocation(event)
  except (ValueError, TypeError) as e:
    raise _Unsupported(str(e), event) from None
  if rel == REPLACE:
    raise _Unsupported("random allocation needs ADD_OR_REMOVE_ONE or "
                       "REPLACE_SPECIAL; found REPLACE_ONE.", event)
  return "dp_allocation"


#: event kind (:func:`jaxacct._core.events.kind`) -> its leaf check: validates
#: the event for the relation (raises ``_Unsupported`` with the message) and
#: names its builder in :data:`_BUILDERS` (or ``_newer_events.KINDS``).
_LEAVES = {
    "gaussian": _additive_leaf, "laplace": _additive_leaf,
    "randomized_response": _randomized_response_leaf,
    "poisson_sampled": _poisson_leaf,
    "without_replacement": _without_replacement_leaf,
    "zcdp": _zcdp_leaf,
    "epsilon_delta": lambda event, rel: "epsilon_delta",
    "pld": lambda event, rel: "pld",
    "allocation": _allocation_leaf, "dp_allocation": _dp_allocation_leaf,
    "shuffle": lambda event, rel: _replacement_only(event, rel, "ShuffleDpEvent") or "shuffle",
    "check_in": lambda event, rel: (_replacement_only(event, rel, "ShuffledCheckInDpEvent")
                                    or "check_in"),
}


def _leaf_kind(event, rel) -> str:
  """Validates a leaf and names its builder (raises _Unsupported)."""
  k = kind(event)
  if k in _LEAVES:
    return _LEAVES[k](event, rel)
  built = _newer_events.leaf_kind(k, event, rel)
  if built is not None:
    return built
  raise _Unsupported("Unsupported event.", event)


def _nonneg(event, name, value):
  try:
    v = float(value)
  except (TypeError, ValueError):
    raise _Unsupported(f"{name} must be a real number >= 0; got {value!r}.",
                       event) from None
  if not v >= 0:
    raise _Unsupported(f"{name} must be >= 0; got {value!r}.", event)


def leaves(event, count: int) -> List[Tuple[Any, int]]:
  """Flattens ``event`` composed ``count`` times into ``[(leaf, count)]``
  (NoOp and count-0 leaves dropped; equal leaves merged, order kept)."""
  out: List[List[Any]] = []

  def add(leaf, c):
    if c <= 0:
      return
    for item in out:
      if item[0] == leaf:
        item[1] += c
        return
    out.append([leaf, c])

  def walk(e, c):
    k = kind(e)
    if k == "noop":
      return
    if k == "self_composed":
      walk(e.event, c * int(e.count))
    elif k == "composed":
      for x in e.events:
        walk(x, c)
    else:
      add(e, c)

  walk(event, int(count))
  return [(e, c) for e, c in out]


# --------------------------------------------------------------------------
# per-leaf components


def build_component(event, relation, *, step: float) -> Component:
  """The :class:`Component` of a supported leaf event (see module docstring)."""
  rel = relation_name(relation)
  if kind(event) == "non_private":
    return _nonprivate("non_private")
  built = _leaf_kind(event, rel)
  if built in _newer_events.KINDS:
    fields = _newer_events.build(built, event, rel, float(step))
    fn = fields.pop("lower_fn", None)
    return Component(**fields, lower=Lazy(fn) if fn is not None else None)
  return _BUILDERS[built](event, rel, float(step))



def _pair(p):
  return p if isinstance(p, jpld.PairPLD) else jpld.PairPLD(p, p)


def _regrid_pair(pair, step):
  return jpld.PairPLD(_pairs.regrid(pair.remove, step), _pairs.regrid(pair.add, step))


def _nonprivate(label):
  return Component(label, nonprivate=True)


def _noop(label):
  return Component(label, noop=True)


# --------------------------------------------------------------------------
# base mechanisms: the event names a value of jaxacct.mechanisms, and the
# value says what it knows (its PLDs here; RDP, profile, one-step law there)


def _sensitivity(rel):
  """Additive noise: a neighbour moves the sum by 1 (add/remove, or replacing
  by the special zero record) or by 2 (replacing one record by another)."""
  return 2.0 if rel == REPLACE else 1.0


def base_mechanism(event, relation):
  """The :mod:`jaxacct.mechanisms` value of a base event under ``relation``.

  ``GaussianDpEvent(s)`` / ``LaplaceDpEvent(s)``: ``Gaussian(s)`` /
  ``Laplace(s)``, sensitivity 2 under REPLACE_ONE, else 1;
  ``RandomizedResponseDpEvent``: ``RandomizedResponse`` against a replaced
  user (REPLACE_ONE) or against the uniform output (REPLACE_SPECIAL);
  ``EpsilonDeltaDpEvent``: ``EpsilonDelta``. None for any other event. The
  degenerate parameters (zero noise, p = 0, k = 1, delta >= 1) have no value:
  :func:`build_component` makes them no-op or non-private first.
  """
  rel = relation_name(relation)
  k = kind(event)
  if k == "gaussian":
    return Gaussian(float(event.noise_multiplier), sensitivity=_sensitivity(rel))
  if k == "laplace":
    return Laplace(float(event.noise_multiplier), sensitivity=_sensitivity(rel))
  if k == "randomized_response":
    return RandomizedResponse(float(event.noise_parameter), int(event.num_buckets),
                              neighbouring="replace_one" if rel == REPLACE else "replace_special")
  if k == "epsilon_delta":
    return EpsilonDelta(event.epsilon, event.delta)
  return None


def _degenerate(event):
  """The no-op / non-private component of a base event without a value, else None."""
  k = kind(event)
  if k in ("gaussian", "laplace") and float(event.noise_multiplier) == 0:
    return _nonprivate(f"{k}(0)")
  if k == "randomized_response":
    if int(event.num_buckets) == 1:
      return _noop("randomized_response(k=1)")
    if float(event.noise_parameter) == 0:
      return _nonprivate("randomized_response(p=0)")
  if k == "epsilon_delta" and event.delta >= 1:
    return _nonprivate("epsilon_delta(delta=1)")
  return None


def _base(event, rel, step):
  """A base event's component, asked of its mechanism value: its upper
  ``pld``, the accountant's second-order lower (:func:`._mechanisms.lower_pld`)
  and, for the Gaussian, mu of mu-GDP (closed-form composition)."""
  c = _degenerate(event)
  if c is not None:
    return c
  m = base_mechanism(event, rel)
  return Component(m.label, m.pld(value_discretization_interval=step),
                   Lazy(lambda: _mechanisms.lower_pld(m, step=step)), lower_scope="mechanism",
                   gaussian_mu=m.gdp_mu)


def _poisson_degenerate(event, name, noise):
  """``(q, noise, component)`` of a Poisson-sampled event: the no-op component
  when q = 0, the non-private one when its noise is 0, else None."""
  q, s = float(event.sampling_probability), float(event.event.noise_multiplier)
  if q == 0:
    return q, s, _noop(f"{name}(q=0)")
  if s == 0:
    return q, s, _nonprivate(f"{name}({noise}=0)")
  return q, s, None


def _poisson_gaussian(event, rel, step):
  q, s, c = _poisson_degenerate(event, "poisson_gaussian", "sigma")
  if c is not None:
    return c
  label = f"poisson_gaussian(q={q:g}, sigma={s:g})"
  if rel == REPLACE:
    if q == 1:
      return _base(event.event, rel, step)._replace(label=label)
    up = _mechanisms.poisson_gaussian_replace(s, q, step=step, pessimistic=True)
    lo = Lazy(lambda: _mechanisms.poisson_gaussian_replace(s, q, step=step, pessimistic=False))
    return Component(label, up, lo, lower_scope="mechanism")
  up = jpld.poisson_gaussian_pair(s, q, step=step, pessimistic=True)
  lo = Lazy(lambda: _mechanisms.poisson_gaussian_lower(s, q, step=step) if q < 1 else
           _mechanisms.lower_pld(Gaussian(s), step=step))
  return Component(label, up, lo, lower_scope="mechanism",
                   gaussian_mu=Gaussian(s).gdp_mu if q == 1 else None)


def _poisson_laplace(event, rel, step):
  q, b, c = _poisson_degenerate(event, "poisson_laplace", "b")
  if c is not None:
    return c
  if q == 1:
    return _base(event.event, rel, step)
  up = _mechanisms.poisson_laplace(b, q, step=step, pessimistic=True)
  lo = Lazy(lambda: _mechanisms.poisson_laplace(b, q, step=step, pessimistic=False))
  return Component(f"poisson_laplace(q={q:g}, b={b:g})", up, lo,
                   lower_scope="mechanism")


def _wor(event, rel, step):
  """Sampling m of n without replacement, then a Gaussian/Laplace sum.

  Gaussian: :func:`jaxacct.accounting.fixed_size.without_replacement_pair`
  (upper and lower); Laplace: the BBG profile,
  :func:`mechanisms.sampled_without_replacement_upper` (upper only)."""
  n, m = int(event.source_dataset_size), int(event.sample_size)
  inner = event.event
  s = float(inner.noise_multiplier)
  if m == 0:
    return _noop("sampled_without_replacement(m=0)")
  if s == 0:
    return _nonprivate("sampled_without_replacement(noise 0)")
  g = m / n
  is_gauss = kind(inner) == "gaussian"
  label = (f"sampled_without_replacement({m}/{n}, "
           f"{'gaussian' if is_gauss else 'laplace'}({s:g}))")
  if g == 1:
    return _base(inner, rel, step)._replace(label=label)
  if is_gauss:   # tight symmetric pair (jaxacct.accounting.fixed_size)
    # the lower first: a bracket starts it beside the upper (lowers_ahead)
    lo = Lazy.ahead(lambda: fixed_size.without_replacement_pair(n, m, s, step=step,
                                                              pessimistic=False))
    up = fixed_size.without_replacement_pair(n, m, s, step=step)
    return Component(label + " [pld: one-step-exact symmetric pair]", up, lo,
                     lower_scope="mechanism")
  up = _mechanisms.sampled_without_replacement_upper("laplace", s, g, step=step)
  return Component(label + " [pld: BBG profile]", up, None, lower_scope="none")


def _zcdp(event, rel, step):
  rho, xi = float(event.rho), float(getattr(event, "xi", 0.0))
  if rho == 0 and xi == 0:
    return _noop("zcdp(0)")
  return Component(f"zcdp(rho={rho:g}, xi={xi:g})", rdp=xi + rho * RDP_ORDERS)


def _pld_event(event, rel, step):
  up = _regrid_pair(_pair(event.upper), step)
  lo = None
  if event.lower is not None:
    lo = _pair(event.lower)
    lo = jpld.PairPLD(*[_pairs.regrid(p, step) if not p.pessimistic else
                        _as_optimistic(p, step) for p in lo])
  return Component(event.name, up, lo,
                   lower_scope="mechanism" if lo is not None else "none")


def _as_optimistic(p, step):
  """An exact pair given as a (pessimistic-flagged) PLD, merged onto the grid."""
  probs = np.asarray(p.probs, np.float64)
  keep = probs > 0
  losses = (int(p.offset) + np.arange(probs.size)) * float(p.step)
  pm = probs[keep]
  return _pairs.dominated_on_grid(pm, pm * np.exp(-losses[keep]), step=step,
                                 inf_mass=min(1.0, float(p.inf_mass)))


def _allocation(event, rel, step):
  mech = event.mechanism
  sigma = event.scale if mech == "laplace" else event.noise_multiplier
  r = allocation_plds(sigma=sigma,
                      steps_per_epoch=int(event.steps_per_epoch),
                      num_selected=int(event.num_selected),
                      num_epochs=int(event.num_epochs), mechanism=mech,
                      composition_step=step)
  up = jpld.PairPLD(r.remove_upper, r.add_upper)
  lo = jpld.PairPLD(r.remove_lower, r.add_lower)
  name = mech if isinstance(mech, str) else "pld"
  label = (f"random_allocation({name}, sigma={sigma}, t={event.steps_per_epoch}, "
           f"k={event.num_selected}, E={event.num_epochs})")
  return Component(label, up, lo,
                   lower_scope="mechanism" if int(event.num_selected) == 1
                   else "reduction")


def _dp_allocation(event, rel, step):
  return _allocation(_newer_events.from_dp_random_allocation(event), rel, step)


_SHUFFLE_MAX_ATOMS = 4_000_000
_SHUFFLE_LOWER_M = 32


def _shuffle(event, rel, step):
  r"""Upper: the declared randomizer's per-round dominating pair
  (``jaxacct.shuffle.dominating_pairs``: clone pair for "generic", stronger
  clone otherwise) as PLDs of both orientations; when that pair is too large
  (> 4e6 atoms), Chen et al.'s RDP of the clone pair (``chen_exact_rdp``,
  certified) through the RDP fallback. Lower: the exact pair of binary
  randomized response on a fixed dataset (``binary_rr_pmfs``, the dataset
  among m = 0..31 other ones with the largest one-round delta): binary RR is
  an eps0-LDP randomizer meeting the blanket condition, so it is a mechanism
  the "generic", "blanket" and "binary_rr" declarations all cover (not
  ("k_rr", k): no lower there).
  """
  n, eps0, rnd = int(event.n), float(event.eps0), event.randomizer
  kind = rnd if isinstance(rnd, str) else "k_rr"
  label = f"shuffle(n={n}, eps0={eps0:g}, {rnd})"
  p = math.exp(eps0)
  total = math.exp(-eps0) if kind == "generic" else 2.0 / (p + 1.0)
  sd = math.sqrt(n * total * (1 - total))
  atoms = (2 * (10 * sd + 100) + 1) * (2 * (10 * math.sqrt(
      max(min(n, n * total + 10 * sd + 100), 1) / 4) + 100) + 3)
  up = rdp = None
  if atoms <= _SHUFFLE_MAX_ATOMS:
    rr = "generic" if kind == "generic" else "blanket"
    (a, b), = shuffle.dominating_pairs(n=n, eps0=eps0, randomizer=rr)
    up = jpld.PairPLD(jpld.from_pair(a, b, step=step, pessimistic=True),
                      jpld.from_pair(b, a, step=step, pessimistic=True))
  else:
    rdp = np.asarray(shuffle.bounds.chen_exact_rdp(RDP_ORDERS, n=n, eps0=eps0), np.float64)
    rdp = np.minimum(rdp, eps0)   # and never above the local guarantee
  lo = None
  if kind != "k_rr":
    def build():
      best, best_d = None, -1.0
      for mm in range(0, min(_SHUFFLE_LOWER_M, n)):
        y0, y1 = shuffle.bounds.binary_rr_pmfs(n, eps0, mm)
        d = float(np.sum(np.maximum(y0 - p ** 0.5 * y1, 0.0))) + float(
            np.sum(np.maximum(y1 - p ** 0.5 * y0, 0.0)))
        if d > best_d:
          best, best_d = (y0, y1), d
      y0, y1 = best
      return jpld.PairPLD(_pairs.dominated_on_grid(y0, y1, step=step),
                          _pairs.dominated_on_grid(y1, y0, step=step))
    lo = Lazy(build)
  return Component(label, up, lo, rdp=rdp,
                   lower_scope="mechanism" if lo is not None else "none")


def _check_in(event, rel, step):
  n, p = int(event.n), float(event.p)
  if event.eps0 is not None:
    rdp = bounds.check_in_ldp_rdp(RDP_ORDERS, n=n, p=p, eps0=float(event.eps0))
    label = f"check_in(n={n}, p={p:g}, eps0={event.eps0:g})"
  else:
    rdp = bounds.check_in_gaussian_rdp(RDP_ORDERS, n=n, p=p,
                                         sigma=float(event.noise_multiplier))
    label = f"check_in(n={n}, p={p:g}, sigma={event.noise_multiplier:g})"
  return Component(label, rdp=np.asarray(rdp, np.float64))


_BUILDERS = {
    "gaussian": _base, "laplace": _base, "randomized_response": _base,
    "poisson_gaussian": _poisson_gaussian, "poisson_laplace": _poisson_laplace,
    "wor": _wor, "zcdp": _zcdp, "epsilon_delta": _base,
    "pld": _pld_event, "allocation": _allocation,
    "dp_allocation": _dp_allocation, "shuffle": _shuffle,
    "check_in": _check_in,
}
