# herd's view of a node's processes, from /proc: which belong to a run, which run is still
# live, and how to stop them. One copy, shipped in front of the agent, of every sweep and of
# the doctor's probe. POSIX sh; needs GNU grep (-z), a POSIX awk and Linux /proc.
#
# Every job process inherits HERD_MARKER=<config key>:<run id>:<attempt>:<node rank>. The agent
# that runs a node's job holds that same marker in its argv, and lives exactly as long as
# herd's connection to it: a process whose agent is alive belongs to a live run, one whose
# agent is gone is a leftover.

# herd_with_env GREP_ARGS...: the pids whose environment has an entry grep -z matches.
herd_with_env() {
  # shellcheck disable=SC2013 # paths of /proc hold no blank
  for herd_f in $(grep -lz "$@" /proc/[0-9]*/environ 2>/dev/null); do
    herd_f=${herd_f#/proc/}
    echo "${herd_f%/environ}"
  done
}

# herd_stat FILE: read one /proc/PID/stat into herd_state, herd_ppid, herd_pgrp
# and herd_cpu (its user and system time, in clock ticks); false if the process is gone.
herd_stat() {
  { IFS= read -r herd_l <"$1"; } 2>/dev/null || return 1
  # shellcheck disable=SC2086 # the fields of /proc/PID/stat after the name, one word each
  herd_fields ${herd_l##*) }
}
herd_fields() {
  herd_state=$1 herd_ppid=$2 herd_pgrp=$3 herd_cpu=$((${12:-0} + ${13:-0}))
}

# herd_awk_stat: an awk function for herd's awk programs, herd_read_stat(FILE), which reads
# one /proc/PID/stat into state[PID], ppid[PID] and pgrp[PID] and returns PID, or "" for a
# process gone (getline, where a missing input file would end awk). The name (between
# parentheses) may hold anything: the fields are those after its last ") ".
herd_awk_stat='
function herd_read_stat(f,   l, s, w, p) {
  p = ""
  if ((getline l < f) > 0) {
    s = l
    sub(/.*\) /, "", s)
    split(s, w, " ")
    p = l
    sub(/ .*/, "", p)
    state[p] = w[1]
    ppid[p] = w[2]
    pgrp[p] = w[3]
  }
  close(f)
  return p
}
'

# herd_procs PROGRAM [AWK_ARGS...]: one awk over every process's /proc/PID/stat, its
# PROGRAM's BEGIN blocks finding state[PID], ppid[PID] and pgrp[PID] filled in. A shell loop
# over /proc costs a read a process (200 ms for 700 processes, seconds on a node of
# thousands of kernel threads: times every agent of a fleet on one host); awk reads them at
# once. A process gone since the glob is left out.
herd_procs() {
  herd_prog=$1
  shift
  awk "$@" "$herd_awk_stat"'
BEGIN { for (i = 1; i < ARGC; i++) herd_read_stat(ARGV[i]) }
'"$herd_prog" /proc/[0-9]*/stat 2>/dev/null
}

# herd_tree ROOT: the descendants of ROOT, from /proc. A process that cleared its
# environment (env -i) has no marker, but is still its parent's child; one whose parent died
# is its subreaper's. ROOT's own subshells (forks that never exec'd: same command line) are
# not descended into: they are ROOT's helpers, and the shell running this. awk gives each
# descendant with the child of ROOT it descends from (a pid reused in a loop of parents
# descends from nothing); the shell looks at those children's command lines only.
herd_tree() {
  herd_root=$1
  herd_rootcmd=
  { IFS= read -r herd_rootcmd <"/proc/$herd_root/cmdline"; } 2>/dev/null
  herd_procs '
function top(p,   q) {
  if (p in t) return t[p]
  t[p] = ""
  q = ppid[p]
  if (q == root) t[p] = p
  else if (q in ppid) t[p] = top(q)
  return t[p]
}
BEGIN { for (p in ppid) if (p != root && top(p) != "") print p, t[p] }' -v root="$herd_root" | {
    herd_own=" "
    herd_job=" "
    while read -r herd_p herd_top; do
      case $herd_own in *" $herd_top "*) continue ;; esac
      case $herd_job in
        *" $herd_top "*) ;;
        *)
          herd_c=
          { IFS= read -r herd_c <"/proc/$herd_top/cmdline"; } 2>/dev/null
          if [ "$herd_c" = "$herd_rootcmd" ]; then
            herd_own="$herd_own$herd_top "
            continue
          fi
          herd_job="$herd_job$herd_top "
          ;;
      esac
      echo "$herd_p"
    done
  }
}

