"""Loop structure of compiled XLA programs (optimised HLO text); no test in it.

The accelerator layout's rules (issue 45) are about loops: XLA:GPU runs a
while loop whose trip count it does not know as condition kernel, predicate
copy to the host, body, every trip. :func:`while_loops` lists a program's
while loops with their known trip counts (``backend_config`` of the while
instruction, None where XLA does not know it); :func:`sequential_trips` walks
the call graph from the entry and adds up the trips every loop executes, each
multiplied by the trips of the loops around it, with a given count for the
unknown ones.
"""

import re

def _lines(text):
  """The program's lines without ``/*...*/`` comments (tuple shapes carry some)."""
  return [re.sub(r"/\*.*?\*/", "", line) for line in text.splitlines()]


_COMP = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_WHILE = re.compile(r"=\s*.*?\bwhile\(.*?condition=%?([\w.\-]+).*?body=%?([\w.\-]+)")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_CALLS = re.compile(r"(?:calls|to_apply|branch_computations)=\{?([%\w.\-, ]+)\}?")


def _computations(text):
  comps, entry, name = {}, None, None
  for line in _lines(text):
    m = _COMP.match(line)
    if m and not line.startswith(" "):
      name = m.group(2)
      comps[name] = []
      if m.group(1):
        entry = name
      continue
    if name is not None:
      comps[name].append(line)
  return comps, entry


def while_loops(text):
  """``[(body name, known trip count or None)]`` of every while loop."""
  out = []
  for line in text.splitlines():
    m = _WHILE.search(line)
    if m and " while(" in line:
      t = _TRIPS.search(line)
      out.append((m.group(2), int(t.group(1)) if t else None))
  return out


def sequential_trips(text, unknown: int):
  """Loop trips the program executes, nested loops multiplied out; a loop
  whose trip count XLA does not know counts ``unknown`` trips."""
  comps, entry = _computations(text)
  memo = {}

  def walk(name):
    if name in memo:
      return memo[name]
    memo[name] = 0
    total = 0
    for line in comps.get(name, ()):
      m = _WHILE.search(line)
      if m and " while(" in line:
        t = _TRIPS.search(line)
        n = int(t.group(1)) if t else unknown
        total += n * (1 + walk(m.group(2)) + walk(m.group(1)))
        continue
      for c in _CALLS.findall(line):
        for sub in c.split(","):
          sub = sub.strip().lstrip("%")
          if sub in comps:
            total += walk(sub)
    memo[name] = total
    return total

  return walk(entry)


# ----------------------------------------------------------------------------
# what XLA:GPU executes: kernels (nested trips multiplied out), wide scatters
# ----------------------------------------------------------------------------

_DEF = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(\(?[^=]*?\)?)\s+([a-z][a-z0-9\-]*)\((.*)$")
_SHAPE = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")
_WIDTH = {"pred": 8, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "f16": 16, "bf16": 16,
          "s32": 32, "u32": 32, "f32": 32, "s64": 64, "u64": 64, "f64": 64, "c64": 64,
          "c128": 128}
#: instructions that launch nothing on a GPU (aliases, metadata, control flow,
#: whose bodies are counted where they run)
_FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "call",
         "conditional", "after-all", "partition-id", "replica-id", "opt-barrier",
         "add-dependency", "domain"}


def _shapes(type_text):
  return [(t, [int(x) for x in d.split(",") if x]) for t, d in _SHAPE.findall(type_text)]


def _operands(args):
  """Operand names of an instruction's argument text (up to the closing parenthesis)."""
  depth, out, cur = 0, [], ""
  for ch in args:
    if ch == "(":
      depth += 1
    elif ch == ")":
      if depth == 0:
        break
      depth -= 1
    cur += ch
  return [a.strip().lstrip("%") for a in cur.split(",") if a.strip().startswith("%")]


def _scatter_indices(line, types):
  """Number of scatter indices (rows of the index operand) of a scatter line."""
  m = _DEF.match(line)
  ops = _operands(m.group(4))
  k = (len(ops) - 1) // 2
  dims = _shapes(types.get(ops[k], ""))
  dims = dims[0][1] if dims else []
  ivd = re.search(r"index_vector_dim=(\d+)", line)
  ivd = int(ivd.group(1)) if ivd else len(dims)
  count = 1
  for i, s in enumerate(dims):
    if i != ivd:
      count *= s
  return count


