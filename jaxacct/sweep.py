"""``python -m jaxacct.sweep``: one array door over a grid, on every device of every host.

One command per process; every process gets the same arguments except
``--process-id``::

    python -m jaxacct.sweep allocation.pld.epsilon --out run \\
        --axis sigma=lin:0.5:5:1000 --axis num_epochs=1,2,5,10 \\
        --set steps_per_epoch=234 --set delta=1e-6 \\
        --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0

The grid is the outer product of the ``--axis`` values, broadcast with the
arrays of ``--grid FILE``; ``--set NAME=VALUE`` fixes an argument; each name
is given once. Everything is checked before anything is computed or written
(:func:`check`); no file is deleted, and ``OUT.npz``/``OUT.json`` replace an
earlier result only once both are whole.

With ``--coordinator HOST:PORT`` the processes join one ``jax.distributed``
runtime (gloo on the CPU); process 0's coordination service listens on
``HOST:PORT`` only (``--coordinator-bind`` widens it) and has no
authentication. The processes all-gather a digest of their inputs and refuse
to run unless it agrees; the door then runs with ``devices=`` all their
devices. A process that does not join within ``--join-timeout`` seconds or
stops sending heartbeats fails the run, named in one error line (the
computation runs in a child process). docs/how-to/multi_device.md has the
details.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import math
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile

import numpy as np

__all__: list = []   # a command, not a Python API (``python -m jaxacct.sweep --help``)

DOORS = ("poisson.epsilon", "poisson.delta", "allocation.pld.epsilon", "allocation.pld.delta",
         "allocation.rdp", "shuffle.clone_epsilon", "shuffle.clone_delta")
#: The most grid points one sweep takes (larger grids: several sweeps).
MAX_POINTS = 2**31
SPECS = "v1,v2,... | lin:a:b:n | log:a:b:n | range:a:b[:step]"


def _positive_int(text: str) -> int:
  try:
    v = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected a whole number >= 1; got {text!r}") from None
  if v < 1:
    raise argparse.ArgumentTypeError(f"expected a whole number >= 1; got {text!r}")
  return v


def parser() -> argparse.ArgumentParser:
  """The command line of ``python -m jaxacct.sweep`` (shared with its worker)."""
  p = argparse.ArgumentParser(prog="python -m jaxacct.sweep",
                              description="One jaxacct array door over a grid, on every "
                                          "device of every process.")
  p.add_argument("door", choices=DOORS)
  p.add_argument("--out", required=True,
                 help="output path OUT (a file name, not a folder): writes OUT.npz and OUT.json")
  p.add_argument("--grid", help="arrays of door arguments (.npz, or .json name -> list)")
  p.add_argument("--axis", action="append", default=[], metavar="NAME=SPEC",
                 help=f"a grid axis: {SPECS}")
  p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                 help="a fixed argument (number, word, or v1,v2,... for a list)")
  p.add_argument("--coordinator", metavar="HOST:PORT", help="jax.distributed coordinator "
                 "(process 0's host; its service listens there only)")
  p.add_argument("--coordinator-bind", metavar="HOST:PORT",
                 help="where process 0's coordination service listens (default: the "
                      "--coordinator address; 0.0.0.0:PORT listens on every interface)")
  p.add_argument("--num-processes", type=_positive_int, default=1)
  p.add_argument("--process-id", type=int, default=0)
  p.add_argument("--heartbeat-timeout", type=_positive_int, default=30, metavar="SECONDS",
                 help="a process silent this long fails the run (default 30)")
  p.add_argument("--join-timeout", type=_positive_int, default=None, metavar="SECONDS",
                 help="a process that has not joined this long after the start fails the "
                      "run (default: --heartbeat-timeout)")
  p.add_argument("--layout", choices=("auto", "cpu", "accelerator"), default="auto",
                 help="kernel layout (jaxacct.set_layout)")
  p.add_argument("--repeat", type=_positive_int, default=1, metavar="N",
                 help="run the door N times (timing: the first run compiles)")
  p.add_argument("--quiet", action="store_true", help="no progress")
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  return p


# ---------------------------------------------------------------------------
# the grid: specs, the grid file, names
# ---------------------------------------------------------------------------

def _number(tok: str):
  tok = tok.strip()
  try:
    return int(tok)
  except ValueError:
    pass
  try:
    return float(tok)
  except ValueError:
    return tok


def _finite(x) -> bool:
  return isinstance(x, (int, float)) and math.isfinite(x)


def values(spec: str, where: str):
  """The values of an ``--axis``/``--set`` spec; ``ValueError`` naming
  ``where`` (e.g. ``--axis sigma=lin:1:2``) for a malformed one."""
  kind, colon, rest = spec.partition(":")
  if colon and kind in ("lin", "log", "range"):
    parts = [_number(x) for x in rest.split(":")]
    if not all(_finite(x) for x in parts):
      raise ValueError(f"{where}: {kind}: takes finite numbers ({SPECS}); got {spec!r}")
    if kind == "range":
      if len(parts) not in (2, 3):
        raise ValueError(f"{where}: range needs range:a:b or range:a:b:step; got {spec!r}")
      start, stop, step = parts + [1] * (3 - len(parts))
      if step == 0:
        raise ValueError(f"{where}: the step of range:a:b:step must not be 0; got {spec!r}")
      count = math.ceil((stop - start) / step)
      if count < 1:
        raise ValueError(f"{where}: range:{rest} has no values (b must be beyond a in the "
                         f"direction of step); got {spec!r}")
      if count > MAX_POINTS:
        raise ValueError(f"{where}: range:{rest} has {count} values; at most {MAX_POINTS}")
      return np.arange(start, stop, step)
    if len(parts) != 3:
      raise ValueError(f"{where}: {kind} needs {kind}:a:b:n (three numbers); got {spec!r}")
    a, b, n = parts
    if not isinstance(n, int) or not 1 <= n <= MAX_POINTS:
      raise ValueError(f"{where}: the count n of {kind}:a:b:n must be a whole number in "
                       f"[1, {MAX_POINTS}]; got {spec!r}")
    if kind == "log" and not (a > 0 and b > 0):
      raise ValueError(f"{where}: log:a:b:n needs a > 0 and b > 0 (a geometric sequence); "
                       f"got {spec!r}")
    return (np.linspace if kind == "lin" else np.geomspace)(float(a), float(b), n)
  toks = spec.split(",")
  if any(not t.strip() for t in toks):
    raise ValueError(f"{where}: an empty value in {spec!r} (expected {SPECS})")
  vals = [_number(t) for t in toks]
  return np.asarray(vals) if len(vals) > 1 else vals[0]


def _name_value(item: str, flag: str):
  name, eq, spec = item.partition("=")
  name = name.strip()
  if not eq:
    raise ValueError(f"{flag} expects NAME=VALUE; got {item!r}")
  if not name.isidentifier() or name == "devices":
    raise ValueError(f"{flag} {item}: {name!r} is not an argument name")
  if not spec.strip():
    raise ValueError(f"{flag} {item}: no value after '='")
  return name, spec.strip()


def _numeric(a: np.ndarray) -> bool:
  return a.dtype.kind in "biuf"


_NPZ_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_GRID_FORMAT = ".npz of named numeric arrays, or .json of name -> number or list of numbers"


def _open_regular(path: str, where: str):
  """A binary file object of ``path``, opened without blocking (a FIFO or a
  device never stalls the launcher) and refused unless it is a regular file."""
  flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
  try:
    fd = os.open(path, flags)
  except FileNotFoundError:
    raise ValueError(f"{where}: no such file") from None
  except OSError as e:
    raise ValueError(f"{where}: cannot be read ({e.strerror or e})") from None
  st = os.fstat(fd)
  if not stat.S_ISREG(st.st_mode):
    os.close(fd)
    kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)"
            if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
            else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "not a regular file")
    raise ValueError(f"{where}: cannot be read: it is {kind}; a grid is a regular file "
                     f"({_GRID_FORMAT})")
  os.set_blocking(fd, True)
  return os.fdopen(fd, "rb")


def _json_grid(f, bad: str) -> dict:
  try:
    raw = json.loads(f.read().decode("utf-8"))
  except Exception as e:   # noqa: BLE001 -- any parse failure (RecursionError too) names the file
    raise ValueError(f"{bad}: {type(e).__name__}: {str(e)[:200]}") from None
  if not isinstance(raw, dict):
    raise ValueError(f"{bad}: the top level is not an object")
  arrays = {}
  for k, v in raw.items():
    try:
      a = np.asarray(v)
    except Exception:   # noqa: BLE001 -- ragged, too deep
      raise ValueError(f"{bad}: {k!r} is not a number or a rectangular list") from None
    if not _numeric(a):
      raise ValueError(f"{bad}: {k!r} is not a number or a list of numbers")
    arrays[k] = a
  return arrays


def _npz_grid(f, bad: str) -> dict:
  if f.read(4) not in _NPZ_MAGIC:
    raise ValueError(f"{bad}: not an .npz (zip) file")
  f.seek(0)
  arrays = {}
  try:
    with np.load(f, allow_pickle=False) as z:
      for k in z.files:
        arrays[k] = z[k]
  except Exception as e:   # noqa: BLE001 -- BadZipFile, object arrays, truncation
    why = ("an array holds Python objects, which are never loaded" if "allow_pickle" in str(e)
           else f"{type(e).__name__}: {str(e)[:200]}")
    raise ValueError(f"{bad}: {why}") from None
  for k, a in arrays.items():
    if not _numeric(a):
      raise ValueError(f"{bad}: array {k!r} has dtype {a.dtype}, not numbers")
  return arrays


def load_grid(path: str) -> dict:
  """The named arrays of ``--grid path``; ``ValueError`` naming the file when
  it is missing, not a regular file, or not a grid (nothing in it is
  unpickled; any failure to parse it is such an error)."""
  where = f"--grid {path}"
  bad = f"{where} is not a valid grid ({_GRID_FORMAT})"
  with _open_regular(path, where) as f:
    arrays = _json_grid(f, bad) if path.endswith(".json") else _npz_grid(f, bad)
  if not arrays:
    raise ValueError(f"{bad}: it holds no arrays (name each door argument it gives)")
  for k in arrays:
    if not k.isidentifier() or k == "devices":
      raise ValueError(f"{bad}: {k!r} is not an argument name")
  return arrays


def grid(args, sources=None):
  """``(arrays, fixed)``: the grid's broadcast arrays by name, and the fixed
  arguments; ``ValueError`` naming the flag for anything malformed.
  ``sources``: a dict, filled with the flag that gave each name."""
  arrays = load_grid(args.grid) if args.grid else {}
  source = {k: f"--grid {args.grid}" for k in arrays} if sources is None else sources
  source.update({k: f"--grid {args.grid}" for k in arrays})
  axes = []
  for item in args.axis:
    name, spec = _name_value(item, "--axis")
    if name in source:
      raise ValueError(f"--axis {item}: {name} is already given by {source[name]}")
    v = np.atleast_1d(values(spec, f"--axis {item}"))
    if not _numeric(v):
      raise ValueError(f"--axis {item}: axis values must be numbers ({SPECS})")
    source[name] = f"--axis {item}"
    axes.append((name, v))
  fixed = {}
  for item in args.set:
    name, spec = _name_value(item, "--set")
    if name in source:
      raise ValueError(f"--set {item}: {name} is already given by {source[name]}")
    source[name] = f"--set {item}"
    x = values(spec, f"--set {item}")
    fixed[name] = x.tolist() if isinstance(x, np.ndarray) else x
  points = math.prod(len(v) for _, v in axes)
  if points > MAX_POINTS:
    raise ValueError(f"--axis: the grid has {points} points; at most {MAX_POINTS}")
  mesh = np.meshgrid(*[v for _, v in axes], indexing="ij") if axes else []
  arrays.update({name: m for (name, _), m in zip(axes, mesh)})
  if not arrays:
    return {}, fixed
  try:
    shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
  except ValueError:
    shapes = ", ".join(f"{k} {a.shape}" for k, a in arrays.items())
    raise ValueError(f"the --grid arrays and --axis values do not broadcast: {shapes}") from None
  if math.prod(shape) > MAX_POINTS:
    raise ValueError(f"the grid has {math.prod(shape)} points; at most {MAX_POINTS}")
  return dict(zip(arrays, np.broadcast_arrays(*arrays.values()))), fixed


# ---------------------------------------------------------------------------
# outputs and the coordinator
# ---------------------------------------------------------------------------

def output_paths(out: str):
  """``(OUT.npz, OUT.json)`` for ``--out OUT`` (a trailing .npz/.json is dropped)."""
  base = re.sub(r"\.(npz|json)$", "", out)
  return base + ".npz", base + ".json"


def temp_path(path: str, pid: int) -> str:
  """The temporary name process ``pid`` writes ``path`` under (same folder)."""
  folder, name = os.path.split(path)
  return os.path.join(folder, f".{name}.{pid}.tmp")


def check_out(out: str, grid_file, writer: bool) -> None:
  """``ValueError`` unless ``--out`` names a file stem, is not an input and
  (``writer``: process 0) its folder exists and takes a new file."""
  base = re.sub(r"\.(npz|json)$", "", out)
  name = os.path.basename(base)
  if not name or out.endswith((os.sep, "/")) or name in (".", ".."):
    raise ValueError(f"--out {out}: give a file name (OUT.npz and OUT.json are written), not "
                     f"a folder; e.g. --out {os.path.join(out, 'result')}")
  paths = output_paths(out)
  if grid_file is not None:
    src = os.path.realpath(grid_file)
    for p in paths:
      if os.path.realpath(p) == src:
        raise ValueError(f"--out {out} would overwrite the input --grid {grid_file}")
  if not writer:
    return
  for p in paths:
    if os.path.isdir(p):
      raise ValueError(f"--out {out}: {p} is a folder")
  folder = os.path.dirname(os.path.abspath(paths[0]))
  if not os.path.isdir(folder):
    raise ValueError(f"--out {out}: the folder {folder} does not exist")
  try:
    fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".probe")
    os.close(fd)
    os.remove(probe)
  except OSError as e:
    raise ValueError(f"--out {out}: cannot write in {folder} ({e.strerror or e})") from None


def host_port(text: str, flag: str):
  """``(host, port)`` of ``HOST:PORT`` (``[v6]:PORT`` too); ``ValueError`` naming ``flag``."""
  host, colon, port = text.rpartition(":")
  if host.startswith("[") and host.endswith("]"):
    host = host[1:-1]
  if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
    raise ValueError(f"{flag} must be HOST:PORT with a port in [1, 65535], e.g. "
                     f"10.0.0.1:1234; got {text!r}")
  return host, int(port)


def check(args, p) -> None:
  """Every check of the command line, before anything runs (``p.error`` on failure)."""
  if args.coordinator is None and args.num_processes != 1:
    p.error("--num-processes needs --coordinator HOST:PORT")
  if not 0 <= args.process_id < args.num_processes:
    p.error(f"--process-id must be in [0, {args.num_processes}); got {args.process_id}")
  if not (args.grid or args.axis or args.set):
    p.error("give the grid: --grid FILE and/or --axis NAME=SPEC (and --set NAME=VALUE)")
  try:
    if args.coordinator is not None:
      host_port(args.coordinator, "--coordinator")
    if args.coordinator_bind is not None:
      if args.coordinator is None:
        raise ValueError("--coordinator-bind needs --coordinator HOST:PORT")
      host_port(args.coordinator_bind, "--coordinator-bind")
    grid(args)
    check_out(args.out, args.grid, writer=args.process_id == 0)
  except ValueError as e:
    p.error(str(e))


# ---------------------------------------------------------------------------
# what the processes agree on (the worker all-gathers it)
# ---------------------------------------------------------------------------

#: A text longer than this is sent as its head and its SHA-256 (see :func:`agreement`).
SHORT_TEXT = 160


def _shorten(v):
  if isinstance(v, str) and len(v) > SHORT_TEXT:
    sha = hashlib.sha256(v.encode()).hexdigest()[:32]
    return f"{v[:80]}... ({len(v)} characters, sha256 {sha})"
  if isinstance(v, dict):
    return {k: _shorten(x) for k, x in v.items()}
  if isinstance(v, list):
    return [_shorten(x) for x in v]
  return v


def agreement(summary: dict) -> bytes:
  """The bytes a process all-gathers for its inputs' ``summary``: every text
  longer than :data:`SHORT_TEXT` (a long ``--axis`` list, a long ``--set``
  value) becomes its head and its SHA-256, so equal inputs give equal bytes
  and a difference is still named, at any input length."""
  return json.dumps(_shorten(summary), sort_keys=True).encode()


def differences(a: dict, b: dict) -> list:
  """What differs between two processes' summaries, in the user's words."""
  out = []
  if a["door"] != b["door"]:
    out.append(f"the door ({a['door']} vs {b['door']})")
  if a["layout"] != b["layout"]:
    out.append(f"--layout ({a['layout']} vs {b['layout']})")
  for k in sorted(set(a["versions"]) | set(b["versions"])):
    if a["versions"].get(k) != b["versions"].get(k):
      out.append(f"the {k} version ({a['versions'].get(k)} vs {b['versions'].get(k)})")
  for k in sorted(set(a["fixed"]) | set(b["fixed"])):
    va, vb = a["fixed"].get(k), b["fixed"].get(k)
    if va != vb:
      out.append(f"--set {k} ({va if va is not None else 'not set'} vs "
                 f"{vb if vb is not None else 'not set'})")
  for k in sorted(set(a["arrays"]) | set(b["arrays"])):
    va, vb = a["arrays"].get(k), b["arrays"].get(k)
    if va is None or vb is None:
      out.append(f"grid array {k} (given to one process only)")
    elif va[:2] != vb[:2]:
      out.append(f"grid array {k} (shape {tuple(va[0])} {va[1]} from {va[3]} vs "
                 f"{tuple(vb[0])} {vb[1]} from {vb[3]})")
    elif va[2] != vb[2]:
      out.append(f"grid array {k} (same shape {tuple(va[0])}, different values: {va[3]} vs "
                 f"{vb[3]})")
  return out


# ---------------------------------------------------------------------------
# the supervisor
# ---------------------------------------------------------------------------

def _others(num: int, me: int) -> str:
  rest = [i for i in range(num) if i != me]
  return (f"process {rest[0]}" if len(rest) == 1
          else "one or more of processes " + ", ".join(map(str, rest)))


def _lost(text: str, num: int, me: int, args) -> str:
  """What JAX's coordination service said about a lost process, in one line."""
  m = re.search(r"tasks are unhealthy \(stopped sending heartbeats\):\s*([\d,\s]+)", text)
  if m:
    ids = ", ".join(re.findall(r"\d+", m.group(1)))
    return (f"process {ids} of {num} was lost (no heartbeat from it); process {me} stopped, "
            "no result written")
  if "jaxacct.sweep: joining" in text and "jaxacct.sweep: joined" not in text:
    wait = args.join_timeout or args.heartbeat_timeout
    who = (_others(num, me) if me == 0 else
           f"process 0 (the coordinator at {args.coordinator})" if num == 2 else
           f"process 0 (the coordinator at {args.coordinator}) or {_others(num, me)}")
    return (f"{who} of {num} did not join within {wait} s (--join-timeout); process {me} "
            "stopped, no result written")
  if "leader task" in text or "coordination service" in text.lower():
    return (f"process 0 of {num} (the coordinator) was lost or unreachable; process {me} "
            "stopped, no result written")
  return ""


