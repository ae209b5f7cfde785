r"""One tilted-FFT composition engine: rings, powers, tilts, certified error.

Both composition paths of jaxacct are built from this module:
:mod:`jaxacct.pld._compose` (PLDs on a loss grid, integer counts) and
:mod:`jaxacct.allocation.pld._compose` (allocation laws on a lattice, traced
counts, both directions). The text is written against an array namespace
``ns`` (:mod:`jaxacct._core.namespace`): ``JAX`` inside a jitted kernel,
``HOST`` (NumPy, no compiled program) for a scalar question.

Proofs and sources: docs/bounds/numerics.md ("Bounds and proofs /
Numerics").
"""

from __future__ import annotations

import math

import numpy as np

EPS64 = float(np.finfo(np.float64).eps)
_MGF_BLOCK = 256


def cpow(z, c, xp):
  """``z**c`` (``|z| <= 1``, ``c >= 0`` traced) in polar form; ``z**0 = 1``.

  Relative error ~ ``c * 1e-16`` (as repeated squaring); exact 0 at ``z = 0``.
  """
  mag = xp.abs(z)
  lm = xp.where(mag > 0, c * xp.log(xp.where(mag > 0, mag, 1.0)), -xp.inf)
  ph = c * xp.angle(z)
  r = xp.where(c > 0, xp.exp(lm), 1.0)
  ph = xp.where(c > 0, ph, 0.0)
  return r * xp.cos(ph) + 1j * (r * xp.sin(ph))


def ipow(z, c, ns):
  """``z**c`` for an integer-valued count ``c >= 0`` (traced, float or int) by
  binary powering: ``bit_length(c)`` squarings and at most as many products,
  no transcendental (:func:`cpow` takes six per coefficient: most of the FFT
  composition's cost at 2**12 points). ``z**0 = 1``.

  Error (``|z| <= 1``): a complex product errs by at most ``sqrt(5) u``
  relative (the standard formula), squaring doubles the relative error it is
  given, and a product adds its operands' errors, so ``z**c`` is within
  ``(c - 1) sqrt(5) u`` (first order) relative of the exact power: inside the
  ``(c pi + 2) u`` that :func:`log_fft_bound` charges for the power.
  """
  xp = ns.xp
  if ns.is_host:
    k = int(c)
    bits = k.bit_length()
  else:
    k = xp.asarray(c).astype(xp.int64)
    bits = xp.sum((k >> xp.arange(63, dtype=xp.int64)) > 0)

  def body(i, rb):
    r, b = rb
    r = xp.where((k >> i) & 1 == 1, r * b, r)
    return r, b * b

  one = xp.ones_like(z)
  return ns.fori_loop(0, bits, body, (one, z))[0]


