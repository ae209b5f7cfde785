"""The far field of the round laws' pairwise sums (issue 28, item 5).

``jaxacct.allocation.sum_law.conv_upper`` / ``conv_lower`` (``far=True``, the
default) run only the near band of diagonals in their loop; the diagonals with
``kappa(d) = 0`` (every pair lands between its high knot and the next) are
summed by prefix sums and a geometric filter by recursive doubling (upper: the
same mean-preserving splits, re-associated; lower: one exact barycentre per
high cell). ``far=False`` runs every diagonal (the O(n^2) oracle).

Oracles: (1) ``far=False`` for the upper, per knot, to 1e-13 relative (the
float ledger allows ``6 ceil(log2 n) + 8`` ulp for the far masses; measured
<= 5e-15, 2026-11-25); (2) for the lower, the true sum of two atom laws
enumerated pair by pair in NumPy: same mass and first moment (1e-13
relative) and stop-loss transforms ``E(S - K)_+``, ``E(K - S)_+`` no larger
than the truth's at 64 levels K (convex order from below; 1e-12 relative
rounding allowance). Lattice steps D from 0.01 to 1 (near bands from 1 to the
whole window), random positive masses (seeded), symmetric and asymmetric sums.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxacct import mechanisms as M
from jaxacct.allocation import sum_law as sl

pytestmark = pytest.mark.usefixtures("x64")

N = 256
_up = jax.jit(sl.conv_upper, static_argnames=("n", "symmetric", "pieces", "far"))
_lo = jax.jit(sl.conv_lower, static_argnames=("n", "symmetric", "pieces", "coarsen", "far"))
STEPS = [0.01, 0.03, 0.08, 0.2, 0.5, 1.0]


def _laws(D, seed):
  rng = np.random.default_rng(seed)
  # masses over ~30 orders of magnitude (tails), a few exact zeros
  p = np.exp(rng.uniform(-70.0, 0.0, N)) * (rng.uniform(size=N) > 0.05)
  p = p / p.sum()
  f = np.exp(rng.uniform(0.0, D, N))               # atoms inside their cells: f in [1, r)
  up = sl.UpperLaw(jnp.asarray(p), jnp.asarray(1e-3), jnp.asarray(2e-9))
  lw = sl.LowerLaw(jnp.asarray(p), jnp.asarray(p * f), jnp.asarray(0.0))
  return up, lw


def _operands(D, sym, seeds, *, upper):
  """The two summands (upper or lower laws): X + X when ``sym``, else A + B."""
  A, B = (_laws(D, s)[0 if upper else 1] for s in seeds)
  return A, (A if sym else B)


@pytest.mark.parametrize("D", STEPS)
@pytest.mark.parametrize("sym", [True, False])
def test_far_upper_is_the_loop_reassociated(D, sym):
  A, B = _operands(D, sym, (1, 2), upper=True)
  S, o = _up(A, B, D, n=N, symmetric=sym, far=True)
  S0, o0 = _up(A, B, D, n=N, symmetric=sym, far=False)
  assert int(o) == int(o0)
  np.testing.assert_allclose(np.asarray(S.p), np.asarray(S0.p), rtol=1e-13, atol=0.0)
  assert float(S.q0) == float(S0.q0) and float(S.minf) == float(S0.minf)
  # mass and mean of the exact sum (the splits are mean preserving)
  x = np.exp(np.arange(N) * D)
  xs = np.exp((int(o) + np.arange(S.p.shape[0])) * D)
  pa, pb = np.asarray(A.p), np.asarray(B.p)
  np.testing.assert_allclose(np.sum(S.p) + float(S.q0), (pa.sum() + 1e-3) * (pb.sum() + 1e-3),
                             rtol=1e-13)
  mean = pa @ x * (pb.sum() + 1e-3) + pb @ x * (pa.sum() + 1e-3)
  np.testing.assert_allclose(np.sum(np.asarray(S.p) * xs), mean, rtol=1e-12)


def _atoms(law, D, off):
  a, g = np.asarray(law.a), np.asarray(law.g)
  x = np.exp((off + np.arange(a.shape[0])) * D)
  keep = a > 0
  return a[keep], (x * g)[keep] / a[keep]


@pytest.mark.parametrize("D", STEPS)
@pytest.mark.parametrize("sym", [True, False])
def test_far_lower_is_a_lower_law_of_the_true_sum(D, sym):
  A, B = _operands(D, sym, (3, 4), upper=False)
  ma, xa = _atoms(A, D, 0)
  mb, xb = _atoms(B, D, 0)
  mt = (ma[:, None] * mb[None, :]).ravel()
  xt = (xa[:, None] + xb[None, :]).ravel()
  keep = mt > 1e-250
  mt, xt = mt[keep], xt[keep]
  # levels just outside the extreme atoms too (exact zeros of the truth there;
  # positions carry rounding of a few ulp, hence the 1e-3 margin)
  K = np.quantile(xt, np.linspace(0.0, 1.0, 64)) * np.exp(np.linspace(-1e-3, 1e-3, 64))
  up_t = np.sum(mt[:, None] * np.maximum(xt[:, None] - K, 0.0), axis=0)
  dn_t = np.sum(mt[:, None] * np.maximum(K - xt[:, None], 0.0), axis=0)
  for far in (True, False):
    S, o = _lo(A, B, D, n=N, symmetric=sym, coarsen=1, far=far)
    m, x = _atoms(S, D, int(o))
    np.testing.assert_allclose(np.sum(m), np.sum(mt), rtol=1e-13)
    np.testing.assert_allclose(np.sum(m * x), np.sum(mt * xt), rtol=1e-13)
    up = np.sum(m[:, None] * np.maximum(x[:, None] - K, 0.0), axis=0)
    dn = np.sum(m[:, None] * np.maximum(K - x[:, None], 0.0), axis=0)
    assert np.all(up <= up_t * (1 + 1e-12) + 1e-300), np.max(up / up_t)
    assert np.all(dn <= dn_t * (1 + 1e-12) + 1e-300), np.max(dn / dn_t)


def test_new_sigma_or_t_compiles_nothing(compile_counter):
  """The near band is a traced trip count: sigma = 0.4 (far field on most levels)
  and sigma = 3 (none) run the same compiled t-fold sums."""
  n = 256

  @jax.jit
  def sums(up, lw, lat, t):
    U, _, led = sl.sum_law_upper(up, lat, t, n, 1e-15, 0.0)
    L, _ = sl.sum_law_lower(lw, lat, t, n, 1e-15, 0.0)
    return U.p, led, L.a

  def laws(sigma, t):   # one-step laws on the host (NumPy: no program), sums jitted
    st = M.Gaussian(sigma).one_step_law(n, 1e-15)
    return sums(sl.UpperLaw(st.p[0], st.q0[0], st.minf[0]),
                sl.LowerLaw(st.a[0], st.g[0], np.float64(0.0)),
                sl.Lattice(st.lo[0], st.D[0], np.int32(0)), t)

  jax.block_until_ready(laws(0.4, 50))
  with compile_counter as c:
    for s, t in ((3.0, 50), (0.3, 7), (1.0, 1000)):
      out = jax.block_until_ready(laws(s, t))
      assert np.isfinite(np.asarray(out[0])).all() and float(np.sum(out[2])) > 0.9
  assert c.count == 0


def test_host_laws_with_far_field_match_jitted():
  """Small sigma (a far field on every level): the host twin's laws equal the
  jitted ones to rounding (upper fields 1e-10 relative, as in
  tests/allocation/test_allocation_laws_host.py; lower mass and first moment 1e-12)."""
  n, t, tail = 1024, 100, 1e-12
  for s in (0.35, 0.6):
    args = (np.array([s]), np.array([t], np.int32), np.array([tail]))
    Fj = jax.tree.map(np.asarray, sl.laws_batch(*args, n=n, mechanism="gaussian"))
    Fh = sl.laws_batch(*args, n=n, mechanism="gaussian", host=True)
    for f in ("up_p", "up_q0", "up_minf_t", "rel", "eta"):
      np.testing.assert_allclose(getattr(Fh, f), getattr(Fj, f), rtol=1e-10, atol=1e-22,
                                 err_msg=f)
    mom = lambda F: np.sum(F.lo_a * np.exp(F.lo_loss))
    np.testing.assert_allclose(np.sum(Fh.lo_a), np.sum(Fj.lo_a), rtol=1e-12)
    np.testing.assert_allclose(mom(Fh), mom(Fj), rtol=1e-12)
