"""jaxacct: a JAX-accelerated numerical privacy accountant.

Float64 throughout, without touching the user's global JAX config: eager
entry points run under ``jax.enable_x64(True)``; jittable kernels called from
a user's own ``jit`` require x64 and say so (see ``jaxacct._core.dtype``).

Layout (one module per scheme over a small numerical core):

* ``jaxacct.mechanisms`` -- base mechanisms as values (Gaussian, Laplace, randomized
  response, (eps, delta)-DP), their RDP kernels, RDP composition and conversion.
* ``jaxacct.poisson``    -- Poisson-subsampled Gaussian (RDP; PLD via ``pld``).
* ``jaxacct.allocation`` -- random allocation / balls-in-bins (Feldman-Shenfeld).
* ``jaxacct.shuffle``    -- shuffle model (clones, variation ratio, multinomial,
  Girgis et al., shuffled check-in, exact randomized response).
* ``jaxacct.pld``        -- discretised privacy loss distributions, FFT composition.
* ``jaxacct.tracking``   -- optax ``GradientTransformation`` that tracks epsilon.
* ``jaxacct.accounting`` -- dp_accounting-compatible accountant over whole runs.
* ``jaxacct.dpsgd``      -- DP-SGD recipe: (N, B, epochs, sigma, delta, sampling)
  to an event and a certified epsilon, and calibration (``dpsgd.epsilon``,
  ``dpsgd.calibrate_noise_multiplier``).
* ``jaxacct.calibrate``  -- the one calibrator (``jaxacct.calibrator``): the
  parameter of ``make_event(x)`` meeting (epsilon, delta) targets.
* ``jaxacct.risk``       -- membership-inference risk (TPR at FPR, advantage) of a
  DP-SGD run, and calibrating the noise multiplier to it.
* ``jaxacct.plot``       -- epsilon brackets and trade-off curves (matplotlib,
  optional extra ``plot``).
* ``jaxacct.experimental`` -- bounds that are not valid upper bounds in general
  (kept for reproduction, with their counterexamples as tests).
"""

from typing import TYPE_CHECKING

from jaxacct._core.lazy import lazy_exports as _lazy_exports
from jaxacct._core.version import __version__

# Nothing heavy is imported here: ``import jaxacct`` loads neither jax nor a
# scheme. Every public name below is imported on first access (PEP 562), so a
# process pays only for the schemes it uses (tests/project/test_import_cost.py).
_SUBMODULES = ("accounting", "allocation", "dpsgd", "experimental", "mechanisms", "pld",
               "plot", "poisson", "risk", "sampling", "shuffle", "tracking")
_LAZY = {  # public name -> (module, attribute); attribute None: the module
    **{m: (f"jaxacct.{m}", None) for m in _SUBMODULES},
    "calibrate": ("jaxacct.calibrator", "calibrate"),
    **{n: ("jaxacct._core.results", n) for n in ("DeltaResult", "EpsilonResult")},
    "enable_compilation_cache": ("jaxacct._core.cache", "enable_compilation_cache"),
    "set_progress": ("jaxacct._core.progress", "set_progress"),
    "set_layout": ("jaxacct._core.batching", "set_layout"),
    "set_backend": ("jaxacct._core.sharding", "set_backend"),
    "StepsUnitWarning": ("jaxacct._core.units", "StepsUnitWarning"),
}

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
  from jaxacct import (accounting, allocation, dpsgd, experimental, mechanisms, pld, plot,
                       poisson, risk, sampling, shuffle, tracking)
  from jaxacct._core.batching import set_layout
  from jaxacct._core.cache import enable_compilation_cache
  from jaxacct._core.progress import set_progress
  from jaxacct._core.sharding import set_backend
  from jaxacct._core.results import DeltaResult, EpsilonResult
  from jaxacct._core.units import StepsUnitWarning
  from jaxacct.calibrator import calibrate


__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals(), float64=True)


# One name, one place: a function is public in exactly one namespace; the
# top level holds the subpackages, the result types, the calibrator and the
# process-wide switches (CHANGELOG.md says where the former top-level names went).
__all__ = [
    "accounting", "allocation", "dpsgd", "mechanisms", "pld", "plot", "poisson", "risk",
    "shuffle", "tracking",
    "EpsilonResult", "DeltaResult", "calibrate",
    "enable_compilation_cache", "set_backend", "set_layout", "set_progress",
    "StepsUnitWarning",
]
