"""Horovod's allreduce of a float32 tensor, timed: rank 0 prints '<bytes> <us per allreduce>'
for each size named. Run under an MPI launcher: python3 mpi_horovod.py SIZE..."""
import sys
import time

import torch
import horovod.torch as hvd

hvd.init()
for size in map(int, sys.argv[1:]):
    tensor = torch.ones(max(size // 4, 1))
    loops = 500 if size <= 65536 else 50
    for _ in range(20):
        hvd.allreduce(tensor, name=f"warm{size}")
    start = time.perf_counter()
    for _ in range(loops):
        hvd.allreduce(tensor, name=f"timed{size}")
    us = (time.perf_counter() - start) / loops * 1e6
    if hvd.rank() == 0:
        print(f"{size} {us:.2f}", flush=True)
