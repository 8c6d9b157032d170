"""`file_imports`: a test of the whole file, whatever the wildcard bound: it imports one of some
modules. A setting named like a framework's option (`accelerator = 'gpu'`) is that framework's
only in a file that imports the framework."""

from __future__ import annotations

import weakref
from typing import Any

import libcst as cst

from pytpu.engine.rewriter import patterns
from pytpu.engine.rewriter.imports import bound_paths
from pytpu.engine.rewriter.vocabulary import CONDITIONS, Condition

# per walk: what the file's imports (anywhere in it) bind
_IMPORTED: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()


def _imported(walk: Any) -> frozenset[str]:
    found = _IMPORTED.get(walk)
    if found is None:
        found = frozenset(
            path
            for node in (patterns.walk(walk.module) if walk.module is not None else ())
            if type(node) in (cst.Import, cst.ImportFrom)
            for _, path in bound_paths(node)
        )
        _IMPORTED[walk] = found
    return found


def _file_imports(_node: Any, modules: list[str], walk: Any) -> bool:
    return any(
        path == module or path.startswith(module + ".")
        for path in _imported(walk)
        for module in modules
    )


CONDITIONS.register(
    Condition(
        name="file_imports",
        doc="(of the file, whatever the wildcard bound) the file imports one of the listed "
        "modules or something inside them (`import lightning as L`, `from pytorch_lightning "
        "import Trainer`)",
        check=_file_imports,
        parameter={"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/dotted"}},
        describe=lambda modules: "in a file that imports " + " or ".join(f"`{m}`" for m in modules),
        words=lambda modules: {frozenset({m.split(".")[0]}) for m in modules},
    )
)
