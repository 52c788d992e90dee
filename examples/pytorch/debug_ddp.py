"""A small DDP job to try a debugger on (docs/debugging.md): gloo on the CPU, a few steps.

    cohort run --nodes 2 --nproc-per-node 2 --debug 1 -- python3 debug_ddp.py
    cohort debug JOB --vscode --write        # then attach from VS Code

BREAK_ON_RANK=N calls breakpoint() on rank N at step 2; RAISE_ON_RANK=N raises an exception there
(run it with --post-mortem to be stopped at it).
"""

import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    local_loss = 0.0
    for step in range(5):
        batch = torch.randn(8, 4)
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()  # an all-reduce: every rank waits here for a paused one
        optimizer.step()
        local_loss = loss.item()  # a line to stop at
        if step == 2 and os.environ.get("BREAK_ON_RANK") == str(rank):
            breakpoint()
        if step == 2 and os.environ.get("RAISE_ON_RANK") == str(rank):
            raise RuntimeError("rank %d: a bad batch at step %d" % (rank, step))
    print("rank %d done, loss %.4f" % (rank, local_loss), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
