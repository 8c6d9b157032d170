"""A program that places nothing on a device moves to the XLA device: its model where it is made,
what it gives the model and the loss where they are called, and what the model's methods make;
what is on the device already, constants and numbers are left alone."""

from __future__ import annotations

import textwrap

from pytpu.engine.rewriter.checkout import migrate_text, rule_index

DEVICE = "torch_xla.device()"


def _migrate(source: str) -> tuple[str, set[str]]:
    after, findings = migrate_text(textwrap.dedent(source), rule_index())
    assert migrate_text(after, rule_index())[0] == after  # a second run changes nothing
    return after, {f.rule.id for f in findings}


def _line(after: str, start: str) -> str:
    return next(line.strip() for line in after.splitlines() if line.strip().startswith(start))


def test_a_loader_s_batches_go_through_mp_device_loader_and_are_not_moved_again():
    after, rules = _migrate(
        """
        import torch
        from torch.utils.data import DataLoader

        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 2)))
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        """
    )
    assert {"R-DEV-22", "R-DATA-01"} <= rules
    assert "MpDeviceLoader(loader" in after
    assert _line(after, "torch.nn.functional.mse_loss") == (
        "torch.nn.functional.mse_loss(model(x), y).backward()"
    )


def test_what_the_model_returned_constants_and_numbers_stay_where_they_are():
    after, _ = _migrate(
        """
        import torch

        scale = 0.5
        base = torch.ones(8, 4)
        noisy = torch.normal(2 * base, 1)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(8, 4)
        target = torch.randn(8, 1)
        for step in range(3):
            out = model(x, None)
            loss = ((out - target) * scale).pow(2).mean() + (out > 0).float().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """
    )
    assert _line(after, "out = ") == f"out = model(x.to({DEVICE}), None)"
    assert _line(after, "noisy = ") == "noisy = torch.normal(2 * base, 1)"  # no device value near
    assert _line(after, "loss = ") == (
        f"loss = ((out - target.to({DEVICE})) * scale).pow(2).mean() + (out > 0).float().mean()"
    )


def test_a_module_s_constructor_keeps_its_tensors_and_its_forward_makes_them_on_the_device():
    after, rules = _migrate(
        """
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = nn.Parameter(torch.ones(4))

            def forward(self, x):
                return x * self.scale + torch.zeros(4)

        def helper():
            return torch.zeros(4)

        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            optimizer.zero_grad()
            model(helper()).sum().backward()
            optimizer.step()
        """
    )
    assert "R-DEV-24" in rules
    assert _line(after, "self.scale") == "self.scale = nn.Parameter(torch.ones(4))"
    assert _line(after, "return x") == (f"return x * self.scale + torch.zeros(4, device={DEVICE})")
    assert _line(after, "return torch.zeros") == "return torch.zeros(4)"  # not a module's
    assert _line(after, "model(") == f"model(helper().to({DEVICE})).sum().backward()"


def test_a_program_with_a_device_is_left_to_the_device_rules():
    source = """
        import torch

        device = torch.device("cpu")
        model = torch.nn.Linear(4, 1).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            optimizer.zero_grad()
            model(torch.randn(2, 4).to(device)).sum().backward()
            optimizer.step()
        """
    _, rules = _migrate(source)
    assert not rules & {"R-DEV-21", "R-DEV-22", "R-DEV-23", "R-DEV-24"}


def test_a_tensor_a_method_makes_is_a_device_tensor_to_the_loop_rules_on_the_first_run():
    """`scores = torch.zeros(n)` in a method moves to the device; a write at the index of a loop
    over it is flagged on the first run (as a second run would see it), not only on a second."""
    after, rules = _migrate(
        """
        import torch

        class Attention(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(4, 4)

            def forward(self, x):
                scores = torch.zeros(20)
                for i in range(20):
                    scores[i] = self.linear(x[i]).sum()
                return scores

        model = Attention()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            optimizer.zero_grad()
            model(torch.randn(20, 4)).sum().backward()
            optimizer.step()
        """
    )
    assert {"R-DEV-24"} <= rules
    assert _line(after, "scores = ") == f"scores = torch.zeros(20, device={DEVICE})"
    assert "PYTPU708" in after


