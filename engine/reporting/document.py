"""The report document: what the main job did, as data (JSON), built from the stages' typed
results (`stages.Stages`) by the registered sections (`sections.SECTIONS`), each a typed model
(`model.py`); the only place that turns them into the report's dictionary.

`markdown.render` turns it into the page a reviewer reads; the bot posts that page as the pull
request's body. Nothing here runs anything.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from pytpu.engine.reporting.sections import SECTIONS
from pytpu.engine.stages import Stages


@cache
def report_type() -> type[msgspec.Struct]:
    """The whole document's model: a key per registered section with a builder, in order."""
    fields = [(s.name, s.kind) for s in SECTIONS.values() if s.build is not None]
    return msgspec.defstruct(
        "Report", fields, kw_only=True, forbid_unknown_fields=True, module=__name__
    )


def build(stages: Stages) -> dict[str, Any]:
    """The report document (what `.pytpu/report.json` holds) from every stage's typed result."""
    values = {s.name: s.build(stages) for s in SECTIONS.values() if s.build is not None}
    return msgspec.to_builtins(report_type()(**values))


def templates() -> list[str]:
    """The page's partials, in the sections' order (`report.md.j2` includes each)."""
    return [s.template for s in SECTIONS.values() if s.template is not None]
