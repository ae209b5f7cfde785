r"""RDP of shuffled eps0-LDP reports: Chen et al.'s multinomial bound.

Chen et al. (the author list is missing from our text copy), "Renyi
Differential Privacy in the Shuffle Model: Enhanced Amplification Bounds",
arXiv:2401.04306v1.

Proofs and sources: docs/bounds/shuffle.md ("Bounds and proofs /
Shuffling").
"""

from __future__ import annotations

import functools
import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import checks
from jaxacct._core.batching import map_blocks
from jaxacct._core.dtype import dispatch, require_x64
from jaxacct._core.conversion import rdp_to_epsilon_kernel
from jaxacct._core.logmath import log_binom_pmf, logsumexp
from jaxacct._core.namespace import HOST
from jaxacct._core.orders import DEFAULT_ORDERS
from jaxacct._core.solve import bisect
from jaxacct._core.results import EpsilonResult
from jaxacct.shuffle import _binned
from jaxacct.shuffle._rdp_rounds import compose_rdp_epsilon
from jaxacct._core.compiled import jit


def _inner(lam, cs, th, num_a, lower, focus=None):
  """Per-bin log contributions to ``G_c - 1`` for c in ``cs`` (shape (O, K)).

  Returns ``(terms, xa)`` with terms of shape (O, K, num_a + 4).
  """
  top = cs + 1.0                             # a in [0, c + 1]
  half = jnp.floor(top / 2.0)
  ea = _binned.make_grid(top, half, jnp.sqrt(top) / 2.0, num_a, focus=focus)
  xa, ya, la = _binned.bins(ea, top)
  tt = top[..., None]
  lpmf_a = lambda k: log_binom_pmf(k, tt, 0.5)
  mode_a = jnp.floor((tt + 1.0) / 2.0)
  left = (xa + ya) < tt                      # bin below the centre (c+1)/2
  lam3 = lam[..., None]
  if lower:
    lmass_a = _binned.log_mass_lower(lpmf_a, xa, ya, la)
    aa = jnp.where(left, ya, xa)             # phi at the end nearer 1/2
    lphi = _binned.log_convex_gap(lam3, th * (2.0 * aa / tt - 1.0), kind="chen")
  else:
    # Chord of the convex phi times the geometric envelope of the pmf
    # (``_binned.log_sum_upper``); phi grows away from the centre.
    xx = th * (2.0 * xa / tt - 1.0)
    xy = th * (2.0 * ya / tt - 1.0)
    lx = _binned.log_convex_gap(lam3, xx, kind="chen")
    ly = _binned.log_convex_gap(lam3, xy, kind="chen")
    lf = _binned.pmf_ends(lpmf_a, xa, ya)
    b1 = _binned.log_sum_upper(lpmf_a, xa, ya, la, mode_a, lx, ly, lf=lf)
    # Right of the centre, phi <= h = (1+x)^lam (1-x)^(1-lam), and log h is
    # convex for x >= (1-s)/(1+s), s = sqrt(1-1/lam): log-chord envelope,
    # much tighter where the summand is steep (large lam * eps0).
    lh = lambda v: lam3 * jnp.log1p(v) + (1.0 - lam3) * jnp.log1p(-v)
    sq = jnp.sqrt(1.0 - 1.0 / lam3)
    conv = (xx >= (1.0 - sq) / (1.0 + sq)) & (xa >= mode_a)
    b2 = _binned.log_sum_upper_right_loglinear(lpmf_a, xa, ya, la, lh(xx), lh(xy), lf=lf)
    return jnp.where(conv, jnp.minimum(b1, b2), b1), xa
  return lmass_a + lphi, xa


def _peak(terms, pts):
  idx = jnp.argmax(jnp.where(jnp.isnan(terms), -jnp.inf, terms), axis=-1)
  return jnp.take_along_axis(jnp.broadcast_to(pts, terms.shape), idx[..., None],
                             axis=-1)[..., 0]


