r"""Support checks and components of dp_accounting 0.6.0's newer events.

``jaxacct.accounting._composition`` handles the standard events of
dp_accounting 0.4 (and jaxacct's own); this module adds the rest of
dp_accounting 0.6.0's ``dp_event`` module (pairs in
:mod:`jaxacct.accounting.mixtures`):

=====================================  ==========================  =====================
event                                  relations                   accounted by
=====================================  ==========================  =====================
DiscreteLaplaceDpEvent                 ADD_OR_REMOVE, SPECIAL      exact PLD (both sides)
MixtureOfGaussiansDpEvent              ADD_OR_REMOVE, SPECIAL      PLD, certified lower
TruncatedSubsampledGaussianDpEvent     ADD_OR_REMOVE               PLD, certified lower
SampledWithReplacementDpEvent(Gauss.)  REPLACE_ONE, SPECIAL        PLD, certified lower [#]
SingleEpochTreeAggregationDpEvent      REPLACE_SPECIAL             Gaussian (exact)
RepeatAndSelectDpEvent                 --                          refused (reason given)
=====================================  ==========================  =====================

[#] REPLACE_ONE: :mod:`jaxacct.accounting.fixed_size` (a symmetric pair
that is exact for one step up to the revealed draw count); REPLACE_SPECIAL:
:func:`jaxacct.accounting.mixtures.with_replacement_gaussian`.

The relation rules follow dp_accounting's PLD accountant where it has one
(its error texts are kept: "neighboring_relation must be ..."), and its RDP
accountant for tree aggregation.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from jaxacct import pld as jpld
from jaxacct._core.events import kind
from jaxacct.accounting import _mechanisms, events, fixed_size, mixtures

AOR, REPLACE, SPECIAL = "ADD_OR_REMOVE_ONE", "REPLACE_ONE", "REPLACE_SPECIAL"
KINDS = ("discrete_laplace", "mog", "truncated", "with_replacement", "tree",
         "repeat_and_select")


class Unsupported(Exception):
  """An event this accountant cannot account for: the message and the culprit."""

  def __init__(self, msg, event=None):
    super().__init__(msg)
    self.event = event


def from_dp_random_allocation(event):
  """Our RandomAllocationDpEvent from dp_accounting's (fields read by name)."""
  def get(*names, default=None):
    for n in names:
      if hasattr(event, n):
        return getattr(event, n)
    return default
  sigma = get("noise_multiplier", "sigma")
  t = get("num_steps")
  if sigma is None or t is None:
    raise ValueError("dp_accounting's RandomAllocationDpEvent has no "
                     "noise_multiplier/num_steps field this version reads.")
  return events.RandomAllocationDpEvent(
      noise_multiplier=float(sigma), steps_per_epoch=int(t),
      num_selected=int(get("num_selected", default=1)),
      num_epochs=int(get("num_epochs", default=1)))


def need_relation(event, rel, allowed, why):
  """Raises :class:`Unsupported` with dp_accounting's wording unless ``rel`` is allowed."""
  if rel in allowed:
    return
  names = " or ".join(f"`{a}`" for a in allowed)
  raise Unsupported(f"neighboring_relation must be {names} for "
                    f"`{type(event).__name__}` ({why}). Found {rel}.", event)


def _real(event, name, lo=0.0, hi=math.inf):
  v = getattr(event, name)
  try:
    f = float(v)
  except (TypeError, ValueError):
    raise Unsupported(f"{name} must be a real number; got {v!r}.", event) from None
  if not lo <= f <= hi:
    raise Unsupported(f"{name} must be in [{lo}, {hi}]; got {v!r}.", event)
  return f


def _int(event, name, lo=0):
  v = getattr(event, name)
  if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
    raise Unsupported(f"{name} must be an int >= {lo}; got {v!r}.", event)
  return int(v)


