"""Accountants of :mod:`jaxacct.tracking`: float64 epsilon tables, built once on the host.

Each accountant turns a sampling scheme into an epsilon table (``eps[b]``, an
upper bound on epsilon at ``delta`` after ``b`` blocks); :func:`epsilon_table`
expands it to applied updates. Bound: upper.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxacct import accounting, allocation, poisson, shuffle
from jaxacct._core import checks
from jaxacct._core.compiled import jit
from jaxacct._core.conversion import rdp_to_epsilon_kernel
from jaxacct._core.gaussian import gaussian_epsilon_kernel
from jaxacct._core.orders import DEFAULT_ORDERS
from jaxacct.shuffle import clone_rdp, stronger_clone_rdp


# --------------------------------------------------------------------------
# Accountants: float64 epsilon tables, built once on the host.
# --------------------------------------------------------------------------

class _Accountant:
  """Base class. Subclasses define ``block_size`` and ``_block_table``.

  ``neighbouring``: the neighbouring relation the table holds for
  (``"add_remove"``, ``"replace_one"``, ``"replace_special"``), or None where
  the user supplies the curve or table (then it is the supplier's).
  """

  block_size: int = 1
  neighbouring: Optional[str] = None

  def _block_table(self, num_blocks: int, delta: float) -> np.ndarray:
    raise NotImplementedError

  def block_table(self, num_blocks: int, delta: float) -> np.ndarray:
    """float64 array (num_blocks + 1,): eps after b = 0..num_blocks blocks."""
    checks.check_int("num_blocks", num_blocks, min_value=1)
    checks.check_delta(delta)
    # The hook may be built inside a user's jit trace (e.g. a train function
    # that makes its optimizer): there ensure_compile_time_eval keeps the
    # table eager, once, on concrete numbers. Only there: it also evaluates a
    # kernel's constant subexpressions op by op while the kernel is traced,
    # one compiled program each (63 instead of 1 for the Poisson RDP).
    staged = isinstance(jnp.zeros(()), jax.core.Tracer)
    with jax.enable_x64(True), (jax.ensure_compile_time_eval() if staged
                                else contextlib.nullcontext()):
      tab = np.array(self._block_table(int(num_blocks), float(delta)), np.float64)
    tab = np.concatenate([[0.0], tab[1:]])
    if tab.shape != (num_blocks + 1,) or np.any(np.isnan(tab)) or np.any(tab < 0):
      raise ValueError(f"{type(self).__name__} produced an invalid epsilon table "
                       f"(shape {tab.shape}, NaN or negative entries).")
    # Composition never decreases epsilon: a running max keeps the table a
    # valid upper bound and monotone even if a method switches (e.g. RDP
    # order grid effects); it never lowers an entry.
    return np.maximum.accumulate(tab)


_rdp_to_epsilon_jit = jit(rdp_to_epsilon_kernel, static_argnums=3)


def rdp_table(orders, rdp_step, counts, delta, conversion="tight"):
  """eps(counts * rdp_step) at delta, float64 (must run under x64)."""
  orders = jnp.asarray(orders, jnp.float64)
  rdp = jnp.asarray(rdp_step, jnp.float64)
  c = jnp.asarray(counts, jnp.float64)[:, None]
  eps, _ = _rdp_to_epsilon_jit(
      orders, c * rdp[None, :], jnp.asarray(delta, jnp.float64), conversion)
  return np.array(eps)


class PoissonAccountant(_Accountant):
  r"""Poisson subsampling at rate ``q`` with Gaussian noise ``sigma`` per step.

  Upper bound on epsilon at ``delta`` after ``s`` steps, by RDP composition
  (Mironov, Talwar & Zhang, arXiv:1908.10530v1, Sec. 3) and the tight
  conversion (Canonne, Kamath & Steinke, arXiv:2004.00010v5, Prop. 12):
  :math:`\varepsilon(s)=\min_\alpha[sR_\alpha+\log(1-1/\alpha)-(\log\delta+\log\alpha)/(\alpha-1)]`,
  which equals ``jaxacct.poisson.epsilon(q=q, sigma=sigma, num_steps=s, delta=delta)``.

  With ``pld_every=B`` the table also evaluates the tight PLD bound
  (``jaxacct.poisson.epsilon(..., method="pld")``, FFT composition, both
  directions) at s = B, 2B, ... (and at the last step) and uses, for each step
  s, ``min(rdp(s), pld(end of s's block))`` -- both are upper bounds and
  epsilon is non-decreasing in s. One PLD composition per block: seconds each.

  Args:
    q: sampling rate in (0, 1] (q = 0 samples nothing and is refused).
    sigma: noise multiplier > 0 (noise std / clipping norm).
    orders: Renyi orders (default ``DEFAULT_ORDERS``).
    pld_every: None (RDP only) or an int >= 1, e.g. the steps per epoch.

  Neighbouring: add/remove of one example (``neighbouring = "add_remove"``).

  Bound: upper.
  """

  neighbouring = "add_remove"

  def __init__(self, *, q, sigma, orders=None, pld_every: Optional[int] = None):
    checks.check_probability("q", q, open_lo=True)
    checks.check_positive("sigma", sigma)
    if np.ndim(q) or np.ndim(sigma):
      raise ValueError("PoissonAccountant takes scalar q and sigma.")
    if pld_every is not None:
      checks.check_int("pld_every", pld_every, min_value=1)
    self.q, self.sigma = float(q), float(sigma)
    self.pld_every = None if pld_every is None else int(pld_every)
    self.orders = checks.check_orders(DEFAULT_ORDERS if orders is None else orders)

  def rdp_per_step(self):
    return np.asarray(poisson.poisson_gaussian_rdp(self.orders, q=self.q, sigma=self.sigma))

  def _block_table(self, num_blocks, delta):
    tab = rdp_table(self.orders, self.rdp_per_step(), np.arange(num_blocks + 1), delta)
    if self.pld_every is not None:
      b = self.pld_every
      for start in range(0, num_blocks, b):
        end = min(start + b, num_blocks)
        e = float(poisson.epsilon(q=self.q, sigma=self.sigma, num_steps=end,
                                  delta=delta, method="pld").epsilon)
        tab[start + 1:end + 1] = np.minimum(tab[start + 1:end + 1], e)
    return tab


_gaussian_epsilon_jit = jit(gaussian_epsilon_kernel)


class GaussianAccountant(_Accountant):
  r"""Full-batch Gaussian steps (every example in every step), exact.

  ``s`` compositions of the Gaussian mechanism with noise multiplier
  ``sigma`` equal one Gaussian with noise :math:`\sigma/\sqrt{s}`; its exact
  privacy profile (Balle & Wang, "Improving the Gaussian mechanism for
  differential privacy", arXiv:1805.06530v2, Thm 8) gives
  :math:`\varepsilon(s)` = ``jaxacct.mechanisms.Gaussian(sigma/sqrt(s)).epsilon(delta)``.

  Args:
    sigma: noise multiplier > 0.

  Neighbouring: add/remove of one example (``neighbouring = "add_remove"``:
  sensitivity C of a clipped sum; replace-one doubles it, pass sigma / 2).

  Bound: exact (tight).
  """

  neighbouring = "add_remove"

  def __init__(self, *, sigma):
    checks.check_positive("sigma", sigma)
    if np.ndim(sigma):
      raise ValueError("GaussianAccountant takes a scalar sigma.")
    self.sigma = float(sigma)

  def _block_table(self, num_blocks, delta):
    s = np.arange(1, num_blocks + 1, dtype=np.float64)
    eps = _gaussian_epsilon_jit(jnp.asarray(self.sigma / np.sqrt(s)),
                                           jnp.asarray(delta, jnp.float64))
    return np.concatenate([[0.0], np.asarray(eps)])


class RDPAccountant(_Accountant):
  r"""Any mechanism given by its per-step RDP curve, composed additively.

  :math:`\varepsilon(s)` = ``jaxacct.mechanisms.rdp_to_epsilon(orders, s * rdp, delta)``
  (Mironov, arXiv:1702.07476v3, Prop. 1 for composition; tight conversion).

  Args:
    orders: 1-D Renyi orders > 1.
    rdp: per-step RDP, same shape, >= 0 (``inf`` allowed).
    block_size: applied updates per RDP event (e.g. steps per federated
      round); default 1.

  Bound: upper (if ``rdp`` is an upper bound).
  """

  def __init__(self, *, orders, rdp, block_size: int = 1):
    self.orders = checks.check_orders(orders)
    checks.check_not_text("rdp", rdp)
    rdp = np.asarray(rdp, np.float64)
    if rdp.shape != self.orders.shape:
      raise ValueError(f"rdp must have the shape of orders {self.orders.shape}; "
                       f"got {rdp.shape}.")
    checks.check_range("rdp", rdp, 0.0, np.inf, allow_inf=True)
    if np.all(rdp == np.inf):
      raise ValueError("rdp is +inf at every order: the mechanism has no "
                       "RDP guarantee (no noise?).")
    checks.check_int("block_size", block_size, min_value=1)
    self.rdp, self.block_size = rdp, int(block_size)

  def _block_table(self, num_blocks, delta):
    return rdp_table(self.orders, self.rdp, np.arange(num_blocks + 1), delta)


class EpsilonTableAccountant(_Accountant):
  """A user-supplied table: ``epsilons[b]`` = eps at ``delta`` after b blocks.

  Args:
    epsilons: 1-D, ``epsilons[0]`` is the epsilon after 0 blocks (usually 0),
      non-decreasing, >= 0; length >= num_blocks + 1 when used.
    delta: the delta the table holds at (must equal the hook's ``delta``).
    block_size: applied updates per table entry (default 1).

  Bound: whatever the supplied table is (trusted).
  """

  def __init__(self, *, epsilons, delta, block_size: int = 1):
    checks.check_not_text("epsilons", epsilons)
    eps = np.asarray(epsilons, np.float64)
    if eps.ndim != 1 or eps.size < 2:
      raise ValueError(f"epsilons must be 1-D with >= 2 entries; got shape {eps.shape}.")
    checks.check_range("epsilons", eps, 0.0, np.inf, allow_inf=True)
    if np.any(np.diff(eps) < 0):
      raise ValueError("epsilons must be non-decreasing (composition never "
                       "lowers epsilon).")
    checks.check_delta(delta)
    checks.check_int("block_size", block_size, min_value=1)
    self.epsilons, self.delta, self.block_size = eps, float(delta), int(block_size)

  def _block_table(self, num_blocks, delta):
    if delta != self.delta:
      raise ValueError(f"EpsilonTableAccountant holds at delta={self.delta:g}; "
                       f"the hook asked for delta={delta:g}.")
    if self.epsilons.size < num_blocks + 1:
      raise ValueError(f"epsilons has {self.epsilons.size} entries; need "
                       f"num_blocks + 1 = {num_blocks + 1}.")
    return self.epsilons[:num_blocks + 1]


class AllocationAccountant(_Accountant):
  r"""Random allocation (balls-in-bins): each example in ``k`` of ``t`` steps per epoch.

  Feldman & Shenfeld, "Privacy amplification by random allocation",
  arXiv:2502.08202v3, through the front door :func:`jaxacct.allocation.epsilon`
  (per direction the min over ``methods``, then the max over directions):
  ``eps[e]`` = ``allocation.epsilon(sigma=sigma, num_steps=t, num_selected=k,
  num_epochs=e, delta=delta, methods=methods).epsilon``. One block = one
  epoch (``t`` applied updates); a step inside epoch ``e`` is charged the
  whole epoch (its outputs so far are a post-processing of the epoch's).

  Cost: one front-door call per epoch at build time (about a second each on
  a CPU once compiled; the first includes compilation). For many epochs,
  restrict ``methods`` or tabulate a coarser grid yourself and pass it to
  :class:`EpsilonTableAccountant`.

  Args:
    sigma: noise multiplier > 0.
    num_steps: steps per epoch t >= 1 (updates per epoch).
    num_selected: k in [1, t] (steps each example joins per epoch).
    methods: as in :func:`jaxacct.allocation.epsilon` (default: its default).
    max_order: as in :func:`jaxacct.allocation.epsilon` (default: its default).

  Neighbouring: add/remove of one example (``neighbouring = "add_remove"``;
  the others' allocations do not change).

  Bound: upper.
  """

  neighbouring = "add_remove"

  def __init__(self, *, sigma, num_steps, num_selected=1, methods=None,
               max_order: Optional[int] = None):
    allocation.check_scheme(sigma, num_steps, num_selected, 1)
    if np.ndim(sigma):
      raise ValueError("AllocationAccountant takes a scalar sigma.")
    if methods is not None:
      methods = checks.check_choices("methods", methods, allocation.METHODS)
    if max_order is not None:
      checks.check_int("max_order", max_order, min_value=2)
    self.sigma, self.t, self.k = float(sigma), int(num_steps), int(num_selected)
    self.methods, self.max_order = methods, max_order
    self.block_size = self.t

  def epoch_epsilon(self, num_epochs: int, delta: float) -> float:
    """``jaxacct.allocation.epsilon`` for ``num_epochs`` epochs (float)."""
    kw = {} if self.max_order is None else {"max_order": self.max_order}
    return float(allocation.epsilon(
        sigma=self.sigma, num_steps=self.t, delta=delta, num_selected=self.k,
        num_epochs=num_epochs, methods=self.methods, **kw).epsilon)

  def _block_table(self, num_blocks, delta):
    return np.array([0.0] + [self.epoch_epsilon(e, delta)
                             for e in range(1, num_blocks + 1)])


class ShuffleAccountant(_Accountant):
  r"""Shuffling of ``n`` eps0-LDP client reports per federated round.

  Replacement neighbours. Per round, the Renyi curve of the dominating pair
  of :mod:`jaxacct.shuffle`: ``"generic"`` (any eps0-LDP randomizer): the
  clone pair, Feldman, McMillan & Talwar, "Hiding among the clones",
  arXiv:2012.12803, Thm 3.2 + Sec. 6.1 (``shuffle.clone_rdp``);
  ``"blanket"``/``"binary_rr"``/``("k_rr", k)``: the stronger-clone pair
  (Wang et al., arXiv:2304.05007v5; ``shuffle.stronger_clone_rdp``).
  After ``b`` rounds

  .. math:: arepsilon(b)=\minig(\mathrm{conv}_\delta(b\,R),\ b\,arepsilon_0ig)

  (RDP composition + tight conversion; :math:`barepsilon_0` is basic
  composition of the local guarantee) = ``shuffle.epsilon(rounds=b,
  method=<rdp name>)`` for b >= 2; for b = 1 the table also takes the
  single-round front door ``shuffle.epsilon(rounds=1)`` when its bound is
  upper/exact. One block = one round = ``block_size`` applied updates. (The
  front door's PLD route for many rounds is not tabulated: it is one FFT
  composition per round count; pass its values through
  :class:`EpsilonTableAccountant` if needed.)

  Args:
    eps0: local privacy of each report, > 0.
    n: clients shuffled per round, >= 2.
    randomizer: as in :func:`jaxacct.shuffle.epsilon`.
    orders: Renyi orders (default ``DEFAULT_ORDERS``).
    block_size: applied updates per round (default 1).

  Bound: upper.
  """

  neighbouring = "replace_one"

  def __init__(self, *, eps0, n, randomizer="generic", orders=None, block_size: int = 1):
    checks.check_positive("eps0", eps0)
    checks.check_int("n", n, min_value=2)
    checks.check_int("block_size", block_size, min_value=1)
    kind, _ = shuffle.bounds.parse_randomizer(randomizer)
    self.eps0, self.n, self.randomizer = float(eps0), int(n), randomizer
    self.kind, self.block_size = kind, int(block_size)
    self.orders = checks.check_orders(DEFAULT_ORDERS if orders is None else orders)
    self.rdp_method = "clone_rdp" if kind == "generic" else "stronger_clone_rdp"

  def rdp_per_round(self):
    fn = clone_rdp if self.kind == "generic" else stronger_clone_rdp
    return np.asarray(fn(self.orders, n=self.n, eps0=self.eps0), np.float64)

  def _block_table(self, num_blocks, delta):
    b = np.arange(num_blocks + 1)
    tab = np.minimum(rdp_table(self.orders, self.rdp_per_round(), b, delta),
                     b * self.eps0)
    one = shuffle.epsilon(n=self.n, eps0=self.eps0, delta=delta, rounds=1,
                          randomizer=self.randomizer)
    if one.bound in ("upper", "exact"):
      tab[1] = min(tab[1], float(one.epsilon))
    return tab


class EventAccountant(_Accountant):
  r"""Any event per block, accounted by ``jaxacct.accounting.PLDAccountant``.

  The run is described as the same event (a dp_accounting ``DpEvent`` or a
  jaxacct one, :mod:`jaxacct.accounting.events`) repeated once per block:
  per step (``block_size=1``, e.g. ``PoissonSampledDpEvent(q,
  GaussianDpEvent(sigma))``) or per epoch (``block_size`` = steps per epoch,
  e.g. ``RandomAllocationDpEvent(sigma=..., steps_per_epoch=t)``). ``eps[b]`` is
  exactly ``PLDAccountant(...).compose(event, b).get_epsilon(delta)``: the
  tracker reports what the accountant certifies, by construction.

  Cost: one accountant evaluation (one FFT composition; the event's PLDs are
  built once) per evaluated block count. Up to ``max_evaluations`` blocks
  every count is evaluated; beyond, the first ``min(32, max_evaluations //
  2)`` counts and a geometric grid of counts up to the last (always
  included) are, and a block count between
  two evaluated ones is charged the next evaluated one (an upper bound:
  epsilon never decreases with more compositions).

  Args:
    event: the event of one block (must be supported by the accountant).
    block_size: applied updates per event, >= 1.
    accountant: a ``jaxacct.accounting.PLDAccountant`` to compose onto (its
      ledger is kept as a prefix, e.g. events spent before training, and its
      settings are used); default a fresh one with ``neighboring_relation``
      and ``value_discretization_interval``.
    neighboring_relation, value_discretization_interval: for the default
      accountant (dp_accounting's defaults: add/remove, 1e-4).
    max_evaluations: >= 2.

  Bound: upper (the accountant's).
  """

  def __init__(self, event, *, block_size: int = 1, accountant=None,
               neighboring_relation=None, value_discretization_interval: float = 1e-4,
               max_evaluations: int = 256):
    checks.check_int("block_size", block_size, min_value=1)
    checks.check_int("max_evaluations", max_evaluations, min_value=2)
    if accountant is None:
      # accounting.PLDAccountant resolves on first use (PEP 562): dp_accounting,
      # its base class when installed, loads with this accountant only
      accountant = accounting.PLDAccountant(neighboring_relation, value_discretization_interval)
    if not accountant.supports(event):
      raise accounting.UnsupportedEventError(f"the accountant does not support {event}.")
    self.event, self.block_size = event, int(block_size)
    self.accountant, self.max_evaluations = accountant, int(max_evaluations)

  @property
  def neighbouring(self) -> str:
    """The accountant's relation: ``"add_remove"``, ``"replace_one"`` or ``"replace_special"``."""
    name = getattr(self.accountant.neighboring_relation, "name",
                   self.accountant.neighboring_relation)
    return {"ADD_OR_REMOVE_ONE": "add_remove", "REPLACE_ONE": "replace_one",
            "REPLACE_SPECIAL": "replace_special"}[name]

  def evaluated_counts(self, num_blocks: int) -> np.ndarray:
    """The block counts whose epsilon is computed (sorted, ends with num_blocks)."""
    m = self.max_evaluations
    if num_blocks <= m:
      return np.arange(1, num_blocks + 1)
    k = min(32, m // 2)
    head = np.arange(1, k + 1)
    tail = np.unique(np.round(np.geomspace(k + 1, num_blocks, m - k)).astype(int))
    return np.unique(np.concatenate([head, tail, [num_blocks]]))

  def _block_table(self, num_blocks, delta):
    counts = self.evaluated_counts(num_blocks)
    eps = self.accountant.epsilons_for_counts(self.event, counts, delta)
    b = np.arange(1, num_blocks + 1)
    nxt = np.searchsorted(counts, b, side="left")   # first evaluated count >= b
    return np.concatenate([[0.0], eps[nxt]])


_ACCOUNTANTS = (PoissonAccountant, AllocationAccountant, GaussianAccountant,
                ShuffleAccountant, RDPAccountant, EpsilonTableAccountant,
                EventAccountant)


def epsilon_table(accountant, *, num_steps: int, delta: float) -> np.ndarray:
  """float64 epsilons after 0..num_steps applied updates (host side).

  ``table[s]`` is the accountant's bound for the first ``s`` updates
  (charging a partial block as a whole block). This is the table the hook
  looks up; use it for float64 reporting outside ``jit``:
  ``epsilon_table(...)[int(state.count)]``.

  Returns:
    numpy float64 array of shape (num_steps + 1,), non-decreasing.
  """
  if not isinstance(accountant, _Accountant):
    raise ValueError(f"accountant must be one of {[a.__name__ for a in _ACCOUNTANTS]};"
                     f" got {type(accountant).__name__}.")
  checks.check_int("num_steps", num_steps, min_value=1)
  checks.check_delta(delta)
  b = accountant.block_size
  num_blocks = -(-int(num_steps) // b)
  blocks = accountant.block_table(num_blocks, float(delta))
  s = np.arange(int(num_steps) + 1)
  return blocks[-(-s // b)]
