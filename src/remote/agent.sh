# herd node agent: runs one node's job in its own process group and ties the job's life to
# herd's connection. POSIX sh; needs setsid (util-linux), grep -z (GNU), awk (POSIX) and
# kill; mkfifo for its fence. Shipped
# after procs.sh, whose functions it uses. One login per node does all a start needs: the
# sweep of leftovers, the master's socket tables (for choosing its port), and the job.
#
# argv:  $1 grace seconds (SIGTERM -> SIGKILL)
#        $2 seconds between heartbeats
#        $3 the run marker, NAME=VALUE, which the env block also exports
#        $4 the job as a shell snippet
#        $5 a shell command run once the job is gone (removes its container), with the job's
#           env but its marker; may be empty
#        $6 a shell command run before the job starts (sweeps leftovers of earlier runs, with
#           procs.sh's functions); each line it prints is reported as `herd-agent swept
#           LINE`; may be empty
#        $7 `ports`: after the sweep, report the local ports in use (`herd-agent ports`), and
#           only then read the env block, which holds the master port herd chose from them;
#           may be empty
#        $8 the preflight's probe as a shell snippet, run before the job in the same login;
#           may be empty (no probe phase). With it, after the sweep and the ports, the agent
#           reads a first env block, the probe's, says `herd-agent clock` at once, and runs
#           the probe in a process group of its own with stdin from /dev/null: each line it
#           prints comes up as `herd-agent fact LINE` (fd 1 stays the job's), then `herd-agent
#           probed S` once it ended (S its exit status; the master's listener lives on after
#           its `herd-facts-done`). The next line ends the probe (TERM, then KILL after 5 s)
#           and decides: the job's env block starts the job; a control line or EOF ends the
#           agent, having started nothing.
#        $9 the fence: seconds without a `beat` line from herd after which the agent takes
#           herd for gone, as at EOF (herd writes one every heartbeat, from the start); may
#           be empty (no fence: only EOF ends it). A node cut off from herd for good, its sshd
#           none the wiser, so ends its job. Needs a FIFO in $TMPDIR (or /tmp): without one,
#           no fence (and the agent passes the beats over itself).
# stdin: first a line with a count N, then N lines of `export NAME='value'` (the env,
#        secrets included: they never appear in any argv), then control lines:
#        `term` / `kill` signal the job; `term-fast` is `term`, then, once the workers (the
#        processes with a LOCAL_RANK) are gone, SIGKILL for the launcher and the job's other
#        processes, herd's output multiplexer spared (end_idle_launcher); `probe` asks for
#        `herd-agent probe` and every worker's stack, `clock` for `herd-agent clock`, `sample`
#        for `herd-agent sample` (below), `checkpoint SIG` sends SIG (a name without SIG) to
#        every rank (`herd_ranks`), `checkpoint SIG group` too, or to the job's group where
#        none has a RANK (a `command` job);
#        EOF means herd is gone:
#        TERM, grace, KILL. A control line in place of the count (herd stopped the attempt
#        before it started) ends the agent with `herd-agent exit 143`, having started nothing.
# fd 1:  the job's stdout and stderr, merged.
# fd 2:  agent messages, one per line: `herd-agent up` (at once: the login is done),
#        `herd-agent swept ...`, `herd-agent ports HEX...` (every local TCP port in use, any
#        state; `?` when no table can be read), `herd-agent pgid P`, `herd-agent alive` (the
#        heartbeat), `herd-agent probe PID:STATE:RANK:LOCAL_RANK ...` (each job process, -
#        for a rank it has not), then every rank's stack (`herd_stack`) and `herd-agent
#        stacks-done`, `herd-agent clock SECONDS` (the node's time, at once), `herd-agent
#        sample UPTIME HZ RANK:CPU:WAIT ...` (each rank's time on a CPU and waiting for one, when
#        herd asks `sample`),
#        `herd-agent unstopped PIDS` (still there after SIGKILL), `herd-agent exit S`.
#
# "The job" is its process group, every process whose environment holds the marker (torchrun
# starts each worker in a session of its own, out of reach of the group), and every
# descendant of the agent (a process that cleared its environment). Where /usr/bin/perl or python3
# can make it one (see `remote::shell::subreaper_line`), the agent is a child subreaper, so that
# what the job leaves when its leader exits is still its descendant.
grace=$1
beat=$2
marker=$3
job=$4
cleanup=${5-}
presweep=${6-}
report=${7-}
probe=${8-}
fence=${9-}

