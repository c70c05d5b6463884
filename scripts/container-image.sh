#!/usr/bin/env bash
# Readies podman on this machine for the container tests (tests/integration/engines.rs), once, and prints
# the test image's name:
# - podman's containers.conf for this kind of machine, unless the file is someone else's
#   (then it says so, and leaves it): runc (crun refuses a hybrid cgroup layout), cgroupfs,
#   events in a file, and default ulimits within this machine's hard limits (the engine's
#   own defaults are above them, and root here may not raise a hard limit);
# - the image: Debian bookworm (minbase) with python3, made by debootstrap from the mirror
#   apt uses. Its root file system's tarball is cached outside the repo, as the torch
#   virtualenv is (about 260 MB; minutes to build), and imported into podman (seconds) when
#   podman does not have the image.
#   HERD_IMAGE_CACHE   where the tarball lives (default: ~/.cache/herd)
set -euo pipefail

IMAGE=localhost/herd-test-python:bookworm
cache=${HERD_IMAGE_CACHE:-$HOME/.cache/herd}
tarball=$cache/rootfs-bookworm-python3.tar
conf=/etc/containers/containers.conf
ours="# Written by herd's scripts/container-image.sh for its test cluster."

min() { if [ "$1" = unlimited ] || { [ "$2" != unlimited ] && [ "$2" -lt "$1" ]; }; then echo "$2"; else echo "$1"; fi; }

if [ -e "$conf" ] && ! head -1 "$conf" | grep -qxF "$ours"; then
  echo "container-image: $conf is not ours; left as it is (podman may need runc and lower ulimits here)" >&2
else
  nofile_hard=$(min "$(ulimit -Hn)" 1048576)
  nofile_soft=$(min "$(ulimit -Sn)" "$nofile_hard")
  # podman 4.3 starts the runtime with at most 32768 processes, whatever the shell allows.
  nproc=$(min "$(ulimit -Hu)" 32768)
  mkdir -p "$(dirname "$conf")"
  tmp=$(mktemp "$conf.XXXXXX")
  cat >"$tmp" <<EOF
$ours
[containers]
default_ulimits = ["nofile=$nofile_soft:$nofile_hard", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  chmod 644 "$tmp"
  mv "$tmp" "$conf"
fi

if podman image exists "$IMAGE"; then
  echo "$IMAGE"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$tarball.lock"
flock 9
if [ ! -f "$tarball" ]; then
  # The first http(s) Debian archive apt is set up with (a `mirror+file:` list is not one
  # debootstrap can use), else Debian's own.
  mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    awk '($1 == "URIs:" || $1 == "deb") { for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\/.*\/debian\/?$/) { sub(/\/$/, "", $i); print $i; exit } }' || true)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  root=$(mktemp -d "$cache/rootfs.XXXXXX")
  # A debootstrap stopped midway may leave its chroot's /proc mounted: unmounted first,
  # and nothing removed past the cache's own file system. The trap runs under errexit, and
  # umount fails where nothing is mounted (the usual case): that must not end the trap
  # before the rm, nor turn a finished image into exit 1.
  cleanup() {
    local status=$?
    umount -R "$root/proc" "$root/sys" "$root/dev" 2>/dev/null || true
    rm -rf --one-file-system "$root" "$root.log" "$tarball.tmp" || true
    exit "$status"
  }
  trap cleanup EXIT
  echo "container-image: debootstrap bookworm from $mirror (once; minutes)" >&2
  debootstrap --variant=minbase --include=python3 bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
    { tail -20 "$root.log" >&2; exit 1; }
  tar -C "$root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
fi
podman import --quiet "$tarball" "$IMAGE" >/dev/null
echo "$IMAGE"
