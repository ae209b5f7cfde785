"""Array namespaces: one formula, evaluated on the host or in a jitted kernel.

A formula written against a :class:`Namespace` ``ns`` (``ns.xp`` is ``numpy``
or ``jax.numpy``, ``ns.sp`` is ``scipy.special`` or ``jax.scipy.special``,
which share the names used here: ``gammaln``, ``logsumexp``, ``log_ndtr``)
runs unchanged in NumPy/SciPy on the host (:data:`HOST`, for a scalar
question: ZERO compiled XLA programs) or traced inside a jitted kernel
(:data:`JAX`, for arrays and traced input). The few constructs that differ
(``lax.scan``, ``lax.map``, ``vmap``, ``x.at[i].add``, the halving
``bisect`` and ``newton_keep_feasible`` of :mod:`jaxacct._core.solve`) are the small shims below.

The host path runs under ``numpy.errstate(all="ignore")`` (see
:func:`host_call`): both branches of a ``where`` are evaluated, as under jit,
and their masked infinities must not warn.
"""

from __future__ import annotations

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import parallel, solve

class Namespace:
  """``xp`` (array module), ``sp`` (special functions) and the shims.

  ``sp`` is imported on first use (importing ``scipy.special`` is slow).
  ``compiled_loops`` (host only): a formula whose inner loop has a compiled
  form runs that small program for it, the rest in NumPy (:data:`HOST_LOOPS`).
  """

  def __init__(self, xp, sp_module: str, is_host: bool, compiled_loops: bool = False,
               max_trips: int | None = None):
    self.xp = xp
    self._sp_module = sp_module
    self.is_host = is_host
    self.compiled_loops = bool(compiled_loops)
    self.max_trips = max_trips

  def with_max_trips(self, n: int) -> "Namespace":
    """This namespace, but a jitted :meth:`fori_loop` whose end is traced runs
    ``n`` (static) trips, those past the end masked no-ops (see there)."""
    return Namespace(self.xp, self._sp_module, self.is_host, self.compiled_loops,
                     max_trips=int(n))

  @functools.cached_property
  def sp(self):
    return importlib.import_module(self._sp_module)

  def scan(self, f, init, xs, reverse=False):
    """``jax.lax.scan`` (stacked outputs; ``xs`` an array or a tuple of arrays)."""
    if not self.is_host:
      return jax.lax.scan(f, init, xs, reverse=reverse)
    seq = xs if isinstance(xs, tuple) else (xs,)
    n = seq[0].shape[0]
    order = range(n - 1, -1, -1) if reverse else range(n)
    carry, ys = init, [None] * n
    for i in order:
      x = tuple(s[i] for s in seq) if isinstance(xs, tuple) else xs[i]
      carry, ys[i] = f(carry, x)
    if ys and ys[0] is not None:
      ys = np.stack(ys)
    else:
      ys = None
    return carry, ys

  def fori_loop(self, lo, hi, body, init):
    """``jax.lax.fori_loop``; on the host a Python loop over ``range(lo, hi)``.

    With ``max_trips`` (:meth:`with_max_trips`) and a traced ``hi``: a loop of
    the static trip count ``max_trips - lo`` whose trips ``i >= hi`` keep the
    carry as it is (a select per lane: under ``vmap`` no loop whose trip count
    is decided per lane at run time, which an accelerator pays a host round
    trip a trip for). The carry is bit for bit that of the plain loop; where
    ``hi > max_trips`` its inexact leaves are NaN (never a short loop).
    """
    if not self.is_host:
      if self.max_trips is None or isinstance(hi, (int, np.integer)):
        return jax.lax.fori_loop(lo, hi, body, init)
      end = jnp.asarray(hi)

      def masked(i, x):
        return jax.tree.map(lambda a, b: jnp.where(i < end, a, b), body(i, x), x)

      out = jax.lax.fori_loop(lo, self.max_trips, masked, init)
      nan = lambda a: (jnp.where(end > self.max_trips, jnp.nan, a)
                       if jnp.issubdtype(a.dtype, jnp.inexact) else a)
      return jax.tree.map(nan, out)
    x = init
    for i in range(int(lo), int(hi)):
      x = body(i, x)
    return x

  def map_rows(self, f, xs):
    """``jax.vmap(f)(xs)`` (one traced body); on the host, ``f`` row by row, stacked."""
    if not self.is_host:
      return jax.vmap(f)(xs)
    return np.stack([f(x) for x in xs])

  def map_seq(self, f, xs):
    """``jax.lax.map(f, xs)`` (one traced body, lanes one after another; ``xs``
    and the output pytrees); on the host, ``f`` on each slice (the slices on
    the CPU cores, :func:`jaxacct._core.parallel.host_map`), leaves stacked."""
    if not self.is_host:
      return jax.lax.map(f, xs)
    n = jax.tree.leaves(xs)[0].shape[0]
    outs = parallel.host_map(lambda i: f(jax.tree.map(lambda a: a[i], xs)), range(n))
    return jax.tree.map(lambda *a: np.stack(a), *outs)

  def bisect(self, fn, lo, hi, *, increasing, num_iters):
    """The feasible end ``x`` of :func:`jaxacct._core.solve.bisect` (halving;
    feasible where ``fn(x) <= 0``); on the host the same halvings in NumPy."""
    if not self.is_host:
      return solve.bisect(fn, lo, hi, increasing=increasing, num_iters=num_iters).x
    a, b = np.broadcast_arrays(np.asarray(lo, np.float64), np.asarray(hi, np.float64))
    for _ in range(num_iters):
      m = 0.5 * (a + b)
      feas = fn(m) <= 0
      move_a = feas if increasing else ~feas
      a, b = np.where(move_a, m, a), np.where(move_a, b, m)
    return a if increasing else b

  def invert_decreasing(self, fn, target, hi, *, upper, num_iters=80):
    """:func:`jaxacct._core.solve.invert_decreasing`; on the host the same
    halvings in NumPy."""
    if not self.is_host:
      return solve.invert_decreasing(fn, target, hi, upper=upper, num_iters=num_iters)
    target = np.asarray(target, np.float64)
    lo = np.zeros_like(target)
    hi = np.broadcast_to(np.asarray(hi, np.float64), target.shape)
    a, b = lo, hi
    for _ in range(num_iters):
      mid = 0.5 * (a + b)
      ok = fn(mid) <= target
      a, b = np.where(ok, a, mid), np.where(ok, mid, b)
    if upper:
      res = np.where(fn(lo) <= target, 0.0, b)
      return np.where(fn(hi) <= target, res, np.inf)
    return np.where(fn(lo) <= target, 0.0, a)

  def safeguarded_root(self, evaluate, propose, a, b, x0, *, target, max_iter, rtol,
                       first=None, axis_name=None):
    """:func:`jaxacct._core.solve.safeguarded_root` (one lane); on the host the
    same steps in NumPy, its ``while`` loop in Python (``first``/``axis_name``:
    the jitted loop's static trips, see there)."""
    if not self.is_host:
      return solve.safeguarded_root(evaluate, propose, a, b, x0, target=target,
                                    max_iter=max_iter, rtol=rtol, first=first,
                                    axis_name=axis_name)
    xn, it, wlast = x0, -1, np.inf
    while it < max_iter:
      value, *aux = evaluate(xn)
      a2, b2 = (a, xn) if value <= target else (xn, b)
      slow = it % 4 == 3 and (b2 - a2) > 0.5 * wlast
      wlast = b2 - a2 if it % 4 == 3 else wlast
      xn = 0.5 * (a2 + b2) if slow else propose(xn, value, *aux, a2, b2)
      a, b, it = a2, b2, it + 1
      if (b2 - a2) <= rtol * b2:
        break
    return a, b

  def newton_keep_feasible(self, fn, minus_slope, x0, target, *, num_iters):
    """:func:`jaxacct._core.solve.newton_keep_feasible`; on the host in NumPy."""
    if not self.is_host:
      return solve.newton_keep_feasible(fn, minus_slope, x0, target, num_iters=num_iters)
    x = x0
    for _ in range(num_iters):
      s = minus_slope(x)
      x2 = x + (fn(x) - target) / np.where(s > 0, s, np.inf)
      x = np.where(fn(x2) >= target, np.maximum(x2, x), x)
    return x

  def add_at(self, a, idx, v):
    """``a.at[idx].add(v)`` (a new array; repeated indices accumulate)."""
    if not self.is_host:
      return a.at[idx].add(v)
    out = np.array(a, copy=True)
    np.add.at(out, idx, v)
    return out


