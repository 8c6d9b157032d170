"""A small CUDA training script in the style of the PyTorch examples, written for PyTPU's demo.

It trains a convolutional classifier on synthetic 28x28 "digits" (no download), times its steps
the CUDA way, and saves a checkpoint. It runs on a GPU when one is present, else on the CPU.

    python examples/cuda_mnist/train.py --steps 20
"""

import argparse
import time

import torch
import torch.backends.cudnn as cudnn
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(16 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def synthetic_digits(n, seed):
    """Images whose class decides which rows are bright: learnable, and no download needed."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=generator)
    images = torch.rand(n, 1, 28, 28, generator=generator) * 0.3
    for i, label in enumerate(labels.tolist()):
        images[i, 0, 2 * label:2 * label + 6, :] += 0.7
    return TensorDataset(images, labels)


def main():
    parser = argparse.ArgumentParser(description="synthetic-digits classifier")
    parser.add_argument("--steps", type=int, default=20, help="training steps")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save", default="", help="checkpoint path (empty: do not save)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    cudnn.benchmark = True
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"training on {device}")

    loader = DataLoader(synthetic_digits(args.steps * args.batch_size, args.seed),
                        batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    model.train()
    start = time.perf_counter()
    for step, (data, target) in enumerate(loader):
        data, target = data.to(device, non_blocking=True), target.to(device, non_blocking=True)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    print(f"{args.steps} steps in {time.perf_counter() - start:.2f}s")

    if args.save:
        torch.save(model.state_dict(), args.save)
        restored = Net().to(device)
        restored.load_state_dict(torch.load(args.save, map_location="cuda"))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
