r"""RDP of base (non-amplified) mechanisms, as jittable, vmappable kernels.

All functions take ``orders`` (1-D, shape (A,)) and a parameter array of any
shape S and return float64 of shape ``S + (A,)``. Eagerly called with concrete
input they validate it and run in float64 (see :mod:`jaxacct._core.dtype`);
under a user's ``jit`` they need x64 enabled, and invalid lanes give NaN.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxacct._core import checks
from jaxacct._core.dtype import dispatch, require_x64


def laplace_rdp(orders, scale):
  r"""RDP of the Laplace mechanism with sensitivity 1 and scale ``b``.

  Mironov, "Renyi differential privacy", arXiv:1702.07476v3, Prop. 6:

  .. math:: R_\alpha = \frac{1}{\alpha-1}\log\Big(\frac{\alpha}{2\alpha-1}
            e^{(\alpha-1)/b} + \frac{\alpha-1}{2\alpha-1}e^{-\alpha/b}\Big).

  Args:
    orders: Renyi orders > 1, shape (A,).
    scale: Laplace scale b > 0, shape S.

  Returns:
    float64, shape S + (A,).

  Bound: exact. Evaluated with ``logaddexp``; no overflow for b >= 1e-3.
  """
  return dispatch(_laplace_rdp, (orders, scale),
                  lambda: (checks.check_orders(orders), checks.check_positive("scale", scale)))


def _laplace_rdp(orders, scale):
  require_x64("laplace_rdp")
  a = jnp.asarray(orders, jnp.float64)
  b = jnp.asarray(scale, jnp.float64)[..., None]
  t1 = jnp.log(a / (2 * a - 1)) + (a - 1) / b
  t2 = jnp.log((a - 1) / (2 * a - 1)) - a / b
  out = jnp.maximum(jnp.logaddexp(t1, t2) / (a - 1), 0.0)   # >= 0: no rounding below
  return jnp.where((b > 0) & (a > 1), out, jnp.nan)


def pure_dp_rdp(orders, eps0):
  r"""Tight RDP of an ``eps0``-DP mechanism (binary randomized response).

  Every eps0-DP mechanism is dominated by binary randomized response with
  ``p = e^{eps0}/(1+e^{eps0})`` (Kairouz, Oh & Viswanath, arXiv:1311.0776v4,
  Thm 2.4), so its Renyi divergence is an upper bound for all of them, and
  it is attained. With :math:`s = \log(1+e^{\varepsilon_0})`:

  .. math:: R_\alpha = \frac{\log\big(e^{\alpha\varepsilon_0}
            + e^{(1-\alpha)\varepsilon_0}\big) - s}{\alpha-1}

  (Mironov, arXiv:1702.07476v3, Prop. 5 gives the same expression in p).

  Args:
    orders: Renyi orders > 1, shape (A,).
    eps0: local privacy parameter >= 0, shape S.

  Returns:
    float64, shape S + (A,); increases to eps0 as alpha -> inf.

  Bound: exact (tight for the class of eps0-DP mechanisms).
  """
  return dispatch(_pure_dp_rdp, (orders, eps0),
                  lambda: (checks.check_orders(orders), checks.check_range("eps0", eps0, 0.0, jnp.inf)))


def _pure_dp_rdp(orders, eps0):
  require_x64("pure_dp_rdp")
  a = jnp.asarray(orders, jnp.float64)
  e = jnp.asarray(eps0, jnp.float64)[..., None]
  s = jnp.logaddexp(0.0, e)
  out = (jnp.logaddexp(a * e, (1 - a) * e) - s) / (a - 1)
  out = jnp.clip(out, 0.0, e)  # exact value lies in [0, eps0]; removes ulp noise
  return jnp.where((e >= 0) & (a > 1), out, jnp.nan)
