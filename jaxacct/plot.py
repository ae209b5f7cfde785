r"""Plots of certified privacy: epsilon brackets and attack trade-off curves.

matplotlib is an optional dependency (``pip install 'jaxacct[plot]'``); it is
imported inside the functions, never by ``import jaxacct``. Every function
draws on ``ax`` (a new figure when None) and returns the Axes.

* :func:`bounds` -- one certified bracket: the upper bound (solid), the lower
  bound (dashed) and the band between them shaded (``fill_between``). The
  building block of the others and of the notebooks' scheme plots.
* :func:`epsilon` -- DP-SGD epsilon against the noise multiplier for several
  samplings (:func:`jaxacct.dpsgd.epsilon`, one call per sampling with the
  array of noise multipliers).
* :func:`tradeoff` -- the hypothesis-testing trade-off (FPR against FNR, log
  axes) of a run: from a ``jaxacct.accounting.PLDAccountant``, from a
  DP-SGD statement (any object with ``noise_multiplier``, ``num_examples``,
  ``batch_size``, ``num_epochs`` and ``sampling`` attributes, e.g. the
  result of ``jaxacct.dpsgd.statement``), or from a precomputed
  :class:`jaxacct.risk.TradeOff`. The region below the certified curve is
  unreachable by any attack (:mod:`jaxacct.risk`).

Example::

  >>> from jaxacct import plot
  >>> ax = plot.epsilon([0.6, 0.8, 1.0, 1.5], num_examples=60_000, batch_size=256,
  ...                   num_epochs=10, delta=1e-5)
"""

from __future__ import annotations

import numpy as np

from jaxacct import dpsgd, risk
from jaxacct._core.dtype import public_surface

__all__ = ["bounds", "epsilon", "tradeoff"]

def _pyplot():
  try:
    import matplotlib.pyplot as plt
  except ImportError as err:   # pragma: no cover - depends on the environment
    raise ImportError("jaxacct.plot needs matplotlib, an optional dependency: "
                      "pip install 'jaxacct[plot]' (or matplotlib>=3.8).") from err
  return plt


def _axes(ax):
  if ax is not None:
    return ax
  _, ax = _pyplot().subplots(figsize=(6, 4))
  return ax


def bounds(x, upper, lower=None, *, label=None, ax=None, color=None, xscale: str = "log",
           yscale: str = "log", marker=None, band_alpha: float = 0.2):
  """Draws a certified bracket: upper (solid), lower (dashed), band shaded.

  Args:
    x: abscissae (1-D). upper: upper bounds at ``x``. lower: lower bounds at
      ``x`` or None (no dashed line, no band). NaN lower entries are skipped.
    label: legend label of the upper line (the lower gets ``label + " (lower)"``).
    ax: matplotlib Axes (None: a new figure). color: line colour (None: next
      in the cycle). xscale, yscale: "log" or "linear". marker: passed to the
      upper line. band_alpha: opacity of the band.

  Returns:
    The Axes.
  """
  ax = _axes(ax)
  x = np.asarray(x, np.float64).ravel()
  up = np.broadcast_to(np.asarray(upper, np.float64), x.shape)
  line, = ax.plot(x, up, "-", color=color, label=label, marker=marker)
  if lower is not None:
    lo = np.broadcast_to(np.asarray(lower, np.float64), x.shape)
    ok = np.isfinite(lo)
    if np.any(ok):
      c = line.get_color()
      ax.plot(x[ok], lo[ok], "--", color=c,
              label=None if label is None else f"{label} (lower)")
      ax.fill_between(x[ok], lo[ok], up[ok], color=c, alpha=band_alpha, linewidth=0)
  ax.set_xscale(xscale)
  ax.set_yscale(yscale)
  return ax


def epsilon(noise_multipliers, *, num_examples, batch_size, num_epochs, delta,
            samplings=None, num_selected: int = 1, ax=None, progress=None, **settings):
  """Certified DP-SGD epsilon against the noise multiplier, one bracket per sampling.

  One :func:`jaxacct.dpsgd.epsilon` call per sampling with the whole array of
  noise multipliers: upper bound solid, lower bound (where the sampling has
  one: balls-in-bins with k = 1, shuffle when B divides N) dashed, the band
  shaded.

  Args:
    noise_multipliers: sigmas > 0 (1-D).
    num_examples, batch_size, num_epochs, delta, num_selected,
      **settings: the configuration (:func:`jaxacct.dpsgd.epsilon`); each
      sampling takes the options its record lists
      (:attr:`jaxacct.dpsgd.samplers.Sampler.options`; its settings' fields
      are required by the samplers that have them).
    samplings: registered sampler names (:func:`jaxacct.dpsgd.samplers.names`);
      None (default): those drawn by default (``balls_in_bins``, ``poisson``,
      ``shuffle``).
    ax: Axes or None. progress: as in :func:`jaxacct.dpsgd.epsilon`.

  Returns:
    The Axes (log-log; x "noise multiplier sigma", y "epsilon at delta=...").
  """
  ax = _axes(ax)
  sig = np.sort(np.asarray(noise_multipliers, np.float64).ravel())
  if samplings is None:
    samplings = [n for n in dpsgd.samplers.names() if dpsgd.samplers.get(n).in_default_plot]
  for s in samplings:
    rec = dpsgd.samplers.get(s)
    r = dpsgd.epsilon(noise_multiplier=sig, num_examples=num_examples, batch_size=batch_size,
                      num_epochs=num_epochs, delta=delta, sampling=s, progress=progress,
                      **_options(rec, num_selected=num_selected, **settings))
    bounds(sig, r.epsilon, r.lower, label=rec.label, ax=ax, marker=".")
  ax.set_xlabel("noise multiplier sigma")
  ax.set_ylabel(f"epsilon at delta={delta:g}")
  ax.set_title(f"N={num_examples}, B={batch_size}, E={num_epochs}", fontsize=9)
  ax.legend(fontsize=7)
  return ax