def _mog_fields(event):
  sigma = _real(event, "standard_deviation")
  try:
    c = np.asarray(event.sensitivities, np.float64).ravel()
    p = np.asarray(event.sampling_probs, np.float64).ravel()
  except (TypeError, ValueError):
    raise Unsupported("sensitivities and sampling_probs must be sequences of "
                      "numbers.", event) from None
  if c.size == 0 or c.size != p.size:
    raise Unsupported("sensitivities and sampling_probs must be non-empty and of "
                      f"the same length; got {c.size} and {p.size}.", event)
  if np.any(~np.isfinite(c)) or np.any(c < 0):
    raise Unsupported("sensitivities must be finite and >= 0.", event)
  if np.any(~(p > 0)) or np.any(p > 1) or not math.isclose(float(p.sum()), 1.0,
                                                           rel_tol=1e-9):
    raise Unsupported("sampling_probs must be in (0, 1] and sum to 1.", event)
  return sigma, c, p


def _check_wr(event):
  _int(event, "source_dataset_size", 1)
  _int(event, "sample_size")
  if kind(event.event) != "gaussian":
    raise Unsupported("the sub-event of SampledWithReplacementDpEvent must be a "
                      f"GaussianDpEvent; found {event.event}.", event.event)
  _real(event.event, "noise_multiplier")


#: event kind (:func:`jaxacct._core.events.kind`) -> (the neighbouring
#: relations analysed, why the others are refused, the field checks).
_LEAVES = {
    "discrete_laplace": (
        (AOR, SPECIAL),
        "no replace-one analysis of the discrete Laplace mechanism is implemented",
        lambda e: (_real(e, "noise_parameter"), _int(e, "sensitivity"))),
    "mog": (
        (AOR, SPECIAL),
        "the event defines the pair N(0) vs the mixture, an add/remove pair", _mog_fields),
    "truncated": (
        (AOR,),
        "truncated Poisson sampling is analysed here for add/remove neighbours only",
        lambda e: (_int(e, "dataset_size"), _real(e, "sampling_probability", 0.0, 1.0),
                   _int(e, "truncated_batch_size"), _real(e, "noise_multiplier"))),
    "with_replacement": (
        (REPLACE, SPECIAL),
        "a fixed-size batch: the dataset size must not change", _check_wr),
    "tree": (
        (SPECIAL,),
        "tree aggregation restarts at fixed steps; a record's leaf must not move "
        "(as dp_accounting's RDP accountant)",
        lambda e: (_real(e, "noise_multiplier"), _tree_depth(e))),
}


def leaf_kind(k, event, rel) -> Optional[str]:
  """``k`` when ``event`` (of kind ``k``) is one of this module's events,
  validated for ``rel``; else None."""
  if k in _LEAVES:
    allowed, why, check = _LEAVES[k]
    need_relation(event, rel, allowed, why)
    check(event)
    return k
  if k == "repeat_and_select":
    raise Unsupported(
        "RepeatAndSelectDpEvent has no known privacy loss distribution; its "
        "bound (Papernot & Steinke, arXiv:2110.03620) is stated in RDP of the "
        "repeated mechanism, which this accountant does not track.", event)
  return None


def _tree_depth(event) -> int:
  sc = event.step_counts
  counts = [sc] if np.isscalar(sc) else list(sc)
  if not counts or any(isinstance(x, bool) or not isinstance(x, (int, np.integer))
                       or x < 0 for x in counts):
    raise Unsupported("step_counts must be an int >= 0 or a non-empty list of "
                      f"them; got {sc!r}.", event)
  return int(math.ceil(math.log2(max(counts) + 1)))



