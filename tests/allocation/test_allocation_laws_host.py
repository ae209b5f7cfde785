"""The allocation round laws on the host (issue 28, item 2): ``ns = HOST`` vs jitted kernels.

``sum_law.laws_batch(..., host=True)`` builds the round laws with the jitted
path's own text (``jaxacct.allocation.pld._sum_law`` and ``_regrid`` evaluated with
``ns = HOST``): the same FinalLaws as the jitted builder (``host=False``) for
concrete input, with ZERO compiled XLA programs, each output cell summed in
the jitted loop's order. Source of the tolerances: the two evaluators differ
only in rounding (NumPy's and XLA's exp/log differ by about an ulp, XLA may
fuse a multiply-add), measured on 40 settings at n = 1024 (sigma 0.3..20, t
1..10^4, Gaussian and Laplace, tails 1e-13 and 1e-20): upper law fields <=
5e-13 relative (2.4e-9 on one tiny Laplace mass), single-round upper epsilons
and deltas <= 1.5e-12 relative. The host lower law is bitwise the unbatched
jitted one; the lane-batched jitted builder can group a few atoms into other
cells (both exact-moment groupings), lower queries within 2.2e-4.
"""

import jax
import numpy as np
import pytest

from jaxacct.allocation import sum_law as sl

SETTINGS = [("gaussian", 2.0, 10, 1e-13), ("gaussian", 0.5, 1, 1e-20),
            ("gaussian", 1.0, 234, 1e-12), ("gaussian", 20.0, 1000, 1e-13),
            ("laplace", 1.0, 7, 1e-13), ("laplace", 5.0, 100, 1e-20)]


def _laws(mech, sigma, t, tail, n, host):
  """The round laws of one lane (one-step laws on the host, then the jitted
  or the NumPy round-law builder)."""
  return sl.laws_batch(np.array([sigma]), np.array([t], np.int32), np.array([tail]), n=n,
                       mechanism=mech, host=host)


@pytest.mark.parametrize("mech,sigma,t,tail", SETTINGS)
@pytest.mark.parametrize("n", [256, 1024])
def test_host_laws_match_jitted(x64, mech, sigma, t, tail, n):
  Fj = jax.tree.map(np.asarray, _laws(mech, sigma, t, tail, n, host=False))
  Fh = _laws(mech, sigma, t, tail, n, host=True)
  assert type(Fh) is type(Fj)
  for a, b in zip(Fj, Fh):
    assert type(b) is np.ndarray and a.shape == b.shape and b.dtype == np.float64
  for f in ("up_p", "up_q0", "up_minf_t", "rel", "eta"):
    np.testing.assert_allclose(getattr(Fh, f), getattr(Fj, f), rtol=1e-10, atol=1e-22, err_msg=f)
  assert np.max(np.abs(Fj.up_loss - Fh.up_loss)) <= 1e-13
  assert Fh.lo_q0[0] == Fj.lo_q0[0] and Fh.lo_inf[0] == Fj.lo_inf[0]
  # the lower law: same total mass and first moment (exact-moment groupings)
  mom = lambda F: np.sum(F.lo_a * np.exp(F.lo_loss))
  assert abs(np.sum(Fh.lo_a) - np.sum(Fj.lo_a)) <= 1e-13
  assert abs(mom(Fh) - mom(Fj)) <= 1e-12 * mom(Fj)
  # queries of one round, both sides (remove/add, upper/lower)
  ej, eh = (np.asarray(sl_eps(F, 1e-6)).ravel() for F in (Fj, Fh))
  dj, dh = (np.asarray(sl_delta(F, 0.5)).ravel() for F in (Fj, Fh))
  np.testing.assert_allclose(eh[:2], ej[:2], rtol=1e-11, atol=0)
  np.testing.assert_allclose(dh[:2], dj[:2], rtol=1e-11, atol=1e-300)
  # lower side: the lane-batched jitted builder may group boundary atoms into
  # other cells than the unbatched one, which the host matches (next test);
  # measured up to 2.2e-4 relative (sigma 0.8, t 10^4), 0 to 1e-12 here
  np.testing.assert_allclose(eh[2:], ej[2:], rtol=1e-3, atol=0)
  np.testing.assert_allclose(dh[2:], dj[2:], rtol=1e-3, atol=1e-300)


def sl_eps(F, delta):
  return sl.eps_batch(F, np.array([delta]))   # (rem_up, add_up, rem_lo, add_lo) of one round


def sl_delta(F, eps):
  return sl.delta_batch(F, np.array([eps]))


def test_scalar_laws_on_host_compile_nothing(x64, compile_counter):
  with compile_counter as c:
    F = sl.laws_batch(np.array([2.0]), np.array([10], np.int32), np.array([1e-13]), n=1024,
                      mechanism="gaussian", host=True)
  assert c.count == 0
  assert isinstance(F.up_p, np.ndarray) and F.up_p.shape == (1, 1540)
  assert np.isfinite(F.rel).all() and abs(np.sum(F.up_p) + F.up_q0[0] - 1.0) < 1e-12


