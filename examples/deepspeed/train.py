"""Data-parallel training with DeepSpeed on CPU: a small regression, the same on every launcher.

Runs unchanged under DeepSpeed's own launcher (`deepspeed --num_gpus 4 train.py`) and under
cohort (`cohort run -f train.yaml`): both give each rank RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT and `--local_rank=N`. Every rank trains on its own shard of the data;
at the end every rank holds the same weights, which rank 0 prints with the final loss.
"""
import argparse
import os

import deepspeed
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)  # DeepSpeed's launchers pass it
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--fail_rank", type=int, default=-1, help="this rank raises at step 3")
args = parser.parse_args()

deepspeed.init_distributed(dist_backend="gloo")
rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
assert args.local_rank == int(os.environ["LOCAL_RANK"]), (args.local_rank, os.environ["LOCAL_RANK"])
print(f"rank {rank}/{world} local {args.local_rank} ready", flush=True)

torch.manual_seed(0)
true_w = torch.randn(16, 1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
config = {
    "train_micro_batch_size_per_gpu": 16,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "SGD", "params": {"lr": 0.05}},
    "steps_per_print": 1000,
}
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                       config=config)
data = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
for step in range(args.steps):
    x = torch.randn(16, 16, generator=data)
    y = x @ true_w
    loss = torch.nn.functional.mse_loss(engine(x), y)
    engine.backward(loss)
    engine.step()
    if step == 3 and rank == args.fail_rank:
        raise RuntimeError(f"rank {rank} failed on purpose at step {step}")
    if rank == 0 and (step % 10 == 9 or step == args.steps - 1):
        print(f"step {step + 1} loss {loss.item():.6f}", flush=True)

# Data parallelism kept every rank's weights the same: compare them with rank 0's.
flat = torch.cat([p.detach().flatten() for p in engine.module.parameters()])
first = flat.clone()
torch.distributed.broadcast(first, 0)
same = torch.tensor([int(torch.equal(flat, first))])
torch.distributed.all_reduce(same)
if rank == 0:
    print(f"weights identical on {same.item()}/{world} ranks, sum {flat.sum().item():.6f}", flush=True)