def wrap(x, n_out, xp):
  """Rows of the dense ``x`` (R, n) as rings of ``n_out`` cells (summed mod ``n_out``)."""
  n = x.shape[-1]
  if n <= n_out:
    return xp.pad(x, ((0, 0), (0, n_out - n)))
  reps = -(-n // n_out)
  return xp.pad(x, ((0, 0), (0, reps * n_out - n))).reshape(x.shape[0], reps, n_out).sum(1)


def ring(idx, v, n, ns):
  """Rows of masses ``v`` (R, K) at the integer indices ``idx`` (K,) as rings of ``n`` cells."""
  xp = ns.xp
  r = xp.mod(idx, n)
  return ns.map_rows(lambda vv: ns.add_at(xp.zeros(n), r, vv), v)


def convolve_powers(rings, counts, n, xp, ns=None):
  """Circular convolution of ``rings[k]`` (R, n) raised to ``counts[k]`` (traced
  counts >= 0; count 0 gives the unit), row by row: the composed law mod ``n``.
  ``ns`` (integer-valued counts only): powers by :func:`ipow`; None: :func:`cpow`."""
  spec = None
  for x, c in zip(rings, counts):
    z = xp.fft.rfft(x, axis=-1)
    f = cpow(z, c, xp) if ns is None else ipow(z, c, ns)
    spec = f if spec is None else spec * f
  return xp.fft.irfft(spec, n, axis=-1)


def log_fft_bound(c_tot, n, xp):
  """``log eps_fft``: the per-point FFT error bound of a normalised composition
  of ``c_tot`` inputs on ``n`` cells (docs/bounds/numerics.md; Higham Thm 24.2)."""
  return math.log(32 * EPS64) + xp.log((c_tot + 1.0) * (math.log2(n) + 1.0))


def exp_rounding(c_tot, mu, maxpos, maxlm, log_m, mu_x, xp):
  """Relative rounding ``r`` (T, P) of the tilt/untilt exponentials (docs/bounds/numerics.md).

  ``mu`` (T,) tilts, ``maxpos`` the largest ``|x|`` of an input atom,
  ``maxlm`` the largest ``|log M_k(mu)|``, ``log_m`` (T,) the composed
  ``log M`` of the untilting, ``mu_x`` (T, P) the untilting's position term.
  """
  rr = 4 * EPS64 * (c_tot * (2.0 + xp.abs(mu) * maxpos + maxlm)
                    + xp.abs(xp.where(xp.isfinite(log_m), log_m, 0.0)) + 4.0)
  return rr[:, None] + 4 * EPS64 * xp.abs(mu_x)


def log_fft_estimate(c_tot, xp):
  """``log (c u)``: the typical per-point FFT round-off of a normalised
  composition of ``c_tot`` inputs, an estimate (not a bound) for ranking tilts."""
  return xp.log(2.2e-16 * xp.maximum(c_tot, 1.0))


def pick_least_error(y, log_untilt, log_fft, log_alias, rel, xp, alias=None):
  """Untilts the tilted compositions ``y`` (T, P) and keeps, per point, the tilt
  with the smallest error ``e`` (docs/bounds/numerics.md).

  ``log_untilt`` (T, P): ``log U``; ``log_fft``: :func:`log_fft_bound` (or
  :func:`log_fft_estimate`); ``log_alias`` (T, P): log of the folded tilted
  mass; ``rel`` (T, P): :func:`exp_rounding`, or None for a ranking without
  the rounding term (then compared in log space, and ``e``, ``e_fft`` are None).
  ``alias`` (T, P, with ``rel`` only): the folded tilted mass itself (at most 1)
  in place of ``log_alias``, so that the point-wise bound costs one
  exponential (``U``) instead of five: ``e = U (eps_fft + A) + |v| r`` with
  ``U = exp(min(log U, 700))``; where ``log U > 700`` the value is clipped
  and ``e`` is at least ``e^700`` (such a tilt is never the least error of a
  usable point). Returns ``(value, e, e_fft)`` (P,) each, ``e_fft`` the bound
  without the folded mass.
  """
  if rel is None:
    val = y * xp.exp(xp.minimum(log_untilt, 700.0))
    pick = xp.argmin(log_untilt + xp.logaddexp(log_fft, log_alias), axis=0)
    return xp.take_along_axis(val, pick[None, :], axis=0)[0], None, None
  if alias is None:
    alias = xp.exp(xp.minimum(log_alias, 0.0))
  big = log_untilt > 700.0
  u = xp.exp(xp.minimum(log_untilt, 700.0))
  val = y * u
  e_fft = u * xp.exp(log_fft) + xp.abs(val) * rel
  e_tot = e_fft + u * alias
  e_fft, e_tot = (xp.where(big, xp.maximum(e, 1e304), e) for e in (e_fft, e_tot))
  pick = xp.argmin(e_tot, axis=0)
  take = lambda a: xp.take_along_axis(a, pick[None, :], axis=0)[0]
  return take(val), take(e_tot), take(e_fft)


def log_mgf_lattice(probs, step, lams, ref, ns):
  """log sum_j p_j exp(lam (j - ref) step) for each lam: the log-MGF shifted by ``lam ref step``.

  ``log M(lam) = lam * ref * step + log_mgf_lattice(...)`` exactly (``ref = 0``:
  the plain log-MGF of the relative losses ``j * step``).  Evaluated as
  ``lam (base - ref) step + log S(lam)``, ``base`` the top atom for lam >= 0
  (the bottom atom for lam < 0) and
  ``S(lam) = sum_d p_{base -+ d} e^{-|lam| d step}``: a sum of positive terms
  whose factors are all <= 1 (no overflow; ``S >= p_base > 0``), so it keeps
  relative accuracy at large lam, where ``log M(lam)`` itself is
  ~``lam * ref * step`` (1e9 and more) and its ulp (1e-7) would swamp
  ``log p_ref``.  With ``d = b B + r`` (blocks of ``B = 256``)
  ``e^{-|lam| d h} = e^{-|lam| b B h} e^{-|lam| r h}``, so S for every lam
  is one matrix product plus ``(N/B + B) * len(lams)`` exponentials (not
  ``N * len(lams)``): the cost of a scalar question on the host.
  """
  xp = ns.xp
  n = probs.shape[0]
  idx = xp.arange(n)
  pos = probs > 0
  top = xp.max(xp.where(pos, idx, 0))
  bot = xp.min(xp.where(pos, idx, n - 1))
  nb = -(-n // _MGF_BLOCK)
  d = xp.arange(nb * _MGF_BLOCK)

  def masses(src):  # P-mass at index src (0 outside the grid), as (nb, B) blocks
    ok = (src >= 0) & (src < n)
    return xp.where(ok, probs[xp.clip(src, 0, n - 1)], 0.0).reshape(nb, _MGF_BLOCK)

  a = xp.abs(lams)
  e_r = xp.exp(-(xp.arange(_MGF_BLOCK, dtype=xp.float64) * step)[:, None] * a[None, :])
  e_b = xp.exp(-a[:, None] * (xp.arange(nb, dtype=xp.float64) * (_MGF_BLOCK * step))[None, :])
  # (einsum, not BLAS: NumPy's own loop, no thread start-up for a small product)
  side = lambda src: xp.einsum("lb,bl->l", e_b, xp.einsum("br,rl->bl", masses(src), e_r))
  up = lams >= 0
  if ns.xp is np and (bool(np.all(up)) or not np.any(up)):
    # concrete orders all of one sign: the other side is not read (the same
    # products on the same arrays: the same bits as computing both)
    s = side(top - d) if bool(np.all(up)) else side(bot + d)
    return xp.log(s) + lams * ((xp.where(up, top, bot) - ref).astype(xp.float64) * step)
  s_dn = side(top - d)
  s_up = side(bot + d)
  base = xp.where(up, top, bot)
  s = xp.where(up, s_dn, s_up)
  return xp.log(s) + lams * ((base - ref).astype(xp.float64) * step)


def lines_min(b, mu, x, ns):
  """``min_k (b[:, k] + mu[k] * x)`` for every row of ``b`` (T, K) and point of ``x`` (P,).

  The per-point Chernoff bound ``min_mu (log M(mu) - mu x)`` over a grid of
  orders. ``mu`` strictly increasing. The minimum of lines is their lower
  envelope: line k is the minimum exactly on ``[L_k, U_k]`` with
  ``c_kj = (b_k - b_j) / (mu_j - mu_k)``, ``L_k = max_{j>k} c_kj``,
  ``U_k = min_{j<k} c_kj`` (empty when ``L_k > U_k``), and at ``x`` the
  minimising line is the one with the largest ``L_k <= x``: one sorted search
  per row, O(K^2 + P log K) instead of the O(K P) of taking every line.
  """
  xp = ns.xp
  k = mu.shape[0]
  dm = mu[None, :] - mu[:, None]                       # [k, j] = mu_j - mu_k
  jk = xp.arange(k)
  above = jk[None, :] > jk[:, None]                    # j > k
  below = jk[None, :] < jk[:, None]

  def row(bt):
    c = (bt[:, None] - bt[None, :]) / xp.where(above | below, dm, 1.0)
    lo = xp.max(xp.where(above, c, -xp.inf), axis=1)
    hi = xp.min(xp.where(below, c, xp.inf), axis=1)
    lo = xp.where(lo <= hi, lo, xp.inf)                # lines never the minimum
    order = xp.argsort(lo)
    pick = order[xp.clip(xp.searchsorted(lo[order], x, side="right") - 1, 0, k - 1)]
    return bt[pick] + mu[pick] * x

  return ns.map_rows(row, b)


# ----------------------------------------------------------------------------
# atoms on a lattice (allocation laws): log-MGFs and the certified composition
# ----------------------------------------------------------------------------

_NFOLD = 64                 # coarse positions of the fold (aliasing) bounds


def finite_atoms(logw, pos, xp):
  """On the host, the atoms of positive mass only (the others add exact zeros)."""
  if xp is np and logw.ndim == 1:
    keep = np.isfinite(logw)
    if keep.any():
      return logw[keep], pos[keep]
  return logw, pos


def lmgf(logw, pos, mu, xp):
  """log sum_i exp(logw_i + mu_g pos_i) for every mu_g (-inf if empty)."""
  logw, pos = finite_atoms(logw, pos, xp)
  z = logw[None, :] + mu[:, None] * pos[None, :]
  mx = xp.max(z, axis=1)
  mxs = xp.where(xp.isfinite(mx), mx, 0.0)
  return xp.log(xp.sum(xp.exp(z - mxs[:, None]), axis=1)) + mxs


def moments(logw, pos, mu, xp):
  """log M(mu), tilted mean and variance of the positions, for every mu_g."""
  logw, pos = finite_atoms(logw, pos, xp)
  z = logw[None, :] + mu[:, None] * pos[None, :]
  mx = xp.max(z, axis=1)
  mxs = xp.where(xp.isfinite(mx), mx, 0.0)
  e = xp.exp(z - mxs[:, None])
  tot = xp.sum(e, axis=1)
  p = e / xp.where(tot > 0, tot, 1.0)[:, None]
  mean = xp.sum(p * pos[None, :], axis=1)
  var = xp.sum(p * (pos[None, :] - mean[:, None]) ** 2, axis=1)
  return xp.log(tot) + mxs, mean, var


def cmul(c, v, xp):
  """c * v with 0 * (+-inf) = 0 (a block that is absent)."""
  return xp.where(c > 0, c * xp.where(xp.isfinite(v), v, 0.0) + xp.where(
      xp.isfinite(v), 0.0, v), 0.0)


def compose_atoms(blocks, counts, h, m, N, muk, c_tot, mu, ns, grid_lmgf=None):
  """Composed values and certified error bounds of one lattice law.

  blocks: [(idx, logmass)] per input (atoms at ``idx * h``); counts: matching
  traced counts (integer-valued: the powers are :func:`ipow`'s); the window is ``[m h, (m + N - 1) h]``; muk: tilt exponents
  (mu = 0 is the plain FFT); mu: the Chernoff grid; c_tot: the total count.
  Returns (value, err_total, err_fft) on the window (N,) and K, the composed
  log-MGF on the mu grid. A block with count 0 adds exact zeros (and
  spectrum 1) and no error terms. The folded mass ``A`` is read from Chernoff
  bounds at ``_NFOLD + 1`` coarse positions (the nearest on the safe side).
  ``grid_lmgf``: each block's :func:`lmgf` on ``mu`` if the caller has it (a
  caller that pads blocks with empty atoms computes it on the unpadded ones).
  """
  xp = ns.xp
  pos = [b[0].astype(xp.float64) * h for b in blocks]
  L = ([lmgf(b[1], p, mu, xp) for b, p in zip(blocks, pos)] if grid_lmgf is None
       else list(grid_lmgf))                                           # (G,) each
  K = sum(cmul(c, l, xp) for c, l in zip(counts, L))                 # composed
  Kf = xp.where(xp.isfinite(K), K, xp.inf)
  Lk = [lmgf(b[1], p, muk, xp) for b, p in zip(blocks, pos)]        # (T,) each, exact
  Kk = sum(cmul(c, l, xp) for c, l in zip(counts, Lk))
  maxpos = sum(xp.where(c > 0, xp.max(xp.where(xp.isfinite(b[1]), xp.abs(p), 0.0)), 0.0)
               for b, p, c in zip(blocks, pos, counts))
  maxlm = 0.0
  rings = []
  for (idx, lw), p, l, c in zip(blocks, pos, Lk, counts):
    lk = xp.where(xp.isfinite(l), l, 0.0)
    maxlm = xp.maximum(maxlm, xp.where(c > 0, xp.max(xp.abs(lk)), 0.0))
    v = xp.exp(xp.minimum(lw[None, :] + muk[:, None] * p[None, :] - lk[:, None], 0.0))
    rings.append(ring(idx, v, N, ns))                                # (T+1, N)
  y = convolve_powers(rings, counts, N, xp, ns)   # (T+1, N); counts are integers
  s = m + xp.arange(N, dtype=xp.int64)
  y = y[:, xp.mod(s, N)]
  sh = s.astype(xp.float64) * h
  logf = xp.where(xp.isfinite(Kk), Kk, -xp.inf)[:, None] - muk[:, None] * sh[None, :]
  # Tilted mass folded into point s: from above, P_tilt(L >= (s + N) h); from
  # below, P_tilt(L <= (s - N) h) (all folds j >= 1 included). Chernoff bounds
  # of the tilted law, evaluated on _NFOLD coarse positions and read at the
  # nearest position on the safe side (the tails are monotone).
  span = N * h
  q = xp.arange(_NFOLD + 1, dtype=xp.float64) * (span / _NFOLD)
  y_hi = (m + N).astype(xp.float64) * h + q            # >= top of the window
  y_lo = (m - N).astype(xp.float64) * h + q            # <= (m - 1) h
  dK = Kf[None, :] - Kk[:, None]                        # (T+1, G)
  dmu = mu[None, :] - muk[:, None]
  c_hi = xp.min(xp.where((dmu > 0)[:, :, None], dK[:, :, None] - dmu[:, :, None]
                           * y_hi[None, None, :], xp.inf), axis=1)          # (T+1, Q+1)
  c_lo = xp.min(xp.where((dmu < 0)[:, :, None], dK[:, :, None] - dmu[:, :, None]
                           * y_lo[None, None, :], xp.inf), axis=1)
  jj = xp.arange(N)
  i_hi = xp.clip(xp.floor(jj * (_NFOLD / N)).astype(xp.int32), 0, _NFOLD)      # y_i <= y
  i_lo = xp.clip(xp.ceil(jj * (_NFOLD / N)).astype(xp.int32), 0, _NFOLD)       # y_i >= y
  # the folded mass, exponentiated at the coarse positions (gathers, not exps, per point)
  a_hi, a_lo = (xp.exp(xp.minimum(c, 0.0)) for c in (c_hi, c_lo))
  alias = xp.minimum(a_hi[:, i_hi] + a_lo[:, i_lo], 1.0)                        # (T+1, N)
  rel = exp_rounding(c_tot, muk, maxpos, maxlm, Kk, muk[:, None] * sh[None, :], xp)
  val, e_tot, e_fft = pick_least_error(y, logf, log_fft_bound(c_tot, N, xp), None, rel, xp,
                                       alias=alias)
  return val, e_tot, e_fft, K