# herd_live_markers PREFIX: the markers (NAME=VALUE) of the live agents whose marker starts
# with PREFIX, a config's `HERD_MARKER=<key>:`.
herd_live_markers() {
  grep -hzx -- "$1[^:]*:[0-9][0-9]*:[0-9][0-9]*" /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | sort -u
}

# herd_leftovers PREFIX: the pids whose marker starts with PREFIX and whose agent is gone.
# Each process is judged by its own marker, not by a list of pids taken earlier: a shell that
# runs this under a live agent forks subshells with that agent's marker as it goes.
herd_leftovers() {
  herd_by_agent "$1" gone
}

# herd_live_job PREFIX: the pids whose marker starts with PREFIX and whose agent is alive: a
# live run's.
herd_live_job() {
  herd_by_agent "$1" live
}

# herd_by_agent PREFIX live|gone: the pids whose marker starts with PREFIX, by whether the
# agent of their marker is alive. No process with such a marker (a start's usual case): one
# look at /proc, and no look for live agents.
herd_by_agent() {
  herd_marked=$(herd_with_env -- "^$1")
  [ -n "$herd_marked" ] || return 0
  herd_live=$(herd_live_markers "$1")
  # shellcheck disable=SC2086 # one word per pid
  herd_entries "${1%%=*}" $herd_marked | while read -r herd_p herd_m; do
    case "
$herd_live
" in
      *"
$herd_m
"*) [ "$2" = gone ] || echo "$herd_p" ;;
      *) [ "$2" = live ] || echo "$herd_p" ;;
    esac
  done
}

# herd_entries NAME PIDS...: `PID NAME=VALUE` for each of PIDS whose environment has NAME (a
# marker: one word), read in one grep for all of them, not one per process. A process gone
# meanwhile has none: nothing to judge.
herd_entries() {
  herd_n=$1
  shift
  [ $# -gt 0 ] || return 0
  herd_files=
  for herd_p in "$@"; do herd_files="$herd_files /proc/$herd_p/environ"; done
  # shellcheck disable=SC2086 # paths of /proc hold no blank
  grep -Hz -- "^$herd_n=" $herd_files 2>/dev/null | tr '\0' '\n' | while IFS= read -r herd_l; do
    herd_p=${herd_l#/proc/}
    echo "${herd_p%%/*} ${herd_l#*/environ:}"
  done
}

# herd_others PREFIX SKIP: the pids whose marker starts with PREFIX and not with SKIP (a run's
# processes but those of its current attempt).
herd_others() {
  # shellcheck disable=SC2046 # one word per pid
  herd_entries "${1%%=*}" $(herd_with_env -- "^$1") | while read -r herd_p herd_m; do
    case $herd_m in
      "$2"*) ;;
      *) echo "$herd_p" ;;
    esac
  done
}

# herd_pick PREFIX all|leftovers|except=SKIP: every process whose marker starts with PREFIX,
# only the leftovers among them, or all but those whose marker starts with SKIP.
herd_pick() {
  case $2 in
    all) herd_with_env -- "^$1" ;;
    except=*) herd_others "$1" "${2#except=}" ;;
    *) herd_leftovers "$1" ;;
  esac
}

