r"""Optax hook: track (and enforce) the privacy spent while training.

:func:`track_privacy` returns an :class:`optax.GradientTransformation` that
passes updates through unchanged (as ``optax.snapshot`` does), counts the
*applied* updates and keeps the epsilon spent so far in its state::

    tx = optax.chain(
        optax.contrib.differentially_private_aggregate(
            l2_norm_clip=1.0, noise_multiplier=sigma, key=jax.random.key(0)),
        jaxacct.tracking.track_privacy(
            jaxacct.tracking.PoissonAccountant(q=q, sigma=sigma),
            num_steps=num_steps, delta=1e-5, max_epsilon=8.0),
        optax.sgd(0.1))
    ...
    eps = optax.tree.get(opt_state, "eps")      # inside or outside jit

Design (the accounting is float64 and happens once, when the hook is built):

* An *accountant* (:class:`PoissonAccountant`, :class:`AllocationAccountant`,
  :class:`GaussianAccountant`, :class:`ShuffleAccountant`,
  :class:`RDPAccountant`, :class:`EpsilonTableAccountant`) turns the sampling
  scheme into an epsilon table: ``eps[b]`` is an upper bound on epsilon at
  ``delta`` after ``b`` blocks of ``block_size`` applied updates (block = one
  step for Poisson/full-batch/RDP schemes, one epoch for random allocation,
  one round for shuffling). It is computed under ``jax.enable_x64(True)`` with
  the package's functional API, so the table equals the offline numbers.
* Under ``jit`` the hook only does an integer lookup: ``count -> eps``. No
  float64 is needed in the user's program.
* A step inside a block is charged the whole block (the outputs so far are a
  post-processing of the whole block's output), so the reported epsilon is an
  upper bound at every step, exact at block ends.
* Past the table (``count > num_steps``) epsilon is ``+inf`` (no guarantee).

Float64 policy: with x64 enabled the state's ``eps`` is float64 and equals the
functional API. In a float32 program it is float32, rounded *up* (never below
the float64 value; relative excess < 1.2e-7). :func:`epsilon_table` gives the
float64 table for host-side reporting.

Gradient accumulation (``optax.MultiSteps``): put the hook *inside* the
wrapped optimizer. ``MultiSteps`` calls the inner update at every micro-step
but keeps the inner state only when it emits, so ``count`` counts applied
(logical-batch) updates, never micro-batches. (Note that
``differentially_private_aggregate`` itself must see whole per-example
gradients; optax warns it does not combine with ``MultiSteps``: use
:func:`clip_and_sum` per micro-batch *outside* ``MultiSteps`` and
:func:`gaussian_noise` inside it, see its docstring.)

Budget (``max_epsilon``): before applying the update that moves ``count`` to
``c + 1`` the hook checks, on the precomputed table, that
``eps[c + 1] <= max_epsilon``. If not, the update is replaced by zeros (as
``optax.transforms.conditionally_mask`` does), ``count`` stays, and the flag
``budget_exhausted`` is set: the spent epsilon never exceeds ``max_epsilon``.
Place the hook right after the noise, so that nothing downstream (momentum,
Adam moments) sees new data once the budget is spent. With
``on_budget="raise"`` the update is masked as well and, in addition, an error
is raised: directly (:class:`PrivacyBudgetExceeded`) when ``update`` runs
eagerly, and through ``jax.debug.callback`` under ``jit``/``vmap`` (JAX then
reports it as a runtime error whose message contains
``PrivacyBudgetExceeded``, when the step's result is materialised). Users who
prefer functional errors can instead wrap their step in
``jax.experimental.checkify.checkify`` and ``checkify.check`` on
``budget_exhausted`` themselves (the kernels stay free of ``checkify.check``,
which raises when staged without ``checkify``).

Bound: upper (each table entry is an upper bound of its accountant).
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxacct._core import checks
from jaxacct._core.conversion import _rdp_to_epsilon
from jaxacct._core.dtype import x64_boundary, x64_enabled
from jaxacct._core.orders import DEFAULT_ORDERS

__all__ = [
    "PrivacyTrackerState", "PrivacyBudgetExceeded", "track_privacy",
    "PoissonAccountant", "AllocationAccountant", "GaussianAccountant",
    "ShuffleAccountant", "RDPAccountant", "EpsilonTableAccountant",
    "epsilon_table", "privacy_spent", "calibrate_noise", "Calibration",
    "clip_and_sum", "gaussian_noise",
]


class PrivacyBudgetExceeded(RuntimeError):
  """Raised when an update would spend more than ``max_epsilon``."""


class PrivacyTrackerState(NamedTuple):
  """State of :func:`track_privacy`.

  Attributes:
    count: int32 scalar, number of applied (not masked) updates.
    eps: float scalar, epsilon at ``delta`` spent after ``count`` updates
      (float64 under x64, else float32 rounded up).
    delta: float scalar, the delta at which ``eps`` holds.
    budget_exhausted: bool scalar, True once an update was masked because it
      would have exceeded ``max_epsilon``.
  """
  count: jax.Array
  eps: jax.Array
  delta: jax.Array
  budget_exhausted: jax.Array


# --------------------------------------------------------------------------
# Accountants: float64 epsilon tables, built once on the host.
# --------------------------------------------------------------------------

class _Accountant:
  """Base class. Subclasses define ``block_size`` and ``_block_table``."""

  block_size: int = 1

  def _block_table(self, num_blocks: int, delta: float) -> np.ndarray:
    raise NotImplementedError

  def block_table(self, num_blocks: int, delta: float) -> np.ndarray:
    """float64 array (num_blocks + 1,): eps after b = 0..num_blocks blocks."""
    checks.check_int("num_blocks", num_blocks, min_value=1)
    checks.check_delta(delta)
    # ensure_compile_time_eval: the hook may be built inside a user's jit/vmap
    # trace (e.g. a train function that makes its optimizer); the table is
    # still computed eagerly, once, on concrete numbers.
    with jax.enable_x64(True), jax.ensure_compile_time_eval():
      tab = np.array(self._block_table(int(num_blocks), float(delta)), np.float64)
    tab = np.concatenate([[0.0], tab[1:]])
    if tab.shape != (num_blocks + 1,) or np.any(np.isnan(tab)) or np.any(tab < 0):
      raise ValueError(f"{type(self).__name__} produced an invalid epsilon table "
                       f"(shape {tab.shape}, NaN or negative entries).")
    # Composition never decreases epsilon: a running max keeps the table a
    # valid upper bound and monotone even if a method switches (e.g. RDP
    # order grid effects); it never lowers an entry.
    return np.maximum.accumulate(tab)


_rdp_to_epsilon_jit = jax.jit(_rdp_to_epsilon, static_argnums=3)


def _rdp_table(orders, rdp_step, counts, delta, conversion="tight"):
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

  Bound: upper.
  """

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
    from jaxacct.poisson import poisson_gaussian_rdp
    return np.asarray(poisson_gaussian_rdp(self.orders, q=self.q, sigma=self.sigma))

  def _block_table(self, num_blocks, delta):
    tab = _rdp_table(self.orders, self.rdp_per_step(), np.arange(num_blocks + 1), delta)
    if self.pld_every is not None:
      from jaxacct import poisson
      b = self.pld_every
      for start in range(0, num_blocks, b):
        end = min(start + b, num_blocks)
        e = float(poisson.epsilon(q=self.q, sigma=self.sigma, num_steps=end,
                                  delta=delta, method="pld").epsilon)
        tab[start + 1:end + 1] = np.minimum(tab[start + 1:end + 1], e)
    return tab


