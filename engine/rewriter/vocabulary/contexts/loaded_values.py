"""Contexts about what a value becomes where it is made: assigned to a model's name (`model =
torch.load(f)`, a whole pickled module) or to anything else (a state dict, a tensor)."""

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import CONTEXTS, Context
from pytpu.engine.rewriter.vocabulary.contract import Walk


def _assigned_to_a_model(walk: Walk) -> bool:
    """The value is what an assignment assigns, and a target is named as a model is (the KB's
    `loops.model_names`: model, net, *_model...)."""
    path = walk.path
    if not path or type(path[-1]) is not cst.Assign:
        return False
    models = walk.index.loop_settings.models
    for target in path[-1].targets:
        name = cst_nodes.dotted_name(target.target)
        if name is not None and name.rsplit(".", 1)[-1] in models:
            return True
    return False


CONTEXTS.register(
    Context(
        name="assigned_to_a_model",
        doc="only as the value an assignment gives a name the KB calls a model (`loops."
        "model_names`: `model = torch.load(f)` loads a whole module)",
        holds=_assigned_to_a_model,
    )
)
CONTEXTS.register(
    Context(
        name="not_assigned_to_a_model",
        doc="anywhere but as the value an assignment gives a name the KB calls a model (the "
        "opposite of `assigned_to_a_model`)",
        holds=lambda walk: not _assigned_to_a_model(walk),
    )
)
