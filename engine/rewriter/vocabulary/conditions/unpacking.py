"""`lacks_keywords`: the arguments surely do not give some keywords: none is one of them, and
none is unpacked (`**config` may hold any keyword), so adding one cannot repeat it."""

from __future__ import annotations

import libcst as cst

from pytpu.engine.rewriter.vocabulary import CONDITIONS, Condition


def _lacks_keywords(args: list[cst.Arg], keywords: list[str], walk: object) -> bool:
    return not any(
        a.star == "**" or (a.keyword is not None and a.keyword.value in keywords) for a in args
    )


CONDITIONS.register(
    Condition(
        name="lacks_keywords",
        doc="(for `$*rest`) none of the arguments is one of the listed keywords, and none is "
        "unpacked with `**` (which may hold one)",
        check=_lacks_keywords,
        parameter={"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/identifier"}},
        describe=lambda names: "surely without the keywords " + ", ".join(f"`{v}`" for v in names),
        on_arguments=True,
    )
)