def test_what_the_device_computed_is_copied_to_the_host_before_numpy_reads_it():
    after, rules = _migrate(
        """
        import numpy as np
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(8, 4)
        history = []
        for step in range(3):
            out = model(x)
            loss = out.pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append(loss.detach().numpy())
        host = x.numpy()
        kept = out.detach().cpu().numpy()
        array = np.array(out.detach())
        wide = out.detach().double().numpy()
        """
    )
    assert "R-DEV-25" in rules
    assert _line(after, "history.append") == "history.append(loss.detach().cpu().numpy())"
    assert _line(after, "host = ") == "host = x.numpy()"  # a host tensor
    assert _line(after, "kept = ") == "kept = out.detach().cpu().numpy()"  # on the host already
    assert _line(after, "array = ") == "array = np.array(out.detach().cpu())"
    # a dtype conversion stays on the device
    assert _line(after, "wide = ") == "wide = out.detach().double().cpu().numpy()"


# --- only what the code shows to be a tensor moves -----------------------------------------------

_NET = """
import argparse
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x, *args, **kwargs):
        return self.fc(x)

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
n, lr, flag, sizes, pair, opts, word, nothing = 5, 0.5, False, [1, 2], (3, 4), {"a": 1}, "run", None
"""


def _step(body: str) -> str:
    """`_NET` with a training loop around `body` (which sets `loss`)."""
    lines = textwrap.indent(textwrap.dedent(body).strip(), "    ")
    return (
        _NET
        + "for step in range(args.steps):\n"
        + "    x = torch.randn(8, 4)\n"
        + "    y = torch.zeros(8, dtype=torch.long)\n"
        + lines
        + "\n    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
    )


def test_numbers_strings_and_containers_beside_a_tensor_stay_where_they_are():
    """The issue's case: `model(x, n_steps=n)` with `n = 5` or `n = args.steps` became
    `n.to(torch_xla.device())`, an AttributeError at the first call."""
    after, rules = _migrate(
        _step(
            """
            out = model(x, n, lr, flag, sizes, pair, opts, word, nothing, args.steps, 2, 0.5)
            out = out + model(x, n_steps=n, scale=lr, train=flag, sizes=sizes, pair=(1, 2),
                              opts={"b": 2}, name=word, extra=nothing, steps=args.steps)
            loss = F.cross_entropy(out, y, reduction="mean", ignore_index=n)
            """
        )
    )
    assert "R-DEV-23" in rules
    moved = f"x.to({DEVICE})"
    assert _line(after, "out = model(") == (
        f"out = model({moved}, n, lr, flag, sizes, pair, opts, word, nothing, args.steps, 2, 0.5)"
    )
    assert _line(after, "out = out + model(") == (
        f"out = out + model({moved}, n_steps=n, scale=lr, train=flag, sizes=sizes, pair=(1, 2),"
    )
    assert _line(after, "opts=") == 'opts={"b": 2}, name=word, extra=nothing, steps=args.steps)'
    assert _line(after, "loss = ") == (
        f'loss = F.cross_entropy(out, y.to({DEVICE}), reduction="mean", ignore_index=n)'
    )
    assert after.count(".to(") == 4  # the model, x twice, y: no number, string or container