# A hardened login's TMOUT (`export TMOUT=600` in /etc/profile) would end bash's `read` of
# herd's lines (RHEL's sh is bash) while the agent waits for its env: a restart's agents wait
# through its backoff.
unset TMOUT 2>/dev/null || :

echo "herd-agent up" >&2

# The fence (see $9). A relay reads herd's lines and passes on all but the beats, through a
# FIFO that becomes the agent's stdin; its timer ends it once $fence seconds have passed with
# no beat, and the agent then reads EOF, whichever phase it is in. The relay's first act is to
# ignore SIGUSR1 (a beat, to the timer), so that a beat before the timer's trap is set cannot
# kill it; the timer may trap it (a subshell is not a new shell). Neither holds fd 2, nor the
# timer the FIFO: the relay's end is the FIFO's only writer. Each turn of the timer is one
# heartbeat long, and its sleep is reaped on TERM, as the heartbeat's. herd's lines reach the
# relay on fd 3 (a background list's stdin is /dev/null), which the agent then closes. The
# relay passes an env block's lines on as they are (a value may hold a line `beat`): a count
# where a control line may be is followed by that many. The relay ends with the agent, its
# timer with it (its TERM trap): it holds herd's end of the connection, which in a Slurm step
# is also the job's output, whose end herd waits for. Should the agent die without ending it
# (SIGKILL), the timer finds the relay no longer the agent's child at its next turn and ends
# it; should the relay die so, the timer finds itself no longer the relay's child, and ends.
relay=
if [ -n "$fence" ]; then
  relayed=${TMPDIR:-/tmp}/herd-in-$$-${marker#*=}
  if mkfifo -m 600 "$relayed" 2>/dev/null; then
    exec 3<&0
    (
      trap '' USR1
      timer=
      trap '{ kill "$timer"; wait "$timer"; } 2>/dev/null; exit 0' TERM
      read -r me _ </proc/self/stat
      (
        stop='' fed='' missed=0
        trap 'fed=1' USR1
        trap 'stop=1; kill "$doze" 2>/dev/null' TERM
        while [ -z "$stop" ]; do
          if ! herd_stat /proc/self/stat || [ "$herd_ppid" != "$me" ]; then exit 0; fi
          if ! herd_stat "/proc/$me/stat" || [ "$herd_ppid" != "$$" ]; then break; fi
          sleep "$beat" &
          doze=$!
          [ -z "$stop" ] || kill "$doze" 2>/dev/null
          # A beat (USR1) ends the wait early: wait again until the sleep is over.
          while kill -0 "$doze" 2>/dev/null; do { wait "$doze"; } 2>/dev/null; done
          [ -z "$stop" ] || exit 0
          if [ -n "$fed" ]; then missed=0; else missed=$((missed + 1)); fi
          fed=
          [ $((missed * beat)) -lt "$fence" ] || break
        done
        kill "$me"
      ) </dev/null >/dev/null 2>&1 3<&- &
      timer=$!
      left=0
      while IFS= read -r line; do
        if [ "$left" -gt 0 ]; then
          left=$((left - 1))
        else
          case $line in
            beat)
              kill -USR1 "$timer" 2>/dev/null
              continue
              ;;
            '' | *[!0-9]*) ;;
            *) left=$line ;;
          esac
        fi
        printf '%s\n' "$line"
      done
      {
        kill "$timer"
        wait "$timer"
      } 2>/dev/null
    ) <&3 >"$relayed" 2>/dev/null 3<&- &
    relay=$!
    exec <"$relayed" 3<&-
    rm -f "$relayed"
  fi
fi

