r"""Batch samplers that form batches exactly as jaxacct's accountants assume.

Each sampler yields :class:`Batch` objects: example indices padded to a fixed
length with a 0/1 mask, so that a ``jit``-compiled training step sees one
shape and compiles once. Padded slots hold index 0 (a valid row) and mask 0:
pass the mask to :func:`jaxacct.tracking.dp_aggregate` (or multiply
per-example gradients by it: a clipped zero gradient stays zero), and nothing
outside the batch influences the step. Every registered sampler
(:func:`jaxacct.dpsgd.samplers.names`) has one: :func:`loader`.

Proofs and sources: docs/bounds/dpsgd.md ("Bounds and proofs /
DP-SGD: schedule, samplers, statement, risk").
"""

from jaxacct.sampling._allocation import BallsInBinsSampler
from jaxacct.sampling._batches import NEIGHBOURING, Batch, capacity_for, pad_size_for
from jaxacct.sampling._loaders import (CyclicPoissonSampler, FixedSizeSampler,
                                       FixedSizeWithReplacementSampler, RegistryLoader,
                                       ShuffleSampler, TruncatedPoissonSampler, loader)
from jaxacct.sampling._poisson import PoissonSampler

# ``pad_size_for`` (the legacy capacity from the dataset size n) is internal: it is
# what ``expected_batch_size=None`` does; :func:`capacity_for` is the public rule.
# The training samplers of the other registered samplers (``ShuffleSampler``,
# ``FixedSizeSampler``, ``FixedSizeWithReplacementSampler``,
# ``TruncatedPoissonSampler``, ``CyclicPoissonSampler``) are importable here and
# built by name with :func:`loader`.
__all__ = ["Batch", "BallsInBinsSampler", "PoissonSampler", "capacity_for", "loader"]
