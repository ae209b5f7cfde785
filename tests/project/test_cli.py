"""The ``jaxacct`` command line (jaxacct/__main__.py).

Regression (issue 19): ``jaxacct --eps 3`` was silently read as ``--eps0 3``
(argparse prefix matching). Abbreviations are refused now; each case exits
with argparse's usage error (status 2) before any computation.
"""

import pytest

from jaxacct.__main__ import main


@pytest.mark.parametrize("argv", [["--eps", "3"], ["--sig", "2"], ["--num-step", "10"],
                                  ["--num-epoch", "2"], ["--del", "1e-6"]])
def test_abbreviations_refused(argv, capsys):
  with pytest.raises(SystemExit) as e:
    main(argv)
  assert e.value.code == 2
  assert "unrecognized arguments" in capsys.readouterr().err


def test_full_names_listed(capsys):
  with pytest.raises(SystemExit) as e:
    main(["--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  for flag in ("--eps0", "--sigma", "--steps-per-epoch", "--num-selected", "--num-epochs",
               "--delta"):
    assert flag in out
  assert "--num-steps" not in out   # its deprecated spelling works, hidden (issue 56)
