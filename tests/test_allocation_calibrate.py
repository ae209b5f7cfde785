"""Sigma calibration over the epsilon front door's own programs (issue 28).

allocation_pld_calibrate_sigma evaluates every sigma it tries with the
programs of allocation_pld_epsilon (laws_batch, query_batch; one lane per
target), host-side: after an epsilon question at the same setting it
compiles nothing, and every returned sigma is feasible by that very
computation (front-door epsilon <= target) and tight (sigma / (1 + rtol)
misses the target). The same for jaxacct.dpsgd.calibrate_noise_multiplier.
"""

import numpy as np
import pytest

from jaxacct import dpsgd
from jaxacct.allocation import pld

KW = dict(grid_size=256, composition_size=4096)
RTOL = 1e-3
# one step above the tolerance: the bracket's ratio is <= (1 + rtol)^(1 + 1e-9)
MISS = 1 + RTOL * (1 + 1e-6)


def _upper(sigma, **kw):
  return np.asarray(pld.allocation_pld_epsilon(sigma=sigma, **kw, **KW).upper)


def test_calibration_after_epsilon_question_compiles_nothing(compile_counter):
  setting = dict(delta=1e-5, steps_per_epoch=20, num_selected=2, num_epochs=2)
  pld.allocation_pld_epsilon(sigma=1.3, **setting, **KW)       # the epsilon question
  with compile_counter as c:
    s = float(pld.allocation_pld_calibrate_sigma(epsilon=2.0, rtol=RTOL, **setting, **KW))
  assert c.count == 0
  # feasible by the front door, and sigma / (1 + rtol) is not
  assert _upper(s, **setting) <= 2.0 < _upper(s / MISS, **setting)


@pytest.mark.parametrize("setting, eps", [
    # k = 1, E = 1: one round, no composition lattice
    pytest.param(dict(delta=1e-6, steps_per_epoch=50), [0.7, 1.5], marks=pytest.mark.slow),
    # k = 2 of t = 21: rounds of 1-of-10 and 1-of-11 (rho = 1), E = 1
    pytest.param(dict(delta=1e-5, steps_per_epoch=21, num_selected=2), [1.0, 3.0],
                 marks=pytest.mark.slow),
    # E = 3 epochs of 1-of-30, delta per target
    (dict(delta=np.array([1e-5, 1e-8]), steps_per_epoch=30, num_epochs=3), [1.2, 1.2]),
])
def test_calibrated_sigma_is_feasible_and_tight(setting, eps):
  eps = np.asarray(eps)
  s = pld.allocation_pld_calibrate_sigma(epsilon=eps, rtol=RTOL, **setting, **KW)
  assert s.shape == eps.shape and np.all(np.isfinite(s))
  assert np.all(_upper(s, **setting) <= eps)
  assert np.all(_upper(s / MISS, **setting) > eps)


def test_calibration_bracket_errors_name_the_bracket():
  setting = dict(delta=1e-5, steps_per_epoch=20, num_selected=2, num_epochs=2)
  with pytest.raises(ValueError, match=r"\[0.3, 50\].*t=20, k=2, E=2"):
    pld.allocation_pld_calibrate_sigma(epsilon=1e-3, **setting, **KW)     # unreachable
  with pytest.raises(ValueError, match="sigma_lo=0.3 already meets"):
    pld.allocation_pld_calibrate_sigma(epsilon=50.0, **setting, **KW)     # met at sigma_lo


def test_dpsgd_calibration_after_epsilon_compiles_nothing(compile_counter):
  # N = 1000, B = 50: t = 20 steps per epoch, E = 2 (default grids)
  cfg = dict(num_examples=1000, batch_size=50, num_epochs=2, delta=1e-5)
  dpsgd.epsilon(noise_multiplier=1.2, **cfg)
  with compile_counter as c:
    s = dpsgd.calibrate_noise_multiplier(epsilon=2.0, rtol=1e-3, progress=False, **cfg)
  assert c.count == 0
  up = lambda x: dpsgd.epsilon(noise_multiplier=x, **cfg).epsilon
  assert up(s) <= 2.0 < up(s / MISS)


@pytest.mark.slow
def test_dpsgd_calibration_where_the_gaussian_bound_wins():
  # t = 1 (B = N): the exact Gaussian is below the PLD upper (discretisation
  # slack), so the certified upper is the Gaussian one; the calibration's
  # cheap lower bound must defer to it.
  cfg = dict(num_examples=100, batch_size=100, num_epochs=1, delta=1e-5)
  r = dpsgd.epsilon(noise_multiplier=1.0, **cfg)
  assert r.epsilon == r.details["local"] < r.details["pld_upper"]
  s = dpsgd.calibrate_noise_multiplier(epsilon=2.0, rtol=1e-3, progress=False, **cfg)
  up = lambda x: dpsgd.epsilon(noise_multiplier=x, **cfg).epsilon
  assert up(s) <= 2.0 < up(s / MISS)
