"""Fixed-size batches: adversaries that change direction step to step stay below the upper.

``jaxacct.accounting.fixed_size.adaptive_lower_delta`` is the exact delta of
a realisable adaptive mechanism (the other records moved to c_t in
{-1, 0, 1} from the outputs so far; each step's pair merged onto the grid,
which is post-processing): a certified lower bound. It must stay below the
shipped upper (the symmetric pair composed, = Dong-Roth-Su's C_p, see
tests/accounting/test_fixed_size_drs.py) and above every fixed schedule. Tolerances:
1e-9 absolute in delta (FFT round-off is ~1e-12 per step).
"""

import numpy as np
import pytest

from jaxacct.accounting import fixed_size as fs

pytest.importorskip("dp_accounting")


def _event(kind, n, m, sigma):
  from dp_accounting import dp_event as de
  cls = de.SampledWithReplacementDpEvent if kind == "wr" else de.SampledWithoutReplacementDpEvent
  return cls(n, m, de.GaussianDpEvent(sigma))


@pytest.mark.parametrize("kind, n, m, sigma, steps", [("wor", 5, 2, 1.0, 10),
                                                      ("wor", 50, 10, 0.8, 30),
                                                      ("wr", 6, 2, 1.0, 8)])
def test_adaptive_lower_between_fixed_schedule_and_upper(kind, n, m, sigma, steps):
  from jaxacct.accounting import NeighboringRelation as NR
  from jaxacct.accounting import PLDAccountant
  # a short table (eps <= 15; read at eps <= 6 only): min_delta allows
  # its end at delta 0.11 (measured 0.0084, 0.11, 0.0079 at the three settings)
  h, rng, md = 5e-3, (-15.0, 12.0), 0.2
  eps, adaptive = fs.adaptive_lower_delta(kind, n, m, sigma, steps, step=h, loss_range=rng,
                                          min_delta=md)
  _, fixed = fs.adaptive_lower_delta(kind, n, m, sigma, steps, others=(-1.0,), step=h,
                                     loss_range=rng, min_delta=md)
  pick = (eps <= 6.0) & (np.arange(eps.size) % 200 == 0)
  e = eps[pick]
  acc = PLDAccountant(NR.REPLACE_ONE, h).compose(_event(kind, n, m, sigma), steps)
  upper = np.array([acc.get_delta(float(x)) for x in e])
  lower = np.array([acc.get_delta_bounds(float(x)).lower for x in e])
  assert np.all(adaptive[pick] <= upper + 1e-9)
  assert np.all(adaptive >= fixed - 1e-9)
  # the fixed schedule c = -1 is the accountant's certified lower side
  # (same instance; both merged onto the grid, measured rel. gap < 1e-3)
  np.testing.assert_allclose(fixed[pick], lower, rtol=2e-2, atol=1e-9)
  # flipping the direction pays: strictly above the fixed schedule somewhere
  assert np.max(adaptive - fixed) > 1e-4


def test_adaptive_lower_checks_its_input():
  with pytest.raises(ValueError, match="kind"):
    fs.adaptive_lower_delta("poisson", 5, 2, 1.0, 3)
  with pytest.raises(ValueError, match="others"):
    fs.adaptive_lower_delta("wor", 5, 2, 1.0, 3, others=(2.0,))
  with pytest.raises(ValueError, match="m"):
    fs.adaptive_lower_delta("wor", 5, 6, 1.0, 3)
