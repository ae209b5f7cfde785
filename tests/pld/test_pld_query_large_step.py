"""PLD queries at grid steps of hundreds of nats.

Source: the hockey-stick divergence summed directly over the PLD's atoms in
NumPy (``delta(eps) = inf_mass + sum_{l_i > eps} p_i (1 - e^{eps - l_i})``),
independent of the query's recurrences. At a step of 700 nats the jitted
tables lost every mass below ~1e-4 (e^-700 times it is flushed to 0):
``pld.epsilon`` returned 700.0 for a PLD whose delta there is 5.4e-5 > 1e-5,
an under-report; the scaled tables keep it.
"""

import math

import numpy as np
import pytest

from jaxacct import pld

DELTA = 1e-5


def _direct_delta(c, eps):
  probs = np.asarray(c.probs, np.float64)
  loss = (int(c.offset) + np.arange(probs.size)) * float(c.step)
  above = loss > eps
  return float(c.inf_mass) + math.fsum(probs[above] * -np.expm1(eps - loss[above]))


@pytest.mark.parametrize("step", [0.2, 100.0, 700.0, 800.0, 1e4])
def test_epsilon_and_delta_at_large_steps_match_the_atoms(step):
  c = pld.compose(pld.poisson_gaussian(1.0, 0.01, step=step), 3)
  eps = float(pld.epsilon(c, DELTA))
  # a valid (upper) epsilon: the direct delta there is within the target
  assert _direct_delta(c, eps) <= DELTA * (1 + 1e-9)
  # and a tight one: a little below it, the target is not met
  assert _direct_delta(c, eps - 1e-6 * (1 + eps)) > DELTA
  for e in (0.5 * eps, eps, step):
    np.testing.assert_allclose(float(pld.delta(c, e)), _direct_delta(c, e), rtol=1e-9,
                               atol=1e-300)
