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
