"""Contexts about training and evaluation steps: where a host sync costs a step's time."""

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.loops import step_words
from pytpu.engine.rewriter.vocabulary import CONTEXTS, Context
from pytpu.engine.rewriter.vocabulary.contract import Walk
from pytpu.engine.rewriter.vocabulary.facts.batch_functions import batch_functions


def _in_batch_function(walk: Walk) -> bool:
    """Directly in the body of a function a training loop calls for its batch (not in a loop
    of its own)."""
    for node in reversed(walk.path):
        if type(node) in (cst.For, cst.While, cst.ClassDef, cst.Lambda):
            return False
        if type(node) is cst.FunctionDef:
            return node.name.value in walk.fact(batch_functions)
    return False


CONTEXTS.register(
    Context(
        name="in_training_step",
        doc="only inside a training loop (one that takes a backward pass or an optimizer step), "
        "not an evaluation loop or a rollout, or in a function such a loop calls for its batch "
        "(`X, Y = get_batch('train')`)",
        holds=lambda walk: (walk.in_step() and walk.in_training()) or _in_batch_function(walk),
        words=step_words,
    )
)
CONTEXTS.register(
    Context(
        name="step_unthrottled",
        doc="only inside a training or evaluation loop, and not under an `if` that runs every "
        "n-th step (`if step % 10 == 0:`)",
        holds=lambda walk: walk.in_step() and not walk.step_throttled(),
        words=step_words,
    )
)


def _waits(node: cst.CSTNode, walk: Walk) -> bool:
    """A call that waits for the device: one the loops' `device_waits` list, or a barrier
    called with `wait=True` (`torch_xla.sync(wait=True)`, what PyTPU writes for the first)."""
    if type(node) is not cst.Call:
        return False
    settings = walk.index.loop_settings
    names = walk.resolver.qualified_names(node.func)
    if names & settings.device_waits:
        return True
    waited = any(
        a.keyword is not None
        and a.keyword.value == "wait"
        and cst_nodes.literal_value(a.value) is True
        for a in node.args
    )
    return waited and bool(names & settings.barriers)


def _after_device_wait(walk: Walk) -> bool:
    """The statement being walked comes right after one that waits for the device (possibly
    under an `if`)."""
    path = walk.path
    for depth in range(len(path) - 1, 0, -1):
        block = path[depth - 1]
        if type(block) not in (cst.IndentedBlock, cst.Module):
            continue
        body = list(block.body)
        index = next((i for i, s in enumerate(body) if s is path[depth]), 0)
        if not index:
            return False
        return any(_waits(node, walk) for node in cst_nodes.walk(body[index - 1]))
    return False


CONTEXTS.register(
    Context(
        name="in_step_unwaited",
        doc="only inside a training or evaluation loop, and not right after a statement that "
        "waits for the device (`torch.cuda.synchronize()`: a call the loops' `device_waits` "
        "lists, or a barrier called with `wait=True`)",
        holds=lambda walk: walk.in_step() and not _after_device_wait(walk),
        words=step_words,
    )
)
