"""``jaxacct dpsgd`` (jaxacct/__main__.py; issue 31, item 4) and the table's ``--json``.

The subprocess tests run ``sys.executable -m jaxacct`` in a fresh process
(JAXACCT_COMPILATION_CACHE=0 is inherited from tests/conftest.py), parse
stdout as JSON (progress may be on stderr, never on stdout) and check:

* calibration: N = 60,000, B = 256, E = 10, delta = 1e-5, target epsilon 3,
  balls_in_bins: sigma about 0.6835 (the issue's bisection on the tight
  allocation upper; tests/dpsgd/test_dpsgd.py), rtol 1e-3, with epsilon.upper <= 3;
* Poisson at sigma 0.7341: epsilon.upper equals dp_accounting 0.6.0's
  PLDAccountant (value_discretization_interval 1e-4) with
  PoissonSampledDpEvent(q, GaussianDpEvent(0.7341)) composed total_steps
  times, at the q and total_steps the JSON reports, computed live here
  (2.483503871 at q = 256/60000, T = 2344); absolute tolerance 1e-3.
"""

import json
import os
import subprocess
import sys

import pytest

from jaxacct.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = ["--num-examples", "60000", "--batch-size", "256", "--num-epochs", "10", "--delta",
        "1e-5"]


def _run(*args):
  env = dict(os.environ)
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  assert env.get("JAXACCT_COMPILATION_CACHE") == "0"      # set by conftest, inherited
  p = subprocess.run([sys.executable, "-m", "jaxacct", *args], capture_output=True,
                     text=True, env=env, cwd=ROOT, timeout=900)
  assert p.returncode == 0, p.stderr[-3000:]
  return json.loads(p.stdout)   # stdout is the JSON only


def test_cli_calibrates_sigma_for_target_epsilon():
  d = _run("dpsgd", *BASE, "--target-epsilon", "3", "--json")
  assert d["sampling"] == "balls_in_bins" and d["noise_multiplier_source"] == "calibrated"
  assert d["noise_multiplier"] == pytest.approx(0.6835, rel=1e-3)
  assert d["epsilon"]["upper"] <= 3.0
  assert d["epsilon"]["lower"] <= d["epsilon"]["upper"]
  assert d["target_epsilon"] == 3.0 and d["delta"] == 1e-5
  assert (d["sampling_probability"], d["steps_per_epoch"], d["total_steps"]) == (256 / 60000, 234,
                                                                           2340)
  assert d["divisor"] == 256


def test_cli_poisson_matches_dp_accounting():
  dpa = pytest.importorskip("dp_accounting")
  from dp_accounting.pld import pld_privacy_accountant
  d = _run("dpsgd", *BASE, "--sampling", "poisson", "--noise-multiplier", "0.7341", "--json")
  assert d["sampling"] == "poisson" and d["noise_multiplier"] == 0.7341
  assert d["sampling_probability"] == 256 / 60000 and d["total_steps"] == 2344   # ceil(E N / B)
  assert d["steps_per_epoch"] == 60000 / 256
  acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
  acc.compose(dpa.PoissonSampledDpEvent(d["sampling_probability"], dpa.GaussianDpEvent(0.7341)),
              d["total_steps"])
  ref = acc.get_epsilon(1e-5)
  assert ref == pytest.approx(2.4835, abs=1e-4)
  assert d["epsilon"]["upper"] == pytest.approx(ref, abs=1e-3)
  # the certified lower (the accountant's lower PLD) sits just below the upper and below
  # dp_accounting's pessimistic value
  assert d["epsilon"]["upper"] - 1e-3 <= d["epsilon"]["lower"] <= min(d["epsilon"]["upper"], ref)
  assert d["comparison"]["poisson"]["epsilon"] == d["epsilon"]["upper"]
  assert d["comparison"]["full_batch"]["epsilon"] > 100 * d["epsilon"]["upper"]


