"""A program that places nothing on a device (no `.to(`, `device=`, CUDA or XLA device) but
trains a model, that is, builds an optimizer from `model.parameters()` (or trains tensors of its
own, or updates a module's parameters by hand: `hand_training.py`): the model moves to the XLA
device, the tensors the program gives it and its loss move where they are used, and so do the
host tensors an operation puts beside a device tensor; the tensors the model's methods make are
made on the device, and what it reads back into NumPy is copied to the host first. The file's
loops are then steps like any device program's (barriers, MpDeviceLoader).

Only values the code shows to be tensors move (`tensor_evidence.py`): a number, a string, a list
or a value of unknown type is left where it is, and a model's input of unknown type is flagged.
Where no model is found, R-DEV-21's `host_training` says the program stays on the CPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst.metadata import Assignment

from pytpu.engine.rewriter import cst_nodes, patterns
from pytpu.engine.rewriter.kb_files import torch_api
from pytpu.engine.rewriter.loops import LoopSettings
from pytpu.engine.rewriter.resolve import ScopeResolver
from pytpu.engine.rewriter.vocabulary import ANALYSES, BuiltinAnalysis, fact, hand_updates
from pytpu.engine.rewriter.vocabulary.contract import Case, Edit, Walk
from pytpu.engine.rewriter.vocabulary.facts.code_text import code_text
from pytpu.engine.rewriter.vocabulary.tensor_evidence import (
    DEVICE,
    MODEL,
    MOVABLE,
    ON_DEVICE,
    Evidence,
    Metadata,
    Value,
    is_constant,
    iterable_of,
    meets,
)

# Calls that make a tensor where `device=` says (the host when it is left out).
FACTORIES = torch_api()["device_factories"]
_TRAINS = ("backward", ".step(")  # a file that trains says one of these
_FLAGGED = frozenset({"unknown", "batch", "none"})  # an input nothing shows to be a tensor


def words(kb: Any) -> set[frozenset[str]]:
    """A file that trains with an optimizer, or by hand from the gradients."""
    return {frozenset({"parameters", word}) for word in _TRAINS} | {
        frozenset({"backward", ".grad"})
    }


@dataclass
class Program:
    """What the file trains, found before the walk, and the evidence about its values."""

    meta: Metadata
    qualified: Any  # node -> its qualified names
    loaders: frozenset[str]
    found: Evidence  # the values as the original program has them
    models: dict[Assignment, bool] = field(default_factory=dict)  # -> trained by hand
    tensors: set[Assignment] = field(default_factory=set)  # trained tensors, made here
    planned: set[int] = field(default_factory=set)  # nodes these analyses moved
    _moved: Evidence | None = None

    def moved(self, walk: Walk) -> Evidence:
        """The values once the models and trained tensors are on the device, a loader a
        loop iterates through MpDeviceLoader gives device batches, and the tensors the modules'
        methods make are made there."""
        if self._moved is None:
            seeds: dict[Any, Value] = {a: MODEL for a in self.models}
            seeds.update((a, DEVICE) for a in self.tensors)
            overrides = {
                id(plan.loop.loader): iterable_of(DEVICE)
                for plan in walk.planned()
                if plan.loop is not None and plan.loop.loader is not None
            }
            overrides.update((id(site), DEVICE) for site in factory_sites(self))
            self._moved = Evidence(self.meta, self.qualified, self.loaders, seeds, overrides)
        return self._moved


@fact(
    "trained_program",
    "in a file with no device work that trains (an optimizer built from a model's "
    "parameters, tensors it trains, updates by hand): what it trains, and the evidence "
    "about its values; asked first before the walk, when finding one makes the file a "
    "device program",
)
def trained_program(walk: Walk) -> Program | None:
    found = None
    trains = any(w in walk.fact(code_text) for w in _TRAINS)  # (not in a comment PyTPU wrote)
    if not walk.device_aware and walk.module is not None and trains:
        found = _find(walk)
        if found is not None:
            walk.declare_device_program()  # its loops are steps from now on
    return found


def program(walk: Walk) -> Program | None:
    """The file's program if it is one these analyses move (found once, before the walk)."""
    return walk.fact(trained_program)


