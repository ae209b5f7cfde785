"""Shuffle-model RDP curves: Girgis et al. bounds and Chen et al.'s exact sum.

Grid: n geometric in [1e3, 1e7] x eps0 linear in [0.1, 6] (100 x 100), 64
orders. No peer package implements these RDP bounds (dp-accounting 0.6.0 and
random-allocation 1.0.5 have no shuffle RDP), so rows report our time only.

The Chen et al. exact sum (certified binned evaluation, cost independent of n
but ~num_c*num_a*orders per lane) is timed on a subgrid on this CPU and the
100 x 100 time is extrapolated linearly in the number of lanes (stated in the
row); the closed-form Girgis bounds run on the full grid.
"""

from __future__ import annotations

import numpy as np

from _common import row, timed

NS = np.round(np.geomspace(1e3, 1e7, 100))
EPS0 = np.linspace(0.1, 6.0, 100)
INT_ORDERS = np.arange(2, 66, dtype=np.float64)                       # 64 integer orders
REAL_ORDERS = np.unique(np.round(1.0 + np.geomspace(0.05, 1023, 64), 4))  # 64 real orders


def run():
  from jaxacct.shuffle import bounds as G, bounds as M
  from jaxacct.shuffle import chen_epsilon

  n = NS[:, None]
  e = EPS0[None, :]
  rows = []
  for name, fn, orders in [("Girgis Thm 1 (eq. 6)", G.girgis_thm1_rdp, INT_ORDERS),
                           ("Girgis Thm 2 (eq. 9)", G.girgis_thm2_rdp, REAL_ORDERS),
                           ("Girgis Cor 2 lower (eq. 12)", G.girgis_cor2_rdp, INT_ORDERS)]:
    t = timed(lambda: fn(orders, n=n, eps0=e), repeats=2)
    v = np.asarray(t["value"])
    rows.append(row(f"shuffle RDP: {name}, 100x100 (n, eps0) x 64 orders", t,
                    ours_value=float(np.nanmax(v)),
                    notes="no peer; ours_value = max over the grid (clipped at eps0)"))

  # Binned binomial sums: a 20 x 20 subgrid (every 5th n and eps0).
  sn, se = NS[::5][:, None], EPS0[::5][None, :]
  for name, fn, orders, kw in [
      ("Girgis Thm 3 lower, direct sum (num=64)", G.girgis_lower_rdp, REAL_ORDERS, {"num": 64}),
      ("Girgis binomial mixture (num=64)", G.girgis_mixture_rdp, INT_ORDERS, {"num": 64})]:
    t = timed(lambda: fn(orders, n=sn, eps0=se, **kw), repeats=1)
    scale = 100 * 100 / (sn.size * se.size)
    rows.append(row(f"shuffle RDP: {name}, 20x20 subgrid x 64 orders", t,
                    ours_value=t["steady_s"] * scale,
                    notes="ours_value = steady time extrapolated to 100x100 (s)"))

  # Chen et al. exact sum: 3 x 3 subgrid, reduced grids (still certified).
  cn = np.array([1e3, 1e5, 1e7])[:, None]
  ce = np.array([0.5, 2.0, 4.0])[None, :]
  t = timed(lambda: M.chen_exact_rdp(REAL_ORDERS, n=cn, eps0=ce, num_c=48, num_a=48),
            repeats=1)
  rows.append(row("shuffle RDP: Chen exact (num_c=num_a=48), 3x3 subgrid x 64 orders", t,
                  ours_value=t["steady_s"] * 100 * 100 / 9,
                  notes="ours_value = steady time extrapolated to 100x100 (s); CPU"))
  # one setting at the default resolution: n=1e6, eps0=4, 64 orders
  t = timed(lambda: M.chen_exact_rdp(REAL_ORDERS, n=1e6, eps0=4.0), repeats=1)
  rows.append(row("shuffle RDP: Chen exact (default num), n=1e6, eps0=4, 64 orders", t,
                  ours_value=float(chen_epsilon(n=1e6, eps0=4.0, delta=1e-8,
                                                  orders=REAL_ORDERS).epsilon),
                  notes="ours_value = single-round eps at delta=1e-8 (certified upper)"))
  return rows


if __name__ == "__main__":
  import jax
  jax.config.update("jax_enable_x64", True)
  for r in run():
    print(r)
