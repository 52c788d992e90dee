"""Train the digits MLP in one process, on every GPU, with DataParallel."""

import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import (SEED, evaluate, load_data, make_model, output_dir,
                    parse_args)


def main():
    args = parse_args()
    torch.manual_seed(SEED)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    X_train, y_train, X_test, y_test = load_data()
    dataset = TensorDataset(X_train, y_train)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)

    model = nn.DataParallel(make_model().to(device))
    print(f"DataParallel devices: {model.device_ids or 'none (CPU)'}")
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        loss_sum = 0.0
        for X, y in loader:
            X, y = X.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(X), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(y)
        mean_loss = loss_sum / len(dataset)
        print(f"epoch {epoch + 1}/{args.epochs} loss {mean_loss:.4f}")

    accuracy = evaluate(model, X_test.to(device), y_test.to(device))
    print(f"held-out accuracy: {accuracy:.3f}")
    path = os.path.join(output_dir(), "model.pt")
    torch.save(model.module.state_dict(), path)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
