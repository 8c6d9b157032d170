"""Values as the harness records them: a unit's inputs as data (tensors, plain values and their
containers), its constructor arguments and a script's values as code a generated test can write
(`describe`)."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import math
import sys
from typing import Any

import torch

from pytpu.runtime.records import UnitUnavailable
from pytpu.runtime.repository_files import class_file

# How a description names a class's file: the installed harness names a notebook's classes by
# their cell (`Harness.class_source`).
class_source: Any = lambda cls: class_file(cls) or ""  # noqa: E731


def describable_output(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return all(describable_output(v) for v in value)
    return isinstance(value, (int, float, bool, type(None)))


def describe_input(value: Any) -> None:
    """Inputs are stored as data: tensors, plain values and containers of them."""
    if isinstance(value, torch.Tensor) or value is None:
        return
    if isinstance(value, (bool, int, float, str)):
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            describe_input(item)
        return
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        for item in value.values():
            describe_input(item)
        return
    raise UnitUnavailable(f"an input of type {type(value).__name__} cannot be recorded as data")


def describe(value: Any) -> dict[str, Any]:
    """A JSON description of a constructor argument or script value that can be written as code."""
    if value is None or isinstance(value, (bool, int, str)):
        return {"literal": value}
    if isinstance(value, float):
        return {"literal": value} if math.isfinite(value) else {"code": f"float('{value}')"}
    if isinstance(value, (list, tuple)):
        return {"sequence": type(value).__name__, "items": [describe(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, (str, int)) for k in value):
        return {"mapping": [[describe(k), describe(v)] for k, v in value.items()]}
    if isinstance(value, torch.dtype):
        return {"code": str(value), "imports": ["torch"]}
    if isinstance(value, torch.device):
        return {"device": True}
    if isinstance(value, argparse.Namespace):
        return {
            "call": "argparse.Namespace",
            "imports": ["argparse"],
            "kwargs": _fields(vars(value)),
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
        return {"class": _class_reference(type(value)), "kwargs": _fields(fields)}
    if isinstance(value, enum.Enum):
        return {"class": _class_reference(type(value)), "member": value.name}
    if isinstance(value, type) or callable(value):
        module = getattr(value, "__module__", None)
        qualname = getattr(value, "__qualname__", None)
        if module and qualname and "<" not in qualname and module.split(".")[0] == "torch":
            return {"code": f"{_public_torch_path(module, qualname)}", "imports": ["torch"]}
    raise UnitUnavailable(f"a value of type {type(value).__name__} cannot be written as code")


def _public_torch_path(module: str, qualname: str) -> str:
    import torch.nn  # noqa: F401 - resolve public aliases below

    for public in ("torch", "torch.nn", "torch.nn.functional"):
        namespace = sys.modules.get(public)
        if namespace is not None and getattr(namespace, qualname, None) is not None:
            if getattr(namespace, qualname).__module__ == module:
                return f"{public}.{qualname}"
    return f"{module}.{qualname}"


def _fields(values: dict[str, Any]) -> dict[str, Any]:
    return {key: describe(item) for key, item in values.items()}


def _class_reference(cls: type) -> dict[str, str]:
    return {"module": cls.__module__, "file": class_source(cls), "qualname": cls.__qualname__}
