"""The two result types: pytrees through jit/vmap, closed bound vocabulary."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxacct import DeltaResult, EpsilonResult
from jaxacct import BOUNDS


def test_results_pass_through_jit_and_vmap():
  def f(x):
    return EpsilonResult(2.0 * x, 1e-5, "m", "upper", lower=x,
                         by_direction={"remove": (2.0 * x, x), "add": (x, None)},
                         details={"note": "static"})
  r = jax.jit(f)(1.5)
  assert float(r.epsilon) == 3.0 and float(r.lower) == 1.5 and float(r.upper) == 3.0
  assert r.method == "m" and r.bound == "upper" and r.details == {"note": "static"}
  v = jax.vmap(f)(jnp.arange(4.0))
  np.testing.assert_array_equal(np.asarray(v.epsilon), [0.0, 2.0, 4.0, 6.0])
  np.testing.assert_array_equal(np.asarray(v.by_direction["remove"][1]), [0, 1, 2, 3])
  d = jax.jit(lambda x: DeltaResult(x, 1.0, "m", "exact"))(0.25)
  assert float(d.upper) == 0.25 and d.bound == "exact"


@pytest.mark.parametrize("bad", ["approximate", "lower_generic", "rdp-lower", "", None])
def test_bound_vocabulary_is_closed(bad):
  with pytest.raises(ValueError, match="bound must be one of"):
    EpsilonResult(1.0, 1e-5, "m", bad)
  with pytest.raises(ValueError, match="bound must be one of"):
    DeltaResult(1e-5, 1.0, "m", bad)
  assert BOUNDS == ("exact", "upper", "lower", "estimate")
