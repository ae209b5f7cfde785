r"""Front door of amplification by shuffling: :func:`epsilon` / :func:`delta`.

Re-exported by :mod:`jaxacct.shuffle` (see its docstring for which bound is
valid for which declared randomizer); :func:`dominating_pairs` gives the
per-round pair(s) for ``jaxacct.pld``; :func:`parse_randomizer` reads a
declared randomizer.
"""

from __future__ import annotations

import math

import numpy as np

from jaxacct._core import checks
from jaxacct._core.conversion import rdp_to_delta, rdp_to_epsilon
from jaxacct._core.results import DeltaResult, EpsilonResult
from jaxacct._core.dtype import host_door
from jaxacct.shuffle._host import ON_HOST
from jaxacct import pld as pldlib
from jaxacct.shuffle._clones import (clone_delta, clone_epsilon,
                                    clone_epsilon_closed_form, clone_rdp,
                                    krr_epsilon_closed_form, krr_thm41_delta,
                                    krr_thm41_epsilon, krr_thm41_widths,
                                    rr2_lower_delta, rr2_lower_epsilon)
from jaxacct.shuffle._exact import (MAX_EXACT_BINARY_N, binary_rr_delta,
                                   binary_rr_epsilon, binary_rr_pmfs,
                                   pair_pmfs)
from jaxacct.shuffle._girgis import girgis_epsilon
from jaxacct.shuffle._multinomial import chen_epsilon
from jaxacct.shuffle._variation_ratio import (krr_lower_delta,
                                             krr_lower_epsilon,
                                             stronger_clone_delta,
                                             stronger_clone_epsilon,
                                             stronger_clone_rdp)

_RDP_ORDERS = np.concatenate([np.linspace(1.25, 3.0, 8), np.arange(4.0, 33.0),
                              np.array([40., 48., 64., 96., 128.])])
_LOWER_M = 32          # datasets tried for the binary-RR lower bound at large n
_MAX_PLD_ATOMS = 4_000_000
_MAX_EXACT_PLD_BINARY_N = 60
_MAX_OWN_RDP_N = 20_000
_MAX_THM41_CELLS = 300_000  # (m, z) window cells for the Thm 4.1 k-RR sum


def parse_randomizer(randomizer):
  """``(kind, k)`` of a declared randomizer (see :func:`epsilon`).

  ``kind`` is ``"generic"``, ``"blanket"``, ``"binary_rr"`` (also for
  ``("k_rr", 2)``) or ``"k_rr"`` with ``k >= 3``; ``k`` is None except for
  ``"k_rr"``. Raises ``ValueError`` for anything else.
  """
  if isinstance(randomizer, str):
    checks.check_choice("randomizer", randomizer,
                        ("generic", "blanket", "binary_rr"))
    return randomizer, None
  if (isinstance(randomizer, tuple) and len(randomizer) == 2
      and randomizer[0] == "k_rr"):
    k = randomizer[1]
    checks.check_int("k", k, min_value=2)
    if int(k) == 2:
      return "binary_rr", None
    return "k_rr", int(k)
  raise ValueError("randomizer must be 'generic', 'blanket', 'binary_rr' or "
                   f"('k_rr', k); got {randomizer!r}.")


def _rr2_key(kind):
  """details key of the FMT'21 App. G binary-RR value.

  For ``binary_rr`` it is a lower bound on the declared mechanism
  (``"rr2_lower"``, bound ``"lower"``).  For ``generic``/``blanket`` it is
  only a lower bound on what any theorem valid for the whole class can
  certify (binary RR belongs to both classes), NOT on the user's randomizer,
  whose true delta can be smaller (3-RR at n = 4, e^eps0 = 2: 0.1260 < 0.1338):
  ``"generic_worst_case_lower"``, bound ``"lower_generic"``.  For ``k_rr``
  it is left out (``krr_lower`` is the lower bound there).
  """
  return "rr2_lower" if kind == "binary_rr" else "generic_worst_case_lower"


# Every name ``method`` may take (``details`` keys; which ones exist depends on
# the randomizer and rounds, checked again when picking).
_METHOD_NAMES = (
    "best", "clone", "clone_closed_form", "rr2_lower",
    "generic_worst_case_lower", "stronger_clone", "krr_closed_form",
    "krr_lower", "krr_thm41", "exact", "binary_rr_lower", "chen_exact",
    "girgis_thm1", "clone_rdp", "stronger_clone_rdp", "pld_exact_pairs",
    "pld_clone", "pld_stronger_clone", "pld", "trivial")


def _check_eps0(eps0, scalar=False):
  """eps0 in (0, EPS0_MAX]: beyond it e^eps0 overflows (the answers were NaN) and the
  shuffle amplifies nothing: epsilon = eps0 (post-processing) is the bound."""
  checks.check_range("eps0", eps0, 0.0, checks.EPS0_MAX, lo_open=True, scalar=scalar)


