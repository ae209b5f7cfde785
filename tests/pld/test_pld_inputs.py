"""The PLD doors check what they are given before they compute (issue 67).

A bad value is a ``ValueError`` naming the parameter (no AttributeError,
TypeError, OverflowError or ZeroDivisionError from inside); a grid beyond the
engine (``jaxacct.pld.MAX_WINDOW`` points) is refused naming the accounted
range; the ends that have an answer get it. References: Kairouz, Oh, Viswanath,
arXiv:1311.0776v4, Thm 3.4 (randomized response's profile); post-processing
(more noise never costs privacy) for the noise past ``SIGMA_MAX``.
"""

import math

import numpy as np
import pytest

from jaxacct import pld


def test_queries_and_compositions_take_plds_only():
  g = pld.randomized_response(1.0)
  calls = {"pld": (lambda b: pld.delta(b, 0.5), lambda b: pld.epsilon(b, 1e-3),
                   lambda b: pld.compose(b, 2)),
           "plds": (lambda b: pld.compose_many(b, [2]),)}
  for bad in (True, np.bool_(True), 0.5, math.nan, [2, 3], np.array([]), [g.probs]):
    for name, fns in calls.items():
      for fn in fns:
        with pytest.raises(ValueError, match=name):
          fn(bad)
  with pytest.raises(ValueError, match="plds must hold at least one"):
    pld.compose_many([])
  with pytest.raises(ValueError, match="plds must be a sequence"):
    pld.compose_many(g)        # one PLD (a tuple of its fields) is not a list of them
  for counts in (True, 2, math.inf, [0], [1.5], [2, 2], [[2]]):
    with pytest.raises(ValueError, match="counts"):
      pld.compose_many([g], counts)
  for kw, name in ((dict(count=[2, 3]), "count"), (dict(size=[8]), "size")):
    with pytest.raises(ValueError, match=name):
      pld.compose(g, **kw)
  # the valid forms still compose: counts a tuple or a NumPy array, a PairPLD queried
  a = pld.compose_many((g,), np.array([3]))
  b = pld.compose(g, 3)
  assert np.array_equal(np.asarray(a.probs), np.asarray(b.probs)) and a.offset == b.offset
  assert float(pld.delta(pld.PairPLD(g, g), 1.0)) == float(pld.delta(g, 1.0))


def test_from_losses_checks_its_atoms():
  base = dict(losses=np.array([1.0, -1.0]), probs=np.array([0.7, 0.3]), step=0.1,
              offset=-12, size=32)
  for kw, name in [(dict(losses=0.5), "losses"), (dict(losses=True), "losses"),
                   (dict(losses=np.array([math.nan, 1.0])), "losses"),
                   (dict(losses=np.array([])), "losses"),
                   (dict(probs=np.array([0.5, -0.1])), "probs"),
                   (dict(probs=np.array([0.5, math.inf])), "probs"),
                   (dict(probs=np.bool_(True)), "probs"),
                   (dict(probs=np.array([0.2, 0.3, 0.5])), "probs"),
                   (dict(step=[0.1]), "step"), (dict(offset=[0]), "offset"),
                   (dict(size=[32]), "size")]:
    with pytest.raises(ValueError, match=name):
      pld.from_losses(**{**base, **kw})
  # lists are arrays, one P-mass is every atom's: the same PLD, bit for bit
  a = pld.from_losses([1.0, -1.0], [0.4, 0.4], step=0.1)
  b = pld.from_losses(np.array([1.0, -1.0]), 0.4, step=0.1)
  assert np.array_equal(np.asarray(a.probs), np.asarray(b.probs)) and a.offset == b.offset
  with pytest.raises(ValueError, match="step"):
    pld.from_pair(np.array([0.5, 0.5]), np.array([0.4, 0.6]), step=[0.1])


@pytest.mark.parametrize("call,name", [
    (lambda: pld.gaussian([1.0, 2.0]), "sigma"),
    (lambda: pld.gaussian(1.0, sensitivity=[1.0]), "sensitivity"),
    (lambda: pld.gaussian(1.0, step=[1e-2]), "step"),
    (lambda: pld.laplace([1.0]), "scale"),
    (lambda: pld.laplace(1.0, step=[1e-2]), "step"),
    (lambda: pld.poisson_gaussian([1.0], 0.1), "sigma"),
    (lambda: pld.poisson_gaussian(1.0, [0.1]), "q"),
    (lambda: pld.poisson_gaussian(1.0, 0.1, step=[1e-2]), "step"),
    (lambda: pld.randomized_response([1.0]), "eps0"),
    (lambda: pld.randomized_response(1.0, delta0=[0.0]), "delta0"),
    (lambda: pld.randomized_response(1.0, step=[0.5]), "step")])