def _gaussian_epsilon_jit(sigma, delta):
  from jaxacct._core.gaussian import gaussian_epsilon_kernel
  return jax.jit(gaussian_epsilon_kernel)(sigma, delta)


class GaussianAccountant(_Accountant):
  r"""Full-batch Gaussian steps (every example in every step), exact.

  ``s`` compositions of the Gaussian mechanism with noise multiplier
  ``sigma`` equal one Gaussian with noise :math:`\sigma/\sqrt{s}`; its exact
  privacy profile (Balle & Wang, "Improving the Gaussian mechanism for
  differential privacy", arXiv:1805.06530v2, Thm 8) gives
  :math:`\varepsilon(s)` = ``jaxacct.gaussian_epsilon(sigma/sqrt(s), delta)``.

  Args:
    sigma: noise multiplier > 0.

  Bound: exact (tight).
  """

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

  :math:`\varepsilon(s)` = ``jaxacct.rdp_to_epsilon(orders, s * rdp, delta)``
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
    return _rdp_table(self.orders, self.rdp, np.arange(num_blocks + 1), delta)


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

  Bound: upper.
  """

  def __init__(self, *, sigma, num_steps, num_selected=1, methods=None,
               max_order: Optional[int] = None):
    from jaxacct import allocation
    allocation.bounds.check_scheme(sigma, num_steps, num_selected, 1)
    if np.ndim(sigma):
      raise ValueError("AllocationAccountant takes a scalar sigma.")
    if methods is not None:
      methods = tuple(methods)
      if not methods or not all(isinstance(m, str) for m in methods):
        raise ValueError(f"methods must be a non-empty sequence of names; got {methods!r}.")
    if max_order is not None:
      checks.check_int("max_order", max_order, min_value=2)
    self.sigma, self.t, self.k = float(sigma), int(num_steps), int(num_selected)
    self.methods, self.max_order = methods, max_order
    self.block_size = self.t

  def epoch_epsilon(self, num_epochs: int, delta: float) -> float:
    """``jaxacct.allocation.epsilon`` for ``num_epochs`` epochs (float)."""
    from jaxacct import allocation
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
  arXiv:2012.12803, Thm 3.2 + Sec. 6.1 (``shuffle.clones.clone_rdp``);
  ``"blanket"``/``"binary_rr"``/``("k_rr", k)``: the stronger-clone pair
  (Wang et al., arXiv:2304.05007v5; ``shuffle.variation_ratio.stronger_clone_rdp``).
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
    orders: Renyi orders (default: the shuffle module's grid).
    block_size: applied updates per round (default 1).

  Bound: upper.
  """

  def __init__(self, *, eps0, n, randomizer="generic", orders=None, block_size: int = 1):
    checks.check_positive("eps0", eps0)
    checks.check_int("n", n, min_value=2)
    checks.check_int("block_size", block_size, min_value=1)
    try:
      from jaxacct import shuffle
      kind, _ = shuffle._parse_randomizer(randomizer)
    except ImportError as e:  # pragma: no cover - depends on the package state
      raise ValueError("jaxacct.shuffle is not available; pass the per-round RDP "
                       "curve to RDPAccountant instead.") from e
    self.eps0, self.n, self.randomizer = float(eps0), int(n), randomizer
    self.kind, self.block_size = kind, int(block_size)
    self.orders = checks.check_orders(
        getattr(shuffle, "_RDP_ORDERS", DEFAULT_ORDERS) if orders is None else orders)
    self.rdp_method = "clone_rdp" if kind == "generic" else "stronger_clone_rdp"

  def rdp_per_round(self):
    if self.kind == "generic":
      from jaxacct.shuffle.clones import clone_rdp as fn
    else:
      from jaxacct.shuffle.variation_ratio import stronger_clone_rdp as fn
    return np.asarray(fn(self.orders, n=self.n, eps0=self.eps0), np.float64)

  def _block_table(self, num_blocks, delta):
    from jaxacct import shuffle
    b = np.arange(num_blocks + 1)
    tab = np.minimum(_rdp_table(self.orders, self.rdp_per_round(), b, delta),
                     b * self.eps0)
    one = shuffle.epsilon(n=self.n, eps0=self.eps0, delta=delta, rounds=1,
                          randomizer=self.randomizer)
    if one.bound in ("upper", "exact"):
      tab[1] = min(tab[1], float(one.epsilon))
    return tab


