"""`file_imports`: a test of the whole file, whatever the wildcard bound: it imports one of some
modules. A setting named like a framework's option (`accelerator = 'gpu'`) is that framework's
only in a file that imports the framework."""

from __future__ import annotations

from typing import Any

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.imports import bound_paths
from pytpu.engine.rewriter.vocabulary import CONDITIONS, DOTTED_LIST, Condition, fact
from pytpu.engine.rewriter.vocabulary.contract import Walk


@fact(
    "imported_paths",
    "what the file's imports bind, anywhere in it (`torch.cuda.amp` for "
    "`from torch.cuda import amp`)",
)
def imported_paths(walk: Walk) -> frozenset[str]:
    return frozenset(
        path
        for node in (cst_nodes.walk(walk.module) if walk.module is not None else ())
        if type(node) in (cst.Import, cst.ImportFrom)
        for _, path in bound_paths(node)
    )


def _file_imports(_node: Any, modules: list[str], walk: Walk) -> bool:
    return any(
        path == module or path.startswith(module + ".")
        for path in walk.fact(imported_paths)
        for module in modules
    )


CONDITIONS.register(
    Condition(
        name="file_imports",
        doc="(of the file, whatever the wildcard bound) the file imports one of the listed "
        "modules or something inside them (`import lightning as L`, `from pytorch_lightning "
        "import Trainer`)",
        check=_file_imports,
        parameter=DOTTED_LIST,
        describe=lambda modules: "in a file that imports " + " or ".join(f"`{m}`" for m in modules),
        words=lambda modules: {frozenset({m.split(".")[0]}) for m in modules},
    )
)
