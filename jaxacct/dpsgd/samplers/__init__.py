r"""The DP-SGD batch samplers: one record each, registered once (:class:`Sampler`).

Each sampler is one room (a private module here) holding its schedule, the
event of a run, its evaluation, its risk PLDs and its statement text; the
rest of jaxacct (``dpsgd``, ``risk``, ``plot``, the command line) reads the
registry. Docs: docs/how-to/samplers.md.
"""

from jaxacct._core.dtype import public_surface
from jaxacct.dpsgd.samplers._registry import (Request, Sampler, Schedule, gaussian, get,
                                              names, register, unregister)
# each room registers its samplers on import (this order: the registry's)
from jaxacct.dpsgd.samplers import _balls_in_bins, _poisson, _shuffle  # noqa: F401
from jaxacct.dpsgd.samplers import _fixed_size, _truncated_poisson  # noqa: F401
from jaxacct.dpsgd.samplers import _cyclic_poisson  # noqa: F401
from jaxacct.dpsgd.samplers._cyclic_poisson import CyclicPoissonSettings
from jaxacct.dpsgd.samplers._truncated_poisson import TruncatedPoissonSettings

# ``get``, ``Request``, ``Schedule`` (also ``jaxacct.dpsgd.Schedule``) and the settings
# classes (``jaxacct.dpsgd.samplers.get(name).settings``) are importable, not listed
__all__ = ["Sampler", "register", "unregister", "names", "gaussian"]

# every public function is a float64 door, as in every public module
public_surface(globals())
