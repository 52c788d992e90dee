"""Data-parallel training on CPU with MindSpore's dynamic cluster (scheduler + workers).

Every process runs this same script. The launcher sets, for all of them,
MS_SCHED_HOST, MS_SCHED_PORT, MS_WORKER_NUM and MS_ROLE (MS_SCHED for the one
scheduler, MS_WORKER for each worker), and MS_NODE_ID=<0..N-1> for the workers.
The scheduler never returns from init(): it exits by itself when the workers are done.
"""
import os

os.environ.setdefault("GLOG_v", "3")  # MindSpore's C++ log: errors only (it is read at import)

import numpy as np
import mindspore as ms
from mindspore import nn, ops
from mindspore.communication import get_group_size, get_rank, init

STEPS, BATCH, FEATURES = 8, 32, 16

ms.set_seed(0)
ms.set_device("CPU")
ms.set_context(mode=ms.PYNATIVE_MODE)
init()  # backend "mccl" on CPU; the scheduler process stays in here until the job ends
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
rank, size = get_rank(), get_group_size()

# Synthetic linear regression; every rank draws its own samples (its share of the batch).
true_w = np.random.default_rng(0).normal(size=(FEATURES, 1)).astype(np.float32)
data = np.random.default_rng(1 + rank)

net = nn.Dense(FEATURES, 1)
loss_fn = nn.MSELoss()
opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
reducer = nn.DistributedGradReducer(opt.parameters)  # mean of the gradients over all ranks

for step in range(STEPS):
    x = data.normal(size=(BATCH, FEATURES)).astype(np.float32)
    loss, grads = grad_fn(ms.Tensor(x), ms.Tensor(x @ true_w))
    opt(reducer(grads))
    print(f"rank {rank}/{size} step {step} loss {loss.asnumpy():.6f}", flush=True)

# The replicas must hold identical weights. AllReduce on CPU can only sum, so compare
# every rank's weights with the mean over all ranks.
weights = ops.concat([p.reshape(-1) for p in net.trainable_params()])
mean = ops.AllReduce()(weights) / size
if not np.allclose(weights.asnumpy(), mean.asnumpy(), rtol=0, atol=1e-6):
    raise SystemExit(f"rank {rank}: replicas diverged")
if rank == 0:
    print("mindspore data-parallel ok", flush=True)
