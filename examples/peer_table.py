"""The README's table against the peers: one epoch of balls-in-bins batches.

Setting: t = 10,000 steps, each example in one step, sigma = 1, delta = 1e-10.
Needs the bench extra for the live peers (``pip install ".[bench]"``): dp-accounting
0.6.0 and random-allocation 1.0.5 (the latter takes about a minute here).
PLD_accounting 2.0 takes minutes per epsilon; its values are the ones notebook 01
records (``gaussian_allocation_epsilon_range``, default accuracy).

Run: ``python examples/peer_table.py``.
"""

import warnings

SIGMA, T, DELTA = 1.0, 10_000, 1e-10
PLD_ACCOUNTING_2_0 = (0.07633, 0.07977)   # (lower, upper), recorded


def main():
  from jaxacct.allocation import pld
  r = pld.allocation_pld_epsilon(sigma=SIGMA, steps_per_epoch=T, delta=DELTA)
  rows = [("jaxacct, tight allocation PLD", "balls-in-bins",
           f"{r.epsilon:.5f} (lower {r.lower:.5f})"),
          ("PLD_accounting 2.0, tight allocation PLD (recorded)", "balls-in-bins",
           f"{PLD_ACCOUNTING_2_0[1]:.5f} (lower {PLD_ACCOUNTING_2_0[0]:.5f})")]
  try:
    from random_allocation.comparisons.structs import PrivacyParams, SchemeConfig, Verbosity
    from random_allocation.random_allocation_scheme.direct import allocation_epsilon_direct
    cfg = SchemeConfig(allocation_direct_alpha_orders=list(range(2, 61)),
                       verbosity=Verbosity.NONE)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      v = allocation_epsilon_direct(PrivacyParams(sigma=SIGMA, num_steps=T, delta=DELTA), cfg)
    rows.append(("random-allocation 1.0.5, direct RDP (orders 2-60)", "balls-in-bins",
                 f"{v:.4f}"))
  except ImportError:
    rows.append(("random-allocation 1.0.5", "balls-in-bins", "not installed"))
  try:
    import dp_accounting as dpa
    ev = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(1 / T, dpa.GaussianDpEvent(SIGMA)), T)
    rows.append(("dp_accounting 0.6.0, PLD", "Poisson at q = 1/t (stand-in)",
                 f"{dpa.pld.PLDAccountant().compose(ev).get_epsilon(DELTA):.5f}"))
    rows.append(("dp_accounting 0.6.0, RDP", "Poisson at q = 1/t (stand-in)",
                 f"{dpa.rdp.RdpAccountant().compose(ev).get_epsilon(DELTA):.4f}"))
  except ImportError:
    rows.append(("dp_accounting 0.6.0", "Poisson", "not installed"))
  print("| accountant | what it accounts | epsilon |\n|---|---|---|")
  for row in rows:
    print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
  main()
