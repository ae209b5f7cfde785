"""Numerical core shared by every jaxacct accountant.

Modules:
  dtype       -- the float64 boundary and the one entry of a kernel (``dispatch``).
  checks      -- eager input validation (``ValueError`` naming the parameter).
  logmath     -- log-space primitives (``log_sub_exp``, ``log1m_exp``, ...).
  orders      -- Renyi order grids.
  conversion  -- RDP -> (epsilon, delta), tight and classical.
  gaussian    -- the exact Gaussian privacy profile.
  solve       -- the one solver module (bracketed roots keeping the feasible side).
  batching    -- ``map_blocks``: ``lax.map`` in whole blocks (one traced lane body).
  mixture     -- binomial mixtures of RDP (Eq. 5 check-in), WBK subsampling, Eq. 8 moments.
  results     -- result NamedTuples.
  lazy        -- lazy re-exports for package ``__init__`` files (PEP 562).

Nothing in this package imports a scheme module.
"""

import importlib as _importlib


def __getattr__(name):
  """``jaxacct._core.<module>`` imports the module on first access (PEP 562)."""
  if not name.startswith("__"):
    try:
      return _importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
      if e.name != f"{__name__}.{name}":
        raise
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
