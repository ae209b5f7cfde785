"""jaxacct.plot renders headless (Agg) with the artists it promises.

Each plot is drawn on the Agg backend and checked for its lines, its shaded
bands (PolyCollection from fill_between), log axes, axis labels, and data
that is monotone where the mathematics says so (epsilon decreasing in sigma;
FNR decreasing in FPR).
"""

import types

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from jaxacct import plot, risk  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
  yield
  plt.close("all")


def _bands(ax):
  return [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_bounds_draws_upper_lower_and_band():
  x = np.geomspace(0.5, 5, 10)
  ax = plot.bounds(x, 2 / x, 1 / x, label="demo")
  assert len(ax.get_lines()) == 2 and len(_bands(ax)) == 1
  assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
  ax2 = plot.bounds(x, 2 / x, None, ax=ax)                # no lower: one line, no band
  assert ax2 is ax and len(ax.get_lines()) == 3 and len(_bands(ax)) == 1
  plot.bounds(x, 2 / x, np.full(x.shape, np.nan), ax=ax)  # NaN lower: skipped
  assert len(ax.get_lines()) == 4 and len(_bands(ax)) == 1


def test_epsilon_plot_three_samplings():
  sig = np.array([0.9, 1.5, 3.0])
  fig, ax = plt.subplots()
  out = plot.epsilon(sig, num_examples=1000, batch_size=100, num_epochs=1, delta=1e-5, ax=ax)
  assert out is ax
  labels = [ln.get_label() for ln in ax.get_lines()]
  # upper + lower for balls_in_bins; upper for Poisson; upper + lower for shuffle (B | N)
  assert sum(lab.startswith("balls-in-bins") for lab in labels) == 2
  assert sum(lab.startswith("Poisson") for lab in labels) == 1
  assert sum(lab.startswith("shuffle") for lab in labels) == 2
  assert len(_bands(ax)) == 2
  assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
  assert ax.get_xlabel() == "noise multiplier sigma" and "delta=1e-05" in ax.get_ylabel()
  for ln in ax.get_lines():
    x, y = ln.get_data()
    np.testing.assert_array_equal(x, np.sort(x))
    assert np.all(np.diff(y) < 0), ln.get_label()      # epsilon decreases in sigma
  up = {lab.split()[0]: ln.get_ydata() for lab, ln in zip(labels, ax.get_lines())
        if not lab.endswith("(lower)")}
  # amplification: balls-in-bins below shuffle's no-amplification upper
  assert np.all(up["balls-in-bins"] <= up["shuffle"])


def _check_tradeoff(ax, n_lines):
  assert len(ax.get_lines()) == n_lines
  assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
  assert ax.get_xlabel() == "false-positive rate" and ax.get_ylabel() == "false-negative rate"
  x, y = ax.get_lines()[0].get_data()
  assert np.all(np.diff(x) > 0) and np.all(np.diff(y) <= 0)   # FNR decreases in FPR
  chance = ax.get_lines()[-1].get_ydata()
  assert np.all(y <= chance + 1e-12)                 # certified curve under chance


def test_tradeoff_from_statement_like_object():
  st = types.SimpleNamespace(noise_multiplier=1.2, num_examples=1000, batch_size=10,
                             num_epochs=3, delta=1e-5, sampling="shuffle")
  ax = plot.tradeoff(st)
  _check_tradeoff(ax, 3)                             # upper, lower (10 | 1000), chance
  assert len(_bands(ax)) == 1


def test_tradeoff_from_accountant_and_tradeoff():
  from jaxacct.accounting import PLDAccountant, events as ev
  acc = PLDAccountant()
  acc.compose(ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.0)), 10)
  fig, ax = plt.subplots()
  plot.tradeoff(acc, ax=ax, fpr=np.geomspace(1e-5, 0.9, 40), chance=True)
  _check_tradeoff(ax, 3)
  r = risk.tpr_at_fpr(np.geomspace(1e-5, 0.9, 30), noise_multiplier=1.0, num_examples=1000,
                      batch_size=10, num_epochs=2, sampling="shuffle", with_lower=False)
  ax2 = plot.tradeoff(r, chance=False)
  assert len(ax2.get_lines()) == 1 and not _bands(ax2)


def test_tradeoff_rejects_unknown_source():
  with pytest.raises(ValueError, match="source must be"):
    plot.tradeoff(object())


def test_every_registered_sampler_is_plotted_with_its_record_s_options(monkeypatch):
  # the registry, not plot, says which options a sampler takes: every registered
  # sampler is drawn, each dpsgd.epsilon call gets the options its record lists
  # (and its schedule accepts them); the numbers are dpsgd's (the slow test)
  from jaxacct import dpsgd
  calls = {}

  def fake(*, noise_multiplier, sampling, progress, delta, **cfg):
    calls[sampling] = dict(cfg)
    dpsgd.schedule(sampling=sampling, **cfg)     # the options pass the sampler's checks
    return types.SimpleNamespace(epsilon=1.0 / noise_multiplier, lower=None)

  monkeypatch.setattr(dpsgd, "epsilon", fake)
  names = dpsgd.samplers.names()
  ax = plot.epsilon([0.5, 1.0], num_examples=1000, batch_size=10, num_epochs=1, delta=1e-5,
                    samplings=names, num_selected=1, max_batch_size=20, cycle_length=2)
  assert set(calls) == set(names) and len(ax.get_lines()) == len(names)
  assert len({ln.get_label() for ln in ax.get_lines()}) == len(names)   # one label each
  extra = {n: set(c) - {"num_examples", "batch_size", "num_epochs"} for n, c in calls.items()}
  assert extra["balls_in_bins"] == {"num_selected"}
  assert extra["truncated_poisson"] == {"max_batch_size"}
  assert extra["cyclic_poisson"] == {"cycle_length"}
  assert all(extra[n] == set() for n in ("poisson", "shuffle", "fixed_size",
                                         "fixed_size_with_replacement"))
  with pytest.raises(ValueError, match="max_batch_size"):   # required by truncated_poisson
    plot.epsilon([1.0], num_examples=1000, batch_size=10, num_epochs=1, delta=1e-5,
                 samplings=["truncated_poisson"])


@pytest.mark.slow
def test_epsilon_plot_draws_truncated_poisson():
  # ~15 s: the truncated Poisson PLD; the line is dpsgd.epsilon's (1e-12)
  from jaxacct import dpsgd
  sig = np.array([1.5, 3.0])
  cfg = dict(num_examples=20, batch_size=5, num_epochs=1, delta=1e-5, max_batch_size=6)
  ax = plot.epsilon(sig, samplings=["truncated_poisson"], **cfg)
  line, lower = ax.get_lines()   # upper, and the accountant's certified lower
  assert line.get_label().startswith("truncated Poisson") and len(_bands(ax)) == 1
  ref = dpsgd.epsilon(noise_multiplier=sig, sampling="truncated_poisson", **cfg)
  np.testing.assert_allclose(line.get_ydata(), ref.epsilon, rtol=1e-12)
  np.testing.assert_allclose(lower.get_ydata(), ref.lower, rtol=1e-12)
  assert np.all(np.diff(line.get_ydata()) < 0)
