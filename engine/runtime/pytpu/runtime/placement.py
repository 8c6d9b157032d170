"""Where the code under test runs (PYTPU_DEVICE: cpu, xla or tpu), and moving values there:
the device, the seeds of every generator, tensors inside nested values."""

from __future__ import annotations

import os
import random
from typing import Any

import torch

from pytpu.runtime.channel import DEVICES

SEED = 0


def device_kind() -> str:
    kind = os.environ.get("PYTPU_DEVICE", "cpu").strip().lower()
    if kind not in DEVICES:
        raise SystemExit(f"PYTPU_DEVICE={kind!r}: use one of {', '.join(DEVICES[:-1])}")
    return kind


def device() -> torch.device:
    if device_kind() == "xla":
        import torch_xla

        return torch_xla.device()
    return torch.device(device_kind())


def seed_everything(seed: int = SEED) -> None:
    """Seed every generator a test or program may draw from; on XLA also its own generator."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    if device_kind() == "xla":
        import torch_xla.backends
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        # The seed is a device tensor, and a program that turns SPMD on (`xr.use_spmd()`, with
        # several devices) crashes on device tensors made before: it seeds its own generator.
        if xr.global_runtime_device_count() == 1:
            xm.set_rng_state(seed)
        # Full fp32 matmuls, as on the CPU, so that recorded numbers can be compared.
        torch_xla.backends.set_mat_mul_precision("highest")


def to_device(value: Any, target: torch.device | None = None) -> Any:
    target = device() if target is None else target
    return map_tensors(value, lambda t: t.to(target))


def to_cpu(value: Any) -> Any:
    return map_tensors(value, lambda t: t.detach().cpu())


def tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in `value` and in the lists, tuples and dicts it nests."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors(item)]
    return []


def map_tensors(value: Any, fn: Any) -> Any:
    """`value` with `fn` applied to each tensor it holds, its containers rebuilt."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        mapped = [map_tensors(item, fn) for item in value]
        return type(value)(mapped) if not hasattr(value, "_fields") else type(value)(*mapped)
    if isinstance(value, dict):
        return {key: map_tensors(item, fn) for key, item in value.items()}
    return value