def _tilted_peak(lam, top, th, iters=64):
  """Maximiser in ``a`` of ``log Bin(a; c+1, 1/2) + log h(x_a)`` (continuous).

  Root in t = a/(c+1) of ``-(c+1) logit(t) + 2 th (lam/(1+x) + (lam-1)/(1-x))``
  (decreasing in t, positive at t = 1/2), by bisection on [1/2, 1).
  """
  lo = jnp.full(jnp.broadcast_shapes(lam.shape, top.shape), 0.5)

  def minus_d(t):
    x = th * (2.0 * t - 1.0)
    return top * (jnp.log(t) - jnp.log1p(-t)) - 2.0 * th * (
        lam / (1.0 + x) + (lam - 1.0) / (1.0 - x))

  res = bisect(minus_d, lo, jnp.ones_like(lo), increasing=True, num_iters=iters)
  lo, hi = res.x, res.x + res.width
  return jnp.round(0.5 * (lo + hi) * top)


def _log_gm1(lam, cs, th, num_a, lower):
  """``log(G_c - 1)`` bound; the a-grid is also dense at the tilted peak."""
  focus = _tilted_peak(lam, cs + 1.0, th)
  terms, _ = _inner(lam, cs, th, num_a, lower, focus=focus)
  return logsumexp(terms, axis=-1)


def _lane(n, eps0, orders, num_c, num_a, lower, passes=3):
  """One (n, eps0): RDP at all orders (upper or lower bracket of the sum)."""
  lam = jnp.asarray(orders, jnp.float64)[:, None]          # (O, 1)
  big_n = n - 1.0
  p = jnp.exp(-eps0)
  th = jnp.tanh(eps0 / 2.0)
  mode_c = _binned.binom_mode(big_n, p)
  sd_c = jnp.sqrt(big_n * p * (1.0 - p))
  lpmf_c = functools.partial(log_binom_pmf, n=big_n, p=p)

  def outer(focus):
    top = jnp.full(lam.shape[:1], big_n)
    edges = _binned.make_grid(top, jnp.full(lam.shape[:1], mode_c),
                              jnp.full(lam.shape[:1], sd_c), num_c, focus=focus)
    x, y, ln = _binned.bins(edges, top)
    if lower:
      lmass = _binned.log_mass_lower(lpmf_c, x, y, ln)
      cs = y                                 # G_c >= G_y on the bin
    else:
      lmass = _binned.log_mass_upper(lpmf_c, x, y, ln, mode_c)
      cs = x                                 # G_c <= G_x on the bin
    lg = _log_gm1(lam, cs, th, num_a, lower)
    # Next focus: the best grid *point* (pmf times G at that c), which wide
    # bins cannot inflate.
    point = jnp.where(ln >= 1, lpmf_c(cs), -jnp.inf) + lg
    return lmass + lg, _peak(point, cs)

  # Pass 1 focuses on the pmf mode; later passes on the tilted peak.
  focus0 = jnp.full(lam.shape[:1], mode_c)
  terms, focus = outer(focus0)
  if passes > 1:
    terms, focus = jax.lax.fori_loop(0, passes - 1, lambda _, tf: outer(tf[1]),
                                     (terms, focus))
  log_em1 = logsumexp(terms, axis=-1)
  rdp = jnp.logaddexp(0.0, log_em1) / (lam[:, 0] - 1.0)
  # the shuffled reports are eps0-DP, so eps0 bounds every order: where the sum
  # overflows (NaN past eps0 ~ 30 at large n) the upper is eps0 and the lower 0
  return jnp.where(jnp.isnan(rdp), 0.0 if lower else eps0, jnp.minimum(rdp, eps0))


@functools.partial(jit, static_argnames=("orders", "num_c", "num_a",
                                             "lower", "batch_size"))
def _exact_jit(n, eps0, *, orders, num_c, num_a, lower, batch_size):
  return _exact_impl(n, eps0, orders, num_c, num_a, lower, batch_size)


