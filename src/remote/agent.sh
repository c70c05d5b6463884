# herd node agent: runs one node's job in its own process group and ties the group's
# life to herd's connection. POSIX sh; needs setsid (util-linux) and kill.
#
# argv:  $1 grace seconds (SIGTERM -> SIGKILL), $2 the job as a shell snippet.
# stdin: first a line with a count N, then N lines of `export NAME='value'` (the env,
#        secrets included: they never appear in any argv), then control lines:
#        `term` / `kill` signal the job's group; EOF means herd is gone: TERM, grace, KILL.
# fd 1:  the job's stdout and stderr, merged.
# fd 2:  agent messages, one per line: `herd-agent pgid P`, `herd-agent exit S`.
grace=$1
job=$2

IFS= read -r count || exit 70
envs=
i=0
while [ "$i" -lt "$count" ]; do
  IFS= read -r line || exit 70
  envs="$envs$line
"
  i=$((i + 1))
done
eval "$envs"

# Background lists get /dev/null as stdin unless told otherwise: keep ours on fd 3.
exec 3<&0
if command -v bash >/dev/null 2>&1; then jobsh=bash; else jobsh=sh; fi

# A background child of a non-interactive shell is not a group leader, so setsid
# does not fork: $! is the new session (and group) leader.
setsid "$jobsh" -c "$job" </dev/null 3<&- 2>&1 &
pg=$!
echo "herd-agent pgid $pg" >&2

# Kill the group: TERM, wait up to $1 seconds for it to go, then KILL.
stop_group() {
  kill -TERM "-$pg" 2>/dev/null || return 0
  t=0
  while kill -0 "-$pg" 2>/dev/null && [ "$t" -lt "$(($1 * 10))" ]; do
    sleep 0.1
    t=$((t + 1))
  done
  kill -KILL "-$pg" 2>/dev/null
  return 0
}

(
  while IFS= read -r cmd; do
    case $cmd in
      term) kill -TERM "-$pg" 2>/dev/null ;;
      kill) kill -KILL "-$pg" 2>/dev/null ;;
    esac
  done
  stop_group "$grace"
) <&3 >/dev/null 2>&1 &
watcher=$!

wait "$pg"
status=$?
# The launcher is gone; whatever it left in its group goes too.
stop_group "$grace"
kill "$watcher" 2>/dev/null
echo "herd-agent exit $status" >&2
exit "$status"
