"""The ``jaxacct`` command line as a new user meets it (issue 46, item 6).

* the table checks its input up front: a bad value is one argparse error line
  naming the flag, exit status 2, no traceback and no table (``--num-steps 0``
  was a ``ZeroDivisionError`` traceback; ``--sigma -1``, ``--delta 2``,
  ``--eps0 -1`` ran the whole table with the errors in cut-off cells);
* "no amplification" means one thing: the example's own k*E steps (the
  table's last row, ``jaxacct dpsgd --sampling shuffle``); the statement's
  sigma / sqrt(T) row is "full batch";
* ``--num-epochs`` in both commands (``--epochs``, the old spelling of
  ``jaxacct dpsgd``, a hidden alias in both);
* ``--help`` is plain text (no reStructuredText markup); ``--version``;
* a reader that goes away (``jaxacct --json | head``) gives no
  ``BrokenPipeError`` traceback;
* issue 67: the table is ``jaxacct table`` (its flags with no command still
  run it, with one line on stderr); both spellings of one flag at once
  (``--num-steps 100 --steps-per-epoch 200``) are refused, not one taken.
"""

import json
import os
import re
import subprocess
import sys

import pytest

import jaxacct
from jaxacct.__main__ import NO_AMPLIFICATION, main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DPSGD = ["dpsgd", "--num-examples", "60000", "--batch-size", "256", "--delta", "1e-5",
         "--noise-multiplier", "1.0"]


def _env():
  env = dict(os.environ)
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  return env


@pytest.mark.parametrize("argv, flag", [
    (["--steps-per-epoch", "0"], "--steps-per-epoch"),
    (["--steps-per-epoch", "ten"], "--steps-per-epoch"),
    (["--num-steps", "0"], "--num-steps"),   # the deprecated spelling names itself
    (["--sigma", "-1"], "--sigma"),
    (["--sigma", "0"], "--sigma"),
    (["--delta", "2"], "--delta"),
    (["--delta", "0"], "--delta"),
    (["--eps0", "-1"], "--eps0"),
    (["--num-selected", "0"], "--num-selected"),
    (["--num-selected", "5", "--steps-per-epoch", "3"], "--num-selected"),
    (["--num-epochs", "0"], "--num-epochs"),
    (["--epochs", "0"], "--epochs"),
])
def test_table_checks_input_up_front(argv, flag, capsys):
  with pytest.raises(SystemExit) as e:
    main(["table", *argv])
  assert e.value.code == 2
  out, err = capsys.readouterr()
  assert out == ""                       # no table, not even its header
  lines = err.strip().splitlines()
  assert lines[-1].startswith(f"jaxacct table: error: argument {flag}:"), err
  assert lines[0].startswith("usage:")   # the usage (wrapped), then one error line
  assert [ln for ln in lines if not ln.startswith(("usage:", " "))] == lines[-1:], err
  assert "Traceback" not in err