def _find(walk: Walk) -> Program | None:
    resolver = walk.resolver
    if not (isinstance(resolver, ScopeResolver) and resolver.wrapper.module is walk.module):
        resolver = None
    meta = Metadata(walk.module, resolver.wrapper if resolver else None)
    if resolver is None:
        resolver = ScopeResolver(meta.wrapper, walk.index.public_paths)
    loaders = walk.index.loop_settings.loader_classes
    evidence = Evidence(meta, resolver.qualified_names, loaders)
    found = Program(meta, resolver.qualified_names, loaders, evidence)
    for module in _optimized(found):
        found.models[module] = False
    for call in _optimizers(found, walk.index.loop_settings):
        found.tensors |= hand_updates.given(meta, evidence, call.args[0].value).tensors
    hand = hand_updates.find(meta, evidence)
    for module in hand.modules:
        found.models.setdefault(module, True)
    found.tensors = (found.tensors | hand.tensors) - found.models.keys()
    # Hogwild: a model in shared CPU memory for worker processes cannot be an XLA model
    # (`share_memory()` raises there); it stays on the CPU, and P-HOGWILD says what to do.
    shared = _shared(meta)
    found.models = {a: by_hand for a, by_hand in found.models.items() if a not in shared}
    found.tensors -= shared
    return found if found.models or found.tensors else None


def _shared(meta: Metadata) -> set[Assignment]:
    """What the file puts in shared memory (`model.share_memory()`, `t.share_memory_()`)."""
    return {
        assignment
        for call in meta.of_type(cst.Call)
        if isinstance(call.func, cst.Attribute)
        and call.func.attr.value in ("share_memory", "share_memory_")
        and isinstance(call.func.value, cst.Name)
        for assignment in meta.referents(call.func.value)
    }


def _optimizers(found: Program, settings: LoopSettings) -> list[cst.Call]:
    """The calls that build an optimizer from what their first argument gives: torch's, or a
    call assigned to an optimizer's name (`optimizer1 = SGDScheduleFree([weight1])`: a
    library's or the repository's own subclass of torch's Optimizer)."""
    named = {
        id(node.value)
        for node in found.meta.of_type(cst.Assign)
        if len(node.targets) == 1
        and type(node.targets[0].target) is cst.Name
        and node.targets[0].target.value in settings.optimizers
        and node.targets[0].target.value not in settings.schedulers
    }
    return [
        call
        for call in found.meta.of_type(cst.Call)
        if call.args
        and call.args[0].keyword is None
        and (
            id(call) in named
            or any(
                q.startswith("torch.optim.") and ".lr_scheduler." not in q
                for q in found.qualified(call.func)
            )
        )
    ]


def _optimized(found: Program) -> set[Assignment]:
    """The assignments that make a module an optimizer is built from (`optimizer =
    SGD(model.parameters())`; the call's first argument names its parameters)."""
    meta = found.meta
    modules = set()
    for call in meta.of_type(cst.Call):
        first = call.args[0].value if call.args and call.args[0].keyword is None else None
        if first is None or any(q.startswith("builtins.") for q in found.qualified(call.func)):
            continue
        for node in cst_nodes.walk(first):
            if (
                type(node) is cst.Call
                and type(node.func) is cst.Attribute
                and node.func.attr.value in ("parameters", "named_parameters")
                and type(node.func.value) is cst.Name
            ):
                modules.update(a for a in meta.referents(node.func.value) if _made_by_call(meta, a))
    return modules


def _made_by_call(meta: Metadata, assignment: Any) -> bool:
    """`model = Net()`: a single name assigned a call, the site that moves it."""
    return type(meta.assigned_value(assignment)) is cst.Call


def _flags_there(walk: Walk, node: cst.CSTNode) -> list | None:
    """The display-only cases already planned at a node (they stay, as flags of this site's
    plan); None if another rule changes or covers it."""
    existing = walk.plan_at(node)
    if existing is None:
        return None if walk.is_claimed(node) else []
    if existing.case.changes_code:
        return None
    return [existing.case, *(f.case for f in existing.flags)]


def plan(
    walk: Walk, case: Case, found: Program, node: cst.CSTNode, bindings: dict | None = None
) -> None:
    """Plan a site of these analyses, once (and nothing inside a site they moved already)."""
    path = found.meta.path(node)
    flags = _flags_there(walk, node)
    if flags is None or id(node) in found.planned or any(a in found.planned for a in path):
        return
    if bindings is None:
        bindings = patterns.Bindings(nodes={"value": node}, covered=[node])
    walk.plan(node, case, bindings, path=path, flags=flags, statement=found.meta.top(node))
    found.planned.add(id(node))


