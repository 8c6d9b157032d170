"""Explicit CUDA calls mapped to the CPU at run time, inside a program PyTPU runs on the CPU.

The approach of Intel Gaudi's GPU-migration toolkit: the user's files are not edited. The program
takes its CUDA path, as on the GPU it was written for, with the work on the CPU: that path is what
the migration keeps (its data loading, seeding and device choices), so it is the behaviour to
record and the baseline to time. `pytpu.runtime.bootstrap` calls `map_to_cpu` for the harness and
the step timer alike.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import torch

MEMORY_QUERIES = ("memory_allocated", "max_memory_allocated", "memory_reserved")


def _is_cuda(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith("cuda")
    if isinstance(value, torch.device):
        return value.type == "cuda"
    return False


class CudaToCpu(torch.overrides.TorchFunctionMode):
    """Explicit CUDA placements (`.cuda()`, `.to('cuda')`, `device='cuda:0'`) land on the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if "device" in kwargs and (_is_cuda(kwargs["device"]) or isinstance(kwargs["device"], int)):
            kwargs = {**kwargs, "device": "cpu"}
        if func is torch.Tensor.cuda or func is torch.Tensor.pin_memory:
            return args[0]
        if func is torch.Tensor.to and len(args) > 1:
            target = args[1]
            if _is_cuda(target) or (isinstance(target, int) and not isinstance(target, bool)):
                args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


class _CudaEvent:
    """torch.cuda.Event on the CPU: elapsed_time in milliseconds of wall time."""

    def __init__(self, enable_timing: bool = False, **_: Any):
        self.time = None

    def record(self, stream: Any = None) -> None:
        import time

        self.time = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: _CudaEvent) -> float:
        return (end.time - self.time) * 1000.0


def map_to_cpu(in_repo: Callable[[str], bool]) -> None:
    """The program's explicit CUDA calls land on the CPU from here on; `in_repo` tells the
    program's own files (only they see a GPU: torch's internals keep the truth)."""
    if not torch.cuda.is_available():
        _answer_cuda_queries(in_repo)
        _load_onto_the_cpu()
        _distribute_on_the_cpu()
    CudaToCpu().__enter__()


def _answer_cuda_queries(in_repo: Callable[[str], bool]) -> None:
    """torch.cuda answers the program as one GPU would, the work done on the CPU."""
    cuda = torch.cuda

    def for_the_program(real: Any, answer: Any) -> Any:
        def ask(*args: Any, **kwargs: Any) -> Any:
            if in_repo(sys._getframe(1).f_code.co_filename):
                return answer
            return real(*args, **kwargs)

        return ask

    cuda.is_available = for_the_program(cuda.is_available, True)
    # A capability, asked by torch too: autocast('cuda', dtype=torch.bfloat16) checks it before
    # it starts, and would refuse the bfloat16 the program chose on the GPU's answer.
    cuda.is_bf16_supported = lambda *_, **__: True
    cuda.device_count = for_the_program(cuda.device_count, 1)
    cuda.get_device_capability = lambda *_: (8, 0)
    cuda.get_device_properties = lambda *_: types.SimpleNamespace(
        name="cpu (PyTPU harness)", major=8, minor=0, total_memory=16 << 30, multi_processor_count=1
    )
    _constant(cuda, MEMORY_QUERIES, 0)
    cuda.reset_peak_memory_stats = lambda *_, **__: None
    for legacy in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte",
                   "Bool"):  # fmt: skip
        # torch.cuda.FloatTensor(...) and the like build CPU tensors
        setattr(cuda, f"{legacy}Tensor", getattr(torch, f"{legacy}Tensor"))
    cuda.current_device = lambda: 0
    cuda.set_device = lambda *_, **__: None
    cuda.synchronize = lambda *_, **__: None
    cuda.empty_cache = lambda: None
    cuda.get_device_name = lambda *_: "cpu (PyTPU harness)"
    cuda.Event = _CudaEvent
    _answer_random_state(cuda)
    _answer_accelerator_queries(for_the_program)
    set_default_device = torch.set_default_device

    def on_the_cpu(device: Any) -> None:
        # (`torch.set_default_device(torch.accelerator.current_accelerator())`: CUDA's answer)
        set_default_device("cpu" if _is_cuda(device) or type(device) is int else device)

    torch.set_default_device = on_the_cpu


