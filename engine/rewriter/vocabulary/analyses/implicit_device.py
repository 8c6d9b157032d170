"""A program that places nothing on a device (no `.to(`, `device=`, CUDA or XLA device) but
trains a model, that is, builds an optimizer from `model.parameters()`: the model, the tensors
the program gives it and its loss, and the tensors the model's methods make move to the XLA
device, and what it reads back into NumPy is copied to the host first. The file's loops are then
steps like any device program's (barriers, MpDeviceLoader).
Where no such model is found, R-DEV-21's `host_training` says the program stays on the CPU."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace
from typing import Any

import libcst as cst

from pytpu.engine.rewriter import patterns
from pytpu.engine.rewriter.vocabulary import ANALYSES, BuiltinAnalysis

# Calls that make a tensor where `device=` says (the host when it is left out).
FACTORIES = frozenset(
    f"torch.{name}"
    for name in (
        "zeros ones empty full rand randn randint randperm arange linspace logspace eye tensor"
    ).split()
)
# Loss functions whose target is a tensor of the program's, like a loss module's.
LOSS_FUNCTIONS = frozenset(
    f"torch.nn.functional.{name}"
    for name in (
        "cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss kl_div "
        "binary_cross_entropy binary_cross_entropy_with_logits"
    ).split()
)
_CONSTANTS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString)
_KEYWORDS = frozenset({"None", "True", "False"})
_TRAINS = ("backward", ".step(")  # a file that trains says one of these


def _words(kb: Any) -> set[frozenset[str]]:
    return {frozenset({"parameters", word}) for word in _TRAINS}


# A name as the code means it: (the function or class it is bound in, None for the module; name).
Name = tuple[int | None, str]


@dataclass
class _Site:
    node: cst.CSTNode
    path: list[int]  # the ids of the nodes above it, the module's first
    top: int  # the index of its top-level statement
    scope: int | None  # the id of the function or class it is in; None: the module
    method: bool = False  # in a method (other than __init__) of an nn.Module subclass


@dataclass
class _Program:
    """What one pass over the file found."""

    trained: set[Name] = field(default_factory=set)  # what an optimizer takes .parameters() of
    assigned: dict[Name, list[_Site]] = field(default_factory=dict)  # name -> values (calls)
    bindings: list[tuple[list[Name], _Site]] = field(default_factory=list)  # names <- value
    bound: dict[int | None, set[str]] = field(default_factory=dict)  # scope -> names bound in it
    calls: list[_Site] = field(default_factory=list)
    operations: list[_Site] = field(default_factory=list)  # binary operations, comparisons
    loops: dict[int, int | None] = field(default_factory=dict)  # `for` loop id -> its scope
    # (the makers of device tensors and the names on the device, found once after the walk)
    device: tuple[set[Name], set[Name]] | None = None

    def name(self, scope: int | None, name: str) -> Name:
        """What `name` refers to in `scope`: its own binding there, else the module's."""
        return (scope, name) if name in self.bound.get(scope, ()) else (None, name)

    def names(self, site: _Site, node: cst.CSTNode | None = None) -> set[Name]:
        """The names `node` (else the site's node) uses, as its scope means them."""
        node = site.node if node is None else node
        return {self.name(site.scope, n.value) for n in patterns.walk(node) if type(n) is cst.Name}

    @property
    def models(self) -> set[Name]:
        return self.trained & self.assigned.keys()

    @property
    def model_names(self) -> set[str]:
        return {name for _, name in self.models}


_PROGRAMS: weakref.WeakKeyDictionary[Any, _Program] = weakref.WeakKeyDictionary()


