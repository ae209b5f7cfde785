"""The accelerator layout's add-direction RDP block program alone (issue 53).

Usage (repository root): ``python bench/add_rdp_lane.py [--lanes N] [--chunks 256,4096]``.

For each outer chunk (``_OUTER_CHUNK`` of ``jaxacct.allocation._add_rdp``:
outer nodes a loop trip; ``4096``, the whole default grid, is one piece with
no loop), the block program at the default 4096 x 2048 grid, orders 2..64,
t = 100, compiled and run on sigmas in [0.5, 5] with the accelerator layout
forced: XLA's ``cost_analysis`` a lane (its while loop's body counted once,
as XLA counts it, and times the trips), ``memory_analysis`` temporaries a
lane, outputs of fusions over 64 MB (grids XLA stores), the sizing estimate
``add_lane_bytes`` and the lanes a block gets, compile and warm seconds.
Prints one JSON line per chunk. Speed is the load's: note ``uptime``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import jaxacct  # noqa: E402
import hlo_loops  # noqa: E402
from jaxacct.allocation import _add_rdp as A  # noqa: E402

_SHAPE = re.compile(r"= f64\[([0-9,]+)\]\S* fusion\(")


def big_fusions(text, limit=64 << 20):
  out = []
  for line in text.splitlines():
    m = _SHAPE.search(line)
    if m and 8 * int(np.prod([int(d) for d in m.group(1).split(",")])) > limit:
      out.append(m.group(1))
  return out


def one(chunk, lanes, outer=4096, inner=2048):
  A._OUTER_CHUNK = chunk
  jax.clear_caches()   # a traced program per chunk
  orders = np.arange(2, 65, dtype=np.float64)
  sig, t = np.linspace(0.5, 5.0, lanes), np.full(lanes, 100.0)
  t0 = time.perf_counter()
  c = A.add_rdp_block.lower(sig, t, orders=orders, num_outer=outer,
                            num_inner=inner).compile()
  compile_s = time.perf_counter() - t0
  ca = c.cost_analysis()
  ca = ca[0] if isinstance(ca, list) else ca
  text = c.as_text()
  trips = [n for _, n in hlo_loops.while_loops(text) if n and n == -(-outer // chunk)]
  k = trips[0] if trips else 1
  warm = []
  for _ in range(3):
    t0 = time.perf_counter()
    c(sig, t, orders=orders).block_until_ready()
    warm.append(time.perf_counter() - t0)
  per = lambda key: ca.get(key, 0.0) / lanes
  return dict(chunk=chunk, lanes=lanes, outer_trips=k,
              bytes_accessed_lane_as_counted=per("bytes accessed"),
              bytes_accessed_lane_times_trips=per("bytes accessed") * k,
              flops_lane_times_trips=per("flops") * k,
              transcendentals_lane_times_trips=per("transcendentals") * k,
              temp_bytes_lane=c.memory_analysis().temp_size_in_bytes / lanes,
              fusions_over_64MB=big_fusions(text),
              add_lane_bytes=A.add_lane_bytes(outer, inner),
              block_lanes=A.add_block_lanes(outer, inner),
              compile_s=round(compile_s, 2), first_s=round(warm[0], 3),
              warm_s=round(min(warm[1:]), 3), load=os.getloadavg()[0],
              device=str(jax.devices()[0]))


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--lanes", type=int, default=8)
  p.add_argument("--chunks", default="256")
  a = p.parse_args()
  with jax.enable_x64(True), jaxacct.set_layout("accelerator"):
    for chunk in (int(x) for x in a.chunks.split(",")):
      print(json.dumps(one(chunk, a.lanes)), flush=True)


if __name__ == "__main__":
  main()