_ACCOUNTANTS = (PoissonAccountant, AllocationAccountant, GaussianAccountant,
                ShuffleAccountant, RDPAccountant, EpsilonTableAccountant)


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


def _round_up_f32(x: np.ndarray) -> np.ndarray:
  y = x.astype(np.float32)
  return np.where(y.astype(np.float64) < x, np.nextafter(y, np.float32(np.inf)), y)


# --------------------------------------------------------------------------
# The transformation.
# --------------------------------------------------------------------------

def track_privacy(accountant, *, num_steps: int, delta: float,
                  max_epsilon: Optional[float] = None,
                  on_budget: str = "stop") -> optax.GradientTransformation:
  r"""Optax transform that counts applied updates and tracks epsilon (upper bound).

  Passes ``updates`` through (or zeros them once the budget is spent) and keeps
  a :class:`PrivacyTrackerState`; ``optax.tree.get(opt_state, "eps")`` reads
  the epsilon spent so far inside or outside ``jit``.

  The float64 epsilon table of ``accountant`` for 0..``num_steps`` updates is
  computed here, once (see :func:`epsilon_table`); ``update`` only looks it
  up, so it adds an integer increment and a gather per step.

  Args:
    accountant: a ``*Accountant`` of this module (the sampling scheme).
    num_steps: planned number of applied updates (>= 1); later updates
      report ``eps = +inf`` (no guarantee) and are masked if a budget is set.
    delta: in (0, 1).
    max_epsilon: budget (> 0) or None (track only).
    on_budget: ``"stop"`` (mask further updates, set ``budget_exhausted``)
      or ``"raise"`` (mask, and raise :class:`PrivacyBudgetExceeded`; under
      ``jit`` through ``jax.debug.callback``).

  Returns:
    ``optax.GradientTransformation``; state ``PrivacyTrackerState`` (count
    int32, eps float64 under x64 else float32 rounded up, delta, bool flag).

  Bound: upper (the accountant's).

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from jaxacct import tracking
    >>> tx = tracking.track_privacy(tracking.GaussianAccountant(sigma=4.0),
    ...                             num_steps=10, delta=1e-5)
    >>> st = tx.init(jnp.zeros(3))
    >>> _, st = tx.update(jnp.ones(3), st)
    >>> round(float(optax.tree.get(st, "eps")), 4)
    0.9263
  """
  checks.check_int("num_steps", num_steps, min_value=1)
  checks.check_delta(delta)
  checks.check_choice("on_budget", on_budget, ("stop", "raise"))
  if max_epsilon is not None:
    checks.check_positive("max_epsilon", max_epsilon, allow_inf=True)
  n = int(num_steps)
  table64 = np.concatenate([epsilon_table(accountant, num_steps=n, delta=delta), [np.inf]])
  # allowed[c]: may the update that moves count c -> c + 1 be applied?
  if max_epsilon is None:
    allowed = np.ones(n + 2, bool)
  else:
    allowed = np.concatenate([table64[1:] <= float(max_epsilon), [False]])
  table32 = _round_up_f32(table64)
  delta = float(delta)

  def _tables():
    if x64_enabled():
      return jnp.asarray(table64, jnp.float64), jnp.float64
    return jnp.asarray(table32, jnp.float32), jnp.float32

  def init_fn(params):
    del params
    tab, dt = _tables()
    return PrivacyTrackerState(count=jnp.zeros([], jnp.int32), eps=tab[0],
                               delta=jnp.asarray(delta, dt),
                               budget_exhausted=jnp.zeros([], bool))

  def update_fn(updates, state, params=None):
    del params
    tab, _ = _tables()
    c = jnp.minimum(state.count, n + 1)
    ok = jnp.asarray(allowed)[c]
    if on_budget == "raise":
      if checks.is_concrete(ok):
        if not bool(ok):
          raise PrivacyBudgetExceeded(_budget_msg(int(state.count), table64, max_epsilon, delta))
      else:
        jax.debug.callback(functools.partial(
            _raise_if_exceeded, table64=table64, max_epsilon=max_epsilon,
            delta=delta), ok, state.count)
    new_count = jnp.where(ok, optax.safe_increment(state.count), state.count)
    if max_epsilon is None:   # track only: ok is always True, pass through
      new_updates = updates
    else:
      new_updates = jax.tree.map(lambda u: jnp.where(ok, u, jnp.zeros_like(u)), updates)
    new_state = PrivacyTrackerState(
        count=new_count, eps=tab[jnp.minimum(new_count, n + 1)],
        delta=state.delta, budget_exhausted=state.budget_exhausted | ~ok)
    return new_updates, new_state

  return optax.GradientTransformation(init_fn, update_fn)