# Only the subshell holds fd 2, never its sleep. On TERM it stops and reaps its sleep
# (a TERM between `sleep &` and `nap=$!` is caught by the check after it), and the agent waits
# for it: nothing of the heartbeat outlives the agent. It beats from here on, so that a slow
# pre-sweep, or the wait for the env while the master's port is chosen, never looks like a
# silent node.
(
  stop=
  trap 'stop=1; kill "$nap" 2>/dev/null' TERM
  while [ -z "$stop" ]; do
    sleep "$beat" >/dev/null 2>&1 &
    nap=$!
    [ -z "$stop" ] || kill "$nap" 2>/dev/null
    # The shell's own note of a killed sleep ("Terminated") must not reach fd 2.
    { wait "$nap"; } 2>/dev/null
    [ -z "$stop" ] || break
    echo "herd-agent alive" >&2 || break
  done
  kill "$nap" 2>/dev/null
  { wait "$nap"; } 2>/dev/null
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

# The pids of $@ that are still this agent's children (one that ended and was reaped may
# have given its pid to another process since).
ours() {
  for p in "$@"; do
    herd_stat "/proc/$p/stat" && [ "$herd_ppid" = "$$" ] && echo "$p"
  done
}

# Ends the agent before any job started; nothing of the heartbeat is left.
quit() {
  # shellcheck disable=SC2046 # one word per pid
  {
    kill "$heart" $(ours $relay)
    wait "$heart" $relay
  } 2>/dev/null
  [ -z "${2-}" ] || echo "$2" >&2
  exit "$1"
}

# The local port of every TCP socket, in hex, from the kernel's tables (the header's word is
# no hex number; herd skips it). `?` when there is no table to read.
ports_in_use() {
  [ -r /proc/net/tcp ] || [ -r /proc/net/tcp6 ] || {
    echo "?"
    return
  }
  for t in /proc/net/tcp /proc/net/tcp6; do
    [ -r "$t" ] || continue
    while read -r _ local _; do echo "${local##*:}"; done <"$t"
  done | sort -u
}
# shellcheck disable=SC2046 # one word per port, on one line
[ "$report" != ports ] || echo "herd-agent ports" $(ports_in_use) >&2

# The next line that is not a beat into $count (herd's beats, read here where there is no
# fence); false at EOF.
next_count() {
  while IFS= read -r count; do
    [ "$count" = beat ] || return 0
  done
  return 1
}

# An env block's count, read into $count: a control line in its place (herd stopped the
# attempt before it started) ends the agent, as does EOF (herd gone).
read_count() {
  next_count || quit 70
  case $count in
    '' | *[!0-9]*) quit 143 "herd-agent exit 143" ;;
  esac
}

# The $count lines of an env block, into $envs.
read_envs() {
  envs=
  i=0
  while [ "$i" -lt "$count" ]; do
    IFS= read -r line || quit 70
    envs="$envs$line
"
    i=$((i + 1))
  done
}

# The probe phase (see $8). Its group is ended before the job starts: on the master, its
# listener frees the port the job is to bind.
if [ -n "$probe" ]; then
  read_count
  read_envs
  echo "herd-agent clock $(date +%s.%N)" >&2
  # The probe's processes carry this agent's marker, not the probe env's: a sweep by another
  # agent on the same host (two nodes of the config on one machine) sees them as a live
  # agent's, never as leftovers. An empty line before the status: a last line of the probe's
  # without a newline stays its own. Lines are cut to 4000 bytes, so that each is one write
  # to fd 2, which the heartbeat shares (PIPE_BUF; never through a filter such as cut, which
  # would hold the master's `herd-listening` in its buffer), and relayed by printf: dash's echo reads
  # backslashes (`\c` would swallow the line's end, and the `probed` after it).
  # shellcheck disable=SC2016,SC2163 # expanded by the probe's shell; $marker is NAME=VALUE
  (eval "$envs" && export "$marker" && exec setsid sh -c '{ sh -c "$1"; printf "\nherd-probed %s\n" "$?"; } 2>&1 </dev/null |
    while IFS= read -r l; do
      [ "${#l}" -le 4000 ] || l=$(printf %s "$l" | head -c 4000)
      case $l in
        "") ;;
        "herd-probed "*) printf "herd-agent probed %s\n" "${l#herd-probed }" ;;
        *) printf "herd-agent fact %s\n" "$l" ;;
      esac
    done' herd-probe "$probe") </dev/null >&2 &
  probe_pg=$!
  # The probe's group: TERM, up to 5 s, KILL. A pid that is now another process's (a shell
  # that reaps at once, bash as sh, and a pid used again) leads no group of the probe's: the
  # group had ended. Before its setsid, the leader is signalled by its pid.
  end_probe() {
    if herd_stat "/proc/$probe_pg/stat" && [ "$herd_ppid" != "$$" ]; then
      return 0
    fi
    kill -TERM "-$probe_pg" 2>/dev/null || kill -TERM "$probe_pg" 2>/dev/null
    n=0
    while kill -0 "-$probe_pg" 2>/dev/null && [ "$n" -lt 50 ]; do
      sleep 0.1
      n=$((n + 1))
    done
    kill -KILL "-$probe_pg" 2>/dev/null
    wait "$probe_pg" 2>/dev/null
  }
  next_count || {
    end_probe
    quit 70
  }
  end_probe
  case $count in
    '' | *[!0-9]*) quit 143 "herd-agent exit 143" ;;
  esac
