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

_COMP = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_WHILE = re.compile(r"=\s*.*?\bwhile\(.*?condition=%?([\w.\-]+).*?body=%?([\w.\-]+)")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_CALLS = re.compile(r"(?:calls|to_apply|branch_computations)=\{?([%\w.\-, ]+)\}?")


def _computations(text):
  comps, entry, name = {}, None, None
  for line in text.splitlines():
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
