r"""Random allocation: privacy-profile bounds other than the direct RDP.

Feldman & Shenfeld, "Privacy amplification by random allocation",
arXiv:2502.08202v3. k-out-of-t allocation over E epochs is accounted, for
every bound here, as m = k*E compositions of 1-out-of-t' allocation with
t' = floor(t/k) (Lemma 3.2; potentially loose, always valid).

Derivations and sources: docs/bounds/allocation_rdp.md ("Bounds and proofs /
Random allocation: RDP and analytic bounds").
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxacct import pld as jpld
from jaxacct._core import checks
from jaxacct._core.compiled import jit
from jaxacct._core.conversion import rdp_to_delta_kernel, rdp_to_epsilon_kernel
from jaxacct._core.gaussian import gaussian_epsilon_jit, gaussian_epsilon_kernel, gaussian_log_delta
from jaxacct._core.namespace import HOST, JAX, for_inputs, host_call
from jaxacct._core.orders import DEFAULT_ORDERS
from jaxacct._core.results import DeltaResult, EpsilonResult, host_f64
from jaxacct._core.solve import first_feasible_on_ladder_host
from jaxacct._core.subsampled_gaussian import poisson_gaussian_rdp


def split_rounds(steps_per_epoch, num_selected, num_epochs):
  """(t', m) of k-of-t allocation over E epochs: t' = floor(t/k) steps per round, m = kE rounds.

  Feldman & Shenfeld, arXiv:2502.08202v3, Lemma 3.2 (k-of-t as kE rounds of 1-of-t').
  Returns float64 numpy arrays (broadcast of the inputs).
  """
  t_round = np.floor(np.asarray(steps_per_epoch, np.float64) / np.asarray(num_selected, np.float64))
  m = np.asarray(num_selected, np.float64) * np.asarray(num_epochs, np.float64)
  return t_round, m


def check_scheme(sigma, steps_per_epoch, num_selected, num_epochs, *, scalar=False):
  """Refuses a scheme (sigma, t, k, E) outside its domain, naming the parameter;
  ``scalar=True``: each must be one number (a door that takes no arrays)."""
  checks.check_sigma("sigma", sigma, scalar=scalar)
  checks.check_int("steps_per_epoch", steps_per_epoch, min_value=1, max_value=2**31 - 1,
                   scalar=scalar)
  checks.check_int("num_selected", num_selected, min_value=1, scalar=scalar)
  checks.check_int("num_epochs", num_epochs, min_value=1, scalar=scalar)
  if np.any(np.asarray(num_selected) > np.asarray(steps_per_epoch)):
    raise ValueError(f"num_selected must be in [1, steps_per_epoch]; got {num_selected} > "
                     f"{steps_per_epoch}.")


def direct_add_epsilon(*, sigma, steps_per_epoch, delta, num_selected=1, num_epochs=1):
  """Add-direction epsilon of k-of-t allocation (Thm 4.9 / Cor 4.10, Gaussian).

  eps = eps_Gauss(sigma * sqrt(t'/m), delta) + m (1 - 1/t') / (2 sigma^2).

  Returns: ``EpsilonResult(epsilon, delta, method="direct_add",
  bound="upper")``, ``epsilon`` a float64 array (broadcast of the inputs).
  Bound: upper.
  """
  check_scheme(sigma, steps_per_epoch, num_selected, num_epochs)
  checks.check_delta(delta)
  t, m = split_rounds(steps_per_epoch, num_selected, num_epochs)
  if for_inputs(sigma, delta, t, m).is_host:   # one question: NumPy, no compiled program
    e = host_call(_direct_add_eps, np.float64(sigma), t, m, np.float64(delta))
    return EpsilonResult(host_f64(e), host_f64(delta), method="direct_add", bound="upper")
  e = _direct_add_eps_jit(jnp.asarray(sigma, jnp.float64), jnp.asarray(t),
                          jnp.asarray(m), jnp.asarray(delta, jnp.float64))
  return EpsilonResult(e, jnp.asarray(delta, jnp.float64), method="direct_add", bound="upper")


def _direct_add_eps(s, t, m, delta, ns=JAX):
  xp = ns.xp
  shift = m * (1.0 - 1.0 / t) / (2.0 * s**2)
  return gaussian_epsilon_kernel(s * xp.sqrt(t / m), delta, ns=ns) + shift


_direct_add_eps_jit = jit(_direct_add_eps)


def direct_add_delta(*, sigma, steps_per_epoch, epsilon, num_selected=1, num_epochs=1):
  """Add-direction delta at ``epsilon`` (Thm 4.9 / Cor 4.10).

  Returns: ``DeltaResult(delta, epsilon, method="direct_add",
  bound="upper")``, ``delta`` a float64 array (broadcast of the inputs).
  Bound: upper.
  """
  check_scheme(sigma, steps_per_epoch, num_selected, num_epochs)
  checks.check_range("epsilon", epsilon)
  t, m = split_rounds(steps_per_epoch, num_selected, num_epochs)
  ns = for_inputs(sigma, epsilon, t, m)   # one question: NumPy, no compiled program
  xp = ns.xp
  s = xp.asarray(sigma, xp.float64)
  shift = m * (1.0 - 1.0 / t) / (2.0 * s**2)
  with np.errstate(all="ignore"):
    d = xp.exp(gaussian_log_delta(s * xp.sqrt(t / m), xp.asarray(epsilon) - shift, ns))
  cast = host_f64 if ns.is_host else (lambda x: jnp.asarray(x, jnp.float64))
  return DeltaResult(cast(d), cast(epsilon), method="direct_add", bound="upper")


def local_epsilon(*, sigma, delta, num_selected=1, num_epochs=1):
  """Epsilon without amplification: Gaussian with noise sigma/sqrt(kE).

  Returns: ``EpsilonResult(epsilon, delta, method="local", bound="upper")``,
  ``epsilon`` a float64 array (broadcast of the inputs). Bound: upper
  (exact for the scheme in which the allocation is public).
  """
  checks.check_sigma("sigma", sigma)
  checks.check_delta(delta)
  checks.check_int("num_selected", num_selected, min_value=1)
  checks.check_int("num_epochs", num_epochs, min_value=1)
  m = np.asarray(num_selected, np.float64) * np.asarray(num_epochs, np.float64)
  if for_inputs(sigma, delta, m).is_host:   # one question: NumPy, no compiled program
    e = host_call(gaussian_epsilon_kernel, np.float64(sigma) / np.sqrt(m), np.float64(delta))
    return EpsilonResult(host_f64(e), host_f64(delta), method="local", bound="upper")
  e = gaussian_epsilon_jit(jnp.asarray(sigma, jnp.float64) / jnp.sqrt(m),
                           jnp.asarray(delta, jnp.float64))
  return EpsilonResult(e, jnp.asarray(delta, jnp.float64), method="local", bound="upper")


def _log_delta_add(a, rdp, g, eps):
  """log of the add-direction decomposition profile at ``eps`` (host NumPy)."""
  e_tilde = -np.log1p(-(-np.expm1(-eps)) / g)
  d, _ = rdp_to_delta_kernel(a, rdp, e_tilde, "tight", ns=HOST)
  return np.log(np.minimum(1.0, (1.0 + np.exp(eps) * (g - 1.0)) * d))


def _decomp_add_eps(a, rdp, g, delta):
  """Add-direction epsilon: bisection on [0, 50] keeping the feasible end
  (inf when 50 is infeasible; host NumPy, no compiled program)."""
  ld = np.log(delta)
  f = lambda e: _log_delta_add(a, rdp, g, e) - ld
  x = HOST.bisect(f, np.float64(0.0), np.float64(50.0), increasing=False, num_iters=60)
  return np.where(f(np.float64(0.0)) <= 0, 0.0, np.where(f(np.float64(50.0)) <= 0, x, np.inf))


def _poisson_dir(sigma, t, direction, orders):
  """t times the directional RDP of the Poisson-subsampled Gaussian at rate 1/t,
  on the host (through its compiled program, which runs the fractional orders'
  quadrature)."""
  return np.asarray(poisson_gaussian_rdp(orders, q=1.0 / t, sigma=sigma, direction=direction)) * t


def decomposition_gamma(steps_per_epoch):
  r"""The decomposition factor :math:`\gamma(t)=1/(1-(1-1/t)^t)` of Thm 4.6
  (Feldman-Shenfeld, arXiv:2502.08202v3) at t = ``steps_per_epoch`` (an integer >= 1),
  rising to :math:`e/(e-1)` as t grows. Exact (float64, via expm1/log1p);
  1 at t = 1."""
  checks.check_int("steps_per_epoch", steps_per_epoch, min_value=1)
  t = int(steps_per_epoch)
  return 1.0 / -np.expm1(t * np.log1p(-1.0 / t)) if t > 1 else 1.0


def decomposition_epsilon(*, sigma, steps_per_epoch, delta, direction="both", orders=None):
  r"""Epsilon of 1-of-t allocation by Poisson decomposition (Thm 4.6).

  remove: :math:`\vec\delta_A(\varepsilon)\le\gamma\,\vec\delta_P(\log(1+(e^\varepsilon-1)/\gamma))`;
  add: :math:`\overleftarrow\delta_A(\varepsilon)\le(1+e^\varepsilon(\gamma-1))\,
  \overleftarrow\delta_P(-\log(1-(1-e^{-\varepsilon})/\gamma))`, with
  :math:`\gamma=1/(1-(1-1/t)^t)` and the Poisson profile at rate 1/t over t
  steps taken from its directional RDP (tight conversion).

  Args:
    sigma: > 0 (scalar). steps_per_epoch: t >= 2 (scalar). delta in (0, 1).
    direction: "remove", "add" or "both" (max).

  Returns: ``EpsilonResult(epsilon, delta, method="decomposition",
  bound="upper")``, ``epsilon`` a 0-d float64 array. Bound: upper.

  Numerical regime: the Poisson profile is an RDP conversion (valid, not
  tight); for t up to 1e7 and sigma in [0.2, 100]. The add-direction
  epsilon is a bisection on [0, 50] keeping the feasible end (inf if 50 is
  infeasible).
  """
  checks.check_sigma("sigma", sigma)
  checks.check_int("steps_per_epoch", steps_per_epoch, min_value=2)
  checks.check_delta(delta)
  checks.check_direction(direction)
  orders = DEFAULT_ORDERS if orders is None else checks.check_orders(orders)
  t = int(steps_per_epoch)
  g = decomposition_gamma(t)
  a = np.asarray(orders, np.float64)
  out = []
  with np.errstate(all="ignore"):          # one scalar question: NumPy on the host
    if direction in ("remove", "both"):
      rdp = _poisson_dir(sigma, t, "remove", orders)
      eps_p, _ = rdp_to_epsilon_kernel(a, rdp, np.float64(delta / g), "tight", ns=HOST)
      out.append(np.log1p(g * np.expm1(eps_p)))
    if direction in ("add", "both"):
      rdp = _poisson_dir(sigma, t, "add", orders)
      out.append(_decomp_add_eps(a, rdp, np.float64(g), np.float64(delta)))
  return EpsilonResult(np.asarray(np.max(np.stack(out), axis=0), np.float64),
                       host_f64(delta), method="decomposition", bound="upper")


def decomposition_delta(*, sigma, steps_per_epoch, epsilon, direction="both", orders=None):
  r"""Delta of 1-of-t allocation by Poisson decomposition (Thm 4.6), at ``epsilon``.

  Feldman & Shenfeld, arXiv:2502.08202v3, Thm 4.6 with rate 1/t:
  remove :math:`\gamma\,\vec\delta_P(\log(1+(e^\varepsilon-1)/\gamma))`, add
  :math:`(1+e^\varepsilon(\gamma-1))\,\overleftarrow\delta_P(-\log(1-(1-e^{-\varepsilon})/\gamma))`,
  the Poisson profile from its directional RDP (tight conversion).

  Args: sigma > 0, steps_per_epoch t >= 2, epsilon >= 0 (scalars); direction.

  Returns: ``DeltaResult(delta, epsilon, method="decomposition",
  bound="upper")``, ``delta`` a float64 array (capped at 1). Bound: upper.
  """
  checks.check_sigma("sigma", sigma)
  checks.check_int("steps_per_epoch", steps_per_epoch, min_value=2)
  checks.check_range("epsilon", epsilon, 0.0, np.inf)
  checks.check_direction(direction)
  orders = DEFAULT_ORDERS if orders is None else checks.check_orders(orders)
  t = int(steps_per_epoch)
  g = decomposition_gamma(t)
  a = np.asarray(orders, np.float64)
  eps = np.float64(epsilon)
  out = []
  with np.errstate(all="ignore"):          # one scalar question: NumPy on the host
    if direction in ("remove", "both"):
      rdp = _poisson_dir(sigma, t, "remove", orders)
      e_tilde = np.log1p(np.expm1(eps) / g)
      d, _ = rdp_to_delta_kernel(a, rdp, e_tilde, "tight", ns=HOST)
      out.append(np.minimum(1.0, g * d))
    if direction in ("add", "both"):
      rdp = _poisson_dir(sigma, t, "add", orders)
      e_tilde = -np.log1p(-(-np.expm1(-eps)) / g)
      d, _ = rdp_to_delta_kernel(a, rdp, e_tilde, "tight", ns=HOST)
      out.append(np.minimum(1.0, (1.0 + np.exp(eps) * (g - 1.0)) * d))
  return DeltaResult(np.asarray(np.max(np.stack(out), axis=0), np.float64), host_f64(eps),
                     method="decomposition", bound="upper")


def decomposition_pld_epsilon(*, sigma, steps_per_epoch, delta, direction="both", num_selected=1,
                              num_epochs=1, step=None):
  r"""Epsilon of 1-of-t allocation by Poisson decomposition (Thm 4.6), PLD profile.

  Feldman & Shenfeld, arXiv:2502.08202v3, Thm 4.6 (rate 1/t), as
  :func:`decomposition_epsilon` but the Poisson profile (each direction) is
  the pessimistic (upper) PLD of ``jaxacct.pld.poisson_gaussian_composed``
  (FFT composition of t steps, default grid) instead of an RDP conversion:
  tighter, slower. The paper uses a PLD here (dp_accounting).

  remove: eps = log(1 + gamma (e^{eps_P} - 1)), eps_P the PLD epsilon at
  delta/gamma. add: the smallest eps on a two-level grid (4000 log-spaced
  points in [1e-4, 50], then 4000 inside the winning cell) with
  (1 + e^eps (gamma-1)) delta_P^add(eps~) <= delta (each grid point is a
  valid bound, so the result is conservative within 1e-6 relative).

  k > 1 or E > 1 (m = kE rounds of 1-of-t', t' = floor(t/k), Lemma 3.2):
  Thm 4.6 comes from domination of one round by the pair (P+, Q), P+ the
  t'-step Poisson(1/t') scheme conditioned on >= 1 participation
  (Lemma D.1/D.2; P_pois = (1 - 1/g) Q + (1/g) P+). Its likelihood ratio is
  x+ = g x - (g - 1), x = dP_pois/dQ, so its PLD is the Poisson PLD with
  losses mapped to l+ = log(g e^l - (g-1)) (P+-mass p (g - (g-1) e^{-l});
  atoms with x+ <= 0 carry no P+-mass); add: losses
  -log(g e^{-l'} - (g-1)) of the add Poisson PLD (atoms with x+ <= 0 go to
  +inf). The mapped atoms are re-gridded pessimistically and composed m
  times (``jaxacct.pld.compose``). Validity: the pessimistic Poisson PLD
  (Ptilde, Qtilde) maps to the true pair by a kernel K with K Ptilde = P_pois
  and K Qtilde <= Q, hence K(g Ptilde - (g-1) Qtilde) >= P+ and the remove
  hockey sticks of all compositions are bounded (add: the mirror argument,
  plus e^eps m nu (1+nu)^(m-1) for the clipped negative mass nu, which is 0
  in every tested case). That (P+, Q) dominates the round for every
  kappa >= 0 (needed for composition; Lemma D.1 in both directions) is
  checked in the tests as a convex order of the likelihood ratios by
  Gauss-Hermite quadrature (t = 2, 3). At m = 1 the mapped PLD reproduces
  the Thm 4.6 formula to 1e-6 relative.

  Args: sigma > 0, steps_per_epoch t >= 2, delta in (0, 1) (scalars); direction;
    num_selected k, num_epochs E (floor(t/k) >= 2); step: PLD grid step
    for k/E > 1 (default: ``jaxacct.pld``'s step for the Poisson pair at rate 1/t').

  Returns: ``EpsilonResult(epsilon, delta, method="decomposition_pld",
  bound="upper")``, ``epsilon`` a ``np.float64``. Bound: upper (as the PLD
  is).
  """
  check_scheme(sigma, steps_per_epoch, num_selected, num_epochs)
  checks.check_delta(delta)
  checks.check_direction(direction)
  if step is not None:
    checks.check_positive("step", step)
  tr, m = split_rounds(steps_per_epoch, num_selected, num_epochs)
  if int(tr) < 2:
    raise ValueError(f"decomposition needs floor(steps_per_epoch/num_selected) >= 2; got "
                     f"{int(tr)}.")
  if int(m) > 1:
    dirs = ("remove", "add") if direction == "both" else (direction,)
    e = _composed_decomp_eps(float(sigma), int(tr), int(m), float(delta), dirs, step)
    return EpsilonResult(host_f64(e), host_f64(delta), method="decomposition_pld",
                         bound="upper")
  t = int(steps_per_epoch)
  g = decomposition_gamma(t)
  pair = poisson_composed_pair(sigma, 1.0 / t, t)
  out = []
  if direction in ("remove", "both"):
    e_p = float(jpld.epsilon(pair.remove, delta / g))
    out.append(float(np.log1p(g * np.expm1(e_p))) if np.isfinite(e_p) else np.inf)
  if direction in ("add", "both"):
    def bound(eps):
      eps = np.asarray(eps, np.float64)
      e_tilde = -np.log1p(np.expm1(-eps) / g)
      d = np.asarray(jpld.delta(pair.add, jnp.asarray(e_tilde)))
      return np.minimum(1.0, (1.0 + np.exp(eps) * (g - 1.0)) * d)
    if bound(0.0) <= delta:
      out.append(0.0)
    else:
      grid = np.concatenate([[0.0], np.geomspace(1e-4, 50.0, 4000)])
      ok = np.nonzero(bound(grid) <= delta)[0]
      if ok.size == 0:
        out.append(np.inf)
      else:
        i = ok[0]
        fine = np.linspace(grid[i - 1], grid[i], 4000)
        ok2 = np.nonzero(bound(fine) <= delta)[0]
        out.append(float(fine[ok2[0]]))
  return EpsilonResult(host_f64(max(out)), host_f64(delta), method="decomposition_pld",
                       bound="upper")


# ------------------------------------------- the t-step Poisson PLDs of jaxacct.pld

def poisson_composed_step(sigma, q, t):
  """``jaxacct.pld``'s default grid step for t steps of the Poisson(q)-subsampled
  Gaussian (the Poisson profiles of Thm 4.6 and Thm 4.1): the one place that
  asks jaxacct.pld for it (its count of steps is t, given in place)."""
  return jpld.default_step(float(sigma), q, t)


def poisson_composed_pair(sigma, q, t, step=None):
  """Pessimistic PairPLD of t steps of the Poisson(q)-subsampled Gaussian, FFT-composed
  by ``jaxacct.pld`` at ``step`` (None: :func:`poisson_composed_step`)."""
  return jpld.poisson_gaussian_composed(float(sigma), q, t, step=step)


# ------------------------------------------- Thm 4.6 composed over m rounds

def _conditioned_pld(pld, g, direction):
  """PLD of the pair dominating one allocation round, from a t-step Poisson PLD.

  remove: (P+, Q) from (P_pois, Q); add: (Q, P+) from (Q, P_pois), where
  P_pois = (1 - 1/g) Q + (1/g) P+ (Poisson conditioned on >= 1 participation,
  Lemma D.2). Returns (PLD atoms: losses, probs, inf_mass, nu) with nu the
  total negative P+-mass clipped in the add direction (see
  :func:`decomposition_pld_epsilon`)."""
  p = np.asarray(pld.probs, np.float64)
  loss = (int(pld.offset) + np.arange(p.size)) * float(pld.step)
  keep = p > 0
  p, loss = p[keep], loss[keep]
  inf = float(pld.inf_mass)
  if direction == "remove":
    # x+ = g e^l - (g-1); P+-mass = Q-mass * x+ = p (g - (g-1) e^{-l})
    w = g - (g - 1.0) * np.exp(-loss)
    pos = w > 0
    new_loss = loss[pos] + np.log(w[pos])
    return new_loss, p[pos] * w[pos], min(1.0, g * inf), 0.0
  # add: atoms (l' = log Q/P_pois, Q-mass p); P+-mass = p (g e^{-l'} - (g-1))
  w = g * np.exp(-loss) - (g - 1.0)
  pos = w > 0
  new_loss = -np.log(w[pos])
  nu = float(np.sum(p[~pos] * -w[~pos]))
  return new_loss, p[pos], min(1.0, inf + float(np.sum(p[~pos]))), nu


def decomposition_round_plds(*, sigma, steps_per_epoch, step=None):
  """(remove PLD, add PLD, nu) dominating one 1-of-t allocation round (Thm 4.6 pair).

  Built from the pessimistic t-step Poisson(1/t) PLD of ``jaxacct.pld`` by
  the loss map of :func:`decomposition_pld_epsilon`; pessimistic
  (connect-the-dots) re-gridding. ``nu``: clipped negative mass (add).
  """
  checks.check_sigma("sigma", sigma)
  checks.check_int("steps_per_epoch", steps_per_epoch, min_value=2)
  if step is not None:
    checks.check_positive("step", step)
  t = int(steps_per_epoch)
  g = decomposition_gamma(t)
  if step is None:
    step = poisson_composed_step(sigma, 1.0 / t, t)
  pair = poisson_composed_pair(sigma, 1.0 / t, t, step)
  out = []
  nu = 0.0
  for d, src in (("remove", pair.remove), ("add", pair.add)):
    ls, ps, inf, n_ = _conditioned_pld(src, g, d)
    out.append(jpld.from_losses(ls, ps, step=float(step), pessimistic=True, inf_mass=inf))
    nu = max(nu, n_)
  return out[0], out[1], nu


def _composed_decomp_eps(sigma, t, m, delta, dirs, step=None):
  rem, add, nu = decomposition_round_plds(sigma=sigma, steps_per_epoch=t, step=step)
  out = []
  for d in dirs:
    c = jpld.compose(rem if d == "remove" else add, int(m))
    if d == "remove":
      out.append(float(jpld.epsilon(c, delta)))
      continue
    # add: delta_true(eps) <= delta_pld(eps) + e^eps m nu (1+nu)^(m-1)
    slack = m * nu * (1.0 + nu) ** (m - 1)
    e = float(jpld.epsilon(c, delta * (1.0 - 1e-6))) if slack < delta else np.inf
    out.append(first_feasible_on_ladder_host(
        lambda x, c=c, slack=slack: float(jpld.delta(c, x)) + np.exp(x) * slack <= delta,
        e, factor=1.001, shift=1e-9, max_steps=50))
  return max(out)
