"""jaxacct as a dp_accounting accountant: a mixed run, calibration, timings.

Needs the optional ``dp_accounting`` package (``pip install dp-accounting``)::

    python examples/dp_accounting_interop.py            # under a minute on a CPU

1. Accounts one run mixing random allocation (two phases), Gaussian
   evaluation queries and shuffled rounds with ``jaxacct.accounting.PLDAccountant``
   (certified bracket), and the parts dp_accounting can express with its own
   ``PLDAccountant`` for comparison.
2. Calibrates sigma for 1-of-t random allocation through
   ``dp_accounting.mechanism_calibration.calibrate_dp_mechanism`` with the
   jaxacct accountant, and with jaxacct's own calibrator ``jaxacct.calibrate``
   on the same event (vectorised over targets); prints both sigmas and times.
3. Times a Poisson-subsampled Gaussian run in both accountants.
"""

from __future__ import annotations

import time

import dp_accounting as dpa

from jaxacct.accounting import NeighboringRelation as NR, PLDAccountant, events as ev


def timed(fn):
  t = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - t


def mixed_run(delta=1e-6, randomizer="generic"):
  acc = PLDAccountant(NR.REPLACE_SPECIAL)
  acc.compose(ev.RandomAllocationDpEvent(noise_multiplier=1.1, steps_per_epoch=100, num_epochs=3))
  acc.compose(ev.RandomAllocationDpEvent(noise_multiplier=0.9, steps_per_epoch=100, num_selected=2,
                                         num_epochs=2))
  acc.compose(dpa.GaussianDpEvent(20.0), 50)
  acc.compose(ev.ShuffleDpEvent(n=1000, eps0=1.0, randomizer=randomizer), 10)
  r, dt = timed(lambda: acc.get_epsilon_bounds(delta))
  print(f"mixed run ({randomizer} shuffle), delta={delta:g}: epsilon in "
        f"[{r.lower:.5f}, {r.epsilon:.5f}] ({dt:.1f}s incl. compile); "
        f"lower bound scope: {r.details['lower_scope']}")
  mi = acc.tpr_at_fpr([1e-3, 1e-2])
  print(f"  membership inference: TPR <= {mi.upper} at FPR {mi.fpr}")
  g = dpa.pld.PLDAccountant(NR.REPLACE_SPECIAL).compose(dpa.GaussianDpEvent(20.0), 50)
  print(f"  dp_accounting can account only the Gaussian part: "
        f"{g.get_epsilon(delta):.5f}")


def calibration(t=100, eps=1.0, delta=1e-6):
  import jaxacct
  make = lambda s: ev.RandomAllocationDpEvent(noise_multiplier=s, steps_per_epoch=t)  # noqa: E731
  s_dp, t_dp = timed(lambda: dpa.calibrate_dp_mechanism(
      PLDAccountant, make, eps, delta, bracket_interval=dpa.ExplicitBracketInterval(0.5, 5.0), tol=1e-4))
  jaxacct.calibrate(make, eps, delta, bracket=(0.5, 5.0))    # compile
  s_jx, t_jx = timed(lambda: float(jaxacct.calibrate(make, eps, delta, bracket=(0.5, 5.0))))
  print(f"calibration (1-of-{t}, eps={eps}, delta={delta:g}): "
        f"calibrate_dp_mechanism + jaxacct accountant sigma={s_dp:.5f} ({t_dp:.1f}s); "
        f"jaxacct.calibrate sigma={s_jx:.5f} ({t_jx:.2f}s)")


def poisson_timing(delta=1e-6):
  e = dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0))
  PLDAccountant(shortcuts=False).compose(e, 1000).get_epsilon(delta)      # compile
  ours, t1 = timed(lambda: PLDAccountant(shortcuts=False).compose(e, 1000)
                   .get_epsilon_bounds(delta))
  theirs, t2 = timed(lambda: dpa.pld.PLDAccountant().compose(e, 1000).get_epsilon(delta))
  print(f"Poisson q=0.01 sigma=1, 1000 steps: jaxacct [{ours.lower:.6f}, "
        f"{ours.epsilon:.6f}] ({t1:.1f}s, bracket); dp_accounting {theirs:.6f} ({t2:.1f}s)")


if __name__ == "__main__":
  mixed_run()
  mixed_run(randomizer="binary_rr")
  calibration()
  poisson_timing()
