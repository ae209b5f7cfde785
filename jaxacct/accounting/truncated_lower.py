r"""Certified lower bounds for truncated Poisson sampling from explicit instances.

A batch is Poisson (rate q) over m records, cut to a uniform ``cap``-subset when
larger, then N(0, sigma^2 I) is added to the sum (norms <= 1; dp_accounting's
``TruncatedSubsampledGaussianDpEvent``). Each instance: target gradient e1,
every other record u = (v, sqrt(1 - v^2)); its per-step pair is cut into
cells and merged onto the loss grid (post-processing, so every composed delta
is a lower bound). Proofs: docs/bounds/truncated_poisson.md.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from jaxacct import pld as jpld
from jaxacct._core import binomial, checks
from jaxacct._core.dtype import public_surface
from jaxacct._core.parallel import host_map
from jaxacct.accounting._pairs import dominated_on_grid

__all__ = ["instance_pair", "instance_epsilons", "truncated_poisson_lower"]

#: binomial mass left out of an instance's count law (charged to delta).
COUNT_TAIL = 1e-30
#: the noise's cells stop where a normal tail is below this (end cells are unbounded).
_Z = 9.5
#: default instances: the cosine v = <u, e1> of the others' gradient (v = 0, orthogonal:
#: the largest found at the settings searched, docs/bounds/truncated_poisson.md).
DEFAULT_VS = (0.0,)
#: cut points of an instance's noise axis per chunk (the chunks fix the order of the
#: sums), and chunks computed at once, one a thread (each holds its totals over the
#: loss grid, and one group's edges at a time)
CHUNK_EDGES = 1 << 22
CHUNK_THREADS = 2
#: the most cells an instance's count axis is cut into (each chunk of counts holds
#: 64 columns of them); more is refused up front
MAX_COUNT_CELLS = 1 << 21


def _consecutive_cells(t):
  """``P(t[j] < N(0, 1) <= t[j+1])`` along axis 0 (``t``: the cells' edges minus
  the mean), both tails reflected: ``Phi(-t[j]) - Phi(-t[j+1])`` where ``t[j] > 0``,
  else ``Phi(t[j+1]) - Phi(t[j])``; each edge's ``Phi`` is evaluated once, and only
  the tails a cell reads."""
  up = t[:-1] > 0
  neg = np.zeros(t.shape, bool)
  neg[:-1] |= up
  neg[1:] |= up
  pos = np.zeros(t.shape, bool)
  pos[:-1] |= ~up
  pos[1:] |= ~up
  vn, vp = np.zeros(t.shape), np.zeros(t.shape)
  vn[neg] = special.ndtr(-t[neg])
  vp[pos] = special.ndtr(t[pos])
  return np.where(up, vn[:-1] - vn[1:], vp[1:] - vp[:-1])


def _sorted_cells(t):
  """:func:`_consecutive_cells` of one non-decreasing row of edges, by slices: the
  cells left of the first edge above 0 read ``Phi(t)``, the others ``Phi(-t)``
  (the same values; any other row goes to :func:`_consecutive_cells`)."""
  if not np.all(t[1:] >= t[:-1]):
    return _consecutive_cells(t)
  j = int(np.searchsorted(t, 0.0, side="right"))   # t[:j] <= 0 < t[j:]
  out = np.empty(t.size - 1)
  if j > 0:
    vp = special.ndtr(t[:j + 1])
    out[:j] = vp[1:] - vp[:-1]
  if j < t.size - 1:
    vn = special.ndtr(-t[j:])
    out[j:] = vn[:-1] - vn[1:]
  return out


def _refuse_over(what: str, count: int, limit: int, sigma: float):
  """ValueError naming noise_multiplier where an instance needs more than ``limit``
  ``what`` (checked before anything of that size is allocated)."""
  if count > limit:
    raise ValueError(
        f"noise_multiplier {sigma:.6g} is too small for an instance lower bound: the "
        f"instance needs {count:.3g} {what}, more than {limit}. Use a larger "
        "noise_multiplier.")


def _count_weights(m: int, q: float, cap: int):
  r"""``(c, wq, wp0, wp1, eta)``: the others' count c in the batch and its weights.

  K ~ Bin(m - 1, q) others sampled, kept on ``[lo, hi]`` (``eta``: the mass
  left out, <= 2 COUNT_TAIL). Without the target the batch holds c = min(K,
  cap) others (``wq``). With it: target out (prob 1 - q): c = min(K, cap),
  ``wp0``; target in, K < cap: the target and c = K others, ``wp1``; K >=
  cap: the target is kept with probability cap / (K + 1) (then c = cap - 1,
  ``wp1``) else c = cap (``wp0``).
  """
  n_o = m - 1
  lo, hi = 0, n_o
  pmf, cdf, sf = binomial.host_law()   # scipy.stats.binom's values
  if n_o > 0:
    sd = math.sqrt(n_o * q * (1.0 - q))
    lo = max(int(n_o * q - 12.0 * sd - 20.0), 0)
    hi = min(int(n_o * q + 12.0 * sd + 20.0), n_o)
    while lo > 0 and cdf(lo - 1, n_o, q) > COUNT_TAIL:
      lo = max(lo - 10, 0)
    while hi < n_o and sf(hi, n_o, q) > COUNT_TAIL:
      hi = min(hi + 10, n_o)
  k = np.arange(lo, hi + 1)
  pk = pmf(k, n_o, q) if n_o > 0 else np.ones(1)
  eta = float(cdf(lo - 1, n_o, q) + sf(hi, n_o, q)) if n_o > 0 else 0.0
  c_hi = min(hi, cap)
  c = np.arange(lo, c_hi + 1) if lo <= c_hi else np.array([cap])
  wq = np.zeros(c.size)
  wp1 = np.zeros(c.size)
  below = k < cap
  wq[:int(np.sum(below))] = pk[below]
  wp1[:int(np.sum(below))] = q * pk[below]
  over = ~below
  wp0 = (1.0 - q) * wq
  if np.any(over):
    t = float(np.sum(pk[over]))
    alpha = float(np.sum(pk[over] * cap / (k[over] + 1.0)))
    wq[-1] += t
    wp0[-1] = (1.0 - q) * wq[-1] + q * (t - alpha)
    if cap >= 1:
      j = c.size - 2 if c[-1] == cap else c.size - 1
      if j >= 0 and c[j] == cap - 1:
        wp1[j] += q * alpha
      else:                       # cap - 1 below the kept counts: a new point
        c = np.concatenate([[cap - 1], c])
        wq, wp0 = np.concatenate([[0.0], wq]), np.concatenate([[0.0], wp0])
        wp1 = np.concatenate([[q * alpha], wp1])
  return c.astype(np.float64), wq, wp0, wp1, eta


def _count_cells(c, weights, v: float, sigma: float, width: float):
  """Masses (GQ, G0, G1) of the count axis' cells, y_u = (c + a v) / sigma + noise,
  one triple per ``(wq, wp0, wp1)`` in ``weights`` (their cells computed once)."""
  mu = np.concatenate([c, c + v]) / sigma
  lo, hi = float(np.min(mu)) - _Z, float(np.max(mu)) + _Z
  n = int(math.ceil((hi - lo) / width))
  _refuse_over("count cells", n, MAX_COUNT_CELLS, sigma)
  e = np.concatenate([[-np.inf], np.linspace(lo, hi, n + 1), [np.inf]])
  out = [tuple(np.zeros(e.size - 1) for _ in range(3)) for _ in weights]
  for i in range(0, c.size, 64):        # chunks of counts: memory stays small
    sl = slice(i, i + 64)
    m0 = _consecutive_cells(e[:, None] - (c[None, sl]) / sigma)
    # v = 0: c + v is c, so the target's cells are the same masses
    m1 = m0 if v == 0.0 else _consecutive_cells(e[:, None] - (c[None, sl] + v) / sigma)
    for (gq, g0, g1), (wq, wp0, wp1) in zip(out, weights):
      gq += m0 @ wq[sl]
      g0 += m0 @ wp0[sl]
      g1 += m1 @ wp1[sl]
  return out


def _groups(gq, g0, g1, resolution: float):
  """Cells with the same likelihood ratios (to ``resolution`` in log) merged:
  reporting the group, not the cell, is post-processing."""
  keep = (gq > 0) | (g0 > 0) | (g1 > 0)
  gq, g0, g1 = gq[keep], g0[keep], g1[keep]
  with np.errstate(divide="ignore", invalid="ignore"):
    r0 = np.floor(np.log(g0 / gq) / resolution)
    r1 = np.floor(np.log(g1 / gq) / resolution)
  r0 = np.where(np.isfinite(r0), r0, np.where(gq > 0, -2.0 ** 60, 2.0 ** 60))
  r1 = np.where(np.isfinite(r1), r1, np.where(gq > 0, -2.0 ** 60, 2.0 ** 60))
  key = np.stack([r0, r1], axis=1)
  _, inv = np.unique(key, axis=0, return_inverse=True)
  inv = inv.ravel()
  k = int(inv.max()) + 1
  return (np.bincount(inv, gq, k), np.bincount(inv, g0, k), np.bincount(inv, g1, k))


def _atoms(gq, g0, g1, s: float, h: float, sigma: float):
  """``(p, q)`` atoms of the pair after the noise axis of each group is cut at the
  points where the loss log(g0/gq + g1/gq e^{s y - s^2/2}) crosses a grid value."""
  if s <= 1e-12:
    return g0 + g1, gq
  flat = (g1 <= 0) | (gq <= 0)      # one loss: the group is one atom
  ps, qs = [g0[flat] + g1[flat]], [gq[flat]]
  a, b, w = g0[~flat], g1[~flat], gq[~flat]
  r0, r1 = a / w, b / w
  lo_l = np.log(r0 + r1 * math.exp(-s * _Z - s * s / 2))
  hi_l = np.log(r0 + r1 * math.exp(s * _Z - s * s / 2))
  k0 = np.ceil(lo_l / h).astype(np.int64)
  n_all = np.maximum(np.floor(hi_l / h).astype(np.int64) - k0 + 1, 0) + 2   # edges, +-inf
  ends = np.cumsum(n_all)
  k_lo = int(np.min(k0)) - 1
  size = int(np.max(k0 + n_all)) - k_lo
  _refuse_over("loss grid points", size, jpld.MAX_WINDOW, sigma)
  bounds, i = [], 0
  while i < a.size:                 # chunks of about CHUNK_EDGES edges
    j = max(int(np.searchsorted(ends, ends[i] - n_all[i] + CHUNK_EDGES, side="right")), i + 1)
    bounds.append((i, j))
    i = j

  def chunk(ij):
    # one group at a time (its edges fit in cache): the group's cells lie on
    # consecutive grid intervals, so adding them to the chunk's totals in group
    # order sums each interval's cells in the order of one bincount over the chunk
    p_c, q_c = np.zeros(size), np.zeros(size)
    for g in range(*ij):
      n, k_first = int(n_all[g]), int(k0[g]) - 1
      # grid index of each edge: k0 - 1 + its position in its group (0: -inf, n-1: +inf)
      lv = (np.arange(n) + k_first) * h
      with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        y = (np.log((np.exp(lv) - r0[g]) / r1[g]) + s * s / 2) / s
      y = np.where(np.isnan(y), -np.inf, y)
      y[0], y[-1] = -np.inf, np.inf
      m0 = _sorted_cells(y - 0.0)
      m1 = _sorted_cells(y - s)
      # cells whose loss lies in the same grid interval are merged (post-processing)
      at = slice(k_first - k_lo, k_first - k_lo + n - 1)
      p_c[at] += a[g] * m0 + b[g] * m1
      q_c[at] += w[g] * m0
    return p_c, q_c

  # the chunks side by side (NumPy's and SciPy's ufuncs release the GIL), at most
  # CHUNK_THREADS at once; summed in chunk order, so the masses are those of one
  # thread, bit for bit
  p_k, q_k = np.zeros(size), np.zeros(size)
  for lo in range(0, len(bounds), CHUNK_THREADS):
    for dp, dq in host_map(chunk, bounds[lo:lo + CHUNK_THREADS]):
      p_k += dp
      q_k += dq
  ps.append(p_k)
  qs.append(q_k)
  p, q = np.concatenate(ps), np.concatenate(qs)
  keep = (p > 0) | (q > 0)
  return p[keep], q[keep]


def instance_pair(num_records: int, sampling_probability: float, truncated_batch_size: int,
                  noise_multiplier: float, v: float, *, step: float = 1e-4,
                  width: float = 0.02, resolution=None):
  r"""One step's dominated pair of the instance: target e1, others ``(v, sqrt(1 - v^2))``.

  ``num_records`` m counts the dataset that holds the target (the other has
  m - 1). The output's coordinate along the others' direction, ``y_u = c +
  a v`` plus noise (a: target kept, c: others kept), is cut into cells of
  ``width`` (in noise units), cells of equal likelihood ratios (within
  ``resolution`` in log; default exact to 1e-9 at v = 0, else ``step / 4``)
  merged; the orthogonal coordinate ``a sqrt(1 - v^2)`` plus noise is cut
  where the loss crosses the grid ``k step``. Each cut or merge is a
  post-processing, so the pair (and every composition) is dominated by the
  instance. Returns ``(PairPLD(remove, add), eta)``; ``eta``: the count law's
  mass left out (a composed delta may be off by <= (1 + e^eps) T eta).
  Bound: lower.
  """
  checks.check_int("num_records", num_records, min_value=1)
  return _instance_pairs((int(num_records),), sampling_probability, truncated_batch_size,
                         noise_multiplier, v, step, width, resolution)[0]


def _instance_pairs(ms, q, cap, sigma, v, h, width, resolution):
  """:func:`instance_pair` at each m of ``ms``; where two count laws keep the same
  counts, their count cells are computed once (the same masses)."""
  checks.check_range("sampling_probability", q, 0.0, 1.0, lo_open=True, hi_open=True)
  checks.check_int("truncated_batch_size", cap, min_value=1)
  checks.check_sigma("noise_multiplier", sigma)
  checks.check_range("v", v, -1.0, 1.0)
  checks.check_positive("step", h)
  checks.check_positive("width", width)
  q, cap, sigma, v, h, width = float(q), int(cap), float(sigma), float(v), float(h), float(width)
  res = (1e-9 if v == 0.0 else h / 4.0) if resolution is None else float(resolution)
  laws = [_count_weights(m, q, cap) for m in ms]
  cells = {}
  for i, (c, *_w, _eta) in enumerate(laws):
    cells.setdefault(c.tobytes(), []).append(i)
  masses = [None] * len(laws)
  for idx in cells.values():
    got = _count_cells(laws[idx[0]][0], [laws[i][1:4] for i in idx], v, sigma, width)
    for i, gs in zip(idx, got):
      masses[i] = gs
  out = []
  for gs, law in zip(masses, laws):
    p, qq = _atoms(*_groups(*gs, res), math.sqrt(max(1.0 - v * v, 0.0)) / sigma, h, sigma)
    out.append((jpld.PairPLD(dominated_on_grid(p, qq, step=h), dominated_on_grid(qq, p, step=h)),
                law[4]))
  return out


#: the largest delta an instance's composed pair is read at
_READ_MAX = 0.5


def _charge(tail_mass: float, left: float, eps: float) -> float:
  """What a composed delta read at ``eps`` is charged: the windows' tail mass
  (``2 tail_mass``, moved to +inf: at most its own P-mass) and the count laws'
  left-out mass ``left`` times ``1 + e^eps`` (its Q-mass weighs e^eps); +inf past
  overflow."""
  if left <= 0.0:
    return 2.0 * tail_mass
  return 2.0 * tail_mass + (left * (1.0 + math.exp(eps)) if eps < 700.0 else math.inf)


def _composed_lower(pld, count, delta, tail_mass):
  """Epsilon at ``delta`` of ``pld`` composed ``count`` times, by the repeated-event
  engine (:func:`jaxacct.pld.direction_epsilons`), taken down by 1e-10 relative (the
  engine rounds up by 1e-12) and queried at most at delta ``_READ_MAX``; the caller's
  delta carries the windows' tail mass (2 ``tail_mass``) and checks a capped read."""
  e = float(jpld.direction_epsilons(pld, [int(count)], min(delta, _READ_MAX),
                                    tail_mass=tail_mass)[0])
  return max(e * (1.0 - 1e-10), 0.0)


