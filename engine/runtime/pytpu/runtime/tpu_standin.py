"""A strict CPU-backed stand-in for TorchTPU's ``"tpu"`` device, for machines without a TPU.

TorchTPU (the ``torch-tpu`` distribution, 0.2.0) is Google's out-of-tree PyTorch backend: ``import
torch`` loads it through the ``torch.backends`` entry-point group, it renames PyTorch's
privateuse1 device to ``"tpu"`` and registers a ``torch.tpu`` module shaped like ``torch.cuda``.
`load` does the same with the CPU underneath, so a program migrated to TorchTPU runs, and is
checked, on a CPU-only machine:

- a tensor "on tpu" is a CPU tensor of the marker class `TpuTensor`, whose ``.device`` reads
  ``tpu:0``; autograd, storage and kernels are the CPU's;
- a global ``TorchFunctionMode`` maps ``device="tpu"`` (factories, ``.to``, ``.tpu()``) to the
  CPU and marks the results, and ``.cpu()`` / ``.to("cpu")`` copy back to plain tensors;
- it is strict like a real device: mixing a tpu tensor with a CPU tensor of one dimension or more
  raises PyTorch's device error, ``.numpy()`` on a tpu tensor raises as on CUDA, and
  ``torch.tpu`` has only names that TorchTPU 0.2.0 has.

What a real TPU changes: TorchTPU runs eagerly (with fused modes) and compiles with XLA, so its
numbers differ from the CPU's in float rounding (bfloat16 matmuls, fused reductions); the stand-in
computes exactly the CPU's numbers, and its speed is the CPU's (slower, even, for the Python
dispatch of every op). `write_autoload` writes the entry point that makes a fresh interpreter
load the stand-in on ``import torch``; the real ``torch_tpu`` package, when installed, wins.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import os
import threading
import time
import types
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

# As TorchTPU's loader does: no backend autoload while this module imports torch, or torch would
# import this module again, half-initialised, through the stand-in's own entry point.
_AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"
_autoload_was = os.environ.get(_AUTOLOAD)
os.environ[_AUTOLOAD] = "0"
import torch  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_map  # noqa: E402

if _autoload_was is None:
    del os.environ[_AUTOLOAD]
else:
    os.environ[_AUTOLOAD] = _autoload_was

from pytpu.runtime import launch  # noqa: E402

DEVICE_TYPE = "tpu"

# torch.tpu in TorchTPU 0.2.0: the names a migrated program may use.
PUBLIC_NAMES = frozenset(
    """EagerMode Event Precision Stream allow_excess_precision current_device current_stream
    default_generators default_stream device device_count device_of eager_mode
    get_amp_supported_dtype get_device_name get_device_properties get_rng_state initial_seed
    is_available is_initialized manual_seed manual_seed_all precision set_device set_eager_mode
    set_rng_state set_stream stream synchronize topology_aware_mesh""".split()
)

DEVICE_ERROR = (
    "Expected all tensors to be on the same device, but found at least two devices, tpu:0 and cpu!"
)
NUMPY_ERROR = (
    "can't convert tpu:0 device type tensor to numpy. "
    "Use Tensor.cpu() to copy the tensor to host memory first."
)

_state = threading.local()  # depth: how deep this thread is inside the stand-in's own dispatch
_lock = threading.Lock()
_executions = 0
_loaded = False
_tpu_device: torch.device | None = None  # torch.device("tpu", 0), valid once renamed


def active() -> bool:
    """The stand-in is the tpu device of this process (loaded, and no TorchTPU installed)."""
    return _loaded


def executions() -> int:
    """How many torch calls ran with tpu tensors (or created some) since `load`."""
    return _executions


def _inside() -> bool:
    return getattr(_state, "depth", 0) > 0


def _count() -> None:
    global _executions
    with _lock:
        _executions += 1


# --- the marker classes -------------------------------------------------------------------------


class TpuTensor(torch.Tensor):
    """A CPU tensor that reports the tpu device; every torch call on it goes through `_dispatch`."""

    @property
    def device(self) -> torch.device:
        # Inside a torch function that the stand-in runs, torch's own Python code sees the CPU,
        # so what it creates with `device=x.device` lands where the computation is.
        return torch.device("cpu") if _inside() else _tpu_device

    @property
    def is_cpu(self) -> bool:
        return _inside()

    @property
    def is_tpu(self) -> bool:
        return not _inside()

    def get_device(self) -> int:
        return -1 if _inside() else 0

    def numpy(self, *, force: bool = False) -> Any:
        if not force:
            raise TypeError(NUMPY_ERROR)
        with torch._C.DisableTorchFunctionSubclass():
            return self.detach().cpu().resolve_conj().resolve_neg().numpy()

    # Autograd creates gradients as plain CPU tensors; the gradient of a tpu tensor is on tpu,
    # so the getter marks the gradient object itself (its identity stays, as optimizers need).
    @property
    def grad(self) -> torch.Tensor | None:
        with torch._C.DisableTorchFunction():
            grad = torch._C.TensorBase.grad.__get__(self)
        if grad is not None and type(grad) is torch.Tensor:
            grad.__class__ = TpuTensor
        return grad

    @grad.setter
    def grad(self, value: torch.Tensor | None) -> None:
        if value is not None and not isinstance(value, TpuTensor):
            raise RuntimeError(
                "attempting to assign a gradient with device type 'cpu' to a tensor with device "
                "type 'tpu'. Please ensure that the gradient and the tensor are on the same device"
            )
        with torch._C.DisableTorchFunction():
            torch._C.TensorBase.grad.__set__(self, value)

    @grad.deleter
    def grad(self) -> None:
        with torch._C.DisableTorchFunction():
            torch._C.TensorBase.grad.__delete__(self)

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        # torch names a subclass in its repr; a real device tensor prints as tensor(...).
        text = torch.Tensor.__repr__(self, tensor_contents=tensor_contents)
        if text.startswith("Parameter(") and text.endswith(")"):
            text = text[len("Parameter(") : -1]  # how torch wraps a Parameter subclass
        prefix = type(self).__name__ + "("
        if text.startswith(prefix):
            indent = "\n" + " " * (len(prefix) - len("tensor("))
            text = "tensor(" + text[len(prefix) :].replace(indent, "\n")
        if isinstance(self, torch.nn.Parameter):
            text = "Parameter containing:\n" + text
        return text

    def __reduce_ex__(self, protocol: int) -> Any:
        # Saved as a plain tensor: a checkpoint loads anywhere, as a CUDA one does with
        # map_location="cpu", and torch.load(weights_only=True) needs no unknown class.
        return _plain(self).__reduce_ex__(protocol)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Reached only where the mode is not active (a thread the patch did not see).
        return _dispatch(func, args, kwargs or {})


class TpuParameter(TpuTensor, torch.nn.Parameter):
    """An ``nn.Parameter`` on tpu; `isinstance(p, nn.Parameter)` holds."""

    def __new__(cls, data: torch.Tensor | None = None, requires_grad: bool = True):
        if data is None:
            data = torch.empty(0)
        with torch._C.DisableTorchFunction():
            return torch.Tensor._make_subclass(cls, data, requires_grad)

    def __reduce_ex__(self, protocol: int) -> Any:
        return (
            torch._utils._rebuild_parameter,
            (_plain(self).detach(), self.requires_grad, OrderedDict()),
        )


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """The same storage as a plain torch.Tensor (an alias in the autograd graph)."""
    with torch._C.DisableTorchFunction():
        return torch._C.TensorBase.as_subclass(tensor, torch.Tensor)


def _mark(tensor: torch.Tensor) -> torch.Tensor:
    """Turns a fresh plain tensor into a tpu one in place (a leaf stays a leaf)."""
    if type(tensor) is torch.Tensor:
        tensor.__class__ = TpuTensor
    elif type(tensor) is torch.nn.Parameter:
        tensor.__class__ = TpuParameter
    return tensor


def _unmark(tensor: torch.Tensor) -> torch.Tensor:
    if type(tensor) is TpuTensor:
        tensor.__class__ = torch.Tensor
    elif type(tensor) is TpuParameter:
        tensor.__class__ = torch.nn.Parameter
    return tensor


# --- dispatch -----------------------------------------------------------------------------------


def _names_tpu(device: Any) -> bool:
    # An int is an index of the current accelerator's devices, as torch reads it: the tpu here.
    if isinstance(device, int) and not isinstance(device, bool):
        return True
    if isinstance(device, str):
        return device == DEVICE_TYPE or device.startswith(DEVICE_TYPE + ":")
    return isinstance(device, torch.device) and device.type == DEVICE_TYPE


def _names_cpu(device: Any) -> bool:
    if isinstance(device, str):
        return device == "cpu" or device.startswith("cpu:")
    return isinstance(device, torch.device) and device.type == "cpu"


def _is_descriptor(func: Any, name: str, method: str) -> bool:
    return getattr(func, "__name__", None) == method and getattr(func, "__self__", None) is getattr(
        torch._C.TensorBase, name
    )


# Calls that legitimately take tensors of two devices, as on CUDA: copies between devices, and
# indexing with CPU index tensors.
_CROSS_DEVICE = {
    torch.Tensor.to,
    torch.Tensor.copy_,
    torch.Tensor.cpu,
    torch.Tensor.__getitem__,
    torch.Tensor.__setitem__,
    torch.Tensor.new_tensor,
    torch.Tensor.type_as,
    torch._has_compatible_shallow_copy_type,
}
# Functions whose result may share memory with their input (a numpy array, a CPU tensor).
_MAY_ALIAS = {torch.as_tensor, torch.asarray}
# Printing shows the device, so torch's formatting code must see tpu.
_SHOWS_DEVICE = {torch.Tensor.__repr__, torch.Tensor.__str__, torch.Tensor.__format__}


@functools.cache
def _constructors() -> frozenset:
    from torch.utils._device import _device_constructors

    return frozenset(_device_constructors())


def _default_device() -> torch.device | None:
    from torch.utils._device import DeviceContext

    for mode in torch.overrides._get_current_function_mode_stack():
        if isinstance(mode, DeviceContext):
            return mode.device
    return None


def _device_args(func, args, kwargs):
    """Maps tpu device arguments to the CPU; returns (args, kwargs, to_tpu, to_cpu)."""
    to_tpu = to_cpu = False
    if "device" not in kwargs and func in _constructors() and _names_tpu(_default_device()):
        # torch.set_default_device("tpu") / `with torch.device("tpu")`: torch's DeviceContext
        # sits below this mode and would add device="tpu" after it.
        kwargs = {**kwargs, "device": DEVICE_TYPE}
    if "device" in kwargs:
        if _names_tpu(kwargs["device"]):
            kwargs = {**kwargs, "device": "cpu"}
            to_tpu = True
        elif func is torch.Tensor.to and _names_cpu(kwargs["device"]):
            to_cpu = True
    if func is torch.Tensor.to and len(args) > 1:
        target = args[1]
        if _names_tpu(target):
            args = (args[0], "cpu", *args[2:])
            to_tpu = True
        elif isinstance(target, TpuTensor):
            args = (args[0], _plain(target), *args[2:])
            to_tpu = True
        elif isinstance(target, torch.Tensor) or _names_cpu(target):
            to_cpu = True
    elif func is torch.Tensor.cpu:
        to_cpu = True
    return args, kwargs, to_tpu, to_cpu


def _check_devices(func, flat: list) -> bool:
    """True when a tpu tensor takes part; raises when it meets a CPU tensor of one dim or more."""
    tpu = any(isinstance(value, TpuTensor) for value in flat)
    if tpu and func not in _CROSS_DEVICE:
        for value in flat:
            if (
                isinstance(value, torch.Tensor)
                and not isinstance(value, TpuTensor)
                and torch._C.TensorBase.dim(value) > 0
            ):
                raise RuntimeError(DEVICE_ERROR)
    return tpu


def _check_index(device: Any) -> None:
    index = device.index if isinstance(device, torch.device) else device
    if isinstance(index, str):
        index = torch.device(index).index
    if index is not None and not 0 <= int(index) < _device_count():
        raise RuntimeError(f"Invalid device index {index}: {_device_count()} tpu device(s)")


def _set_data(tensor: torch.Tensor, value: torch.Tensor) -> None:
    # Module._apply moves parameters with `param.data = moved`: the parameter object stays (an
    # optimizer built before the move trains it) and takes the device of its new data.
    with torch._C.DisableTorchFunction():
        torch._C.TensorBase.data.__set__(tensor, value)
    if isinstance(value, TpuTensor):
        _mark(tensor)
    else:
        _unmark(tensor)


def _dispatch(func, args, kwargs):
    if _is_descriptor(func, "data", "__set__"):
        return _set_data(*args)
    if func is torch.Tensor.pin_memory:
        return args[0]  # CPU memory serves as pinned memory: there is no host-device copy
    if func is torch.Tensor.is_pinned:
        return False
    if func is getattr(torch.Tensor, DEVICE_TYPE, None):
        # The generated Tensor.tpu(device, non_blocking, **kwargs) calls .to() in Python, where
        # this mode is not active; it becomes that .to() call here.
        tensor, device, non_blocking = (*args, None, False)[:3]
        device = kwargs.pop("device", device)
        if device is not None:
            _check_index(device)
        func, args = torch.Tensor.to, (tensor,)
        kwargs.setdefault("non_blocking", non_blocking)
        kwargs = {**kwargs, "device": DEVICE_TYPE}
    args, kwargs, to_tpu, to_cpu = _device_args(func, args, kwargs)
    flat, _ = tree_flatten((args, kwargs))
    with torch._C.DisableTorchFunctionSubclass():
        tpu = _check_devices(func, flat)
    if not (tpu or to_tpu):
        return func(*args, **kwargs)  # no tpu in sight: other tensor subclasses still dispatch
    if func is torch.Tensor.__array__:
        raise TypeError(NUMPY_ERROR)
    with torch._C.DisableTorchFunctionSubclass():
        _count()
        hidden = func not in _SHOWS_DEVICE
        _state.depth = getattr(_state, "depth", 0) + hidden
        try:
            result = func(*args, **kwargs)
        finally:
            _state.depth -= hidden
        if func in torch.overrides.get_default_nowrap_functions():
            return result
        inputs = {id(value) for value in flat if isinstance(value, torch.Tensor)}
        if to_cpu:
            # A copy to host memory, never the device tensor itself.
            if isinstance(result, TpuTensor):
                result = _plain(result).clone()
            return result
        if to_tpu:
            if isinstance(result, torch.Tensor) and not isinstance(result, TpuTensor):
                if id(result) in inputs or func in _MAY_ALIAS:
                    result = result.clone()  # a device has memory of its own
                return _mark(result)
            return result

        def convert(value: Any) -> Any:
            # Fresh results are marked in place; an input handed back (in-place ops, copies into
            # a CPU tensor) keeps its device.
            if type(value) is torch.Tensor and id(value) not in inputs:
                return _mark(value)
            return value

        return tree_map(convert, result)


class _TpuMode(torch.overrides.TorchFunctionMode):
    """Kept entered in every thread: sees every torch call, before the tensor classes do."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})