def _answer_random_state(cuda: Any) -> None:
    """The CUDA generator's state, which the program saves and restores around its own draws
    (`torch.cuda.get_rng_state()`). Its 'cuda' tensors are drawn from the CPU generator, as the
    migrated program's are on XLA (where the restore sets XLA's generator, which those draws do
    not use): a state to save, and a restore that leaves the CPU generator alone on both sides.
    (manual_seed and seed are lazy in torch.cuda and need no answer.)"""
    cuda.get_rng_state = lambda *_, **__: torch.get_rng_state()
    cuda.get_rng_state_all = lambda: [torch.get_rng_state()]
    _constant(cuda, ("set_rng_state", "set_rng_state_all"), None)
    cuda.initial_seed = torch.initial_seed


def _answer_accelerator_queries(for_the_program: Callable[[Any, Any], Any]) -> None:
    """torch.accelerator (PyTorch's device-generic API) answers as one CUDA GPU would: the
    program takes its accelerator path, whose 'cuda' placements land on the CPU."""
    accelerator = torch.accelerator
    accelerator.is_available = for_the_program(accelerator.is_available, True)
    accelerator.device_count = for_the_program(accelerator.device_count, 1)
    accelerator.current_accelerator = for_the_program(
        accelerator.current_accelerator, torch.device("cuda")
    )
    _constant(accelerator, ("current_device_index", "current_device_idx"), 0)
    _constant(accelerator, (*MEMORY_QUERIES, "max_memory_reserved"), 0)
    _constant(
        accelerator,
        ("set_device_index", "set_device_idx", "synchronize", "empty_cache")
        + ("reset_peak_memory_stats",),
        None,
    )


def _constant(module: Any, names: tuple[str, ...], value: Any) -> None:
    """Each of `names` in `module` answers `value`, whatever it is given."""
    for name in names:
        setattr(module, name, lambda *_, **__: value)


def _load_onto_the_cpu() -> None:
    """torch.load of a CUDA checkpoint maps its storages to the CPU."""
    original_load = torch.load

    def load(*args: Any, **kwargs: Any) -> Any:
        location = kwargs.get("map_location")
        if _is_cuda(location) or isinstance(location, int):
            kwargs["map_location"] = "cpu"
        elif isinstance(location, dict):
            kwargs["map_location"] = {k: "cpu" if _is_cuda(v) else v for k, v in location.items()}
        return original_load(*args, **kwargs)

    torch.load = load


def _distribute_on_the_cpu() -> None:
    """NCCL becomes gloo, DDP forgets its device ids, data loaders do not pin memory."""
    import torch.distributed as dist

    original_init = dist.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if args and args[0] == "nccl":
            args = ("gloo", *args[1:])
        if kwargs.get("backend") == "nccl":
            kwargs["backend"] = "gloo"
        kwargs.pop("device_id", None)
        return original_init(*args, **kwargs)

    dist.init_process_group = init_process_group
    from torch.nn.parallel import DistributedDataParallel

    original_ddp = DistributedDataParallel.__init__

    def ddp_init(self: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("device_ids", None)
        kwargs.pop("output_device", None)
        args = args[2:] if len(args) >= 2 else ()
        original_ddp(self, module, *args, **kwargs)

    DistributedDataParallel.__init__ = ddp_init
    from torch.utils.data import DataLoader

    original_loader = DataLoader.__init__

    def loader_init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["pin_memory"] = False  # pinned memory needs a GPU; on the CPU it changes nothing
        original_loader(self, *args, **kwargs)

    DataLoader.__init__ = loader_init
