"""The allocation round laws with lanes in vmapped blocks (the accelerator path, on the CPU).

On an accelerator the law builder runs its lanes as vmapped blocks
(``lanes_per_block``); there every lane-dependent slice of the pairwise sums'
loop body (its near-band trip count, the output offset ``kappa(d) - o``, the
complex mass-and-moment row of the lower) is batched. No accelerator is
needed to trace and run that program: ``jax.vmap`` of the t-fold sums over
lanes of different sigma and t (different lattices, trip counts, far fields
and numbers of levels) must give each lane's own result. Tolerance: 1e-12
relative on every upper mass above 1e-300 and on the lower's total mass and
first moment (the batched program may contract or order a product and a sum
differently; the sums are of non-negative terms).
"""

import jax
import numpy as np

from jaxacct.allocation import sum_law
from support import one_step_laws

N, TAIL = 256, 1e-13
LANES = [(0.4, 50), (1.0, 7), (3.0, 234), (0.7, 1)]   # far field / none; t = 1 has no level


def _stack(xs):
  return jax.tree.map(lambda *a: np.stack(a), *xs)


def test_vmapped_t_fold_sums_equal_each_lanes_own():
  with jax.enable_x64(True):
    steps = [one_step_laws("gaussian", s, N, TAIL) for s, _ in LANES]
    t = np.array([t for _, t in LANES], np.int32)

    def sums(up, lw, lat, t):
      U, LU, led = sum_law.sum_law_upper(up, lat, t, N, TAIL, 0.0)
      L, LL = sum_law.sum_law_lower(lw, lat, t, N, TAIL, 0.0)
      return U, LU.step, led, L, LL.step

    one = jax.jit(sums)
    batched = jax.jit(jax.vmap(sums))(*(_stack([st[i] for st in steps]) for i in range(3)), t)
    for j, (st, tj) in enumerate(zip(steps, t)):
      ref = one(*st, tj)
      got = jax.tree.map(lambda a: np.asarray(a)[j], batched)
      U, DU, led, L, DL = (np.asarray(x) if not hasattr(x, "_fields") else x for x in ref)
      assert float(got[1]) == float(DU) and float(got[4]) == float(DL)   # same lattices
      np.testing.assert_allclose(got[2], led, rtol=1e-12)
      a, b = np.asarray(got[0].p), np.asarray(U.p)
      big = b > 1e-300
      np.testing.assert_allclose(a[big], b[big], rtol=1e-12, atol=0)
      np.testing.assert_allclose(a.sum(), b.sum(), rtol=1e-12)
      # the lower: an atom on a cell boundary may land in either neighbour (the
      # cell test s >= x_{k+1} rounded differently); mass and first moment are
      # the invariants of the exact-moment grouping
      x = np.exp(np.arange(L.a.shape[0]) * float(DL))   # knots up to a common factor
      for w in (np.asarray(got[3].a), np.asarray(L.a)):
        assert np.all(w >= 0)
      np.testing.assert_allclose(np.sum(got[3].a), np.sum(L.a), rtol=1e-12)
      np.testing.assert_allclose(np.sum(np.asarray(got[3].g) * x), np.sum(np.asarray(L.g) * x),
                                 rtol=1e-12)
      assert float(np.sum(L.a)) > 0.99 and float(np.sum(U.p)) + float(U.q0) > 0.999