@pytest.mark.parametrize("argv, flag", [
    (["--num-examples", "-5"], "--num-examples"),
    (["--num-examples", "abc"], "--num-examples"),
    (["--batch-size", "60001"], "--batch-size"),          # B > N
    (["--batch-size", "0"], "--batch-size"),
    (["--epochs", "0"], "--epochs"),
    (["--epochs", "1.5"], "--epochs"),                    # balls_in_bins: an integer
    (["--delta", "1"], "--delta"),
    (["--noise-multiplier", "0"], "--noise-multiplier"),
    (["--sampling", "fixed"], "--sampling"),
    (["--neighbouring", "replace_one"], "--neighbouring"),   # balls_in_bins: add_remove only
])
def test_bad_flags_name_the_flag(argv, flag, capsys):
  args = dict(zip(BASE[::2], BASE[1::2]))
  args["--noise-multiplier"] = "1.0"
  extra = {}
  for k, v in zip(argv[::2], argv[1::2]):
    (args if k in args else extra)[k] = v
  with pytest.raises(SystemExit) as e:
    main(["dpsgd"] + [x for kv in {**args, **extra}.items() for x in kv])
  assert e.value.code == 2
  err = capsys.readouterr().err
  assert flag in err, err


@pytest.mark.parametrize("sigma_target", [[], ["--noise-multiplier", "1", "--target-epsilon",
                                                 "3"]])
def test_exactly_one_of_sigma_and_target(sigma_target, capsys):
  with pytest.raises(SystemExit) as e:
    main(["dpsgd", *BASE, *sigma_target])
  assert e.value.code == 2
  err = capsys.readouterr().err
  assert "--noise-multiplier" in err and "--target-epsilon" in err


