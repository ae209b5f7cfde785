"""``jaxacct`` / ``python -m jaxacct``: a table of epsilon across sampling schemes.

Default setting (override with flags): sigma = 1.0, t = 10,000 steps in one
epoch, each example used once per epoch (random allocation k = 1, Poisson at
rate 1/t), delta = 1e-10; for shuffling, n = t users each applying an
eps0-LDP randomizer with eps0 = 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, List, Tuple


def _rows(args) -> List[Tuple[str, str, Callable[[float], float]]]:
  """(scheme, method, fn): ``fn(scale)`` computes the row's epsilon with sigma
  (or eps0 for shuffling) multiplied by ``scale`` (1 for the table; a new value
  for the optional second call, which shows whether new values recompile)."""
  import jaxacct
  from jaxacct import allocation, poisson, shuffle
  from jaxacct.allocation import pld as alloc_pld
  q = args.num_selected / args.num_steps
  T = args.num_steps * args.num_epochs
  tight = {}

  def _tight(kind, scale):
    if scale not in tight:
      r = alloc_pld.allocation_pld_epsilon(
          sigma=args.sigma * scale, delta=args.delta, steps_per_epoch=args.num_steps,
          num_selected=args.num_selected, num_epochs=args.num_epochs)
      tight[scale] = {"upper": r.upper, "lower": r.lower}
    return tight[scale][kind]

  alloc = "Random allocation, k of t"
  shuf = f"Shuffling n={args.num_steps}, eps0={args.eps0:g}-LDP"
  return [
      ("Poisson subsampling, rate k/t", "RDP (upper)",
       lambda c: poisson.epsilon(q=q, sigma=args.sigma * c, num_steps=T,
                                 delta=args.delta).epsilon),
      ("Poisson subsampling, rate k/t", "PLD (upper)",
       lambda c: poisson.epsilon(q=q, sigma=args.sigma * c, num_steps=T, delta=args.delta,
                                 method="pld").epsilon),
      (alloc, "tight PLD (upper)", lambda c: _tight("upper", c)),
      (alloc, "tight PLD (lower)", lambda c: _tight("lower", c)),
      (alloc, "best RDP / analytic bound (upper)",
       lambda c: allocation.epsilon(
           sigma=args.sigma * c, steps_per_epoch=args.num_steps, delta=args.delta,
           num_selected=args.num_selected, num_epochs=args.num_epochs,
           methods=("rdp_direct", "rdp_add", "direct_add", "decomposition", "local")).epsilon),
      (shuf, "any eps0-LDP randomizer (upper)",
       lambda c: shuffle.epsilon(n=args.num_steps, eps0=args.eps0 * c, delta=args.delta,
                                 rounds=args.num_epochs).epsilon),
      (shuf, "binary randomized response (best)",
       lambda c: shuffle.epsilon(n=args.num_steps, eps0=args.eps0 * c, delta=args.delta,
                                 rounds=args.num_epochs, randomizer="binary_rr").epsilon),
      ("No amplification (each step sees the example)", "exact Gaussian",
       lambda c: jaxacct.gaussian_epsilon(
           args.sigma * c / (args.num_selected * args.num_epochs) ** 0.5, args.delta).epsilon),
  ]


def timed_cell(fn, scale):
  """One table cell: ``(text, ok, CompileTime)`` of ``fn(scale)``.

  ``text`` is the value formatted for the table, or ``"ERROR <type>: <msg>"``
  (truncated to 60 characters) when the call raised; ``ok`` says which.
  ``CompileTime`` splits the call's wall time into compile and run.
  """
  from jaxacct._core.cache import compile_timer
  with compile_timer() as ct:
    try:
      val = float(fn(scale))
      cell, ok = f"{val:12.6g}", True
    except Exception as e:  # report, don't hide: a failing row fails the job
      cell, ok = f"ERROR {type(e).__name__}: {e}"[:60], False
  return cell, ok, ct


def _setup_logging():
  """Progress lines (jaxacct logger, INFO) go to stderr when there is no tqdm
  and no terminal; the table itself goes to stdout."""
  import logging
  lg = logging.getLogger("jaxacct")
  if not lg.handlers:
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("[jaxacct] %(message)s"))
    lg.addHandler(h)
    lg.setLevel(logging.INFO)
    lg.propagate = False


def main(argv=None) -> int:
  # allow_abbrev=False: "--eps 3" must not be read silently as "--eps0 3"
  p = argparse.ArgumentParser(prog="jaxacct", description=__doc__, allow_abbrev=False,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sigma", type=float, default=1.0)
  p.add_argument("--num-steps", type=int, default=10_000, help="steps per epoch t")
  p.add_argument("--num-selected", type=int, default=1, help="k: steps per example per epoch")
  p.add_argument("--num-epochs", type=int, default=1)
  p.add_argument("--delta", type=float, default=1e-10)
  p.add_argument("--eps0", type=float, default=1.0, help="local epsilon for shuffling")
  p.add_argument("--no-cache", action="store_true",
                 help="do not use the persistent JAX compilation cache")
  p.add_argument("--cache-dir", default=None,
                 help="compilation cache directory (default $JAXACCT_CACHE_DIR or "
                      "~/.cache/jaxacct/jax)")
  p.add_argument("--second-call", action="store_true",
                 help="time a second call of each row with sigma (eps0) x 1.001: "
                      "its compile time shows whether new values recompile")
  p.add_argument("--quiet", action="store_true", help="no progress output")
  args = p.parse_args(argv)
  import jaxacct
  from jaxacct._core.progress import progress
  cache = None
  if not args.no_cache:
    try:
      cache = jaxacct.enable_compilation_cache(args.cache_dir)
    except OSError as e:   # e.g. a read-only home: run without the cache
      print(f"(compilation cache not enabled: {e})", file=sys.stderr)
  _setup_logging()
  print(f"jaxacct: epsilon at delta={args.delta:g}, sigma={args.sigma:g}, "
        f"t={args.num_steps}, k={args.num_selected}, epochs={args.num_epochs}")
  print("first call = compile + run (compile: JAX tracing, lowering, XLA compilation or "
        "persistent-cache load); "
        + (f"compilation cache: {cache.path}" if cache else "compilation cache off"))
  head = f"{'scheme':<48} {'method':<36} {'epsilon':>12} {'first call':>10} " \
         f"{'compile':>9} {'run':>9}"
  if args.second_call:
    head += f" {'2nd call':>9} {'compile':>9}"
  print(head)
  print("-" * len(head))
  status = 0
  rows = _rows(args)
  with progress(total=len(rows), desc="jaxacct rows", enabled=False if args.quiet else None
                ) as bar:
    for scheme, method, fn in rows:
      bar.set_description(f"jaxacct: {method} / {scheme}"[:70])
      cell, ok, ct = timed_cell(fn, 1.0)
      status |= 0 if ok else 1
      line = (f"{scheme:<48} {method:<36} {cell:>12} {ct.total:9.2f}s {ct.compile:8.2f}s "
              f"{ct.run:8.2f}s")
      if args.second_call and ok:
        _, ok2, ct2 = timed_cell(fn, 1.001)
        status |= 0 if ok2 else 1
        line += f" {ct2.total:8.2f}s {ct2.compile:8.2f}s"
      bar.echo(line)
      bar.update(1)
  return status


if __name__ == "__main__":
  sys.exit(main())
