"""Scalar Poisson questions are answered on the host: ZERO compiled programs.

A scalar question (every argument a Python/NumPy scalar) to the Poisson
doors -- ``poisson.epsilon``/``delta`` with ``method="rdp"`` or ``"pld"``,
``dpsgd.epsilon(sampling="poisson")``
-- runs the same formulas as the jitted kernels in NumPy/SciPy
(``jaxacct._core.namespace``), so even the FIRST call of a fresh process
compiles nothing (``compile_counter``, conftest.py; a persistent-cache load
would count too). On the CPU layout the PLD door answers NumPy arrays on the
host as well, lane by lane (each lane its scalar question's answer); traced
input, and arrays on the accelerator layout, go to the jitted kernels; the
values of both paths are compared here.

Tolerances: RDP epsilon, host vs jitted, 1e-12 relative (measured <= 5e-14
on a 150-setting grid, q in [1e-7, 1], sigma in [0.3, 20], T in [1, 1e9]);
PLD epsilon 1e-8 relative (the tilted FFT's round-off differs between
NumPy's and XLA's FFT and special functions; measured <= 3e-9 relative).
"""

import itertools

import numpy as np
import pytest

import jaxacct
from jaxacct import poisson
from jaxacct._core.gaussian import gaussian_epsilon

SCALAR_QUESTIONS = {
    "poisson_epsilon_rdp": lambda: poisson.epsilon(q=0.01, sigma=1.0, num_steps=1000,
                                                   delta=1e-5).epsilon,
    "poisson_delta_rdp": lambda: poisson.delta(q=0.01, sigma=1.0, num_steps=1000,
                                               epsilon=1.0).delta,
    "poisson_epsilon_rdp_classic": lambda: poisson.epsilon(
        q=0.02, sigma=0.9, num_steps=10, delta=1e-6, conversion="classic").epsilon,
    "poisson_epsilon_pld": lambda: poisson.epsilon(q=0.01, sigma=1.0, num_steps=100,
                                                   delta=1e-5, method="pld").epsilon,
    "poisson_delta_pld": lambda: poisson.delta(q=0.01, sigma=1.0, num_steps=100,
                                               epsilon=1.0, method="pld").delta,
    "poisson_epsilon_pld_q1": lambda: poisson.epsilon(
        q=1.0, sigma=2.0, num_steps=10, delta=1e-5, method="pld").epsilon,
    "poisson_delta_pld_2": lambda: poisson.delta(
        q=0.05, sigma=1.0, num_steps=20, epsilon=0.5, method="pld").delta,
    "dpsgd_epsilon_poisson": lambda: jaxacct.dpsgd.epsilon(
        noise_multiplier=1.0, num_examples=10_000, batch_size=100, num_epochs=1,
        delta=1e-5, sampling="poisson").epsilon,
}


#: programs a scalar question may compile in a fresh process: dpsgd's Poisson run also
#: asks the accountant for its certified lower, whose dominating pairs are merged on the
#: grid by one jitted scan (accounting._pairs._merge_scan), one program for every length
ALLOWED = {"dpsgd_epsilon_poisson": 1}


@pytest.mark.parametrize("name", sorted(SCALAR_QUESTIONS))
def test_scalar_question_compiles_nothing(name, compile_counter):
  import jax
  jax.clear_caches()   # a fresh process's count, whatever earlier tests compiled
  with compile_counter as c:
    v = float(np.asarray(SCALAR_QUESTIONS[name]()))
  assert np.isfinite(v) and v >= 0
  assert c.count <= ALLOWED.get(name, 0), f"{name}: {c.count} programs compiled for a scalar question"


def _rel(a, b):
  return abs(a - b) / abs(b) if a != b else 0.0


def test_rdp_host_matches_jitted_kernel():
  """Host (one question) vs jitted (a 2-lane array) RDP epsilon on 36 settings, incl.
  q = 1, tiny q and huge T: within 1e-12 relative."""
  worst = 0.0
  grid = itertools.product([1e-7, 0.01, 1.0], [0.5, 1.0, 8.0], [1, 10**4], [1e-10, 1e-5])
  n = 0
  for q, s, t, d in grid:
    host = poisson.epsilon(q=q, sigma=s, num_steps=t, delta=d)
    jit = poisson.epsilon(q=np.array([q, q]), sigma=s, num_steps=t, delta=d)
    assert isinstance(host.epsilon, np.float64)
    worst = max(worst, _rel(float(host.epsilon), float(np.asarray(jit.epsilon)[0])))
    assert float(host.order) == float(np.asarray(jit.order)[0])
    n += 1
  assert n >= 30
  assert worst <= 1e-12, worst
  # the README's setting: 6.71251... (dp_accounting's RdpAccountant: 6.71276)
  e = float(poisson.epsilon(q=0.01, sigma=1.0, num_steps=10_000, delta=1e-5).epsilon)
  assert e == pytest.approx(6.712514887963928, rel=1e-12)