_NOISE = re.compile(r"^(\s+@\s+0x|\*\*\* Check failure stack trace|\[Gloo\])")


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
      if not _NOISE.match(line):
        sys.stderr.write(line)
        sys.stderr.flush()
      tail = (tail + [line])[-400:]
    code = child.wait()
  except KeyboardInterrupt:
    child.send_signal(signal.SIGINT)
    code = child.wait()
  if code == 0:
    return 0
  for path in output_paths(args.out):   # the worker's own temporary files, nothing else
    tmp = temp_path(path, child.pid)
    if os.path.exists(tmp):
      os.remove(tmp)
  text = "".join(tail)
  if "jaxacct.sweep: error:" in text:   # the worker said why
    return 1
  why = _lost(text, args.num_processes, args.process_id, args)
  msg = why or (f"the sweep failed (worker exit status {code}); no result written, an "
                "earlier result under --out is kept")
  sys.stderr.write(f"jaxacct.sweep: error: {msg}\n")
  return 1


def _die_with_parent():   # pragma: no cover - runs in the child before exec
  ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


def main(argv=None) -> int:
  """Command-line entry (``python -m jaxacct.sweep``); returns the exit status."""
  argv = list(sys.argv[1:] if argv is None else argv)
  p = parser()
  args = p.parse_args(argv)
  check(args, p)
  return _supervise([a for a in argv if a != "--worker"])


if __name__ == "__main__":
  sys.exit(main())
