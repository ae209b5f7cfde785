"""``jaxacct`` / ``python -m jaxacct``: the command line.

``jaxacct dpsgd ...``: the privacy statement of a DP-SGD run (see
``jaxacct dpsgd --help`` and :func:`jaxacct.dpsgd.statement`); ``--brief``
prints one line per run.

``jaxacct table ...``: a table of epsilon across sampling schemes. Default
setting (override with flags): sigma = 1.0, t = 10,000 steps in one epoch,
each example used once per epoch (random allocation k = 1, Poisson at rate
1/t), delta = 1e-10; for shuffling, n = t users each applying an eps0-LDP
randomizer with eps0 = 1.

``jaxacct`` alone (or ``--help``) lists the commands.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Callable, List, Tuple

from jaxacct import allocation, mechanisms, poisson, shuffle
from jaxacct._core.cache import compile_timer, enable_compilation_cache
from jaxacct._core.progress import progress
from jaxacct._core.version import __version__
from jaxacct.dpsgd import NEIGHBOURINGS, samplers, statement


#: the one meaning of "no amplification" (here and in ``jaxacct dpsgd``): the example's
#: own k E participations composed, with no amplification from which steps they are
NO_AMPLIFICATION = "No amplification (the example's k*E steps)"

# ``--help`` texts: plain (the module docstring is reStructuredText, for the docs)
_COMMANDS = (
    ("dpsgd", "the privacy statement of a DP-SGD run: the certified epsilon for your "
              "N, B, E and noise, or the noise for a target epsilon (--brief: one line)"),
    ("table", "a table of epsilon across sampling schemes (Poisson, balls-in-bins, "
              "shuffling, no amplification) for one setting"),
)
_MAIN_HELP = """\
usage: jaxacct <command> [flags]
       jaxacct --version | --help

jaxacct: a JAX privacy accountant for DP-SGD and the sampling schemes behind it.

commands:
{commands}

Run "jaxacct <command> --help" for a command's flags, e.g.
  jaxacct dpsgd --num-examples 60000 --batch-size 256 --num-epochs 10 \\
      --delta 1e-5 --target-epsilon 3 --brief
The README's table against other accountants: python examples/peer_table.py
"""

_TABLE_HELP = """\
A table of epsilon across sampling schemes.

