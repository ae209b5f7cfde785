"""What a tracker accounts and what a ``dp_aggregate`` adds, compared.

Each :func:`jaxacct.tracking.track_privacy` records the noise multiplier and
expected batch size its accountant assumes, and each
:func:`jaxacct.tracking.dp_aggregate` what it adds, under the fingerprint
their states carry; :func:`jaxacct.tracking.privacy_spent` compares the two
of one optimizer state and refuses a mismatch.
"""

from __future__ import annotations

import jax
import numpy as np
import optax

# What each hook accounts and what each dp_aggregate adds, by the fingerprint
# their states record (``schedule_id``, ``settings_id``): privacy_spent
# compares the two of one optimizer state.
ACCOUNTED: dict = {}
_AGGREGATED: dict = {}
#: the delta (a Python float) each hook's table holds at, by its fingerprint
DELTAS: dict = {}


def register_aggregate(settings_id: int, noise_multiplier: float,
                       expected_batch_size: float) -> None:
  """Records what a :func:`jaxacct.tracking.dp_aggregate` adds (for :func:`privacy_spent`)."""
  _AGGREGATED[int(settings_id)] = (float(noise_multiplier), float(expected_batch_size))


def accounted(accountant):
  """``(noise_multiplier or None, expected_batch_size or None)`` the accountant assumes."""
  declared = getattr(accountant, "declared", None) or {}
  sigma = declared.get("noise_multiplier")
  if sigma is None and getattr(accountant, "event", None) is not None:
    e = accountant.event
    inner = getattr(e, "event", e)
    sigma = getattr(inner, "noise_multiplier", None)
    if sigma is None and isinstance(getattr(e, "scale", None), (int, float)):
      sigma = e.scale   # (a Laplace allocation's scale)
  return (None if sigma is None else float(sigma), declared.get("expected_batch_size"))


def schedule_of(st) -> int:
  """The schedule fingerprint of a concrete tracker state."""
  return _scalar(st.schedule_id)


def check_settings(st, opt_state):
  """Refuses an optimizer state whose dp_aggregate adds other noise or divides by
  another batch size than its tracker accounts."""
  acc = ACCOUNTED.get(_scalar(st.schedule_id))
  if acc is None:
    return
  for _, sid in optax.tree.get_all_with_path(opt_state, "settings_id"):
    if isinstance(sid, jax.core.Tracer):
      continue
    agg = _AGGREGATED.get(_scalar(sid))
    if agg is None:
      continue
    # the noise to round-off; the divisor (a constant: epsilon does not depend on
    # it) to one example, the batch the accountant's sampling rate was derived from
    bad = [f"{name}: dp_aggregate {a:g}, accountant {b:g}"
           for name, a, b, tol in (("noise_multiplier", agg[0], acc[0], 1e-12),
                                   ("expected_batch_size", agg[1], acc[1], None))
           if b is not None and not (abs(a - b) <= tol * b if tol else abs(a - b) < 1.0)]
    if bad:
      raise ValueError(
          "the optimizer state's dp_aggregate and its track_privacy accountant disagree ("
          + "; ".join(bad) + "): the epsilon reported would not be the run's. Build both "
          "from one set of settings (sampler.dp_transform(...)), or give the accountant the "
          "aggregate's noise_multiplier and batch size.")


def _scalar(x):
  return int(np.asarray(x).reshape(-1)[0])