@functools.partial(jit, static_argnames=("num_c", "num_a", "lower", "passes"))
def _lane_at_jit(n, eps0, orders, *, num_c, num_a, lower, passes=3):
  """One (n, eps0) lane of :func:`_exact_impl` at a traced 1-D block of orders
  (one program per block length, not per order tuple), before the monotone
  envelope; for n >= 2 and eps0 > 0."""
  require_x64("chen_exact_rdp")
  return _lane(jnp.asarray(n, jnp.float64), jnp.asarray(eps0, jnp.float64),
               jnp.asarray(orders, jnp.float64), num_c, num_a, lower, passes)


_BLOCK = 16          # orders per call of the upper kernel in chen_epsilon's search
_SCREEN_NUM = 48     # grid of the lower-bracket screen (one pass: every grid is a lower bound)
_MAX_SEARCHED = 96   # past this many orders, the whole curve is computed at once


def _at(n, eps0, orders, num, lower, passes=3):
  """:func:`_lane_at_jit` at ``orders`` (NumPy), padded to whole blocks of
  :data:`_BLOCK` (one compiled program per kind of call); a repeated question
  (the ``jaxacct`` table's two shuffling rows share n and eps0) is answered from
  memory."""
  return np.array(_at_cached(float(n), float(eps0), tuple(np.asarray(orders).tolist()), num,
                             lower, passes))


@functools.lru_cache(maxsize=256)
def _at_cached(n, eps0, orders, num, lower, passes):
  orders = np.asarray(orders, np.float64)
  pad = -len(orders) % _BLOCK
  block = np.concatenate([orders, np.repeat(orders[-1:], pad)])
  out = _lane_at_jit(n, eps0, block, num_c=num, num_a=num, lower=lower, passes=passes)
  out = np.asarray(out, np.float64)[:len(orders)]
  out.setflags(write=False)
  return out


def _floor(orders, low, rounds, delta, method):
  """Per order j, the smallest epsilon its RDP (at least ``low[j]``) can give at
  any order <= j (where the monotone envelope could carry it)."""
  o = orders.size
  cross = np.where(np.arange(o)[None, :] <= np.arange(o)[:, None], rounds * low[:, None], np.inf)
  return np.asarray(rdp_to_epsilon_kernel(orders, cross, np.full(o, delta), method,
                                          ns=HOST)[0], np.float64)


