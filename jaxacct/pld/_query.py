r"""Queries of a PLD: ``delta(epsilon)`` and ``epsilon(delta)``, one or both directions.

Exact for the discrete PLD (stable positive recurrences, no cancellation);
see :mod:`jaxacct.pld._core` for what the discrete PLD bounds.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import batching, checks, suffix_sums
from jaxacct._core.dtype import dispatch, host_scalar, require_x64
from jaxacct._core.namespace import JAX, host_call, kernel_arg
from jaxacct.pld._core import PLD, PairPLD, device_array
from jaxacct._core.compiled import jit

_BLOCK = 256
# The host's running sums (:func:`_running_tables`): chunks of at most this many
# atoms (rounding grows with a sum's length) spanning at most this many nats
# (the scale factors e^{+-span} stay in range).
_HOST_CHUNK = 256
_HOST_SCALED_SPAN = 30.0


def _tables(probs, step, ns, loopless=False, scaled=False):
  """T_k = sum_{i>k} p_i e^{-(i-k)h};  D_k = sum_{i>k} p_i (1 - e^{-(i-k)h}).

  Both are sums of nonnegative terms (no cancellation).  T satisfies
  ``T_k = e^{-h}(p_{k+1} + T_{k+1})``, hence ``D_k = D_{k+1} + (e^h - 1) T_k``.
  Computed blockwise (blocks of 256: a triangular matrix product inside a
  block, a short scan over blocks for the carries), which compiles fast; on
  the host, running sums inside a block (:func:`_host_tables`), O(N), or
  where ``e^{256 h}`` is out of range those of :func:`_running_tables`.
  ``scaled`` (static; :func:`scaled_step`): the blocks' sums of
  ``U_k = e^h T_k = sum_{i>k} p_i e^{-(i-k-1)h}``, every factor <= 1, with
  ``D_k = D_{k+1} + (1 - e^{-h}) U_k``: where ``e^{-h}`` times a small mass
  is below float64's normal range (flushed to 0), T's form loses that mass.
  """
  xp = ns.xp
  n = probs.shape[0]
  bsz = _BLOCK
  if ns.is_host and bsz * float(step) > _HOST_SCALED_SPAN:   # e^{B h} out of range
    return _running_tables(np.arange(n), np.asarray(probs, np.float64), float(step))
  nb = -(-n // bsz)
  p = xp.pad(probs, (0, nb * bsz - n)).reshape(nb, bsz)
  idx = xp.arange(bsz, dtype=xp.float64)
  if ns.is_host:
    return _host_tables(p, idx, xp.exp(-idx * step), float(step), n)
  diff = idx[None, :] - idx[:, None]  # i - k (row k, column i)
  if scaled:   # U = e^h T: every factor <= 1, no product underflows
    geo = xp.where(diff > 0, xp.exp(-(xp.maximum(diff, 1.0) - 1.0) * step), 0.0)
  else:
    geo = xp.where(diff > 0, xp.exp(-xp.maximum(diff, 0.0) * step), 0.0)
  t_loc = p @ geo.T
  v = p @ xp.exp(-idx * step)  # sum_i p_i e^{-(i - bB) h} per block
  rb = xp.exp(-bsz * step)

  def carry_fn(u_next, v_b):  # u_b = v_b + e^{-Bh} u_{b+1}
    return v_b + rb * u_next, u_next

  if loopless:
    u_next = suffix_sums.later_sum(v, -bsz * step, xp)
  else:
    _, u_next = ns.scan(carry_fn, xp.zeros((), p.dtype), v, reverse=True)
  if scaled:
    t = t_loc + xp.exp(-(bsz - 1 - idx) * step)[None, :] * u_next[:, None]
  else:
    t = t_loc + xp.exp(-(bsz - idx) * step)[None, :] * u_next[:, None]
  upper = (diff >= 0).astype(p.dtype)  # sum over i >= k inside the block
  s_loc = t @ upper.T
  tot = xp.sum(t, axis=1)

  def sum_fn(c, tb):
    return c + tb, c

  if loopless:
    s_next = suffix_sums.later_total(tot, xp)
  else:
    _, s_next = ns.scan(sum_fn, xp.zeros((), p.dtype), tot, reverse=True)
  if scaled:   # D_k = D_{k+1} + (1 - e^{-h}) U_k, T = e^{-h} U
    t, d = xp.exp(-step) * t, -xp.expm1(-step) * (s_loc + s_next[:, None])
  else:
    d = xp.expm1(step) * (s_loc + s_next[:, None])
  return t.reshape(-1)[:n], d.reshape(-1)[:n]


def _host_tables(p, idx, w, h, n):
  """:func:`_tables` on the host as running sums: inside a block,
  ``sum_{i>k} p_i e^{-(i-k)h} = e^{kh} sum_{i>k} p_i e^{-ih}`` (the same
  nonnegative terms, each rounded a few ulps apart; no cancellation), O(N)
  where the products are O(N B)."""
  bsz = p.shape[1]
  pw = p * w
  later = np.cumsum(pw[:, ::-1], axis=1)[:, ::-1]          # sum_{i>=k} in the block
  v = later[:, 0]
  after = np.zeros_like(later)
  after[:, :-1] = later[:, 1:]                             # sum_{i>k}: no subtraction
  t_loc = np.exp(idx * h)[None, :] * after
  u_next = np.empty_like(v)          # u_b = v_b + e^{-Bh} u_{b+1}, u_next[b] = u_{b+1}
  rb, acc = math.exp(-bsz * h), 0.0
  for b in range(v.shape[0] - 1, -1, -1):
    u_next[b] = acc
    acc = v[b] + rb * acc
  t = t_loc + np.exp(-(bsz - idx) * h)[None, :] * u_next[:, None]
  s_loc = np.cumsum(t[:, ::-1], axis=1)[:, ::-1]           # sum_{i>=k} in the block
  tot = s_loc[:, 0]
  s_next = np.concatenate([np.cumsum(tot[::-1])[::-1][1:], [0.0]])
  d = math.expm1(h) * (s_loc + s_next[:, None])
  return t.reshape(-1)[:n], d.reshape(-1)[:n]


def _running_tables(x, p, h: float):
  """``(T, D)`` of :func:`_tables` at the grid indices ``x`` (ascending; the
  P-mass ``p`` there and none elsewhere), on the host in O(len(x)):
  ``T_j = sum_{i>j} p_i e^{-(x_i - x_j)h}``, ``D_j = sum_{i>j} p_i (1 - e^{-(x_i - x_j)h})``.

  Inside a chunk (at most ``_HOST_CHUNK`` atoms over at most
  ``_HOST_SCALED_SPAN`` nats; ``z`` an atom's loss above the chunk's first)
  T is ``e^{z_j}`` times a running sum of ``p_i e^{-z_i}`` over the later
  atoms (the same non-negative terms, none subtracted), plus the chunk above's
  ``p + T`` at its first atom, discounted to the chunk's first atom;
  ``D_j = D_{j+1} + (1 - e^{-g_j h})(p_{j+1} + T_{j+1})`` (gap ``g_j``), summed
  the same way. Every sum is of non-negative terms, at most a chunk long plus
  one carry a chunk, as the jitted blocks' products and scans.
  """
  m = x.shape[0]
  if m == 0:
    return np.zeros(0), np.zeros(0)
  rel = (x - x[0]).astype(np.float64) * h
  span = np.floor(rel / _HOST_SCALED_SPAN)
  starts = np.union1d(np.arange(0, m, _HOST_CHUNK), np.flatnonzero(np.diff(span)) + 1)
  lens = np.diff(np.append(starts, m))
  row = np.repeat(np.arange(starts.size), lens)
  shape = (starts.size, int(lens.max()))
  regular = starts.size == -(-m // _HOST_CHUNK)    # every chunk full but the last
  col = None if regular else np.arange(m) - starts[row]

  def grid(v):                        # the atoms' values as chunk rows (zeros after)
    if regular:
      return np.pad(v, (0, shape[0] * shape[1] - m)).reshape(shape)
    out = np.zeros(shape)
    out[row, col] = v
    return out

  def cells(a):                       # the atoms' entries of chunk rows
    return a.reshape(-1)[:m] if regular else a[row, col]

  def after(a):                       # sum over the later cells of the row
    inc = np.cumsum(a[:, ::-1], axis=1)[:, ::-1]
    out = np.zeros_like(inc)
    out[:, :-1] = inc[:, 1:]
    return out

  z = rel - rel[starts][row]
  ez = np.exp(z)
  s_loc = cells(after(grid(p) * grid(np.exp(-z))))      # T = e^z (s_loc + carried)
  # p + T at each chunk's first atom (z = 0 there), from the top chunk down,
  # each chunk's carry e^{-(rel of the next chunk's first atom - rel of its own)} (p + T)
  rs, ps, ss = (v[starts].tolist() for v in (rel, p, s_loc))
  carried = [0.0] * starts.size
  nxt, nxt_rel = 0.0, math.inf
  for r in range(starts.size - 1, -1, -1):
    carried[r] = math.exp(-(nxt_rel - rs[r])) * nxt
    nxt, nxt_rel = ps[r] + ss[r] + carried[r], rs[r]
  t = ez * (s_loc + np.asarray(carried)[row])
  w = np.zeros(m)
  w[:-1] = -np.expm1(-np.diff(x).astype(np.float64) * h) * (p[1:] + t[1:])
  wg = grid(w)
  inc = np.cumsum(wg[:, ::-1], axis=1)[:, ::-1]   # sum over the row's cells >= j
  below = np.concatenate([np.cumsum(inc[::-1, 0])[::-1][1:], [0.0]])   # later rows
  d = cells(inc) + below[row]
  return t, d


def _delta_core(probs, offset, step, inf_mass, eps, ns=JAX, loopless=False, scaled=False):
  xp = ns.xp
  if not ns.is_host:
    require_x64("jaxacct.pld.delta")
  step = xp.asarray(step, xp.float64)
  n = probs.shape[0]
  t, d = _tables(probs, step, ns, loopless, scaled)
  pos = eps / step - offset
  k = xp.ceil(pos)
  beyond = k > n - 1
  kc = xp.clip(k, 0, n - 1)
  ki = kc.astype(xp.int32)
  gap = xp.minimum((pos - kc) * step, 0.0)  # eps - loss_k <= 0
  val = d[ki] + (-xp.expm1(gap)) * (probs[ki] + t[ki])
  val = xp.where(beyond, 0.0, val)
  out = xp.minimum(val + inf_mass, 1.0)
  return xp.where(xp.isnan(eps), xp.nan, out)


_delta_kernel = jit(_delta_core, static_argnames=("scaled",))


#: Relative rounding allowance of an epsilon query: the segment solve is exact
#: for the discrete PLD up to float64 rounding, which this covers; the answer
#: moves by ``ROUNDING_ALLOWANCE * (1 + |eps|)`` towards the requested side.
ROUNDING_ALLOWANCE = 1e-13


def _epsilon_core(probs, offset, step, inf_mass, dlt, rounding="up", ns=JAX,
                   loopless=False, scaled=False):
  xp = ns.xp
  if not ns.is_host:
    require_x64("jaxacct.pld.epsilon")
  step = xp.asarray(step, xp.float64)
  t, d = _tables(probs, step, ns, loopless, scaled)
  target = dlt - inf_mass
  k = xp.searchsorted(-d, -target, side="left")
  k = xp.clip(k, 0, probs.shape[0] - 1)
  denom = probs[k] + t[k]
  frac = (target - d[k]) / xp.where(denom > 0, denom, 1.0)
  frac = xp.where(denom > 0, xp.clip(frac, 0.0, 1.0), 0.0)
  loss_k = (offset + k).astype(xp.float64) * step
  sign = 1.0 if rounding == "up" else -1.0
  # frac = 1 (delta near 1): the whole segment below loss_k meets delta; loss_k
  # bounds it from above (0 at the first atom), 0 from below
  full = frac >= 1.0
  eps = xp.where(full, xp.where((k == 0) | (sign < 0), 0.0, loss_k),
                 loss_k + xp.log1p(-xp.where(full, 0.0, frac)))
  eps = eps + sign * ROUNDING_ALLOWANCE * (1.0 + xp.abs(eps))
  eps = xp.where(full & (k == 0), 0.0, xp.maximum(eps, 0.0))   # delta met at every loss
  eps = xp.where(target <= 0, xp.inf, eps)
  bad = xp.isnan(dlt) | (dlt <= 0) | (dlt >= 1)
  return xp.where(bad, xp.nan, eps)


_epsilon_kernel = jit(_epsilon_core, static_argnames=("rounding", "scaled"))


def scaled_step(step) -> bool:
  """Whether a query at grid step ``step`` (False when traced) takes :func:`_tables`'
  scaled form: ``e^{256 h}`` out of range (h > 30/256 nats; the host's
  running sums switch at the same step)."""
  h = host_scalar(step, float)
  return isinstance(h, float) and _BLOCK * h > _HOST_SCALED_SPAN


def epsilon_on_atoms(idx, probs, offset, step, inf_mass, dlt) -> float:
  """:func:`epsilon` (rounding up) of a PLD whose P-mass sits on the grid
  indices ``idx`` (ascending, ``probs`` > 0 there, nothing elsewhere), on the
  host in O(len(idx)): the tables at the atoms only (:func:`_running_tables`,
  the host's for the whole grid too), and the segment solve at the first atom with
  ``D <= delta``: the curve between two atoms is the one the dense query
  solves on, so the answers agree to rounding (inside the allowance).
  """
  h = float(step)
  x = np.asarray(idx, np.int64)
  p = np.asarray(probs, np.float64)
  target = float(dlt) - float(inf_mass)
  if not 0.0 < float(dlt) < 1.0:
    return math.nan
  if target <= 0.0:
    return math.inf
  m = x.size
  if m == 0:
    return 0.0
  t, d = _running_tables(x, p, h)
  k = min(int(np.searchsorted(-d, -target, side="left")), m - 1)
  denom = p[k] + t[k]
  frac = min(max((target - d[k]) / denom, 0.0), 1.0) if denom > 0 else 0.0
  if frac >= 1.0:   # the whole segment below this atom meets delta: its loss bounds it
    return 0.0 if k == 0 else max((int(offset) + int(x[k])) * h, 0.0)
  eps = (int(offset) + int(x[k])) * h + math.log1p(-frac)
  eps += ROUNDING_ALLOWANCE * (1.0 + abs(eps))
  return max(eps, 0.0)
#: the query formulas under public names, for the block programs that vmap
#: them (:mod:`jaxacct.pld._poisson_blocks`)
epsilon_core, delta_core = _epsilon_core, _delta_core


def _check_pld(pld) -> None:
  """``ValueError`` naming ``pld`` unless it is a :class:`PLD` or a :class:`PairPLD`."""
  if not isinstance(pld, (PLD, PairPLD)):
    text = repr(pld)
    raise ValueError(f"pld must be a jaxacct.pld.PLD or PairPLD; got {type(pld).__name__} "
                     + (text if len(text) <= 60 else text[:57] + "...") + ".")


def _host_args(pld):
  """(probs, offset, step, inf_mass) of a concrete PLD as the host query's arguments."""
  return (np.asarray(pld.probs, np.float64), np.int64(pld.offset), np.float64(pld.step),
          np.float64(pld.inf_mass))


def _kernel_args(pld):
  """(probs, offset, step, inf_mass) of a PLD as query-kernel arguments."""
  return device_array(pld.probs), pld.offset, pld.step, kernel_arg(pld.inf_mass)


def delta(pld: PLD, epsilon):
  r"""Hockey-stick divergence ``delta(eps)`` of a PLD, vectorised over eps.

  .. math:: \delta(\varepsilon) = \text{inf\_mass} + \sum_i p_i
            (1 - e^{\varepsilon - \text{loss}_i})_+

  computed exactly for the discrete PLD by stable positive recurrences
  (no cancellation), O(N) + O(1) per query.

  Args:
    pld: :class:`PLD`, or a :class:`PairPLD` (remove, add): then the max of
      the two directions' deltas.
    epsilon: float array (any real; broadcast shape kept).

  Returns:
    float64 array of ``epsilon``'s shape, in [0, 1].

  Where it runs: a concrete PLD on the CPU layout, in NumPy (no compiled
  program); traced input, the accelerator layout or a lanes mesh, the kernel.

  Bound: upper for pessimistic PLDs, lower estimate for optimistic ones.
  """
  _check_pld(pld)
  checks.check_range("epsilon", epsilon, allow_inf=True)
  if isinstance(pld, PairPLD):
    return delta_both(pld, epsilon)
  if batching.on_host(pld, epsilon):
    return host_call(_delta_core, *_host_args(pld), np.asarray(epsilon, np.float64),
                     scaled=scaled_step(pld.step))
  return _delta_kernel(*_kernel_args(pld), kernel_arg(epsilon), scaled=scaled_step(pld.step))


def epsilon(pld: PLD, delta, *, rounding: str = "up"):
  r"""Smallest ``eps >= 0`` with ``delta(eps) <= delta`` for a PLD, vectorised.

  Solved exactly on the segment where the discrete profile crosses the
  target (it is ``D_k + (1 - e^{eps - loss_k})(p_k + T_k)`` there), then
  moved by :data:`ROUNDING_ALLOWANCE` ``* (1 + |eps|)`` to the side
  ``rounding`` names. ``+inf`` when ``inf_mass >= delta``.

  Args:
    pld: :class:`PLD`, or a :class:`PairPLD` (remove, add): then the max of
      the two directions' epsilons.
    delta: float array in (0, 1).
    rounding: ``"up"`` (default; for a pessimistic PLD, whose epsilon is an
      upper bound) or ``"down"`` (for an optimistic PLD read as a lower
      bound).

  Returns:
    float64 array of ``delta``'s shape.

  Where it runs: a concrete PLD on the CPU layout, in NumPy (no compiled
  program); traced input, the accelerator layout or a lanes mesh, the kernel.

  Bound: upper for pessimistic PLDs, lower estimate for optimistic ones.
  NaN under jit for delta outside (0, 1).
  """
  _check_pld(pld)
  checks.check_delta(delta)
  checks.check_choice("rounding", rounding, ("up", "down"))
  if isinstance(pld, PairPLD):
    return epsilon_both(pld, delta, rounding=rounding)
  if batching.on_host(pld, delta):
    return host_call(_epsilon_core, *_host_args(pld), np.asarray(delta, np.float64),
                     rounding=rounding, scaled=scaled_step(pld.step))
  return _epsilon_kernel(*_kernel_args(pld), kernel_arg(delta), rounding=rounding,
                         scaled=scaled_step(pld.step))


def delta_both(pair: PairPLD, epsilon):
  """max(delta_remove, delta_add) at ``epsilon`` (:func:`delta` of a
  :class:`PairPLD`). Bound: as the inputs."""
  return _max_of(delta(pair.remove, epsilon), delta(pair.add, epsilon))


def epsilon_both(pair: PairPLD, delta, *, rounding: str = "up"):
  """max(eps_remove, eps_add) at ``delta`` (:func:`epsilon` of a
  :class:`PairPLD`); ``rounding`` as in :func:`epsilon`.

  Bound: as the inputs.
  """
  return _max_of(epsilon(pair.remove, delta, rounding=rounding),
                 epsilon(pair.add, delta, rounding=rounding))


def _max_of(a, b):
  """Elementwise max of two query results: on the host (NumPy, no compiled
  program) when both are concrete, as a jax array either way."""
  return dispatch(jnp.maximum, (a, b), eager=_host_max)


def _host_max(a, b):
  return jax.device_put(np.maximum(np.asarray(a), np.asarray(b)))


def epsilon_host(pld: PLD, delta: float, *, rounding: str = "up"):
  """:func:`epsilon` of a concrete PLD at a scalar delta on the host (NumPy, no
  compiled program; the same formula as the kernel). Returns ``np.float64``;
  the caller has validated ``delta`` and ``rounding``."""
  return np.float64(host_call(_epsilon_core, np.asarray(pld.probs, np.float64),
                              np.int64(pld.offset), pld.step, np.float64(pld.inf_mass),
                              np.float64(delta), rounding))


def delta_host(pld: PLD, epsilon: float):
  """:func:`delta` of a concrete PLD at a scalar epsilon on the host (as
  :func:`epsilon_host`)."""
  return np.float64(host_call(_delta_core, np.asarray(pld.probs, np.float64),
                              np.int64(pld.offset), pld.step, np.float64(pld.inf_mass),
                              np.float64(epsilon)))