class _Scanner:
    """One pass over the module: calls, operations and assignments, each with its place."""

    def __init__(self, module: cst.Module):
        self.program = _Program()
        self.module = module
        self.top = 0

    def scan(self) -> _Program:
        for top, statement in enumerate(self.module.body):
            self.top = top
            self.visit(statement, [id(self.module)], None, False)
        program = self.program
        # an optimizer's model is its function's, or the module's
        program.trained = {program.name(scope, name) for scope, name in program.trained}
        return program

    def site(self, node: cst.CSTNode, path: list[int], scope: int | None, method: bool = False):
        return _Site(node, path, self.top, scope, method)

    def visit(self, node: cst.CSTNode, path: list[int], scope: int | None, method: bool) -> None:
        program, kind = self.program, type(node)
        if kind is cst.Call:
            program.calls.append(self.site(node, path, scope, method))
            first = node.args[0].value if node.args and node.args[0].keyword is None else None
            if type(first) is cst.Call and not first.args and type(first.func) is cst.Attribute:
                if first.func.attr.value == "parameters" and type(first.func.value) is cst.Name:
                    program.trained.add((scope, first.func.value.value))
        elif kind is cst.BinaryOperation or kind is cst.Comparison:
            program.operations.append(self.site(node, path, scope, method))
        elif kind is cst.Assign or kind is cst.AugAssign or kind is cst.AnnAssign:
            self.assignment(node, path, scope)
        elif kind is cst.ClassDef:
            self.bind(scope, node.name.value)
            module_class = any(patterns.last_name(b.value) == "Module" for b in node.bases)
            inner = [*path, id(node), id(node.body)]
            for child in node.body.body:
                if type(child) is cst.FunctionDef:
                    self.bind(id(node), child.name.value)
                    method = module_class and child.name.value != "__init__"
                    self.visit(child, inner, id(node), method)
                else:
                    self.visit(child, inner, id(node), False)
            return
        elif kind is cst.FunctionDef or kind is cst.Lambda:
            if kind is cst.FunctionDef:
                self.bind(scope, node.name.value)
            for param in patterns.walk(node.params):
                if type(param) is cst.Param:
                    self.bind(id(node), param.name.value)
            for child in patterns.iter_children(node):
                if child is not node.params:
                    self.visit(child, [*path, id(node)], id(node), method)
            return
        elif kind is cst.For or kind is cst.CompFor:
            program.loops[id(node)] = scope
            for name in patterns.walk(node.target):
                if type(name) is cst.Name:
                    self.bind(scope, name.value)
        inner = [*path, id(node)]
        for child in patterns.iter_children(node):
            self.visit(child, inner, scope, method)

    def bind(self, scope: int | None, name: str) -> None:
        self.program.bound.setdefault(scope, set()).add(name)

    def assignment(self, node: Any, path: list[int], scope: int | None) -> None:
        kind = type(node)
        targets = [t.target for t in node.targets] if kind is cst.Assign else [node.target]
        names = [n.value for t in targets for n in patterns.walk(t) if type(n) is cst.Name]
        for name in names:
            self.bind(scope, name)
        if node.value is None:
            return
        value = self.site(node.value, [*path, id(node)], scope)
        self.program.bindings.append(([(scope, name) for name in names], value))
        if kind is cst.Assign and len(targets) == 1 and type(targets[0]) is cst.Name:
            if type(node.value) is cst.Call:
                self.program.assigned.setdefault((scope, targets[0].value), []).append(value)


def _decide(walk, case) -> None:
    """Before the walk: a file with no device work that trains a model it makes is a device
    program from now on (its loops are steps)."""
    if walk.device_aware or walk.module is None or not any(w in walk.text for w in _TRAINS):
        return
    program = _Scanner(walk.module).scan()
    if program.models:
        _PROGRAMS[walk] = program
        walk.device_aware = True


def _plan(walk, case, site: _Site) -> None:
    walk.top_index = site.top
    bindings = patterns.Bindings(nodes={"value": site.node}, covered=[site.node])
    walk.plan(site.node, case, bindings, path=site.path)


def _free(walk, node: cst.CSTNode) -> bool:
    return id(node) not in walk.claimed and id(node) not in walk.plans


def _plan_models(walk, case) -> None:
    program = _PROGRAMS.get(walk)
    for model in sorted(program.models, key=str) if program else ():
        for site in program.assigned[model]:
            if _free(walk, site.node):
                _plan(walk, case, site)


def _device_names(walk, program: _Program, losses: set[Name]) -> set[Name]:
    """What is on the device already: what the model or a loss returned, and what was computed
    from it (a fixed point over the file's assignments); a loop's batches over a device loader."""
    makers = program.models | losses
    derived: set[Name] = set()
    for plan in walk.plans.values():
        node = plan.finding.node
        if plan.loop is not None and plan.loop.loader is not None and type(node) is cst.For:
            scope = program.loops.get(id(node))
            for name in patterns.walk(node.target):
                if type(name) is cst.Name:
                    derived.add(program.name(scope, name.value))
    changed = True
    while changed:
        changed = False
        for names, value in program.bindings:
            if set(names) <= derived:
                continue
            if program.names(value) & (derived | makers) or _calls_loss_function(walk, value):
                derived.update(names)
                changed = True
    return derived


