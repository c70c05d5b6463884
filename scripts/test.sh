#!/usr/bin/env bash
# Runs every test on this machine: installs what the tests need (OpenSSH server, iproute2,
# Python venv support, shellcheck, tcsh, BSD csh, Slurm and munge, podman, runc and
# debootstrap, Prometheus, docker, Chromium), creates the cached torch + deepspeed virtualenv, the container
# image and herd's wheel, then runs the suite.
# Needs root: the tests build network namespaces with an sshd (or a slurmd) in each.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null || missing+=(openssh-client)
command -v ip >/dev/null || missing+=(iproute2)
command -v setsid >/dev/null && command -v flock >/dev/null && command -v unshare >/dev/null || missing+=(util-linux)
python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
command -v shellcheck >/dev/null || missing+=(shellcheck)
# A login shell that is not POSIX (tests/integration/doctor.rs, and the remote module's unit tests).
command -v tcsh >/dev/null || missing+=(tcsh)
# BSD csh, which takes no word longer than BUFSIZ (the remote module's unit tests run it as
# /bin/bsd-csh). Installing it makes /bin/csh BSD csh; that link is put back below.
[ -x /bin/bsd-csh ] || missing+=(csh)
csh_was=$(readlink /etc/alternatives/csh 2>/dev/null || true)
# tests/integration/slurm.rs starts its own slurmctld, slurmds and munged; none of them runs as a service.
[ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v srun >/dev/null || missing+=(slurm-wlm)
[ -x /usr/sbin/munged ] && command -v mungekey >/dev/null || missing+=(munge)
# tests/integration/engines.rs runs the job in containers: rootful podman with runc, and an image made
# by debootstrap (scripts/container-image.sh).
command -v podman >/dev/null || missing+=(podman)
[ -x /usr/sbin/runc ] || missing+=(runc)
[ -x /usr/libexec/podman/catatonit ] || missing+=(catatonit) # --init
[ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
# tests/integration/metrics.rs: a real Prometheus scrapes `herd run --metrics`, promtool lints it.
command -v prometheus >/dev/null && command -v promtool >/dev/null || missing+=(prometheus)
# Testbed::silence drops a node's traffic with iptables in its namespace.
command -v iptables >/dev/null || missing+=(iptables)
# tests/integration/engines.rs also runs the jobs on docker: Debian's dockerd (and containerd),
# one per node, started by the tests (tests/integration/support/docker.rs). Without its
# recommends (needrestart would ask about services), and with no service started: the tests
# start their own.
docker=()
command -v dockerd >/dev/null && command -v containerd >/dev/null && command -v docker >/dev/null || docker+=(docker.io)
# A kernel with AppArmor: docker loads its profile with apparmor_parser (a recommend).
[ ${#docker[@]} -eq 0 ] || [ ! -d /sys/module/apparmor ] || command -v apparmor_parser >/dev/null || docker+=(apparmor)
# tests/integration/output.rs has headless Chromium draw the timeline page; without its
# recommends (the check reads the bars' colours, not the text).
bare=()
command -v chromium >/dev/null || bare+=(chromium)
if [ ${#missing[@]} -gt 0 ] || [ ${#docker[@]} -gt 0 ] || [ ${#bare[@]} -gt 0 ]; then
  echo "test.sh: installing ${missing[*]} ${docker[*]} ${bare[*]}" >&2
  apt-get update -qq
  # No service started by the installs (policy-rc.d), for as long as they take.
  made_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  [ ${#missing[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  [ ${#docker[@]} -eq 0 ] ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${docker[@]}" >/dev/null
  [ ${#bare[@]} -eq 0 ] ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${bare[@]}" >/dev/null
  if [ -n "$made_policy" ]; then
    rm -f /usr/sbin/policy-rc.d
    trap - EXIT
  fi
  # Under systemd, the machine's own docker would start at the next boot or socket call,
  # with its iptables rules (FORWARD dropped) across the testbed's bridges: kept off.
  if [ ${#docker[@]} -gt 0 ] && [ -d /run/systemd/system ]; then
    systemctl disable --now docker.socket docker.service containerd.service >/dev/null 2>&1 || true
  fi
  if [ -n "$csh_was" ] && [ "$(readlink /etc/alternatives/csh)" != "$csh_was" ]; then
    update-alternatives --set csh "$csh_was" >/dev/null || true
  fi
fi

./scripts/torch-venv.sh >/dev/null
./scripts/container-image.sh >/dev/null
# tests/integration/wheel.rs installs it into a fresh venv; built here, before the suite, so
# that its release build does not compete with the tests.
HERD_TEST_WHEEL=$(./scripts/wheel.sh)
export HERD_TEST_WHEEL

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --lib --bins --tests "$@"
else
  cargo test --lib --bins --tests "$@"
fi
