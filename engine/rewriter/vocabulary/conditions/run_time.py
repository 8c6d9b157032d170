"""`run_time_value`: a value the program computes (`args.dist_backend`, `BACKENDS[kind]`), not
one spelled out in the code (`'nccl'`, `dist.Backend.NCCL`)."""

from __future__ import annotations

from typing import Any

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.patterns import NameLookup
from pytpu.engine.rewriter.resolve import MODULE_ROOTS
from pytpu.engine.rewriter.vocabulary import CONDITIONS, Condition


def _run_time_value(node: cst.CSTNode, _parameter: None, walk: Any) -> bool:
    if cst_nodes.is_literal(node) or type(node) in (cst.ConcatenatedString,):
        return False
    if type(node) in (cst.Name, cst.Attribute):
        root = cst_nodes.chain_root(node)
        return not (type(node) is cst.Attribute and _torch_module(root, walk.resolver))
    return True


def _torch_module(node: cst.CSTNode, resolver: NameLookup) -> bool:
    """A module of torch's, whose members are its constants (`dist.Backend.NCCL`); a module of
    the program's own (`import config`) holds what the program computes (`config.BACKEND`)."""
    if not resolver.is_module(node):
        return False
    return any(name.split(".")[0] in MODULE_ROOTS for name in resolver.qualified_names(node))


CONDITIONS.register(
    Condition(
        name="run_time_value",
        doc="is computed when the program runs (`args.dist_backend`, `BACKENDS[kind]`), not "
        "spelled out in the code (a literal, or a constant of a module such as "
        "`dist.Backend.NCCL`)",
        check=_run_time_value,
    )
)
