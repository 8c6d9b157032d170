"""The parts of `kb/schema.json` that list the vocabulary, generated from the registries.

`kb/schema.json` is data; its `$defs` for matches, conditions, contexts and actions are
written from the registered entries by `pytpu kb docs` (a test fails when they are stale).
"""

from __future__ import annotations

import json
from typing import Any

from pytpu.engine.rewriter.vocabulary import ACTIONS, CONDITIONS, CONTEXTS, MATCH_KINDS
from pytpu.engine.rewriter.vocabulary.matches.patterns import PATTERN


def _one_key(name: str, value_schema: dict[str, Any], doc: str) -> dict[str, Any]:
    return {
        "description": doc,
        "type": "object",
        "additionalProperties": False,
        "required": [name],
        "properties": {name: value_schema},
    }


def match_def() -> dict[str, Any]:
    pattern = MATCH_KINDS[PATTERN]
    choices: list[dict[str, Any]] = [
        {"description": pattern.doc, "$ref": "#/$defs/pattern"},
        {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/pattern"}},
    ]
    for kind in MATCH_KINDS:
        if kind.name == PATTERN:
            continue
        properties = kind.schema_properties()
        choices.append(
            {
                "description": kind.doc,
                "type": "object",
                "additionalProperties": False,
                "required": [kind.name],
                "properties": properties,
            }
        )
    return {"oneOf": choices}


def constraint_def() -> dict[str, Any]:
    plain = [c for c in CONDITIONS if c.parameter is None]
    choices: list[dict[str, Any]] = [
        {
            "description": "; ".join(f"{c.name}: {c.doc}" for c in plain),
            "enum": [c.name for c in plain],
        }
    ]
    choices += [_one_key(c.name, c.parameter_schema(), c.doc) for c in CONDITIONS if c.parameter]
    return {"oneOf": choices}


def context_def() -> dict[str, Any]:
    return {
        "description": "; ".join(f"{c.name}: {c.doc}" for c in CONTEXTS),
        "enum": CONTEXTS.names(),
    }


def action_def() -> dict[str, Any]:
    words = [a for a in ACTIONS if a.parameter is None]
    keyed = [a for a in ACTIONS if a.parameter is not None]
    return {
        "oneOf": [
            {
                "description": "; ".join(f"{a.name}: {a.doc}" for a in words),
                "enum": [a.name for a in words],
            },
            {
                "description": "; ".join(f"{a.name}: {a.doc}" for a in keyed),
                "type": "object",
                "additionalProperties": False,
                "minProperties": 1,
                "properties": {a.name: a.parameter for a in keyed},
            },
        ]
    }


GENERATED_DEFS = {
    "match": match_def,
    "constraint": constraint_def,
    "context": context_def,
    "action": action_def,
}


def render(schema: dict[str, Any]) -> str:
    """`schema` (kb/schema.json's content) with its vocabulary `$defs` generated anew."""
    defs = dict(schema["$defs"])
    for name, build in GENERATED_DEFS.items():
        defs[name] = build()
    return json.dumps({**schema, "$defs": defs}, indent=2, ensure_ascii=False) + "\n"
