"""A program that names no device and trains with no optimizer, updating the parameters itself
after `loss.backward()`, moves to the XLA device like one with an optimizer (R-DEV-28, R-DEV-29):
the module whose parameters it updates, or the tensors it updates, where they are made; its
inputs where they meet them; a barrier at the end of each step. Migrated, such programs run on
XLA:CPU, compute what the CPU computed, and compile no more graphs when they run longer."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest

from pytpu.engine.rewriter.checkout import migrate_text, rule_index
from tests.test_xla_fixtures import _losses, _run

DEVICE = "torch_xla.device()"
HARNESS = Path(__file__).parent / "fixtures" / "xla_metrics.py"


def _migrate(source: str) -> tuple[str, list]:
    after, findings = migrate_text(textwrap.dedent(source), rule_index())
    assert migrate_text(after, rule_index())[0] == after  # a second run changes nothing
    return after, findings


def _line(after: str, start: str) -> str:
    return next(line.strip() for line in after.splitlines() if line.strip().startswith(start))


def _rules(findings: list) -> set[str]:
    return {f.rule.id for f in findings}


@pytest.mark.parametrize(
    "update",
    [
        "for param in model.parameters():\n    param -= lr * param.grad",
        "for param in model.parameters():\n    param.data.add_(-lr * param.grad)",
        "for param in model.parameters():\n    param.data -= lr * param.grad.data",
        "for name, param in model.named_parameters():\n    param.sub_(lr * param.grad)",
        "for param in list(model.parameters()):\n    param.copy_(param - lr * param.grad)",
        "for param in model.parameters():\n    param.data = param.data - lr * param.grad",
        "for param in model.parameters():\n    step = param.grad\n    param.data.add_(-lr * step)",
        "model.weight -= lr * model.weight.grad\nmodel.bias -= lr * model.bias.grad",
    ],
)
def test_a_module_whose_parameters_are_updated_by_hand_moves(update):
    body = textwrap.indent(update, "        ")
    after, findings = _migrate(
        f"""
import torch

model = torch.nn.Linear(4, 1)
x = torch.randn(8, 4)
y = torch.randn(8, 1)
lr = 0.01
for step in range(100):
    loss = torch.nn.functional.mse_loss(model(x), y)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
{body}
"""
    )
    assert {"R-DEV-28", "R-DEV-23", "R-SYNC-01"} <= _rules(findings)
    assert "R-DEV-21" not in _rules(findings)
    assert _line(after, "model = ") == f"model = torch.nn.Linear(4, 1).to({DEVICE})"
    assert _line(after, "loss = ") == (
        f"loss = torch.nn.functional.mse_loss(model(x.to({DEVICE})), y.to({DEVICE}))"
    )
    assert after.rstrip().endswith("torch_xla.sync()")  # the step's barrier, after the update


def test_tensors_updated_by_hand_are_made_on_the_device_and_stay_leaves():
    after, findings = _migrate(
        """
        import torch
        from torch.autograd import Variable

        x = torch.randn(64, 10)
        y = torch.randn(64, 1)
        w1 = torch.randn(10, 5, requires_grad=True)
        w2 = Variable(torch.randn(5, 1), requires_grad=True)
        b = torch.zeros(1, requires_grad=True)
        scale = (torch.randn(1) / 10).requires_grad_()
        for t in range(100):
            loss = (x.mm(w1).clamp(min=0).mm(w2) * scale + b - y).pow(2).sum()
            loss.backward()
            with torch.no_grad():
                w1 -= 1e-4 * w1.grad
                w2.data -= 1e-4 * w2.grad.data
                b.sub_(1e-4 * b.grad)
                scale.add_(scale.grad, alpha=-1e-4)
                w1.grad.zero_()
                w2.grad = None
        """
    )
    assert {"R-DEV-29", "R-DEV-23", "R-SYNC-01"} <= _rules(findings)
    # a random factory keeps drawing from the host's generator; the tensor moves before it
    # requires its gradient, so that it is a leaf that gets one
    assert _line(after, "w1 = ") == f"w1 = torch.randn(10, 5).to({DEVICE}).requires_grad_(True)"
    assert _line(after, "w2 = ") == (
        f"w2 = Variable(torch.randn(5, 1).to({DEVICE}), requires_grad=True)"
    )
    assert _line(after, "b = ") == f"b = torch.zeros(1, requires_grad=True, device={DEVICE})"
    assert _line(after, "scale = ") == (
        f"scale = (torch.randn(1) / 10).to({DEVICE}).requires_grad_()"
    )
    assert _line(after, "x = ") == "x = torch.randn(64, 10)"  # data: moved where it meets them
    assert _line(after, "loss = ") == (
        f"loss = (x.to({DEVICE}).mm(w1).clamp(min=0).mm(w2) * scale + b - y.to({DEVICE}))"
        ".pow(2).sum()"
    )


def test_tensors_a_function_updates_through_a_list_are_found():
    """d2l's linear regression from scratch: `sgd([w, b], lr, batch_size)`."""
    after, findings = _migrate(
        """
        import torch

        def linreg(X, w, b):
            return torch.matmul(X, w) + b

        def sgd(params, lr, batch_size):
            with torch.no_grad():
                for param in params:
                    param -= lr * param.grad / batch_size
                    param.grad.zero_()

        features = torch.normal(0, 1, (100, 2))
        labels = torch.matmul(features, torch.tensor([2, -3.4])).reshape(-1, 1) + 4.2
        w = torch.normal(0, 0.01, size=(2, 1), requires_grad=True)
        b = torch.zeros(1, requires_grad=True)
        net = linreg
        for epoch in range(3):
            for i in range(0, 100, 10):
                X, y = features[i:i + 10], labels[i:i + 10]
                l = ((net(X, w, b) - y) ** 2 / 2).sum()
                l.backward()
                sgd([w, b], 0.03, 10)
        """
    )
    assert "R-DEV-29" in _rules(findings)
    assert _line(after, "w = ") == (
        f"w = torch.normal(0, 0.01, size=(2, 1)).to({DEVICE}).requires_grad_(True)"
    )
    assert _line(after, "b = ") == f"b = torch.zeros(1, requires_grad=True, device={DEVICE})"
    # the data meets the parameters where the function of the file is called
    assert (
        _line(after, "l = ") == f"l = ((net(X.to({DEVICE}), w, b) - y.to({DEVICE})) ** 2 / 2).sum()"
    )


