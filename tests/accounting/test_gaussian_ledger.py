"""A ledger of Gaussian events is answered in closed form, with no PLD built.

Source: mu-GDP (Dong, Roth & Su, arXiv:1905.02383v3, Cor. 2.13 and 3.3):
``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``, evaluated
in mpmath at 50 digits, for mu = sqrt(sum n / sigma^2). At sigma 0.005 the
one-step Gaussian grid (step 1e-4) would be over the PLD engine's window:
the accountant refused it (WindowTooLarge) though the closed form needs none.
"""

import math

import mpmath as mp
import pytest

from jaxacct import dpsgd
from jaxacct.accounting import PLDAccountant, events


def _gdp_delta(mu, eps):
  mp.mp.dps = 50
  mu, eps = mp.mpf(mu), mp.mpf(eps)
  return float(mp.ncdf(-eps / mu + mu / 2) - mp.e ** eps * mp.ncdf(-eps / mu - mu / 2))


@pytest.mark.parametrize("ledger", [[(0.005, 2)], [(2.0, 3), (1.5, 2)]])
def test_gaussian_ledger_is_its_closed_form(ledger):
  acc = PLDAccountant()
  for sigma, n in ledger:
    acc.compose(events.GaussianDpEvent(sigma), n)
  r = acc.get_epsilon_bounds(1e-5)
  mu = math.sqrt(sum(n / s**2 for s, n in ledger))
  assert r.method == "gaussian_exact" and r.lower == r.epsilon
  assert r.details["mu"] == pytest.approx(mu, rel=1e-14)
  assert _gdp_delta(mu, r.epsilon) == pytest.approx(1e-5, rel=1e-8)


def test_shuffle_at_a_tiny_noise_multiplier_is_the_exact_gaussian():
  # sigma 0.005 and 1e-6 were WindowTooLarge ("too many steps for the PLD accountant")
  for sigma in (0.005, 1e-6):
    r = dpsgd.epsilon(noise_multiplier=sigma, sampling="shuffle", num_examples=1000,
                      batch_size=100, num_epochs=2, delta=1e-5, progress=False)
    assert _gdp_delta(math.sqrt(2) / sigma, r.epsilon) == pytest.approx(1e-5, rel=1e-8)
