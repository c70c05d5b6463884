# herd's doctor probe of one node (see src/doctor/): its facts, and its side of the test of
# the master port. POSIX sh. The job the probe's agent runs, in the workdir, after `setup`,
# with the env, which sets MASTER_PORT: the port to test, or 0 (none to test).
#
# argv:   $1 `master` or `worker`
#         $2 the job's Python, which runs port_test.py ($3)
#         $3 port_test.py
#         $4 the master's address, as the workers reach it
#         $5 seconds: a worker's connect timeout; the bound of the master's listener, which
#            only matters once herd is gone
#         $6... the argv that prints the node's facts (facts.sh)
# stdout: the facts, and the port test's lines (see port_test.py). On the master, without
#         that Python, `herd-listen-failed PYTHON not found` first.
#
# The master's listener starts the facts itself once it listens, so that their lines never
# share one with its own; it lives on until herd ends the probe (with its agent's stdin), once
# every worker has answered. The workers get their env, and so start, only once it is up.
role=$1 python=$2 port_test=$3 addr=$4 secs=$5
shift 5
if [ "$MASTER_PORT" = 0 ]; then exec "$@"; fi
if [ "$role" = master ]; then
  if command -v "$python" >/dev/null 2>&1; then
    exec "$python" -c "$port_test" listen "$addr" "$secs" "$@"
  fi
  echo "herd-listen-failed $python not found"
  exec "$@"
fi
"$@"
"$python" -c "$port_test" connect "$addr" "$secs"
