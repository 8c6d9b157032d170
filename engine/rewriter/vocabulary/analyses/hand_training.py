"""A program that places nothing on a device and trains with no optimizer: after `backward()` it
updates the parameters itself (`p -= lr * p.grad` under `torch.no_grad()`, `p.data.add_(...)`),
of a module or of tensors it makes (`hand_updates.py` finds them). It moves to the XLA device
like one with an optimizer: the module where it is made, and each tensor it trains, by hand or
with an optimizer built from a list of tensors (`SGD([w, b])`), where it is made (on the device,
so that it stays a leaf that gets its gradient); then, as `implicit_device.py` does for any
moved program, its inputs and its loops' barriers."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, patterns
from pytpu.engine.rewriter.vocabulary import ANALYSES, BuiltinAnalysis
from pytpu.engine.rewriter.vocabulary.analyses.implicit_device import (
    FACTORIES,
    Program,
    moved,
    plan,
    program,
    words,
)
from pytpu.engine.rewriter.vocabulary.contract import Case, Edit, Walk
from pytpu.engine.rewriter.vocabulary.tensor_evidence import (
    RANDOM_FACTORIES,
    TENSORS,
    WRAPPERS,
    Evidence,
)

# Factories that make a tensor on the device `device=` names, the same values as on the host
# (a random factory takes its numbers from the host's generator instead: see `made`).
PLACED_FACTORIES = (FACTORIES - RANDOM_FACTORIES) | frozenset({"torch.as_tensor"})


def _plan_modules(walk: Walk, case: Case) -> None:
    found = program(walk)
    for assignment, by_hand in found.models.items() if found else ():
        if by_hand:
            plan(walk, case, found, found.meta.assigned_value(assignment))


def made(evidence: Evidence, value: cst.CSTNode) -> tuple[cst.CSTNode, str]:
    """Where a tensor trained by hand is made, and how it is made on the device there:

    - "factory": a factory that makes the same values on the device takes `device=`;
    - "regrad": a value that requires its gradient from the start (`torch.randn(3,
      requires_grad=True)`) is made on the host without it, moved, and then requires it (moved
      after, it would be a copy that is no leaf and gets no gradient);
    - "move": any other value moves as it is.

    The place is inside `Variable(...)`, `nn.Parameter(...)` and `.requires_grad_()`. A random
    factory keeps making its numbers on the host: the host's generator gives the original
    program's numbers, and the program's later draws stay the same as well."""
    node = value
    while type(node) is cst.Call:
        func = node.func
        if type(func) is cst.Attribute and func.attr.value == "requires_grad_":
            node = func.value
        elif node.args and evidence.qualified(func) & WRAPPERS:
            node = node.args[0].value
        else:
            break
    if type(node) is not cst.Call:
        return node, "move"
    if evidence.qualified(node.func) & PLACED_FACTORIES and not any(
        evidence.value(a.value).kind in TENSORS for a in node.args
    ):
        return node, "factory"
    return node, "regrad" if _requires_grad(node) is not None else "move"


def _requires_grad(call: cst.Call) -> cst.Arg | None:
    return next(
        (a for a in call.args if a.keyword is not None and a.keyword.value == "requires_grad"),
        None,
    )


def _tensor_sites(walk: Walk, how: str) -> Iterator[tuple[Program, cst.CSTNode]]:
    found = program(walk)
    for assignment in sorted(found.tensors, key=lambda a: found.meta.top(a.node)) if found else ():
        value = found.meta.assigned_value(assignment)
        if value is not None:
            site, made_so = made(found.found, value)
            if made_so == how:
                yield found, site


def _plan_factories(walk: Walk, case: Case) -> None:
    for found, site in _tensor_sites(walk, "factory"):
        plan(walk, case, found, site, patterns.Bindings())


def _plan_regrads(walk: Walk, case: Case) -> None:
    for found, site in _tensor_sites(walk, "regrad"):
        plan(walk, case, found, site)


def _plan_tensors(walk: Walk, case: Case) -> None:
    for found, site in _tensor_sites(walk, "move"):
        plan(walk, case, found, site)


def _regrad(edit: Edit) -> cst.CSTNode:
    """The rule's replacement with `$value` bound to the call without its `requires_grad=`
    and `$requires_grad` to that keyword's value."""
    call = edit.updated
    flag = _requires_grad(call)
    args = cst_nodes.normalise_commas([a for a in call.args if a is not flag])
    bindings = patterns.Bindings(
        nodes={"value": call.with_changes(args=args), "requires_grad": flag.value}
    )
    return edit.render(edit.case.template, bindings)


# After the `implicit_*` analyses (`after`), and one after the other: a site one of them moved is
# not planned again, so the order decides which rule a site is reported under.
ANALYSES.register(
    BuiltinAnalysis(
        name="hand_trained_model",
        after=("implicit_unknown_inputs",),
        doc="in a file with no device work that has no optimizer for it, each module whose "
        "parameters the program updates itself from their gradients (`for p in "
        "model.parameters(): p -= lr * p.grad`, `model.fc.weight.data.sub_(...)`), where the "
        "file makes it (`model = Net()`): its value gets the rule's replacement, with `$value` "
        "bound; the file's loops are then steps",
        words=words,
        after_walk=_plan_modules,
        rewrite=moved,
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="trained_factories",
        after=("hand_trained_model",),
        doc="in a file with no device work, each tensor the program makes with a factory that "
        f"makes the same values anywhere ({', '.join(sorted(f'`{n}`' for n in PLACED_FACTORIES))}"
        "; inside `Variable(...)`, `nn.Parameter(...)` or `.requires_grad_()` too) and trains: "
        "updates itself from its gradient (`w -= lr * w.grad`, or through a list a loop or a "
        "function goes over), or gives an optimizer (`SGD([w, b])`): the factory call takes the "
        "rule's action; the file's loops are then steps",
        words=words,
        after_walk=_plan_factories,
        rewrite=moved,
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="trained_random",
        after=("trained_factories",),
        doc="like `trained_factories`, for a tensor made otherwise (a random factory, whose "
        "numbers stay the host generator's) that requires its gradient from the start "
        "(`torch.randn(3, requires_grad=True)`): the rule's replacement, with `$value` bound to "
        "the call without `requires_grad=` and `$requires_grad` to its value",
        words=words,
        after_walk=_plan_regrads,
        rewrite=_regrad,
    )
)
ANALYSES.register(
    BuiltinAnalysis(
        name="trained_tensors",
        after=("trained_random",),
        doc="like `trained_factories`, for a tensor made otherwise that does not require its "
        "gradient yet (`torch.randn(784, 10) / 28`, `torch.from_numpy(a)`, before "
        "`.requires_grad_()`): that value gets the rule's replacement, with `$value` bound",
        words=words,
        after_walk=_plan_tensors,
        rewrite=moved,
    )
)
