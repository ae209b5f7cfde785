r"""A structured privacy statement for a DP-SGD run (:func:`statement`).

One call turns a training configuration -- dataset size N
(``num_examples``), batch size B, epochs E, the noise multiplier sigma (or a
target epsilon to calibrate it to), ``delta``, the batch ``sampling`` and the
neighbouring relation -- into an immutable :class:`PrivacyStatement`:

Proofs and sources: docs/bounds/dpsgd.md ("Bounds and proofs /
DP-SGD: schedule, samplers, statement, risk").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import numpy as np

from jaxacct import poisson as poisson_door
from jaxacct._core import checks
from jaxacct._core.dtype import HOST_ONLY, host_door
from jaxacct._core.gaussian import gaussian_epsilon
from jaxacct._core.units import renamed_fields
from jaxacct._core.version import __version__
from jaxacct.dpsgd import samplers
from jaxacct.dpsgd._recipe import (DEFAULT_RTOL, SIGMA_BRACKET, calibrate_noise_multiplier,
                                   epsilon, schedule)

# the values ``statement(neighbouring=...)`` accepts
NEIGHBOURINGS = ("add_remove", "replace_one")
_SENSITIVITY = {"add_remove": 1.0, "replace_one": 2.0}   # in units of the clipping norm C
# a calibrated sigma within one tolerance step of the search's floor was not searched below
_SIGMA_FLOOR, _RTOL = SIGMA_BRACKET[0], DEFAULT_RTOL
_NEIGHBOUR_TEXT = {
    "add_remove": ("add_remove: neighbouring datasets differ by adding or removing one "
                   "example; the schedule (N/B, t, T) is fixed in advance; per-example "
                   "gradients clipped to L2 norm C, so one example moves the noisy sum by "
                   "at most C"),
    "zero_out": ("zero_out: neighbouring datasets differ by replacing one example by a "
                 "zero-gradient example in its place (N and every batch are the same in "
                 "both; --neighbouring add_remove of this sampler means this relation); "
                 "the usual add/remove, where an added example displaces another from its "
                 "batch, is not covered and can have a larger epsilon; per-example "
                 "gradients clipped to L2 norm C, so one example moves the noisy sum by at "
                 "most C"),
    "replace_one": ("replace_one: neighbouring datasets differ by replacing one example by "
                    "another; per-example gradients clipped to L2 norm C, so the noisy sum "
                    "moves by at most 2C (accounted as sensitivity 2: sigma / 2)"),
}
# the Poisson row's one rule (main row of sampling="poisson", comparison row elsewhere)
_POISSON_RDP = ("poisson.rdp (Mironov, Talwar & Zhang, arXiv:1908.10530v1), q = B/N, the "
                "run's T steps: the tight PLD gives no finite bound at this noise")


@renamed_fields(sampling_rate="sampling_probability")
@dataclasses.dataclass(frozen=True)
class Comparison:
  """One comparison row of a :class:`PrivacyStatement` (same sigma and delta).

  Attributes:
    name: ``"poisson"`` or ``"full_batch"`` (every example in every one of the T
      steps; "no amplification" means the example's own steps, as for ``shuffle``).
    sampling_probability: the probability that an example joins a step (1.0:
      every step; ``sampling_rate``: its deprecated name, for one release).
    total_steps: T, the number of noisy steps composed.
    epsilon: epsilon at the statement's delta, or None where not computed.
    bound: ``"upper"`` or ``"exact"`` (:data:`jaxacct._core.results.BOUNDS`).
    method: what was computed, in words.
  """
  name: str
  sampling_probability: float
  total_steps: int
  epsilon: Optional[float]
  bound: str
  method: str

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    d["sampling_rate"] = d["sampling_probability"]   # its deprecated key, for one release
    return d


@renamed_fields(sampling_rate="sampling_probability")
@dataclasses.dataclass(frozen=True)
class PrivacyStatement:
  """A DP-SGD privacy statement (immutable; see :func:`statement`).

  Attributes:
    sampling, neighbouring: the sampler and the ``neighbouring`` option given.
    neighbouring_relation: what that relation is for this sampler, by name:
      ``"add_remove"``, ``"zero_out"`` (shuffle's add_remove: one example
      replaced by a zero-gradient one, N and every batch kept) or
      ``"replace_one"``.
    noise_multiplier: sigma (noise std / clipping norm C).
    noise_multiplier_source: ``"given"``, ``"calibrated"`` (the smallest
      certified sigma meeting ``target_epsilon``, to the search's tolerance)
      or ``"search_floor"`` (the target is met already at the floor of the
      calibration's search bracket, sigma / sensitivity = 0.01, which is
      returned: a smaller sigma may meet it too).
    target_epsilon: the calibration target, or None.
    delta: the delta of every epsilon here.
    epsilon_upper: certified upper bound on epsilon under ``sampling``.
    epsilon_lower: certified lower bound (no run of this kind is more
      private), or None where none is known (a bound of 0 says nothing and
      is None).
    method: how ``epsilon_upper`` was computed.
    num_examples, batch_size, num_epochs: N, B, E as given.
    sampling_probability: q = B / N (``sampling_rate``: its deprecated name,
      for one release).
    steps_per_epoch: t (int); for Poisson the expected N / B (float).
    total_steps: T, the number of noisy updates.
    divisor: the data-independent constant the noisy sum is divided by (B).
    comparison: :class:`Comparison` rows (``"poisson"``, ``"full_batch"``).
    assumptions: the assumptions the numbers rest on, one sentence each.
    version: the jaxacct version that computed the statement.
    settings: the sampler's own options as given (its settings' fields, e.g.
      truncated_poisson's batch cap), or None for a sampler without any.
    caps_near_poisson: a capped sampler's ``((gap, cap), ...)``
      (:attr:`jaxacct.dpsgd.samplers.Sampler.caps`): the smallest cap whose
      epsilon is within the relative ``gap`` (0.01, 0.1) of untruncated
      Poisson's at the same sigma; None for the other samplers.
  """
  sampling: str
  neighbouring: str
  noise_multiplier: float
  noise_multiplier_source: str
  target_epsilon: Optional[float]
  delta: float
  epsilon_upper: float
  epsilon_lower: Optional[float]
  method: str
  num_examples: int
  batch_size: float
  num_epochs: float
  sampling_probability: float
  steps_per_epoch: float
  total_steps: int
  divisor: float
  comparison: Tuple[Comparison, ...]
  assumptions: Tuple[str, ...]
  version: str
  neighbouring_relation: str = "add_remove"
  settings: Optional[dict] = None
  caps_near_poisson: Optional[Tuple[Tuple[float, int], ...]] = None

  def to_dict(self) -> dict:
    """The statement as a JSON-ready dict (floats, ints, strings, None, lists).

    ``epsilon`` is ``{"upper", "lower", "method"}``; ``comparison`` maps each
    row's name to its fields; ``assumptions`` is a list of strings.
    ``sampling_rate`` repeats ``sampling_probability`` under its deprecated key,
    for one release.
    """
    d = {}
    for f in dataclasses.fields(self):
      if f.name == "epsilon_upper":
        d["epsilon"] = {"upper": self.epsilon_upper, "lower": self.epsilon_lower,
                        "method": self.method}
      elif f.name not in ("epsilon_lower", "method"):
        d[f.name] = getattr(self, f.name)
    d["sampling_rate"] = self.sampling_probability
    d["comparison"] = {c.name: c.to_dict() for c in self.comparison}
    d["assumptions"] = list(self.assumptions)
    d["caps_near_poisson"] = (None if self.caps_near_poisson is None else
                              [{"gap": g, "cap": b}
                               for g, b in self.caps_near_poisson])
    return d

  def brief(self) -> str:
    """One line for scripts: ``key=value`` fields separated by spaces.

    ``sampling``, ``sigma`` (the noise multiplier), ``source`` (as
    :attr:`noise_multiplier_source`), ``epsilon_upper``, ``epsilon_lower``
    (``none`` where no lower bound is known), ``delta`` and
    ``neighbouring`` (the relation, by name).
    """
    lo = "none" if self.epsilon_lower is None else f"{self.epsilon_lower:.6g}"
    return (f"sampling={self.sampling} sigma={self.noise_multiplier:.6g} "
            f"source={self.noise_multiplier_source} epsilon_upper={self.epsilon_upper:.6g} "
            f"epsilon_lower={lo} delta={self.delta:g} "
            f"neighbouring={self.neighbouring_relation}")

  def __str__(self) -> str:
    n = self.num_examples
    tgt = "" if self.target_epsilon is None else f"{self.target_epsilon:g}"
    src = {"given": "given",
           "calibrated": f"calibrated: smallest certified sigma with epsilon <= {tgt}",
           "search_floor": "calibration stopped at its search floor, not the smallest "
                           f"sigma with epsilon <= {tgt}",
           }.get(self.noise_multiplier_source, self.noise_multiplier_source)
    spe = (f"{self.steps_per_epoch:g} expected steps per epoch (N/B)"
           if isinstance(self.steps_per_epoch, float) else
           f"{self.steps_per_epoch} steps per epoch")
    lo = "none known" if self.epsilon_lower is None else f"{self.epsilon_lower:.6g}"
    lines = [
        "DP-SGD privacy statement (jaxacct %s)" % self.version,
        f"  dataset size N = {n}, batch size B = {self.batch_size:g}, "
        f"epochs E = {self.num_epochs:g}",
        f"  sampling {self.sampling}: sampling rate B/N = {self.sampling_probability:.6g}, {spe}, "
        f"{self.total_steps} steps in all"
        + "".join(f", {k} = {v}" for k, v in (self.settings or {}).items()),
        f"  noise multiplier sigma = {self.noise_multiplier:.6g} ({src})",
        *([f"    (the certified epsilon here, {self.epsilon_upper:.6g}, already meets "
           "the target at the floor of calibrate_noise_multiplier's search bracket "
           "[0.01, 1e4] for sigma / sensitivity; no smaller sigma is searched)"]
          if self.noise_multiplier_source == "search_floor" else []),
        f"  neighbouring relation: {self.neighbouring_relation}"
        + ("" if self.neighbouring_relation == self.neighbouring else
           f" (the {self.neighbouring} option of sampling {self.sampling})"),
        f"  updates divide the noisy sum by the constant B = {self.divisor:g}",
        "",
        f"Epsilon at delta = {self.delta:g}:",
        f"  {self.sampling} (this run): certified upper {self.epsilon_upper:.6g}, "
        f"lower {lo}",
        f"    ({self.method})",
    ]
    for c in self.comparison:
      what = {"poisson": f"Poisson at q = {c.sampling_probability:.6g}, T = {c.total_steps}",
              "full_batch": f"full batch (every example in all T = {c.total_steps} "
                            "steps)"}.get(c.name, c.name)
      val = "not computed" if c.epsilon is None else f"{c.bound} {c.epsilon:.6g}"
      lines.append(f"  {what}: {val}")
      lines.append(f"    ({c.method})")
    if self.caps_near_poisson is not None:   # a capped sampler
      caps = ", ".join(f"{b} within {g:.0%}" for g, b in self.caps_near_poisson)
      lines.append(f"  smallest batch cap near untruncated Poisson: {caps}")
    lines += ["", "Assumptions:"] + [f"  - {a}" for a in self.assumptions]
    return "\n".join(lines)


def _gaussian(sigma: float, delta: float) -> float:
  """Exact epsilon(delta) of the Gaussian mechanism, noise multiplier ``sigma``
  (``jaxacct.mechanisms.Gaussian.epsilon``, upper side of its bisection)."""
  return float(gaussian_epsilon(np.float64(sigma), np.float64(delta)).epsilon)


def _is_number(x) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool) or (
      hasattr(x, "dtype") and getattr(x, "shape", None) == () and x.dtype.kind in "iuf")


def _plain(x):
  """A Python int for integral values, else a float (JSON-ready units)."""
  x = float(x)
  return int(x) if x.is_integer() else x


@host_door(HOST_ONLY)
def statement(*, num_examples, batch_size, num_epochs, delta, noise_multiplier=None,
              target_epsilon=None, sampling: str = "balls_in_bins",
              neighbouring: Optional[str] = None, progress: Optional[bool] = None,
              compare: bool = True, **settings) -> PrivacyStatement:
  """A structured privacy statement of a DP-SGD run (certified bracket + comparison).

  Args:
    num_examples: N >= 1 (int).
    batch_size: B in [1, N] (int; for ``"poisson"`` the expected batch, real).
    num_epochs: E >= 1 (int; for ``"poisson"`` any real > 0).
    delta: in (0, 1).
    noise_multiplier: sigma > 0 (noise std / clipping norm). Give exactly
      one of ``noise_multiplier`` and ``target_epsilon``.
    target_epsilon: > 0; sigma is then the smallest certified noise
      multiplier meeting it (:func:`jaxacct.dpsgd.calibrate_noise_multiplier`).
    sampling: a registered sampler's name (``"balls_in_bins"`` default,
      ``"poisson"``, ``"shuffle"``, ...; as in :func:`jaxacct.dpsgd.schedule`).
    neighbouring: ``"add_remove"`` or ``"replace_one"``; each sampler
      supports the relations its record lists
      (:attr:`jaxacct.dpsgd.samplers.Sampler.relations`); None (default):
      its first (``"add_remove"``; ``"replace_one"`` for the fixed-size
      samplers, whose dataset size is fixed).
    progress: None (global switch), True or False: progress on stderr.
    compare: True (default): the comparison rows and a capped sampler's
      ``caps_near_poisson`` too; False: the run's own bracket only (all that
      :meth:`PrivacyStatement.brief` prints; ``comparison`` is empty and
      ``caps_near_poisson`` None), without their cost (a cap search runs
      about 14 accountants).
    **settings: the sampler's own options, as in :func:`jaxacct.dpsgd.schedule`
      (the fields of its settings dataclass).

  Returns:
    :class:`PrivacyStatement`.

  Raises:
    ValueError: invalid input (naming the parameter and its valid range), or
      a neighbouring relation the sampling's accounting does not cover.

  Bound: ``epsilon_upper`` upper, ``epsilon_lower`` lower (or None);
  comparison rows as labelled.
  """
  rec = samplers.get(sampling)
  neighbouring = rec.relations[0] if neighbouring is None else neighbouring
  checks.check_choice("neighbouring", neighbouring, NEIGHBOURINGS)
  checks.check_bool("compare", compare)
  if neighbouring not in rec.relations:
    other = "replace-one" if neighbouring == "replace_one" else "add/remove"
    raise ValueError(
        f"neighbouring={neighbouring!r} is not supported with sampling={sampling!r}: its "
        f"accounting covers neighbouring in {rec.relations} (no "
        f"{other} analysis of {sampling} is implemented).")
  if (noise_multiplier is None) == (target_epsilon is None):
    raise ValueError("give exactly one of noise_multiplier (sigma > 0) and target_epsilon "
                     f"(> 0); got noise_multiplier={noise_multiplier!r}, "
                     f"target_epsilon={target_epsilon!r}.")
  for name, v in (("noise_multiplier", noise_multiplier), ("target_epsilon", target_epsilon),
                  ("delta", delta)):
    if v is not None and not _is_number(v):
      raise ValueError(f"{name} must be a real number; got {v!r}.")
  # validates N, B, E and sampling (ValueError naming the parameter)
  sched = schedule(num_examples=num_examples, batch_size=batch_size,
                   num_epochs=num_epochs, sampling=sampling, **settings)
  checks.check_delta(delta)
  delta = float(delta)
  # sigma / scale is the noise multiplier of the relation the event is accounted under
  scale = _SENSITIVITY[neighbouring] / _SENSITIVITY[rec.accounted]
  # the full-batch comparison row's sensitivity, in units of C
  sens = _SENSITIVITY[neighbouring]
  common = dict(num_examples=num_examples, batch_size=batch_size, delta=delta,
                progress=progress)
  own = dict(common, **settings)
  if target_epsilon is not None:
    checks.check_positive("target_epsilon", target_epsilon)
    target_epsilon = float(target_epsilon)
    found = float(calibrate_noise_multiplier(
        epsilon=target_epsilon, num_epochs=num_epochs, sampling=sampling, rtol=_RTOL, **own))
    sigma = scale * found
    # within one tolerance step of the floor: nothing below it was searched
    source = "search_floor" if found < _SIGMA_FLOOR * (1 + _RTOL) else "calibrated"
  else:
    checks.check_sigma("noise_multiplier", noise_multiplier)
    sigma, source = float(noise_multiplier), "given"
  T = int(sched.total_steps)
  q = float(sched.batch_size) / sched.num_examples
  if rec.comparison_is_run:   # Poisson: the one rule of every Poisson row
    upper, method, lower = _poisson_row(sigma / scale, q, T, dict(own, num_epochs=num_epochs))
  else:
    run = epsilon(noise_multiplier=sigma / scale, num_epochs=num_epochs, sampling=sampling,
                  **own)
    upper, method, lower = float(run.epsilon), str(run.method), run.lower
  if math.isnan(upper):     # never printed as certified
    raise RuntimeError(f"no certified epsilon at noise_multiplier={sigma!r} ({method}); "
                       "please report this.")
  if scale != 1:
    method += f" at noise multiplier sigma / {scale:g} (sensitivity {scale:g}C)"
    # a replacement by a zero-gradient example is the zero-out add/remove pair:
    # the add/remove lower at sigma bounds the replace-one epsilon from below
    lower = epsilon(noise_multiplier=sigma, num_epochs=num_epochs, sampling=sampling,
                    **own).lower
  # a lower bound of 0 says nothing (epsilon >= 0 always): none is known
  lower = None if lower is None or not (float(lower) > 0 or upper == 0) else \
      min(float(lower), upper)
  if target_epsilon is not None and not upper <= target_epsilon:
    raise RuntimeError(f"calibrated sigma={sigma!r} gives certified epsilon {upper!r} > "
                       f"target_epsilon={target_epsilon!r}; please report this.")
  spe = (sched.num_examples / sched.batch_size if sched.steps_per_epoch is None
         else int(sched.steps_per_epoch))

  if not compare:
    rows, caps = (), None
  else:
    rows = _comparison_rows(rec, neighbouring, sigma, q, T, upper, method, common, sens,
                            delta)
    caps = None if rec.caps is None else rec.caps(sched, sigma / scale, delta)
  relation = samplers.get(sampling).relation_names.get(neighbouring, neighbouring)
  assumptions = (
      _NEIGHBOUR_TEXT[relation],
      "predetermined (non-adaptive) schedule: N, B, E, sigma, the clipping norm C and the "
      "sampler are fixed before training, not chosen from the data or from training "
      "outputs; every one of the T noisy updates may be released",
      rec.text,
      f"divisor: each update divides the noisy sum (clipped gradients + N(0, sigma^2 C^2 "
      f"I)) by the data-independent constant B = {_plain(sched.batch_size)} (the declared "
      "expected batch size), never by the realised batch size",
  )
  return PrivacyStatement(
      sampling=sampling, neighbouring=neighbouring, noise_multiplier=sigma,
      noise_multiplier_source=source, target_epsilon=target_epsilon, delta=delta,
      epsilon_upper=upper, epsilon_lower=lower, method=method,
      num_examples=int(sched.num_examples), batch_size=_plain(sched.batch_size),
      num_epochs=_plain(sched.num_epochs), sampling_probability=q, steps_per_epoch=spe,
      total_steps=T, divisor=_plain(sched.batch_size), comparison=rows,
      assumptions=assumptions, version=__version__, neighbouring_relation=relation,
      settings=None if sched.settings is None else dataclasses.asdict(sched.settings),
      caps_near_poisson=caps)


def _comparison_rows(rec, neighbouring, sigma, q, T, upper, method, common, sens, delta):
  """The statement's comparison rows: ``(poisson, full_batch)`` at the same sigma."""
  if neighbouring != "add_remove":
    poisson = Comparison("poisson", q, T, None, "upper",
                         "not computed: no replace-one accounting of Poisson subsampling "
                         "on this path")
  elif rec.comparison_is_run:   # the run itself: same rate, same steps
    poisson = Comparison("poisson", q, T, upper, "upper", method)
  else:
    pe, pm, _ = _poisson_row(sigma, q, T, dict(common, total_steps=T))
    poisson = Comparison("poisson", q, T, pe if math.isfinite(pe) else None, "upper", pm)
  one = sigma / sens / math.sqrt(T)
  full = Comparison("full_batch", 1.0, T,
                    _gaussian(one, delta), "exact",
                    f"T = {T} full-batch Gaussian steps of sensitivity {sens:g}C = one "
                    f"Gaussian mechanism with noise multiplier sigma / "
                    f"{'' if sens == 1 else f'({sens:g} '}sqrt(T)"
                    f"{'' if sens == 1 else ')'} = {one:.6g} (Dong, Roth & Su, "
                    "arXiv:1905.02383v3, Cor. 3.3; Balle & Wang, arXiv:1805.06530v2, Thm 8)")
  # what the relation is, where the sampler's accounting of it is narrower than its name
  return poisson, full


def _poisson_row(sigma, q, T, kw):
  """``(epsilon, method, lower or None)`` of T Poisson steps at rate q and noise
  ``sigma``: the one rule of every Poisson row, the run's (``sampling="poisson"``)
  and the comparison's. The tight PLD with its lower; where it refuses this many
  steps at this noise or gives no finite bound, the RDP upper of the same q, sigma
  and T (valid at any T, no lower); +inf with the reason where neither is finite."""
  lo = None
  try:
    p = epsilon(noise_multiplier=sigma, sampling="poisson", **kw)
    pe, pm, lo = float(p.epsilon), f"{p.method}, q = B/N, the run's T steps", p.lower
  except checks.WindowTooLarge:   # the PLD refuses this many steps at this noise
    pe = math.inf
  if not math.isfinite(pe):    # the PLD's grid cannot hold this loss: RDP can
    r = poisson_door.epsilon(q=q, sigma=sigma, num_steps=T, delta=kw["delta"], method="rdp")
    pe, pm, lo = float(r.epsilon), _POISSON_RDP, None
  if not math.isfinite(pe):
    pm = "not computed: neither the PLD nor RDP gives a finite bound at this noise"
  return pe, pm, lo
