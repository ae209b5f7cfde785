"""The examples of examples/ run as the docs say (issue 67, item 8).

* ``examples/train_flax_nnx.py`` (Flax NNX, beside the linen
  ``examples/train_flax.py``): a balls-in-bins run of N = 256, B = 32 (t = 8),
  E = 2, calibrated to epsilon 3 at delta 1e-5, trains (the loss falls) and the
  tracker's epsilon after the last step is the calibrated run's: at most 3, and
  equal to :func:`jaxacct.dpsgd.epsilon`'s certified upper at the same sigma,
  N, B and E (the same tight allocation PLD; tolerance 1e-3 for the tracker's
  float32 table).
* ``python examples/peer_table.py`` still prints the README's table (the
  offline rows: jaxacct's own value 0.07796, lower 0.07757, as the README shows).
"""

import os
import subprocess
import sys

import pytest

from support import example_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_flax_nnx_example_trains_and_tracks_the_calibrated_epsilon():
  pytest.importorskip("flax.nnx")
  import jaxacct
  nnx_example = example_module("train_flax_nnx")
  hist = nnx_example.main(num_epochs=2, n=256, batch_size=32, epsilon=3.0, verbose=False)
  assert [h["epoch"] for h in hist] == [1, 2] and hist[-1]["step"] == 16
  assert hist[-1]["loss"] < hist[0]["loss"]
  assert 0 < hist[0]["eps"] < hist[-1]["eps"] <= 3.0
  sigma = hist[-1]["sigma"]
  ref = jaxacct.dpsgd.epsilon(noise_multiplier=sigma, num_examples=256, batch_size=32,
                              num_epochs=2, delta=1e-5, progress=False)
  assert hist[-1]["eps"] == pytest.approx(float(ref.epsilon), abs=1e-3)


def test_docs_name_the_nnx_example():
  text = open(os.path.join(ROOT, "docs", "how-to", "optax_hook.md"), encoding="utf-8").read()
  assert "examples/train_flax_nnx.py" in text and "examples/train_flax.py" in text


@pytest.mark.slow   # the peers' own accountants (dp_accounting, random-allocation): ~1 min
def test_peer_table_example_prints_the_readme_row():
  env = dict(os.environ)
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "peer_table.py")],
                     capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
  assert p.returncode == 0, p.stderr[-2000:]
  assert "| jaxacct, tight allocation PLD | balls-in-bins | 0.07796 (lower 0.07757) |" \
      in p.stdout, p.stdout
