"""The CPU stand-in for TorchTPU's "tpu" device (pytpu.runtime.tpu_standin).

Each test runs a fresh interpreter that loads the stand-in through the `torch.backends` entry point
(written by `write_autoload`), so this process's torch stays untouched.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from pytpu.runtime.tpu_standin import IMPLEMENTED, PUBLIC_NAMES, write_autoload


@pytest.fixture
def run(tmp_path):
    folder = write_autoload(tmp_path / "autoload")

    def run(code: str, **env: str) -> subprocess.CompletedProcess:
        paths = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        environment.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
        environment.update(env)
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            env=environment,
            cwd=tmp_path,
            timeout=300,
        )

    return run


def result(process: subprocess.CompletedProcess) -> dict:
    """The JSON object the program printed last, or the failure with its stderr."""
    assert process.returncode == 0, process.stderr[-3000:]
    return json.loads(process.stdout.strip().splitlines()[-1])


def test_write_autoload_writes_an_entry_point(tmp_path):
    folder = write_autoload(tmp_path)
    assert folder == tmp_path
    info = tmp_path / "pytpu_runtime_tpu_standin-0.0.dist-info"
    assert "Name: pytpu-runtime-tpu-standin" in (info / "METADATA").read_text()
    assert (info / "entry_points.txt").read_text() == (
        "[torch.backends]\npytpu_runtime_tpu_standin = pytpu.runtime.tpu_standin:load\n"
    )


def test_import_torch_loads_the_standin(run):
    out = result(
        run(
            """
            import json, sys, torch
            print(json.dumps({
                "module": "torch.tpu" in sys.modules and torch.tpu.__name__,
                "device": str(torch.device("tpu")),
                "indexed": str(torch.device("tpu:0")),
                "backend": torch._C._get_privateuse1_backend_name(),
                "accelerator": str(torch.accelerator.current_accelerator()),
                "available": torch.accelerator.is_available(),
                "count": torch.accelerator.device_count(),
                "index": torch.accelerator.current_device_index(),
            }))
            """
        )
    )
    assert out == {
        "module": "torch.tpu",
        "device": "tpu",
        "indexed": "tpu:0",
        "backend": "tpu",
        "accelerator": "tpu",
        "available": True,
        "count": 1,
        "index": 0,
    }


def test_autoload_off_loads_nothing(run):
    out = result(
        run(
            """
            import json, torch
            print(json.dumps({
                "tpu": hasattr(torch, "tpu"),
                "backend": torch._C._get_privateuse1_backend_name(),
            }))
            """,
            TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        )
    )
    assert out == {"tpu": False, "backend": "privateuseone"}


def test_the_real_torch_tpu_wins(run, tmp_path):
    (tmp_path / "torch_tpu").mkdir()
    (tmp_path / "torch_tpu" / "__init__.py").write_text("")
    out = result(
        run(
            """
            import json, torch
            from pytpu.runtime import tpu_standin
            tpu_standin.load()
            print(json.dumps({"tpu": hasattr(torch, "tpu")}))
            """,
            TORCH_DEVICE_BACKEND_AUTOLOAD="1",
        )
    )
    assert out == {"tpu": False}


def test_tensors_report_the_tpu_device(run):
    out = result(
        run(
            """
            import json, torch
            from pytpu.runtime.tpu_standin import executions
            before = executions()
            made = {
                "zeros": torch.zeros(2, 3, device="tpu"),
                "ones": torch.ones(2, device="tpu:0"),
                "randn": torch.randn(2, device=torch.device("tpu")),
                "arange": torch.arange(4, device="tpu"),
                "tensor": torch.tensor([1.0, 2.0], device="tpu"),
                "zeros_like": torch.zeros_like(torch.ones(2), device="tpu"),
                "new_zeros": torch.ones(2).new_zeros(3, device="tpu"),
                "to": torch.ones(2).to("tpu"),
                "to_kw": torch.ones(2).to(device="tpu"),
                "to_tensor": torch.ones(2).to(torch.zeros(1, device="tpu")),
                "method": torch.ones(2).tpu(),
                "op": torch.ones(2, device="tpu") * 3 + 1,
            }
            source = torch.ones(2)
            moved = source.to("tpu")
            moved.add_(1)  # a copy: the CPU tensor keeps its value
            x = made["zeros"]
            print(json.dumps({
                "devices": sorted({str(t.device) for t in made.values()}),
                "is_tpu": x.is_tpu, "is_cpu": x.is_cpu, "get_device": x.get_device(),
                "repr": repr(torch.zeros(2, device="tpu")),
                "cpu": [str(x.cpu().device), str(x.to("cpu").device), type(x.cpu()).__name__],
                "source": source.tolist(),
                "leaf": torch.zeros(2, device="tpu", requires_grad=True).is_leaf,
                "ran": executions() - before,
            }))
            """
        )
    )
    assert out["devices"] == ["tpu:0"]
    assert (out["is_tpu"], out["is_cpu"], out["get_device"]) == (True, False, 0)
    assert out["repr"] == "tensor([0., 0.], device='tpu:0')"
    assert out["cpu"] == ["cpu", "cpu", "Tensor"]
    assert out["source"] == [1.0, 1.0]
    assert out["leaf"] is True
    assert out["ran"] > 10


def test_strict_like_a_real_device(run):
    out = result(
        run(
            """
            import json, torch
            x = torch.ones(2, 3, device="tpu")
            errors = {}
            for name, call in {
                "add": lambda: x + torch.ones(2, 3),
                "radd": lambda: torch.ones(3) + x,
                "cat": lambda: torch.cat([x, torch.ones(2, 3)]),
                "numpy": lambda: x.numpy(),
                "grad": lambda: setattr(torch.ones(2, device="tpu"), "grad", torch.ones(2)),
                "device_index": lambda: torch.ones(2).tpu(5),
                "unknown": lambda: torch.tpu.empty_cache,
            }.items():
                try:
                    call()
                    errors[name] = None
                except Exception as error:
                    errors[name] = [type(error).__name__, str(error)]
            print(json.dumps({
                "errors": errors,
                "scalar": str((x * torch.tensor(2.0)).device),
                "number": str((x * 2).device),
                "host": x.cpu().numpy().tolist(),
                "item": x[0, 0].item(),
                "tolist": x.tolist(),
            }))
            """
        )
    )
    device_error = [
        "RuntimeError",
        "Expected all tensors to be on the same device, but found at least two devices, "
        "tpu:0 and cpu!",
    ]
    errors = out["errors"]
    assert errors["add"] == errors["radd"] == errors["cat"] == device_error
    assert errors["numpy"] == [
        "TypeError",
        "can't convert tpu:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
        "to host memory first.",
    ]
    assert errors["grad"][0] == "RuntimeError"
    assert errors["device_index"][0] == "RuntimeError"
    assert errors["unknown"] == ["AttributeError", "TorchTPU 0.2.0 has no torch.tpu.empty_cache"]
    assert out["scalar"] == out["number"] == "tpu:0"
    assert out["host"] == out["tolist"] == [[1.0] * 3] * 2
    assert out["item"] == 1.0


TRAINING = """
    import io, json, torch, torch.nn as nn

    def train(move, optimizer_class):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        optimizer = optimizer_class(model.parameters(), lr=0.05)
        device = move(model)
        inputs, targets = torch.randn(16, 4), torch.randn(16, 2)
        for _ in range(3):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs.to(device)), targets.to(device))
            loss.backward()
            optimizer.step()
        return model, loss

    def on_cpu(model):
        return "cpu"

    def with_to(model):
        model.to("tpu")
        return "tpu"

    def with_method(model):
        model.tpu()
        return "tpu"

    report = {}
    for name, optimizer_class in {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}.items():
        reference, _ = train(on_cpu, optimizer_class)
        for move in (with_to, with_method):
            model, loss = train(move, optimizer_class)
            for expected, got in zip(reference.parameters(), model.parameters()):
                torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
            state = model.state_dict()
            buffer = io.BytesIO()
            torch.save(state, buffer)
            buffer.seek(0)
            loaded = torch.load(buffer, map_location="cpu")
            report[f"{name}-{move.__name__}"] = {
                "parameter": all(isinstance(p, nn.Parameter) for p in model.parameters()),
                "devices": sorted({str(p.device) for p in model.parameters()}),
                "grads": sorted({str(p.grad.device) for p in model.parameters()}),
                "loss": str(loss.device),
                "state": sorted({str(v.device) for v in state.values()}),
                "loaded": sorted({type(v).__name__ for v in loaded.values()}),
            }
    print(json.dumps(report))
