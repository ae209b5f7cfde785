"""jaxacct: a JAX-accelerated numerical privacy accountant.

Float64 throughout, without touching the user's global JAX config: eager
entry points run under ``jax.enable_x64(True)``; jittable kernels called from
a user's own ``jit`` require x64 and say so (see ``jaxacct._core.dtype``).

Layout (one module per scheme over a small numerical core):

* ``jaxacct.mechanisms`` -- RDP of base mechanisms (Gaussian, Laplace, eps0-DP).
* ``jaxacct.poisson``    -- Poisson-subsampled Gaussian (RDP; PLD via ``pld``).
* ``jaxacct.allocation`` -- random allocation / balls-in-bins (Feldman-Shenfeld).
* ``jaxacct.shuffle``    -- shuffle model (clones, variation ratio, multinomial,
  Girgis et al., shuffled check-in, exact randomized response).
* ``jaxacct.pld``        -- discretised privacy loss distributions, FFT composition.
* ``jaxacct.tracking``   -- optax ``GradientTransformation`` that tracks epsilon.
* ``jaxacct.accounting`` -- dp_accounting-compatible accountant over whole runs.
* ``jaxacct.dpsgd``      -- DP-SGD recipe: (N, B, epochs, sigma, delta, sampling)
  to an event and a certified epsilon, and calibration (``dpsgd_epsilon``,
  ``dpsgd_calibrate_noise_multiplier``).
* ``jaxacct.calibrate``  -- the one calibrator (``jaxacct.calibrator``): the
  parameter of ``make_event(x)`` meeting (epsilon, delta) targets.
* ``jaxacct.risk``       -- membership-inference risk (TPR at FPR, advantage) of a
  DP-SGD run, and calibrating the noise multiplier to it.
* ``jaxacct.plot``       -- epsilon brackets and trade-off curves (matplotlib,
  optional extra ``plot``).
* ``jaxacct.experimental`` -- bounds that are not valid upper bounds in general
  (kept for reproduction, with their counterexamples as tests).
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from jaxacct._core.lazy import lazy_exports as _lazy_exports

# Nothing heavy is imported here: ``import jaxacct`` loads neither jax nor a
# scheme. Every public name below is imported on first access (PEP 562), so a
# process pays only for the schemes it uses (tests/test_import_cost.py).
_SUBMODULES = ("accounting", "allocation", "dpsgd", "experimental", "mechanisms", "pld",
               "plot", "poisson", "risk", "sampling", "shuffle", "tracking")
_LAZY = {  # public name -> (module, attribute); attribute None: the module
    **{m: (f"jaxacct.{m}", None) for m in _SUBMODULES},
    "bisect": ("jaxacct._core.solve", "bisect"),
    "calibrate": ("jaxacct.calibrator", "calibrate"),
    "rdp_to_delta": ("jaxacct._core.conversion", "rdp_to_delta"),
    "rdp_to_epsilon": ("jaxacct._core.conversion", "rdp_to_epsilon"),
    "compose_rdp": ("jaxacct._core.conversion", "compose_rdp"),
    "gaussian_delta": ("jaxacct._core.gaussian", "gaussian_delta"),
    "gaussian_epsilon": ("jaxacct._core.gaussian", "gaussian_epsilon"),
    "DEFAULT_INTEGER_ORDERS": ("jaxacct._core.orders", "DEFAULT_INTEGER_ORDERS"),
    "DEFAULT_ORDERS": ("jaxacct._core.orders", "DEFAULT_ORDERS"),
    "integer_orders": ("jaxacct._core.orders", "integer_orders"),
    "BOUNDS": ("jaxacct._core.results", "BOUNDS"),
    "DeltaResult": ("jaxacct._core.results", "DeltaResult"),
    "EpsilonResult": ("jaxacct._core.results", "EpsilonResult"),
    "gaussian_rdp": ("jaxacct.mechanisms", "gaussian_rdp"),
    "laplace_rdp": ("jaxacct.mechanisms", "laplace_rdp"),
    "pure_dp_rdp": ("jaxacct.mechanisms", "pure_dp_rdp"),
    "randomized_response_rdp": ("jaxacct.mechanisms", "randomized_response_rdp"),
    "poisson_gaussian_rdp": ("jaxacct.poisson", "poisson_gaussian_rdp"),
    "dpsgd_calibrate_noise_multiplier": ("jaxacct.dpsgd", "calibrate_noise_multiplier"),
    "dpsgd_epsilon": ("jaxacct.dpsgd", "epsilon"),
    "enable_compilation_cache": ("jaxacct._core.cache", "enable_compilation_cache"),
    "progress_disabled": ("jaxacct._core.progress", "progress_disabled"),
    "set_progress": ("jaxacct._core.progress", "set_progress"),
    "StepsUnitWarning": ("jaxacct._core.units", "StepsUnitWarning"),
}

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
  from jaxacct import (accounting, allocation, dpsgd, experimental, mechanisms, pld, plot,
                       poisson, risk, sampling, shuffle, tracking)
  from jaxacct._core.cache import enable_compilation_cache
  from jaxacct._core.conversion import compose_rdp, rdp_to_delta, rdp_to_epsilon
  from jaxacct._core.gaussian import gaussian_delta, gaussian_epsilon
  from jaxacct._core.orders import DEFAULT_INTEGER_ORDERS, DEFAULT_ORDERS, integer_orders
  from jaxacct._core.progress import progress_disabled, set_progress
  from jaxacct._core.results import BOUNDS, DeltaResult, EpsilonResult
  from jaxacct._core.solve import bisect
  from jaxacct._core.units import StepsUnitWarning
  from jaxacct.calibrator import calibrate
  from jaxacct.dpsgd import calibrate_noise_multiplier as dpsgd_calibrate_noise_multiplier
  from jaxacct.dpsgd import epsilon as dpsgd_epsilon
  from jaxacct.mechanisms import (gaussian_rdp, laplace_rdp, pure_dp_rdp,
                                  randomized_response_rdp)
  from jaxacct.poisson import poisson_gaussian_rdp


__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals())


__all__ = [
    "__version__", "DEFAULT_ORDERS", "DEFAULT_INTEGER_ORDERS", "integer_orders",
    "EpsilonResult", "DeltaResult", "BOUNDS", "bisect", "rdp_to_epsilon", "rdp_to_delta",
    "gaussian_delta", "gaussian_epsilon", "gaussian_rdp", "laplace_rdp",
    "pure_dp_rdp", "randomized_response_rdp", "poisson", "poisson_gaussian_rdp",
    "compose_rdp", "pld", "allocation", "shuffle", "tracking", "accounting",
    "dpsgd", "dpsgd_epsilon", "dpsgd_calibrate_noise_multiplier", "calibrate", "risk",
    "plot",
    "enable_compilation_cache", "set_progress", "progress_disabled", "StepsUnitWarning",
]
