"""Training and evaluation loops, and where each step's XLA barrier goes (R-SYNC-01/02, R-DATA-01).

On XLA, work is recorded lazily and runs at a barrier. A loop that trains (its body calls
`backward()` or an optimizer's `step()`, directly or through a function of the same file) or
evaluates (its body calls a model) must end every iteration at exactly one barrier:

- where it iterates a DataLoader, the loader is wrapped in `MpDeviceLoader`, which syncs at
  every batch and prefetches to the device; a training loop's body that goes on after its
  optimizer step (reads a loss, checks the parameters) gets `torch_xla.sync()` after the step
  too, so that those reads find the step done instead of each running it again;
- otherwise `torch_xla.sync()` goes after the optimizer step (after the last statement that
  steps, zeroes or updates), or, with no step, at the end of the body (before the first
  statement that may leave it).

A loop inside a training loop (micro-batches of gradient accumulation) is part of that step's
graph and gets no barrier of its own; a loop that already has one is left alone. The names
that make a call an optimizer step, a model call or a loader are KB data (`kb/execution.yaml`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, patterns

_LOOPS = (cst.For, cst.While)
_DEFINITIONS = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_LEAVES = (cst.Break, cst.Continue, cst.Return, cst.Raise)


# Words of device work in a file. Not `xla` alone: PyTPU's own import of `torch_xla` (for an
# `xm.save`) would make a second run plan the barriers the first did not. A barrier is one: the
# first run writes it only in a file it judged a device program, which a second run must too.
DEVICE_WORDS = ("cuda", "xla_device", "torch_xla.device", "torch_xla.sync", ".to(", "device=")


def step_words(kb: Any) -> set[frozenset[str]]:
    """Pre-filter words of a file that has a training or evaluation step on a device: one of the
    words that make a loop a step, and one that shows a device."""
    words = ("backward", "step", *kb.loops.get("model_words", []))
    return {frozenset({word, device}) for word in words for device in DEVICE_WORDS}


@dataclass(frozen=True)
class LoopSettings:
    optimizers: cst_nodes.NameGlobs
    schedulers: cst_nodes.NameGlobs
    models: cst_nodes.NameGlobs
    loaders: cst_nodes.NameGlobs
    barriers: frozenset[str]  # calls (qualified names) that end a step
    device_loaders: frozenset[str]  # loader wrappers that sync at every batch
    loader_classes: frozenset[str]  # what builds a DataLoader
    iterator_wrappers: frozenset[str]  # enumerate(loader), tqdm(loader): the loader is inside
    model_classes: frozenset[str] = frozenset()  # the file's subclasses of these make models
    # calls of framework objects that hand back loaders already on the device, syncing at
    # every batch (`accelerator.prepare`, `fabric.setup_dataloaders`), as dotted-name globs
    preparing_calls: cst_nodes.NameGlobs = cst_nodes.NameGlobs(())
    device_waits: frozenset[str] = frozenset()  # calls that wait for the device's work
    no_grad_contexts: frozenset[str] = frozenset()  # `with torch.no_grad():` records no gradients

    @staticmethod
    def last_names(names: frozenset[str]) -> frozenset[str]:
        """The last components: a call is only resolved when its own last name is one of them."""
        return frozenset(n.rsplit(".", 1)[-1] for n in names)

    @classmethod
    def from_kb(cls, data: dict) -> LoopSettings:
        return cls(
            optimizers=cst_nodes.NameGlobs(data.get("optimizer_names", [])),
            schedulers=cst_nodes.NameGlobs(data.get("scheduler_names", [])),
            models=cst_nodes.NameGlobs(
                data.get("model_names", []), data.get("not_model_names", [])
            ),
            loaders=cst_nodes.NameGlobs(data.get("loader_names", [])),
            barriers=frozenset(data.get("barriers", [])),
            device_loaders=frozenset(data.get("device_loaders", [])),
            loader_classes=frozenset(data.get("loader_classes", [])),
            iterator_wrappers=frozenset(data.get("iterator_wrappers", [])),
            model_classes=frozenset(data.get("model_classes", [])),
            preparing_calls=cst_nodes.NameGlobs(data.get("preparing_calls", [])),
            device_waits=frozenset(data.get("device_waits", [])),
            no_grad_contexts=frozenset(data.get("no_grad_contexts", [])),
        )


@dataclass
class Summary:
    """What a block does directly (not inside nested loops or definitions)."""

    backward: bool = False
    step: bool = False
    model_call: bool = False
    recorded_model_call: bool = False  # a model call outside `with torch.no_grad():`
    barrier: bool = False
    inner_step: bool = False  # a loop inside trains or calls a model
    step_statements: list[int] = field(default_factory=list)  # body indices: step/zero/update
    first_exit: int | None = None  # body index of the first statement that may leave the loop


@dataclass
class LoopPlan:
    kind: str  # "train" | "eval" | "host" (a training loop of a file that uses no device)
    loader: cst.BaseExpression | None = None  # wrap this in MpDeviceLoader ...
    after: cst.BaseStatement | None = None  # ... or put the barrier after this statement


class LoopAnalyzer:
    def __init__(self, settings: LoopSettings, module: cst.Module, resolver: patterns.NameLookup):
        self.settings = settings
        self.resolver = resolver
        self.functions = _function_index(module)
        self.loader_variables: set[str] = set()  # names assigned a DataLoader in this file
        self.prepared_variables: set[str] = set()  # names a framework's loader went into
        self.module = module
        # names assigned an instance of the file's own model class: the methods it defines
        self._model_variables: dict[str, frozenset[str]] | None = None
        self._model_class_loops: set[int] | None = None
        self._summaries: dict[int, Summary] = {}  # by the id of the loop or function
        self._barrier_names = settings.last_names(settings.barriers) | {"optimizer_step"}
        self._loader_names = settings.last_names(settings.loader_classes)
        self._device_loader_names = settings.last_names(settings.device_loaders)
        self._wrapper_names = settings.last_names(settings.iterator_wrappers)
        self._no_grad_names = settings.last_names(settings.no_grad_contexts)

    def note_assignment(self, target: cst.CSTNode, value: cst.CSTNode) -> None:
        """`train_loader = DataLoader(...)`: remember the name as a loader; `model, loader =
        accelerator.prepare(model, loader)`: as one the framework already syncs."""
        if type(value) is not cst.Call:
            return
        func, dotted = value.func, cst_nodes.dotted_name(value.func)
        if type(func) is cst.Attribute and dotted and dotted in self.settings.preparing_calls:
            targets = target.elements if type(target) in (cst.Tuple, cst.List) else [target]
            for element in targets:
                name = cst_nodes.last_name(getattr(element, "value", element))
                if name:
                    self.prepared_variables.add(name)
            return
        if cst_nodes.last_name(value.func) in self._loader_names:
            names = self.resolver.qualified_names(value.func)
            if names & self.settings.loader_classes:
                name = cst_nodes.last_name(target)
                if name:
                    self.loader_variables.add(name)

    def model_variables(self) -> dict[str, frozenset[str]]:
        """The names the file assigns an instance of its own model class (`agent =
        Agent(envs).to(device)` with `class Agent(nn.Module)`), with the methods the class
        defines. Found once over the whole file, wherever the class and the assignment are: a
        loop's summary may be made before the walk reaches either."""
        if self._model_variables is None:
            self._model_variables = {}
            classes = self._classes
            assignments = [
                node for node in cst_nodes.statements(self.module.body) if type(node) is cst.Assign
            ]
            for node in assignments:
                value = node.value
                while type(value) is cst.Call and type(value.func) is cst.Attribute:
                    value = value.func.value  # `Agent(envs).to(device)`: made inside
                if type(value) is not cst.Call:
                    continue
                methods = self._model_methods(value.func, classes)
                for target in node.targets if methods is not None else ():
                    name = cst_nodes.last_name(target.target)
                    if name:
                        self._model_variables[name] = methods
        return self._model_variables

    def in_model_class(self, loop: cst.For | cst.While) -> bool:
        """Whether `loop` is in the code of one of the file's model classes (an RNN's `forward`
        over time steps): the model's own computation, part of whichever step calls it."""
        if self._model_class_loops is None:
            self._model_class_loops = set()
            classes = self._classes
            for definition in classes.values():
                if self._model_methods(definition.name, classes) is None:
                    continue
                stack: list[cst.CSTNode] = [definition.body]
                while stack:
                    node = stack.pop()
                    if type(node) in _LOOPS:
                        self._model_class_loops.add(id(node))
                    stack.extend(cst_nodes.iter_children(node))
        return id(loop) in self._model_class_loops

    @functools.cached_property
    def _classes(self) -> dict[str, cst.ClassDef]:
        """The file's classes by name (the first of a name), wherever the module defines them."""
        classes: dict[str, cst.ClassDef] = {}
        for node in cst_nodes.statements(self.module.body):
            if type(node) is cst.ClassDef:
                classes.setdefault(node.name.value, node)
        return classes

    def _model_methods(
        self, func: cst.CSTNode, classes: dict[str, cst.ClassDef], depth: int = 0
    ) -> frozenset[str] | None:
        """The methods of the class `func` names if the file defines it and it derives from a
        model class (`class Agent(nn.Module)`), directly or through the file's other classes."""
        definition = classes.get(func.value) if type(func) is cst.Name and depth < 5 else None
        if definition is None:
            return None
        for base in definition.bases:
            if self.resolver.qualified_names(base.value) & self.settings.model_classes:
                inherited: frozenset[str] | None = frozenset()
            else:
                inherited = self._model_methods(base.value, classes, depth + 1)
            if inherited is not None:
                own = {f.name.value for f in _body(definition) if type(f) is cst.FunctionDef}
                return inherited | own
        return None

    # --- what a block does -------------------------------------------------------------------

    def summary_of(self, node: cst.CSTNode, depth: int = 0) -> Summary:
        """The summary of a loop's or a function's body (computed once)."""
        cached = self._summaries.get(id(node))
        if cached is None:
            cached = self._summaries[id(node)] = self.summarize(_body(node), depth)
        return cached

    def summarize(self, statements: list[cst.BaseStatement], depth: int = 0) -> Summary:
        summary = Summary()
        for index, statement in enumerate(statements):
            if self._scan(statement, summary, depth):
                summary.step_statements.append(index)
            if summary.first_exit is None and _may_leave(statement):
                summary.first_exit = index
        return summary

    def _scan(self, root: cst.CSTNode, summary: Summary, depth: int) -> bool:
        """Record what `root` does into `summary`; True if it steps, zeroes or updates."""
        marks_step = False
        stack: list[tuple[cst.CSTNode, bool]] = [(root, True)]  # (node, records gradients)
        while stack:
            node, recording = stack.pop()
            kind = type(node)
            if kind in _DEFINITIONS:
                continue
            if kind in _LOOPS:
                inner = self.summary_of(node, depth)
                summary.barrier |= inner.barrier or self._iterates_device_loader(node)
                summary.inner_step |= inner.step or inner.backward or inner.model_call
                continue
            if kind is cst.Call:
                marks_step |= self._scan_call(node, summary, depth, recording)
            elif kind is cst.With and recording:
                recording = not any(self._stops_recording(item.item) for item in node.items)
            elif kind is cst.WithItem and type(node.item) is cst.Call:
                if cst_nodes.last_name(node.item.func) in self._barrier_names:
                    if self.resolver.qualified_names(node.item.func) & self.settings.barriers:
                        summary.barrier = True
            stack.extend((child, recording) for child in cst_nodes.iter_children(node))
        return marks_step

    def _stops_recording(self, item: cst.BaseExpression) -> bool:
        """`torch.no_grad()` (a `with` item or a decorator): what runs under it records no
        gradients."""
        func = item.func if type(item) is cst.Call else item
        if cst_nodes.last_name(func) not in self._no_grad_names:
            return False
        return bool(self.resolver.qualified_names(func) & self.settings.no_grad_contexts)

    def _scan_call(self, node: cst.Call, summary: Summary, depth: int, recording: bool) -> bool:
        func = node.func
        name = cst_nodes.last_name(func)
        if name is None:
            return False
        if (
            name == "backward" and type(func) is cst.Attribute
        ):  # loss.backward(), scaler.scale(loss).backward()
            summary.backward = True
            return False
        receiver = cst_nodes.last_name(func.value) if type(func) is cst.Attribute else None
        if receiver is not None and receiver in self.settings.optimizers:
            if receiver in self.settings.schedulers:
                return False
            if name == "step":
                summary.step = True
                return True
            return name in ("zero_grad", "update")
        if name in self._barrier_names:
            qualified = self.resolver.qualified_names(func)
            if qualified & self.settings.barriers:
                summary.barrier = True
                return True
            if any(q.endswith("xla_model.optimizer_step") for q in qualified):
                summary.step = True
                if any(a.keyword is not None and a.keyword.value == "barrier" for a in node.args):
                    summary.barrier = True
                return True
        # model(x), agent(obs), agent.get_action(obs)
        variables = self.model_variables()
        if name in self.settings.models or name in variables or name in variables.get(receiver, ()):
            summary.model_call = True
            summary.recorded_model_call |= recording
        definition = self.functions.get(name) if receiver in (None, "self") else None
        if definition is not None and depth < 2:
            inner = self.summary_of(definition, depth + 1)
            summary.backward |= inner.backward
            summary.model_call |= inner.model_call
            # (`@torch.no_grad()` on the function: its model calls record nothing either)
            recording &= not any(self._stops_recording(d.decorator) for d in definition.decorators)
            summary.recorded_model_call |= recording and inner.recorded_model_call
            summary.barrier |= inner.barrier
            if inner.step:
                summary.step = True
                return True
        return False

    # --- loops -------------------------------------------------------------------------------

    def plan(
        self,
        loop: cst.For | cst.While,
        inside_training: bool,
        later: Sequence[cst.BaseStatement] = (),
    ) -> tuple[LoopPlan | None, str]:
        """The barrier plan for `loop` (None: it needs none), and what the loop does:
        "train", "eval" or "" (neither); `later`: the statements after it in its block."""
        body = _body(loop)
        summary = self.summary_of(loop)
        trains = summary.step or summary.backward
        kind = "train" if trains else ("eval" if summary.model_call else "")
        feeds_training = summary.recorded_model_call and self._trains(later)
        if kind == "eval" and (self.in_model_class(loop) or feeds_training):
            # a model calling its layers in a loop (an RNN's forward over time steps), or a
            # forward pass over time steps whose loss the code after it trains on: part of a
            # step, not a step of its own. (A rollout that calls its policy under no_grad and
            # trains on the stored results afterwards is a loop of steps of its own.)
            return None, ""
        # A loop around steps (an epoch, a PPO iteration) that calls a model itself ends at a
        # barrier too, but is no step: what it reads back, it reads once an epoch.
        role = "" if kind == "eval" and summary.inner_step else kind
        if not kind or summary.barrier or self._iterates_device_loader(loop):
            return None, role  # nothing to run on the device, or a barrier already
        if trains and inside_training:
            return None, role  # micro-batches: part of the enclosing step's one graph
        # MpDeviceLoader's threads block for good when the loop stops early (`break` at the
        # `max_batches`-th batch), with the DataLoader and the batches they hold: an evaluation,
        # run again and again, would pile them up (karpathy/makemore's), so an evaluation loop
        # that may stop early keeps its loader and ends its iterations at a barrier instead
        stops = kind == "eval" and _stops_early(body)
        loader = None if stops else self._loader(loop)
        if type(loop.body) is not cst.IndentedBlock:
            # `for x in y: f(x)` on one line: no place for a statement
            return (LoopPlan(kind, loader=loader), role) if loader is not None else (None, role)
        if loader is not None:
            # MpDeviceLoader runs the step's graph when the next batch is fetched; what the body
            # reads on the host after the step (a loss, a check of every parameter) would each
            # run the whole step before then: a barrier right after the step runs it once
            last = summary.step_statements[-1] if summary.step_statements else len(body) - 1
            after = body[last] if last < len(body) - 1 else None
            return LoopPlan(kind, loader=loader, after=after), role
        if summary.step_statements:
            return LoopPlan(kind, after=body[summary.step_statements[-1]]), role
        if summary.first_exit is None:
            return LoopPlan(kind, after=body[-1]), role
        if summary.first_exit == 0:
            return None, role  # it may leave before doing anything: no safe place
        return LoopPlan(kind, after=body[summary.first_exit - 1]), role

    def _trains(self, statements: Sequence[cst.BaseStatement]) -> bool:
        """`statements` take a backward pass or an optimizer step themselves (not in a loop)."""
        if not statements:
            return False
        summary = self.summarize(list(statements))
        return summary.backward or summary.step

    def _loader(self, loop: cst.For | cst.While) -> cst.BaseExpression | None:
        """The DataLoader a `for` iterates (inside `enumerate(...)`/`tqdm(...)`), if any."""
        if type(loop) is not cst.For:
            return None
        iterable = self._unwrapped(loop.iter)
        name = cst_nodes.last_name(iterable)
        if name is None:
            return None
        if name in self.loader_variables or name in self.settings.loaders:
            return iterable
        return None

    def _unwrapped(self, iterable: cst.BaseExpression) -> cst.BaseExpression:
        """`loader` of `enumerate(tqdm(loader))`."""
        while type(iterable) is cst.Call and iterable.args:
            if cst_nodes.last_name(iterable.func) not in self._wrapper_names:
                break
            if not (self.resolver.qualified_names(iterable.func) & self.settings.iterator_wrappers):
                break
            iterable = iterable.args[0].value
        return iterable

    def _iterates_device_loader(self, loop: cst.CSTNode) -> bool:
        if type(loop) is not cst.For:
            return False
        if cst_nodes.last_name(self._unwrapped(loop.iter)) in self.prepared_variables:
            return True
        for node in cst_nodes.walk(loop.iter):
            if (
                type(node) is cst.Call
                and cst_nodes.last_name(node.func) in self._device_loader_names
            ):
                if self.resolver.qualified_names(node.func) & self.settings.device_loaders:
                    return True
        return False