def _searched_curve(n, eps0, rounds, delta, orders, method, num_c, num_a):
  """Chen's upper RDP curve at ``orders`` (sorted), exact at every order that can
  decide epsilon at ``delta`` after ``rounds`` rounds and eps0 elsewhere, or None
  (compute the whole curve).

  The curve is a valid upper curve at every order (the kernel clips at eps0), so
  its epsilon is an upper bound; it equals the whole curve's epsilon because
  every order left at eps0 is certified unable to win: its true Renyi divergence
  is at least ``low`` (the kernel's lower bracket, one pass on a coarse grid,
  then on the full grid where that is not enough; raised to a running maximum
  since the divergence grows with the order), and ``low`` composed and converted
  at every order up to it (:func:`_floor`) is above the epsilon found. Blocks of
  orders are added, from the screen's best order on, until that holds.
  """
  o = orders.size
  keep = lambda v: np.maximum(np.maximum.accumulate(v) * (1.0 - 1e-9), 0.0)  # noqa: E731
  raw = _at(n, eps0, orders, min(_SCREEN_NUM, num_c, num_a), True, passes=1)
  low = keep(raw)
  floor = _floor(orders, low, rounds, delta, method)
  own = np.asarray(rdp_to_epsilon_kernel(orders[:, None], rounds * low[:, None],
                                         np.full(o, delta), method, ns=HOST)[0], np.float64)
  best = int(np.argmin(np.where(np.isnan(own), np.inf, own)))
  start = int(np.clip(best - _BLOCK // 2, 0, max(o - _BLOCK, 0)))
  todo = np.arange(start, min(start + _BLOCK, o))
  curve = np.full(o, float(eps0))
  known = np.zeros(o, bool)
  fine = np.zeros(o, bool)       # lower bracket on the full grid
  while todo.size:
    if known.sum() + todo.size > _MAX_SEARCHED:
      return None
    # the traced-orders program can round 1-2 ulp apart from the whole curve's
    # (static orders): a 1e-15 relative nudge keeps every value at or above it
    curve[todo] = np.minimum(_at(n, eps0, orders[todo], num_c, False) * (1.0 + 1e-15), eps0)
    known[todo] = True
    env = np.minimum.accumulate(curve[::-1])[::-1]
    eps = float(np.asarray(compose_rdp_epsilon(orders, env, rounds, delta, method)[0]))
    # NaN floors are never certified
    fails = lambda: np.flatnonzero(~known & ~(floor > eps * (1.0 + 1e-9)))  # noqa: E731
    fail = fails()
    new = fail[~fine[fail]]
    if new.size:     # a third of an upper order each: refine the screen first
      new = new[np.argsort(floor[new], kind="stable")[:2 * _BLOCK]]
      raw[new] = np.maximum(raw[new], _at(n, eps0, orders[new], min(num_c, num_a), True,
                                          passes=1))
      fine[new] = True
      low = keep(raw)
      floor = _floor(orders, low, rounds, delta, method)
      fail = fails()
    todo = fail[np.argsort(floor[fail], kind="stable")[:_BLOCK]]
  return curve


def _exact_impl(n, eps0, orders, num_c, num_a, lower, batch_size):
  require_x64("chen_exact_rdp")
  n = jnp.asarray(n, jnp.float64)
  eps0 = jnp.asarray(eps0, jnp.float64)
  shape = jnp.broadcast_shapes(n.shape, eps0.shape)
  nf = jnp.broadcast_to(n, shape).reshape(-1)
  ef = jnp.broadcast_to(eps0, shape).reshape(-1)
  ok = (nf >= 1) & (jnp.floor(nf) == nf) & (ef >= 0) & jnp.isfinite(ef)
  ns = jnp.where(ok, nf, 2.0)
  es = jnp.where(ok, ef, 1.0)
  es = jnp.maximum(es, 1e-300)
  fn = lambda ne: _lane(ne[0], ne[1], orders, num_c, num_a, lower)
  out = map_blocks(fn, (ns, es), batch_size=batch_size)
  if not lower:
    out = _binned.monotone_upper(out, np.asarray(orders))
  out = jnp.where((ef == 0)[:, None], 0.0, out)
  out = jnp.where((nf == 1)[:, None], ef[:, None], out)
  out = jnp.where(ok[:, None], out, jnp.nan)
  return out.reshape(shape + (len(orders),))


def chen_exact_rdp(orders=DEFAULT_ORDERS, *, n, eps0, num_c: int = 160,
                   num_a: int = 160, bound: str = "upper",
                   batch_size: int = 8):
  r"""Upper RDP bound of shuffling n eps0-LDP reports (Chen et al. exact bound).

  Chen et al., arXiv:2401.04306v1, Sec. 3.1 (Thm 1 / Cor. 1 via Prop. 1):
  the Renyi divergence of the clone pair
  :math:`P_0=(A+\Delta,C-A+1-\Delta)`, :math:`P_1=(A+1-\Delta,C-A+\Delta)`,
  :math:`C\sim\mathrm{Bin}(n-1,e^{-\epsilon_0})`,
  :math:`A|C\sim\mathrm{Bin}(C,1/2)`,
  :math:`\Delta\sim\mathrm{Bern}(e^{\epsilon_0}/(e^{\epsilon_0}+1))`
  (both directions are equal by symmetry). Same quantity as Feldman,
  McMillan & Talwar, arXiv:2012.12803, Sec. 6.1 (RDP of the clone pair).

  .. math:: D_\lambda = \frac1{\lambda-1}\log\sum_{c}w_c\,
     \mathbb E_{a\sim\mathrm{Bin}(c+1,\frac12)}\big[(1+x_a)^\lambda
     (1-x_a)^{1-\lambda}\big],\ x_a=\tanh\tfrac{\epsilon_0}2\big(\tfrac{2a}{c+1}-1\big).

  Args:
    orders: concrete 1-D array of real orders > 1 (default DEFAULT_ORDERS).
    n: number of users, integer >= 1; broadcasts with eps0.
    eps0: local privacy level >= 0.
    num_c, num_a: static grid sizes in c and in a (cost ~ num_c*num_a per
      order); larger is tighter, every size is a valid bound.
    bound: ``"upper"`` (default, certified) or ``"lower"`` (certified lower
      bracket of the same sum; used to measure the slack).
    batch_size: lanes evaluated together inside ``lax.map``.

  Returns:
    float64 array, shape ``broadcast(n, eps0).shape + (len(orders),)``.

  Bound: upper (``bound="upper"``). Exact (to rounding) when n <= num_c + 3
  (every integer an edge in c and in a).
  Clipped at eps0. eps0 = 0 gives 0; n = 1 gives eps0. Under jit, invalid
  lanes (n < 1 or non-integer, eps0 < 0 or non-finite) are NaN. The sum is
  finite for n up to 1e9, eps0 up to ~30, orders up to 1e4; past it, where it
  overflows, an order's upper is eps0 (the shuffled reports are eps0-DP) and
  its lower 0.
  """
  orders_np = checks.check_orders(orders)
  checks.check_choice("bound", bound, ("upper", "lower"))
  checks.check_int("num_c", num_c, min_value=16)
  checks.check_int("num_a", num_a, min_value=16)
  checks.check_int("batch_size", batch_size, min_value=1, scalar=True)
  kw = dict(orders=tuple(orders_np.tolist()), num_c=int(num_c),
            num_a=int(num_a), lower=bound == "lower", batch_size=int(batch_size))
  return dispatch(functools.partial(_exact_jit, **kw), (n, eps0),
                  lambda: (checks.check_int("n", n, min_value=1),
                           checks.check_range("eps0", eps0, 0.0, np.inf)))


def _closed(fn, name, orders, n, eps0):
  orders_np = checks.check_orders(orders)

  def run(n, eps0):
    require_x64(name)
    return _closed_jit(fn, tuple(orders_np.tolist()), n, eps0)

  return dispatch(run, (n, eps0), lambda: (checks.check_int("n", n, min_value=2),
                                            checks.check_range("eps0", eps0, 0.0, np.inf)))


@functools.partial(jit, static_argnums=(0, 1))
def _closed_jit(fn, orders, n, eps0):
  return fn(jnp.asarray(orders, jnp.float64), n, eps0)


def _asym(lam, n, eps0):
  n = jnp.asarray(n, jnp.float64)[..., None]
  e = jnp.asarray(eps0, jnp.float64)[..., None]
  out = 2.0 * jnp.exp(e) * lam / (n - 1.0)
  return jnp.where((n >= 2) & (e >= 0), out, jnp.nan)


def chen_asymptotic_rdp(orders=DEFAULT_ORDERS, *, n, eps0):
  r"""Approximate RDP of shuffling (Chen et al. Cor. 2): NOT a certified bound.

  Chen et al., arXiv:2401.04306v1, Cor. 2 (from the CLT of Lemma 1 and
  Thm 2): :math:`(\lambda, 2e^{\epsilon_0}\lambda/(n-1))`-RDP "approximately".
  Theorem 3 (shuffled noisy SGD over m blocks, T epochs) is
  ``T * chen_asymptotic_rdp(n=m)``.

  Args:
    orders: 1-D orders (the paper states lambda >= 2).
    n: users, integer >= 2. eps0: >= 0.

  Returns:
    float64, shape ``broadcast(n, eps0).shape + (len(orders),)``.

  Bound: approximate. Loose by ((e^eps0+1)/(e^eps0-1))^2 in the bulk, and
  BELOW the exact sum when n e^{-eps0} is small relative to lambda.
  Never use it to certify.
  """
  return _closed(_asym, "chen_asymptotic_rdp", orders, n, eps0)


def _gdp_mu(n, eps0):
  return 2.0 * jnp.exp(jnp.asarray(eps0) / 2.0) / jnp.sqrt(n - 1.0)


def chen_gdp_mu(*, n, eps0):
  r"""Approximate GDP parameter of shuffling (Chen et al. Thm 2).

  :math:`\mu = 2e^{\epsilon_0/2}/\sqrt{n-1}` (arXiv:2401.04306v1, Thm 2).
  Bound: approximate (see :func:`chen_asymptotic_rdp`).
  """
  return dispatch(_gdp_mu, (n, eps0),
                  lambda: (checks.check_int("n", n, min_value=2),
                           checks.check_range("eps0", eps0, 0.0, np.inf)),
                  eager=lambda n, eps0: _gdp_mu(np.asarray(n, np.float64), eps0),
                  where="chen_gdp_mu")


def chen_epsilon(*, n, eps0, delta, rounds=1, bound: str = "exact",
                 orders=None, method: str = "tight",
                 num_c: int = 160, num_a: int = 160) -> EpsilonResult:
  r"""(eps, delta) after ``rounds`` shuffle rounds via Chen et al.'s RDP.

  RDP adds over rounds (adaptive composition); conversion by
  ``jaxacct._core.conversion`` (``method="tight"``: Canonne-Kamath-Steinke
  Prop. 12; ``"classic"``: Mironov Prop. 3).

  Args:
    n: users per round, integer >= 1 (>= 2 for ``"asymptotic"``).
    eps0: >= 0. delta: in (0, 1). rounds: integer >= 1.
    bound: ``"exact"`` (certified, default) or ``"asymptotic"`` (Cor. 2,
      approximate; the result says ``bound="estimate"``).
    orders: Renyi orders (default DEFAULT_ORDERS).

  Returns:
    EpsilonResult(epsilon, delta, method="chen_exact"|"chen_asymptotic",
    bound="upper"|"estimate", order=best order).
  """
  checks.check_choice("bound", bound, ("exact", "asymptotic"))
  checks.check_choice("method", method, ("tight", "classic"))
  checks.check_delta(delta)
  checks.check_int("rounds", rounds, min_value=1)
  orders = DEFAULT_ORDERS if orders is None else orders
  if np.ndim(orders) != 1:   # static: a tracer knows its ndim
    raise ValueError(f"orders must be a 1-D array of Renyi orders; got {orders!r}.")
  if bound == "exact":
    rdp = _searched(n, eps0, delta, rounds, orders, method, num_c, num_a)
    if rdp is None:
      rdp = chen_exact_rdp(orders, n=n, eps0=eps0, num_c=num_c, num_a=num_a)
  else:
    rdp = chen_asymptotic_rdp(orders, n=n, eps0=eps0)
  eps, order = compose_rdp_epsilon(orders, rdp, rounds, delta, method)
  return EpsilonResult(epsilon=eps, delta=delta, method="chen_" + bound,
                       bound="upper" if bound == "exact" else "estimate",
                       order=order)


def _searched(n, eps0, delta, rounds, orders, method, num_c, num_a):
  """:func:`_searched_curve` in the caller's order of ``orders``, for one concrete
  question (scalars, n >= 2, eps0 > 0); None otherwise (the whole curve)."""
  vals = (n, eps0, delta, rounds)
  if not checks.is_concrete(vals) or any(np.ndim(v) != 0 for v in vals):
    return None
  # the whole curve's checks, before any conversion (errors name the argument)
  orders_np = checks.check_orders(orders)
  checks.check_int("n", n, min_value=1)
  checks.check_range("eps0", eps0, 0.0, np.inf)
  checks.check_int("num_c", num_c, min_value=16)
  checks.check_int("num_a", num_a, min_value=16)
  n, eps0, delta, rounds = (float(np.asarray(v)) for v in vals)
  if n < 2 or eps0 <= 0 or orders_np.ndim != 1:
    return None
  perm = np.argsort(orders_np, kind="stable")
  curve = _searched_curve(n, eps0, rounds, delta, orders_np[perm], method,
                          int(num_c), int(num_a))
  if curve is None:
    return None
  out = np.empty_like(curve)
  out[perm] = np.minimum.accumulate(curve[::-1])[::-1]
  return out
