"""Shared pieces of the digits examples: arguments, data, model, accuracy."""

import argparse
import os

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

SEED = 0


def parse_args():
    """Parse --epochs, --lr and --batch-size ('--lr 0.05' or '--lr=0.05')."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=32)
    return parser.parse_args()


def load_data():
    """Return X_train, y_train, X_test, y_test with 20% of digits held out.

    X holds 8x8 images flattened to 64 pixels scaled to [0, 1]; y the
    digit. The split is stratified and the same on every run and rank.
    """
    digits = load_digits()
    X = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.2, random_state=SEED, stratify=y)
    return X_train, y_train, X_test, y_test


def make_model():
    """A small MLP: 64 pixels -> 128 hidden units -> 10 classes."""
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


@torch.no_grad()
def evaluate(model, X, y):
    """Return the fraction of samples in X that model classifies as y."""
    model.eval()
    predicted = model(X).argmax(dim=1)
    model.train()
    return (predicted == y).float().mean().item()


def output_dir():
    """Return $COHORT_OUTPUT_DIR if set, else ./output, creating it."""
    path = os.environ.get("COHORT_OUTPUT_DIR", "output")
    os.makedirs(path, exist_ok=True)
    return path