_MODE = _TpuMode()


def _enter_mode() -> bool:
    stack = torch.overrides._get_current_function_mode_stack()
    if any(isinstance(mode, _TpuMode) for mode in stack):
        return False
    _MODE.__enter__()
    return True


def _leave_mode() -> None:
    # The mode stack lives in C++ thread-local storage; left there, it is released after the
    # thread's Python state is gone, and the process can abort ("terminate called without an
    # active exception"). So it is popped while Python still runs.
    stack = torch.overrides._get_current_function_mode_stack()
    if stack and stack[-1] is _MODE:
        _MODE.__exit__(None, None, None)


def _patch_threads() -> None:
    # The torch-function mode stack is thread-local: each new thread enters the mode first.
    original = threading.Thread._bootstrap_inner

    @functools.wraps(original)
    def bootstrap_inner(self):
        entered = _enter_mode()
        try:
            return original(self)
        finally:
            if entered:
                _leave_mode()

    threading.Thread._bootstrap_inner = bootstrap_inner


# --- torch.tpu ----------------------------------------------------------------------------------


def _device_count() -> int:
    return int(os.environ.get("TPU_STANDIN_DEVICES", "1"))


class _Properties(types.SimpleNamespace):
    pass


class Stream:
    """Synchronous: the CPU finishes each op before the next starts."""

    def __init__(self, device: Any = None, priority: int = 0, **_: Any):
        self.device = _tpu_device
        self.priority = priority

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def wait_stream(self, stream: Stream) -> None:
        pass

    def wait_event(self, event: Event) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return hash(Stream)


