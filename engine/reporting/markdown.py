"""The migration report as GitHub-flavoured Markdown: the body of the pull request.

The document is checked against `report.schema.json`, then rendered from the Jinja templates in
`templates/`: `report.md.j2` includes each registered section's partial (`sections.py`). A
folder passed as `overrides` (callers use the repository's `.github/pytpu/`) is searched first,
so a file there named like any of the templates replaces it, e.g. `.github/pytpu/report.md.j2`
for the whole body.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import jsonschema
from jsonschema.exceptions import best_match

from pytpu.engine.reporting import document as report_document

SCHEMA_PATH = Path(__file__).with_name("report.schema.json")
TEMPLATES = Path(__file__).with_name("templates")
ENTRY = "report.md.j2"
COLLAPSE_AFTER = 10  # tables with more rows than this go inside <details>
NOTHING_ON_XLA = "n/a — nothing ran on the XLA device"  # the speedup when XLA compiled no graph


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def validate(document: dict) -> None:
    """Raise ValueError naming the JSON path of the document's (most relevant) first problem."""
    error = best_match(_validator().iter_errors(document))
    if error is None:
        return
    path = error.json_path
    if error.validator == "required":  # name the missing property, not the object lacking it
        path += "." + next(p for p in error.validator_value if p not in error.instance)
    raise ValueError(f"report document: {path}: {error.message}")


def short_device(name: str) -> str:
    """`XLA on the CPU (torch_xla 2.9.0, PJRT_DEVICE=CPU)` -> `XLA on the CPU`."""
    return name.split(" (", 1)[0]


def speedup_text(speedup: float) -> str:
    """Two decimals, or two significant digits below 0.1: x0.0007 is not x0.00."""
    return f"{speedup:.2f}" if speedup >= 0.1 else f"{speedup:.2g}"


def verdict_line(document: dict) -> str:
    """`PyTPU: parity 18/18, speedup x1.42 (CPU → XLA on the CPU)`."""
    verdict, devices = document["verdict"], document["devices"]
    if verdict["status"] == "regressed":
        n = verdict["regressions"]
        parts = [f"{n} regression{'s' if n != 1 else ''}"]
        parts.append(f"{verdict['passed_both']}/{verdict['total']} pass on both")
    elif verdict["status"] == "parity":
        parts = [f"parity {verdict['passed_both']}/{verdict['total']}"]
    else:
        parts = ["no tests"]
    # (what the benchmark could never claim comes before a claim refused for the machine's load,
    # as the benchmark section has it)
    if verdict["speedup"] is not None:
        parts.append(f"speedup x{speedup_text(verdict['speedup'])}")
    elif document["benchmark"].get("nothing_on_xla"):
        parts.append(f"speedup {NOTHING_ON_XLA}")
    elif document["benchmark"]["error"]:
        parts.append("benchmark failed")
    elif document["benchmark"].get("on_stand_in"):
        parts.append("no speedup on the CPU stand-in")
    elif document["benchmark"].get("refused"):
        parts.append("no trustworthy speedup")
    else:
        parts.append("no benchmark")
    sides = f"{short_device(devices['baseline'])} → {short_device(devices['target'])}"
    return f"{document['tool']['name']}: {', '.join(parts)} ({sides})"


# Filters. Table cells are one line: pipes escaped (GFM unescapes them, inside code spans too),
# line breaks as <br>, and `<` as an entity so that a message cannot open an HTML tag.


def cell(value: Any) -> str:
    text = str(value).replace("|", "\\|").replace("<", "&lt;")
    return "<br>".join(line.strip() for line in text.strip().splitlines())


def code(value: Any, in_table: bool = False) -> str:
    """A code span that holds any text: a fence longer than the longest run of backticks."""
    text = " ".join(str(value).split("\n"))
    if in_table:
        text = text.replace("|", "\\|")
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def number(value: float) -> str:
    """About three significant figures, without an exponent: 4,211, 48.6, 5.62, 1."""
    if value == int(value):
        return f"{int(value):,}"
    digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:,.{digits}f}"


def duration(seconds: float) -> str:
    """`8.4 s`, `1 min 49 s`, `1 h 02 min`."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else words or word + 's'}"


def first_line(value: str) -> str:
    return value.strip().splitlines()[0]


def _environment(overrides: Path | None) -> jinja2.Environment:
    loaders: list[jinja2.BaseLoader] = [jinja2.FileSystemLoader(TEMPLATES)]
    if overrides is not None and Path(overrides).is_dir():
        loaders.insert(0, jinja2.FileSystemLoader(overrides))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(cell=cell, code=code, number=number, duration=duration, plural=plural)
    env.filters.update(first_line=first_line, short_device=short_device, speedup=speedup_text)
    env.globals.update(collapse_after=COLLAPSE_AFTER, nothing_on_xla=NOTHING_ON_XLA)
    return env


def render(document: dict, overrides: Path | None = None) -> str:
    """The pull request body; `overrides` is a folder whose templates win over the shipped ones."""
    validate(document)
    template = _environment(overrides).get_template(ENTRY)
    partials = report_document.templates()
    text = template.render(doc=document, verdict=verdict_line(document), partials=partials)
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