def instance_epsilons(num_examples: int, sampling_probability: float, truncated_batch_size: int,
                      noise_multiplier: float, total_steps: int, delta: float, vs=DEFAULT_VS,
                      *, step: float = 1e-4, width: float = 0.02, tail_mass: float = 1e-20):
  r"""Certified lower epsilon of each instance ``v`` in ``vs`` after ``total_steps``.

  Add/remove neighbours of a dataset of N = ``num_examples`` records, as
  dp_accounting's event is accounted: both dataset sizes (the one with the
  target holds N or N + 1 records) and both directions; each value is the
  largest of the four (each is the epsilon of a real pair of neighbours).
  The composed delta (the repeated-event engine) is queried at ``delta`` plus its
  windows' tail (2 ``tail_mass``) plus the count laws' left-out mass, rounding down.

  Returns:
    float64 array of ``vs``' shape. Bound: lower.
  """
  checks.check_int("num_examples", num_examples, min_value=1)
  checks.check_int("total_steps", total_steps, min_value=1)
  checks.check_delta(delta)
  if np.size(vs) == 0:
    raise ValueError("vs must hold at least one cosine v in [-1, 1]; got an empty sequence.")
  out = []
  for v in np.atleast_1d(np.asarray(vs, np.float64)).tolist():
    best = 0.0
    for pair, eta in _instance_pairs((int(num_examples), int(num_examples) + 1),
                                     sampling_probability, truncated_batch_size,
                                     noise_multiplier, v, step, width, None):
      for d in (pair.remove, pair.add):
        left = 2.0 * int(total_steps) * eta      # the count laws' left-out mass
        e = _composed_lower(d, int(total_steps),
                            float(delta) + _charge(tail_mass, left, 0.0), tail_mass)
        if left > 0.0:      # the left-out mass weighs e^eps under Q
          read = float(delta) + _charge(tail_mass, left, e)
          e = _composed_lower(d, int(total_steps), read, tail_mass)
          if read > _READ_MAX and float(delta) + _charge(tail_mass, left, e) > _READ_MAX:
            e = 0.0         # read at _READ_MAX, below what its charge needs: none certified
        best = max(best, e)
    out.append(best)
  return np.asarray(out, np.float64).reshape(np.shape(vs))


def truncated_poisson_lower(num_examples: int, sampling_probability: float,
                            truncated_batch_size: int, noise_multiplier: float, total_steps: int,
                            delta: float, vs=DEFAULT_VS, *, step: float = 1e-4):
  r"""The largest certified lower epsilon over the instances ``vs`` (a float).

  Bound: lower (each candidate is an exact instance's pair after
  post-processing; :func:`instance_epsilons`).
  """
  return float(np.max(instance_epsilons(num_examples, sampling_probability, truncated_batch_size,
                                        noise_multiplier, total_steps, delta, vs, step=step)))


public_surface(globals())