def test_num_steps_zero_in_a_fresh_process():
  p = subprocess.run([sys.executable, "-m", "jaxacct", "table", "--steps-per-epoch", "0"],
                     env=_env(),
                     cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert p.returncode == 2 and p.stdout == ""
  assert "Traceback" not in p.stderr and "ZeroDivisionError" not in p.stderr
  assert "argument --steps-per-epoch: must be an integer >= 1; got '0'" in p.stderr


def test_deprecated_num_steps_flag_still_works_and_says_so(capsys):
  # issue 56: --num-steps (the library's whole-run count) was this table's steps per
  # epoch; it is read as --steps-per-epoch for one release, with a line on stderr
  with pytest.raises(SystemExit) as e:
    main(["table", "--num-selected", "5", "--num-steps", "3"])
  assert e.value.code == 2
  out, err = capsys.readouterr()
  assert out == ""
  assert ("jaxacct: --num-steps is deprecated and will be removed in the next release; "
          "use --steps-per-epoch") in err
  assert err.strip().splitlines()[-1] == (
      "jaxacct table: error: argument --num-selected: must be <= --num-steps = 3; got 5")


@pytest.mark.parametrize("argv, old, new", [
    (["--num-steps", "100", "--steps-per-epoch", "200"], "--num-steps", "--steps-per-epoch"),
    (["--steps-per-epoch=200", "--num-steps=100"], "--num-steps", "--steps-per-epoch"),
    (["--num-steps", "100", "--steps-per-epoch", "100"], "--num-steps", "--steps-per-epoch"),
    (["--epochs", "2", "--num-epochs", "3"], "--epochs", "--num-epochs"),
])
@pytest.mark.parametrize("command", [["table"], []])   # [] : the table's old front door
def test_both_spellings_of_one_flag_are_refused(argv, old, new, command, capsys):
  # issue 67: `jaxacct --num-steps 100 --steps-per-epoch 200` took one of the two
  # values silently; both spellings at once are refused, as the Python doors refuse
  # both names of one parameter (even with equal values)
  with pytest.raises(SystemExit) as e:
    main([*command, *argv])
  assert e.value.code == 2
  out, err = capsys.readouterr()
  assert out == "" and "Traceback" not in err
  assert err.strip().splitlines()[-1] == (
      f"jaxacct table: error: argument {old}: not allowed with {new}: {old} is its old "
      f"spelling; give {new} only"), err


def test_both_epochs_spellings_refused_in_dpsgd(capsys):
  with pytest.raises(SystemExit) as e:
    main([*DPSGD, "--num-epochs", "2", "--epochs", "3"])
  assert e.value.code == 2
  err = capsys.readouterr().err
  assert "argument --epochs: not allowed with --num-epochs" in err, err


@pytest.mark.slow
def test_deprecated_num_steps_flag_gives_the_same_table(capsys):
  rows = {}
  for flag in ("--steps-per-epoch", "--num-steps"):
    assert main(["table", "--json", "--quiet", "--no-cache", flag, "100", "--delta",
                 "1e-6"]) == 0
    out, err = capsys.readouterr()
    d = json.loads(out)
    rows[flag] = [(r["scheme"], r["epsilon"]) for r in d["rows"]]
    assert d["settings"]["steps_per_epoch"] == d["settings"]["num_steps"] == 100
    assert ("deprecated" in err) == (flag == "--num-steps")
  assert rows["--num-steps"] == rows["--steps-per-epoch"]   # bitwise the same


def test_no_amplification_has_one_meaning(capsys):
  # the table's row: the example's k*E steps composed (sigma / sqrt(kE)), the
  # meaning of jaxacct.dpsgd's shuffle sampling; not "each step sees the example"
  assert "k*E steps" in NO_AMPLIFICATION and "each step" not in NO_AMPLIFICATION
  with pytest.raises(SystemExit):
    main(["table", "--help"])
  assert "sigma / sqrt(kE)" in capsys.readouterr().out
  with pytest.raises(SystemExit):
    main(["dpsgd", "--help"])
  out = capsys.readouterr().out
  assert "full batch" in out and "no amplification" not in out.lower()



@pytest.mark.parametrize("rel", ["README.md", "docs/getting_started.md",
                                 "docs/how-to/privacy_statement.md"])
def test_docs_call_the_statements_sigma_sqrt_T_row_full_batch(rel):
  # The prose that describes the statement names its rows as the statement
  # does: "full batch" (every example in every step), never "no amplification"
  # (they said "with no amplification beside it", "... side by side",
  # "no amplification (every example in every step)").
  text = " ".join(open(os.path.join(ROOT, rel), encoding="utf-8").read().split())
  assert "full batch" in text, rel
  for m in re.finditer(r"no amplification", text, re.IGNORECASE):
    after = text[m.end():m.end() + 40]
    assert not re.match(r"\W*(\(every example|beside|side by side)", after), (rel, after)

@pytest.mark.parametrize("argv", [["table", "--help"], ["dpsgd", "--help"]])
def test_help_is_plain_text(argv, capsys):
  with pytest.raises(SystemExit) as e:
    main(argv)
  assert e.value.code == 0
  out = capsys.readouterr().out
  for markup in ("``", ":func:", ":mod:", ":class:", ".. "):
    assert markup not in out, markup
  assert "--num-epochs" in out and "--epochs" not in out.replace("--num-epochs", "")
  assert "--version" in out


@pytest.mark.parametrize("argv", [["--version"], ["dpsgd", "--version"],
                                  ["table", "--version"]])
def test_version(argv, capsys):
  try:
    code = main(argv)
  except SystemExit as e:   # argparse's --version
    code = e.code
  assert code == 0
  assert capsys.readouterr().out.strip() == f"jaxacct {jaxacct.__version__}"


def test_epochs_spellings_in_dpsgd(capsys):
  # --epochs (the old spelling) still works, hidden; the errors name the spelling given
  for flag in ("--num-epochs", "--epochs"):
    with pytest.raises(SystemExit) as e:
      main([*DPSGD, flag, "1.5"])   # balls_in_bins needs an integer number of epochs
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{flag}: " in err and "Traceback" not in err, err
  with pytest.raises(SystemExit) as e:
    main(DPSGD)
  assert e.value.code == 2
  assert "required: --num-epochs" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--version"], ["--help"], [], ["dpsgd", "--help"],
                                  ["table", "--help"]])
def test_closed_pipe_gives_no_traceback(argv):
  """``jaxacct ... | head``: the reader is gone before jaxacct writes."""
  p = subprocess.Popen([sys.executable, "-m", "jaxacct", *argv], env=_env(), cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  p.stdout.close()
  err = p.stderr.read().decode()
  p.wait(timeout=300)
  assert "Traceback" not in err and "BrokenPipeError" not in err, err
  assert p.returncode in (0, 1)
