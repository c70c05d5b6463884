#!/bin/bash
# What a straggler sample costs a node: the agent's `sample_job` (src/remote/agent.sh) timed
# against stand-in ranks, with the scheduler statistics it reads (every thread's schedstat)
# and with the CPU time alone (each process's stat, what it falls back to).
#   bash benches/straggler-sample.sh [RANKS THREADS LOADERS ...]
# Each triple: RANKS python processes with RANK set and THREADS idle threads each, and
# LOADERS processes of 4 threads per rank (data loaders) with the same RANK. Default
# `8 40 0  8 40 4`. Prints a markdown row per size and mode: the CPU per sample in ms
# (the shell's and its children's user + system time over N samples, default 100) and what
# it is of one core at one sample every 5 s.
set -u
cd "$(dirname "$0")/.." || exit 2
N=${N:-100}
[ $# -gt 0 ] || set -- 8 40 0 8 40 4
# The agent's sampling, as the node's `sh` runs it (dash on Debian): procs.sh and the
# functions of agent.sh that `sample` calls, then N samples. Its CPU is what `time` reports
# of it (user + system, its children's too). The marker is in the ranks' environment only,
# as in a run: never in the sampler's or its helpers'.
sampler=$(mktemp)
trap 'rm -f "$sampler"' EXIT
{
  cat src/remote/procs.sh
  echo "marker=HERD_SAMPLE_BENCH=$$"
  sed -n '/^strays() {/,/^}/p' src/remote/agent.sh
  sed -n '/^env_of() {/,/^}/p' src/remote/agent.sh
  sed -n "/^# Each rank's time on a CPU/,/^  echo \"herd-agent sample/p" src/remote/agent.sh
  echo '}'
  echo '[ "$1" = schedstat ] || hz=$(getconf CLK_TCK)'
  echo 'sample_job >/dev/null'
  echo 'i=0; while [ $i -lt "$2" ]; do sample_job >/dev/null; i=$((i + 1)); done'
} >"$sampler"
TIMEFORMAT='%3U %3S'
idle() { # idle THREADS: a process of THREADS sleeping threads, until killed
  HERD_SAMPLE_BENCH=$$ exec python3 -c "import threading, time
for _ in range($1): threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
time.sleep(3600)"
}
echo "| ranks × threads | loaders | job processes | mode | CPU per sample | of a core, every 5 s |"
echo "|---|---|---|---|---|---|"
while [ $# -ge 3 ]; do
  nranks=$1 threads=$2 loaders=$3
  shift 3
  pids=()
  for r in $(seq 0 $((nranks - 1))); do
    RANK=$r idle "$threads" &
    pids+=($!)
    for _ in $(seq 1 "$loaders"); do
      RANK=$r idle 4 &
      pids+=($!)
    done
  done
  sleep 2
  for mode in schedstat stat; do
    cpu=$({ time sh "$sampler" $mode "$N"; } 2>&1 | awk '{ print $1 + $2 }')
    awk -v cpu="$cpu" -v n="$N" -v r="$nranks" -v th="$threads" -v l="$loaders" -v p="${#pids[@]}" -v m="$mode" \
      'BEGIN { ms = cpu * 1000 / n; printf "| %d × %d | %d per rank | %d | %s | %.1f ms | %.2f %% |\n", r, th, l, p, m, ms, ms / 5000 * 100 }'
  done
  kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
done
