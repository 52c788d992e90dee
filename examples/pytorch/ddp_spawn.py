"""Train ddp.py's way, started the way a managed service's boot file is.

The platform starts this script once per node with
`--init_method tcp://<node0>:<port> --rank <node index> --world_size <nodes>`
(`cohort run --launcher spawn` does the same), and the script forks one
process per device with torch.multiprocessing.spawn. Each child works out its
global identity and runs ddp.main().
"""

import argparse
import os
import sys
from urllib.parse import urlparse

import torch
import torch.multiprocessing as mp

import ddp


def run(local_rank, args, nprocs, rest):
    url = urlparse(args.init_method)
    os.environ.update({
        "MASTER_ADDR": url.hostname,
        "MASTER_PORT": str(url.port),
        "RANK": str(args.rank * nprocs + local_rank),
        "WORLD_SIZE": str(args.world_size * nprocs),
        "LOCAL_RANK": str(local_rank),
        "GROUP_RANK": str(args.rank),
    })
    sys.argv = [sys.argv[0]] + rest
    ddp.main()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--init_method", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world_size", type=int, required=True)
    args, rest = parser.parse_known_args()
    # One process per GPU; on a CPU-only machine, as many as the launcher asks.
    nprocs = torch.cuda.device_count() or int(
        os.environ.get("LOCAL_WORLD_SIZE", "1"))
    mp.spawn(run, args=(args, nprocs, rest), nprocs=nprocs)


if __name__ == "__main__":
    main()
