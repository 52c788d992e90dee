"""Train the digits MLP in many processes with DistributedDataParallel.

Each process reads its identity from the variables torchrun sets
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK);
`cohort run` sets the same ones.
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from common import (SEED, evaluate, load_data, make_model, output_dir,
                    parse_args)


def main():
    args = parse_args()
    torch.manual_seed(SEED)
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    node_rank = int(os.environ.get("GROUP_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, init_method="env://")
    print(f"rank {rank}/{world_size} (local {local_rank}, node {node_rank})"
          " ready", flush=True)

    X_train, y_train, X_test, y_test = load_data()
    dataset = TensorDataset(X_train, y_train)
    sampler = DistributedSampler(dataset, shuffle=True, seed=SEED)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = make_model().to(device)
    device_ids = [local_rank] if device.type == "cuda" else None
    model = DistributedDataParallel(model, device_ids=device_ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        loss_sum = 0.0
        for X, y in loader:
            X, y = X.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(X), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(y)
        totals = torch.tensor([loss_sum, len(sampler)], device=device)
        dist.all_reduce(totals)
        mean_loss = (totals[0] / totals[1]).item()
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {mean_loss:.4f}",
                  flush=True)
            # A training metric for cohort (metrics.jsonl, `cohort top`); with the helper
            # package on the path this is cohort.log(step=..., loss=...).
            print(f"cohort.log step={epoch + 1} loss={mean_loss:.4f}", flush=True)

    if rank == 0:
        accuracy = evaluate(model.module, X_test.to(device), y_test.to(device))
        print(f"held-out accuracy: {accuracy:.3f}", flush=True)
        path = os.path.join(output_dir(), "model.pt")
        torch.save(model.module.state_dict(), path)
        print(f"saved {path}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