Default setting (override with the flags): sigma = 1.0, t = 10,000 steps per
epoch, one epoch, each example used once per epoch (random allocation k = 1,
Poisson at rate k/t), delta = 1e-10; for shuffling, n = t users each applying
an eps0-LDP randomizer with eps0 = 1. The last row, no amplification, is the
Gaussian mechanism of the example's own k*E steps (sigma / sqrt(kE)).
"""


def _rows(args) -> List[Tuple[str, str, Callable[[float], float]]]:
  """(scheme, method, fn): ``fn(scale)`` computes the row's epsilon with sigma
  (or eps0 for shuffling) multiplied by ``scale`` (1 for the table; a new value
  for the optional second call, which shows whether new values recompile)."""
  q = args.num_selected / args.steps_per_epoch
  T = args.steps_per_epoch * args.num_epochs
  tight = {}

  def _tight(kind, scale):
    if scale not in tight:
      r = allocation.pld.allocation_pld_epsilon(
          sigma=args.sigma * scale, delta=args.delta, steps_per_epoch=args.steps_per_epoch,
          num_selected=args.num_selected, num_epochs=args.num_epochs)
      tight[scale] = {"upper": r.upper, "lower": r.lower}
    return tight[scale][kind]

  alloc = "Random allocation, k of t"
  shuf = f"Shuffling n={args.steps_per_epoch}, eps0={args.eps0:g}-LDP"
  return [
      ("Poisson subsampling, rate k/t", "RDP (upper)",
       lambda c: poisson.epsilon(q=q, sigma=args.sigma * c, num_steps=T,
                                 delta=args.delta).epsilon),
      ("Poisson subsampling, rate k/t", "PLD (upper)",
       lambda c: poisson.epsilon(q=q, sigma=args.sigma * c, num_steps=T, delta=args.delta,
                                 method="pld").epsilon),
      (alloc, "tight PLD (upper)", lambda c: _tight("upper", c)),
      # a lower bound of 0 says nothing (epsilon >= 0 always): "none"
      (alloc, "tight PLD (lower)", lambda c: _tight("lower", c) if _tight("lower", c) > 0
       else None),
      (alloc, "best RDP / analytic bound (upper)",
       lambda c: allocation.epsilon(
           sigma=args.sigma * c, steps_per_epoch=args.steps_per_epoch, delta=args.delta,
           num_selected=args.num_selected, num_epochs=args.num_epochs,
           methods=("rdp_direct", "rdp_add", "direct_add", "decomposition", "local")).epsilon),
      (shuf, "any eps0-LDP randomizer (upper)",
       lambda c: shuffle.epsilon(n=args.steps_per_epoch, eps0=args.eps0 * c, delta=args.delta,
                                 rounds=args.num_epochs).epsilon),
      (shuf, "binary randomized response (best)",
       lambda c: shuffle.epsilon(n=args.steps_per_epoch, eps0=args.eps0 * c, delta=args.delta,
                                 rounds=args.num_epochs, randomizer="binary_rr").epsilon),
      (NO_AMPLIFICATION, "exact Gaussian, sigma/sqrt(kE)",
       lambda c: mechanisms.Gaussian(
           args.sigma * c / (args.num_selected * args.num_epochs) ** 0.5).epsilon(args.delta).epsilon),
  ]


def timed_cell(fn, scale):
  """One table cell: ``(text, ok, CompileTime)`` of ``fn(scale)``.

  ``text`` is the value formatted for the table, ``"none"`` for a row with no
  value (a lower bound where none is known), or ``"ERROR <type>: <msg>"``
  (truncated to 60 characters) when the call raised; ``ok`` says which.
  ``CompileTime`` splits the call's wall time into compile and run.
  """
  cell, ok, ct, _ = _timed_value(fn, scale)
  return cell, ok, ct


def _timed_value(fn, scale):
  """:func:`timed_cell` plus the value itself (float, or None on error)."""
  val = None
  with compile_timer() as ct:
    try:
      v = fn(scale)
      val = None if v is None else float(v)
      cell, ok = ("none" if val is None else f"{val:12.6g}"), True
    except Exception as e:  # report, don't hide: a failing row fails the job
      cell, ok = f"ERROR {type(e).__name__}: {e}"[:60], False
  return cell, ok, ct, val


def _setup_logging():
  """Progress lines (jaxacct logger, INFO) go to stderr when there is no tqdm
  and no terminal; the table itself goes to stdout."""
  import logging
  lg = logging.getLogger("jaxacct")
  if not lg.handlers:
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("[jaxacct] %(message)s"))
    lg.addHandler(h)
    lg.setLevel(logging.INFO)
    lg.propagate = False


def main(argv=None) -> int:
  """``jaxacct``: the table, or ``jaxacct dpsgd ...``; the exit status.

  A reader that goes away (``jaxacct --json | head``) ends the run quietly:
  no ``BrokenPipeError`` traceback.
  """
  argv = sys.argv[1:] if argv is None else list(argv)
  try:
    try:
      return _dispatch(argv)
    finally:
      sys.stdout.flush()
  except BrokenPipeError:
    # what is left for stdout goes nowhere (the interpreter's last flush included)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


def _main_help() -> str:
  """``jaxacct --help``: the commands, ``dpsgd`` first, each wrapped at 79 columns."""
  import textwrap
  width = max(len(c) for c, _ in _COMMANDS)
  rows = [textwrap.fill(h, 79, initial_indent=f"  {c:<{width}}  ",
                        subsequent_indent=" " * (width + 4)) for c, h in _COMMANDS]
  return _MAIN_HELP.format(commands="\n".join(rows))


def _dispatch(argv) -> int:
  """The command ``argv`` names; the commands' list for none (or ``--help``).

  Table flags with no command (``jaxacct --sigma 2``, the table's old front
  door) still run the table, with one line on stderr, for one release.
  """
  if argv[:1] == ["dpsgd"]:
    return dpsgd_main(argv[1:])
  if argv[:1] == ["table"]:
    return table_main(argv[1:])
  if not argv or argv[0] in ("-h", "--help", "help"):
    print(_main_help(), end="")
    return 0
  if argv[0] == "--version":
    print(f"jaxacct {__version__}")
    return 0
  if not argv[0].startswith("-"):
    print(_main_help(), file=sys.stderr, end="")
    print(f"jaxacct: error: unknown command {argv[0]!r} (choose from "
          f"{', '.join(c for c, _ in _COMMANDS)})", file=sys.stderr)
    return 2
  print("jaxacct: the table's flags without a command are deprecated and will be "
        "removed in the next release; use jaxacct table " + " ".join(argv), file=sys.stderr)
  return table_main(argv)


def _epochs_flags(p, *, type, required=False):
  """``--num-epochs`` (shown) and ``--epochs`` (its hidden alias), one ``num_epochs``."""
  p.add_argument("--num-epochs", type=type, default=None,
                 help="epochs E" + ("" if required else " (default 1)")
                      + (" (an integer, except for poisson)" if required else ""))
  p.add_argument("--epochs", type=type, dest="num_epochs", default=None,
                 help=argparse.SUPPRESS)


def _steps_flags(p):
  """``--steps-per-epoch`` (shown) and ``--num-steps`` (its deprecated, hidden spelling:
  the library's ``num_steps`` is the whole run's count), one ``steps_per_epoch``."""
  p.add_argument("--steps-per-epoch", type=_count("steps-per-epoch"), default=None,
                 help="steps per epoch t (default 10,000); also the shuffling n")
  p.add_argument("--num-steps", type=_count("num-steps"), dest="steps_per_epoch", default=None,
                 help=argparse.SUPPRESS)


def _one_spelling(p, argv, new, old):
  """Both spellings of one flag at once are refused (argparse's error, naming both),
  as the Python doors refuse both names of one parameter; else the spelling given."""
  given = [a.split("=")[0] for a in argv if a.split("=")[0] in (new, old)]
  if len(set(given)) > 1:
    p.error(f"argument {old}: not allowed with {new}: {old} is its old spelling; give "
            f"{new} only")
  return given


def _steps_flag(p, argv):
  """The spelling of the steps flag the user gave (errors name it); a deprecation
  line on stderr for the old one."""
  given = _one_spelling(p, argv, "--steps-per-epoch", "--num-steps")
  if "--num-steps" in given:
    print("jaxacct: --num-steps is deprecated and will be removed in the next release; "
          "use --steps-per-epoch (the same value: steps per epoch t).", file=sys.stderr)
  return given[-1] if given else "--steps-per-epoch"


def _epochs_flag(p, argv):
  """The spelling of the epochs flag the user gave (errors name it)."""
  given = _one_spelling(p, argv, "--num-epochs", "--epochs")
  return given[-1] if given else "--num-epochs"


def table_main(argv) -> int:
  """``jaxacct``: the table of epsilon across sampling schemes (text or ``--json``)."""
  # allow_abbrev=False: "--eps 3" must not be read silently as "--eps0 3"
  p = argparse.ArgumentParser(prog="jaxacct table", description=_TABLE_HELP,
                              allow_abbrev=False,
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog="the other command: jaxacct dpsgd --help (privacy "
                                     "statement of a DP-SGD run)")
  p.add_argument("--version", action="version", version=f"jaxacct {__version__}")
  # every value is checked here, before any computation (argparse: one error line, status 2)
  p.add_argument("--sigma", type=_real("sigma"), default=1.0,
                 help="noise multiplier sigma > 0 (default 1.0)")
  _steps_flags(p)
  p.add_argument("--num-selected", type=_count("num-selected"), default=1,
                 help="k: steps per example per epoch, <= t (default 1)")
  _epochs_flags(p, type=_count("num-epochs"))
  p.add_argument("--delta", type=_real("delta", 0.0, 1.0), default=1e-10,
                 help="delta in (0, 1) (default 1e-10)")
  p.add_argument("--eps0", type=_real("eps0"), default=1.0,
                 help="local epsilon > 0 for shuffling (default 1.0)")
  p.add_argument("--no-cache", action="store_true",
                 help="do not use the persistent JAX compilation cache")
  p.add_argument("--cache-dir", default=None,
                 help="compilation cache directory (default $JAXACCT_CACHE_DIR/jax or "
                      "~/.cache/jaxacct/jax)")
  p.add_argument("--second-call", action="store_true",
                 help="time a second call of each row with sigma (eps0) x 1.001: "
                      "its compile time shows whether new values recompile")
  p.add_argument("--quiet", action="store_true", help="no progress output")
  p.add_argument("--json", action="store_true",
                 help="print the table as JSON on stdout (progress stays on stderr)")
  args = p.parse_args(argv)
  steps_flag = _steps_flag(p, argv)
  _epochs_flag(p, argv)
  if args.num_epochs is None:
    args.num_epochs = 1
  if args.steps_per_epoch is None:
    args.steps_per_epoch = 10_000
  if args.num_selected > args.steps_per_epoch:
    p.error(f"argument --num-selected: must be <= {steps_flag} = {args.steps_per_epoch}; "
            f"got {args.num_selected}")
  cache = None
  if not args.no_cache:
    try:
      cache = enable_compilation_cache(args.cache_dir)
    except OSError as e:   # e.g. a read-only home: run without the cache
      print(f"(compilation cache not enabled: {e})", file=sys.stderr)
  _setup_logging()
  text = not args.json
  if text:
    print(f"jaxacct: epsilon at delta={args.delta:g}, sigma={args.sigma:g}, "
          f"t={args.steps_per_epoch}, k={args.num_selected}, epochs={args.num_epochs}")
    print("first call = compile + run (compile: JAX tracing, lowering, XLA compilation or "
          "persistent-cache load); "
          + (f"compilation cache: {cache.path}" if cache else "compilation cache off"))
    head = f"{'scheme':<48} {'method':<36} {'epsilon':>12} {'first call':>10} " \
           f"{'compile':>9} {'run':>9}"
    if args.second_call:
      head += f" {'2nd call':>9} {'compile':>9}"
    print(head)
    print("-" * len(head))
  status = 0
  rows = _rows(args)
  records = []
  with progress(total=len(rows), desc="jaxacct rows", enabled=False if args.quiet else None
                ) as bar:
    for scheme, method, fn in rows:
      bar.set_description(f"jaxacct: {method} / {scheme}"[:70])
      if scheme.startswith("Shuffling") and args.num_epochs > 1:
        # why this row can take more than a few seconds (one line, stderr)
        bar.write(f"jaxacct: {method} / shuffling over {args.num_epochs} rounds: the PLD "
                  "of the per-round pair composed, and RDP curves (Chen et al.'s at the "
                  "orders that can decide epsilon)")
      cell, ok, ct, val = _timed_value(fn, 1.0)
      status |= 0 if ok else 1
      rec = {"scheme": scheme, "method": method, "epsilon": val,
             "error": None if ok else cell, "first_call_s": ct.total,
             "compile_s": ct.compile, "run_s": ct.run}
      line = (f"{scheme:<48} {method:<36} {cell:>12} {ct.total:9.2f}s {ct.compile:8.2f}s "
              f"{ct.run:8.2f}s")
      if args.second_call and ok:
        _, ok2, ct2 = timed_cell(fn, 1.001)
        status |= 0 if ok2 else 1
        line += f" {ct2.total:8.2f}s {ct2.compile:8.2f}s"
        rec.update(second_call_s=ct2.total, second_call_compile_s=ct2.compile)
      records.append(rec)
      if text:
        bar.echo(line)
      bar.update(1)
  if args.json:
    print(json.dumps({
        # "num_steps": the same value under its deprecated key, for one release
        "settings": {"sigma": args.sigma, "steps_per_epoch": args.steps_per_epoch,
                     "num_steps": args.steps_per_epoch,
                     "num_selected": args.num_selected, "num_epochs": args.num_epochs,
                     "delta": args.delta, "eps0": args.eps0},
        "compilation_cache": cache.path if cache else None,
        "rows": records}, indent=2))
  return status


def _count(name, lo=1):
  """argparse type: an integer >= ``lo`` (the error names the flag)."""
  def parse(s):
    try:
      v = int(s)
    except ValueError:
      raise argparse.ArgumentTypeError(f"must be an integer >= {lo}; got {s!r}") from None
    if v < lo:
      raise argparse.ArgumentTypeError(f"must be an integer >= {lo}; got {s!r}")
    return v
  parse.__name__ = name
  return parse


def _real(name, lo=0.0, hi=None):
  """argparse type: a real in (lo, hi) (open ends; the error names the flag)."""
  rng = f"({lo:g}, {'inf' if hi is None else f'{hi:g}'})"

  def parse(s):
    try:
      v = float(s)
    except ValueError:
      raise argparse.ArgumentTypeError(f"must be a real number in {rng}; got {s!r}") from None
    if not (v > lo and (v < hi if hi is not None else v < float("inf"))):
      raise argparse.ArgumentTypeError(f"must be a real number in {rng}; got {s!r}")
    return v
  parse.__name__ = name
  return parse


def _epochs(s):
  """``--num-epochs``: an int when integral (balls_in_bins, shuffle), else a real > 0."""
  v = _real("num-epochs")(s)
  return int(v) if v.is_integer() else v


_FLAGS = {"num_examples": "--num-examples", "batch_size": "--batch-size",
          "num_epochs": "--num-epochs", "delta": "--delta",
          "noise_multiplier": "--noise-multiplier", "target_epsilon": "--target-epsilon",
          "epsilon": "--target-epsilon", "sampling": "--sampling",
          "neighbouring": "--neighbouring"}


def _settings_flags(p) -> dict:
  """One flag per field of each registered sampler's settings (``--cycle-length``, ...):
  ``{field: flag}``; an int >= 1 each, its help from the field's metadata."""
  owners = {}
  for name in samplers.names():
    cls = samplers.get(name).settings
    for f in dataclasses.fields(cls) if cls is not None else ():
      owners.setdefault(f.name, ([], f.metadata.get("help", f.name)))[0].append(name)
  flags = {}
  for field, (names, text) in owners.items():
    flags[field] = "--" + field.replace("_", "-")
    p.add_argument(flags[field], type=_count(flags[field][2:]),
                   help=f"{text} ({', '.join(names)} only)")
  return flags


def dpsgd_main(argv=None) -> int:
  """``jaxacct dpsgd``: the privacy statement of a DP-SGD run (text or ``--json``).

  The statement (stdout) is :func:`jaxacct.dpsgd.statement`; ``--json``
  prints its ``to_dict()``. Progress goes to stderr only.
  """
  p = argparse.ArgumentParser(
      prog="jaxacct dpsgd", allow_abbrev=False,
      description="Privacy statement of a DP-SGD run: the certified epsilon bracket under "
                  "the sampler, Poisson at q = B/N and full batch (every example in every "
                  "step) side by side, the units, the divisor and the assumptions "
                  "(jaxacct.dpsgd.statement).")
  p.add_argument("--version", action="version", version=f"jaxacct {__version__}")
  # required flags are checked after parsing, so that a misspelt flag is reported as
  # unrecognized and every missing flag is named in one message
  p.add_argument("--num-examples", type=_count("num-examples"),
                 help="dataset size N (required)")
  p.add_argument("--batch-size", type=_real("batch-size"),
                 help="batch size B (the expected batch for poisson); updates divide the "
                      "noisy sum by B (required)")
  _epochs_flags(p, type=_epochs, required=True)
  p.add_argument("--delta", type=_real("delta", 0.0, 1.0), help="delta in (0, 1) (required)")
  g = p.add_mutually_exclusive_group()
  g.add_argument("--noise-multiplier", type=_real("noise-multiplier"),
                 help="sigma = noise std / clipping norm")
  g.add_argument("--target-epsilon", type=_real("target-epsilon"),
                 help="calibrate sigma: the smallest certified sigma with epsilon <= this "
                      "(searched in [0.01, 1e4]; a target met already at 0.01 is said so)")
  p.add_argument("--sampling", choices=samplers.names(), default="balls_in_bins",
                 help="batch sampler (default balls_in_bins)")
  settings = _settings_flags(p)
  p.add_argument("--neighbouring", choices=NEIGHBOURINGS,
                 help="neighbouring relation (default: the sampler's own, add_remove; "
                      "shuffle's add_remove is the zero-out relation: one example replaced "
                      "by a zero-gradient one; replace_one: shuffle, and the fixed-size "
                      "samplers' own)")
  out = p.add_mutually_exclusive_group()
  out.add_argument("--json", action="store_true", help="print the statement as JSON")
  out.add_argument("--brief", action="store_true",
                   help="print one line: sampling, sigma, its source, the certified epsilon "
                        "bracket (upper, lower or none), delta and the neighbouring relation, "
                        "as key=value fields (no progress output)")
  p.add_argument("--quiet", action="store_true", help="no progress output (stderr)")
  args, unknown = p.parse_known_args(argv)
  if unknown:
    p.error(f"unrecognized arguments: {' '.join(unknown)}")
  missing = [f for f, v in (("--num-examples", args.num_examples),
                            ("--batch-size", args.batch_size),
                            ("--num-epochs", args.num_epochs), ("--delta", args.delta))
             if v is None]
  if args.noise_multiplier is None and args.target_epsilon is None:
    missing.append("one of --noise-multiplier --target-epsilon")
  epochs_flag = _epochs_flag(p, argv)
  if missing:
    p.error(f"the following arguments are required: {', '.join(missing)}")
  batch = int(args.batch_size) if args.batch_size.is_integer() else args.batch_size
  _setup_logging()
  try:
    st = statement(num_examples=args.num_examples, batch_size=batch,
                   num_epochs=args.num_epochs, delta=args.delta,
                   noise_multiplier=args.noise_multiplier,
                   target_epsilon=args.target_epsilon, sampling=args.sampling,
                   neighbouring=args.neighbouring,
                   **{k: getattr(args, k) for k in settings if getattr(args, k) is not None},
                   progress=False if args.quiet or args.brief else None,
                   compare=not args.brief)
  except ValueError as e:   # a cross-flag error (B > N, ...): name the flag
    msg = str(e)
    names = {**_FLAGS, "num_epochs": epochs_flag, **settings}
    flags = [f for n, f in names.items() if msg.startswith(n) or f"{n}=" in msg
             or f"{n} " in msg.split(";")[0]]
    p.error(f"{'/'.join(dict.fromkeys(flags)) or 'invalid input'}: {msg}")
  print(json.dumps(st.to_dict(), indent=2) if args.json else st.brief() if args.brief
        else str(st))
  return 0


if __name__ == "__main__":
  sys.exit(main())
