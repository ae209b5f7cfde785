"""One shuffling question is answered on the host, with the jitted kernel's values.

Issue 28: a scalar ``clone_epsilon`` / ``stronger_clone_epsilon`` /
``rr2_lower_epsilon`` (and the deltas) compiled 1-3 s of XLA per program in a
fresh process. One concrete question now runs the same formulas in NumPy
(``jaxacct.shuffle`` host path: SciPy's ``gammaln`` and ``betainc`` in the
kernels' formulas, Loader's pmf, the same safeguarded Newton / bisection).
On the CPU layout arrays (n <= HOST_MAX_N) are answered on the host too,
lane by lane: a host lane takes as long as a warm jitted one and compiles
nothing. Source of truth here: the jitted kernel itself (a static ``max_n``
sends a call there).

Tolerances (measured over 2 members x n in {1e3, 1e5} x eps0 in {0.5, 1, 4} x
delta in {1e-6, 1e-9}): eps within 2e-11 relative, delta within 1e-8 (jax's
``betainc`` at n ~ 1e5 carries the rounding of XLA's ``lgamma`` in its
log-Beta prefactor, ~1e-10 relative in the binomial tails, amplified in the
cancelling hockey-stick sum of a delta ~3e-7; SciPy's on the host is the
more accurate; measured 7.2e-12 and 4.0e-9), the rr2 values within 1e-13. Compilations are counted: none for one question.
"""


import numpy as np
import pytest

from jaxacct import shuffle

def _pair(fn, x, **kw):
  """(host value of one question, jitted value of the same question: a static
  ``max_n``, here n itself, sends a call to the jitted kernel)."""
  r1 = fn(x, **kw)
  r2 = fn(np.array([x, x]), max_n=kw["n"], **kw)
  v1 = r1.epsilon if fn.__name__.endswith("epsilon") else r1.delta
  v2 = r2.epsilon if fn.__name__.endswith("epsilon") else r2.delta
  return float(np.asarray(v1)), float(np.asarray(v2)[0])


# Each n is its own compiled kernel (a static max_n): two in the default suite,
# the other two behind -m slow.
SETTINGS = [(1000, 0.5, 1e-6), (100_000, 1.0, 1e-6), (100_000, 4.0, 1e-9),
            (20_000, 2.0, 1e-7)]
KERNEL_SETTINGS = [pytest.param(*s, marks=pytest.mark.slow) if s[0] in (1000, 20_000) else s
                   for s in SETTINGS]


@pytest.mark.parametrize("n,eps0,delta", KERNEL_SETTINGS)
@pytest.mark.parametrize("fn,tol", [(shuffle.clone_epsilon, 2e-11),
                                    (shuffle.stronger_clone_epsilon, 2e-11),
                                    (shuffle.rr2_lower_epsilon, 1e-13)])
def test_host_epsilon_matches_jitted(fn, tol, n, eps0, delta):
  host, jitted = _pair(fn, delta, n=n, eps0=eps0)
  assert host == pytest.approx(jitted, rel=tol, abs=0)


@pytest.mark.parametrize("n,eps0,delta", KERNEL_SETTINGS)
@pytest.mark.parametrize("fn,tol", [(shuffle.clone_delta, 1e-8),
                                    (shuffle.stronger_clone_delta, 1e-8),
                                    (shuffle.rr2_lower_delta, 1e-12)])
def test_host_delta_matches_jitted(fn, tol, n, eps0, delta):
  eps = 0.9 * float(np.asarray(shuffle.clone_epsilon(delta, n=n, eps0=eps0).epsilon))
  host, jitted = _pair(fn, eps, n=n, eps0=eps0)
  assert host == pytest.approx(jitted, rel=tol, abs=1e-300)


def test_one_question_compiles_nothing(compile_counter):
  with compile_counter as c:
    r = shuffle.epsilon(n=100_000, eps0=1.0, delta=1e-6)
    d = shuffle.delta(n=100_000, eps0=1.0, epsilon=0.02)
  assert c.count == 0
  # digest anchor (clones.clone_epsilon docstring): (1e5, 4, 1e-6) -> 0.169769747
  assert float(shuffle.clone_epsilon(1e-6, n=100_000, eps0=4.0).epsilon) == pytest.approx(
      0.169769747, abs=1e-9)
  # issue 11 table: rr2 lower (1e5, 1, 1e-6) -> 0.010142
  assert r.details["generic_worst_case_lower"][0] == pytest.approx(0.010142, abs=5e-7)
  assert r.method == "clone" and 0.0 < float(d.delta) < 1e-6 * 1e3


def test_host_epsilon_is_feasible_for_its_delta():
  """The host eps is the feasible end of its bracket: the host delta there is
  at most the target (the certified side; the delta door's window is sized
  without delta, so the two sums differ at rounding level: 1e-9 relative)."""
  for n, eps0, delta in SETTINGS:
    e = float(np.asarray(shuffle.clone_epsilon(delta, n=n, eps0=eps0).epsilon))
    d = float(np.asarray(shuffle.clone_delta(e, n=n, eps0=eps0).delta))
    assert d <= delta * (1 + 1e-9)


@pytest.mark.parametrize("fn", [shuffle.clone_epsilon, shuffle.stronger_clone_epsilon])
def test_host_solve_keeps_block_terms_with_the_kernels_values(fn):
  """Issue 65 item 5: the host solve of one question keeps each block's terms
  between Newton steps until one of the block's thresholds moves (near the root
  none does: ~4 block evaluations instead of ~11 at n = 1e5). Reference: the
  jitted kernel, which evaluates every block at every step, on a grid of n and
  eps0 in one call (``max_n``); 1e-9 relative (the host and kernel special
  functions differ by up to 2e-11, module docstring)."""
  nn, ee = np.meshgrid([10.0, 1000.0, 10_000.0, 100_000.0], [0.1, 1.0, 4.0])
  nn, ee = nn.ravel(), ee.ravel()
  delta = 1e-6
  jitted = np.asarray(fn(np.full(nn.size, delta), n=nn, eps0=ee, max_n=int(nn.max())).epsilon)
  host = np.array([float(np.asarray(fn(delta, n=n, eps0=e).epsilon)) for n, e in zip(nn, ee)])
  assert np.all(host > 0.0)
  np.testing.assert_allclose(host, jitted, rtol=1e-9, atol=0)


def test_arrays_at_the_edges_are_their_scalar_questions():
  """On the CPU layout an array is answered lane by lane: n from 2 to HOST_MAX_N
  (2e5), eps0 from 0.01 to 8, delta 1e-12, each lane equals its scalar question
  (and an upper is at most eps0: the clone bounds never exceed the local one)."""
  n, e0 = np.array([2.0, 200_000.0]), np.array([[0.01], [8.0]])
  for fn in (shuffle.clone_epsilon, shuffle.stronger_clone_epsilon):
    arr = np.asarray(fn(1e-12, n=n, eps0=e0).epsilon)
    one = [[float(np.asarray(fn(1e-12, n=float(m), eps0=float(e)).epsilon)) for m in n]
           for e in e0[:, 0]]
    np.testing.assert_array_equal(arr, one)
    assert np.all((arr > 0) & (arr <= e0))