_DEFAULT_STREAM = Stream()


class Event:
    """Wall-clock times: `elapsed_time` in milliseconds, as on CUDA."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, **_: Any):
        self.enable_timing = enable_timing
        self.time: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        self.time = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def wait(self, stream: Stream | None = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: Event) -> float:
        if self.time is None or end_event.time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event.time - self.time) * 1000.0


def _module() -> types.ModuleType:
    current = {"index": 0}

    def is_available() -> bool:
        return True

    def is_initialized() -> bool:
        return True

    def device_count() -> int:
        return _device_count()

    def current_device() -> int:
        return current["index"]

    def _index(device: Any) -> int:
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if device.type != DEVICE_TYPE:
                raise ValueError(f"Expected a tpu device, but got: {device}")
            device = 0 if device.index is None else device.index
        return int(device)

    def set_device(device: Any) -> None:
        index = _index(device)
        if not 0 <= index < _device_count():
            raise RuntimeError(f"Invalid device index {index}: {_device_count()} tpu device(s)")
        current["index"] = index

    @contextlib.contextmanager
    def device(device: Any):
        previous = current["index"]
        if device is not None and not (isinstance(device, int) and device < 0):
            set_device(device)
        try:
            yield
        finally:
            current["index"] = previous

    def device_of(obj: Any):
        if isinstance(obj, TpuTensor):
            return device(0)
        return contextlib.nullcontext()

    def synchronize(device: Any = None) -> None:
        pass

    def get_device_name(device: Any = None) -> str:
        return "TPU stand-in (CPU)"

    def get_device_properties(device: Any = None) -> _Properties:
        return _Properties(name=get_device_name(), total_memory=16 * 1024**3)

    def current_stream(device: Any = None) -> Stream:
        return _DEFAULT_STREAM

    def default_stream(device: Any = None) -> Stream:
        return _DEFAULT_STREAM

    def set_stream(stream: Stream) -> None:
        pass

    @contextlib.contextmanager
    def stream(stream: Stream | None):
        yield

    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.bfloat16, torch.float32]

    # The CPU's generator, deliberately: seeded programs draw the CPU's numbers.
    # (torch.manual_seed calls manual_seed_all of the device module: not torch.manual_seed back)
    def manual_seed(seed: int) -> None:
        torch.default_generator.manual_seed(seed)

    def manual_seed_all(seed: int) -> None:
        torch.default_generator.manual_seed(seed)

    def initial_seed() -> int:
        return torch.initial_seed()

    def get_rng_state(device: Any = "tpu") -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(new_state: torch.Tensor, device: Any = "tpu") -> None:
        torch.set_rng_state(_plain(new_state) if isinstance(new_state, TpuTensor) else new_state)

    names = dict(locals())
    names.pop("current")
    names.pop("_index")
    names.update(Stream=Stream, Event=Event, default_generators=(torch.default_generator,))

    class TpuModule(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            if name in PUBLIC_NAMES:
                raise AttributeError(
                    f"torch.tpu.{name} is part of TorchTPU 0.2.0 but the CPU stand-in does not "
                    "implement it"
                )
            raise AttributeError(f"TorchTPU 0.2.0 has no torch.tpu.{name}")

    module = TpuModule("torch.tpu", "TorchTPU's torch.tpu, as the CPU stand-in implements it")
    for name, value in names.items():
        assert name in PUBLIC_NAMES, name
        setattr(module, name, value)
    # Private, asked for by torch.manual_seed of privateuse1 backends (a fork does no harm here).
    module._is_in_bad_fork = lambda: False
    return module


IMPLEMENTED = frozenset(
    """Event Stream current_device current_stream default_generators default_stream device
    device_count device_of get_amp_supported_dtype get_device_name get_device_properties
    get_rng_state initial_seed is_available is_initialized manual_seed manual_seed_all set_device
    set_rng_state set_stream stream synchronize""".split()
)


# --- torch.accelerator and autocast --------------------------------------------------------------


def _patch_accelerator(tpu: types.ModuleType) -> None:
    accelerator = torch.accelerator

    def set_device_index(device: Any, /) -> None:
        tpu.set_device(device)

    patches = {
        "is_available": lambda: True,
        "current_accelerator": lambda check_available=False: torch.device(DEVICE_TYPE),
        "device_count": tpu.device_count,
        "current_device_index": tpu.current_device,
        "current_device_idx": tpu.current_device,
        "set_device_index": set_device_index,
        "set_device_idx": set_device_index,
        "synchronize": lambda device=None, /: None,
        "current_stream": tpu.current_stream,
        "set_stream": tpu.set_stream,
        "device_index": lambda device, /: tpu.device(device),
    }
    for name, function in patches.items():
        if hasattr(accelerator, name):
            setattr(accelerator, name, function)


def _patch_autocast() -> None:
    # PyTorch's autocast for privateuse1 only casts privateuse1 tensors; tpu tensors are CPU
    # tensors, so autocast("tpu") validates as TorchTPU would and then runs CPU autocast.
    autocast = torch.amp.autocast_mode.autocast
    original = autocast.__init__

    @functools.wraps(original)
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        tpu = device_type == DEVICE_TYPE
        if tpu and dtype is None:
            dtype = torch.bfloat16
        original(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
        if tpu:
            self.device = "cpu"

    autocast.__init__ = __init__


def _tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors of a saved or loaded object: in its containers, and its modules' parameters
    and buffers (a whole pickled model)."""
    found: list[torch.Tensor] = []

    def visit(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, torch.nn.Module):
            found.extend([*item.parameters(), *item.buffers()])
        return item

    tree_map(visit, value)
    return found