@pytest.mark.parametrize("sigma,q,steps,delta", [(1.0, 0.01, 100, 1e-5), (2.0, 0.1, 30, 1e-6)])
def test_pld_host_matches_jitted_kernels(sigma, q, steps, delta, monkeypatch):
  host = float(poisson.epsilon(q=q, sigma=sigma, num_steps=steps, delta=delta,
                               method="pld").epsilon)
  # arrays run the jitted block programs where the accelerator layout is on
  monkeypatch.setenv("JAXACCT_LAYOUT", "accelerator")
  jit = float(poisson.epsilon(q=q, sigma=np.array([sigma, sigma]), num_steps=steps, delta=delta,
                              method="pld").epsilon[0])
  monkeypatch.delenv("JAXACCT_LAYOUT")
  assert host == pytest.approx(jit, rel=1e-8)
  d_host = float(poisson.delta(q=q, sigma=sigma, num_steps=steps, epsilon=host,
                               method="pld").delta)
  assert d_host <= delta * (1 + 1e-9)   # the epsilon found meets delta (upper side)


def test_pld_host_is_above_the_exact_gaussian():
  """q = 1: the composed Gaussian is exact (mu = sqrt(T)/sigma); the host PLD
  (pessimistic) must not be below it (Balle & Wang, arXiv:1805.06530v2, Thm 8)."""
  exact = float(gaussian_epsilon(2.0 / np.sqrt(5.0), 1e-5).epsilon)
  host = float(poisson.epsilon(q=1.0, sigma=2.0, num_steps=5, delta=1e-5,
                               method="pld").epsilon)
  assert exact <= host <= exact * (1 + 1e-3)


def test_pld_arrays_on_the_cpu_layout_are_their_scalar_questions(compile_counter):
  """NumPy arrays (broadcast settings) to the PLD doors: each lane is its scalar
  question's answer, bit for bit, and nothing is compiled (a lane is a loop step
  on either path there; the host's is faster, warm too)."""
  sig, delta = np.array([[0.7, 1.3, 2.9]]), np.array([[1e-5], [1e-7]])
  with compile_counter as c:
    r = poisson.epsilon(q=0.02, sigma=sig, num_steps=300, delta=delta, method="pld")
    d = poisson.delta(q=0.02, sigma=sig[0], num_steps=300, epsilon=1.0, method="pld")
  assert c.count == 0
  assert np.shape(r.epsilon) == (2, 3) and np.shape(d.delta) == (3,)
  for i, j in itertools.product(range(2), range(3)):
    one = poisson.epsilon(q=0.02, sigma=float(sig[0, j]), num_steps=300,
                          delta=float(delta[i, 0]), method="pld")
    assert r.epsilon[i, j] == one.epsilon
    assert r.details["remove"][i, j] == one.details["remove"]
    assert r.details["add"][i, j] == one.details["add"]
  for j in range(3):
    one = poisson.delta(q=0.02, sigma=float(sig[0, j]), num_steps=300, epsilon=1.0,
                        method="pld")
    assert d.delta[j] == one.delta
  assert np.all(np.diff(r.epsilon, axis=1) < 0)   # more noise, less epsilon


def test_pld_arrays_at_the_edges_are_their_scalar_questions():
  """Small and large noise at delta 1e-12, q = 1 and a small q: each lane is its
  scalar question (an upper: the host path's own certification), and the exact
  Gaussian (q = 1: mu = sqrt(T) / sigma, Balle & Wang arXiv:1805.06530v2 Thm 8,
  SciPy's normal cdf) is below each q = 1 lane. (q = 1, sigma 0.3, T = 300 is answered
  inf, a valid upper; not asked here.)"""
  sig, q = np.array([0.6, 5e4]), np.array([[0.02], [1.0]])
  r = poisson.epsilon(q=q, sigma=sig, num_steps=300, delta=1e-12, method="pld")
  for i, j in itertools.product(range(2), range(2)):
    one = poisson.epsilon(q=float(q[i, 0]), sigma=float(sig[j]), num_steps=300, delta=1e-12,
                          method="pld")
    assert r.epsilon[i, j] == one.epsilon
  assert np.all(np.isfinite(r.epsilon)) and np.all(r.epsilon > 0)
  for j in range(2):
    # gaussian_epsilon takes the composed noise multiplier sigma / sqrt(T) = 1 / mu
    exact = float(gaussian_epsilon(sig[j] / np.sqrt(300.0), 1e-12).epsilon)
    assert np.isfinite(exact) and exact <= r.epsilon[1, j] * (1 + 1e-12)


def test_pld_array_with_a_lane_too_long_is_refused_as_its_scalar_question():
  """An array whose lane sigma = 1 needs more than the engine's window at 1e9 steps
  (sigma = 2 fits) is refused before any lane is composed, with the scalar
  question's message naming num_steps."""
  kw = dict(q=0.01, num_steps=10**9, delta=1e-5, method="pld")
  with pytest.raises(ValueError, match="num_steps") as one:
    poisson.epsilon(sigma=1.0, **kw)
  with pytest.raises(ValueError, match="num_steps") as arr:
    poisson.epsilon(sigma=np.array([2.0, 1.0]), **kw)
  assert str(arr.value) == str(one.value)