"""


def test_training_on_tpu_matches_the_cpu(run):
    out = result(run(TRAINING))
    expected = {
        "parameter": True,
        "devices": ["tpu:0"],
        "grads": ["tpu:0"],
        "loss": "tpu:0",
        "state": ["tpu:0"],
        "loaded": ["Tensor"],
    }
    assert set(out) == {"sgd-with_to", "sgd-with_method", "adam-with_to", "adam-with_method"}
    for name, report in out.items():
        assert report == expected, name


def test_torch_tpu_module(run):
    out = result(
        run(
            """
            import json, torch
            from pytpu.runtime.tpu_standin import IMPLEMENTED
            tpu = torch.tpu
            start, end = tpu.Event(enable_timing=True), tpu.Event(enable_timing=True)
            start.record()
            tpu.current_stream().synchronize()
            end.record()
            end.synchronize()
            tpu.manual_seed(3)
            on_tpu = torch.randn(3, device="tpu").tolist()
            torch.manual_seed(3)
            with tpu.device(1):
                inside = tpu.current_device()
            with torch.autocast("tpu", dtype=torch.bfloat16):
                product = torch.ones(2, 2, device="tpu") @ torch.ones(2, 2, device="tpu")
            print(json.dumps({
                "names": sorted(name for name in dir(tpu) if not name.startswith("_")),
                "implemented": sorted(IMPLEMENTED),
                "available": tpu.is_available(),
                "count": tpu.device_count(),
                "current": tpu.current_device(),
                "inside": inside,
                "name": tpu.get_device_name(),
                "properties": tpu.get_device_properties(0).name,
                "amp": [str(dtype) for dtype in tpu.get_amp_supported_dtype()],
                "elapsed": start.elapsed_time(end) >= 0,
                "same_numbers": on_tpu == torch.randn(3).tolist(),
                "autocast": [str(product.dtype), str(product.device)],
            }))
            """,
            TPU_STANDIN_DEVICES="2",
        )
    )
    assert set(out["names"]) <= PUBLIC_NAMES
    assert set(out["names"]) == set(out["implemented"]) == IMPLEMENTED
    assert out["available"] is True
    assert (out["count"], out["current"], out["inside"]) == (2, 0, 1)
    assert out["name"] == out["properties"] == "TPU stand-in (CPU)"
    assert out["amp"] == ["torch.bfloat16", "torch.float32"]
    assert out["elapsed"] is True
    assert out["same_numbers"] is True
    assert out["autocast"] == ["torch.bfloat16", "tpu:0"]


def test_threads_see_the_device(run):
    out = result(
        run(
            """
            import json, torch
            from concurrent.futures import ThreadPoolExecutor
            x = torch.ones(2, device="tpu")
            def work(_):
                return [str(torch.zeros(1, device="tpu").device), str((x + 1).device)]
            with ThreadPoolExecutor(2) as pool:
                print(json.dumps(list(pool.map(work, range(2)))))
            """
        )
    )
    assert out == [["tpu:0", "tpu:0"]] * 2


def test_declared_names_are_torch_tpu_names():
    assert IMPLEMENTED <= PUBLIC_NAMES
    assert len(PUBLIC_NAMES) == 30


def test_checkpoints_keep_their_device_as_on_a_real_one(run):
    out = result(
        run(
            """
            import io, json, torch

            model = torch.nn.Sequential(torch.nn.Linear(3, 2)).to("tpu")

            def saved(obj):
                buffer = io.BytesIO()
                torch.save(obj, buffer)
                buffer.seek(0)
                return buffer

            state = torch.load(saved(model.state_dict()))
            on_cpu = torch.load(saved(model.state_dict()), map_location="cpu")
            whole = torch.load(saved(model), weights_only=False)
            moved = torch.load(saved(torch.nn.Linear(3, 2)), weights_only=False, map_location="tpu")
            plain = torch.load(saved({"w": torch.ones(2)}))
            print(json.dumps({
                "state": sorted({str(t.device) for t in state.values()}),
                "on_cpu": sorted({str(t.device) for t in on_cpu.values()}),
                "whole": [str(p.device) for p in whole.parameters()],
                "whole_is_parameter": all(
                    isinstance(p, torch.nn.Parameter) for p in whole.parameters()
                ),
                "moved": sorted({str(p.device) for p in moved.parameters()}),
                "plain": str(plain["w"].device),
                "runs": str(whole(torch.randn(4, 3, device="tpu")).device),
            }))
            """
        )
    )
    assert out["state"] == ["tpu:0"] and out["on_cpu"] == ["cpu"] and out["plain"] == "cpu"
    assert out["whole"] == ["tpu:0", "tpu:0"] and out["whole_is_parameter"]
    assert out["moved"] == ["tpu:0"] and out["runs"] == "tpu:0"


def test_an_integer_device_is_the_tpu(run):
    out = result(
        run(
            """
            import json, torch

            x = torch.randn(2, 3).to(0)
            model = torch.nn.Linear(3, 1).to(0)
            print(json.dumps({"x": str(x.device), "y": str(model(x).device)}))
            """
        )
    )
    assert out == {"x": "tpu:0", "y": "tpu:0"}


def test_a_legacy_variable_keeps_its_device(run):
    """`Variable(t)` builds its tensor in C++, past the stand-in's mode; on a GPU it keeps the
    device, so a tpu tensor wrapped in one must stay on the tpu (GAN code of 2018 does this)."""
    out = result(
        run(
            """
            import json, torch
            from torch.autograd import Variable

            real = Variable(torch.ones(2, 1).tpu(), requires_grad=False)
            host = Variable(torch.ones(2, 1))
            loss = torch.nn.BCELoss()(torch.sigmoid(torch.zeros(2, 1, device="tpu")), real)
            print(json.dumps({
                "real": str(real.device), "host": str(host.device), "loss": str(loss.device),
                "is_variable": isinstance(real, Variable), "grad": real.requires_grad,
            }))
            """
        )
    )
    assert out == {
        "real": "tpu:0",
        "host": "cpu",
        "loss": "tpu:0",
        "is_variable": True,
        "grad": False,
    }


DDP_SCRIPT = """
import os, torch, torch.distributed as dist, torch.multiprocessing as mp

