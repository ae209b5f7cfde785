"""``python -m jaxacct.sweep``: one array door over a grid, on every device of every host.

One command per process; every process gets the same arguments except
``--process-id``::

    python -m jaxacct.sweep allocation.pld.epsilon --out run \\
        --axis sigma=lin:0.5:5:1000 --axis num_epochs=1,2,5,10 \\
        --set steps_per_epoch=234 --set delta=1e-6 \\
        --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0

The grid is the outer product of the ``--axis`` values (``v1,v2,...``,
``lin:a:b:n``, ``log:a:b:n`` or ``range:a:b[:step]``), broadcast with the
arrays of ``--grid FILE`` (``.npz``, or ``.json`` of name -> number or list);
``--set NAME=VALUE`` fixes an argument (a number, a word, or ``v1,v2,...``
for a list such as ``orders``). Doors: ``poisson.epsilon``,
``poisson.delta``, ``allocation.pld.epsilon``, ``allocation.pld.delta``,
``allocation.rdp``, ``shuffle.clone_epsilon``, ``shuffle.clone_delta``.

With ``--coordinator`` the processes join one ``jax.distributed`` runtime
(gloo collectives on the CPU) and the door runs with ``devices=`` all of their
devices (:mod:`jaxacct._core.sharding`): each process computes the blocks of
its own devices, every process gets the gathered result, and process 0 alone
reports progress and writes ``OUT.npz`` (the grid's arguments and the
results) and ``OUT.json`` (a summary with ``"complete": true``), each written
to a temporary name and renamed only once the whole result is there. Outputs
of an earlier run under ``OUT`` are removed first, so a run that fails leaves
no file that claims to be its result.

A process that dies fails the run: JAX's coordination service notices the
missing heartbeats within ``--heartbeat-timeout`` seconds and stops the other
processes; this launcher (which runs the computation in a child process)
then exits with status 1 and an error naming the lost process. Without the
launcher, call ``jax.distributed.initialize()`` yourself and pass
``devices=jax.devices()`` to a door: every process gets the whole result.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import signal
import subprocess
import sys

__all__: list = []   # a command, not a Python API (``python -m jaxacct.sweep --help``)

DOORS = ("poisson.epsilon", "poisson.delta", "allocation.pld.epsilon", "allocation.pld.delta",
         "allocation.rdp", "shuffle.clone_epsilon", "shuffle.clone_delta")


def parser() -> argparse.ArgumentParser:
  """The command line of ``python -m jaxacct.sweep`` (shared with its worker)."""
  p = argparse.ArgumentParser(prog="python -m jaxacct.sweep",
                              description="One jaxacct array door over a grid, on every "
                                          "device of every process.")
  p.add_argument("door", choices=DOORS)
  p.add_argument("--out", required=True, help="output path; writes OUT.npz and OUT.json")
  p.add_argument("--grid", help="arrays of door arguments (.npz, or .json name -> list)")
  p.add_argument("--axis", action="append", default=[], metavar="NAME=SPEC",
                 help="a grid axis: v1,v2,... | lin:a:b:n | log:a:b:n | range:a:b[:step]")
  p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                 help="a fixed argument (number, word, or v1,v2,... for a list)")
  p.add_argument("--coordinator", metavar="HOST:PORT", help="jax.distributed coordinator")
  p.add_argument("--num-processes", type=int, default=1)
  p.add_argument("--process-id", type=int, default=0)
  p.add_argument("--heartbeat-timeout", type=int, default=30, metavar="SECONDS",
                 help="a process silent this long fails the run (default 30)")
  p.add_argument("--layout", choices=("auto", "cpu", "accelerator"), default="auto",
                 help="kernel layout (jaxacct.set_layout)")
  p.add_argument("--repeat", type=int, default=1, metavar="N",
                 help="run the door N times (timing: the first run compiles)")
  p.add_argument("--quiet", action="store_true", help="no progress")
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  return p


def output_paths(out: str):
  """``(OUT.npz, OUT.json)`` for ``--out OUT`` (a trailing .npz/.json is dropped)."""
  base = re.sub(r"\.(npz|json)$", "", out)
  return base + ".npz", base + ".json"


def _check(args, p):
  if args.coordinator is None and args.num_processes != 1:
    p.error("--num-processes needs --coordinator HOST:PORT")
  if not 0 <= args.process_id < max(args.num_processes, 1):
    p.error(f"--process-id must be in [0, {args.num_processes}); got {args.process_id}")
  if not (args.grid or args.axis or args.set):
    p.error("give the grid: --grid FILE and/or --axis NAME=SPEC (and --set NAME=VALUE)")
  for item in args.axis + args.set:
    if "=" not in item:
      p.error(f"expected NAME=VALUE; got {item!r}")


def _lost(text: str, num: int, me: int) -> str:
  """What JAX's coordination service said about a lost process, in one line."""
  m = re.search(r"tasks are unhealthy \(stopped sending heartbeats\):\s*([\d,\s]+)", text)
  if m:
    ids = ", ".join(re.findall(r"\d+", m.group(1)))
    return (f"process {ids} of {num} was lost (no heartbeat from it); process {me} stopped, "
            "no result written")
  if "leader task" in text or "coordination service" in text.lower():
    return (f"process 0 of {num} (the coordinator) was lost or unreachable; process {me} "
            "stopped, no result written")
  return ""


def _supervise(argv) -> int:
  """Runs the worker (``python -m jaxacct._sweep``) as a child that dies with
  this process, relays its output, and turns a lost peer into one error line."""
  args = parser().parse_args(argv)
  cmd = [sys.executable, "-m", "jaxacct._sweep", *argv]
  kw = {}
  if sys.platform.startswith("linux"):
    kw["preexec_fn"] = _die_with_parent
  child = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace", **kw)
  tail = []
  try:
    for line in child.stderr:
      sys.stderr.write(line)
      sys.stderr.flush()
      tail = (tail + [line])[-400:]
    code = child.wait()
  except KeyboardInterrupt:
    child.send_signal(signal.SIGINT)
    code = child.wait()
  if code == 0:
    return 0
  if args.process_id == 0:
    for path in output_paths(args.out):   # only a finished run renames its outputs
      for tmp in (path + ".tmp",):
        if os.path.exists(tmp):
          os.remove(tmp)
  why = _lost("".join(tail), args.num_processes, args.process_id)
  msg = why or f"the sweep failed (worker exit status {code}); no result written"
  sys.stderr.write(f"jaxacct.sweep: error: {msg}\n")
  return 1


def _die_with_parent():   # pragma: no cover - runs in the child before exec
  ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


def main(argv=None) -> int:
  """Command-line entry (``python -m jaxacct.sweep``); returns the exit status."""
  argv = list(sys.argv[1:] if argv is None else argv)
  p = parser()
  args = p.parse_args(argv)
  _check(args, p)
  return _supervise([a for a in argv if a != "--worker"])


if __name__ == "__main__":
  sys.exit(main())
