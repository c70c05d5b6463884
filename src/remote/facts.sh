# herd's facts about a node, for `herd doctor` and the run's preflight (see src/doctor/, whose
# checks read them). POSIX sh; shipped after procs.sh, whose herd_leftovers it uses. Run in
# the job's workdir, after its `setup`, with its env.
#
# argv:   $1 `full`, or `fast`: leave out what costs time (the GPUs, the disks, the limits,
#            the stack tools, the leftovers, the fixed port)
#         $2 the container runtime (the launcher, Python and torch are in the image: the node
#            needs the runtime); empty: none, and the launcher is looked for
#         $3 the launcher program
#         $4 the job's Python, which facts.py ($5) is run with; empty: torch is not looked at
#         $5 facts.py, the Python and torch facts
#         $6 `import`: import torch too (seconds), passed to facts.py; else empty
#         $7 the master's address, a name or an IPv4 or IPv6 address
#         $8 the network interface the config names; empty: none
#         $9 the config's marker entry, whose processes without an agent are leftovers
#         $10 the fixed master port, whose listeners are counted; empty: none
#         $11 with $2: the image, whose ID on this node is reported (`image_id`), or why it
#             could not be (`image_error`: the runtime's last line, a missing image or an
#             engine that cannot be used)
#         $12 with $2, `full` only: the trial, a shell command that runs a container as the
#             job's would (herd's options, the mounts, setup) and checks that the launcher
#             and Python are in it; run only when the node has the image (a trial must never
#             start a pull). Reported as `container_rc` and `container_out` (its last line).
# stdout: `herd-fact NAME=VALUE` lines (the torch import's error too), and whatever else the
#         commands printed, which the checks keep as other lines.
mode=$1 runtime=$2 launcher=$3 python=$4 facts_py=$5 import=$6
master=$7 iface=$8 config_marker=$9 port=${10} image=${11-} trial=${12-}

image_id=
if [ -n "$runtime" ]; then
  echo "herd-fact runtime=$(command -v "$runtime" 2>/dev/null)"
  if [ -n "$image" ] && command -v "$runtime" >/dev/null 2>&1; then
    if image_id=$("$runtime" image inspect --format '{{.Id}}' "$image" 2>/dev/null); then
      image_id=$(printf '%s\n' "$image_id" | head -n 1)
      echo "herd-fact image_id=$image_id"
    else
      image_id=
      echo "herd-fact image_error=$("$runtime" image inspect "$image" 2>&1 >/dev/null | tail -n 1)"
    fi
  fi
else
  echo "herd-fact launcher=$(command -v "$launcher" 2>/dev/null)"
  [ -z "$python" ] || "$python" -c "$facts_py" "$import" 2>&1
fi
h=$(hostname)
echo "herd-fact hostname=$h"
echo "herd-fact hostname_addr=$(getent hosts "$h" 2>/dev/null | awk '{print $1; exit}')"
m=$master
case $m in *[!0-9.]*) m=$(getent ahostsv4 "$m" 2>/dev/null | awk '{print $1; exit}') ;; esac
# On the master itself the route to its own address is via lo: take the interface that holds
# the address instead.
d=$(ip -o addr show to "$m" 2>/dev/null | awk '{print $2; exit}')
[ -n "$d" ] || d=$(ip route get "$m" 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -n 1)
echo "herd-fact route_dev=$d"
if [ -n "$iface" ]; then
  if [ -e "/sys/class/net/$iface" ]; then echo herd-fact iface_exists=yes; else echo herd-fact iface_exists=no; fi
fi
[ "$mode" = full ] || exit 0

if [ -n "$trial" ] && [ -n "$image_id" ]; then
  out=$(sh -c "$trial" </dev/null 2>&1)
  echo "herd-fact container_rc=$?"
  echo "herd-fact container_out=$(printf '%s\n' "$out" | grep -v '^[[:space:]]*$' | tail -n 1)"
fi

if command -v nvidia-smi >/dev/null 2>&1; then
  echo "herd-fact gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
else
  echo herd-fact gpus=0
fi
echo "herd-fact shm_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2{print $2}')"
# shellcheck disable=SC3045 # ulimit -n: in every sh herd meets on a node (dash, bash, busybox)
echo "herd-fact nofile=$(ulimit -n)"
echo "herd-fact disk_free_kb=$(df -Pk . 2>/dev/null | awk 'NR==2{print $4}')"
# What a hang's stacks need: py-spy on the job's PATH, and leave to attach to the ranks. The
# agent bounds each dump with `timeout` and sends it in base64.
echo "herd-fact pyspy=$(command -v py-spy 2>/dev/null)"
missing=
for t in timeout base64; do command -v $t >/dev/null 2>&1 || missing="$missing $t"; done
echo "herd-fact stack_tools_missing=$missing"
echo "herd-fact ptrace_scope=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null)"
echo "herd-fact cap_eff=$(awk '/^CapEff:/{print $2}' /proc/self/status 2>/dev/null)"
# The sweep's own rule: processes of this config whose agent is gone. The doctor's probes,
# and any live run, have theirs.
echo "herd-fact leftovers=$(herd_leftovers "$config_marker" | wc -l)"
if [ -n "$port" ]; then
  # Listening (state 0A) on the port, in either table, whose addresses end in :HEX.
  hex=$(printf '%04X' "$port")
  echo "herd-fact port_in_use=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v p=":$hex" 'substr($2, length($2) - 4) == p && $4 == "0A"' | wc -l)"
fi