def test_what_the_code_shows_to_be_a_host_tensor_moves():
    """Factories, a dataset's item, a loader's first batch, a tensor method's result, arithmetic
    on a tensor, what a function of the file returns, an annotated parameter and a parameter
    every call gives a tensor."""
    after, _ = _migrate(
        _NET
        + """
def make_inputs(count):
    return torch.randn(count, 4)

def fit(inputs: torch.Tensor, targets, scale):
    return F.cross_entropy(model(inputs) * scale, targets)

def load_inputs(path) -> torch.Tensor:
    return torch.load(path)

def score(batch: torch.Tensor, labels, *rest):
    return F.cross_entropy(model(batch), labels)

scorers = {"default": score}  # (called from elsewhere: its parameters' annotations tell)

dataset = TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))
loader = DataLoader(dataset, batch_size=4, drop_last=True)
first_x, first_y = next(iter(loader))
item_x, item_y = dataset[0]
array = np.ones((8, 4), dtype=np.float32)
for step in range(args.steps):
    x = torch.from_numpy(array)
    y = torch.tensor([0, 1] * 4)
    loss = fit(x.float() * 2, y, 0.5) + fit(make_inputs(8), y, n)
    loss = loss + F.cross_entropy(model(first_x), first_y)
    loss = loss + F.cross_entropy(model(item_x[None]), item_y[None])
    loss = loss + model(load_inputs("x.pt")).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    )
    assert _line(after, "return F.cross_entropy(model(batch") == (
        f"return F.cross_entropy(model(batch.to({DEVICE})), labels)"
    )
    # (a function of the file that gives its parameters the device gets them moved)
    assert _line(after, "return F.cross_entropy(") == (
        "return F.cross_entropy(model(inputs) * scale, targets)"
    )
    assert _line(after, "loss = fit(") == (
        f"loss = fit((x.float() * 2).to({DEVICE}), y.to({DEVICE}), 0.5) + "
        f"fit(make_inputs(8).to({DEVICE}), y.to({DEVICE}), n)"
    )
    # (a function of the file annotated to return a tensor)
    assert _line(after, "loss = loss + model(") == (
        f'loss = loss + model(load_inputs("x.pt").to({DEVICE})).sum()'
    )
    assert _line(after, "loss = loss + F.cross_entropy(model(first") == (
        f"loss = loss + F.cross_entropy(model(first_x.to({DEVICE})), first_y.to({DEVICE}))"
    )
    assert _line(after, "loss = loss + F.cross_entropy(model(item") == (
        f"loss = loss + F.cross_entropy(model(item_x[None].to({DEVICE})), "
        f"item_y[None].to({DEVICE}))"
    )


def test_a_batch_of_a_loader_it_iterates_through_mp_device_loader_is_on_the_device():
    after, _ = _migrate(
        _NET
        + """
loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8).long()), batch_size=4)
for step, (x, y) in enumerate(loader):
    loss = F.cross_entropy(model(x, n), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    )
    assert _line(after, "loss = ") == "loss = F.cross_entropy(model(x, n), y)"


SOURCE_UNKNOWN = """
        import torch
        from batches import load_batch, load_text

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            x, y = load_batch(step)
            loss = torch.nn.functional.mse_loss(model(x, load_text(step)), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """


def test_a_model_input_nothing_shows_to_be_a_tensor_is_flagged_and_left():
    after, rules = _migrate(SOURCE_UNKNOWN)
    assert "R-DEV-27" in rules
    assert "R-DEV-23" not in rules
    assert _line(after, "loss = ") == (
        "loss = torch.nn.functional.mse_loss(model(x, load_text(step)), y)"
    )
    # the model's input and the loss's target are flagged; the model's second argument is not
    assert _line(after, "# PYTPU127").startswith("# PYTPU127: left on the host")
    findings = migrate_text(textwrap.dedent(SOURCE_UNKNOWN), rule_index())[1]
    assert sorted(f.snippet for f in findings if f.rule.id == "R-DEV-27") == ["x", "y"]