def _storage(tensor: torch.Tensor) -> int:
    with torch._C.DisableTorchFunction():
        return torch._C.TensorBase.untyped_storage(tensor).data_ptr()


def _patch_load() -> None:
    # As on a real device, a checkpoint of tpu tensors records the location "tpu:0" and loads back
    # there (its storages stay the CPU's here, marked once loaded); `map_location="tpu"` loads on
    # the CPU, then marks; `map_location="cpu"` gives plain tensors.
    save, load, tag = (
        torch.serialization.save,
        torch.serialization.load,
        torch.serialization.location_tag,
    )

    @functools.wraps(save)
    def save_with_locations(obj, *args, **kwargs):
        _state.saving = {_storage(t) for t in _tensors_in(obj) if isinstance(t, TpuTensor)}
        try:
            return save(obj, *args, **kwargs)
        finally:
            _state.saving = set()

    @functools.wraps(tag)
    def location_tag(storage):
        if storage.data_ptr() in getattr(_state, "saving", ()):
            return f"{DEVICE_TYPE}:0"
        return tag(storage)

    @functools.wraps(load)
    def load_with_locations(f, map_location=None, *args, **kwargs):
        if map_location is None:
            on_tpu: set[int] = set()

            def restore(storage, location):
                if location.startswith(DEVICE_TYPE):
                    on_tpu.add(storage.data_ptr())
                    return storage
                return None  # torch's own restore

            loaded = load(f, restore, *args, **kwargs)
            for tensor in _tensors_in(loaded):
                if _storage(tensor) in on_tpu:
                    _mark(tensor)
            return loaded
        if not _names_tpu(map_location):
            return load(f, map_location, *args, **kwargs)
        loaded = load(f, "cpu", *args, **kwargs)
        for tensor in _tensors_in(loaded):
            _mark(tensor)
        return loaded

    torch.save = torch.serialization.save = save_with_locations
    torch.serialization.location_tag = location_tag
    torch.load = torch.serialization.load = load_with_locations


