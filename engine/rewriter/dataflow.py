"""Facts about a file that only its whole walk reveals, decided once the walk is over.

- A variable that holds a CUDA device string (`loc = f"cuda:{rank}"`) is rewritten where the
  variable itself is used: as a device (`.to(loc)`: 'xla') or as a load location
  (`map_location=loc`: 'cpu', since XLA storage cannot be restored directly).
- An optimizer built from `model.parameters()` before `model` moves to the device (or in
  another function, where the order is unknown) would keep the CPU parameters (R-DEV-09).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from pytpu.engine.rewriter.cst_nodes import iter_children

Scope = tuple[int, ...]


@dataclass
class DeviceVariables:
    candidates: dict[str, list[tuple[cst.CSTNode, list[int]]]] = field(default_factory=dict)
    device_uses: set[str] = field(default_factory=set)
    host_uses: set[str] = field(default_factory=set)

    def assigned(self, name: str, value: cst.CSTNode, path: list[cst.CSTNode]) -> None:
        self.candidates.setdefault(name, []).append((value, [id(n) for n in path]))

    def decisions(self) -> list[tuple[str, cst.CSTNode, list[int]]]:
        """(where: "device" | "host", string node, path ids) for each candidate to rewrite.
        A variable used both ways is left alone."""
        out = []
        for name, sites in self.candidates.items():
            device, host = name in self.device_uses, name in self.host_uses
            if device != host:
                out += [("device" if device else "host", node, path) for node, path in sites]
        return out


@dataclass
class OptimizerOrder:
    # (module name, scope, order) of each optimizer built from `<module>.parameters()`
    optimizers: list[tuple[str, Scope, int, cst.CSTNode]] = field(default_factory=list)
    # (module name, scope, order) of each `<module>.to(...)` / `.cuda(...)`
    moves: list[tuple[str, Scope, int]] = field(default_factory=list)

    def hazards(self) -> list[cst.CSTNode]:
        """Optimizer constructions whose module may move after them."""
        out = []
        for name, scope, order, node in self.optimizers:
            for moved, move_scope, move_order in self.moves:
                if moved == name and (move_scope != scope or move_order > order):
                    out.append(node)
                    break
        return out


def parameters_receiver(argument: cst.CSTNode) -> str | None:
    """`model` in `model.parameters()` (or `self.model.parameters()`), as the first argument of
    an optimizer, possibly inside a list of parameter groups."""
    stack = [argument]
    while stack:
        node = stack.pop()
        if type(node) is cst.Call and type(node.func) is cst.Attribute:
            if node.func.attr.value in ("parameters", "named_parameters"):
                receiver = node.func.value
                if type(receiver) is cst.Name:
                    return receiver.value
                if type(receiver) is cst.Attribute:
                    return receiver.attr.value
        stack.extend(iter_children(node))
    return None