else
  read_count
fi
read_envs

# Background lists get /dev/null as stdin unless told otherwise: keep ours on fd 3.
exec 3<&0

# The env is exported only in the job's subshell: the agent and its helpers (grep, sleep)
# must not carry the marker, or they would find and kill themselves. setsid does not fork
# here (a background child is not a group leader), so $! leads the job's new group. sh reads
# no shell init: the job snippet asks for bash where it needs it (`setup`).
# The output multiplexer keeps its socket and rank wrapper in HERD_MUX_HOME, which the agent
# removes once the job is gone, SIGKILLed or not. Named by the marker, which no other agent
# holds: nodes that share a /tmp but not a PID namespace (containers, the testbed) have
# agents of the same pid.
muxhome=${TMPDIR:-/tmp}/herd-out-${marker#*=}
(HERD_MUX_HOME=$muxhome && export HERD_MUX_HOME && eval "$envs" && exec setsid sh -c "$job") </dev/null 3<&- 2>&1 &
pg=$!
echo "herd-agent pgid $pg" >&2

strays() {
  herd_with_env -xF -- "$marker"
}

# The leader before its setsid: still the agent's child, in no group of its own yet. (A pid
# alone could by now be another process's.)
early_leader() {
  herd_stat "/proc/$pg/stat" && [ "$herd_ppid" = "$$" ] && [ "$herd_pgrp" != "$pg" ]
}

# The job by descent (herd_tree): a process that cleared its environment (env -i) lost its
# marker, not its parent. The agent's own subshells (heartbeat, watcher) are not the job.
tree() {
  herd_tree "$$"
}

# $2: the processes to signal besides the group, if just found. Until setsid has run, the
# group does not exist yet: the leader is signalled by its pid.
signal_job() {
  kill "-$1" "-$pg" 2>/dev/null || { early_leader && kill "-$1" "$pg" 2>/dev/null; }
  for p in ${2-$(strays) $(tree)}; do kill "-$1" "$p" 2>/dev/null; done
}

job_alive() {
  kill -0 "-$pg" 2>/dev/null || early_leader
}

# The job's processes still alive, zombies aside: its group, its marker, its tree, and $1
# (those seen before).
survivors() {
  {
    for p in $1 $(strays) $(tree); do
      herd_stat "/proc/$p/stat" && [ "$herd_state" != Z ] && echo "$p"
    done
    herd_procs 'BEGIN { for (p in pgrp) if (pgrp[p] == g && state[p] != "Z") print p }' -v g="$pg"
  } | sort -u
}

# SIGTERM, up to $1 seconds for everything to go, then SIGKILL. What is still there a second
# or two later (a process stuck in the kernel) is reported, never passed over: `herd-agent unstopped
# PIDS`. Nothing to do (the usual end of a job that exited by itself) costs two looks at /proc.
stop_job() {
  seen="$(strays) $(tree)"
  if ! job_alive; then
    case $seen in *[0-9]*) ;; *) return 0 ;; esac
  fi
  signal_job TERM "$seen"
  # Deadlines by the clock, not by turns of the loop: each turn looks through /proc, which
  # takes long on a busy node with many processes.
  deadline=$(($(date +%s) + $1))
  while [ "$(date +%s)" -lt "$deadline" ] && { job_alive || [ -n "$(strays)$(tree)" ]; }; do
    sleep 0.1
  done
  signal_job KILL "$seen $(strays) $(tree)"
  deadline=$(($(date +%s) + 2))
  left=$(survivors "$seen")
  while [ -n "$left" ] && [ "$(date +%s)" -lt "$deadline" ]; do
    sleep 0.1
    left=$(survivors "$seen")
  done
  # shellcheck disable=SC2086 # one word per pid
  [ -z "$left" ] || echo "herd-agent unstopped" $left >&2
}