def test_one_number_where_one_goes(call, name):
  with pytest.raises(ValueError, match=f"{name} must be a single number"):
    call()


def test_grids_beyond_the_engine_are_refused_naming_the_range():
  """sigma / sensitivity 1e-300 was a ZeroDivisionError (mu = 0.5 / 0.0), the
  Laplace grid 2e302 points an OverflowError, randomized response at eps0 1e300 a
  math range error; the bounds are the grid widths at MAX_WINDOW = 2^25 points:
  Gaussian 2 z / (2^25 h), z = 9.31 (tail 1e-20); Laplace 2 / (2^25 h); randomized
  response 2^25 h / 2; Poisson the root of 1/(2 s^2) + z/s + log q = 2^25 h (the
  same 0.0137 as checks.accountable_sigma at step 1e-4)."""
  cases = [
      (lambda: pld.gaussian(1.0, sensitivity=1e300, step=1e-2),
       r"sensitivity 1e\+300\) .* sigma / sensitivity >= 5\.55e-05 is accounted"),
      (lambda: pld.gaussian(1e-3, step=1e-4), r"sigma / sensitivity >= 0\.00555 is accounted"),
      (lambda: pld.laplace(1.0, sensitivity=1e300, step=1e-2),
       r"sensitivity 1e\+300\) .* scale / sensitivity >= 5\.96e-06 is accounted"),
      (lambda: pld.randomized_response(1e300, step=0.5), r"eps0 <= 8\.39e\+06 is accounted"),
      (lambda: pld.randomized_response(1e300), r"eps0 <= 1\.17e\+10 is accounted"),
      (lambda: pld.poisson_gaussian(1e-3, 0.1, step=1e-4), r"sigma >= 0\.0137 is accounted"),
      # below 1e-150 (checks.SMALLEST_SIGMA) no grid holds it: refused before any grid
      (lambda: pld.poisson_gaussian(1e-200, 0.1, step=1e-2), r"sigma must be at least 1e-150")]
  for call, match in cases:
    with pytest.raises(ValueError, match=match):
      call()


def test_noise_past_sigma_max_is_accounted_there():
  """sigma 1e300 overflowed sigma**2; it is accounted at SIGMA_MAX = 1e100 (more
  noise is a post-processing: an upper bound), which in float64 is the PLD of
  sigma 1e60 (all the mass at loss 0): epsilon 0 to the query's allowance."""
  for make in (lambda s: pld.gaussian(s, step=1e-2),
               lambda s: pld.poisson_gaussian(s, 0.1, step=1e-2),
               lambda s: pld.poisson_gaussian(s, 0.1, step=1e-2, direction="add")):
    a, b = make(1e300), make(1e60)
    assert np.array_equal(np.asarray(a.probs), np.asarray(b.probs)) and a.offset == b.offset
    assert 0.0 <= float(pld.epsilon(a, 1e-10)) <= 1e-12


def test_randomized_response_past_exp_overflow():
  """eps0 800: e^eps0 overflows float64 (was an OverflowError). Kairouz-Oh-Viswanath
  (delta0 = 0): delta(eps) = (e^eps0 - e^eps) / (1 + e^eps0), so eps(delta) =
  eps0 + log(1 - delta) to float64 (e^-800 = 0); k-fold: k eps0 + log(1 - delta).
  The default step (eps0 / ceil(eps0 / 700) = 400) keeps the grid exact."""
  p = pld.randomized_response(800.0)
  assert p.step == 400.0
  for k, eps0 in ((1, 800.0), (3, 2400.0)):
    exact = eps0 + math.log1p(-1e-5)
    got = float(pld.epsilon(pld.compose(p, k) if k > 1 else p, 1e-5))
    assert exact <= got <= exact + 1e-12 * eps0 + 1e-13, (k, got)
  # below 700 the default step is eps0 itself, as before
  assert pld.randomized_response(700.0).step == 700.0


def test_no_atoms_at_all_is_a_law_of_no_mass():
  # an empty law (e.g. the allocation laws at sigma 1e300) is a PLD of no finite
  # mass; only one empty side of a pair of arrays is a bad value (named)
  p = pld.from_losses(np.array([]), np.array([]), step=1e-4, inf_mass=0.25)
  assert np.asarray(p.probs).tolist() == [0.0] and float(p.inf_mass) == 0.25
  with pytest.raises(ValueError, match="losses"):
    pld.from_losses(np.array([]), np.array([0.5]), step=1e-4)