def _budget_msg(count, table64, max_epsilon, delta):
  nxt = table64[min(count + 1, len(table64) - 1)]
  return (f"PrivacyBudgetExceeded: update {count + 1} would spend epsilon={nxt:.6g} "
          f"> max_epsilon={max_epsilon:g} at delta={delta:g} (spent so far: "
          f"{table64[min(count, len(table64) - 1)]:.6g}); the update was masked.")


def _raise_if_exceeded(ok, count, table64, max_epsilon, delta):
  ok = np.asarray(ok)
  if not np.all(ok):
    c = int(np.asarray(count).reshape(-1)[np.argmin(ok.reshape(-1))])
    raise PrivacyBudgetExceeded(_budget_msg(c, table64, max_epsilon, delta))


def privacy_spent(opt_state: Any):
  """``(eps, delta)`` from an optimizer state holding one tracker (jit-safe).

  Works on any state pytree (``optax.chain``, ``MultiSteps``, flax
  ``TrainState.opt_state``) through ``optax.tree.get``.

  Returns:
    ``(eps, delta)`` scalar arrays (batched under vmap).

  Raises:
    KeyError: if the state holds more than one tracker; ValueError if none.
  """
  st = optax.tree.get(opt_state, "PrivacyTrackerState")
  if st is None:
    raise ValueError("no PrivacyTrackerState in this optimizer state; add "
                     "jaxacct.tracking.track_privacy(...) to the chain.")
  return st.eps, st.delta


