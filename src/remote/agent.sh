# herd node agent: runs one node's job in its own process group and ties the job's life to
# herd's connection. POSIX sh; needs setsid (util-linux), grep -z (GNU) and kill.
#
# argv:  $1 grace seconds (SIGTERM -> SIGKILL)
#        $2 seconds between heartbeats
#        $3 the run marker, NAME=VALUE, which the env block also exports
#        $4 the job as a shell snippet
#        $5 optional: a shell command run once the job is gone (removes its container);
#           may be empty
#        $6 optional: a shell command run before the job starts (sweeps leftovers of
#           earlier runs); each line it prints is reported as `herd-agent swept LINE`
# stdin: first a line with a count N, then N lines of `export NAME='value'` (the env,
#        secrets included: they never appear in any argv), then control lines:
#        `term` / `kill` signal the job; EOF means herd is gone: TERM, grace, KILL.
# fd 1:  the job's stdout and stderr, merged.
# fd 2:  agent messages, one per line: `herd-agent swept ...`, `herd-agent pgid P`,
#        `herd-agent alive` (the heartbeat), `herd-agent exit S`.
#
# "The job" is its process group plus every process whose environment holds the marker:
# torchrun starts each worker in a session of its own, out of reach of the group.
grace=$1
beat=$2
marker=$3
job=$4
cleanup=${5-}
presweep=${6-}

IFS= read -r count || exit 70
envs=
i=0
while [ "$i" -lt "$count" ]; do
  IFS= read -r line || exit 70
  envs="$envs$line
"
  i=$((i + 1))
done

# Only the subshell holds fd 2, never its sleep: killing it must close the pipe at once.
# Its sleep goes with it (TERM interrupts `wait`, and the trap stops the sleep), so nothing
# of the heartbeat outlives the agent. It beats from here on, so that a slow pre-sweep never
# looks like a silent node.
(
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  while :; do
    sleep "$beat" >/dev/null 2>&1 &
    nap=$!
    wait "$nap" || exit 0
    echo "herd-agent alive" >&2 || exit 0
  done
) </dev/null >/dev/null &
heart=$!

# Few processes on the way to the job: on a busy node every fork counts, times the nodes.
if [ -n "$presweep" ]; then
  swept=$(eval "$presweep" </dev/null 2>/dev/null)
  set -f
  ifs=$IFS
  IFS='
'
  for line in $swept; do echo "herd-agent swept $line" >&2; done
  IFS=$ifs
  set +f
fi

# Background lists get /dev/null as stdin unless told otherwise: keep ours on fd 3.
exec 3<&0
if command -v bash >/dev/null 2>&1; then jobsh=bash; else jobsh=sh; fi

# The env is exported only in the job's subshell: the agent and its helpers (grep, sleep)
# must not carry the marker, or they would find and kill themselves. setsid does not fork
# here (a background child is not a group leader), so $! leads the job's new group.
(eval "$envs" && exec setsid "$jobsh" -c "$job") </dev/null 3<&- 2>&1 &
pg=$!
echo "herd-agent pgid $pg" >&2

strays() {
  for f in $(grep -lzxF -- "$marker" /proc/[0-9]*/environ 2>/dev/null); do
    f=${f#/proc/}
    echo "${f%/environ}"
  done
}

# $2: the strays, if just found.
signal_job() {
  kill "-$1" "-$pg" 2>/dev/null
  for p in ${2-$(strays)}; do kill "-$1" "$p" 2>/dev/null; done
}

# SIGTERM, up to $1 seconds for everything to go, then SIGKILL. Nothing to do (the usual
# end of a job that exited by itself) costs one look at /proc.
stop_job() {
  left=$(strays)
  kill -0 "-$pg" 2>/dev/null || [ -n "$left" ] || return 0
  signal_job TERM "$left"
  t=0
  while [ "$t" -lt "$(($1 * 10))" ] && { kill -0 "-$pg" 2>/dev/null || [ -n "$(strays)" ]; }; do
    sleep 0.1
    t=$((t + 1))
  done
  signal_job KILL
}

(
  while IFS= read -r cmd; do
    case $cmd in
      term) signal_job TERM ;;
      kill) signal_job KILL ;;
    esac
  done
  stop_job "$grace"
) <&3 >/dev/null 2>&1 &
watcher=$!

wait "$pg" 2>/dev/null
status=$?
# The launcher is gone; whatever it started goes too.
stop_job "$grace"
# A killed `docker run` leaves its container running: remove it (quietly, best effort).
[ -z "$cleanup" ] || sh -c "$cleanup" </dev/null >/dev/null 2>&1 3<&-
kill "$watcher" "$heart" 2>/dev/null
echo "herd-agent exit $status" >&2
exit "$status"
