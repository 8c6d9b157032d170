"""`code_text`: the module's text without the comments PyTPU wrote."""

from __future__ import annotations

from pytpu.engine.rewriter.findings import OWN_COMMENT_LINE
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk


@fact(
    "code_text",
    "the module's text without the comment lines PyTPU wrote (`# PYTPU351: ... backward ...`): "
    "their words are not the program's, so a second run judges the file as the first did",
)
def code_text(walk: Walk) -> str:
    return OWN_COMMENT_LINE.sub("", walk.text) if "PYTPU" in walk.text else walk.text