def build(k, event, rel, step) -> dict:
  """Fields of the ``Component`` (``jaxacct.accounting._composition``) of a leaf.

  ``lower_fn`` (when present) builds the lower pair on first use.
  """
  h = float(step)
  if k == "discrete_laplace":
    a, s = float(event.noise_parameter), int(event.sensitivity)
    label = f"discrete_laplace(a={a:g}, s={s})"
    if s == 0:
      return dict(label=label, noop=True)
    if a == 0:
      return dict(label=label, nonprivate=True)
    return dict(label=label, upper=mixtures.discrete_laplace(a, s, step=h),
                lower_fn=lambda: mixtures.discrete_laplace(a, s, step=h, pessimistic=False),
                lower_scope="mechanism")
  if k == "mog":
    sigma, c, p = _mog_fields(event)
    label = f"mixture_of_gaussians(sigma={sigma:g}, {c.size} components)"
    if float(c.max()) == 0.0:
      return dict(label=label, noop=True)
    if sigma == 0:
      return dict(label=label, nonprivate=True)
    return dict(label=label, upper=mixtures.mixture_of_gaussians(sigma, c, p, step=h),
                lower_fn=lambda: mixtures.mixture_of_gaussians(sigma, c, p, step=h,
                                                         pessimistic=False),
                lower_scope="mechanism")
  if k == "truncated":
    n, q = int(event.dataset_size), float(event.sampling_probability)
    b, s = int(event.truncated_batch_size), float(event.noise_multiplier)
    label = f"truncated_poisson_gaussian(n={n}, q={q:g}, b={b}, sigma={s:g})"
    if q == 0 or b == 0 or n == 0:
      return dict(label=label, noop=True)
    if s == 0:
      return dict(label=label, nonprivate=True)
    return dict(label=label, upper=mixtures.truncated_poisson_gaussian(n, q, b, s, step=h),
                lower_fn=lambda: mixtures.truncated_poisson_gaussian(n, q, b, s, step=h,
                                                               pessimistic=False),
                lower_scope="mechanism")
  if k == "with_replacement":
    n, m = int(event.source_dataset_size), int(event.sample_size)
    s = float(event.event.noise_multiplier)
    label = f"sampled_with_replacement({m} of {n}, gaussian({s:g}))"
    if m == 0:
      return dict(label=label, noop=True)
    if s == 0:
      return dict(label=label, nonprivate=True)
    if rel == REPLACE:   # jaxacct.accounting.fixed_size: symmetric pair
      return dict(label=label + " [pld: symmetric pair, draw count hidden]",
                  upper=fixed_size.with_replacement_pair(n, m, s, step=h),
                  lower_fn=lambda: fixed_size.with_replacement_pair(n, m, s, step=h,
                                                            pessimistic=False),
                  lower_scope="mechanism")
    return dict(label=label, upper=mixtures.with_replacement_gaussian(n, m, s, step=h,
                                                                special_record=True),
                lower_fn=lambda: mixtures.with_replacement_gaussian(
                    n, m, s, step=h, special_record=True, pessimistic=False),
                lower_scope="mechanism")
  if k == "tree":
    # each record sits in one leaf of one tree, so in <= depth nodes, each
    # with its own N(0, sigma^2) noise: a Gaussian mechanism of L2
    # sensitivity sqrt(depth) (Kairouz et al., arXiv:2103.00039v3, App. D)
    depth, s = _tree_depth(event), float(event.noise_multiplier)
    label = f"tree_aggregation(sigma={s:g}, depth={depth})"
    if depth == 0:
      return dict(label=label, noop=True)
    if s == 0:
      return dict(label=label, nonprivate=True)
    se = s / math.sqrt(depth)
    g = jpld.gaussian(se, step=h, pessimistic=True)
    return dict(label=label, upper=jpld.PairPLD(g, g),
                lower_fn=lambda: _pair(_mechanisms.gaussian_lower(se, step=h)),
                lower_scope="mechanism", gaussian_mu=1.0 / se)
  raise ValueError(f"unknown kind {k!r}")  # pragma: no cover


def _pair(p: Any):
  return p if isinstance(p, jpld.PairPLD) else jpld.PairPLD(p, p)