# herd_sweep PREFIX all|leftovers|except=SKIP GRACE: stop what herd_pick finds (SIGTERM, up to GRACE
# seconds, SIGKILL) and print their pids on one line. PREFIX holds only characters that mean
# themselves in a basic regular expression (a marker prefix does).
herd_sweep() {
  herd_found=$(herd_pick "$1" "$2")
  [ -n "$herd_found" ] || return 0
  # shellcheck disable=SC2086 # one word per pid
  echo $herd_found
  # shellcheck disable=SC2086 # one word per pid
  kill -TERM $herd_found 2>/dev/null
  herd_t=0
  while [ -n "$(herd_pick "$1" "$2")" ] && [ "$herd_t" -lt "$(($3 * 10))" ]; do
    sleep 0.1
    herd_t=$((herd_t + 1))
  done
  herd_left=$(herd_pick "$1" "$2")
  # shellcheck disable=SC2086 # one word per pid
  [ -z "$herd_left" ] || kill -KILL $herd_left 2>/dev/null
  return 0
}

# herd_on_node HOST PIDS...: those of PIDS that herd runs as node HOST (their HERD_NODE), not
# as another node of the config that is this same machine under another name (localhost and
# 127.0.0.1).
herd_on_node() {
  herd_h=$1
  shift
  for herd_p in "$@"; do
    if [ "$(herd_env HERD_NODE "$herd_p")" = "$herd_h" ]; then echo "$herd_p"; fi
  done
}

# herd_env NAME PID: the value of NAME in process PID's environment, or nothing.
herd_env() {
  herd_v=$(grep -z -- "^$1=" "/proc/$2/environ" 2>/dev/null | tr -d '\0')
  printf '%s' "${herd_v#*=}"
}

