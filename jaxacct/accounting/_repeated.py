"""One event repeated: the accountant's numbers for every count at once.

A ledger that is one event composed ``n`` times is answered by the
repeated-event engine (:mod:`jaxacct.pld._powers`, powers of one spectrum),
which gives a count's epsilon independently of the other counts asked; so
:func:`epsilons_for_counts` (a table over counts, the tracker's) equals the
accountant's ``get_epsilon`` count by count, to the last bit, on an empty
ledger. Bound: upper (the accountant's).
"""

from __future__ import annotations

import math

import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import checks
from jaxacct._core.checks import OneStepTooLarge, WindowTooLarge
from jaxacct._core.dtype import side_by_side
from jaxacct.accounting._scheme_doors import scheme_door


def direction_values(quantity, repeated, value, tail_mass, rounding="up") -> dict:
  """Per direction: epsilon at delta ``value`` (or delta at epsilon ``value``)
  after ``repeated = (PairPLD of one event, count)``. Where the engine's tilt gives
  no number (delta next to 1), the FFT composition's query (``rounding``) does."""
  pair, n = repeated

  def one(pld):
    if quantity != "epsilon":
      return jpld.direction_delta(pld, int(n), value, tail_mass=tail_mass)
    v = float(jpld.direction_epsilons(pld, [int(n)], value, tail_mass=tail_mass)[0])
    if math.isnan(v):
      v = float(jpld.epsilon(jpld.compose(pld, int(n), tail_mass=tail_mass), value,
                             rounding=rounding))
    return v

  if pair.add is pair.remove:   # a symmetric pair: one PLD, one number
    v = one(pair.remove)
    return {"remove": v, "add": v}
  # the two directions share nothing: side by side
  rem, add = side_by_side(lambda: one(pair.remove), lambda: one(pair.add))
  return {"remove": rem, "add": add}


def lower_epsilons(pair, n, delta, tail_mass, allowance) -> dict:
  """Per direction, a certified lower epsilon at ``delta`` after ``n`` repetitions of
  the lower (optimistic) ``pair``, by the repeated-event engine (no FFT program).

  The engine moves at most ``tail_mass`` a side to +inf (so it is queried at delta
  plus ``allowance``) and rounds up by 1e-12 relative (taken back by a 1e-10
  relative margin): below the pair's composed epsilon, itself below the true one."""
  d2 = min(delta + allowance, 1.0 - 1e-15)
  vals = direction_values("epsilon", (pair, n), d2, tail_mass, rounding="down")
  out = {}
  for d, v in vals.items():
    # the engine reads +inf past what it resolves (docs/bounds/tracking.md, "Range"):
    # a lower only where the pair's mass at +inf itself reaches delta, else none (0)
    at_inf = -math.expm1(n * math.log1p(-min(float(getattr(pair, d).inf_mass), 1.0 - 1e-16)))
    out[d] = 0.0 if math.isinf(v) and not at_inf > d2 else max(v * (1.0 - 1e-10), 0.0)
  return out


def epsilons_for_counts(acc, event, counts, delta, *, on_count=None) -> np.ndarray:
  """``acc.copy().compose(event, c).get_epsilon(delta)`` for every count c.

  Empty ledger: the path the accountant takes for ``(event, c)`` (the Poisson
  door, the Gaussian closed form, or the repeated-event engine), vectorised
  over the counts, bitwise the accountant's. Onto a ledger: the engine on the
  event's pair composed onto the ledger's composed pair (equal to the
  accountant's composition of the whole ledger to its FFT round-off, about
  1e-10 relative); a non-private ledger or event: the accountant's answer.
  """
  checks.check_delta(delta)
  c = np.asarray(counts)
  # counts past 2^53 are not exact in float64 and wrap around in int64 (a count of
  # 2^63 read as 0 gave epsilon 0): refused, as the engines' windows are
  checks.check_int("counts", c, min_value=0, max_value=2**53)
  flat = c.ravel().astype(np.int64)
  out = np.zeros(flat.size)
  pos = np.flatnonzero(flat > 0)
  if pos.size:
    want, inv = np.unique(flat[pos], return_inverse=True)
    out[pos] = _positive(acc, event, want, float(delta))[inv]
  if np.any(flat == 0):
    out[flat == 0] = acc.get_epsilon(delta)
  if on_count is not None:
    for _ in range(flat.size):
      on_count()
  return out.reshape(c.shape)


def _positive(acc, event, counts, delta):
  """Epsilons after each of ``counts`` (sorted, unique, >= 1)."""
  def each():
    return np.array([acc.copy().compose(event, int(n)).get_epsilon(delta) for n in counts])
  one = acc.copy().compose(event, 1)
  if not acc.events:
    method = one.method
    if method == "poisson_pld":
      door = scheme_door([(event, 1)], acc.neighboring_relation,
                         acc.value_discretization_interval)
      return each() if door is None or door.counts is None else door.counts(counts, delta)
    if method in ("pld", "pld+rdp"):
      return jpld.pair_epsilons(one.composed_plds()[0], counts, delta,
                                tail_mass=acc.tail_mass)
    return each()
  fresh = type(acc)(acc.neighboring_relation, acc.value_discretization_interval,
                    tail_mass=acc.tail_mass, shortcuts=acc.shortcuts, truncated=acc.truncated)
  pair = fresh.compose(event).composed_plds()[0]
  ledger = acc.composed_plds()[0]
  if pair is None or ledger is None or math.isinf(acc.get_epsilon(delta)):
    return each()
  return jpld.pair_epsilons(pair, counts, delta, factor=ledger, tail_mass=acc.tail_mass)


def composition_window(plds, counts, size, tail_mass) -> int:
  """``compose_many``'s FFT length for ``plds`` composed ``counts`` times (``size`` if
  given), or ``WindowTooLarge`` when over ``jaxacct.pld.MAX_WINDOW`` points or when
  the composed loss indices pass 2^53: refused before anything is allocated (at
  2^50 counts the window would be 3e15 points: an int32 overflow in the program)."""
  span = sum(int(n) * (int(np.shape(p.probs)[0]) + abs(int(p.offset))) for p, n in
             zip(plds, counts))
  if span < 2**53 and size is None:
    size = jpld.window_size(plds, counts, tail_mass=tail_mass)
  if span >= 2**53 or size > jpld.MAX_WINDOW:
    points = float(span if span >= 2**53 else size)
    raise WindowTooLarge(f"counts {list(map(int, counts))}: a window of {points:.3g} grid "
                         "points", points=points)
  return int(size)


def too_long(history, step, err) -> WindowTooLarge:
  """An engine's ``WindowTooLarge`` restated naming ``count`` and the ledger
  (``history``: the accountant's (event, count) pairs, what the user composed); one
  step's own grid (``OneStepTooLarge``) as it is: it names that step's parameter."""
  if isinstance(err, OneStepTooLarge):
    return err
  ledger = ", ".join(f"{type(e).__name__} x {n}" for e, n in history)
  return WindowTooLarge(
      f"count: the ledger ({ledger}) is too long for this accountant's PLDs at "
      f"value_discretization_interval={step:g}: its composition needs more than "
      f"{jpld.MAX_WINDOW} grid points (jaxacct's PLD limit; {err}). Compose fewer "
      "times, use a coarser value_discretization_interval, or an RDP accountant "
      "(e.g. jaxacct.poisson.epsilon(method='rdp') for Poisson-subsampled Gaussian "
      "steps: a valid upper bound at any count).", points=err.points)
