"""Each rank adds its number to a gloo all-reduce: the smallest real distributed PyTorch job.

With 2 ranks the sum is 1 + 2 = 3 on every rank. Started by cohort (cohort.run in a notebook,
cohort run, or a server), which sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE.
"""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
print("rank %d/%d: all-reduce sum %.0f" % (rank, world, value.item()), flush=True)
dist.destroy_process_group()
