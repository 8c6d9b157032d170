"""Conditions on the arguments a `$*rest` wildcard bound."""

import libcst as cst

from pytpu.engine.rewriter.vocabulary import CONDITIONS, Condition


def _without_keywords(args: list[cst.Arg], keywords: list[str], walk: object) -> bool:
    return not any(a.keyword is not None and a.keyword.value in keywords for a in args)


def _max_positional(args: list[cst.Arg], limit: int, walk: object) -> bool:
    return sum(1 for a in args if a.keyword is None) <= limit


CONDITIONS.register(
    Condition(
        name="without_keywords",
        doc="(for `$*rest`) none of the arguments is one of the listed keywords",
        check=_without_keywords,
        parameter={"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/identifier"}},
        describe=lambda names: "without the keywords " + ", ".join(f"`{v}`" for v in names),
        on_arguments=True,
    )
)
CONDITIONS.register(
    Condition(
        name="max_positional",
        doc="(for `$*rest`) at most this many of the arguments are positional",
        check=_max_positional,
        parameter={"type": "integer", "minimum": 0},
        describe=lambda n: f"at most {n} positional argument{'s' if n != 1 else ''}",
        on_arguments=True,
    )
)


def _keywords_only_without(args: list[cst.Arg], keywords: list[str], walk: object) -> bool:
    """No positional argument (it may be the one named), no `*`/`**` unpacking (it may hold
    it), and none of the keywords."""
    return all(a.keyword is not None and a.star == "" for a in args) and _without_keywords(
        args, keywords, walk
    )


CONDITIONS.register(
    Condition(
        name="keywords_only_without",
        doc="(for `$*rest`) only keyword arguments, none of them one of the listed ones, and no"
        " `*args`/`**kwargs` that may hold one",
        check=_keywords_only_without,
        parameter={"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/identifier"}},
        describe=lambda names: (
            "keyword arguments only, without " + ", ".join(f"`{v}`" for v in names)
        ),
        on_arguments=True,
    )
)
