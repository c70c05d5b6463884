# herd's copy of a node's NCCL flight-recorder dumps after a failed attempt (see src/nccl.rs,
# which reads what this prints). POSIX sh, and `head -c`.
#
# argv:   $1 the workdir
#         $2 the attempt's dump folder, relative to the workdir (each rank dumps to
#            rank_<global rank> in it)
#         $3 the largest dump sent, in bytes
#         $4... the node's own global ranks
# stdout: an empty line and a line `herd-dumps` (after whatever a login shell printed), then
#         for each of those ranks with a dump, `herd-dump R N`, a newline, its N bytes, a
#         newline and `herd-dump-end R`; `herd-dump R too-large N` for one over the largest.
#         A rank without a dump prints nothing (most failures have none); nothing at all
#         when the folder is not there.
#
# Each size is read once, and at most that many bytes sent: a file that grows is cut, one
# that shrinks leaves its frame short, which the reader sees.
cd -- "$1" 2>/dev/null && cd -- "$2" 2>/dev/null || exit 0
max=$3
shift 3
echo
echo herd-dumps
for r in "$@"; do
  f=rank_$r
  [ -f "$f" ] || continue
  n=$(wc -c <"$f") || continue
  n=$((n + 0))
  if [ "$n" -gt "$max" ]; then
    echo "herd-dump $r too-large $n"
    continue
  fi
  echo "herd-dump $r $n"
  head -c "$n" "$f"
  echo
  echo "herd-dump-end $r"
done