def _decide(walk: Walk, case: Case) -> None:
    """Before the walk: a file with no device work that trains a model it makes is a device
    program from now on (its loops are steps)."""
    program(walk)


def _plan_models(walk: Walk, case: Case) -> None:
    found = program(walk)
    for assignment, by_hand in found.models.items() if found else ():
        if not by_hand:
            plan(walk, case, found, found.meta.assigned_value(assignment))


# --- what the model is given, and what meets it -------------------------------------------------


def _plan_inputs(walk: Walk, case: Case) -> None:
    """What a call of the model or of a loss is given (or of a function of the file that gives it
    the device), and the host tensors of an operation that a device tensor meets: each that is
    known to be a host tensor."""
    found = program(walk)
    if found is None:
        return
    evidence = found.moved(walk)
    for call in found.meta.of_type(cst.Call):
        given = [a.value for a in call.args if not a.star] if evidence.feeds(call) else []
        for value in given or evidence.device_arguments(call):
            if evidence.value(value).kind in MOVABLE:
                plan(walk, case, found, value)
    kinds = (cst.BinaryOperation, cst.Comparison, cst.Subscript, cst.Call, cst.AugAssign)
    for node in found.meta.of_type(*kinds):
        operands = evidence.operands(node)
        values = [evidence.value(o) for o in operands]
        if meets(values):
            for operand, value in zip(operands, values, strict=True):
                if value.kind in MOVABLE and not _assigned_here(node, operand):
                    plan(walk, case, found, operand)


def _assigned_here(node: cst.CSTNode, operand: cst.CSTNode) -> bool:
    """The target of `x += y`, which cannot be moved where it is assigned."""
    return type(node) is cst.AugAssign and operand is node.target


def _plan_unknown_inputs(walk: Walk, case: Case) -> None:
    """A model's input, or a loss's, that nothing shows to be a tensor: it stays where it is."""
    found = program(walk)
    if found is None:
        return
    evidence = found.moved(walk)
    for call in found.meta.of_type(cst.Call):
        fed = evidence.feeds(call)
        if fed is None or (fed == "model" and type(call.func) is cst.Attribute):
            continue
        positional = [a for a in call.args if a.keyword is None and not a.star]
        for arg in positional[:1] if fed == "model" else positional:
            value = arg.value
            if not is_constant(value) and evidence.value(value).kind in _FLAGGED:
                plan(walk, case, found, value)


# --- what the device computed, read into NumPy --------------------------------------------------

# Calls that read a tensor into a NumPy array, the tensor their first argument.
TO_NUMPY = torch_api()["to_numpy"]
_TO_NUMPY_NAMES = frozenset(name.rsplit(".", 1)[1] for name in TO_NUMPY)


def _plan_host_reads(walk: Walk, case: Case) -> None:
    """Each tensor that may be on the device read into NumPy (`out.detach().numpy()`,
    `np.asarray(out)`): an XLA tensor has no host memory to share with an array."""
    found = program(walk)
    if found is None:
        return
    evidence = found.moved(walk)
    for call in found.meta.of_type(cst.Call):
        func = call.func
        if type(func) is cst.Attribute and func.attr.value == "numpy" and not call.args:
            tensor = func.value
        elif (
            call.args
            and cst_nodes.last_name(func) in _TO_NUMPY_NAMES
            and evidence.qualified(func) & TO_NUMPY
        ):
            tensor = call.args[0].value
        else:
            continue
        if evidence.value(tensor).kind in ON_DEVICE:  # (`.cpu()` made it a host tensor)
            plan(walk, case, found, tensor)


# --- what the modules' methods make -------------------------------------------------------------

_FACTORY_NAMES = frozenset(name.rsplit(".", 1)[1] for name in FACTORIES)


def factory_sites(found: Program) -> list[cst.Call]:
    """The calls of a tensor factory without `device=` in the methods (other than `__init__`)
    of the file's modules."""
    meta = found.meta
    sites = []
    for call in meta.of_type(cst.Call):
        if cst_nodes.last_name(call.func) not in _FACTORY_NAMES:
            continue
        if any(a.keyword and a.keyword.value == "device" for a in call.args):
            continue
        if _in_module_method(meta, call) and found.qualified(call.func) & FACTORIES:
            sites.append(call)
    return sites


