"""RDP of one shuffling round composed over rounds and converted to epsilon.

The one place where the RDP front doors of ``jaxacct.shuffle``
(``chen_epsilon``, ``girgis_epsilon``, the check-in epsilons) compose a
per-round curve (Renyi composition: the curve times the number of rounds) and
convert it with ``jaxacct._core.conversion``. It is those doors' float64
boundary: their curves come from kernels that have their own
(``dtype.dispatch``), and nothing else in them computes with ``jnp``.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxacct._core.conversion import rdp_to_epsilon_kernel


def compose_rdp_epsilon(orders, rdp, rounds, delta, conversion: str):
  """``(epsilon, order)`` after ``rounds`` rounds of an RDP curve.

  Args:
    orders: 1-D Renyi orders (concrete). rdp: ``S + (len(orders),)`` per-round
      RDP. rounds: broadcasts against ``S``. delta: target delta.
    conversion: a name from ``jaxacct._core.checks.CONVERSIONS``.

  Returns:
    ``(eps, order)`` float64 arrays of the broadcast shape.

  Bound: as the curve (an upper RDP curve gives an upper epsilon).
  """
  rdp = rdp * jnp.asarray(rounds, jnp.float64)[..., None]
  return rdp_to_epsilon_kernel(jnp.asarray(orders, jnp.float64), rdp,
                               jnp.asarray(delta, jnp.float64), conversion)
