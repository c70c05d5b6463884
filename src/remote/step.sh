# One task of herd's fleet step (docs/design/slurm-step.md), run by bash (for /dev/tcp).
# It connects back to the herd that started the step, at the address srun came from
# ($SLURM_LAUNCH_NODE_IPADDR) and the port herd gave (HERD_STEP_PORT), and proves itself with
# the step's key (HERD_STEP_KEY: from the environment, never an argument). Herd answers the
# first connection with this node's command (its length in bytes, a newline, the command);
# the command then runs with its stdin and stdout on that connection and its stderr on a
# second. Its exit status goes back on a third.
addr=${SLURM_LAUNCH_NODE_IPADDR:?} port=${HERD_STEP_PORT:?} key=${HERD_STEP_KEY:?}
node=${SLURMD_NODENAME:-$(hostname -s)}
unset HERD_STEP_KEY HERD_STEP_PORT
exec 3<>"/dev/tcp/$addr/$port" || exit 97
printf '%s %s io\n' "$key" "$node" >&3
exec 4<>"/dev/tcp/$addr/$port" || exit 97
printf '%s %s err\n' "$key" "$node" >&4
# bash reads a socket a byte at a time: nothing after the command is taken from the agent.
LC_ALL=C read -r n <&3 && LC_ALL=C read -r -N "$n" cmd <&3 || exit 98
sh -c "$cmd" <&3 >&3 2>&4 3>&- 4>&-
status=$?
exec 3>&- 4>&-
printf '%s %s exit %d\n' "$key" "$node" "$status" 2>/dev/null >"/dev/tcp/$addr/$port"
exit "$status"