def _in_module_method(meta: Metadata, node: cst.CSTNode) -> bool:
    function = meta.function(node)
    while function is not None:
        owner = meta.enclosing_class(function)
        if owner is not None:
            bases = (cst_nodes.last_name(b.value) for b in owner.bases)
            return function.name.value != "__init__" and "Module" in bases
        function = meta.function(function)
    return False


def _note_factories(walk: Walk, case: Case) -> None:
    """Before the walk: the tensors these methods make are device tensors in the output, and the
    rules that look for device tensors (writes at a loop's index) see them so on the first run
    as on a second one."""
    found = program(walk)
    if found is not None:
        walk.place_on_device(factory_sites(found))


def _plan_factories(walk: Walk, case: Case) -> None:
    """Tensors the methods of the file's modules make without `device=`: on the host they would
    meet the model's device tensors."""
    found = program(walk)
    for site in factory_sites(found) if found is not None else ():
        plan(walk, case, found, site, patterns.Bindings())


def moved(edit: Edit) -> cst.CSTNode | None:
    """The rule's replacement with `$value` bound to the site, in parentheses where it is an
    operation (`(x + 1).to(...)`); a rule without one acts by its action (`set_kwargs`)."""
    case = edit.case
    if case.template is None:
        return None
    value = edit.updated
    if isinstance(value, _LOW_PRECEDENCE) and not value.lpar:
        value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return edit.render(case.template, patterns.Bindings(nodes={"value": value}))


_LOW_PRECEDENCE = (
    cst.BinaryOperation,
    cst.BooleanOperation,
    cst.Comparison,
    cst.IfExp,
    cst.Lambda,
    cst.UnaryOperation,
)


# The analyses below run one after the other (`after`): each plans a node once and nothing inside a
# site one before it moved, so the order decides which rule a site is reported under; it is the
# order their examples were written and tested in.
ANALYSES.register(
    BuiltinAnalysis(
        name="implicit_model",
        after=("optimizer_order",),
        doc="in a file with no device work, each model an optimizer is built from "
        "(`optimizer = SGD(model.parameters())`, `model = Net()` in the file): its value gets "
        "the rule's replacement, with `$value` bound; the file's loops are then steps",
        words=words,
        before_walk=_decide,
        after_walk=_plan_models,
        rewrite=moved,
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="implicit_inputs",
        after=("implicit_model",),
        doc="in a file `implicit_model` or `hand_trained_model` moves to the device: each "
        "argument of a call of the model, of a loss module (`criterion = nn.CrossEntropyLoss()`) "
        "or of a loss function, and each operand of an operation, a torch function, a tensor "
        "method or a function of the file that meets a device tensor, that is known to be a "
        "host tensor (a factory's, a dataset's item, a function's that returns one, arithmetic "
        "on one ...; a number, a string or a value of unknown type is not one), with `$value` "
        "bound",
        words=words,
        after_walk=_plan_inputs,
        rewrite=moved,
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="implicit_unknown_inputs",
        after=("implicit_host_reads",),
        doc="in a file `implicit_model` or `hand_trained_model` moves to the device: the first "
        "positional argument of a call of the model, and each positional argument of a loss, "
        "that is not a constant and that nothing shows to be a tensor (the value of a call "
        "into another module, a loader's batch left whole ...)",
        words=words,
        after_walk=_plan_unknown_inputs,
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="implicit_host_reads",
        after=("implicit_factories",),
        doc="in a file `implicit_model` moves to the device: each tensor read into NumPy "
        "(`$value.numpy()`, `numpy.array($value)`, `numpy.asarray($value)`) that may be on the "
        "device (the model's or a loss's output, what was computed from it; by the same "
        "evidence as `implicit_inputs`), with `$value` bound",
        words=words,
        after_walk=_plan_host_reads,
        rewrite=moved,
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="implicit_factories",
        after=("implicit_inputs",),
        doc="in a file `implicit_model` moves to the device: each call of a tensor factory "
        f"({', '.join(sorted(f'`{n}`' for n in FACTORIES))}) without `device=` in a method "
        "(other than `__init__`) of an `nn.Module` subclass",
        words=words,
        before_walk=_note_factories,
        after_walk=_plan_factories,
        rewrite=moved,
    )
)