def test_dpsgd_help_lists_the_flags(capsys):
  with pytest.raises(SystemExit) as e:
    main(["dpsgd", "--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  for flag in ("--num-examples", "--batch-size", "--num-epochs", "--delta", "--noise-multiplier",
               "--target-epsilon", "--sampling", "--neighbouring", "--json"):
    assert flag in out
  for s in ("balls_in_bins", "poisson", "shuffle"):
    assert s in out


def test_table_help_lists_json_and_the_subcommand(capsys):
  with pytest.raises(SystemExit) as e:
    main(["table", "--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  assert "--json" in out and "jaxacct dpsgd" in out


@pytest.mark.slow
def test_table_json(capsys):
  """The table as JSON: every row has a value and no error (small setting)."""
  status = main(["table", "--json", "--quiet", "--no-cache", "--steps-per-epoch", "100",
                 "--delta", "1e-6"])
  out = capsys.readouterr().out
  d = json.loads(out)
  assert status == 0
  assert d["settings"]["steps_per_epoch"] == 100 and len(d["rows"]) == 8
  assert all(r["error"] is None and r["epsilon"] > 0 for r in d["rows"])


# issue 55 item 6: what a person types
def test_dpsgd_all_missing_flags_in_one_message(capsys):
  with pytest.raises(SystemExit) as e:
    main(["dpsgd"])
  assert e.value.code == 2
  err = capsys.readouterr().err
  assert ("the following arguments are required: --num-examples, --batch-size, --num-epochs, "
          "--delta, one of --noise-multiplier --target-epsilon") in err


def test_dpsgd_misspelt_flag_is_unrecognized(capsys):
  with pytest.raises(SystemExit) as e:
    main(["dpsgd", "--num-examples", "1000", "--batch-size", "10", "--num-epochs", "1",
          "--delta", "1e-5", "--noise-multipler", "1"])
  assert e.value.code == 2
  err = capsys.readouterr().err
  assert "unrecognized arguments: --noise-multipler 1" in err and "required" not in err


def test_readme_commands_use_shown_flags(capsys):
  # the README's first command uses what --help shows, not the hidden --epochs alias
  import pathlib
  import re
  readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
  block = readme.split("<!-- ci:commands")[1].split("<!-- /ci:commands")[0]
  with pytest.raises(SystemExit):
    main(["dpsgd", "--help"])
  shown = set(re.findall(r"(--[a-z][a-z-]+)", capsys.readouterr().out))
  used = set(re.findall(r"jaxacct dpsgd ([^;]*)", block)[0].split()) & set(
      re.findall(r"(--[a-z][a-z-]+)", block))
  assert used and used <= shown, used - shown


@pytest.mark.parametrize("table", [
    False, pytest.param(True, marks=pytest.mark.slow)])   # the table: compiles, ~4 s
def test_quiet_prints_only_the_answer(capsys, table):
  # Progress forced on with no delay (the terminal backend): without --quiet
  # it reaches stderr; with --quiet stderr stays empty and stdout is the answer.
  import jaxacct
  from jaxacct._core import progress as P
  argv = (["table", "--steps-per-epoch", "100", "--delta", "1e-6", "--no-cache"] if table else
          ["dpsgd", "--num-examples", "1000", "--batch-size", "10", "--num-epochs", "2",
           "--delta", "1e-5", "--noise-multiplier", "1.0"])
  prev, prev_on = P.configure_progress(delay=0.0, interval=0.0, backend="terminal"), \
      jaxacct.set_progress(True)
  try:
    assert main(argv) == 0
    loud = capsys.readouterr()
    assert main([*argv, "--quiet"]) == 0
    quiet = capsys.readouterr()
  finally:
    P.configure_progress(**prev)
    jaxacct.set_progress(prev_on)
  assert loud.err and quiet.err == "", (loud.err, quiet.err)
  assert quiet.out == loud.out or table   # the table's timing columns differ by run
  assert ("Epsilon at delta = 1e-05" if not table else "No amplification") in quiet.out


# issue 67: a brief output for scripts and the README; statements that say only what is true
SMALL = ["dpsgd", "--num-examples", "1000", "--batch-size", "10", "--num-epochs", "2",
         "--delta", "1e-5"]


def test_brief_is_one_line_per_run(capsys):
  # the statement is ~20 lines even with --quiet; --brief is one line of key=value
  # fields, the same numbers as the statement (to 6 significant digits), no progress
  from jaxacct.dpsgd import statement
  for sampling in ("balls_in_bins", "shuffle"):
    assert main([*SMALL, "--noise-multiplier", "1.0", "--sampling", sampling, "--brief"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and len(out.splitlines()) == 1, (out, err)
    fields = dict(kv.split("=", 1) for kv in out.split())
    st = statement(num_examples=1000, batch_size=10, num_epochs=2, delta=1e-5,
                   noise_multiplier=1.0, sampling=sampling, progress=False)
    assert fields == {
        "sampling": sampling, "sigma": "1", "source": "given",
        "epsilon_upper": f"{st.epsilon_upper:.6g}",
        "epsilon_lower": "none" if st.epsilon_lower is None else f"{st.epsilon_lower:.6g}",
        "delta": "1e-05", "neighbouring": st.neighbouring_relation}
  assert fields["neighbouring"] == "zero_out"      # shuffle's add_remove, named as it is


def test_brief_and_json_are_exclusive(capsys):
  with pytest.raises(SystemExit) as e:
    main([*SMALL, "--noise-multiplier", "1.0", "--brief", "--json"])
  assert e.value.code == 2
  assert "not allowed with" in capsys.readouterr().err


def test_readme_first_command_is_brief():
  # the README's first command prints one line per sampler: its table's numbers
  import pathlib
  readme = (pathlib.Path(ROOT) / "README.md").read_text()
  block = readme.split("<!-- ci:commands")[1].split("<!-- /ci:commands")[0]
  first = [ln for ln in block.splitlines() if "jaxacct dpsgd" in ln][0]
  assert "--brief" in first and "--sampling $s" in first


def test_target_met_at_the_search_floor_says_so(capsys):
  # issue 67: --target-epsilon 1e6 printed sigma 0.01 as the "smallest certified sigma
  # with epsilon <= 1e+06"; 0.01 is the search bracket's floor (epsilon there is far
  # below the target), and the statement says so (text, --brief and --json)
  # (replace_one: no Poisson row, whose refusal at sigma 0.01 takes seconds)
  argv = [*SMALL, "--target-epsilon", "1e6", "--sampling", "shuffle", "--neighbouring",
          "replace_one"]
  assert main([*argv, "--quiet"]) == 0
  text = capsys.readouterr().out
  assert "calibration stopped at its search floor, not the smallest sigma" in text
  assert "smallest certified sigma with epsilon" not in text
  assert main([*argv, "--brief"]) == 0
  assert "source=search_floor" in capsys.readouterr().out
  assert main([*argv, "--json", "--quiet"]) == 0
  d = json.loads(capsys.readouterr().out)
  assert d["noise_multiplier_source"] == "search_floor"
  assert d["noise_multiplier"] == pytest.approx(0.02, rel=1e-12)   # 2 x 0.01: sensitivity 2
  assert d["epsilon"]["upper"] <= 1e6
