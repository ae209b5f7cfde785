"""Shuffled check-in (Liew et al., arXiv:2206.03151v2): 100 x 100 grids of RDP curves at 64 orders.

Grids: n log-spaced 1e2..1e7 (100) x eps0 in [0.1, 10] or sigma in [0.3, 10]
(100), orders 2..65, check-in rate p = 1e-3. One jitted call per grid
(compile and steady state reported separately).

No peer package implements these bounds (the authors' shuffgauss is not a
dependency); the comparison row times our O(lambda^2) Eq. 8 recurrence against
Algorithm 2 of the paper (partition enumeration, re-implemented here in
NumPy/SciPy for the comparison only) on the same points at orders 2..30.
"""

from __future__ import annotations

import time

import numpy as np

from _common import row, timed


def _alg2_numpy(lam, n, sigma):
  """Algorithm 2 of Liew et al. (typos fixed as in the digest), NumPy."""
  from scipy.special import gammaln

  def parts(m):  # the partitions of m, ascending parts (Kelleher's accel_asc)
    a, k, y = [0] * (m + 1), 1, m - 1
    while k != 0:
      x, k = a[k - 1] + 1, k - 1
      while 2 * x <= y:
        a[k], y, k = x, y - x, k + 1
      top = k + 1
      while x <= y:
        a[k], a[top] = x, y
        yield tuple(a[:k + 2])
        x, y = x + 1, y - 1
      a[k], y = x + y, x + y - 1
      yield tuple(a[:k + 1])

  terms = []
  for rho in parts(lam):
    if len(rho) > n:
      continue
    r = np.array(rho, dtype=np.float64)
    _, counts = np.unique(r, return_counts=True)
    log_arr = np.sum(np.log(n - np.arange(len(rho)))) - np.sum(gammaln(counts + 1.0))
    log_multi = gammaln(lam + 1.0) - np.sum(gammaln(r + 1.0))
    terms.append(log_arr + log_multi + (np.sum(r * r) - lam) / (2 * sigma ** 2) - lam * np.log(n))
  t = np.array(terms)
  m = t.max()
  return (m + np.log(np.sum(np.exp(t - m)))) / (lam - 1)


def run():
  import jax

  from jaxacct.shuffle import bounds as C

  orders = np.arange(2, 66, dtype=np.float64)
  n = np.geomspace(1e2, 1e7, 100).round()[:, None]
  eps0 = np.linspace(0.1, 10.0, 100)[None, :]
  sigma = np.geomspace(0.3, 10.0, 100)[None, :]
  p = 1e-3
  rows = []

  def grid(fn, **kw):
    with jax.enable_x64(True):
      return timed(lambda: fn(orders, **kw), repeats=2)

  r = grid(C.check_in_ldp_rdp, n=n, p=p, eps0=eps0)
  v = np.asarray(r["value"])
  rows.append(row("check-in eps0-LDP RDP (Eq. 5 + WBK), 100x100 (n, eps0) x 64 orders", r,
                  ours_value=float(v[50, 50, 30]),
                  notes=f"finite={np.all(np.isfinite(v))}; value at n={n[50,0]:.0f}, eps0={eps0[0,50]:.2f}, order 32"))
  r = grid(C.check_in_gaussian_rdp, n=n, p=p, sigma=sigma)
  v = np.asarray(r["value"])
  rows.append(row("check-in Gaussian RDP upper, 100x100 (n, sigma) x 64 orders", r,
                  ours_value=float(v[50, 50, 30]), notes=f"finite={np.all(np.isfinite(v))}"))
  r = grid(C.shuffle_gaussian_rdp_lower, n=n, sigma=sigma)
  v = np.asarray(r["value"])
  rows.append(row("shuffle Gaussian RDP lower (Eq. 8, recurrence), 100x100 (n, sigma) x 64 orders", r,
                  ours_value=float(v[50, 50, 30]), notes=f"finite={np.all(np.isfinite(v))}"))
  # Per-k kernels: O(window * orders^2) per point and memory ~ points x 32 x
  # 64 x 64 doubles per chunk, so the grid is swept one n-row (100 sigmas) at a time.
  sub_n = n[::5, 0]

  def rows_of(fn):
    with jax.enable_x64(True):
      return timed(lambda: np.stack([np.asarray(fn(orders, n=float(nn), p=p, sigma=sigma[0],
                                                   num_terms=64)) for nn in sub_n]), repeats=1)

  r = rows_of(C.check_in_gaussian_rdp_lower)
  v = np.asarray(r["value"])
  rows.append(row("check-in Gaussian RDP lower (pair divergence, window 64), 20x100 (n, sigma) x 64 orders", r,
                  ours_value=float(v[10, 50, 30]),
                  notes=f"finite={np.all(np.isfinite(v))}; 20 calls of 100 sigmas"))
  r = rows_of(C.check_in_secagg_gaussian_rdp)
  rows.append(row("check-in secure-aggregation Gaussian (Thm 4, window 64), 20x100 x 64 orders", r,
                  ours_value=float(np.asarray(r["value"])[10, 50, 30]), notes="20 calls of 100 sigmas"))

  # Eq. 8: our recurrence vs Algorithm 2 (partition sum), orders 2..30, 5 points.
  pts = [(1e3, 1.0), (1e4, 0.5), (6e4, 1.0), (1e5, 2.0), (1e6, 1.0)]
  o30 = np.arange(2, 31, dtype=np.float64)
  with jax.enable_x64(True):
    ours = timed(lambda: C.shuffle_gaussian_rdp_lower(o30, n=np.array([q[0] for q in pts]),
                                                      sigma=np.array([q[1] for q in pts])), repeats=3)
  t0 = time.perf_counter()
  ref = np.array([[_alg2_numpy(int(l), int(nn), s) for l in o30] for nn, s in pts])
  peer = {"steady_s": time.perf_counter() - t0}
  err = float(np.max(np.abs(np.asarray(ours["value"]) / ref - 1)))
  rows.append(row("Eq. 8 at 5 (n, sigma) x orders 2..30: recurrence vs Algorithm 2", ours,
                  "Algorithm 2 (partition sum, NumPy re-implementation)", peer, err, None,
                  "ours_value = max relative difference"))
  return rows


if __name__ == "__main__":
  for r in run():
    print(r)