def wide_scatters(text):
  """``[(element types, index count)]`` of every scatter in the program (fused
  ones too) whose element type is wider than 64 bits, or a tuple (variadic)
  scatter: XLA:GPU cannot emit one and expands it into a while loop with one
  trip per index. Counted once per appearance in the text (see
  :func:`census` for the executed count)."""
  types, out = {}, []
  for line in _lines(text):
    m = _DEF.match(line)
    if m:
      types[m.group(1)] = m.group(2)
  for line in _lines(text):
    m = _DEF.match(line)
    if not m or m.group(3) != "scatter":
      continue
    elems = [t for t, _ in _shapes(m.group(2))]
    if len(elems) > 1 or any(_WIDTH.get(t, 64) > 64 for t in elems):
      out.append((tuple(elems), _scatter_indices(line, types)))
  return out


def census(text, unknown: int):
  """What one run of the program executes on XLA:GPU, counted on its optimised
  HLO: ``{"kernels", "wide_scatters", "expanded_trips", "loop_trips",
  "unknown_loops", "loop_kernels"}``.

  ``kernels``: instructions that launch work (a fusion counts once, aliases
  and control flow nothing), each multiplied by the trips of the loops around
  it; a loop whose trip count XLA does not know counts ``unknown`` trips.
  ``wide_scatters``: executed scatters wider than 64 bits (:func:`wide_scatters`),
  ``expanded_trips``: those times their index counts, the serial loop trips
  XLA:GPU turns them into (each at least one more kernel, added to ``kernels``).
  ``loop_kernels``: the part of ``kernels`` run inside while loops (the rest
  runs once a program: only there can a count grow with trips; XLA:CPU may
  fuse the straight-line part differently at another lane count).
  """
  comps, entry = _computations(text)
  types = {}
  for line in _lines(text):
    m = _DEF.match(line)
    if m:
      types[m.group(1)] = m.group(2)
  wide = {}   # computation -> [index counts] of the wide scatters written in it
  for name, lines in comps.items():
    for line in lines:
      m = _DEF.match(line)
      if m and m.group(3) == "scatter":
        elems = [t for t, _ in _shapes(m.group(2))]
        if len(elems) > 1 or any(_WIDTH.get(t, 64) > 64 for t in elems):
          wide.setdefault(name, []).append(_scatter_indices(line, types))
  memo = {}

  def inner_wide(name, seen=()):
    """Wide scatters in a computation a kernel calls (fusion bodies, nested)."""
    res = list(wide.get(name, []))
    for line in comps.get(name, ()):
      for c in _CALLS.findall(line):
        for sub in c.split(","):
          sub = sub.strip().lstrip("%")
          if sub in comps and sub not in seen and sub != name:
            res += inner_wide(sub, seen + (name,))
    return res

  def walk(name):
    if name in memo:
      return memo[name]
    memo[name] = (0, 0, 0, 0, 0, 0)
    k = ws = et = lt = un = lk = 0
    for line in comps.get(name, ()):
      m = _DEF.match(line)
      if not m:
        continue
      op = m.group(3)
      if op == "while":
        w = _WHILE.search(line)
        t = _TRIPS.search(line)
        n = int(t.group(1)) if t else unknown
        un += t is None
        sub = [walk(w.group(1)), walk(w.group(2))]
        k += n * sum(s[0] for s in sub) + n
        lk += n * sum(s[0] for s in sub) + n
        ws += n * sum(s[1] for s in sub)
        et += n * sum(s[2] for s in sub)
        lt += n * (1 + sum(s[3] for s in sub))
        un += sum(s[4] for s in sub)
        continue
      if op in ("call", "conditional"):
        for c in _CALLS.findall(line):
          for sub in c.split(","):
            sub = sub.strip().lstrip("%")
            if sub in comps:
              s = walk(sub)
              k, ws, et, lt, un = k + s[0], ws + s[1], et + s[2], lt + s[3], un + s[4]
              lk += s[5]
        continue
      if op in _FREE:
        continue
      k += 1
      for c in _CALLS.findall(line):
        for sub in c.split(","):
          sub = sub.strip().lstrip("%")
          if sub in comps:
            idx = inner_wide(sub)
            ws += len(idx)
            et += sum(idx)
            k += sum(idx)
      if op == "scatter":
        elems = [t for t, _ in _shapes(m.group(2))]
        if len(elems) > 1 or any(_WIDTH.get(t, 64) > 64 for t in elems):
          n_idx = _scatter_indices(line, types)
          ws, et, k = ws + 1, et + n_idx, k + n_idx
    memo[name] = (k, ws, et, lt, un, lk)
    return memo[name]

  k, ws, et, lt, un, lk = walk(entry)
  return {"kernels": k, "wide_scatters": ws, "expanded_trips": et, "loop_trips": lt,
          "unknown_loops": un, "loop_kernels": lk}