# The value of variable $1 in process $2's environment, or -.
env_of() {
  v=$(grep -z -- "^$1=" "/proc/$2/environ" 2>/dev/null | tr -d '\0')
  v=${v#*=}
  echo "${v:--}"
}

# Each job process among herd_job_procs' lines on stdin as PID:STATE:RANK:LOCAL_RANK, for a
# hang's evidence: a rank that is stopped (T) or stuck in the kernel (D) is the one the
# others wait for.
probe_job() {
  while read -r p st r l _; do
    [ -z "$p" ] || echo "$p:$st:$r:$l"
  done
}

# Which of PIDS are herd's output multiplexer, or a container engine's client that runs one
# (their command line holds the multiplexer's text; mux.py's first line holds these words),
# as ` PID` each: each passes on the last lines once its launcher is gone, and exits by itself.
relays() {
  files=
  for p in "$@"; do files="$files /proc/$p/cmdline"; done
  # shellcheck disable=SC2013,SC2086 # paths of /proc hold no blank
  for f in $(grep -laF 'output multiplexer: runs a node' $files 2>/dev/null); do
    f=${f#/proc/}
    printf ' %s' "${f%/cmdline}"
  done
}

# After `term-fast`, on a healthy node of a torch launcher: once its workers (the processes
# with a LOCAL_RANK) are gone, the launcher has nothing left to do but its interpreter's exit
# (a second or more with torch loaded): end it then, and the job's other processes with it,
# but a multiplexer (see relays), which usually leads the group. The launcher may have
# exited by itself by then: the group is ended only where no multiplexer is left, for its
# leader is then the launcher. Within the grace, as for `term`.
end_idle_launcher() {
  deadline=$(($(date +%s) + $1))
  while [ "$(date +%s)" -lt "$deadline" ] && job_alive; do
    busy=
    rest=
    # shellcheck disable=SC2046 # one word per pid
    for p in $(herd_job_procs $(strays) | while read -r q _ _ l _; do
      [ "$q" != "$pg" ] || continue
      if [ "$l" != - ]; then
        echo busy
        break
      fi
      echo "$q"
    done); do
      if [ "$p" = busy ]; then busy=1; else rest="$rest $p"; fi
    done
    if [ -z "$busy" ]; then
      # shellcheck disable=SC2086 # one word per pid
      kept="$(relays $rest "$pg") "
      ended=
      for p in $rest; do
        case $kept in *" $p "*) ;; *) ended="$ended $p" ;; esac
      done
      # shellcheck disable=SC2086 # one word per pid
      if [ -n "$ended" ]; then
        kill -KILL $ended 2>/dev/null
      else
        case $kept in *[0-9]*) ;; *) kill -KILL "-$pg" 2>/dev/null ;; esac
      fi
      return 0
    fi
    sleep 0.05
  done
}

# Each rank's time on a CPU and waiting for one, for stragglers (`supervisor::straggler`
# scores them), and the bytes it has read and written (any file, pipe or socket: rchar and
# wchar of /proc/PID/io), which tell a rank that waits on I/O from one that waits on nothing
# (a stall): `herd-agent sample UPTIME HZ RANK:CPU:WAIT:IO[:D] ...`, times in units of 1/HZ s, IO
# in bytes and left out where the node does not show it, each summed over the rank's processes;
# D is 1 for a process with a thread in uninterruptible sleep (state D: an fsync, a close on
# NFS, a large write to a slow disk), whose bytes count only once the call returns. Where the kernel keeps scheduler statistics
# (/proc/PID/task/TID/schedstat: time on a CPU, then time ready to run but waiting for one,
# in ns), both come from it, over every thread: a rank slowed by a throttled cgroup or a noisy
# neighbour waits for a CPU rather than computing more. Elsewhere, CPU is the user and system
# time of /proc/PID/stat (clock ticks), and WAIT 0. Each process's rank is read once: `ranks`
# holds " PID:RANK" for the job's live processes only (rebuilt at each sample, so it stays as
# small as the job), and the line one word per rank.
ranks=" "
# A kernel without scheduler statistics or delay accounting shows zeros there.
if { read -r on _ </proc/self/schedstat; } 2>/dev/null && [ "${on:-0}" != 0 ]; then
  hz=1000000000
else
  hz=$(getconf CLK_TCK 2>/dev/null) || hz=100
