r"""The sampler record, the registry, and the schedule checks samplers share."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import numpy as np

from jaxacct._core import checks
from jaxacct._core.dtype import side_by_side, x64_boundary
from jaxacct._core.results import EpsilonResult
from jaxacct._core.units import warn_renamed
from jaxacct import accounting
from jaxacct.accounting import evaluator


class Schedule(NamedTuple):
  """Step counts implied by a DP-SGD configuration (see :func:`jaxacct.dpsgd.schedule`).

  Attributes:
    sampling: the sampler's registered name (:func:`names`).
    num_examples: N. batch_size: B (expected batch size for rate samplers).
    num_epochs: E (a float for rate samplers given ``total_steps``).
    num_selected: k (balls_in_bins; 1 otherwise).
    steps_per_epoch: t (samplers with a fixed number of steps per epoch);
      None for rate samplers (their steps are independent; an epoch is N/B
      steps on average).
    total_steps: T, the number of noisy updates.
    sampling_probability: q = B/N for rate samplers; None otherwise
      (``sampling_rate``: its deprecated name, for one release).
    settings: the sampler's own options (an instance of its
      :attr:`Sampler.settings` dataclass), or None for a sampler without any.
  """
  sampling: str
  num_examples: int
  batch_size: float
  num_epochs: float
  num_selected: int
  steps_per_epoch: Optional[int]
  total_steps: int
  sampling_probability: Optional[float]
  settings: Any = None

  @property
  def sampling_rate(self) -> Optional[float]:
    """Deprecated alias of ``sampling_probability``, for one release."""
    warn_renamed("jaxacct.dpsgd.Schedule", "sampling_rate", "sampling_probability")
    return self.sampling_probability


class Request(NamedTuple):
  """A DP-SGD configuration as given, after the shared checks of
  :func:`jaxacct.dpsgd.schedule`: what :attr:`Sampler.schedule` reads."""
  num_examples: int
  batch_size: Any
  num_epochs: Any
  total_steps: Any
  num_selected: int
  settings: Any


@x64_boundary   # one entry: its evaluations (result, plds) run under float64
@dataclasses.dataclass(frozen=True, kw_only=True)
class Sampler:
  """One batch sampler of DP-SGD, registered once (:func:`register`).

  Attributes:
    name: the ``sampling=`` value (and ``jaxacct dpsgd --sampling``).
    label: the plot legend.
    text: the statement's sentence describing the sampler.
    schedule: ``Request -> Schedule``, after the shared checks of
      :func:`jaxacct.dpsgd.schedule` (N an int >= 1, k an int >= 1, exactly
      one of ``num_epochs`` and ``total_steps``, the settings built); raises
      ValueError naming the parameter.
    event: ``(schedule, noise_multiplier) -> DpEvent`` of the run: the one
      place the run's event is built; its certified epsilon is the
      evaluator's (:func:`jaxacct.accounting.evaluator.bracket`). It checks
      the noise multiplier's sign (the dpsgd doors check only that it is a
      finite number): build a Gaussian step with :func:`gaussian`.
    event_lower: whether the evaluator's lower of :attr:`event` bounds the
      run (False where the event is only an upper-bound stand-in, as
      shuffle's no amplification).
    lower: ``(schedule, sigma, delta) -> (lower array or None, source)``: a
      lower bound of the sampler's own (flat arrays); the run's lower is the
      larger of it and the event's; None: none.
    caps: ``(schedule, sigma, delta) -> ((gap, cap), ...)``: a capped sampler's
      smallest caps within each relative gap of untruncated Poisson (the
      statement prints them); None.
    block: ``(schedule, noise_multiplier) -> (event, options)``: the event of
      one block the run composes (an epoch or a step) and the
      :class:`jaxacct.tracking.EventAccountant` options that place it
      (``block_size``, ``evaluate_every``), for :mod:`jaxacct.tracking` and
      :mod:`jaxacct.sampling`; None: no tracker.
    risk: ``(schedule, sigma, want_lower) -> (upper PairPLD or None, lower
      PairPLD or None)`` for :mod:`jaxacct.risk`; None: the accountant's
      composed PLDs of :attr:`event`.
    no_amplification: ``schedule -> m`` when the run is a post-processing
      of m full-batch Gaussian steps (risk takes the smaller trade-off); None.
    gdp_rate: ``schedule -> q``, the rate of the Gaussian-DP (CLT) model that
      starts risk calibration; None when the run is exactly mu-GDP with mu =
      sqrt(m) / sigma (m from :attr:`no_amplification`).
    relations: the neighbouring relations the accounting covers.
    accounted: the relation :attr:`event` is accounted under (the statement
      rescales sigma by the sensitivity for the others).
    relation_names: what a relation option is where the sampler's accounting
      of it is narrower than its name (shuffle: ``{"add_remove": "zero_out"}``).
    settings: the frozen dataclass of the sampler's own options (its fields
      are keywords of the dpsgd doors and flags of ``jaxacct dpsgd``); None.
    options: the optional configuration parameters it takes
      (``"num_selected"``, ``"total_steps"``, and its settings' fields).
    steps_rule: the rule giving t (error messages), e.g. ``"floor(N / B)"``.
    comparison_is_run: the statement's Poisson comparison row is this run.
    in_default_plot: drawn by :func:`jaxacct.plot.epsilon` by default.
    rdp_poisson: ``schedule -> (q, divisor, steps)``: ``steps`` Poisson-subsampled
      Gaussian steps at rate q and noise multiplier ``noise_multiplier / divisor``
      that are the run's event or dominate it, so their RDP bound
      (``jaxacct.poisson.epsilon(method="rdp")``, valid at any count) bounds
      the run; the refusal of a run too long for the PLD names it. None.
  """
  name: str
  label: str
  text: str
  schedule: Callable
  event: Callable
  event_lower: bool = True
  lower: Optional[Callable] = None
  caps: Optional[Callable] = None
  block: Optional[Callable] = None
  risk: Optional[Callable] = None
  no_amplification: Optional[Callable] = None
  gdp_rate: Optional[Callable] = None
  relations: Tuple[str, ...] = ("add_remove",)
  accounted: str = "add_remove"
  relation_names: Dict[str, str] = dataclasses.field(default_factory=dict)
  settings: Optional[type] = None
  options: Tuple[str, ...] = ()
  steps_rule: str = "floor(N / B)"
  comparison_is_run: bool = False
  in_default_plot: bool = False
  rdp_poisson: Optional[Callable] = None

  def result(self, sched: Schedule, noise_multiplier, delta):
    """The run's ``EpsilonResult`` at ``noise_multiplier`` and ``delta`` broadcast
    together (checked by the caller): the evaluator's bracket of :attr:`event`,
    with :attr:`lower` beside it; floats for scalars, arrays else;
    ``details["schedule"]``."""
    sigma, dl = np.broadcast_arrays(np.asarray(noise_multiplier, np.float64),
                                    np.asarray(delta, np.float64))
    shape, sigma, dl = sigma.shape, sigma.ravel().copy(), dl.ravel().copy()
    # more noise is a post-processing: above checks.SIGMA_MAX the answer there
    # bounds the run (upper; its lower is 0)
    big = sigma > checks.SIGMA_MAX
    sigma = np.where(big, checks.SIGMA_MAX, sigma)
    events = [self.event(sched, float(s)) for s in sigma]
    if self.lower is None:
      b = evaluator.bracket(events, dl)
    else:   # the sampler's own lower (host work) beside the evaluator's bracket
      b, (own, source) = side_by_side(lambda: evaluator.bracket(events, dl),
                                      lambda: self.lower(sched, sigma, dl))
    lo, details = (b.lower if self.event_lower else None), dict(b.details)
    if self.lower is not None:
      details["lower_source"] = source
      if own is not None:
        lo = own if lo is None else np.fmax(lo, own)
    if lo is not None:
      lo = np.where(big, 0.0, np.minimum(lo, b.upper))
    out = lambda v: _shaped(v, shape)
    details = {k: (out(v) if isinstance(v, np.ndarray) else v) for k, v in details.items()}
    details["schedule"] = sched
    return EpsilonResult(epsilon=out(b.upper), delta=delta, method=b.method, bound="upper",
                         lower=None if lo is None else out(lo), details=details)

  def plds(self, sched: Schedule, sigma: float, want_lower: bool):
    """``(upper PairPLD or None, lower PairPLD or None)`` of the run."""
    if self.risk is not None:
      return self.risk(sched, sigma, want_lower)
    up, lo = evaluator.accountant_for(self.event(sched, sigma)).composed_plds()
    return up, (lo if want_lower else None)


_REGISTRY: Dict[str, Sampler] = {}


def register(sampler: Sampler) -> Sampler:
  """Registers ``sampler`` under its name (a name registered twice is refused)."""
  if not isinstance(sampler, Sampler):
    raise ValueError(f"sampler must be a jaxacct.dpsgd.Sampler; got {sampler!r}.")
  if not isinstance(sampler.name, str) or not sampler.name.isidentifier():
    raise ValueError(f"sampler.name must be an identifier string; got {sampler.name!r}.")
  if sampler.name in _REGISTRY:
    raise ValueError(f"a sampler named {sampler.name!r} is already registered.")
  if sampler.settings is not None:
    fields = tuple(f.name for f in dataclasses.fields(sampler.settings))
    sampler = dataclasses.replace(sampler, options=tuple(dict.fromkeys(sampler.options + fields)))
  _REGISTRY[sampler.name] = sampler
  return sampler


def unregister(name: str) -> None:
  """Removes the sampler registered as ``name`` (a stand-in's test cleans up)."""
  get(name)
  del _REGISTRY[name]


def names() -> Tuple[str, ...]:
  """The registered sampling names, in registration order."""
  return tuple(_REGISTRY)


def get(name) -> Sampler:
  """The sampler registered as ``name`` (ValueError naming ``sampling`` else)."""
  checks.check_choice("sampling", name, names())
  return _REGISTRY[name]


# ---------------------------------------------------------------------------
# the schedule checks samplers share
# ---------------------------------------------------------------------------

def check_number(name, x):
  """ValueError naming ``name`` unless ``x`` is a number (not str, bytes, bool)."""
  if isinstance(x, (str, bytes)) or isinstance(x, bool):
    raise ValueError(f"{name} must be a number; got {x!r}.")


def epoch_schedule(name, req: Request, t, k=1) -> Schedule:
  """t fixed steps per epoch (``t(B)`` a callable of the checked int B), E
  int epochs: T = t E."""
  n, batch_size, num_epochs, total_steps = (req.num_examples, req.batch_size,
                                            req.num_epochs, req.total_steps)
  if total_steps is not None:
    raise ValueError(f"total_steps applies to rate samplers (sampling='poisson') only; "
                     f"with sampling={name!r} give num_epochs (T = steps_per_epoch * "
                     f"num_epochs); got total_steps={total_steps!r}.")
  checks.check_int("batch_size", batch_size, min_value=1, max_value=n)
  check_number("num_epochs", num_epochs)
  checks.check_int("num_epochs", num_epochs, min_value=1)
  B, E = int(batch_size), int(num_epochs)
  steps = int(t(B))
  if steps < k:
    raise ValueError(f"num_selected must be <= steps_per_epoch = floor(k N / B) = {steps}; "
                     f"got num_selected={k}.")
  return Schedule(name, n, float(B), float(E), k, steps, steps * E, None, req.settings)


def rate_schedule(name, req: Request) -> Schedule:
  """Independent steps at rate q = B / N: T = ceil(E N / B) (or ``total_steps``
  as given; then E = T B / N)."""
  n, batch_size, num_epochs, total_steps = (req.num_examples, req.batch_size,
                                            req.num_epochs, req.total_steps)
  checks.check_range("batch_size", batch_size, 0.0, n, lo_open=True)
  q = float(batch_size) / n
  if total_steps is not None:
    check_number("total_steps", total_steps)
    checks.check_int("total_steps", total_steps, min_value=1)
    T = int(total_steps)
    E = T * q
  else:
    check_number("num_epochs", num_epochs)
    checks.check_positive("num_epochs", num_epochs)
    E = float(num_epochs)
    T = int(math.ceil(E / q - 1e-9))
  return Schedule(name, n, float(batch_size), E, 1, None, max(T, 1), q, req.settings)


def gaussian(sigma):
  """``GaussianDpEvent(sigma)``, the Gaussian step of a sampler's event. dp_accounting's
  event does not check its noise, so its sign is checked here, once, under the dpsgd
  doors' name ``noise_multiplier`` (a ``RandomAllocationDpEvent`` checks its own)."""
  checks.check_sigma("noise_multiplier", sigma)
  return accounting.events.GaussianDpEvent(sigma)


def run_of(step, count: int):
  """The run's event: ``step`` composed ``count`` times (the step itself once)."""
  return step if count == 1 else accounting.events.SelfComposedDpEvent(step, int(count))


def rate_block(step_of: Callable) -> Callable:
  """The tracker's block of a rate sampler: one step (``step_of(schedule, sigma)``);
  its cheaper mode evaluates once an epoch, ceil(T / E) steps."""
  def block(sched, sigma):
    return step_of(sched, sigma), {"evaluate_every": math.ceil(sched.total_steps /
                                                               sched.num_epochs)}
  return block


def _shaped(a, shape):
  a = np.asarray(a, np.float64).reshape(shape)
  return float(a) if a.ndim == 0 else a


def flat(a) -> np.ndarray:
  """float64 copy of ``a``, flat."""
  return np.asarray(a, np.float64).ravel().copy()