def _body(node: cst.CSTNode) -> list[cst.BaseStatement]:
    body = node.body
    if type(body) is cst.SimpleStatementSuite:
        return [cst.SimpleStatementLine(body=list(body.body))]
    return list(body.body)


def _stops_early(body: list[cst.BaseStatement]) -> bool:
    """A `break`, `return` or `yield` in the loop's body (not in a loop inside it): the loop
    may stop before its iterable is done."""
    return any(_may_leave(statement, (cst.Break, cst.Return, cst.Yield)) for statement in body)


def _may_leave(statement: cst.CSTNode, leaves: tuple[type, ...] = _LEAVES) -> bool:
    """A break/continue/return/raise (`leaves`) in the statement that leaves this loop's
    iteration."""
    stack = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, leaves):
            return True
        if type(node) in _LOOPS or isinstance(node, _DEFINITIONS):
            continue  # a break there leaves the inner loop only
        stack.extend(cst_nodes.iter_children(node))
    return False


def _function_index(module: cst.Module) -> dict[str, cst.FunctionDef]:
    """Functions and methods defined at the top of the module or of its classes (in module-level
    `if`/`try` blocks too), by name; then the functions defined inside those (a closure a factory
    returns, `main_loop = get_main_loop(...)` in gordicaleksa/pytorch-GAT, called by the name it
    was defined with), where no function outside a function has the name."""
    outer: dict[str, cst.FunctionDef] = {}
    nested: dict[str, cst.FunctionDef] = {}
    stack: list[tuple[cst.CSTNode, bool]] = [(module, False)]  # (a node, inside a function)
    while stack:  # (pre-order: the first definition of a name wins)
        node, inside = stack.pop()
        if type(node) is cst.FunctionDef:
            (nested if inside else outer).setdefault(node.name.value, node)
            inside = True
        stack.extend((child, inside) for child in reversed(list(cst_nodes.iter_children(node))))
    return nested | outer  # (outside functions first: their names win)
