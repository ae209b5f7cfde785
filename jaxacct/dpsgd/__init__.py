r"""DP-SGD accounting from the quantities ML users know.

Proofs and sources: docs/bounds/dpsgd.md ("Bounds and proofs /
DP-SGD: schedule, samplers, statement, risk").
"""

from jaxacct._core.dtype import public_surface
from jaxacct.dpsgd import samplers
from jaxacct.dpsgd._recipe import calibrate_noise_multiplier, epsilon, event, schedule
from jaxacct.dpsgd._statement import NEIGHBOURINGS, Comparison, PrivacyStatement, statement
from jaxacct.dpsgd.samplers import Schedule

# ``NEIGHBOURINGS`` (the values ``neighbouring=`` accepts) and ``Comparison``
# (the type of two of ``PrivacyStatement``'s fields, read, never built by a
# user) are importable for the command line, not listed. The values
# ``sampling=`` accepts are the registry's (``jaxacct.dpsgd.samplers``).
__all__ = ["Schedule", "schedule", "event", "epsilon",
           "calibrate_noise_multiplier", "statement", "PrivacyStatement"]

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