def test_invalid_lane_is_nan_marked_like_jitted(x64):
  # valid one-step laws, an invalid lane (t = 0): both builders mark it NaN
  Fj = _laws("gaussian", 1.0, 0, 1e-13, 256, host=False)
  Fh = _laws("gaussian", 1.0, 0, 1e-13, 256, host=True)
  assert np.isnan(Fh.rel[0]) and np.isnan(np.asarray(Fj.rel)[0])


def test_host_sums_are_a_loop_over_the_diagonals_bit_for_bit():
  # The host's accumulation (sheared runs of diagonals whose starts rise by
  # one, one axis-0 reduction each with the output's segment first) against
  # the plain loop of the jitted body: row after row, one slice add each.
  # Starts that rise by 0 or 1 (as d + kappa(d) does), blocks of several
  # widths, two sums, a NaN mass (an invalid lane): the same bits.
  rng = np.random.default_rng(11)
  size = 3 * 200 + 4
  for trial in range(12):
    inits = [(rng.random(size), rng.random(size)) for _ in range(2)]
    blocks, want = [], []
    for re0, im0 in inits:
      out = re0 + 0j
      out.imag = im0
      blks = []
      for _ in range(4):
        rows, L = int(rng.integers(1, 40)), int(rng.integers(0, 200))
        rise = (rng.random(rows - 1) < 0.7).astype(int)
        st = int(rng.integers(0, size - L - rows)) + np.concatenate([[0], np.cumsum(rise)])
        r, i = rng.random((rows, L + 1)), rng.random((rows, L + 1))
        if trial % 4 == 0:
          r[0, 0] = np.nan
        blks.append((lambda d, st=st, r=r, i=i: (st[:, None], r, i),
                     np.arange(rows)[:, None], L))
        for k in range(rows):
          seg = out[st[k]:st[k] + L + 1]
          seg.real += r[k]
          seg.imag += i[k]
      blocks.append(blks)
      want.append(out)
    for got, w in zip(sl.host_sums(inits, blocks), want):
      assert np.array_equal(got.real, w.real, equal_nan=True)
      assert np.array_equal(got.imag, w.imag, equal_nan=True)


_FRESH_HOST_LAWS = r"""
import sys, numpy as np, jax
from jaxacct.allocation import sum_law as sl
out = {}
with jax.enable_x64(True):
  for j, (mech, sigma, t, tail, n) in enumerate(SETTINGS):
    F = sl.laws_batch(np.array([sigma]), np.array([t], np.int32), np.array([tail]), n=n,
                      mechanism=mech, lower=False, host=True)
    out.update({f"{j}/{f}": np.asarray(getattr(F, f)) for f in F._fields})
np.savez(sys.argv[1], **out)
"""


def test_compiled_loops_are_the_host_loops_bit_for_bit(x64, tmp_path):
  # host="loops" runs the upper sums' near-band loops as one small compiled
  # program (every product rounded on its own, as NumPy rounds it: no fused
  # multiply-add); once it exists, host=True laws use it too. Reference: the
  # NumPy laws of a fresh process (no compiled loops there), the same bits
  # in every field; and shared_upper_laws' lanes, the same bits again.
  import subprocess
  import sys
  settings = [(m, s, t, tl, n) for (m, s, t, tl) in SETTINGS for n in (256, 1024)]
  settings += [("gaussian", 1.0, 10_000, 1e-12, 1024), ("gaussian", 3.0, 2, 1e-13, 1024),
               ("gaussian", 0.1, 50, 1e-20, 1024), ("laplace", 0.2, 234, 1e-20, 1024)]
  path = tmp_path / "host.npz"
  code = f"SETTINGS = {settings!r}\n" + _FRESH_HOST_LAWS
  run = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                       timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]
  want = np.load(path)
  for j, (mech, sigma, t, tail, n) in enumerate(settings):
    F = sl.laws_batch(np.array([sigma]), np.array([t], np.int32), np.array([tail]), n=n,
                      mechanism=mech, lower=False, host="loops")
    for f in F._fields:
      assert np.array_equal(np.asarray(getattr(F, f)), want[f"{j}/{f}"], equal_nan=True), \
          (mech, sigma, t, n, f)
  ts = [1, 2, 3, 5, 8, 100, 117, 233, 234]
  S = sl.shared_upper_laws(1.0, ts, 1e-12, n=1024, mechanism="gaussian")
  for i, t in enumerate(ts):
    F = sl.laws_batch(np.array([1.0]), np.array([t], np.int32), np.array([1e-12]), n=1024,
                      mechanism="gaussian", lower=False, host="loops")
    for f in F._fields:
      assert np.array_equal(np.asarray(getattr(S, f))[i], np.asarray(getattr(F, f))[0],
                            equal_nan=True), (t, f)
  for bad in ([], [0, 3], [2.5]):
    with pytest.raises(ValueError, match="ts must be"):
      sl.shared_upper_laws(1.0, bad, 1e-12, n=1024, mechanism="gaussian")
