#!/usr/bin/env bash
# Where torchrun's time goes between herd's SIGTERM and its exit (BENCHMARKS.md, section 3).
# Two torchruns on this host play nodes 0 and 1 (2 workers each). A worker of node 1 is
# SIGKILLed; 0.15 s later node 0's torchrun and workers get SIGTERM, as in herd's gang
# teardown. py-spy samples node 0's torchrun, native frames included, until it exits.
#   needs: the torch venv (scripts/torch-venv.sh) and py-spy (pip install py-spy)
#   usage: benches/torchrun-exit-profile.sh [OUT.raw]   (collapsed stacks, flamegraph.pl input)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(./scripts/torch-venv.sh)
out=${1:-torchrun-exit.raw}
spy=$(command -v py-spy)
export GLOO_SOCKET_IFNAME=lo
port=$((29600 + RANDOM % 100))
pids=()
for rank in 0 1; do
  "$venv/bin/torchrun" --nnodes 2 --node-rank "$rank" --nproc-per-node 2 --master-addr 127.0.0.1 \
    --master-port "$port" examples/allreduce.py --steps 100000 --sleep 0.05 >/dev/null 2>&1 &
  pids+=($!)
done
until [ "$(pgrep -c -P "${pids[0]}")" -ge 2 ] && [ "$(pgrep -c -P "${pids[1]}")" -ge 2 ]; do sleep 0.05; done
sleep 4
mapfile -t w0 < <(pgrep -P "${pids[0]}")
mapfile -t w1 < <(pgrep -P "${pids[1]}")
"$spy" record -r 250 -f raw --idle --native -o "$out" -p "${pids[0]}" >/dev/null 2>&1 &
sampler=$!
sleep 1
kill -KILL "${w1[0]}"
sleep 0.15
t0=$(date +%s.%N)
kill -TERM "${pids[0]}" "${w0[@]}" "${pids[1]}" "${w1[1]}" 2>/dev/null || true
while kill -0 "${pids[0]}" 2>/dev/null; do sleep 0.01; done
t1=$(date +%s.%N)
wait "$sampler" || true
wait || true
echo "node 0's torchrun exited $(echo "$t1 - $t0" | bc) s after its SIGTERM (slowed by native sampling)"
# Samples after the SIGTERM, by where they were (the monitor loop's sleep is before it).
python3 - "$out" <<'PY'
import sys
from collections import Counter
parts = Counter()
for line in open(sys.argv[1]):
    stack, n = line.rsplit(" ", 1)
    if "api.py:922)" in stack:
        continue
    if "_del_library" in stack:
        parts["atexit: torch.library._del_library (ops deregistered)"] += int(n)
    elif "gc_collect_main" in stack:
        parts["interpreter exit: final garbage collection"] += int(n)
    elif "_close" in stack or "Popen" in stack:
        parts["_shutdown: waiting for the workers"] += int(n)
    else:
        parts["other"] += int(n)
total = sum(parts.values())
for what, n in parts.most_common():
    print(f"{n:5d} samples {100 * n / total:5.1f} %  {what}")
PY
