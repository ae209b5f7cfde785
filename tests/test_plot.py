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
