#!/bin/bash
# What each process herd starts on a node for a start costs there: run on a node (e.g. the
# node-share scenario's testbed node, through ssh), with the node scripts of two commits.
#   bash node-steps.sh PROCS_BEFORE PROCS_AFTER MUX_BEFORE MUX_AFTER
# (the files from `git show REV:src/remote/procs.sh` and `git show REV:src/remote/mux.py`).
# Prints a markdown row per step: median wall and median CPU (user + sys) in ms, over N runs
# (default 11), each timed by bash's `time` (ms resolution; CPU of the step's processes).
procs_old=$1 procs_new=$2 mux_old=$3 mux_new=$4
N=${N:-11}
TIMEFORMAT='%3R %3U %3S'
t=$(mktemp)
step() {
  name=$1
  shift
  i=0
  while [ "$i" -lt "$N" ]; do
    { time "$@" >/dev/null 2>&1 </dev/null; } 2>&1
    i=$((i + 1))
  done | awk '{ print $1 * 1000, ($2 + $3) * 1000 }' >"$t.all"
  w=$(sort -n "$t.all" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  c=$(sort -k2,2n "$t.all" | awk '{ a[NR] = $2 } END { print a[int((NR + 1) / 2)] }')
  echo "| $name | $w | $c |"
}
echo "| step | wall ms | CPU ms |"
echo "|---|---|---|"
step "bash -c true (a login's shell, no init)" bash -c true
step "sh -c true" sh -c true
step "subreaper shim (/usr/bin/python3 -S -I, ctypes prctl, exec true)" /usr/bin/python3 -S -I -c 'import os, sys
try:
    import ctypes
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
except Exception:
    pass
os.execvp(sys.argv[1], sys.argv[1:])' true
step "subreaper shim (/usr/bin/perl, syscall prctl, exec true)" env PERL_BADLANG=0 /usr/bin/perl -e 'my $h = "";
if (open my $f, "<", "/proc/self/exe") { read $f, $h, 20 }
my $m = length $h == 20 ? unpack(ord(substr($h, 5, 1)) == 2 ? "n" : "v", substr($h, 18, 2)) : 0;
my %prctl = (62 => 157, 183 => 167, 243 => 167, 21 => 171, 22 => 172);
if ($prctl{$m}) { syscall($prctl{$m}, 36, 1, 0, 0, 0) }
exec { $ARGV[0] } @ARGV;' true
step "presweep, nothing marked: before" sh -c "$(cat "$procs_old")
herd_sweep HERD_MARKER=zz: leftovers 10"
step "presweep, nothing marked: after" sh -c "$(cat "$procs_new")
herd_sweep HERD_MARKER=zz: leftovers 10"
step "mux.py running sh -c 'exec true': before" python3 -IS -c "$(cat "$mux_old")" sh -c 'exec true'
step "mux.py running sh -c 'exec true': after" python3 -IS -c "$(cat "$mux_new")" sh -c 'exec true'
step "setsid true" setsid true
step "the agent's look after the job (strays, tree)" sh -c "$(cat "$procs_new")
x=\$(herd_with_env -xF -- HERD_MARKER=zz:1); y=\$(herd_tree \$\$)"
rm -f "$t" "$t.all"