def _check_front(n, eps0, rounds, method, step, **value):
  checks.check_scalar("jaxacct.shuffle.epsilon/delta",
                      "For grids over n or eps0, call the bound functions "
                      "(shuffle.clone_epsilon, ...), which broadcast arrays.",
                      n=n, eps0=eps0, rounds=rounds, **value)
  checks.check_int("n", n, min_value=1)
  _check_eps0(eps0)
  checks.check_int("rounds", rounds, min_value=1)
  checks.check_choice("method", method, _METHOD_NAMES)
  checks.check_positive("step", step)


def _scalar(x):
  return float(np.asarray(x))


@host_door(ON_HOST)
def dominating_pairs(*, n: int, eps0: float, randomizer="generic"):
  """Per-round dominating pair(s) as probability vectors for ``jaxacct.pld``.

  Returns a list of ``(P, Q)`` numpy pairs; the mechanism's profile is at most
  ``max`` over the list (and over both directions) of their hockey-stick
  divergences. ``generic``: the FMT'21 clone pair; ``blanket``/``k_rr``:
  the stronger-clone pair; ``binary_rr`` with ``n <= 60``: the exact pairs of
  every dataset (both directions), else the stronger-clone pair.
  Cut mass is carried by +inf-loss atoms (see ``exact.pair_pmfs``).
  """
  checks.check_int("n", n, min_value=1, scalar=True)
  _check_eps0(eps0, scalar=True)
  kind, _ = parse_randomizer(randomizer)
  p = math.exp(eps0)
  beta = (p - 1.0) / (p + 1.0)
  if kind == "binary_rr" and n <= _MAX_EXACT_PLD_BINARY_N:
    out = []
    for m in range(0, (n - 1) // 2 + 1):
      y0, y1 = binary_rr_pmfs(n, eps0, m)
      out += [(y0, y1), (y1, y0)]
    return out
  if kind == "generic":
    q = 2.0 * p * p / (p + 1.0)
  else:
    q = p
  pv, qv = pair_pmfs(n, p, beta, q, q)
  return [(pv, qv)]


def _pair_atoms_estimate(n, total, z=10.0):
  sd = math.sqrt(n * total * (1 - total))
  wc = 2 * (z * sd + z * z) + 1
  c = min(n, n * total + z * sd + z * z)
  wa = 2 * (z * math.sqrt(max(c, 1) / 4) + z * z) + 3
  return wc * wa


def _pld_plds(n, eps0, randomizer, rounds, step):
  if not (randomizer == "binary_rr" and n <= _MAX_EXACT_PLD_BINARY_N):
    total = (math.exp(-eps0) if randomizer == "generic"
             else 2.0 / (math.exp(eps0) + 1.0))
    if _pair_atoms_estimate(n, total) > _MAX_PLD_ATOMS:
      raise ValueError("pair too large for the PLD route")
  pairs = dominating_pairs(n=n, eps0=eps0, randomizer=randomizer)
  out = []
  for a, b in pairs:
    one = pldlib.from_pair(a, b, step=step, pessimistic=True)
    out.append(pldlib.compose(one, int(rounds)) if rounds > 1 else one)
  return out


def _single_round(kind, k, n, eps0, delta_):
  """{method: (eps, bound)} for one round."""
  kw = dict(n=n, eps0=eps0)
  res = {}
  res["clone"] = (_scalar(clone_epsilon(delta_, **kw).epsilon), "upper")
  res["clone_closed_form"] = (
      _scalar(clone_epsilon_closed_form(delta_, **kw).epsilon), "upper")
  res[_rr2_key(kind)] = (_scalar(rr2_lower_epsilon(delta_, **kw).epsilon),
                         "lower" if kind == "binary_rr" else "lower_generic")
  if kind in ("blanket", "binary_rr", "k_rr"):
    res["stronger_clone"] = (
        _scalar(stronger_clone_epsilon(delta_, **kw).epsilon), "upper")
  if kind == "k_rr":
    res["krr_closed_form"] = (
        _scalar(krr_epsilon_closed_form(delta_, **kw, k=k).epsilon), "upper")
    res["krr_lower"] = (
        _scalar(krr_lower_epsilon(delta_, **kw, k=k).epsilon), "lower")
    del res[_rr2_key(kind)]
    wm, wz = krr_thm41_widths(n, eps0, k)
    if wm * wz <= _MAX_THM41_CELLS:
      res["krr_thm41"] = (
          _scalar(krr_thm41_epsilon(delta_, **kw, k=k).epsilon), "upper")
    else:
      res["krr_thm41"] = (float("nan"), "skipped: window too large (cost)")
  if kind == "binary_rr":
    if n <= MAX_EXACT_BINARY_N:
      res["exact"] = (_scalar(binary_rr_epsilon(delta_, **kw).epsilon),
                      "exact")
    else:
      ms = list(range(0, min(_LOWER_M, n)))
      res["binary_rr_lower"] = (_scalar(binary_rr_epsilon(
          delta_, **kw, ms=ms, lower=True).epsilon), "lower")
  return res


def _pld_route(res, kind, n, eps0, rounds, step, query):
  """PLD of the per-round dominating pair(s), composed ``rounds`` times:
  ``query(pld)`` (an epsilon or a delta, upper) maxed over the pairs, recorded
  in ``res`` under its method name (or ``"pld"`` with the failure)."""
  try:
    plds = _pld_plds(n, eps0, kind if kind != "k_rr" else "blanket", rounds,
                     step)
    val = max(_scalar(query(pl)) for pl in plds)
    name = ("pld_exact_pairs" if kind == "binary_rr"
            and n <= _MAX_EXACT_PLD_BINARY_N else
            "pld_clone" if kind == "generic" else "pld_stronger_clone")
    res[name] = (val, "upper")
  except (ImportError, ValueError, MemoryError) as err:
    res["pld"] = (float("nan"), f"failed: {type(err).__name__}: {err}")
  return res


def _composed(kind, k, n, eps0, delta_, rounds, step, want_pld, want_rdp):
  res = {}
  rdp_kind = "clone_rdp" if kind == "generic" else "stronger_clone_rdp"
  exact_pairs = kind == "binary_rr" and n <= _MAX_EXACT_PLD_BINARY_N
  if want_rdp and not exact_pairs:
    # generic-valid RDP bounds of the sibling modules (valid for every kind;
    # skipped where the PLD of the exact per-dataset pairs is available)
    for name, fn, kw in (("chen_exact", chen_epsilon, {"bound": "exact"}),
                         ("girgis_thm1", girgis_epsilon, {"bound": "thm1"})):
      try:
        r = fn(n=n, eps0=eps0, delta=delta_, rounds=rounds, **kw)
        if r.bound == "upper":
          res[name] = (min(_scalar(r.epsilon), rounds * eps0), "upper")
        else:
          res[name] = (_scalar(r.epsilon), f"not used: bound={r.bound}")
      except (AttributeError, ValueError, TypeError) as err:
        # never drop a bound silently: record why it is missing
        res[name] = (float("nan"), f"failed: {type(err).__name__}: {err}")
  if want_rdp and n <= _MAX_OWN_RDP_N:
    try:
      fn = clone_rdp if kind == "generic" else stronger_clone_rdp
      rdp = np.asarray(fn(_RDP_ORDERS, n=n, eps0=eps0)) * rounds
      e = rdp_to_epsilon(_RDP_ORDERS, rdp, delta_).epsilon
      res[rdp_kind] = (min(_scalar(e), rounds * eps0), "upper")
    except (MemoryError, ValueError) as err:
      res[rdp_kind] = (float("nan"), f"failed: {type(err).__name__}: {err}")
  if want_pld:
    _pld_route(res, kind, n, eps0, rounds, step,
               lambda pl: pldlib.epsilon(pl, delta_))
    for key in ("pld_exact_pairs", "pld_clone", "pld_stronger_clone"):
      if key in res:
        res[key] = (min(res[key][0], rounds * eps0), "upper")
  return res


def _pick(res, method):
  if method == "best":
    ex = {m: v for m, v in res.items() if v[1] == "exact"}
    if ex:
      m = next(iter(ex))
      return m, ex[m][0], "exact"
    ups = {m: v for m, v in res.items() if v[1] == "upper"}
    m = min(ups, key=lambda kk: ups[kk][0])
    return m, ups[m][0], "upper"
  if method not in res:
    raise ValueError(f"method must be 'best' or one of {tuple(res)} for this "
                     f"randomizer/rounds; got {method!r}.")
  v = res[method]
  if v[1].startswith(("failed", "skipped", "not used")):
    raise ValueError(f"method {method!r} is unavailable here: {v[1]}")
  return method, v[0], "lower" if v[1].startswith("lower") else v[1]


@host_door(ON_HOST)
def epsilon(*, n, eps0, delta, rounds: int = 1, randomizer="generic",
            method: str = "best", step: float = 1e-4) -> EpsilonResult:
  r"""Central replacement epsilon of shuffling n eps0-LDP reports, T rounds.

  See the module docstring for which bound is valid for which declared
  randomizer. ``rounds = 1``: the tightest valid single-round bound.
  ``rounds > 1``: PLD composition of the per-round dominating pair and RDP
  composition of its Renyi curve; the smaller wins.

  Args:
    n: number of users, integer >= 1. eps0: local epsilon > 0.
    delta: in (0, 1). rounds: integer >= 1 (same users, same data each round;
      adaptive rounds are covered by the generic/blanket pairs).
    randomizer: ``"generic"`` (default), ``"blanket"``, ``"binary_rr"`` or
      ``("k_rr", k)``.
    method: ``"best"`` or a name from ``details``.
    step: PLD grid step (rounds > 1).

  Returns:
    ``EpsilonResult(epsilon, delta, method, bound, details={name: (eps,
    bound)})``. ``details["generic_worst_case_lower"]`` (bound
    ``"lower_generic"``; randomizer ``"generic"`` or ``"blanket"``) is the
    FMT'21 App. G binary-RR value: a lower bound on what ANY theorem valid
    for the whole declared class can certify, NOT a lower bound on the
    user's randomizer (whose true value can be smaller).  For
    ``"binary_rr"`` the same value is ``details["rr2_lower"]`` (bound
    ``"lower"``: a lower bound on binary RR itself); for ``("k_rr", k)`` it
    is left out (``krr_lower`` is the k-RR lower bound).

  Bound: as ``bound`` says (exact/upper/lower).
  """
  _check_front(n, eps0, rounds, method, step, delta=delta)
  checks.check_delta(delta)
  kind, k = parse_randomizer(randomizer)
  n, eps0, delta_, rounds = int(n), float(eps0), float(delta), int(rounds)
  if rounds == 1:
    res = _single_round(kind, k, n, eps0, delta_)
  else:
    res = _composed(kind, k, n, eps0, delta_, rounds, step, True, True)
    res["trivial"] = (rounds * eps0, "upper")
  name, val, bound = _pick(res, method)
  return EpsilonResult(epsilon=val, delta=delta_, method=name, bound=bound,
                       details=res)


@host_door(ON_HOST)
def delta(*, n, eps0, epsilon, rounds: int = 1, randomizer="generic",
          method: str = "best", step: float = 1e-4) -> DeltaResult:
  r"""Central replacement delta(eps) of shuffling n eps0-LDP reports, T rounds.

  Counterpart of :func:`epsilon` (same declared-randomizer rules and the
  same ``details`` keys, e.g. ``generic_worst_case_lower``).

  Returns:
    ``DeltaResult(delta, epsilon, method, bound, details)``.
  """
  _check_front(n, eps0, rounds, method, step, epsilon=epsilon)
  checks.check_range("epsilon", epsilon, 0.0)
  kind, k = parse_randomizer(randomizer)
  n, eps0, eps, rounds = int(n), float(eps0), float(epsilon), int(rounds)
  res = {}
  if rounds == 1:
    kw = dict(n=n, eps0=eps0)
    res["clone"] = (_scalar(clone_delta(eps, **kw).delta), "upper")
    res[_rr2_key(kind)] = (_scalar(rr2_lower_delta(eps, **kw).delta),
                           "lower" if kind == "binary_rr" else "lower_generic")
    if kind in ("blanket", "binary_rr", "k_rr"):
      res["stronger_clone"] = (_scalar(stronger_clone_delta(eps, **kw).delta),
                               "upper")
    if kind == "k_rr":
      res["krr_lower"] = (_scalar(krr_lower_delta(eps, **kw, k=k).delta),
                          "lower")
      del res[_rr2_key(kind)]
      wm, wz = krr_thm41_widths(n, eps0, k)
      if wm * wz <= _MAX_THM41_CELLS:
        res["krr_thm41"] = (_scalar(krr_thm41_delta(eps, **kw, k=k).delta),
                            "upper")
    if kind == "binary_rr" and n <= MAX_EXACT_BINARY_N:
      res["exact"] = (_scalar(binary_rr_delta(eps, **kw).delta), "exact")
  else:
    fn = clone_rdp if kind == "generic" else stronger_clone_rdp
    try:
      if n > _MAX_OWN_RDP_N:
        raise ValueError("n too large for the windowed RDP sum")
      rdp = np.asarray(fn(_RDP_ORDERS, n=n, eps0=eps0)) * rounds
      d = rdp_to_delta(_RDP_ORDERS, rdp, eps).delta
      res["clone_rdp" if kind == "generic" else "stronger_clone_rdp"] = (
          _scalar(d), "upper")
    except (MemoryError, ValueError) as err:
      res["clone_rdp" if kind == "generic" else "stronger_clone_rdp"] = (
          float("nan"), f"failed: {type(err).__name__}: {err}")
    _pld_route(res, kind, n, eps0, rounds, step,
               lambda pl: pldlib.delta(pl, eps))
    res["trivial"] = (1.0 if eps < rounds * eps0 else 0.0, "upper")
  name, val, bound = _pick(res, method)
  return DeltaResult(delta=val, epsilon=eps, method=name, bound=bound,
                     details=res)

