"""One vocabulary inside jaxacct.allocation (issue 64, items 4 and 5).

* the allocation code says ``steps_per_epoch`` (t) for the steps of one epoch;
  ``num_steps`` appears 0 times in it (a :mod:`jaxacct.pld` Poisson door's
  count, that Poisson run's whole count, is given in place);
* every public allocation door refuses a bad step count naming what the user
  wrote: ``steps_per_epoch``, or ``num_steps`` for the deprecated spelling
  (with its warning), raised so in the first place: ``_core/units.py`` rewrites
  no message;
* the code text quotes no timings, GPU names, commit hashes or history.
"""

import inspect
import pathlib
import re
import warnings

import pytest

import jaxacct
from jaxacct import allocation
from jaxacct.allocation import pld as apld

ROOT = pathlib.Path(__file__).resolve().parents[2]
ALLOCATION = ROOT / "jaxacct" / "allocation"
UNITS = ROOT / "jaxacct" / "_core" / "units.py"

# (door, its other arguments): each refuses steps_per_epoch=0 before computing
DOORS = [
    (allocation.epsilon, dict(sigma=1.0, delta=1e-5)),
    (allocation.delta, dict(sigma=1.0, epsilon=1.0)),
    (allocation.allocation_rdp, dict(sigma=1.0)),
    (allocation.allocation_remove_rdp, dict(sigma=1.0)),
    (allocation.allocation_add_rdp, dict(sigma=1.0)),
    (allocation.delta_lower_bound, dict(sigma=1.0, epsilon=1.0)),
    (allocation.delta_monte_carlo, dict(sigma=1.0, epsilon=1.0)),
    (allocation.fixed_bins_pld_epsilon, dict(sigma=1.0, delta=1e-5)),
    (allocation.fixed_bins_pld_delta, dict(sigma=1.0, epsilon=1.0)),
    (allocation.true_allocation_delta_monte_carlo, dict(sigma=1.0, epsilon=1.0)),
    (allocation.true_allocation_epsilon_monte_carlo, dict(sigma=1.0, delta=1e-5)),
    (apld.allocation_pld_epsilon, dict(sigma=1.0, delta=1e-5)),
    (apld.allocation_pld_delta, dict(sigma=1.0, epsilon=1.0)),
    (apld.allocation_plds, dict(sigma=1.0)),
    (apld.allocation_pld_laws, dict(sigma=1.0)),
]


def _sources():
  return sorted(ALLOCATION.rglob("*.py"))


def test_allocation_code_says_steps_per_epoch():
  bad = [f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
         for path in _sources()
         for i, line in enumerate(path.read_text().splitlines(), 1)
         if re.search(r"\bnum_steps\b", line)]
  assert not bad, "num_steps is the whole run; one epoch is steps_per_epoch:\n" + "\n".join(bad)


def test_units_rewrites_no_message():
  text = UNITS.read_text()
  assert "re.sub" not in text and not re.search(r"^import re$", text, re.M)


@pytest.mark.parametrize("i", range(len(DOORS)))
def test_doors_name_the_step_count_as_written(i):
  fn, kw = DOORS[i]
  assert "steps_per_epoch" in inspect.signature(fn).parameters
  assert "num_steps" not in inspect.signature(fn).parameters
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    with pytest.raises(ValueError, match=r"^steps_per_epoch must be an integer") as e:
      fn(steps_per_epoch=0, **kw)
  assert "num_steps" not in str(e.value)
  epochs = {"num_epochs": 1} if "num_epochs" in inspect.signature(fn).parameters else {}
  with pytest.warns(DeprecationWarning, match="'num_steps' is deprecated.*'steps_per_epoch'"):
    with pytest.raises(ValueError, match=r"^num_steps must be an integer"):
      fn(num_steps=0, **epochs, **kw)
  if epochs:   # without num_epochs the deprecated spelling is the unit trap's warning
    with pytest.warns(jaxacct.StepsUnitWarning, match="PER EPOCH"):
      with pytest.raises(ValueError, match=r"^num_steps must be an integer"):
        fn(num_steps=0, **kw)


def test_cross_check_names_steps_per_epoch():
  for fn, kw in (DOORS[0], DOORS[11]):
    with pytest.raises(ValueError, match=r"num_selected must be .*steps_per_epoch") as e:
      fn(steps_per_epoch=3, num_selected=5, **kw)
    assert "num_steps" not in str(e.value)


# timings (ms, "N s to compile", "Nx faster"), GPU names, commit hashes, history
ROT = re.compile(
    r"\b\d+(\.\d+)? ?ms\b|\d(\.\d+)? ?s (to|a|per|for|on)\b|\b\d+(\.\d+)?x (faster|slower|the)\b"
    r"|\bH100\b|\bH200\b|\bA100\b|formerly|is gone|\bno longer\b|\bused to\b|\bmain at\b"
    r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def test_allocation_code_text_quotes_no_timings_gpus_or_history():
  bad = []
  for path in _sources() + [UNITS]:
    for i, line in enumerate(path.read_text().splitlines(), 1):
      if ROT.search(line):
        bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
  assert not bad, ("code text states what the code does (measurements: bench/results; "
                   "history: CHANGELOG):\n" + "\n".join(bad))