def _register_process_group() -> None:
    # TorchTPU registers the c10d backend "tpu"; here gloo carries it (the tensors are the CPU's
    # underneath), so DDP and the collectives of a migrated program run across processes.
    import torch.distributed as dist

    if not dist.is_available() or DEVICE_TYPE in dist.Backend.backend_list:
        return

    def create(store, rank, size, timeout):
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    dist.Backend.register_backend(DEVICE_TYPE, create, devices=["cpu", DEVICE_TYPE])


def _patch_compile() -> None:
    # Dynamo traces tpu tensors as privateuse1 tensors, which this PyTorch cannot place: the
    # process aborts in c10's device guard. TorchTPU compiles with XLA; the stand-in runs the
    # function eagerly, which gives the CPU's numbers all the same.
    original = torch.compile

    @functools.wraps(original)
    def compile_eagerly(model=None, **kwargs):
        warnings.warn(
            "torch.compile runs eagerly on the TorchTPU CPU stand-in", UserWarning, stacklevel=2
        )
        if model is None:
            return lambda function: function
        return model

    torch.compile = compile_eagerly


# --- entry points -------------------------------------------------------------------------------


def _patch_variable() -> None:
    """`Variable(t)` (the legacy wrapper GAN code still uses) builds a new tensor in C++, outside
    the mode: it keeps the device of `t`, as on a GPU, so a tpu tensor stays one."""
    from torch.autograd import variable

    legacy = variable.Variable

    class Variable(legacy):  # (VariableMeta: `isinstance(x, Variable)` still holds for tensors)
        def __new__(cls, *args: Any, **kwargs: Any) -> torch.Tensor:
            made = legacy(*args, **kwargs)
            data = args[0] if args else kwargs.get("data")
            on_tpu = type(data) in (TpuTensor, TpuParameter)
            return _mark(made) if on_tpu else made

    Variable.__module__, Variable.__qualname__ = legacy.__module__, legacy.__qualname__
    variable.Variable = torch.autograd.Variable = Variable


def load() -> None:
    """The ``torch.backends`` entry point: installs the stand-in unless TorchTPU is installed."""
    global _loaded, _tpu_device
    if _loaded or importlib.util.find_spec("torch_tpu") is not None:
        return
    _loaded = True
    torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    _tpu_device = torch.device(DEVICE_TYPE, 0)
    module = _module()
    torch._register_device_module(DEVICE_TYPE, module)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=False)
    _patch_accelerator(module)
    _patch_autocast()
    _patch_load()
    _patch_variable()
    _register_process_group()
    _patch_compile()
    _patch_threads()
    _enter_mode()
    atexit.register(_leave_mode)


def write_autoload(folder: Path) -> Path:
    """Writes the dist-info that makes ``import torch`` call `load`, with `folder` on sys.path."""
    return launch.write_autoload(Path(folder), __name__)
