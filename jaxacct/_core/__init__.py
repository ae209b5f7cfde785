"""Numerical core shared by every jaxacct accountant.

Modules:
  dtype       -- the float64 boundary (``x64_boundary``, ``require_x64``).
  checks      -- eager input validation (``ValueError`` naming the parameter).
  logmath     -- log-space primitives (``log_sub_exp``, ``log1m_exp``, ...).
  orders      -- Renyi order grids.
  conversion  -- RDP -> (epsilon, delta), tight and classical.
  gaussian    -- the exact Gaussian privacy profile.
  solve       -- the one solver module (bracketed roots keeping the feasible side).
  batching    -- ``map_blocks``: ``lax.map`` in whole blocks (one traced lane body).
  results     -- result NamedTuples.

Nothing in this package imports a scheme module.
"""