def _calls_loss_function(walk, value: _Site) -> bool:
    return any(
        type(n) is cst.Call and walk.resolver.qualified_names(n.func) & LOSS_FUNCTIONS
        for n in patterns.walk(value.node)
    )


def _loss_modules(walk, program: _Program) -> set[Name]:
    """Names assigned a loss module (`criterion = nn.CrossEntropyLoss()`)."""
    return {
        name
        for name, sites in program.assigned.items()
        if all(
            any(q.startswith("torch.nn.") and q.endswith("Loss") for q in _qualified(walk, s))
            for s in sites
        )
    }


def _qualified(walk, site: _Site) -> set[str]:
    return walk.resolver.qualified_names(site.node.func)


def _on_device(walk, program: _Program) -> tuple[set[Name], set[Name]]:
    """What makes device tensors (the models, the loss modules), and every name on the device."""
    if program.device is None:
        losses = _loss_modules(walk, program)
        makers = program.models | losses
        program.device = makers, _device_names(walk, program, losses) | makers
    return program.device


def _root(node: cst.CSTNode) -> cst.CSTNode:
    """The name a chain starts from: `output` of `output.transpose(0, 1)[i]`."""
    while True:
        kind = type(node)
        if kind is cst.Attribute or kind is cst.Subscript:
            node = node.value
        elif kind is cst.Call:
            node = node.func
        else:
            return node


def _from_device(program: _Program, site: _Site, value: cst.CSTNode, on_device: set[Name]) -> bool:
    """Whether a value is what the model (or a loss) made, or was computed from it."""
    root = _root(value)
    return type(root) is cst.Name and program.name(site.scope, root.value) in on_device


def _on_host(program: _Program, site: _Site, value: cst.CSTNode, on_device: set[Name]) -> bool:
    """Whether a value may be a host tensor: not a constant, not what the model made."""
    if isinstance(value, _CONSTANTS) or (type(value) is cst.Name and value.value in _KEYWORDS):
        return False
    if _from_device(program, site, value, on_device):
        return False
    if type(value) is cst.Call and patterns.last_name(value.func) == "to":
        return False  # moved already
    return not isinstance(value, (cst.List, cst.Tuple, cst.Dict, cst.Lambda, cst.Set))


def _torch_made(walk, program: _Program) -> set[Name]:
    """Names assigned something torch made (`y = torch.randn(8, 1)`): tensors, not numbers."""
    return {
        name
        for names, value in program.bindings
        for node in patterns.walk(value.node)
        if type(node) is cst.Call
        and any(q.startswith("torch.") for q in walk.resolver.qualified_names(node.func))
        for name in names
    }


def _plan_inputs(walk, case) -> None:
    """The arguments of each call of the model, of a loss module and of a loss function; the
    tensor a binary operation or a comparison puts beside what the model made."""
    program = _PROGRAMS.get(walk)
    if program is None:
        return
    makers, on_device = _on_device(walk, program)
    host_tensors = _torch_made(walk, program) - on_device
    for site in program.operations:
        node = site.node
        if type(node) is cst.BinaryOperation:
            sides = (node.left, node.right)
        else:
            sides = (node.left, *(t.comparator for t in node.comparisons))
        if not any(_from_device(program, site, side, on_device) for side in sides):
            continue  # nothing from the device meets it here (`2 * base` is the host's)
        for side in sides:
            root = _root(side)
            if type(root) is not cst.Name or not _free(walk, side):
                continue
            if program.name(site.scope, root.value) in host_tensors:
                _plan(walk, case, replace(site, node=side, path=[*site.path, id(node)]))
    for site in program.calls:
        call = site.node
        called = type(call.func) is cst.Name and program.name(site.scope, call.func.value) in makers
        if not called and not walk.resolver.qualified_names(call.func) & LOSS_FUNCTIONS:
            continue
        for arg in call.args:
            if not arg.star and _on_host(program, site, arg.value, on_device):
                if _free(walk, arg.value):
                    path = [*site.path, id(call), id(arg)]
                    _plan(walk, case, replace(site, node=arg.value, path=path))


# Calls that read a tensor into a NumPy array, the tensor their first argument.
TO_NUMPY = frozenset({"numpy.array", "numpy.asarray"})
_TO_NUMPY_NAMES = frozenset(name.rsplit(".", 1)[1] for name in TO_NUMPY)