def test_a_host_tensor_that_meets_a_device_tensor_in_an_operation_or_a_call_moves():
    after, _ = _migrate(
        _NET
        + """
mask = torch.ones(2)
table = torch.randn(10, 2)
for step in range(args.steps):
    out = model(torch.randn(8, 4))
    index = torch.randint(0, 10, (8,))
    loss = (out * mask).sum() + torch.cat([out, table[index]]).sum() + out.mul(mask).sum()
    loss = loss + (out > mask).float().sum() + out[torch.arange(2)].sum() + (mask * 2).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    )
    assert _line(after, "loss = (out") == (
        f"loss = (out * mask.to({DEVICE})).sum() + torch.cat([out, table[index].to({DEVICE})])"
        f".sum() + out.mul(mask.to({DEVICE})).sum()"
    )
    assert _line(after, "loss = loss + (out") == (
        f"loss = loss + (out > mask.to({DEVICE})).float().sum() + "
        f"out[torch.arange(2).to({DEVICE})].sum() + (mask * 2).sum().to({DEVICE})"
    )  # (a host tensor's own arithmetic stays on the host: `mask * 2`)


def test_an_operation_moved_whole_keeps_its_parentheses():
    after, _ = _migrate(_step("loss = F.cross_entropy(model(x + 1) + model(-x), y)"))
    assert _line(after, "loss = ") == (
        f"loss = F.cross_entropy(model((x + 1).to({DEVICE})) + model((-x).to({DEVICE})), "
        f"y.to({DEVICE}))"
    )


def test_a_name_reassigned_before_its_use_holds_its_last_value():
    """`x = np.load(...)` then `x = torch.from_numpy(x)`: at the model call `x` is a tensor (in a
    branch, either value may reach the use)."""
    after, _ = _migrate(
        _NET
        + """
features = np.ones((8, 4), dtype=np.float32)
features = torch.from_numpy(features)
labels = np.zeros(8)
if args.steps > 1:
    labels = torch.from_numpy(labels).long()
for step in range(args.steps):
    loss = F.cross_entropy(model(features), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    )
    assert (
        _line(after, "loss = ") == f"loss = F.cross_entropy(model(features.to({DEVICE})), labels)"
    )


def test_torch_functions_and_conversions_show_tensors():
    after, _ = _migrate(
        _NET
        + """
import torchvision

data = torchvision.datasets.MNIST("data", download=False)
pair = torch.cat((torch.zeros(4, 4), torch.ones(4, 4)), 0)
images = data.data[:8].view(-1, 4).type(torch.FloatTensor)
unsqueezed = torch.unsqueeze(data.data, dim=1)
for step in range(args.steps):
    loss = model(pair).sum() + model(images).sum() + model(unsqueezed).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    )
    assert _line(after, "loss = ") == (
        f"loss = model(pair.to({DEVICE})).sum() + model(images.to({DEVICE})).sum() + "
        f"model(unsqueezed.to({DEVICE})).sum()"
    )


def test_a_hogwild_model_in_shared_memory_stays_on_the_cpu():
    """`model.share_memory()` for worker processes (Hogwild): an XLA model cannot be shared
    (share_memory raises there), so it is not moved; P-HOGWILD flags the workers."""
    after, codes = _migrate(
        """\
        import torch
        import torch.multiprocessing as mp
        import torch.nn as nn


        def train(model, data):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            for x, y in data:
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


        if __name__ == "__main__":
            model = nn.Linear(3, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            model.share_memory()
            data = [(torch.randn(4, 3), torch.randn(4, 1))]
            workers = [mp.Process(target=train, args=(model, data)) for _ in range(2)]
        """
    )
    assert "torch_xla.device()" not in after
    assert "P-HOGWILD" in codes


def test_a_word_in_a_comment_pytpu_wrote_does_not_make_a_program_train() -> None:
    """The first run's flag on ELU says "backward" in its comment; the file trains nothing, and a
    second run must not find a training program in that comment (pytorch_geometric's
    test/nn/test_resolver.py was changed by a second run)."""
    after, rules = _migrate(
        """\
        import torch

        act = torch.nn.ELU()
        model = torch.nn.Linear(10, 5)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        """
    )
    assert "backward" in after and DEVICE not in after
    assert "R-DEV-22" not in rules
