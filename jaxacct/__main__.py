"""``jaxacct`` / ``python -m jaxacct``: a table of epsilon across sampling schemes.

Default setting (override with flags): sigma = 1.0, t = 10,000 steps in one
epoch, each example used once per epoch (random allocation k = 1, Poisson at
rate 1/t), delta = 1e-10; for shuffling, n = t users each applying an
eps0-LDP randomizer with eps0 = 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, List, Tuple


def _rows(args) -> List[Tuple[str, str, Callable[[], float]]]:
  import jaxacct
  from jaxacct import allocation, poisson, shuffle
  from jaxacct.allocation import pld as alloc_pld
  q = args.num_selected / args.num_steps
  T = args.num_steps * args.num_epochs
  tight = {}

  def _tight(kind):
    if not tight:
      r = alloc_pld.allocation_pld_epsilon(
          sigma=args.sigma, delta=args.delta, num_steps=args.num_steps,
          num_selected=args.num_selected, num_epochs=args.num_epochs)
      tight.update(upper=r.upper, lower=r.lower)
    return tight[kind]

  alloc = "Random allocation, k of t"
  shuf = f"Shuffling n={args.num_steps}, eps0={args.eps0:g}-LDP"
  return [
      ("Poisson subsampling, rate k/t", "RDP (upper)",
       lambda: poisson.epsilon(q=q, sigma=args.sigma, num_steps=T, delta=args.delta).epsilon),
      ("Poisson subsampling, rate k/t", "PLD (upper)",
       lambda: poisson.epsilon(q=q, sigma=args.sigma, num_steps=T, delta=args.delta,
                               method="pld").epsilon),
      (alloc, "tight PLD (upper)", lambda: _tight("upper")),
      (alloc, "tight PLD (lower)", lambda: _tight("lower")),
      (alloc, "best RDP / analytic bound (upper)",
       lambda: allocation.epsilon(
           sigma=args.sigma, num_steps=args.num_steps, delta=args.delta,
           num_selected=args.num_selected, num_epochs=args.num_epochs,
           methods=("rdp_direct", "rdp_add", "direct_add", "decomposition", "local")).epsilon),
      (shuf, "any eps0-LDP randomizer (upper)",
       lambda: shuffle.epsilon(n=args.num_steps, eps0=args.eps0, delta=args.delta,
                               rounds=args.num_epochs).epsilon),
      (shuf, "binary randomized response (best)",
       lambda: shuffle.epsilon(n=args.num_steps, eps0=args.eps0, delta=args.delta,
                               rounds=args.num_epochs, randomizer="binary_rr").epsilon),
      ("No amplification (each step sees the example)", "exact Gaussian",
       lambda: jaxacct.gaussian_epsilon(
           args.sigma / (args.num_selected * args.num_epochs) ** 0.5, args.delta)),
  ]


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="jaxacct", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sigma", type=float, default=1.0)
  p.add_argument("--num-steps", type=int, default=10_000, help="steps per epoch t")
  p.add_argument("--num-selected", type=int, default=1, help="k: steps per example per epoch")
  p.add_argument("--num-epochs", type=int, default=1)
  p.add_argument("--delta", type=float, default=1e-10)
  p.add_argument("--eps0", type=float, default=1.0, help="local epsilon for shuffling")
  args = p.parse_args(argv)
  print(f"jaxacct: epsilon at delta={args.delta:g}, sigma={args.sigma:g}, "
        f"t={args.num_steps}, k={args.num_selected}, epochs={args.num_epochs}")
  print("(times include the one-off JIT compilation of each kernel)")
  print(f"{'scheme':<48} {'method':<36} {'epsilon':>12} {'time':>9}")
  print("-" * 108)
  status = 0
  for scheme, method, fn in _rows(args):
    t0 = time.perf_counter()
    try:
      val = float(fn())
      cell = f"{val:12.6g}"
    except Exception as e:  # report, don't hide: a failing row fails the job
      cell = f"ERROR {type(e).__name__}: {e}"[:60]
      status = 1
    dt = time.perf_counter() - t0
    print(f"{scheme:<48} {method:<36} {cell:>12} {dt:8.2f}s")
  return status


if __name__ == "__main__":
  sys.exit(main())
