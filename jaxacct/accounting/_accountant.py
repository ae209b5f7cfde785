r"""``PLDAccountant``: a dp_accounting ``PrivacyAccountant`` backed by jaxacct.

A drop-in for ``dp_accounting.pld.PLDAccountant`` that understands jaxacct's events
too and reports a certified bracket (``get_epsilon_bounds``, ``get_delta_bounds``).
Composition is lazy: ``compose`` records, the first query builds and caches.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Dict, List, Optional

import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import checks, dp_bridge
from jaxacct._core.checks import WindowTooLarge
from jaxacct._core.dtype import side_by_side, x64_boundary
from jaxacct._core.events import kind
from jaxacct._core.gaussian import gaussian_delta, gaussian_epsilon
from jaxacct._core.results import DeltaResult, EpsilonResult
from jaxacct.accounting import _composition, _final_rule
from jaxacct.accounting import _repeated, _state, _tradeoff, mixtures
from jaxacct.accounting._lowers import lowers_ahead, resolve
from jaxacct.accounting._mechanisms import rdp_pair
from jaxacct.accounting._scheme_doors import scheme_door

NeighboringRelation = dp_bridge.NeighboringRelation
UnsupportedEventError = dp_bridge.UnsupportedEventError

#: tail mass per side of every FFT composition (aliasing allowance).
DEFAULT_TAIL_MASS = 1e-20


class _Composed:
  """Cached composition of a ledger (upper/lower per direction)."""

  def __init__(self, *, method, upper=None, lower_fn=None, exact_mu=None, door=None,
               nonprivate=False, empty=False, details=None, repeated=None, upper_fn=None):
    self.method = method
    self._upper = upper           # PairPLD (pessimistic) or None
    self._upper_fn = upper_fn     # () -> PairPLD: built on first use (one repeated event)
    self.repeated = repeated      # (per-event PairPLD, count): one event, repeated
    self._lower_fn = lower_fn     # () -> (PairPLD or None, lower details)
    self._lower = None
    self.exact_mu = exact_mu      # Gaussian shortcut
    self.door = door              # _scheme_doors.SchemeDoor: a scheme's own door
    self.nonprivate, self.empty = nonprivate, empty
    self.details = details or {}

  def _resolve(self):
    if self._lower is None:
      self._lower = self._lower_fn() if self._lower_fn is not None else (None, {})
    return self._lower

  @property
  def upper(self):
    """Composed upper ``PairPLD`` (built on first use where lazy), or None."""
    if self._upper is None and self._upper_fn is not None:
      self._upper = self._upper_fn()
    return self._upper

  @property
  def lower(self):
    """Composed lower ``PairPLD`` (built on first use), or None."""
    return self._resolve()[0]

  def full_details(self):
    return dict(self.details, **self._resolve()[1])


def _setting(attr: str, doc: str) -> property:
  """A read-only property returning ``self.<attr>`` (an accountant's setting)."""
  return property(operator.attrgetter(attr), doc=doc)


@x64_boundary   # one entry: every public method runs under float64
class PLDAccountant(dp_bridge.PrivacyAccountantBase):
  r"""Privacy accountant over jaxacct's PLDs (upper) and lower PLDs (bracket).

  Args:
    neighboring_relation: ``NeighboringRelation.ADD_OR_REMOVE_ONE``
      (default), ``REPLACE_ONE`` or ``REPLACE_SPECIAL`` (a record replaced by a
      fixed "zero" record: runs that mix add/remove mechanisms with shuffling
      or check-in). Which events each supports: ``accounting._composition``.
    value_discretization_interval: the loss grid step of every PLD (as in
      dp_accounting), > 0: smaller is tighter and slower.
    tail_mass: truncation mass per side of the FFT compositions (charged to
      delta on the upper side, allowed for on the lower side), in (0, 1e-3].
    shortcuts: the exact Gaussian closed form and the desks' doors (one
      allocation event, or one Poisson-subsampled Gaussian event) (default True).
    component_cache: optional dict shared by accountants with the same
      relation and grid, to reuse per-event PLDs (``copy`` shares its own).
    truncated: ``TruncatedSubsampledGaussianDpEvent``'s upper pair: ``"jaxacct"``
      (default, tighter) or ``"dp_accounting"`` (compatibility: their valid,
      looser construction; :func:`.mixtures.truncated_poisson_gaussian`).

  Bound: ``get_epsilon``/``get_delta``: upper. ``*_bounds``: upper and a
  certified lower (``details["lower_scope"]`` says when the lower bound is
  only of Lemma 3.2's reduced k-of-t object).

  Example:
    >>> from jaxacct.accounting import PLDAccountant, events
    >>> acc = PLDAccountant().compose(events.GaussianDpEvent(2.0), 10)
    >>> round(acc.get_epsilon(1e-5), 4)
    7.5113
  """

  def __init__(self, neighboring_relation=None,
               value_discretization_interval: float = 1e-4, *,
               tail_mass: float = DEFAULT_TAIL_MASS, shortcuts: bool = True,
               component_cache: Optional[dict] = None, truncated: str = "jaxacct"):
    checks.check_choice("truncated", truncated, ("jaxacct", "dp_accounting"))
    if neighboring_relation is None:
      neighboring_relation = NeighboringRelation.ADD_OR_REMOVE_ONE
    _composition.relation_name(neighboring_relation)
    for name, v in (("value_discretization_interval", value_discretization_interval),
                    ("tail_mass", tail_mass)):
      if isinstance(v, (bool, str, bytes)) or not isinstance(v, (int, float, np.integer,
                                                                  np.floating)):
        raise ValueError(f"{name} must be a real number; got {v!r}.")
    checks.check_positive("value_discretization_interval",
                          value_discretization_interval)
    checks.check_range("tail_mass", tail_mass, 0.0, 1e-3, lo_open=True)
    checks.check_bool("shortcuts", shortcuts)
    if component_cache is not None and not isinstance(component_cache, dict):
      raise ValueError(f"component_cache must be a dict or None; got {component_cache!r:.60}.")
    super().__init__(neighboring_relation)
    self._step, self._tail = float(value_discretization_interval), float(tail_mass)
    self._shortcuts = bool(shortcuts)
    self._truncated = truncated
    self._leaves: List[List[Any]] = []      # [leaf event, count]
    self._history: List[tuple] = []         # top-level (event, count)
    self._components: Dict[Any, _composition.Component] = (
        {} if component_cache is None else component_cache)
    self._composed: Optional[_Composed] = None
    self._composed_pld: Optional[_Composed] = None

  # ------------------------------------------------------------ dp_accounting

  value_discretization_interval = _setting("_step", "The loss grid step of every PLD (float).")
  tail_mass = _setting("_tail", "Truncation mass per side of each FFT composition (float).")
  truncated = _setting("_truncated", "Which upper pair ``TruncatedSubsampledGaussianDpEvent`` "
                       'gets ("jaxacct" or "dp_accounting").')
  shortcuts = _setting("_shortcuts", "Whether the Gaussian closed form and the scheme doors "
                       "(one allocation or Poisson-Gaussian event) replace FFT composition (bool).")

  @property
  def method(self) -> str:
    """The path that answers this ledger: ``"poisson_pld"`` or ``"allocation_pld"``
    (a scheme's door), ``"gaussian_exact"``, ``"pld"`` / ``"pld+rdp"`` (FFT
    composition), ``"non_private"`` or ``"none"`` (as results' ``method``)."""
    return self._compose_all().method

  @property
  def events(self) -> tuple:
    """The ``(event, count)`` pairs composed so far, in order (as given)."""
    return tuple(self._history)

  def compose(self, event, count: int = 1) -> "PLDAccountant":
    """Records ``event`` composed ``count`` times (lazy: queries compute).

    Raises ``ValueError`` for ``count`` not an int >= 1 (as dp_accounting's
    accountants do) and ``UnsupportedEventError`` (naming the offending
    sub-event and why) for an event this accountant cannot account for.
    """
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
      raise ValueError(f"count must be a positive int; got {count!r}.")
    return super().compose(event, int(count))

  def _maybe_compose(self, event, count, do_compose):
    if not isinstance(count, (int, np.integer)) or count < 0:
      return dp_bridge.CompositionErrorDetails(
          invalid_event=event, error_message=f"count must be an int >= 0; got "
          f"{count!r}.")
    err = _composition.check_event(event, self.neighboring_relation)
    if err is not None or not do_compose:
      return err
    self._history.append((event, int(count)))
    for leaf, c in _composition.leaves(event, int(count)):
      for item in self._leaves:
        if item[0] == leaf:
          item[1] += c
          break
      else:
        self._leaves.append([leaf, c])
    self._composed = self._composed_pld = None
    return None

  def get_epsilon(self, target_delta: float) -> float:
    """Epsilon at ``target_delta`` in [0, 1] (certified upper bound; upper side only).

    As dp_accounting: 0 for an empty or no-op ledger and for delta >= 1; inf
    after a non-private event; at delta = 0 the largest privacy loss (inf for
    unbounded ones such as Gaussian noise). :meth:`get_epsilon_bounds`: both.
    """
    return float(self._query("epsilon", target_delta, with_lower=False).epsilon)

  def get_delta(self, target_epsilon: float) -> float:
    """Delta at ``target_epsilon`` in [0, inf] (certified upper bound; upper side only).

    0 for an empty or no-op ledger, 1 after a non-private event; at
    epsilon = inf the mass at +inf loss, ``1 - prod_k (1 - inf_k)^{n_k}``.
    """
    return float(self._query("delta", target_epsilon, with_lower=False).delta)

  # ------------------------------------------------------------- brackets

  def get_epsilon_bounds(self, delta: float) -> EpsilonResult:
    r"""Certified bracket on epsilon at ``delta``.

    Returns:
      ``EpsilonResult(epsilon=upper, delta, method, bound, lower=lower,
      by_direction={"remove": (up, lo), "add": (up, lo)}, details)``;
      ``bound`` is ``"exact"`` for the Gaussian shortcut, else ``"upper"``.
      ``details``: ``lower_scope`` (``"mechanism"``, ``"reduction"`` if any
      k-of-t allocation event's lower bound is of the reduced object,
      ``"partial"`` if some events have no lower bound and were left out),
      ``components`` (labels and counts).

    Bound: upper (``epsilon``) and lower (``lower``).
    """
    return self._query("epsilon", delta, with_lower=True)

  def _query(self, quantity: str, value, *, with_lower: bool):
    """:meth:`_answer`, with a window too long for the PLD engines (huge counts)
    restated as a ``ValueError`` naming ``count``."""
    try:
      return self._answer(quantity, value, with_lower=with_lower)
    except WindowTooLarge as err:
      raise self._too_long(err) from None

  def _too_long(self, err: WindowTooLarge) -> WindowTooLarge:
    """``err`` restated naming ``count`` and the ledger (what the user composed)."""
    return _repeated.too_long(self._history, self._step, err)

  def _answer(self, quantity: str, value, *, with_lower: bool):
    """The one query behind epsilon and delta.

    ``quantity`` is ``"epsilon"`` (``value`` is a delta; an
    :class:`EpsilonResult`) or ``"delta"`` (``value`` is an epsilon; a
    :class:`DeltaResult`).
    """
    is_eps = quantity == "epsilon"
    if is_eps:
      checks.check_range("delta", value, 0.0, 1.0)
    else:
      checks.check_range("epsilon", value, 0.0, np.inf, allow_inf=True)
    value = float(value)
    given = "delta" if is_eps else "epsilon"
    cls = EpsilonResult if is_eps else DeltaResult

    def result(v, **kw):
      return cls(**{quantity: v, given: value}, **kw)

    # a bracket of one event: its lower (built lazily) starts beside its upper
    with lowers_ahead(with_lower and is_eps and 0.0 < value < 1.0
                      and sum(n > 0 for _, n in self._leaves) == 1):
      c = self._compose_all()
    if c.nonprivate:
      worst = math.inf if is_eps else 1.0
      return result(worst, method="non_private", bound="upper", lower=worst,
                    details=dict(c.details))
    if c.empty or (is_eps and value >= 1.0):
      return result(0.0, method="none" if c.empty else c.method, bound="exact",
                    lower=0.0, details=dict(c.details))
    if (is_eps and value == 0.0) or (not is_eps and value == math.inf):
      return self._extreme(quantity, with_lower, result)
    if c.exact_mu is not None:
      g = (gaussian_epsilon if is_eps else gaussian_delta)(1.0 / c.exact_mu, value)
      v = float(getattr(g, quantity))
      return result(v, method="gaussian_exact", bound="exact", lower=v,
                    by_direction={"remove": (v, v), "add": (v, v)},
                    details=dict(c.details, mu=c.exact_mu))
    if c.door is not None and (not with_lower or c.door.with_lower):
      r = c.door.ask(quantity, value, with_lower=with_lower)   # upper only: no lower built
      v = float(getattr(r, quantity))
      if not with_lower:
        return result(v, method=c.method, bound="upper", details=dict(c.details))
      bd = {d: tuple(float(x) for x in b) for d, b in r.by_direction.items()}
      return result(v, method=c.method, bound="upper", lower=float(r.lower),
                    by_direction=bd, details=dict(c.details))
    if not with_lower:
      return result(max(self._uppers(c, quantity, value).values()), method=c.method,
                    bound="upper", details=dict(c.details))
    up = lambda: self._uppers(c, quantity, value)   # noqa: E731
    # one event: the lower by the repeated-event engine, beside the upper
    ups, rep = (side_by_side(up, lambda: self._repeated_lower(quantity, value))
                if is_eps and (c.door is not None or c.repeated is not None) else (up(), None))
    if rep is None:
      lower = c.lower
      los = {d: self._lower_value(quantity, getattr(lower, d), value) if lower is not None
             else 0.0 for d in ("remove", "add")}
      details = c.full_details()
    else:
      los, details = rep[0], dict(c.details, lower_scope=rep[1])
    for d in ups:
      los[d] = min(los[d], ups[d])
    return result(max(ups.values()), method=c.method, bound="upper",
                  lower=max(los.values()), by_direction={d: (ups[d], los[d]) for d in ups},
                  details=details)

  def _uppers(self, c, quantity, value) -> dict:
    """Per direction, ``quantity``'s upper of ``c``: door, engine or composed pair."""
    if c.door is not None:
      r = c.door.ask(quantity, value, with_lower=True)   # this door builds no lower
      return {d: float(r.details[d]) for d in ("remove", "add")}
    if c.repeated is not None:   # one event n times: the repeated-event engine
      return _repeated.direction_values(quantity, c.repeated, value, self._tail)
    query = jpld.epsilon if quantity == "epsilon" else jpld.delta
    return {d: float(query(getattr(c.upper, d), value)) for d in ("remove", "add")}

  def _extreme(self, quantity, with_lower, result):
    """epsilon at delta = 0 or delta at epsilon = inf, from the components.

    A composition's largest loss is the sum of the components' largest
    losses (count times each), and its mass at +inf is ``1 - prod (1 -
    inf_k)^{n_k}``: both exact for the per-component PLDs, so no FFT round-off
    enters (:func:`jaxacct.accounting.mixtures.composed_extreme`). Components
    known only by RDP: epsilon(0) = inf; delta(inf) from the composed pair.
    """
    items, det, _ = self._screen([(leaf, n) for leaf, n in self._leaves if n > 0])
    if any(c.upper is None for c, _ in items) and quantity == "delta":
      c = self._compose_general()
      v = max(mixtures.inf_mass(c.upper.remove), mixtures.inf_mass(c.upper.add))
      return result(v, method=c.method, bound="upper", lower=0.0 if with_lower else None,
                    details=dict(c.details))
    ups = {d: mixtures.composed_extreme(
        quantity, [(getattr(c.upper, d) if c.upper is not None else None, n)
                   for c, n in items]) for d in ("remove", "add")}
    method = "pld" if all(c.upper is not None for c, _ in items) else "pld+rdp"
    if not with_lower:
      return result(max(ups.values()), method=method, bound="upper", details=det)
    lows = [(resolve(c.lower), n) for c, n in items if c.lower is not None]
    los = {d: min(ups[d], mixtures.composed_extreme(
        quantity, [(getattr(lo, d), n) for lo, n in lows])) for d in ups}
    return result(max(ups.values()), method=method, bound="upper",
                  lower=max(los.values()), by_direction={d: (ups[d], los[d]) for d in ups},
                  details=det)

  def get_delta_bounds(self, epsilon: float) -> DeltaResult:
    """Certified bracket on delta at ``epsilon`` (see :meth:`get_epsilon_bounds`).

    Bound: upper (``delta``) and lower (``lower``).
    """
    return self._query("delta", epsilon, with_lower=True)

  def _lower_allowance(self) -> float:
    """Mass the lower-side FFT may have aliased upward (per composition)."""
    return 2.0 * self._tail

  def _repeated_lower(self, quantity, value):
    """``(lower epsilon per direction, lower_scope)`` of a one-event ledger by the
    repeated-event engine (:func:`_repeated.lower_epsilons`); None otherwise."""
    live = [(leaf, n) for leaf, n in self._leaves if n > 0]
    items = self._screen(live)[0] if quantity == "epsilon" and len(live) == 1 else []
    if len(items) != 1 or items[0][0].lower is None:
      return None
    (comp, n), = items
    return (_repeated.lower_epsilons(resolve(comp.lower), n, value,
                                     self._tail, self._lower_allowance()), comp.lower_scope)

  def _lower_value(self, quantity, pld, value):
    """Certified lower epsilon (at delta ``value``) or delta (at epsilon ``value``)."""
    if quantity == "delta":
      return max(float(jpld.delta(pld, value)) - self._lower_allowance(), 0.0)
    d2 = min(value + self._lower_allowance(), 1.0 - 1e-15)
    return float(jpld.epsilon(pld, d2, rounding="down"))   # >= 0 (or +inf)

  # ----------------------------------------------------------- composition

  def composed_plds(self):
    """``(upper, lower)``: the composed ``PairPLD``s (lower may be None).

    Always the general FFT path (no shortcut), on this accountant's grid.
    Bound: upper is pessimistic (dominating), lower optimistic (dominated,
    up to ``2 * tail_mass`` of aliased delta).
    """
    try:
      c = self._compose_general()
      return c.upper, c.lower
    except WindowTooLarge as err:
      raise self._too_long(err) from None

  def _component(self, leaf) -> _composition.Component:
    compat = self._truncated != "jaxacct" and kind(leaf) == "truncated"
    key = (self._truncated, leaf) if compat else leaf
    try:
      hit = self._components.get(key)
    except TypeError:       # unhashable leaf: key by identity
      key = ("id", id(leaf), compat and self._truncated)
      hit = self._components.get(key)
    if hit is None:
      hit = _composition.build_component(leaf, self.neighboring_relation, step=self._step)
      if compat and hit.upper is not None:
        hit = mixtures.with_truncated_construction(hit, leaf, self._truncated, self._step)
      self._components[key] = hit
    return hit

  def _describe(self, items):
    return {"components": [(c.label, int(n)) for c, n in items],
            "neighboring_relation": _composition.relation_name(self.neighboring_relation)}

  def _screen(self, live):
    """``(items, details, answer)`` of the live leaves.

    ``items`` are the (component, count) pairs that are not no-ops; ``answer``
    is the whole composition when it is trivial (non-private, or nothing
    left), else None.
    """
    items = [(self._component(leaf), n) for leaf, n in live]
    det = self._describe(items)
    if any(c.nonprivate for c, _ in items):
      return items, det, _Composed(method="non_private", nonprivate=True, details=det)
    items = [(c, n) for c, n in items if not c.noop]
    if not items:
      return items, det, _Composed(method="none", empty=True, details=det)
    return items, det, None

  def _compose_all(self) -> _Composed:
    if self._composed is not None:
      return self._composed
    live = [(leaf, n) for leaf, n in self._leaves if n > 0]
    if not live:
      self._composed = _Composed(method="none", empty=True)
      return self._composed
    if self._shortcuts:   # a ledger one scheme's own door answers (_scheme_doors)
      door = scheme_door(live, self.neighboring_relation, self._step)
      if door is not None:
        self._composed = _Composed(method=door.method, door=door, details=door.details,
                                   lower_fn=lambda: self._lower_of(self._screen(live)[0]))
        return self._composed
    g = _final_rule.gaussian_ledger(live, self.neighboring_relation) if self._shortcuts else None
    if g is not None:   # Gaussians only: the closed form, no PLD built
      self._composed = _Composed(method="gaussian_exact", exact_mu=g[0],
                                 details=dict(self._describe(g[1]), lower_scope="mechanism"))
      return self._composed
    items, det, done = self._screen(live)
    if done is not None:
      self._composed = done
      return done
    if self._shortcuts and all(c.gaussian_mu is not None for c, _ in items):
      mu = _final_rule.composed_mu((c.gaussian_mu, n) for c, n in items)
      self._composed = _Composed(method="gaussian_exact", exact_mu=mu,
                                 details=dict(det, lower_scope="mechanism"))
      return self._composed
    self._composed = self._compose_general()
    return self._composed

  def _compose_general(self) -> _Composed:
    if self._composed_pld is not None:
      return self._composed_pld
    live = [(leaf, n) for leaf, n in self._leaves if n > 0]
    items, det, done = self._screen(live)
    if done is not None:
      self._composed_pld = done
      return done
    ups, counts = [], []
    rdp_total = None
    for c, n in items:
      if c.upper is not None:
        ups.append(c.upper)
        counts.append(n)
      elif c.rdp is not None:
        rdp_total = c.rdp * n if rdp_total is None else rdp_total + c.rdp * n
      else:  # pragma: no cover - every builder gives one or the other
        raise UnsupportedEventError(f"no PLD and no RDP for {c.label}.")
    method = "pld"
    if rdp_total is not None:
      ups.append(rdp_pair(rdp_total, step=self._step))
      counts.append(1)
      method = "pld+rdp"
    # both directions at one FFT length: one compiled composition and one
    # query program per length, not two (a longer window for one direction
    # is still an upper bound; it moves epsilon by ~1e-10 relative)
    size = None
    if not (len(ups) == 1 and counts[0] == 1):
      size = max(_repeated.composition_window([getattr(u, d) for u in ups], counts, None,
                                                 self._tail)
                 for d in ("remove", "add"))
    def compose_upper():
      return jpld.PairPLD(*[self._compose([getattr(u, d) for u in ups], counts, size=size)
                            for d in ("remove", "add")])
    det.update(rdp_fallback=rdp_total is not None)
    one = len(ups) == 1   # one event repeated: the engine answers; the PLD only if asked
    self._composed_pld = _Composed(method=method, upper=None if one else compose_upper(),
                                   upper_fn=compose_upper if one else None,
                                   lower_fn=lambda: self._lower_of(items), details=det,
                                   repeated=(ups[0], counts[0]) if one else None)
    return self._composed_pld

  def _lower_of(self, items):
    """``(lower PairPLD or None, {"lower_scope": ...})`` of the (component, count) items."""
    lows = [(resolve(c.lower), n) for c, n in items if c.lower is not None]
    lower = None
    if lows:
      lower = jpld.PairPLD(*[self._compose([getattr(lo, d) for lo, _ in lows],
                                           [n for _, n in lows]) for d in ("remove", "add")])
    scopes = {c.lower_scope if c.lower is not None else "none" for c, _ in items}
    scope = ("reduction" if "reduction" in scopes else
             "partial" if "none" in scopes else "mechanism")
    return lower, {"lower_scope": scope}

  def _compose(self, plds, counts, size=None):
    if len(plds) == 1 and counts[0] == 1:
      return plds[0]
    size = _repeated.composition_window(plds, counts, size, self._tail)
    return jpld.compose_many(plds, counts, size=size, tail_mass=self._tail)

  # ------------------------------------------------------------- utilities

  def _reset(self):
    """Empties the ledger (settings and the per-event PLD cache are kept)."""
    dp_bridge.PrivacyAccountantBase.__init__(self, self.neighboring_relation)
    self._leaves, self._history = [], []
    self._composed = self._composed_pld = None

  def copy(self) -> "PLDAccountant":
    """An accountant with the same settings and ledger (per-event PLDs shared)."""
    new = type(self)(self.neighboring_relation, self._step,
                     tail_mass=self._tail, shortcuts=self._shortcuts,
                     component_cache=self._components, truncated=self._truncated)
    for e, n in self._history:
      new.compose(e, n)
    return new

  def epsilons_for_counts(self, event, counts, delta: float, *, on_count=None) -> np.ndarray:
    """``get_epsilon(delta)`` after composing ``event`` c times onto this ledger, per c.

    One vectorised evaluation (:func:`jaxacct.accounting._repeated.epsilons_for_counts`):
    on an empty ledger each entry is ``self.copy().compose(event, c).get_epsilon(delta)``
    to the last bit; onto a ledger, to the FFT round-off. Does not change this
    accountant.

    Args:
      event: a supported event. counts: ints >= 0. delta: in (0, 1).
      on_count: None or a callable, called once per count (progress).

    Returns: float64 numpy array of ``counts``' shape.

    Bound: upper.
    """
    return _repeated.epsilons_for_counts(self, event, counts, delta, on_count=on_count)

  def would_exceed(self, event, max_epsilon: float, delta: float) -> bool:
    """Whether composing ``event`` would push epsilon at ``delta`` above ``max_epsilon``.

    Does not change this accountant (composes a copy). Raises
    ``UnsupportedEventError`` if ``event`` is not supported.

    Valid for a schedule fixed in advance: stopping at the first event this
    returns True for, with ``get_epsilon`` of the events composed so far
    reported as the run's guarantee, is sound when the sequence of events
    (noise, sampling rate, batch size, count) was chosen before seeing any
    output. If later events are chosen from earlier outputs, this natural
    stopping rule is not valid: the natural f-DP stopping rule (stop when
    the composed trade-off reaches the target) is invalid under adaptive
    choices (arXiv:2602.06756); use a privacy filter/odometer analysis
    instead. ``jaxacct.tracking.track_privacy``'s
    budget stop has the same scope.

    Bound: decided on the certified upper bound.
    """
    checks.check_range("max_epsilon", max_epsilon, 0.0, np.inf, allow_inf=True)
    checks.check_delta(delta)
    return self.copy().compose(event).get_epsilon(delta) > float(max_epsilon)

  def tpr_at_fpr(self, fpr, *, direction: str = "both"):
    """Membership-inference view: TPR bounds at false-positive rates ``fpr``.

    See ``jaxacct.accounting._tradeoff.tpr_at_fpr``; computed from
    :meth:`composed_plds`. Returns ``TradeOff(fpr, upper, lower)``.
    """
    up, lo = self.composed_plds()
    return _tradeoff.tpr_at_fpr(up, lo, fpr, direction=direction,
                            lower_allowance=self._lower_allowance())

  def gdp_mu(self, *, delta_floor: float = 1e-12):
    """mu-GDP bracket of the composition (``jaxacct.accounting._tradeoff.gdp_mu``)."""
    up, lo = self.composed_plds()
    return _tradeoff.gdp_mu(up, lo, delta_floor=delta_floor,
                        lower_allowance=self._lower_allowance())

  def state_dict(self) -> dict:
    """JSON-serialisable state (``jaxacct.accounting._state.state_dict``)."""
    return _state.state_dict(self)

  def load_state_dict(self, sd: dict) -> "PLDAccountant":
    """Replaces this accountant's ledger by ``sd``'s (settings must match).

    The events are decoded first (nothing changes if that fails), then the
    ledger is emptied and they are composed again.
    """
    decoded = _state.decode_state(self, sd)
    self._reset()
    for e, n in decoded:
      self.compose(e, n)
    return self
