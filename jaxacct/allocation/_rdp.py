r"""Direct RDP of random allocation (remove direction), by power series.

Feldman & Shenfeld, "Privacy amplification by random allocation",
arXiv:2502.08202v3, Thm 4.8 (general randomizer) and Cor. 4.10 (Gaussian).
Earlier versions of the paper misprint the combinatorial coefficient; the
plots (and this module) use the corrected one, checked here against a
literal partition enumeration and mpmath.

Derivations and sources: docs/bounds/allocation_rdp.md ("Bounds and proofs /
Random allocation: RDP and analytic bounds").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct._core import batching, checks, sharding
from jaxacct._core.batching import block_programs, lanes_for_memory, map_blocks
from jaxacct._core.dtype import dispatch, require_x64
from jaxacct._core.namespace import HOST, JAX, for_inputs
from jaxacct._core.compiled import ACCELERATOR_OPTIONS, jit
from jaxacct._core.units import per_epoch_steps

_NBITS = 31  # t < 2^31


@functools.lru_cache(maxsize=8)
def _product_index(n: int):
  """``(j, below)``: ``j[m, k] = m - k`` clipped to ``[0, n)`` and ``below[m, k] = k > m``
  (the terms a product's degree-m coefficient leaves out)."""
  i = np.arange(n)
  diff = i[:, None] - i[None, :]
  return np.clip(diff, 0, n - 1), diff < 0


def _log_poly_mul(a, b, ns=JAX):
  """Log-coefficients of the product of two power series, truncated."""
  xp = ns.xp
  j, below = _product_index(int(a.shape[-1]))
  terms = a[..., None, :] + b[..., j]                # (.., m, k): a_k b_{m-k}
  return ns.sp.logsumexp(xp.where(below, -xp.inf, terms), axis=-1)


def _log_exp_series(p, n, ns=JAX):
  """Log-coefficients of e^{p x} (p >= 0), degree < n: n log p - log n!."""
  xp = ns.xp
  j = xp.arange(n, dtype=xp.float64)
  p = xp.asarray(p, xp.float64)[..., None]
  safe = xp.where(p > 0, p, 1.0)
  val = xp.where(p > 0, j * xp.log(safe), xp.where(j == 0, 0.0, -xp.inf)) - ns.sp.gammaln(j + 1.0)
  return xp.where(j == 0, 0.0, val)


def _log_power_excess(logh, t, nbits=_NBITS, ns=JAX):
  r"""Log-coefficients of :math:`(e^x + h(x))^t - e^{tx}` (t >= 1, traced ok).

  Binary powering on pairs :math:`(p, G_p)`, :math:`G_p = f^p - e^{px}`,
  :math:`f = e^x + h`: :math:`G_{p+q} = e^{px}G_q + e^{qx}G_p + G_pG_q`, all
  series with non-negative coefficients (``h >= 0``), so every log-sum-exp
  adds positive terms: the excess over the ``L == 1`` case keeps full
  relative accuracy even when the RDP is ~1e-12. ``ns``: ``JAX`` (jittable)
  or ``HOST`` (NumPy, concrete input; :mod:`jaxacct._core.namespace`).
  """
  xp = ns.xp
  n = logh.shape[-1]
  zero = xp.full(logh.shape, -xp.inf)
  t = xp.asarray(t).astype(xp.int64)
  f64 = xp.float64
  mul = lambda a, b: _log_poly_mul(a, b, ns)
  exps = lambda p: _log_exp_series(p, n, ns)

  def combine(p, gp, q, gq):
    return xp.logaddexp(xp.logaddexp(mul(exps(p), gq), mul(exps(q), gp)), mul(gp, gq))

  def body(k, carry):
    r, gr, b, gb = carry
    bit = (t >> k) & 1
    new_gr = combine(r, gr, b, gb)
    gr = xp.where((bit == 1)[..., None], new_gr, gr)
    r = xp.where(bit == 1, r + b, r)
    gb = xp.logaddexp(xp.log(2.0) + mul(exps(b), gb), mul(gb, gb))
    return r, gr, 2.0 * b, gb

  init = (xp.zeros(t.shape, f64), zero, xp.ones(t.shape, f64), logh)
  _, gr, _, _ = ns.fori_loop(0, nbits, body, init)
  return gr


def _rdp_from_log_moments(log_moments, t, nbits=_NBITS, ns=JAX):
  r"""RDP at orders 2..A of 1-of-t allocation given log m_j, j = 0..A.

  :math:`E[S^\alpha] - 1 = \alpha!\,t^{-\alpha}[x^\alpha]((e^x+h)^t - e^{tx})`
  with :math:`h = \sum_{j\ge2}(m_j-1)x^j/j!` (``m_j >= 1`` by Jensen), then
  :math:`R_\alpha = \log1p(E[S^\alpha]-1)/(\alpha-1)`.
  """
  xp = ns.xp
  A = log_moments.shape[-1] - 1
  j = xp.arange(A + 1, dtype=xp.float64)
  lm = xp.maximum(log_moments, 0.0)
  big = lm > 1.0
  log_d = xp.where(big, lm + xp.log1p(-xp.exp(-xp.where(big, lm, 1.0))),
                   xp.log(xp.expm1(xp.where(big, 1.0, lm))))   # log(m_j - 1)
  logh = xp.where(j >= 2, log_d - ns.sp.gammaln(j + 1.0), -xp.inf)
  g = _log_power_excess(logh, t, nbits, ns)
  alpha = j[2:]
  t = xp.asarray(t, xp.float64)[..., None]
  log_am1 = ns.sp.gammaln(alpha + 1.0) + g[..., 2:] - alpha * xp.log(t)
  return xp.logaddexp(0.0, log_am1) / (alpha - 1.0)


def _gaussian_log_moments(sigma, A, xp=jnp):
  j = xp.arange(A + 1, dtype=xp.float64)
  return j * (j - 1.0) / (2.0 * sigma**2)


def _remove_lane(s, tt, max_order, nbits):
  """Orders 2..max_order of one (sigma, t) lane; NaN for an invalid lane."""
  lm = _gaussian_log_moments(jnp.where(s > 0, s, 1.0), max_order)
  out = _rdp_from_log_moments(lm, jnp.maximum(tt, 1), nbits)
  return jnp.where((s > 0) & (tt >= 1), out, jnp.nan)


def allocation_gaussian_rdp_kernel(sigma, t, max_order, nbits=_NBITS):
  """Jittable kernel; ``nbits`` (an int, or a traced int scalar) must satisfy t < 2**nbits."""
  require_x64("allocation_rdp")
  sigma = jnp.asarray(sigma, jnp.float64)
  t = jnp.asarray(t)
  sigma, t = jnp.broadcast_arrays(sigma, t)
  # 64 lanes a vmapped block, fewer where 64 would not fit the device's
  # memory (max_order in the thousands: 1.6 GB a lane at A = 4096)
  out = map_blocks(lambda st: _remove_lane(*st, max_order, nbits),
                   (sigma.reshape(-1), t.reshape(-1)),
                   batch_size=min(64, lanes_for_memory(remove_lane_bytes(max_order), lo=1,
                                                       name="max_order")))
  return out.reshape(sigma.shape + (max_order - 1,))


@functools.partial(jit, static_argnames=("max_order", "nbits"),
                   compiler_options=ACCELERATOR_OPTIONS)
def remove_rdp_block(sigma, t, *, max_order, nbits):
  """The accelerator layout's block program: :func:`_remove_lane` vmapped over
  the lanes of a block (``t`` float64, integer-valued), ``nbits`` powering
  rounds (static: a loop of known trip count)."""
  require_x64("allocation_remove_rdp")
  t = jnp.asarray(t).astype(jnp.int64)
  return jax.vmap(lambda s, tt: _remove_lane(s, tt, max_order, nbits))(sigma, t)


def remove_lane_bytes(max_order: int) -> int:
  """Bytes one lane of :data:`remove_rdp_block` holds at its peak (an estimate):
  twice six (A+1) x (A+1) float64 products (XLA:CPU measured six, 3.2 MB a
  lane at A = 256)."""
  return 2 * 6 * 8 * (int(max_order) + 1) ** 2


def remove_block_lanes(max_order: int) -> int:
  """Lanes of :data:`remove_rdp_block`: ``lanes_for_memory`` of
  :func:`remove_lane_bytes` at 1/64 of the device's memory (8 at A = 256 on
  the CPU's fixed budget, more on an accelerator, as its memory allows)."""
  return lanes_for_memory(remove_lane_bytes(max_order), fraction=1.0 / 64, lo=1,
                          name="max_order")


def _remove_rdp_blocks(sigma, t, *, max_order):
  """Concrete arrays on the accelerator layout: :data:`remove_rdp_block` over
  blocks of :func:`remove_block_lanes` lanes; the powering runs
  ``bit_length(max t)`` rounds (more leave the result unchanged)."""
  nbits = max(int(np.max(np.asarray(t, np.int64), initial=1)).bit_length(), 1)
  program = functools.partial(remove_rdp_block, max_order=int(max_order), nbits=nbits)
  return batching.run_blocks(program, (sigma, t), remove_block_lanes(max_order))


#: Largest max_order answered on the host: its O(A^2 log t) powering is cheaper
#: than compiling the kernel at A = 256 (t = 1e6), but not at A = 1024, where
#: the compiled kernel is cheaper (the one cost cap beside :func:`for_inputs`).
HOST_MAX_ORDER = 256


def _remove_rdp_host(sigma, t, *, max_order):
  """One (sigma, t) question on the host: :func:`allocation_gaussian_rdp_kernel`'s
  formula in NumPy (no compiled program), shape ``broadcast + (A-1,)``."""
  shape = np.broadcast_shapes(np.shape(sigma), np.shape(t))
  t = int(np.ravel(t)[0])
  # above SIGMA_MAX sigma**2 overflows: accounted at it (an upper bound)
  s = min(float(np.ravel(sigma)[0]), checks.SIGMA_MAX)
  lm = _gaussian_log_moments(s, int(max_order), np)
  with np.errstate(all="ignore"):
    out = _rdp_from_log_moments(lm, np.int64(t), max(t.bit_length(), 1), HOST)
  return out.reshape(shape + out.shape[-1:])


@functools.partial(jit, static_argnames=("max_order",))
def _remove_rdp_jit(sigma, t, *, max_order):
  require_x64("allocation_remove_rdp")
  # the powering loop runs bit_length(max t) times (a traced trip count, so a
  # new t compiles nothing); further rounds would leave the result unchanged
  t = jnp.asarray(t).astype(jnp.int64)
  nbits = jnp.max(64 - jax.lax.clz(jnp.maximum(t, 1)))
  return allocation_gaussian_rdp_kernel(sigma, t, max_order, nbits)


@per_epoch_steps
def allocation_remove_rdp(*, sigma, steps_per_epoch, max_order: int = 64, devices=None):
  r"""Remove-direction RDP of 1-out-of-``steps_per_epoch`` allocation, Gaussian.

  Feldman & Shenfeld, arXiv:2502.08202v3, Cor. 4.10 (via Thm 4.8).

  Args:
    sigma: noise multiplier > 0; any shape, broadcast with ``steps_per_epoch``.
    steps_per_epoch: t, integer >= 1 (< 2^31).
    max_order: largest integer order A (static); orders are ``2..A``.
    devices: None (the default device), or jax devices or a
      ``jax.sharding.Mesh``: arrays run in blocks spread over them (values
      bitwise those of one device; :mod:`jaxacct.sweep` across hosts).

  Returns:
    float64 array of shape ``broadcast(sigma, steps_per_epoch).shape + (A-1,)``:
    the RDP at orders ``2, 3, ..., A`` of one round.

  Bound: exact (remove direction). NaN lanes for invalid traced input. The
  host formula accounts a sigma above ``jaxacct._core.checks.SIGMA_MAX`` (1e100)
  at it, where sigma**2 would overflow: an upper bound (more noise is a
  post-processing), below 1e-200 there (the compiled kernel gives 0).

  Example:
    >>> import numpy as np
    >>> from jaxacct import allocation
    >>> r = allocation.allocation_remove_rdp(sigma=1.0, steps_per_epoch=10, max_order=3)
    >>> np.allclose(r[0], np.log1p(np.expm1(1.0) / 10))   # R_2 closed form
    True
  """
  checks.check_int("max_order", max_order, min_value=2, max_value=4096, scalar=True)
  with sharding.use_devices(devices):
    return _remove_rdp(sigma, steps_per_epoch, int(max_order))


def _remove_rdp(sigma, steps_per_epoch, max_order):
  ns = for_inputs(sigma, steps_per_epoch) if max_order <= HOST_MAX_ORDER else JAX
  eager = None
  if ns.is_host:
    eager = functools.partial(_remove_rdp_host, max_order=int(max_order))
  elif block_programs() and (np.ndim(sigma) or np.ndim(steps_per_epoch)):
    eager = functools.partial(_remove_rdp_blocks, max_order=int(max_order))
  return dispatch(functools.partial(_remove_rdp_jit, max_order=int(max_order)),
                  (sigma, steps_per_epoch),
                  lambda: (checks.check_sigma("sigma", sigma),
                           checks.check_int("steps_per_epoch", steps_per_epoch, min_value=1,
                                            max_value=2**31 - 1)),
                  eager=eager)


@jit
def _from_moments_jit(log_moments, steps_per_epoch):
  require_x64("allocation_remove_rdp_from_moments")
  return _rdp_from_log_moments(jnp.asarray(log_moments, jnp.float64),
                               jnp.asarray(steps_per_epoch).astype(jnp.int64))


def _check_log_moments(log_moments, steps_per_epoch):
  # log m_j >= 0 (Jensen); +inf is an (infinite) moment, NaN / booleans / empty are refused
  checks.check_range("log_moments", log_moments, allow_inf=True)
  checks.check_int("steps_per_epoch", steps_per_epoch, min_value=1, max_value=2**31 - 1,
                   scalar=True)
  lm = np.asarray(log_moments, dtype=np.float64)
  if lm.ndim == 0:
    raise ValueError("log_moments must be an array of shape (..., A+1) (log m_j for j = "
                     f"0..A), not a single number; got {log_moments!r}.")
  if lm.shape[-1] < 3:
    raise ValueError(f"log_moments must have length >= 3 (orders 0..A, A >= 2); got {lm.shape[-1]}.")
  if not np.allclose(lm[..., :2], 0.0):
    raise ValueError("log_moments[..., 0] and [..., 1] must be 0 (m_0 = m_1 = 1).")


@per_epoch_steps
def allocation_remove_rdp_from_moments(log_moments, *, steps_per_epoch):
  r"""Remove-direction RDP of 1-of-t allocation for any randomizer.

  Feldman & Shenfeld, arXiv:2502.08202v3, Thm 4.8.

  Args:
    log_moments: ``log m_j = (j-1) R_j(P||Q)`` for ``j = 0..A`` (so entries
      0 and 1 are 0), shape ``(..., A+1)``: the integer-order RDP curve of
      the randomizer in moment form.
    steps_per_epoch: t >= 1.

  Returns:
    RDP at orders ``2..A``, shape ``(..., A-1)``.

  Bound: exact given exact moments (upper bound given upper bounds on them,
  since the coefficients are increasing in every m_j).
  """
  return dispatch(_from_moments_jit, (log_moments, steps_per_epoch),
                  lambda: _check_log_moments(log_moments, steps_per_epoch))

