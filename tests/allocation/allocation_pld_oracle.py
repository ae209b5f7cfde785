"""The eager composition of allocation rounds as PLDs: the oracle the tests
hold ``jaxacct.allocation.pld.allocation_plds`` against (no test in it).

Formerly the production export (``allocation_plds`` up to this change): each
Lemma 3.2 round (Feldman & Shenfeld, arXiv:2502.08202v3: (k - rho) E rounds
of 1-of-floor(t/k), rho E rounds of 1-of-(floor(t/k) + 1)) is converted to
``jaxacct.pld`` PLDs from its own laws (``allocation_plds`` of one round, k =
E = 1: connect-the-dots upper, rounded-down lower) and the rounds are composed
by the FFT engine of ``jaxacct.pld`` (``compose_many``), on the PLDs' grid.
An independent composition path: the production export composes the rounds'
laws on the doors' lattice (``jaxacct.allocation.pld._compose``) and
discretises once.
"""

from jaxacct import pld as jpld
from jaxacct.allocation import pld

DEFAULT_TAIL = 1e-20   # the rounds' law tail of allocation_plds: DEFAULT_TAIL / (k E)


def eager_allocation_plds(*, sigma=None, steps_per_epoch, num_selected=1, num_epochs=1,
                          mechanism="gaussian", composition_step=1e-4, tail=None,
                          grid_size=1024, tail_mass=1e-30):
  """(remove_upper, add_upper, remove_lower, add_lower) of k-of-t allocation
  over E epochs by ``compose_many`` of the rounds' PLDs."""
  t, k, E = int(steps_per_epoch), int(num_selected), int(num_epochs)
  f, rho = divmod(t, k)
  tl = DEFAULT_TAIL / (k * E) if tail is None else float(tail)
  rounds = [(f, (k - rho) * E)] + ([(f + 1, rho * E)] if rho else [])
  per = [(pld.allocation_plds(sigma=sigma, steps_per_epoch=tt, num_epochs=1,
                              mechanism=mechanism, tail=tl, grid_size=grid_size,
                              composition_step=composition_step), c)
         for tt, c in rounds]
  out = []
  for which in range(4):
    plds, counts = [p[which] for p, _ in per], [c for _, c in per]
    if len(plds) == 1 and counts[0] == 1:
      out.append(plds[0])
    else:
      out.append(jpld.compose_many(plds, counts, tail_mass=tail_mass))
  return tuple(out)
