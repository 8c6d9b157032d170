"""Code generation that generates only the top-level statements a rewrite touched and cuts the
others' text out of the source gives what generating the whole module gives: the same text and
the same line and column for every node asked for, whatever statements are focused on, and
whatever the rewrite put between the statements it kept."""

from __future__ import annotations

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytpu.engine.rewriter import codegen, cst_nodes

SOURCES = [
    # header comments, a docstring, imports, a def, a class, a footer comment
    '#!/usr/bin/env python\n# header\n\n"""Doc."""\nimport os\nimport torch\n\n\n'
    "def f(x):\n    return x.cuda()  # trailing\n\n\n# above the class\nclass A:\n"
    "    def g(self):\n        torch.cuda.synchronize()\n\n    # indented footer\n"
    "x = f(1)\n# the end\n",
    # the same statement twice (its text is found twice: the place is not known by search)
    "import torch\nx = 1\ny = torch.zeros(3).cuda()\nx = 1\ny = torch.zeros(3).cuda()\n",
    # Windows line endings, a multi-line call and a string that spans lines
    "import torch\r\n\r\nt = torch.ones(\r\n    3,\r\n)\r\ns = '''a\r\nb'''\r\nu = t.cuda()\r\n",
    # a one-line suite, semicolons and decorators
    "import torch\nif True: a = 1; b = torch.cuda.is_available()\n@dec\n@dec2(1)\n"
    "def h():\n    pass\nz = 2\n",
]


def _full(module: cst.Module, wanted: set[int]):
    return codegen.positions(module, wanted)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.sampled_from(SOURCES), st.data())
def test_focused_generation_equals_whole_module_generation(source: str, data) -> None:
    module = cst.parse_module(source)
    statements = list(module.body)
    focus = data.draw(st.sets(st.sampled_from(statements)), label="focus")
    focus_ids = frozenset(id(s) for s in focus)
    inside = [n for s in focus for n in cst_nodes.walk(s)]
    wanted = {
        id(n) for n in data.draw(st.lists(st.sampled_from(inside)) if inside else st.just([]))
    }
    found, texts = codegen.positions(module, wanted, source, focus_ids)
    expected, _ = _full(module, wanted)
    assert found == expected

    # the rewrite's new module: some kept statements, new ones put between them
    kept = data.draw(st.lists(st.booleans(), min_size=len(statements), max_size=len(statements)))
    body: list[cst.BaseStatement] = []
    for statement, keep in zip(statements, kept, strict=True):
        if data.draw(st.booleans(), label="insert before"):
            body.append(cst.parse_statement("import torch_xla\n"))
        body.append(statement if keep else cst.parse_statement("pass\n"))
    new = module.with_changes(body=body)
    code, _ = codegen.generate(new, set(), texts)
    assert code == new.code


@pytest.mark.parametrize("source", SOURCES)
def test_the_original_text_is_reused(source: str) -> None:
    """Nothing focused: the module's text is the source's, cut in runs, none generated."""
    module = cst.parse_module(source)
    _, texts = codegen.positions(module, set(), source, frozenset())
    assert not texts.single or len(module.body) == 1
    code, _ = codegen.generate(module, set(), texts)
    assert code == source
