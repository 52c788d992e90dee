#!/bin/sh
# A start command written the managed training service's documented way, run unchanged by
# cohort: the service (and `cohort run`) starts it once per node with the MA_* and VC_* variables
# set, and it starts torchrun for the node's processes.
#   cohort run --nodes 2 -- sh start.sh
set -e
MASTER_ADDR=${VC_WORKER_HOSTS%%,*}
MASTER_PORT=${MASTER_PORT:-6000}
NODE_RANK=$VC_TASK_INDEX
# --redirects/--tee only because Debian 12's torch 1.13 crashes with its default log flags on
# Python 3.11; newer torch releases do not need them.
exec python3 -m torch.distributed.run --nnodes="$MA_NUM_HOSTS" --node_rank="$NODE_RANK" \
  --nproc_per_node="$MA_NUM_GPUS" --rdzv_backend=c10d \
  --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" --redirects 1 --tee 1 \
  ../pytorch/ddp.py "$@"
