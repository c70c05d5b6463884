# herd's lookup of the newest checkpoint on a node, for `{latest:GLOB}` in
# `restart.resume_args`. POSIX sh (and `test -nt`, which dash, bash and busybox have).
#
# argv:   $1 the workdir
#         $2 the glob, relative to the workdir: globbed, never split into words
# stdout: the newest match by modification time, between two NULs (nothing between them: no
#         match). A file name holds anything but NUL, a newline too, and a login's init may
#         print before the first NUL.
# exit:   1 when the workdir cannot be entered.
#
# The newest is found with -nt, one file at a time: no argument list to overflow.
cd -- "$1" || exit 1
pattern=$2
IFS=
# shellcheck disable=SC2086 # globbed on purpose; with IFS empty, never split
set -- $pattern
best=
for f in "$@"; do
  [ -e "$f" ] || continue
  # shellcheck disable=SC3013 # -nt: in every sh herd meets on a node
  if [ -z "$best" ] || [ "$f" -nt "$best" ]; then best=$f; fi
done
printf '\0%s\0' "$best"