fi
# times_of PID: its CPU time and its wait for a CPU, in units of 1/hz, into `cpu` and
# `waited`, and its bytes read and written into `io` (empty where /proc/PID/io is not
# readable), and `blocked` 1 if a thread of it is in uninterruptible sleep (else empty);
# false if it is gone.
times_of() {
  cpu=0 waited=0 io='' blocked=''
  { while read -r k v; do
    case $k in rchar: | wchar:) io=$((${io:-0} + v)) ;; esac
  done <"/proc/$1/io"; } 2>/dev/null
  if [ "$hz" = 1000000000 ]; then
    for t in /proc/"$1"/task/*/schedstat; do
      { read -r on ready _ <"$t"; } 2>/dev/null || continue
      cpu=$((cpu + on)) waited=$((waited + ready))
      [ -z "$blocked" ] && herd_stat "${t%schedstat}stat" && [ "$herd_state" = D ] && blocked=1
    done
    [ "$cpu" != 0 ] || [ -d "/proc/$1/task" ]
  else
    herd_stat "/proc/$1/stat" || return 1
    cpu=$herd_cpu
    [ "$herd_state" != D ] || blocked=1
  fi
}
sample_job() {
  live=" "
  s=" "
  for p in $(strays); do
    case $ranks in
      *" $p:"*)
        r=${ranks#*" $p:"}
        r=${r%% *}
        ;;
      *) r=$(env_of RANK "$p") ;;
    esac
    live="$live$p:$r "
    case $r in '' | *[!0-9]*) continue ;; esac
    times_of "$p" || continue
    # A rank's processes, one word each: herd sums them.
    s="$s$r:$cpu:$waited${io:+:$io${blocked:+:1}} "
  done
  ranks=$live
  read -r up _ </proc/uptime
  echo "herd-agent sample $up $hz${s% }"
}

# A time limit or a preemption: SIG to every rank, so that it writes its checkpoint. Not to
# the launcher (torchrun would die of SIGUSR1, its default action, and leave its workers) nor
# to herd's output multiplexer: to the ranks alone, and to nothing when none is found (none
# started yet, or their environment cannot be read). With `group` (a `command` job), a job
# without ranks gets it in its group, as it gets `term`.
checkpoint_job() {
  sig=${1%% *}
  case $sig in '' | *[!A-Z0-9]*) return 0 ;; esac
  case $1 in *" group") whole=1 ;; *) whole= ;; esac
  # shellcheck disable=SC2046 # `PID RANK` pairs, one word each
  set -- $(herd_ranks $(strays))
  if [ $# -lt 2 ]; then
    [ -z "$whole" ] || signal_job "$sig"
    return 0
  fi
  while [ $# -ge 2 ]; do
    kill "-$sig" "$1" 2>/dev/null
    shift 2
  done
}

(
  while IFS= read -r cmd; do
    case $cmd in
      term) signal_job TERM ;;
      term-fast)
        signal_job TERM
        end_idle_launcher "$grace" 4>&- &
        ;;
      kill) signal_job KILL ;;
      probe)
        # The job's processes, read once for the probe's line and for the stacks.
        # shellcheck disable=SC2046 # one word per pid
        found=$(herd_job_procs $(strays))
        # shellcheck disable=SC2046 # one word per process, on one line
        echo "herd-agent probe" $(printf '%s\n' "$found" | probe_job) >&4
        # shellcheck disable=SC2046 # `PID RANK` pairs, one word each
        herd_dump_stacks $(printf '%s\n' "$found" | herd_own_ranks) >&4 &
        ;;
      clock) echo "herd-agent clock $(date +%s.%N)" >&4 ;;
      sample) sample_job >&4 ;;
      checkpoint\ *) checkpoint_job "${cmd#checkpoint }" ;;
    esac
  done
  stop_job "$grace"
) <&3 4>&2 >/dev/null 2>&1 &
watcher=$!

wait "$pg" 2>/dev/null
status=$?
# The launcher is gone; whatever it started goes too.
stop_job "$grace"
# A killed `docker run` leaves its container running: remove it (quietly, best effort), on
# the job's engine: with the job's env (a node's own DOCKER_HOST, forwarded or not), but
# not its marker, which a sweep on the same host would take for the job's.
[ -z "$cleanup" ] || (eval "$envs" && unset "${marker%%=*}" && exec sh -c "$cleanup") </dev/null >/dev/null 2>&1 3<&-
[ ! -d "$muxhome" ] || rm -rf "$muxhome"
# Waiting also collects the watcher, killed by TERM: the shell's own note of that goes nowhere.
# shellcheck disable=SC2046,SC2086 # one word per pid; $relay: a pid, or nothing
{
  kill "$heart" $(ours "$watcher" $relay)
  wait "$heart" $relay
} 2>/dev/null
echo "herd-agent exit $status" >&2
exit "$status"