# --------------------------------------------------------------------------
# Calibration for training.
# --------------------------------------------------------------------------

class Calibration(NamedTuple):
  """Result of :func:`calibrate_noise`.

  Attributes:
    noise_multiplier: sigma (float) meeting the target; conservative.
    accountant: the accountant to pass to :func:`track_privacy`.
    num_steps: the number of updates the target was met for.
    epsilon: the accountant's epsilon after ``num_steps`` (<= target).
  """
  noise_multiplier: float
  accountant: Any
  num_steps: int
  epsilon: float


def calibrate_noise(scheme: str, *, dataset_size: int, num_epochs: int,
                    epsilon: float, delta: float, batch_size: Optional[int] = None,
                    num_selected: int = 1) -> Calibration:
  """Smallest noise multiplier for a training run to meet (epsilon, delta).

  Schemes:

  * ``"poisson"``: rate q = batch_size / dataset_size (expected batch size),
    ``num_steps = ceil(num_epochs / q)``; via
    ``jaxacct.poisson.calibrate_sigma`` (RDP, tight conversion).
  * ``"allocation"``: ``t = dataset_size // batch_size`` steps per epoch
    (each example in ``num_selected`` of them), ``num_steps = t * num_epochs``;
    via ``jaxacct.allocation.calibrate_sigma``.
  * ``"gaussian"``: full batch, one step per epoch; exact Gaussian profile
    (sigma = sqrt(num_epochs) * sigma_1, sigma_1 from the single-step
    calibration by bisection).

  Args:
    scheme: ``"poisson"``, ``"allocation"`` or ``"gaussian"``.
    dataset_size: n >= 1. num_epochs: >= 1.
    epsilon: target > 0. delta: in (0, 1).
    batch_size: (expected) batch size in [1, n]; unused for ``"gaussian"``.
    num_selected: k for ``"allocation"``.

  Returns:
    :class:`Calibration`; its ``epsilon`` is the accountant's table value at
    ``num_steps`` (checked <= target).

  Bound: conservative (the returned sigma meets the target).
  """
  checks.check_choice("scheme", scheme, ("poisson", "allocation", "gaussian"))
  checks.check_int("dataset_size", dataset_size, min_value=1)
  checks.check_int("num_epochs", num_epochs, min_value=1)
  checks.check_positive("epsilon", epsilon)
  checks.check_delta(delta)
  n, E = int(dataset_size), int(num_epochs)
  if scheme != "gaussian":
    if batch_size is None:
      raise ValueError(f"batch_size is required for scheme={scheme!r}.")
    checks.check_int("batch_size", batch_size, min_value=1, max_value=n)
  if scheme == "poisson":
    from jaxacct import poisson
    q = batch_size / n
    steps = int(math.ceil(E / q - 1e-9))
    sigma = float(poisson.calibrate_sigma(q=q, num_steps=steps, epsilon=epsilon,
                                          delta=delta))
    acc = PoissonAccountant(q=q, sigma=sigma)
  elif scheme == "allocation":
    from jaxacct import allocation
    t = n // int(batch_size)
    checks.check_int("num_selected", num_selected, min_value=1, max_value=t)
    steps = t * E
    sigma = float(allocation.calibrate_sigma(epsilon=epsilon, delta=delta, num_steps=t,
                                             num_selected=num_selected, num_epochs=E))
    acc = AllocationAccountant(sigma=sigma, num_steps=t, num_selected=num_selected)
  else:
    steps = E
    sigma = float(_calibrate_gaussian(float(epsilon), float(delta))) * math.sqrt(E)
    acc = GaussianAccountant(sigma=sigma)
  eps = float(epsilon_table(acc, num_steps=steps, delta=delta)[-1])
  if not eps <= epsilon * (1 + 1e-9):
    raise ValueError(f"calibration failed: sigma={sigma:g} gives epsilon={eps:g} > "
                     f"target {epsilon:g} under the tracking accountant.")
  return Calibration(noise_multiplier=sigma, accountant=acc, num_steps=steps, epsilon=eps)


