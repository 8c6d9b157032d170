"""`cpu_program_device`: a variable named like a device (`device`, `dev`) in a program that trains
and names no accelerator at all: its own choice of the CPU (`device = torch.device("cpu")`, the
tutorials' `# device = torch.device("cuda:0")  # Uncomment this to run on GPU`) is the only
device it has, the one a migration to a TPU means to change."""

from __future__ import annotations

import re

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.findings import OWN_COMMENT_LINE
from pytpu.engine.rewriter.vocabulary import CONDITIONS, Condition, fact
from pytpu.engine.rewriter.vocabulary.contract import Walk

# Words of code that names an accelerator (strings, attributes, modules); comments are not code.
ACCELERATORS = ("cuda", "gpu", "mps", "xpu", "xla", "tpu", "accelerator")
# ... in a string, as the start of a word ('cuda:0', 'torch_xla', 'multi_gpu'; not 'output')
_IN_WORDS = re.compile(rf"(?<![a-z])(?:{'|'.join(ACCELERATORS)})")


def _names_an_accelerator(node: cst.CSTNode) -> bool:
    if type(node) is cst.Attribute:
        return node.attr.value.lower() in ACCELERATORS or node.attr.value == "is_available"
    if type(node) is cst.Name:
        return node.value.startswith("torch_xla")
    if type(node) is cst.SimpleString:
        value = cst_nodes.literal_value(node)
        return isinstance(value, str) and _IN_WORDS.search(value.lower()) is not None
    return False


def _documentation(nodes: list[cst.CSTNode]) -> set[int]:
    """The strings that are statements of their own (docstrings, a tutorial's prose between
    its code): words about GPUs there are no code that runs on one."""
    return {
        id(string)
        for node in nodes
        if type(node) in (cst.SimpleStatementLine, cst.SimpleStatementSuite)
        for small in node.body
        if type(small) is cst.Expr
        and type(small.value) in (cst.SimpleString, cst.ConcatenatedString)
        for string in cst_nodes.walk(small.value)
        if type(string) is cst.SimpleString
    }


def _read_straight_back(nodes: list[cst.CSTNode]) -> set[int]:
    """The accelerator words of a tensor moved to the device and read straight back to the host
    (`x.cuda().numpy()`, `x.to('cuda').numpy()`): no choice of a device, and gone once migrated
    (`x.cpu().numpy()`), so a second run must not judge the file by them either."""
    found: set[int] = set()
    for node in nodes:
        if type(node) is not cst.Call or cst_nodes.last_name(node.func) != "numpy":
            continue
        inner = node.func.value if type(node.func) is cst.Attribute else None
        if type(inner) is cst.Call and type(inner.func) is cst.Attribute:
            if inner.func.attr.value in ("cuda", "to"):
                found.add(id(inner.func))
                found.update(id(a.value) for a in inner.args)
    return found


def _trains(node: cst.CSTNode) -> bool:
    return type(node) is cst.Call and cst_nodes.last_name(node.func) == "backward"


@fact(
    "cpu_program",
    "the file trains (calls `.backward()`), names no accelerator in its code and "
    "carries no comment PyTPU wrote",
)
def cpu_program(walk: Walk) -> bool:
    nodes = list(cst_nodes.walk(walk.module)) if walk.module is not None else []
    ignored = _documentation(nodes) | _read_straight_back(nodes)
    return (
        any(map(_trains, nodes))
        and not any(_names_an_accelerator(n) for n in nodes if id(n) not in ignored)
        # (a comment PyTPU wrote: the file was migrated already, its accelerator code
        # rewritten, say `if torch.cuda.is_available():` given way to its body; a second
        # run must judge it as the first did)
        and not OWN_COMMENT_LINE.search(walk.text)
    )


def _cpu_program_device(node: cst.CSTNode, _parameter: None, walk: Walk) -> bool:
    return (
        type(node) is cst.Name
        and walk.positions.is_device_name(node.value.lower())
        and walk.fact(cpu_program)
    )


CONDITIONS.register(
    Condition(
        name="cpu_program_device",
        doc="is a variable named like a device (the `names` of `device_positions`) in a file "
        "that trains (calls `.backward()`) and names no accelerator in its code (no word of a "
        "string, docstrings aside, starting with 'cuda', 'gpu', 'mps', 'xpu', 'xla' or 'tpu'; "
        "no `.cuda()`, `torch.cuda`, `torch.accelerator` or `is_available()`) and carries no "
        "comment PyTPU wrote (a migrated file)",
        check=_cpu_program_device,
        words=lambda _: {frozenset({"backward"})},
    )
)
