"""Pairwise sums of the allocation laws: the restructured kernels against the O(n^2) oracle.

Issue 28, item 5. ``jaxacct.allocation.sum_law`` (kernels of ``_sum_law``) computes a level of the
binary powering as ``X + X`` (symmetric kernel) and ``A + B`` (asymmetric
kernel) in one set of diagonal loops of shrinking length (``method="fast"``,
the default); ``method="reference"`` keeps the former vmapped pair of
asymmetric sums as the oracle. The argument for equality (products commute,
``x + y == y + x``, ``2 p == p + p`` exactly, the skipped padding adds exact
zeros) gives bit-for-bit equal lower laws; the upper masses may differ by
fused multiply-add contraction only (measured <= 1.1e-15 relative), so the
upper values are checked to 1e-12 relative and the lower ones exactly.
Pinned front-door values: /work/main at commit 0f9d32d (before the change),
2026-11-25, same settings.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxacct.allocation import pld
from jaxacct.allocation import sum_law as sl

pytestmark = pytest.mark.usefixtures("x64")


def _laws_fn(method, n, mechanism="gaussian"):
  one = sl.gaussian_one_step if mechanism == "gaussian" else sl.laplace_one_step

  @jax.jit
  def f(param, t, tail):
    up, lw, lat = one(param, n, tail)
    U, Ul, ledger = sl.sum_law_upper(up, lat, t, n, tail, 0.0, method=method)
    Lw, Ll = sl.sum_law_lower(lw, lat, t, n, tail, 0.0, method=method)
    return U, Ul, ledger, Lw, Ll
  return f


# (mechanism, parameter, t): sigma 0.5..3 (Gaussian), one Laplace; t = 1 (no sum),
# 2, 7, 10, 234, 1000 (odd/even bits of the binary powering)
SETTINGS = [("gaussian", 0.5, 10), ("gaussian", 1.0, 234), ("gaussian", 2.0, 1000),
            ("gaussian", 3.0, 7), ("gaussian", 1.3, 1), ("gaussian", 0.8, 2),
            ("laplace", 0.8, 50)]


@pytest.mark.parametrize("n", [256, pytest.param(1024, marks=pytest.mark.slow)])
def test_fast_laws_equal_reference(n):
  """Lower law (masses, moments, lattice) bit-for-bit; upper masses to 1e-13
  relative, its lattice and ledger exactly. Equal laws give equal profiles."""
  for mech in ("gaussian", "laplace"):
    fast, ref = _laws_fn("fast", n, mech), _laws_fn("reference", n, mech)
    for m, param, t in SETTINGS:
      if m != mech:
        continue
      (U, Ul, led, Lw, Ll), (U0, Ul0, led0, Lw0, Ll0) = fast(param, t, 1e-17), ref(param, t,
                                                                                   1e-17)
      for x, y in zip(jax.tree.leaves((Lw, Ll, Ul, led)), jax.tree.leaves((Lw0, Ll0, Ul0, led0))):
        np.testing.assert_array_equal(x, y, err_msg=f"{mech} {param} {t}")
      for x, y in zip(jax.tree.leaves(U), jax.tree.leaves(U0)):
        np.testing.assert_allclose(x, y, rtol=1e-13, atol=0.0, err_msg=f"{mech} {param} {t}")
      assert float(jnp.sum(Lw.a)) > 0.9 and float(jnp.sum(U.p) + U.q0) > 0.999


def test_pair_kernels_equal_single_sums():
  """conv_*_pair (one set of loops, any number of pieces) equals the two sums
  run one by one (pieces = 1); lower bit-for-bit."""
  n = 128
  up, lw, lat = sl.gaussian_one_step(1.0, n, 1e-17)
  up2 = up._replace(p=up.p * jnp.linspace(0.5, 1.5, n))
  lw2 = lw._replace(a=lw.a * jnp.linspace(0.5, 1.5, n), g=lw.g * jnp.linspace(0.5, 1.5, n))
  D = lat.step
  for pieces in (1, 2, 3, 5):
    S, C, o = sl.conv_lower_pair(lw, lw, lw2, D, n, pieces)
    S1, o1 = sl.conv_lower(lw, lw, D, n, False)
    C1, _ = sl.conv_lower(lw, lw2, D, n, False)
    assert int(o) == int(o1)
    for x, y in zip(jax.tree.leaves((S, C)), jax.tree.leaves((S1, C1))):
      np.testing.assert_array_equal(x, y)
    S, C, o = sl.conv_upper_pair(up, up, up2, D, n, pieces)
    S1, _ = sl.conv_upper(up, up, D, n, False)
    C1, _ = sl.conv_upper(up, up2, D, n, False)
    for x, y in zip(jax.tree.leaves((S, C)), jax.tree.leaves((S1, C1))):
      np.testing.assert_allclose(x, y, rtol=1e-14, atol=0.0)


def test_unknown_method_raises():
  up, lw, lat = sl.gaussian_one_step(1.0, 32, 1e-17)
  with pytest.raises(ValueError, match="method"):
    sl.sum_law_upper(up, lat, 3, 32, 1e-17, 0.0, method="fft")


@pytest.mark.slow   # 8 settings through both round laws and E-fold compositions (minutes)
def test_front_door_values_unchanged_and_brackets():
  """sigma 0.5..3, t 10..1000, k 1..5, E 1..10, delta 1e-5..1e-10 in one call:
  the values of the commit before the change (upper to 1e-12, lower to 1e-12
  relative: the laws' lower is bit-for-bit, the composition runs unchanged)
  and the bracket upper/lower <= 1.005 at the default grid; the lower is now
  checked below the old (exact O(n^2)) lower and within 2e-3 of it."""
  S = np.array([0.5, 1.0, 2.0, 3.0, 0.7, 1.5, 2.5, 1.0])
  T = np.array([10, 234, 1000, 100, 50, 234, 1000, 12])
  K = np.array([1, 1, 1, 3, 1, 4, 1, 5])
  E = np.array([1, 10, 1, 2, 5, 1, 10, 1])
  D = np.array([1e-5, 1e-10, 1e-6, 1e-8, 1e-5, 1e-10, 1e-7, 1e-6])
  r = pld.allocation_pld_epsilon(sigma=S, steps_per_epoch=T, num_selected=K, num_epochs=E,
                                 delta=D)
  up_before = np.array([7.6960705103849705, 1.9894771384099572, 0.05927137837121614,
                        0.7317457496710368, 4.519064126813512, 1.2135343661301254,
                        0.1776186637092318, 9.264804469878406])
  lo_before = np.array([7.694959588005946, 1.9871162101273225, 0.05921906205036405,
                        0.7313885103261876, 4.516478509635698, 1.2124793594081564,
                        0.17745679206657253, 9.263486890369776])
  up, lo = np.asarray(r.epsilon), np.asarray(r.lower)
  np.testing.assert_allclose(up, up_before, rtol=1e-12, atol=0.0)
  # the lower sums run on the 2x coarser lattice since (tests/test_lower_coarse.py):
  # a certified lower never above the exact one, within 2e-3 below it
  assert np.all(lo <= lo_before * (1 + 1e-12)) and np.all(lo >= lo_before * (1 - 2e-3))
  assert np.all(lo <= up)
  assert np.all(up / lo <= 1.005)
