"""Laws of S/t for 1-of-t random allocation: kernels and batched entry points (private).

The mathematics, validity argument and floating-point ledger are in
:mod:`jaxacct.allocation.pld`. This module holds the laws of one 1-of-t round
(``final_laws``), their hockey-stick profiles (``delta_one``, ``deltas``,
``epsilons``) and the batched jitted entry points (``laws_batch``,
``eps_batch``, ``delta_batch``), and the host law builder
(``steps_laws_host``: the same kernels of :mod:`._sum_law` with ``ns = HOST``,
zero compiled programs for a concrete question; ``laws_batch(..., host=True)``
picks it).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core.batching import accelerator_layout, lanes_per_block, map_blocks
from jaxacct._core.dtype import require_x64
from jaxacct._core.namespace import HOST, HOST_LOOPS, JAX
from jaxacct._core.one_step import one_steps
from jaxacct.allocation.pld import _sum_law as sl
from jaxacct.allocation.pld._one_step import gaussian_one_step, laplace_one_step
from jaxacct._core.compiled import ACCELERATOR_OPTIONS, jit

DEFAULT_GRID_SIZE = 1024
DEFAULT_TAIL = 1e-20   # per-stage tail cut for delta(eps) queries
TAIL_FACTOR = 1e-5     # epsilon(delta) queries cut tails at TAIL_FACTOR * delta
EPS64 = float(np.finfo(np.float64).eps)
_EPS = EPS64


class FinalLaws(NamedTuple):
  """Upper and lower laws of S/t of one 1-of-t round (Q-masses; see pld module)."""
  up_p: jax.Array
  up_loss: jax.Array    # ln(x/t) at the upper knots
  up_q0: jax.Array
  up_minf_t: jax.Array  # minf / t
  lo_a: jax.Array
  lo_loss: jax.Array    # ln(mu/t) of the lower atoms
  lo_q0: jax.Array
  rel: jax.Array        # relative float slack
  eta: jax.Array        # log-position float slack of the upper atoms (an epsilon shift)
  lo_inf: jax.Array     # lower law's P-mass at +inf (remove profile; 0 for Gaussian)
  eta_lo: jax.Array     # log-position float slack of the lower atoms


# ----------------------------------------------------------------------------
# kernels (jittable)
# ----------------------------------------------------------------------------

def one_step(mechanism, param, n, tail):
  if mechanism == "gaussian":
    return gaussian_one_step(param, n, tail)
  if mechanism == "laplace":
    return laplace_one_step(param, n, tail)
  raise ValueError(f"mechanism must be 'gaussian' or 'laplace'; got {mechanism!r}.")


def final_laws(param, t, *, n: int, tail, mechanism: str = "gaussian",
               lower: bool = True, levels: int | None = None) -> FinalLaws:
  """Upper and lower laws of S/t for 1-of-t allocation (jittable, scalar).

  ``lower=False`` (static) skips the lower law (its masses are then 0).
  ``levels`` (static): see :func:`._sum_law.sum_law_upper`.
  """
  require_x64("allocation.pld")
  up, lw, lat = one_step(mechanism, param, n, tail)
  return laws_from_step(up, lw, lat, param, t, n=n, tail=tail, lower=lower, levels=levels)


def laws_from_step(up, lw, lat, param, t, *, n: int, tail, lower: bool = True,
                   levels: int | None = None) -> FinalLaws:
  """:func:`final_laws` from the one-step laws ``up``, ``lw`` on ``lat``."""
  t_i = jnp.asarray(t, jnp.int32)
  U, Ul, ledger = sl.sum_law_upper(up, lat, t_i, n, tail, 0.0, levels=levels)
  if lower:
    Lw, Ll = sl.sum_law_lower(lw, lat, t_i, n, tail, 0.0, levels=levels)
  else:
    m = sl.out_size(n)
    Lw = sl.LowerLaw(jnp.zeros(m), jnp.zeros(m), jnp.zeros(()))
    Ll = sl.Lattice(jnp.zeros(()), jnp.ones(()), jnp.zeros((), jnp.int32))
  bad = ~(jnp.asarray(param) > 0) | ~jnp.isfinite(jnp.asarray(param))
  return assemble_final(U, Ul, ledger, Lw, Ll, t_i, n, bad, jnp.zeros(()))


def assemble_final(U, Ul, ledger, Lw, Ll, t_i, n, bad, lo_inf, ns=JAX) -> FinalLaws:
  """FinalLaws from the t-fold upper/lower sum laws and the float ledger
  (``ns``: the array namespace; the host twin passes ``HOST``)."""
  xp = ns.xp
  tf = xp.asarray(t_i).astype(xp.float64)
  lnt = xp.log(tf)
  m_up = U.p.shape[0]
  up_loss = Ul.u_ref + (Ul.off + xp.arange(m_up)) * Ul.step - lnt
  m_lo = Lw.a.shape[0]
  f = xp.where(Lw.a > 0, Lw.g / xp.where(Lw.a > 0, Lw.a, 1.0), 1.0)
  lo_loss = Ll.u_ref + (Ll.off + xp.arange(m_lo)) * Ll.step + xp.log(f) - lnt
  levels = xp.log2(tf) + 2.0
  # per level: the near band's sums of <= 2n non-negative terms per cell (8 n),
  # plus the far field's prefix sums and geometric filters (sl.far_ulps)
  rel = _EPS * (16.0 * tf + (8.0 * n + sl.far_ulps(n)[0]) * levels)
  bad = bad | ~(xp.asarray(t_i) >= 1)
  rel = xp.where(bad, xp.nan, rel)   # invalid traced lanes -> NaN results
  # the upper atoms' positions (up_loss) involve the upper lattice only, so the
  # upper side's slack has no lower-lattice term: the upper values are the same
  # whether or not the lower law is built (``lower=False``); the lower side's
  # slack covers both lattices
  eta = ledger + 8 * _EPS * (4.0 + xp.abs(Ul.u_ref) + 2.0 * xp.abs(lnt) + 2.0 * m_up * Ul.step)
  eta_lo = ledger + 8 * _EPS * (4.0 + xp.abs(Ul.u_ref) + xp.abs(Ll.u_ref) + 2.0 * xp.abs(lnt)
                                + 2.0 * m_up * (Ul.step + Ll.step))
  # invalid lanes: NaN laws too (explicitly; with the far field, NaN masses no
  # longer reach every output cell through the diagonal loop)
  up_p = xp.where(bad, xp.nan, U.p)
  lo_a = xp.where(bad, xp.nan, Lw.a)
  return FinalLaws(up_p, up_loss, U.q0, U.minf / tf, lo_a, lo_loss, Lw.q0, rel, eta,
                   xp.asarray(lo_inf, xp.float64), eta_lo)


def delta_one(F: FinalLaws, eps, which: int, *, ns=JAX):
  """One of (rem_up, add_up, rem_lo, add_lo) at eps (broadcast over eps).

  Floating-point ledger: masses carry a relative error <= rel and atom
  positions a log error <= eta, so the certified values are
  up: (1 + rel) e^eta delta(eps - eta) (remove), (1 + rel) delta(eps - eta) (add);
  lo: (1 - rel) e^-eta delta(eps + eta), (1 - rel) delta(eps + eta).
  """
  xp = ns.xp
  e0 = xp.asarray(eps, xp.float64)
  e = (e0 - F.eta if which < 2 else e0 + F.eta_lo)[..., None]
  if which == 0:    # remove, upper: e^eps sum p expm1(l - eps)_+ + minf/t
    v = xp.exp(e[..., 0]) * xp.sum(F.up_p * xp.maximum(xp.expm1(F.up_loss - e), 0.0),
                                     axis=-1) + F.up_minf_t
    v = v * xp.exp(F.eta)
  elif which == 1:  # add, upper: sum p (1 - e^{eps + l})_+ + q0
    v = xp.sum(F.up_p * xp.maximum(-xp.expm1(F.up_loss + e), 0.0), axis=-1) + F.up_q0
  elif which == 2:
    v = xp.exp(e[..., 0]) * xp.sum(F.lo_a * xp.maximum(xp.expm1(F.lo_loss - e), 0.0),
                                     axis=-1) * xp.exp(-F.eta_lo) + F.lo_inf
  else:
    v = xp.sum(F.lo_a * xp.maximum(-xp.expm1(F.lo_loss + e), 0.0), axis=-1) + F.lo_q0
  if which < 2:
    v = v * (1.0 + F.rel)
  else:
    v = v * (1.0 - F.rel)
  return xp.where(xp.isnan(F.rel) | xp.isnan(e0), xp.nan, v)


def deltas(F: FinalLaws, eps, Fa: FinalLaws | None = None, *, ns=JAX):
  """(rem_up, add_up, rem_lo, add_lo) at eps (broadcast over eps's shape).

  ``Fa`` (default ``F``): laws for the add direction when they differ (a
  mechanism given as discrete PLDs with direction-specific laws).
  """
  Fa = F if Fa is None else Fa
  return tuple(delta_one(G, eps, w, ns=ns) for w, G in zip(range(4), (F, Fa, F, Fa)))


def epsilons(F: FinalLaws, delta, Fa: FinalLaws | None = None, *, ns=JAX):
  Fa = F if Fa is None else Fa
  xp = ns.xp
  d = xp.asarray(delta, xp.float64)

  def hi(p, loss):
    return xp.maximum(xp.max(xp.where(p > 0, xp.abs(loss), 0.0)), 1.0) + 1.0

  inv = lambda G, w, p, loss: ns.invert_decreasing(lambda e: delta_one(G, e, w, ns=ns), d,
                                                    hi(p, loss), upper=w < 2)
  er_u, ea_u = inv(F, 0, F.up_p, F.up_loss), inv(Fa, 1, Fa.up_p, Fa.up_loss)
  er_l, ea_l = inv(F, 2, F.lo_a, F.lo_loss), inv(Fa, 3, Fa.lo_a, Fa.lo_loss)
  bad = xp.isnan(F.rel) | xp.isnan(Fa.rel) | ~(d > 0) | ~(d < 1)
  return tuple(xp.where(bad, xp.nan, v) for v in (er_u, ea_u, er_l, ea_l))


def auto_tail(delta):
  """Per-stage tail cut for an epsilon query: far below delta (tightness only)."""
  return jnp.clip(TAIL_FACTOR * jnp.asarray(delta, jnp.float64), 1e-30, 1e-12)


_CHUNK = 1 << 16  # lanes per vmapped block on the accelerator layout: the whole
                 # call (its chunk is sized from device memory by the caller)


def _map_lanes(one, xs):
  """``one`` over the lanes of ``xs``: a plain ``lax.map`` (a scan, no vmap) where
  a block is one lane (the CPU), else vmapped blocks (``map_blocks``). Inside a
  vmap, even of one lane, the pairwise sums' diagonal index (a loop counter with
  a per-lane trip count, the near band) is batched and every slice of the loop
  body becomes a gather: one lane at a time under vmap ran 128 sigmas' laws
  (t = 234) about twice as slowly as a scan."""
  b = lanes_per_block(_CHUNK)
  return jax.lax.map(one, xs) if b == 1 else map_blocks(one, xs, batch_size=b)


def laws_batch(param, t, tail, *, n, mechanism, lower=True, host: bool | str = False,
               aot: str | None = None):
  """FinalLaws for lanes (param, t, tail) (1-D arrays); n, mechanism static.

  The one-step laws are computed on the host (:mod:`._one_step`, NumPy) and
  passed to :func:`steps_laws_batch`, one compiled program for both
  mechanisms; traced inputs (a call inside the user's ``jit``) build them
  in-program instead (:func:`final_laws`). ``host=True`` (concrete input
  only; traced input ignores it): the round laws are built in NumPy too
  (:func:`steps_laws_host`, zero compiled programs; NumPy arrays out);
  ``host="loops"``: the same, but the pairwise sums' near-band loops run as
  one small compiled program (``HOST_LOOPS``, smaller than the jitted law
  program), bit for bit NumPy's laws, on the CPU layout only.
  ``aot`` (concrete input, jitted path): ``"compile"`` compiles the program
  these lanes would run (``CachedJit.precompile``) without running it and
  returns None; ``"shapes"`` returns its output as ``jax.ShapeDtypeStruct``s
  (nothing compiled or run); ``"executable"`` returns that program compiled
  and not run, JAX's ``Compiled`` (``as_text()``: the optimised HLO;
  ``memory_analysis()``), for the checks and benchmarks that count what it
  executes. On the accelerator layout the program builds the one-step laws
  itself (:func:`mechanism_laws_batch`).
  """
  if any(isinstance(x, jax.core.Tracer) for x in (param, t, tail)):
    one = lambda xs: final_laws(xs[0], xs[1], n=n, tail=xs[2], mechanism=mechanism,
                                lower=lower)
    return _map_lanes(one, (jnp.asarray(param, jnp.float64), jnp.asarray(t, jnp.int32),
                            jnp.asarray(tail, jnp.float64)))
  param = np.asarray(param, np.float64)
  tail = np.asarray(tail, np.float64)
  t = np.asarray(t, np.int32)
  aots = lambda f: {None: f, "compile": f.precompile, "shapes": f.eval_shape,
                    "executable": lambda *a, **k: f.lower(*a, **k).compile()}[aot]
  if accelerator_layout() and not host:
    # one program: the one-step laws in it, a static level count (no host round trips)
    return aots(mechanism_laws_batch)(param, t, tail, n=int(n), mechanism=mechanism,
                                      lower=lower, levels=static_levels(t))
  st = one_steps(mechanism, param, tail, int(n))
  if host:
    loops = host == "loops" and not accelerator_layout()
    return steps_laws_host(*st, param, t, tail, n=int(n), lower=lower,
                           ns=HOST_LOOPS if loops else HOST)
  return aots(steps_laws_batch)(*st, param, t, tail, n=int(n), lower=lower)


def steps_laws_host(p, q0, minf, a, g, lo, D, param, t, tail, *, n, lower=True,
                    ns=HOST) -> FinalLaws:
  """:func:`steps_laws_batch` on the host (same arguments): the FinalLaws of
  the lanes, NumPy arrays with the leading lane axis, ZERO compiled programs.

  The same text (:mod:`._sum_law` with ``ns = HOST``; ``ns = HOST_LOOPS``:
  the pairwise sums' loops compiled, one small program); the laws agree with
  the jitted ones to rounding (tests/allocation/test_allocation_laws_host.py).
  Lanes run one after another (CPU, about the jitted per-lane cost once
  compiled); for many lanes prefer the compiled kernel.
  """
  cols = [np.asarray(x) for x in (p, q0, minf, a, g, lo, D, param, t, tail)]
  lanes = cols[7].shape[0]
  with np.errstate(all="ignore"):
    out = [_laws_host_one(*(c[i] for c in cols), n=int(n), lower=lower, ns=ns)
           for i in range(lanes)]
  return FinalLaws(*(np.stack(x) for x in zip(*out)))


def _laws_host_one(p, q0, minf, a, g, lo, D, param, t, tail, *, n, lower, ns):
  """:func:`laws_from_step` of one lane, on the host."""
  t_i = np.int32(t)
  tail = np.float64(tail)
  lat = sl.Lattice(np.float64(lo), np.float64(D), 0)
  up = sl.UpperLaw(np.asarray(p, np.float64), np.float64(q0), np.float64(minf))
  lw = sl.LowerLaw(np.asarray(a, np.float64), np.asarray(g, np.float64), np.float64(0.0))
  m = sl.out_size(n)
  laws = (lambda: sl.sum_law_upper(up, lat, t_i, n, tail, 0.0, ns=ns),
          lambda: sl.sum_law_lower(lw, lat, t_i, n, tail, 0.0, ns=HOST) if lower else (
              sl.LowerLaw(np.zeros(m), np.zeros(m), np.zeros(())),
              sl.Lattice(np.zeros(()), np.ones(()), np.zeros((), np.int32))))
  # one after the other: on two threads they contend for the interpreter (their
  # numpy calls are short), so threads would not save time
  (U, Ul, ledger), (Lw, Ll) = (f() for f in laws)
  return _final_host(U, Ul, ledger, Lw, Ll, t_i, param, n)


def _final_host(U, Ul, ledger, Lw, Ll, t_i, param, n):
  bad = ~(np.float64(param) > 0) | ~np.isfinite(np.float64(param))
  F = assemble_final(U, Ul, np.float64(ledger), Lw, Ll, t_i, n, bad, 0.0, ns=HOST)
  return FinalLaws(*(np.asarray(x, np.float64) for x in F))


def shared_upper_laws(param, ts, tail, *, n, mechanism) -> FinalLaws:
  """Upper FinalLaws (no lower law) of 1-of-t rounds for one ``param`` and
  ``tail`` and the counts ``ts`` (ints >= 1), on the host, lanes in the order
  of ``ts``: :func:`._sum_law.sum_laws_upper` (levels of common leading bits
  computed once). On the CPU layout the pairwise sums' loops are one small
  compiled program (``HOST_LOOPS``; elsewhere NumPy's). Each lane is bit for
  bit ``laws_batch(..., lower=False, host="loops")``'s."""
  ns = HOST if accelerator_layout() else HOST_LOOPS
  ts = np.asarray(ts).ravel()
  if ts.size == 0 or not np.issubdtype(ts.dtype, np.integer) or np.any(ts < 1):
    raise ValueError(f"ts must be integers >= 1 (at least one); got {ts!r}.")
  ts = ts.astype(np.int32)
  st = one_steps(mechanism, np.array([param], np.float64), np.array([tail], np.float64), int(n))
  p, q0, minf, _, _, lo, D = (np.asarray(x)[0] for x in st)
  up = sl.UpperLaw(np.asarray(p, np.float64), np.float64(q0), np.float64(minf))
  lat = sl.Lattice(np.float64(lo), np.float64(D), 0)
  m = sl.out_size(n)
  Lw = sl.LowerLaw(np.zeros(m), np.zeros(m), np.zeros(()))
  Ll = sl.Lattice(np.zeros(()), np.ones(()), np.zeros((), np.int32))
  with np.errstate(all="ignore"):
    res = sl.sum_laws_upper(up, lat, ts, int(n), np.float64(tail), 0.0, ns)
    out = [_final_host(U, Ul, led, Lw, Ll, t, param, int(n)) for (U, Ul, led), t in zip(res, ts)]
  return FinalLaws(*(np.stack(x) for x in zip(*out)))


@functools.partial(jit, static_argnames=("n", "lower"),
                   compiler_options=ACCELERATOR_OPTIONS)
def steps_laws_batch(p, q0, minf, a, g, lo, D, param, t, tail, *, n, lower=True):
  """FinalLaws for lanes of one-step laws (:class:`._one_step.Steps` fields)
  and (param, t, tail) (1-D arrays); ``n``, ``lower`` static.

  Blocks of lanes one after another (:func:`_map_lanes`): one lane at a time
  (a scan, no vmap) on the CPU, where vmapped lanes turn the pairwise sums'
  lane-dependent slices into gathers; vmapped blocks of ``_CHUNK`` on
  accelerators.
  """
  require_x64("allocation.pld")

  def one(xs):
    p_, q0_, minf_, a_, g_, lo_, D_, param_, t_, tail_ = xs
    up = sl.UpperLaw(p_, q0_, minf_)
    lw = sl.LowerLaw(a_, g_, jnp.zeros(()))
    lat = sl.Lattice(lo_, D_, jnp.zeros((), jnp.int32))
    return laws_from_step(up, lw, lat, param_, t_, n=n, tail=tail_, lower=lower)

  return _map_lanes(one, (p, q0, minf, a, g, lo, D, param, t, tail))


def static_levels(t) -> int:
  """The accelerator layout's static level count for lanes ``t``: the bit length
  of the largest (one program for every t of that bit length)."""
  return max(int(np.max(np.asarray(t, np.int64), initial=1)), 1).bit_length()


@functools.partial(jit, static_argnames=("n", "mechanism", "lower", "levels"),
                   compiler_options=ACCELERATOR_OPTIONS)
def mechanism_laws_batch(param, t, tail, *, n, mechanism, lower=True, levels=None):
  """FinalLaws for lanes (param, t, tail) (1-D arrays) with the one-step laws
  built in the program (:func:`final_laws`): the accelerator layout's laws
  program, ``levels`` binary-powering levels (static, :func:`static_levels`)."""
  require_x64("allocation.pld")
  one = lambda xs: final_laws(xs[0], xs[1], n=n, tail=xs[2], mechanism=mechanism,
                              lower=lower, levels=levels)
  return _map_lanes(one, (param, t, tail))


@jit
def eps_batch(F, delta):
  return jax.vmap(epsilons)(F, delta)


@jit
def delta_batch(F, eps):
  return jax.vmap(deltas)(F, eps)