# herd_job_procs PIDS...: `PID STATE RANK LOCAL_RANK OWN` for each of PIDS still there, in
# their order: its state, its RANK and LOCAL_RANK (- where its environment has none), and OWN,
# 1 if it is a rank's own process: it has a RANK, and its parent, if one of PIDS, has none or
# another (a rank's data loader workers and helpers inherit its RANK). One grep and one awk for
# all of them: a probe of a torch job asked a few processes for each one, and took 70 ms of a
# node's CPU with four.
herd_job_procs() {
  [ $# -gt 0 ] || return 0
  herd_files=
  for herd_p in "$@"; do herd_files="$herd_files /proc/$herd_p/environ"; done
  # shellcheck disable=SC2086 # paths of /proc hold no blank
  grep -Hz -e '^RANK=' -e '^LOCAL_RANK=' $herd_files 2>/dev/null | tr '\0' '\n' | awk "$herd_awk_stat"'
BEGIN {
  for (i = 1; i < ARGC; i++) if (herd_read_stat("/proc/" ARGV[i] "/stat") != "") order[++n] = ARGV[i]
  ARGC = 1
}
/^\/proc\/[0-9]+\/environ:(LOCAL_)?RANK=./ {
  p = substr($0, 7)
  sub(/\/.*/, "", p)
  v = $0
  sub(/^[^=]*=/, "", v)
  if ($0 ~ /:RANK=/) rank[p] = v
  else local[p] = v
}
END {
  for (i = 1; i <= n; i++) {
    p = order[i]
    q = ppid[p]
    own = (p in rank) && !((q in rank) && rank[q] == rank[p])
    print p, state[p], (p in rank) ? rank[p] : "-", (p in local) ? local[p] : "-", own ? 1 : 0
  }
}' "$@"
}

# herd_ranks PIDS...: `PID RANK` for each of PIDS that is a rank's own (see herd_job_procs).
herd_ranks() {
  herd_job_procs "$@" | herd_own_ranks
}

# herd_own_ranks: `PID RANK` for each rank's own process among herd_job_procs' lines on
# stdin.
herd_own_ranks() {
  while read -r herd_p _ herd_r _ herd_own; do
    [ "$herd_own" != 1 ] || echo "$herd_p $herd_r"
  done
}

# herd_stack PID RANK: one rank's Python stack: `herd-agent stack RANK PID STATUS`, its
# base64 in `herd-agent stack+ CHUNK` lines of at most 3000 characters, `herd-agent
# stack-end`. STATUS: ok (py-spy's dump), failed (its error), missing (no py-spy), or lost
# (no room to hold the dump: see herd_dump_stacks), the last two with herd's words. Short
# lines, each one write: several writers on one pipe never cut into each other's lines.
# py-spy is looked for on the rank's own PATH (its virtualenv's bin), then the caller's; a
# dump is bounded to 3 s (then SIGKILL).
herd_stack() {
  herd_wpath=$(herd_env PATH "$1")
  herd_spy=$(PATH="${herd_wpath:+$herd_wpath:}$PATH" command -v py-spy 2>/dev/null) || herd_spy=
  if [ -z "$herd_spy" ]; then
    herd_st=missing
    herd_out="py-spy is not installed on the node (not on its PATH, nor on the job's): pip install py-spy"
  elif herd_out=$(timeout -k 1 3 "$herd_spy" dump --full-filenames --pid "$1" 2>&1); then
    herd_st=ok
  else
    herd_st=failed
  fi
  herd_stack_say "$2" "$1" "$herd_st" "$herd_out"
}

# herd_stack_say RANK PID STATUS TEXT: one rank's answer, as herd_stack gives it.
herd_stack_say() {
  echo "herd-agent stack $1 $2 $3"
  printf '%s' "$4" | head -c 40000 | base64 -w 3000 | while IFS= read -r herd_c; do
    printf 'herd-agent stack+ %s\n' "$herd_c"
  done
  echo "herd-agent stack-end"
}

# herd_stacks PIDS...: every rank's stack among PIDS (see herd_dump_stacks).
herd_stacks() {
  # shellcheck disable=SC2046 # `PID RANK` pairs, one word each
  herd_dump_stacks $(herd_ranks "$@")
}

# herd_dump_stacks PID RANK...: each rank's stack, dumped at once, each to a file of its own
# (in $TMPDIR, else /dev/shm), then written one rank after another; then `herd-agent
# stacks-done`, always. A rank whose file could not be made or was cut short (a full or
# read-only folder) is answered `lost`, with the reason: never passed over, never late.
herd_dump_stacks() {
  if [ $# -lt 2 ]; then
    echo "herd-agent stacks-done"
    return 0
  fi
  herd_d=
  for herd_t in "${TMPDIR:-/tmp}" /dev/shm; do
    herd_d=$(mktemp -d "$herd_t/herd-stacks.XXXXXX" 2>/dev/null) && break
  done
  herd_want=
  while [ $# -ge 2 ]; do
    [ -z "$herd_d" ] || herd_stack "$1" "$2" 2>/dev/null >"$herd_d/$1" &
    herd_want="$herd_want $1:$2"
    shift 2
  done
  wait
  # The files that hold their rank's whole answer, one name (PID) a line: one grep for all.
  herd_whole=
  [ -z "$herd_d" ] || herd_whole=$(cd "$herd_d" && grep -lx 'herd-agent stack-end' -- * 2>/dev/null)
  herd_nl='
'
  for herd_w in $herd_want; do
    herd_p=${herd_w%:*}
    case "$herd_nl$herd_whole$herd_nl" in
      *"$herd_nl$herd_p$herd_nl"*)
        while IFS= read -r herd_l; do printf '%s\n' "$herd_l"; done <"$herd_d/$herd_p"
        ;;
      *)
        herd_stack_say "${herd_w#*:}" "$herd_p" lost "its stack could not be held on the node: \
no room in ${TMPDIR:-/tmp} or /dev/shm (full, or read-only)"
        ;;
    esac
  done
  [ -z "$herd_d" ] || rm -rf "$herd_d"
  echo "herd-agent stacks-done"
}
