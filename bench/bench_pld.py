"""PLD accountant: jaxacct.pld vs dp-accounting 0.6.0 PLDAccountant (same run).

Setting of issue 4: Poisson-subsampled Gaussian, q=0.01, sigma=1, 10,000
steps, delta=1e-5, both neighbouring directions (max), discretisation step
1e-4 on both sides (dp-accounting's default value_discretization_interval;
ours is a pessimistic connect-the-dots PLD like theirs).  Also: how much the
PLD epsilon is below the RDP epsilon (jaxacct.poisson, default orders, tight
conversion) at a few settings.
"""

from __future__ import annotations

import numpy as np

from _common import row, timed, timed_once


def run():
  from dp_accounting import dp_event
  from dp_accounting.pld import pld_privacy_accountant as PA

  from jaxacct import pld, poisson

  q, sigma, T, delta, step = 0.01, 1.0, 10_000, 1e-5, 1e-4

  # the door's grid step (the default of the composed pair it queries)
  assert pld.poisson_gaussian_composed(sigma=sigma, q=q, num_steps=T).remove.step == step

  def ours_fn():
    return poisson.epsilon(q=q, sigma=sigma, num_steps=T, delta=delta, method="pld").epsilon

  def peer_fn():
    acc = PA.PLDAccountant(value_discretization_interval=step)
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), T)
    return acc.get_epsilon(delta)

  ours = timed(ours_fn, repeats=2)
  peer = timed_once(peer_fn)
  rows = [row("PLD eps: Poisson Gaussian q=0.01 sigma=1 T=1e4 delta=1e-5 (both dirs)",
              ours, "dp-accounting 0.6.0 PLDAccountant", peer,
              float(ours["value"]), float(peer["value"]),
              "step 1e-4 both; ours = construct + tilted-FFT compose + query")]

  # query only: 100 deltas on an already composed pair
  pair = pld.poisson_gaussian_composed(sigma=sigma, q=q, num_steps=T, step=step)
  deltas = np.geomspace(1e-12, 1e-3, 100)
  ours = timed(lambda: pld.epsilon(pair, deltas), repeats=3)
  rows.append(row("PLD eps query: 100 deltas on a composed PairPLD", ours,
                  notes=f"eps range {float(np.min(ours['value'])):.4g}.."
                        f"{float(np.max(ours['value'])):.4g}"))

  # PLD vs RDP (issue 4: report how much lower the PLD epsilon is)
  for s, qq, t, d in [(1.0, 0.01, 10_000, 1e-5), (2.0, 0.1, 1_000, 1e-8),
                      (0.8, 0.005, 100_000, 1e-6)]:
    e_pld = timed_once(lambda: poisson.epsilon(
        q=qq, sigma=s, num_steps=t, delta=d, method="pld").epsilon)
    e_rdp = float(poisson.epsilon(q=qq, sigma=s, num_steps=t, delta=d).epsilon)
    rows.append(row(f"PLD vs RDP eps: sigma={s} q={qq} T={t} delta={d}", e_pld,
                    "jaxacct.poisson RDP (tight conversion)", None,
                    float(e_pld["value"]), e_rdp,
                    f"PLD below RDP by {100 * (1 - e_pld['value'] / e_rdp):.1f}%"))
  return rows
