#!/bin/sh
# What each node runs for scenario 8: RANKS ranks, each `python3 -u` printing L lines with
# plain print() (tests/fixtures/ranks_print.py: text and newline are two writes). Under
# herd (NODE_RANK and HERD_RANK_WRAPPER set) each rank starts through the rank wrapper, as
# torchrun's workers do; under pdsh the node finds its rank from its place in the host list.
# With `torch` as $4, torchrun starts them (pdsh only: herd starts torchrun itself).
#   sh ranks.sh RANKS LINES HOSTS_FILE torch|- VENV|- PORT FIXTURE
per=$1 n=$2 hosts=$3
node=${NODE_RANK-}
if [ -z "$node" ]; then
  me=${SSH_CONNECTION#* * }; me=${me% *}
  node=$(($(grep -nx "$me" "$hosts" | cut -d: -f1) - 1))
fi
if [ "${4-}" = torch ]; then
  PATH=$5/bin:$PATH exec torchrun --nnodes "$(wc -l < "$hosts")" --nproc-per-node "$per" --node-rank "$node" \
    --master-addr "$(head -n 1 "$hosts")" --master-port "$6" "$7" "$n"
fi
l=0
while [ "$l" -lt "$per" ]; do
  if [ -n "${HERD_RANK_WRAPPER-}" ]; then
    RANK=$((node * per + l)) LOCAL_RANK=$l "$HERD_RANK_WRAPPER" 0 python3 -u "$7" "$n" &
  else
    RANK=$((node * per + l)) LOCAL_RANK=$l python3 -u "$7" "$n" &
  fi
  l=$((l + 1))
done
wait
