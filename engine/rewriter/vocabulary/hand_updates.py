"""What a program trains by hand: the modules and tensors whose values it updates from their
gradients itself, with no optimizer (`p -= lr * p.grad`, `p.data.add_(-lr * p.grad)`,
`p.data = p.data - lr * p.grad.data`, `w.sub_(lr * w.grad)`).

An update is an in-place change of a tensor (an augmented assignment, an in-place method, an
assignment to its `.data`) computed from a gradient (`.grad`, or a name assigned from one). What
it updates is traced back with libcst's scope analysis (`tensor_evidence.Metadata`):

- a loop variable over a module's parameters (`for p in model.parameters()`, through
  `named_parameters()`, `enumerate`, `zip`, `list(...)`, a name holding them, or a parameter of a
  function of the file every call of which gives them): the module is trained by hand;
- a module's own parameter (`model.fc.weight`): the module;
- a tensor the program makes (`w = torch.randn(3, requires_grad=True)`), or one of a list of them
  a loop goes over (`for p in [w, b]`, `sgd([w, b], lr)`): that tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import Assignment

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.kb_files import torch_api
from pytpu.engine.rewriter.vocabulary.tensor_evidence import (
    TENSORS,
    Evidence,
    Metadata,
    grad_free_chain,
)

# In-place tensor methods an update is made with.
IN_PLACE_UPDATES = torch_api()["in_place_updates"]  # (kb/torch_api.yaml)
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
# Calls whose first argument is what is iterated: `enumerate(model.parameters())`.
_ITERATED_THROUGH = frozenset(
    f"builtins.{name}" for name in "enumerate zip list tuple iter reversed sorted filter".split()
)
_DEPTH = 4  # names followed from an update back to what it updates, at most


@dataclass
class HandTraining:
    modules: set[Assignment] = field(default_factory=set)  # assignments of modules trained
    tensors: set[Assignment] = field(default_factory=set)  # assignments of tensors trained


def find(meta: Metadata, evidence: Evidence) -> HandTraining:
    found = HandTraining()
    tracer = _Tracer(meta, evidence, found)
    for updated in updates(meta):
        tracer.updated(updated)
    return found


def given(meta: Metadata, evidence: Evidence, parameters: cst.CSTNode) -> HandTraining:
    """The modules and tensors an optimizer is built from, its first argument (`SGD([w, b])`,
    `Adam(model.parameters())`), traced the same way."""
    found = HandTraining()
    _Tracer(meta, evidence, found).iterated(parameters, 0)
    return found


def updates(meta: Metadata) -> list[cst.CSTNode]:
    """The tensors the file updates from a gradient, as the update spells them (`p` of
    `p.data -= lr * p.grad`)."""
    found: list[cst.CSTNode] = []
    for node in meta.of_type(cst.AugAssign):
        if _from_gradient(meta, node.value):
            found.append(grad_free_chain(node.target))
    for node in meta.of_type(cst.Call):
        func = node.func
        if type(func) is cst.Attribute and func.attr.value in IN_PLACE_UPDATES:
            if any(_from_gradient(meta, a.value) for a in node.args):
                found.append(grad_free_chain(func.value))
    for node in meta.of_type(cst.Assign):
        for target in node.targets:
            chain = target.target
            if type(chain) is cst.Attribute and chain.attr.value == "data":
                if _from_gradient(meta, node.value):
                    found.append(grad_free_chain(chain))
    # (`p.grad -= ...` changes a gradient, not the tensor)
    return [n for n in found if not (type(n) is cst.Attribute and n.attr.value == "grad")]


def _from_gradient(meta: Metadata, value: cst.CSTNode, depth: int = 0) -> bool:
    """Whether a value is computed from a gradient: it reads `.grad`, or a name assigned from
    one (`d_p = p.grad.data; p.data.add_(-lr, d_p)`)."""
    for node in cst_nodes.walk(value):
        if type(node) is cst.Attribute and node.attr.value == "grad":
            return True
        if type(node) is cst.Name and depth < 1:
            for assignment in meta.referents(node):
                source = meta.assigned_value(assignment)
                if source is not None and _from_gradient(meta, source, depth + 1):
                    return True
    return False


class _Tracer:
    """Follows an updated tensor back to the module or the tensor it belongs to."""

    def __init__(self, meta: Metadata, evidence: Evidence, found: HandTraining) -> None:
        self.meta = meta
        self.evidence = evidence
        self.found = found

    def updated(self, node: cst.CSTNode) -> None:
        kind = type(node)
        if kind is cst.Name:
            for assignment in self.meta.referents(node):
                self._binding(assignment, 0)
        elif kind is cst.Attribute:
            self._module_of(cst_nodes.chain_root(node))
        elif kind is cst.Subscript:
            self.iterated(node.value, 0)  # `params[i] -= lr * params[i].grad`

    def _binding(self, assignment: object, depth: int) -> None:
        """What one binding of an updated name holds: a loop variable, a function's parameter or
        a tensor made here."""
        node = getattr(assignment, "node", None)
        if not isinstance(assignment, Assignment) or depth > _DEPTH:
            return
        if type(node) is cst.Param:
            for argument in self._arguments(node):
                self.tensor_or_module(argument, depth + 1)
            return
        if type(node) is not cst.Name:
            return
        holder = self._binder(node)
        value = self.meta.assigned_value(assignment)
        if type(holder) in (cst.For, cst.CompFor):
            self.iterated(holder.iter, depth + 1)
        elif value is not None and self.evidence.value(value).kind in TENSORS:
            self.found.tensors.add(assignment)

    def _binder(self, name: cst.Name) -> cst.CSTNode | None:
        """The statement that binds a name, through the tuples of its target."""
        parent = self.meta.parent(name)
        while type(parent) in (cst.Element, cst.Tuple, cst.List):
            parent = self.meta.parent(parent)
        return parent

    def iterated(self, iterable: cst.CSTNode, depth: int) -> None:
        """What a loop over `iterable` updates: a module's parameters, or listed tensors."""
        if depth > _DEPTH:
            return
        kind = type(iterable)
        if kind is cst.Call:
            func = iterable.func
            if type(func) is cst.Attribute and func.attr.value in _PARAMETER_METHODS:
                self._module_of(cst_nodes.chain_root(func.value))
            elif self.evidence.qualified(func) & _ITERATED_THROUGH:
                for arg in iterable.args:
                    self.iterated(arg.value, depth + 1)
        elif kind is cst.List or kind is cst.Tuple:
            for item in iterable.elements:
                self.tensor_or_module(item.value, depth + 1)
        elif kind is cst.ListComp or kind is cst.GeneratorExp:
            self.iterated(iterable.for_in.iter, depth + 1)
        elif kind is cst.Name:
            for assignment in self.meta.referents(iterable):
                value = self.meta.assigned_value(assignment)
                if value is not None:
                    self.iterated(value, depth + 1)
                elif type(getattr(assignment, "node", None)) is cst.Param:
                    for argument in self._arguments(assignment.node):
                        self.iterated(argument, depth + 1)

    def tensor_or_module(self, node: cst.CSTNode, depth: int) -> None:
        """An item of what the updates go over: a tensor's name, a module's parameter, or more
        of them (`[*model.parameters(), w]`)."""
        kind = type(node)
        if kind is cst.Name:
            for assignment in self.meta.referents(node):
                self._binding(assignment, depth)
        elif kind is cst.Attribute:
            self._module_of(cst_nodes.chain_root(node))
        else:
            self.iterated(node, depth)

    def _module_of(self, root: cst.CSTNode) -> None:
        """The module a parameter belongs to (`model` of `model.fc.weight`): its assignments
        that make it (`model = Net()`)."""
        if type(root) is not cst.Name or root.value == "self":
            return
        for assignment in self.meta.referents(root):
            value = self.meta.assigned_value(assignment)
            if type(value) is cst.Call:
                self.found.modules.add(assignment)

    def _arguments(self, param: cst.Param) -> list[cst.CSTNode]:
        """What the calls of a parameter's function pass for it (none if it may be called from
        elsewhere)."""
        function = self.meta.parent(self.meta.parent(param))
        found = []
        positional = [*function.params.posonly_params, *function.params.params]
        for call in self.evidence.calls_of(function):
            for index, arg in enumerate(call.args):
                if arg.keyword is not None and arg.keyword.value == param.name.value:
                    found.append(arg.value)
                elif (
                    arg.keyword is None
                    and not arg.star
                    and index < len(positional)
                    and positional[index] is param
                ):
                    found.append(arg.value)
        return found