def work(rank, world):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
    dist.init_process_group("tpu", rank=rank, world_size=world)
    total = torch.ones(2, device="tpu") * (rank + 1)
    dist.all_reduce(total)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1).to("tpu"))
    model(torch.randn(4, 3, device="tpu")).sum().backward()
    grad = model.module.weight.grad
    # (a file per rank: the two processes' prints would interleave on one stdout)
    with open(f"rank{rank}.txt", "w") as out:
        print(rank, total.tolist(), total.device, grad.device, file=out)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(work, args=(2,), nprocs=2)
    for rank in range(2):
        print(open(f"rank{rank}.txt").read().strip())
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_tpu_process_group_runs_ddp(run, tmp_path):
    # (mp.spawn needs a script file: its workers import the main module by path)
    (tmp_path / "ddp.py").write_text(DDP_SCRIPT)
    out = run(
        "import runpy, sys; sys.argv = ['ddp.py']; runpy.run_path('ddp.py', run_name='__main__')",
        PORT=str(_free_port()),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # (gloo's own connection lines share the stdout)
    lines = sorted(line for line in out.stdout.splitlines() if line.endswith("tpu:0 tpu:0"))
    assert lines == ["0 [3.0, 3.0] tpu:0 tpu:0", "1 [3.0, 3.0] tpu:0 tpu:0"]
