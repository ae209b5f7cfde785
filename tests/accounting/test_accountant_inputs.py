"""PLDAccountant checks its settings before it accounts (issue 67)."""

import math

import numpy as np
import pytest

from jaxacct.accounting import PLDAccountant, events


@pytest.mark.parametrize("bad", [True, np.bool_(True), np.array([]), math.nan, [], 0, 1e300])
def test_component_cache_is_a_dict_or_none(bad):
  with pytest.raises(ValueError, match="component_cache must be a dict or None"):
    PLDAccountant(component_cache=bad)


def test_a_shared_cache_keeps_the_answer():
  """The class docstring's example (the exact Gaussian: mu = sqrt(10) / 2, Balle &
  Wang, arXiv:1805.06530v2, Thm 8) with a cache shared by two accountants."""
  shared = {}
  for _ in range(2):
    acc = PLDAccountant(component_cache=shared).compose(events.GaussianDpEvent(2.0), 10)
    assert acc.get_epsilon(1e-5) == pytest.approx(7.5113, abs=5e-5)
