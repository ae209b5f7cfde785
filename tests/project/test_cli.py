"""The ``jaxacct`` command line (jaxacct/__main__.py).

Regression (issue 19): ``jaxacct --eps 3`` was silently read as ``--eps0 3``
(argparse prefix matching). Abbreviations are refused now; each case exits
with argparse's usage error (status 2) before any computation.

Issue 67: ``jaxacct`` alone (or ``--help``) lists the commands, ``dpsgd``
first; the table of schemes is ``jaxacct table``.
"""

import pytest

from jaxacct.__main__ import main


@pytest.mark.parametrize("command", [["table"], []])   # []: the table's old front door
@pytest.mark.parametrize("argv", [["--eps", "3"], ["--sig", "2"], ["--num-step", "10"],
                                  ["--num-epoch", "2"], ["--del", "1e-6"]])
def test_abbreviations_refused(argv, command, capsys):
  with pytest.raises(SystemExit) as e:
    main([*command, *argv])
  assert e.value.code == 2
  assert "unrecognized arguments" in capsys.readouterr().err


def test_full_names_listed(capsys):
  with pytest.raises(SystemExit) as e:
    main(["table", "--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  for flag in ("--eps0", "--sigma", "--steps-per-epoch", "--num-selected", "--num-epochs",
               "--delta"):
    assert flag in out
  assert "--num-steps" not in out   # its deprecated spelling works, hidden (issue 56)


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"], ["help"]])
def test_jaxacct_alone_lists_the_commands_dpsgd_first(argv, capsys):
  # issue 67: `jaxacct` alone printed a table with defaults unrelated to the user's
  # run (t = 10,000, delta = 1e-10), and dpsgd only in the help's epilog
  assert main(argv) == 0
  out, err = capsys.readouterr()
  assert err == "" and "epsilon at delta" not in out   # help, no table computed
  commands = out.split("commands:")[1].split("\n\n")[0].splitlines()
  names = [ln.split()[0] for ln in commands if ln.startswith("  ") and ln[2] != " "]
  assert names == ["dpsgd", "table"], out
  assert "jaxacct <command> --help" in out and "examples/peer_table.py" in out


def test_unknown_command_is_refused(capsys):
  assert main(["tabel"]) == 2
  out, err = capsys.readouterr()
  assert out == "" and "unknown command 'tabel' (choose from dpsgd, table)" in err


def test_table_flags_with_no_command_still_run_the_table_and_say_so(capsys):
  with pytest.raises(SystemExit) as e:
    main(["--sigma", "0"])          # refused before any computation
  assert e.value.code == 2
  err = capsys.readouterr().err
  assert "deprecated" in err and "use jaxacct table --sigma 0" in err
  assert "jaxacct table: error: argument --sigma" in err