def _on_host_already(node: cst.CSTNode) -> bool:
    """`x.cpu()`. (A file that says `.to(` is no file these analyses move, so `.to("cpu")` is
    not looked for here.)"""
    return type(node) is cst.Call and patterns.last_name(node.func) == "cpu"


def _plan_host_reads(walk, case) -> None:
    """Each tensor on the device read into NumPy (`out.detach().numpy()`, `np.asarray(out)`):
    an XLA tensor has no host memory to share with an array."""
    program = _PROGRAMS.get(walk)
    if program is None:
        return
    on_device = _on_device(walk, program)[1]
    for site in program.calls:
        call, func = site.node, site.node.func
        if type(func) is cst.Attribute and func.attr.value == "numpy" and not call.args:
            tensor, path = func.value, [*site.path, id(call), id(func)]
        elif (
            call.args
            and patterns.last_name(func) in _TO_NUMPY_NAMES
            and walk.resolver.qualified_names(func) & TO_NUMPY
        ):
            tensor, path = call.args[0].value, [*site.path, id(call), id(call.args[0])]
        else:
            continue
        root = _root(tensor)
        if type(root) is not cst.Name or program.name(site.scope, root.value) not in on_device:
            continue
        if not _on_host_already(tensor) and _free(walk, tensor):
            _plan(walk, case, replace(site, node=tensor, path=path))


_FACTORY_NAMES = frozenset(name.rsplit(".", 1)[1] for name in FACTORIES)


def _factory_sites(program: _Program) -> list[_Site]:
    """The calls in the modules' methods that look like a factory and name no device."""
    return [
        site
        for site in program.calls
        if site.method
        and patterns.last_name(site.node.func) in _FACTORY_NAMES
        and not any(a.keyword and a.keyword.value == "device" for a in site.node.args)
    ]


def _note_factories(walk, case) -> None:
    """Before the walk: the tensors these methods make are device tensors in the output, and the
    rules that look for device tensors (writes at a loop's index) see them so on the first run
    as on a second one."""
    program = _PROGRAMS.get(walk)
    if program is not None:
        walk.placed_by_analysis.update(id(site.node) for site in _factory_sites(program))


def _plan_factories(walk, case) -> None:
    """Tensors the methods of the file's modules make without `device=`: on the host they would
    meet the model's device tensors."""
    program = _PROGRAMS.get(walk)
    for site in _factory_sites(program) if program is not None else ():
        call = site.node
        if walk.resolver.qualified_names(call.func) & FACTORIES and _free(walk, call):
            walk.top_index = site.top
            walk.plan(call, case, patterns.Bindings(), path=site.path)


def _by_the_rule(edit) -> None:
    """The site takes the rule's own replacement or action (`$value.to(...)`, `set_kwargs`)."""
    return None


ANALYSES.register(
    BuiltinAnalysis(
        name="implicit_model",
        doc="in a file with no device work, each model an optimizer is built from "
        "(`optimizer = SGD(model.parameters())`, `model = Net()` in the file): its value gets "
        "the rule's replacement, with `$value` bound; the file's loops are then steps",
        words=_words,
        before_walk=_decide,
        after_walk=_plan_models,
        rewrite=_by_the_rule,
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="implicit_inputs",
        doc="in a file `implicit_model` moves to the device: each argument of a call of the "
        "model, of a loss module (`criterion = nn.CrossEntropyLoss()`) and of a loss function "
        "that may be a host tensor (not a constant, not what the model or a loss returned, nor "
        "computed from it, nor a batch of a device loader), with `$value` bound",
        words=_words,
        after_walk=_plan_inputs,
        rewrite=_by_the_rule,
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="implicit_host_reads",
        doc="in a file `implicit_model` moves to the device: each tensor read into NumPy "
        "(`$value.numpy()`, `numpy.array($value)`, `numpy.asarray($value)`) that the model, a "
        "loss or what was computed from them made (by the same reckoning as `implicit_inputs`), "
        "unless it is moved already (`.cpu()`), with `$value` bound",
        words=_words,
        after_walk=_plan_host_reads,
        rewrite=_by_the_rule,
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="implicit_factories",
        doc="in a file `implicit_model` moves to the device: each call of a tensor factory "
        f"({', '.join(sorted(f'`{n}`' for n in FACTORIES))}) without `device=` in a method "
        "(other than `__init__`) of an `nn.Module` subclass",
        words=_words,
        before_walk=_note_factories,
        after_walk=_plan_factories,
        rewrite=_by_the_rule,
    )
)
