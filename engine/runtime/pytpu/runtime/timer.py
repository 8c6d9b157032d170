"""PyTPU's step timer inside the user's program (installed by `pytpu.runtime.bootstrap`).

A training step ends at each optimizer step, or, in programs that update their parameters by hand,
at the end of each backward pass of a scalar loss. At each end the XLA side first waits for the
device (`torch_xla.sync(wait=True)`): XLA runs lazily, so the clock would otherwise stop before the
work is done. The first intervals are warm-up (XLA compiles there); once the timed steps are in,
the results are written and the program ends at once. A program that ends earlier leaves what it
got, written at exit. One JSON file per process; settings come as JSON in PYTPU_BENCHMARK. On the
CPU the bootstrap has mapped the program's CUDA calls there first, as test generation runs it.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

# `.item()` and the like show as this counter: a device-to-host read, counted with the transfers,
# not a computation that fell back to the CPU.
NOT_A_FALLBACK = frozenset({"aten::_local_scalar_dense"})
# The fewest timed steps a median is taken of (benchmark.MIN_TIMED).
MIN_TIMED = 2


class StepTimer:
    """The step boundaries of one process and what XLA reported at them."""

    def __init__(self, settings: dict[str, Any]):
        self.out = Path(settings["out"])
        self.device = settings.get("device", "cpu")
        self.warmup = int(settings.get("warmup", 3))
        self.steps = int(settings.get("steps", 10))
        # Quick steps are timed on until they last `least_ms` in all (a median of ten 5 ms steps
        # moves with every hiccup of the machine), up to `most_steps`.
        self.least_ms = float(settings.get("least_ms", 0.0))
        self.most_steps = max(self.steps, int(settings.get("most_steps", self.steps)))
        self.started = time.perf_counter()
        self.boundary: str | None = None  # "optimizer step" or "backward", once one happened
        self.optimizer: int | None = None  # the optimizer whose steps end the training steps
        self.device_name: str | None = None
        self.finished = False
        self.in_backward = False
        self.batch: int | None = None  # the leading size of the latest DataLoader batch
        self.devices = 1  # the devices a step runs on (all of the mesh under SPMD)
        self.sharded = False  # the program split a tensor over the mesh (`xs.mark_sharding`)
        self.devices_present: int | None = None  # the XLA devices the runtime has
        self.restart()

    def restart(self) -> None:
        self.last = self.started
        self.warmup_ms: list[float] = []  # the time to the first boundary, then warm-up steps
        self.step_ms: list[float] = []
        self.evidence_start: dict[str, Any] | None = None  # XLA's counters as timing began
        self.evidence: dict[str, Any] | None = None  # and at the latest boundary
        self.graphs: list[int] = []  # graphs compiled so far, at each boundary (XLA)
        self.samples: list[int | None] = []  # each timed step's batch size (None: not seen)

    # the boundaries

    def watch(self) -> None:
        timer = self
        original_backward = torch.Tensor.backward

        def backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            # Under a TorchFunctionMode (the CPU side maps CUDA with one), Tensor.backward calls
            # itself again through the mode: one backward pass is one boundary.
            outer, timer.in_backward = timer.in_backward, True
            try:
                result = original_backward(tensor, *args, **kwargs)
            finally:
                timer.in_backward = outer
            if tensor.numel() == 1 and not outer:
                timer.after_backward()
            return result

        torch.Tensor.backward = backward
        self.watch_batches()
        self.watch_sharding()
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self.after_optimizer_step)
        atexit.register(self.at_exit)

    def watch_batches(self) -> None:
        """Note each DataLoader batch's size (its first tensor's leading dimension): a step's
        samples, for throughput. (A loader that prefetches, such as MpDeviceLoader's, reads
        ahead; its batches are the same size but the last.)"""
        from torch.utils.data import dataloader

        timer, original_next = self, dataloader._BaseDataLoaderIter.__next__

        def next_batch(iterator: Any) -> Any:
            batch = original_next(iterator)
            timer.batch = leading_size(batch)
            return batch

        dataloader._BaseDataLoaderIter.__next__ = next_batch

    def watch_sharding(self) -> None:
        """Note whether the program splits a tensor over the mesh (`xs.mark_sharding` with a
        partitioned dimension): under SPMD only that makes the devices share a step's work; a
        program that only turns SPMD on computes everything on every device."""
        if self.device != "xla":
            return
        try:
            import torch_xla.distributed.spmd as spmd
            from torch_xla.distributed.spmd import xla_sharding
        except ImportError:
            return
        timer, original = self, xla_sharding.mark_sharding

        def mark_sharding(tensor: Any, mesh: Any, partition_spec: Any, *args: Any, **kw: Any):
            if any(axis is not None for axis in partition_spec):
                timer.sharded = True
            return original(tensor, mesh, partition_spec, *args, **kw)

        xla_sharding.mark_sharding = spmd.mark_sharding = mark_sharding

    def after_backward(self) -> None:
        # Backward ends are boundaries only while no optimizer has stepped.
        if self.boundary in (None, "backward"):
            self.boundary = "backward"
            self.mark()

    def after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.boundary != "optimizer step":
            # The program has optimizer steps: they end the training steps; the backward passes
            # counted so far were part of the first one.
            self.boundary, self.optimizer = "optimizer step", id(optimizer)
            self.restart()
        elif id(optimizer) != self.optimizer:
            return  # another optimizer of the same iteration (a GAN's): one boundary per step
        self.mark()

    def mark(self) -> None:
        if self.finished:
            return
        on_xla = self.wait_for_device()
        stop = time.perf_counter()
        elapsed = (stop - self.last) * 1000.0
        if len(self.warmup_ms) <= self.warmup:
            self.warmup_ms.append(elapsed)
        else:
            self.step_ms.append(elapsed)
            self.samples.append(self.batch)
        if on_xla:
            self.evidence = xla_evidence()
            self.graphs.append(self.evidence["graphs"])
            if not self.step_ms and len(self.warmup_ms) == self.warmup + 1:
                self.evidence_start = self.evidence
        if self.timed_enough() or self.recompiles_every_step():
            self.finish()
        # Written at every step: a run stopped at its time limit still tells what it did.
        self.write(complete=False)
        self.last = time.perf_counter()  # the bookkeeping above is not the program's time

    def timed_enough(self) -> bool:
        timed = len(self.step_ms)
        if timed < self.steps:
            return False
        return sum(self.step_ms) >= self.least_ms or timed >= self.most_steps

    def recompiles_every_step(self) -> bool:
        """Every step since the first compiled a new graph, warm-up and two timed steps
        included: there is no steady state to reach, and more steps would only time the
        compiler (minutes per step for a large graph on XLA:CPU)."""
        if len(self.step_ms) < MIN_TIMED or len(self.graphs) < 2:
            return False
        pairs = zip(self.graphs, self.graphs[1:], strict=False)
        return all(later > earlier for earlier, later in pairs)

    def wait_for_device(self) -> bool:
        """Wait until the device has done the step's work; True on XLA."""
        if self.device == "xla" and "torch_xla" in sys.modules:
            import torch_xla

            torch_xla.sync(wait=True)
            if self.device_name is None:
                import torch_xla.runtime

                self.device_name = f"XLA:{torch_xla.runtime.device_type()}"
                present = torch_xla.runtime.global_runtime_device_count()
                self.devices_present = present
                if torch_xla.runtime.is_spmd():  # one program over the mesh: split, or not
                    self.devices = present if self.sharded else 1
                else:  # one device per process (xmp.spawn, torchrun: one per rank)
                    self.devices = torch_xla.runtime.world_size()
            return True
        if self.device == "tpu" and hasattr(torch, "tpu"):  # TorchTPU, or its CPU stand-in
            torch.tpu.synchronize()
            if self.device_name is None:
                self.device_name = torch.tpu.get_device_name()
        if self.device == "cuda" and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        return False

    # the results

    def finish(self) -> None:
        """All steps are timed: the rest of the program is not needed."""
        self.finished = True
        self.write(complete=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def at_exit(self) -> None:
        if not self.finished:
            self.write(complete=False)

    def write(self, complete: bool) -> None:
        result = {
            "pid": os.getpid(),
            "rank": _rank(),
            "complete": complete,
            "boundary": self.boundary,
            "steps_ran": len(self.warmup_ms) + len(self.step_ms),
            "warmup_ms": self.warmup_ms,
            "step_ms": self.step_ms,
            "samples": self.samples,
            "devices": self.devices,
            "devices_present": self.devices_present,
            "device_name": self.device_name,
            "evidence_start": self.evidence_start,
            "evidence": self.evidence,
            "graphs_at_boundaries": self.graphs,
        }
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"timer-{os.getpid()}.json"
        path.with_suffix(".tmp").write_text(json.dumps(result))
        path.with_suffix(".tmp").replace(path)


def xla_evidence() -> dict[str, Any]:
    """XLA's counters so far: graphs compiled, compile time, transfers to the host, fallbacks."""
    import torch_xla.debug.metrics as met

    compiles = met.metric_data("CompileTime")  # (samples, total ns, recent samples) or None
    transfers = met.metric_data("TransferFromDeviceTime")
    fallbacks = {
        name: met.counter_value(name)
        for name in met.counter_names()
        if name.startswith("aten::") and name not in NOT_A_FALLBACK
    }
    return {
        "graphs": compiles[0] if compiles else 0,
        "compile_seconds": compiles[1] / 1e9 if compiles else 0.0,
        "transfers": transfers[0] if transfers else 0,
        "fallbacks": fallbacks,
    }


def leading_size(batch: Any, depth: int = 0) -> int | None:
    """The leading dimension of the first tensor in `batch` (a tensor, or tuples, lists and
    dicts of them); None without one."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    if depth > 3:
        return None
    items = batch.values() if isinstance(batch, dict) else batch
    if isinstance(items, (list, tuple)) or isinstance(batch, dict):
        for item in items:
            size = leading_size(item, depth + 1)
            if size is not None:
                return size
    return None


def _rank() -> int:
    try:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank()
    except (RuntimeError, ValueError):
        pass
    try:
        return int(os.environ.get("RANK") or 0)
    except ValueError:
        return 0


def install(settings: dict[str, Any]) -> None:
    """Called by `pytpu.runtime.bootstrap` inside the user's program when PYTPU_BENCHMARK is set."""
    StepTimer(settings).watch()