def test_tensors_an_optimizer_is_built_from_are_made_on_the_device():
    """patrickloeber/pytorchTutorial's 06_1_loss_and_optimizer: `SGD([w], lr)` over a tensor,
    a function of the file called with a tensor and with a number."""
    after, findings = _migrate(
        """
        import torch
        import torch.nn as nn

        X = torch.tensor([1, 2, 3, 4], dtype=torch.float32)
        Y = torch.tensor([2, 4, 6, 8], dtype=torch.float32)
        w = torch.tensor(0.0, dtype=torch.float32, requires_grad=True)

        def forward(x):
            return w * x

        loss = nn.MSELoss()
        optimizer = torch.optim.SGD([w], lr=0.01)
        for epoch in range(100):
            l = loss(Y, forward(X))
            l.backward()
            optimizer.step()
            optimizer.zero_grad()
        print(forward(5).item())
        """
    )
    assert {"R-DEV-29", "R-DEV-23", "R-SYNC-01"} <= _rules(findings)
    assert "R-DEV-21" not in _rules(findings)
    assert _line(after, "w = ") == (
        f"w = torch.tensor(0.0, dtype=torch.float32, requires_grad=True, device={DEVICE})"
    )
    # `forward` gives its parameter to the device: a tensor moves where it is called, a number
    # stays a number
    assert _line(after, "l = ") == f"l = loss(Y.to({DEVICE}), forward(X.to({DEVICE})))"
    assert _line(after, "print(") == "print(forward(5).item())"


@pytest.mark.parametrize(
    "source",
    [
        # a gradient read, no update
        """
        import torch

        w = torch.randn(3, requires_grad=True)
        for step in range(3):
            (w * 2).sum().backward()
            print(w.grad)
        """,
        # an update of the gradient itself (clipping), not of the tensor
        """
        import torch

        w = torch.randn(3, requires_grad=True)
        for step in range(3):
            (w * 2).sum().backward()
            w.grad -= w.grad.mean()
        """,
        # what a function given its model updates: the model is not made in the file
        """
        import torch

        def train(model, batches):
            for x in batches:
                model(x).sum().backward()
                with torch.no_grad():
                    for p in model.parameters():
                        p -= 0.1 * p.grad
        """,
    ],
)
def test_no_hand_training_no_move(source):
    after, findings = _migrate(source)
    assert "torch_xla" not in after
    assert not _rules(findings) & {"R-DEV-22", "R-DEV-23", "R-DEV-28", "R-DEV-29"}


# --- migrated, they run on XLA -------------------------------------------------------------------

MODULE_SGD = """
import argparse
import math
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
torch.manual_seed(0)
x = torch.linspace(-math.pi, math.pi, 200)
y = torch.sin(x)
xx = x.unsqueeze(-1).pow(torch.tensor([1, 2, 3]))
model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
loss_fn = torch.nn.MSELoss(reduction="sum")
for t in range(args.steps):
    loss = loss_fn(model(xx).flatten(), y)
    print("loss", f"{loss.item():.6f}")
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for param in model.parameters():
            param -= 1e-4 * param.grad
"""

RAW_TENSORS = """
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
torch.manual_seed(0)
x = torch.randn(64, 10)
y = x @ torch.randn(10, 1) + 0.1 * torch.randn(64, 1)
w = torch.randn(10, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
for step in range(args.steps):
    loss = ((x @ w + b - y) ** 2).mean()
    print("loss", f"{loss.item():.6f}")
    loss.backward()
    with torch.no_grad():
        for p in (w, b):
            p -= 0.05 * p.grad
            p.grad.zero_()
"""


@pytest.mark.parametrize("source", [MODULE_SGD, RAW_TENSORS], ids=["module", "raw_tensors"])
def test_a_program_trained_by_hand_runs_on_xla_as_on_the_cpu(tmp_path, source):
    original = _run(["-c", source, "--steps", "6"], tmp_path, xla=False)
    assert original.returncode == 0, original.stderr[-3000:]
    migrated, findings = _migrate(source)
    assert _rules(findings) & {"R-DEV-28", "R-DEV-29"}
    (tmp_path / "train.py").write_text(migrated)

    def run(steps: int) -> tuple[dict, list[float]]:
        metrics = tmp_path / f"metrics-{steps}.json"
        done = _run([str(HARNESS), str(metrics), "train.py", "--steps", str(steps)], tmp_path, True)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(metrics.read_text()), _losses(done.stdout)

    metrics, losses = run(6)
    assert metrics["executions"] > 0, "nothing ran on the XLA device"
    assert metrics["syncs"] >= 6  # a barrier ends each step
    expected = _losses(original.stdout)
    assert len(losses) == len(expected) == 6
    assert all(math.isfinite(v) for v in losses)
    for got, want in zip(losses, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-4), (losses, expected)
    longer, _ = run(12)
    assert longer["compiles"] == metrics["compiles"], "compiles grew with the step count"