@x64_boundary
def _calibrate_gaussian(epsilon, delta):
  from jaxacct._core.calibrate import bisect
  from jaxacct._core.gaussian import gaussian_epsilon_kernel
  eps_t = jnp.asarray(epsilon, jnp.float64)
  d = jnp.asarray(delta, jnp.float64)
  res = jax.jit(lambda: bisect(lambda s: gaussian_epsilon_kernel(s, d) - eps_t,
                               jnp.asarray(1e-3), jnp.asarray(1e4), increasing=False,
                               num_iters=80, log_scale=True))()
  if not bool(res.ok):
    raise ValueError(f"no sigma in [1e-3, 1e4] meets epsilon={epsilon:g} at "
                     f"delta={delta:g}.")
  return float(res.x)


# --------------------------------------------------------------------------
# DP aggregation that composes with gradient accumulation.
# --------------------------------------------------------------------------

def clip_and_sum(l2_norm_clip: float) -> optax.GradientTransformation:
  """Clips per-example gradients (leading axis) to ``l2_norm_clip`` and sums them.

  Stateless. With ``optax.MultiSteps(inner, every_k_schedule=K)`` put it
  *outside* (``optax.chain(clip_and_sum(C), optax.MultiSteps(...))``):
  MultiSteps then averages K clipped sums, whose sensitivity is C / K, so the
  inner chain adds noise once per applied update with
  ``gaussian_noise(stddev=sigma * C / K, ...)`` and scales by
  ``1 / micro_batch_size`` (mean over the K * micro_batch_size examples);
  ``track_privacy`` inside counts one step per applied update with noise
  multiplier sigma. The sampling scheme the
  accountant assumes applies to the *logical* batch (the union of the K
  micro-batches), e.g. Poisson at rate q over the dataset, then split into K
  fixed-size chunks padded with all-zero rows (which clip to zero).

  Example (the test suite runs this pattern)::

    tx = optax.chain(
        clip_and_sum(C),
        optax.MultiSteps(optax.chain(
            gaussian_noise(sigma * C / K, key),
            track_privacy(PoissonAccountant(q=q, sigma=sigma), num_steps=T, delta=d),
            optax.scale(1 / micro_batch_size), optax.sgd(lr)),
          every_k_schedule=K))

  Args:
    l2_norm_clip: > 0.
  """
  checks.check_positive("l2_norm_clip", l2_norm_clip)

  def update_fn(updates, state, params=None):
    del params
    flat, tdef = jax.tree.flatten(updates)
    summed, _ = optax.per_example_global_norm_clip(flat, l2_norm_clip)
    return jax.tree.unflatten(tdef, summed), state

  return optax.GradientTransformation(lambda p: optax.EmptyState(), update_fn)


class GaussianNoiseState(NamedTuple):
  """PRNG key of :func:`gaussian_noise`."""
  key: jax.Array


def gaussian_noise(stddev: float, key) -> optax.GradientTransformation:
  """Adds N(0, stddev^2) to every coordinate of the updates (once per call).

  Args:
    stddev: >= 0 (0 only for debugging: the tracker's accountant must
      match the noise actually added).
    key: a ``jax.random.key`` or an int seed.
  """
  checks.check_range("stddev", stddev, 0.0, np.inf)
  if isinstance(key, int):
    key = jax.random.key(key)

  def init_fn(params):
    del params
    return GaussianNoiseState(key=key)

  def update_fn(updates, state, params=None):
    del params
    flat, tdef = jax.tree.flatten(updates)
    new_key, *ks = jax.random.split(state.key, len(flat) + 1)
    noised = [g + stddev * jax.random.normal(k, g.shape, g.dtype) for g, k in zip(flat, ks)]
    return jax.tree.unflatten(tdef, noised), GaussianNoiseState(key=new_key)

  return optax.GradientTransformation(init_fn, update_fn)
