"""Horovod with PyTorch on CPU: the same script runs under horovodrun and under cohort.

    horovodrun -np 4 -H localhost:4 python3 train.py
    cohort run --framework mpi --nodes 2 --nproc-per-node 2 -- python3 train.py

Horovod built with MPI takes its ranks from MPI (one world, the job's mpirun). Each rank trains
a small linear model on its own data with hvd.DistributedOptimizer, which averages the gradients
over the ranks; at the end rank 0 gathers every rank's weights, checks that they are the same
bits, and prints them exactly (float.hex), so that two runs can be compared.
"""
import argparse

import torch
import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
args = parser.parse_args()

hvd.init()
rank, size = hvd.rank(), hvd.size()
print(f"rank {rank}/{size} (local {hvd.local_rank()}/{hvd.local_size()}) ready", flush=True)

total = hvd.allreduce(torch.tensor([float(rank + 1)]), op=hvd.Sum, name="ranks")
if rank == 0:
    print(f"allreduce: sum of 1..{size} is {total.item():g}", flush=True)

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                     named_parameters=model.named_parameters())
data = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
target = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
for step in range(1, args.steps + 1):
    x = torch.randn(16, 4, generator=data)
    loss = torch.nn.functional.mse_loss(model(x), x @ target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    average = hvd.allreduce(loss.detach(), name=f"loss{step}")
    if rank == 0:
        print(f"step {step} loss {average.item():.6f}", flush=True)

weights = torch.cat([p.detach().flatten() for p in model.parameters()])
every = hvd.allgather(weights.unsqueeze(0), name="weights")
if rank == 0:
    same = all(torch.equal(every[0], every[i]) for i in range(size))
    print(f"weights {'identical' if same else 'DIFFERENT'} on {size} ranks: "
          + " ".join(float(w).hex() for w in every[0]), flush=True)
