"""`report.schema.json`, generated from the report's typed model (`document.report_type`):
the registered sections' models, their docstrings and field descriptions. The file is kept in
the repository for the report's readers; a test fails while it is stale.

    python -m pytpu.engine.reporting.schema   # write it again
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from pytpu.engine.reporting import document, markdown

HEADER = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://pytpu.dev/schema/report.json",
    "title": "PyTPU migration report",
    "description": "What one migration run did and measured; rendered as the pull request's body.",
}


def generate() -> dict[str, Any]:
    """The schema of the report document, its sections described by their builders."""
    (report,), components = msgspec.json.schema_components([document.report_type()])
    definitions = components.pop("Report")
    for name, entry in document.SECTIONS.items():
        if name in definitions["properties"] and entry.doc:
            definitions["properties"][name] = {
                "description": " ".join(entry.doc.split()),
                **definitions["properties"][name],
            }
    definitions.pop("title", None)
    return {**HEADER, **definitions, "$defs": dict(sorted(components.items()))}


def text() -> str:
    return json.dumps(generate(), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    markdown.SCHEMA_PATH.write_text(text(), encoding="utf-8")
    print(f"wrote {markdown.SCHEMA_PATH}")


if __name__ == "__main__":
    main()