HOST = Namespace(np, "scipy.special", True)
#: HOST, but a loop-heavy inner kernel that has a compiled form runs it (one
#: small program a process, on the CPU): many host evaluations of the same
#: formula at a fraction of the NumPy loop's cost, without the whole program's
#: compile (the allocation laws' pairwise sums, :mod:`jaxacct.allocation.pld`).
HOST_LOOPS = Namespace(np, "scipy.special", True, compiled_loops=True)
JAX = Namespace(jnp, "jax.scipy.special", False)


def host_call(fn, *args, **kwargs):
  """``fn(*args, ns=HOST, **kwargs)`` with NumPy's floating-point warnings off."""
  with np.errstate(all="ignore"):
    return fn(*args, ns=HOST, **kwargs)


def each_lane(one, *args) -> np.ndarray:
  """``one(*lane)`` for each lane of the broadcast ``args``, each a NumPy
  float64 scalar (a lane is its one-lane question, bit for bit): a float64
  array of the broadcast shape."""
  arrs = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in args))
  flat = [a.ravel() for a in arrs]
  out = [one(*(f[i] for f in flat)) for i in range(arrs[0].size)]
  return np.reshape(np.array(out, np.float64), arrs[0].shape)


def for_inputs(*xs, max_lanes: int = 1) -> Namespace:
  """The host-or-jitted choice, made once per question (the one rule).

  :data:`HOST` when no ``x`` is a jax array or a tracer and the inputs
  broadcast to at most ``max_lanes`` lanes (a question small enough that
  NumPy answers it before XLA could compile a program); else :data:`JAX`.
  ``None`` entries are ignored.
  """
  sizes = []
  for x in xs:
    if x is None:
      continue
    if isinstance(x, (jax.Array, jax.core.Tracer)):
      return JAX
    sizes.append(np.shape(x))
  try:
    lanes = int(np.prod(np.broadcast_shapes(*sizes))) if sizes else 1
  except ValueError:
    return JAX        # shapes that do not broadcast: the kernel's checks name them
  return HOST if lanes <= max_lanes else JAX


def kernel_arg(x, dtype=np.float64):
  """A jitted kernel's argument: NumPy when concrete and not a jax array (no
  eager conversion program is compiled), else ``jnp.asarray`` (traced input
  as it is)."""
  if not isinstance(x, (jax.Array, jax.core.Tracer)):
    return np.asarray(x, dtype)
  return jnp.asarray(x, dtype)