def _options(rec, **given):
  """The configuration options of ``given`` that the sampler ``rec`` takes
  (its record's ``options``); the others keep their defaults."""
  return {k: v for k, v in given.items() if k in rec.options}


def _tradeoff_of(source, fpr, direction):
  """A :class:`jaxacct.risk.TradeOff` and a default label for ``source``."""
  if isinstance(source, risk.TradeOff):
    return source, "trade-off"
  if hasattr(source, "composed_plds"):             # a PLDAccountant
    up, lo = source.composed_plds()
    allowance = 2.0 * float(getattr(source, "tail_mass", 0.0))
    return (risk.tpr_from_plds(up, fpr, lower=lo, direction=direction,
                               lower_allowance=allowance), "accountant")
  need = ("noise_multiplier", "num_examples", "batch_size", "num_epochs")
  if all(hasattr(source, n) for n in need):        # a DP-SGD statement
    sampling = getattr(source, "sampling", "balls_in_bins")
    rec = dpsgd.samplers.get(sampling)
    opts = _options(rec, num_selected=getattr(source, "num_selected", 1) or 1,
                    **{k: getattr(source, k) for k in rec.options
                       if k not in ("num_selected", "total_steps") and hasattr(source, k)})
    r = risk.tpr_at_fpr(fpr, noise_multiplier=float(source.noise_multiplier),
                        num_examples=source.num_examples, batch_size=source.batch_size,
                        num_epochs=source.num_epochs, sampling=sampling,
                        direction=direction, **opts)
    return r, f"{sampling}, sigma={float(source.noise_multiplier):g}"
  raise ValueError("source must be a PLDAccountant (composed_plds), a jaxacct.risk.TradeOff, "
                   "or an object with attributes " + ", ".join(need) + " (and sampling); "
                   f"got {type(source).__name__}.")


def tradeoff(source, *, fpr=None, ax=None, label=None, direction: str = "both",
             color=None, chance: bool = True, yscale: str = "log"):
  r"""Certified trade-off curve: FPR against FNR (log axes) of the best attack.

  FNR = 1 - TPR with the TPR bracket of :mod:`jaxacct.risk` (Dong, Roth &
  Su, arXiv:1905.02383v3; Kulynych et al., arXiv:2407.02191v3): the solid
  curve comes from the certified upper TPR (no attack reaches below it), the
  dashed one from the lower TPR (the best attack against the accounted pair
  reaches at least that), the band between them shaded.

  Args:
    source: a ``jaxacct.accounting.PLDAccountant`` (its ``composed_plds()``),
      a DP-SGD statement (duck-typed: ``noise_multiplier``,
      ``num_examples``, ``batch_size``, ``num_epochs`` and optionally
      ``sampling`` and the options its sampler lists; as in
      :func:`jaxacct.risk.tpr_at_fpr`),
      or a precomputed :class:`jaxacct.risk.TradeOff`.
    fpr: false-positive rates (default 200 points from 1e-6 to 0.999); ignored
      for a TradeOff.
    ax: Axes or None. label: legend label (default from the source).
    direction: "remove", "add" or "both".
    color: line colour. chance: also draw FNR = 1 - FPR (random guessing).
    yscale: "log" (default) or "linear" (FNR near 1 reads better linearly
      when the attack is weak).

  Returns:
    The Axes (log x; x "false-positive rate", y "false-negative rate").
  """
  ax = _axes(ax)
  if fpr is None:
    fpr = np.concatenate([np.geomspace(1e-6, 0.5, 180), np.linspace(0.5, 0.999, 21)[1:]])
  r, default = _tradeoff_of(source, np.asarray(fpr, np.float64), direction)
  a = np.asarray(r.fpr, np.float64).ravel()
  order = np.argsort(a)
  a = a[order]
  fnr_lo = 1.0 - np.asarray(r.upper, np.float64).ravel()[order]   # certified: none below
  fnr_hi = 1.0 - np.asarray(r.lower, np.float64).ravel()[order]
  bounds(a, fnr_lo, fnr_hi, label=label or default, ax=ax, color=color, yscale=yscale)
  if chance:
    ax.plot(a, 1.0 - a, ":", color="gray", label="chance (FNR = 1 - FPR)")
  ax.set_xlabel("false-positive rate")
  ax.set_ylabel("false-negative rate")
  ax.legend(fontsize=7)
  return ax

# float64 is entered here, once per call, for every function __all__ lists
# (jaxacct._core.dtype.public_surface)
public_surface(globals())
