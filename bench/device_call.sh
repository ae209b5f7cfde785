#!/usr/bin/env bash
# The one prepared device call (a lent GPU): run from the repository root as
#   bash bench/device_call.sh
# Three steps, each under its own wall-clock limit, at most 9.7 minutes in all:
#   1. bench/gpu_profile.py: one cold headline sweep, profiled (60 s);
#   2. bench/gpu_laws.py: the laws program per layout variant (90 s);
#   3. bench/bench_gpu.py: every array door, GPU vs the host's CPU (375 s).
# Results go to $OUT (the device tool's folder) when set, else bench/results;
# the logs to <out>/device_call.log. A step that fails or runs out of time
# leaves what it wrote and the next step still runs. DEVICE_CALL_QUICK=1: each
# step's --quick sizes (a smoke test on a CPU).
set -u
out="${OUT:-bench/results}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="$out/device_call.log"
quick=()
[ "${DEVICE_CALL_QUICK:-0}" = 1 ] && quick=(--quick)
step() {   # step SECONDS COMMAND...
  local limit=$1; shift
  echo "== $(date -u +%FT%TZ) $* (limit ${limit} s)" | tee -a "$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  echo "== exit $? after ${SECONDS} s in all" | tee -a "$log"
}
nvidia-smi -L >>"$log" 2>&1 || true
py="${PYTHON:-python3}"
step 75 "$py" bench/gpu_profile.py --out "$out" --limit 60 "${quick[@]}"
step 105 "$py" bench/gpu_laws.py --out "$out" --budget 90 "${quick[@]}"
step 400 "$py" bench/bench_gpu.py --out "$out" --budget 375 "${quick[@]}"
