"""The value types of PyTPU's typed results (msgspec): what a value is (at least one character, a
count, a rule code) is said once, here, and reaches every schema generated from the models that use
them (`reporting/report.schema.json`). A key a model may leave out is typed `X | UnsetType` (written
only when set); every other key is always written, `null` included.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

from msgspec import Meta, Struct

Text = Annotated[str, Meta(min_length=1)]
Sha = Annotated[str, Meta(pattern="^[0-9a-f]{4,64}$")]
Code = Annotated[str, Meta(pattern="^PYTPU[0-9]{3}$")]
Count = Annotated[int, Meta(ge=0)]
Seconds = Annotated[float, Meta(ge=0)]
Milliseconds = Annotated[float, Meta(ge=0)]
Speedup = Annotated[float, Meta(gt=0)]
Outcome = Literal["passed", "failed", "error", "skipped", "missing"]
Device = Literal["cpu", "cuda", "xla", "tpu"]
T = TypeVar("T")
NonEmpty = Annotated[list[T], Meta(min_length=1)]


def described(kind: object, text: str) -> object:
    """`kind` with a description in the schema."""
    return Annotated[kind, Meta(description=text)]


class Model(Struct, kw_only=True, forbid_unknown_fields=True):
    """A part of the report document (no other keys)."""
