"""Poisson-subsampled Gaussian via RDP: jaxacct vs dp-accounting 0.6.0 RdpAccountant.

Same order grid for both (dp-accounting's default orders), so the epsilons
agree to ~1e-6 and the timing compares equal work.
"""

from __future__ import annotations

import numpy as np

from _common import row, timed, timed_once


def run():
  from dp_accounting import dp_event
  from dp_accounting.rdp import rdp_privacy_accountant as R

  import jaxacct
  from jaxacct import poisson

  q, sigma, T, delta = 0.01, 1.0, 10_000, 1e-5
  orders = np.array(R.DEFAULT_RDP_ORDERS if hasattr(R, "DEFAULT_RDP_ORDERS") else
                    [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [128, 256, 512])

  def dp_one(s=sigma):
    acc = R.RdpAccountant(list(orders))
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), T)
    return acc.get_epsilon(delta)

  ours = timed(lambda: poisson.epsilon(q=q, sigma=sigma, num_steps=T, delta=delta,
                                       orders=orders).epsilon)
  peer = timed_once(dp_one)
  rows = [row("poisson RDP: one eps (q=0.01, sigma=1, T=1e4, delta=1e-5)", ours,
              "dp-accounting 0.6.0 RdpAccountant", peer, float(ours["value"]), peer["value"],
              "same order grid (dp-accounting default)")]
  sig = np.linspace(0.5, 5.0, 1000)
  ours = timed(lambda: poisson.epsilon(q=q, sigma=sig, num_steps=T, delta=delta,
                                       orders=orders).epsilon, repeats=1)
  sub = sig[::50]  # dp-accounting is timed on 20 sigmas and scaled to 1000
  peer = timed_once(lambda: [dp_one(s) for s in sub])
  peer["steady_s"] *= len(sig) / len(sub)
  ours_vals = np.asarray(ours["value"])[::50]
  rows.append(row("poisson RDP: 1,000-sigma sweep", ours,
                  "dp-accounting 0.6.0 (20 sigmas, time x50)", peer,
                  float(np.max(np.abs(ours_vals / np.array(peer["value"]) - 1))), None,
                  "ours_value = max relative eps difference on the 20 shared sigmas"))
  from jaxacct.accounting import events as ev
  make = lambda s: ev.SelfComposedDpEvent(  # noqa: E731
      ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(s)), T)
  ours = timed(lambda: jaxacct.calibrate(make, np.linspace(0.5, 10, 1000), delta,
                                         bracket=(0.05, 1000.0), accountant="rdp",
                                         progress=False), repeats=1)
  rows.append(row("poisson RDP: calibrate sigma for 1,000 targets (one call)", ours,
                  notes="jaxacct.calibrate(accountant='rdp'), default orders; no peer "
                  "equivalent (dp-accounting calibrates one target per call)"))
  return rows
