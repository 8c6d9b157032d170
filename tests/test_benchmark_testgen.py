"""Unit tests of the mutation operators and model-code detection of benchmarks/testgen/."""

from __future__ import annotations

import ast
import difflib
import textwrap

import libcst as cst
import pytest

from benchmarks.testgen import line_coverage, model_code, mutants, operators

MODEL = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    def helper(a, b):
        return a + b * 2


    class Net(Block):
        def forward(self, x):
            return torch.tanh(super().forward(x))


    class Block(nn.Module):
        def __init__(self, dim=4):
            super().__init__()
            self.fc = nn.Linear(dim, dim)
            self.act = nn.LeakyReLU(0.2, inplace=True)
            self.scale = 0.0

        def forward(self, x, q, k):
            h = F.relu(self.fc(x), inplace=True)
            x = x + self.fc(h)
            x += self.fc(x)
            att = (q * k) @ x
            return torch.matmul(att, x) - 1.5


    class Config:
        size = 3

        def area(self):
            return self.size * 2 + 1.0
    """
)


def _changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    """The (old, new) line pairs that differ; asserts that only lines were replaced."""
    old, new = before.splitlines(), after.splitlines()
    assert len(old) == len(new)
    return [(a, b) for a, b in zip(old, new, strict=True) if a != b]


def _apply_all(source: str, operator: str) -> list[tuple[str, str]]:
    """Every mutant of one operator: checks it parses, then returns its one changed line."""
    sites = operators.find_sites(source)
    changes = []
    for index, site in enumerate(sites):
        if site.operator != operator:
            continue
        mutated = operators.mutate(source, index)
        cst.parse_module(mutated)
        ast.parse(mutated)
        changed = _changed_lines(source, mutated)
        assert len(changed) == 1, "\n".join(
            difflib.ndiff(source.splitlines(), mutated.splitlines())
        )
        changes.append(changed[0])
    return changes


def _new_lines(source: str, operator: str) -> set[str]:
    return {new.strip() for _, new in _apply_all(source, operator)}


# ---------------------------------------------------------------------------- model code


def test_model_classes_finds_direct_and_indirect_subclasses_in_any_order():
    assert model_code.model_classes(MODEL) == {"Block", "Net"}


def test_model_classes_spellings_and_non_modules():
    source = textwrap.dedent(
        """\
        import torch
        from torch.nn import Module as Base
        from torch import nn as tnn
        from mylib import Layer

        class A(torch.nn.Module): pass
        class B(Base): pass
        class C(tnn.Module): pass
        class D(A, dict): pass
        class E(dict): pass
        class F(Layer): pass
        class G: pass
        class H(Module): pass
        class Outer:
            class Inner(torch.nn.Module): pass
        """
    )
    assert model_code.model_classes(source) == {"A", "B", "C", "D", "Outer.Inner"}
    # a model class of another file of the repository, imported by name
    assert model_code.model_classes(source, elsewhere={"Layer"}) == {
        "A",
        "B",
        "C",
        "D",
        "F",
        "Outer.Inner",
    }


def test_find_model_code_follows_imports_between_files(tmp_path):
    (tmp_path / "layers.py").write_text("import torch.nn as nn\nclass Layer(nn.Module): pass\n")
    (tmp_path / "net.py").write_text("from layers import Layer\nclass Net(Layer): pass\n")
    (tmp_path / "util.py").write_text("class Plain: pass\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("import torch\nclass T(torch.nn.Module): pass\n")
    files = model_code.python_files(tmp_path, tmp_path / "tests" / "pytpu")
    assert [p.name for p in files] == ["layers.py", "net.py", "util.py"]
    found = {p.name: c for p, c in model_code.find_model_code(files).items()}
    assert found == {"layers.py": {"Layer"}, "net.py": {"Net"}}


def test_sites_only_in_methods_of_model_classes():
    sites = operators.find_sites(MODEL)
    assert {s.cls for s in sites} == {"Block", "Net"}
    lines = MODEL.splitlines()
    for site in sites:
        assert "helper" not in lines[site.line - 1] and "self.size" not in lines[site.line - 1]
        assert not lines[site.line - 1].startswith("class")
    assert not operators.find_sites(MODEL, classes=set())


# ----------------------------------------------------------------------------- operators


def test_activation_swaps():
    assert _new_lines(MODEL, "activation") == {
        "return torch.sigmoid(super().forward(x))",
        "self.act = nn.ReLU(inplace=True)",
        "h = F.gelu(self.fc(x))",  # gelu has no inplace
    }


def test_constant_changes():
    assert _new_lines(MODEL, "constant") == {
        "def __init__(self, dim=5):",
        "self.act = nn.LeakyReLU(0.3, inplace=True)",
        "self.scale = 0.5",
        "return torch.matmul(att, x) - 2.25",
    }


def test_binop_flips():
    assert _new_lines(MODEL, "binop") == {
        "x = x - self.fc(h)",
        "x -= self.fc(x)",
        "att = (q / k) @ x",
        "return torch.matmul(att, x) + 1.5",
    }


def test_residual_drops():
    assert _new_lines(MODEL, "residual") == {"x = self.fc(h)", "x = self.fc(x)"}


def test_transposes():
    assert _new_lines(MODEL, "transpose") == {
        "att = (q * k).transpose(-2, -1) @ x",
        "return torch.matmul(att.transpose(-2, -1), x) - 1.5",
    }


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("return y + self.f(y)", {"return self.f(y)"}),
        ("return self.f(y) + y", {"return self.f(y)"}),
        ("z = (y + self.f(y)) * 2", {"z = (self.f(y)) * 2"}),
        ("z = y + 1", set()),  # no call: not a residual
        ("z = w + self.f(y)", set()),  # `w` is neither the target nor an input of f
        ("z = y + w", set()),
    ],
)
def test_residual_shapes(line, expected):
    source = (
        f"import torch\nclass M(torch.nn.Module):\n    def forward(self, y, w):\n        {line}\n"
    )
    assert _new_lines(source, "residual") == expected


def test_no_flip_of_string_or_list_arithmetic():
    source = (
        "import torch\nclass M(torch.nn.Module):\n    def forward(self):\n"
        "        return 'a' + self.name, [0] * self.n\n"
    )
    assert _new_lines(source, "binop") == set()


def test_one_change_per_mutant_and_all_parse():
    for operator in operators.OPERATORS:
        assert _apply_all(MODEL, operator), operator


# ------------------------------------------------------------------------------ sampling


def _candidates():
    return [
        mutants.Mutant(op, "m.py", i, 1, cls, "", i)
        for i, (op, cls) in enumerate(
            (op, cls) for op in operators.OPERATORS for cls in ("A", "B") for _ in range(3)
        )
    ]


def test_sample_is_deterministic_and_spread():
    first = mutants.sample(_candidates(), 10, seed=0)
    again = mutants.sample(_candidates(), 10, seed=0)
    assert [m.line for m in first] == [m.line for m in again]
    assert len(first) == 10
    assert {(m.operator, m.cls) for m in first} == {
        (op, cls) for op in operators.OPERATORS for cls in ("A", "B")
    }
    assert len(mutants.sample(_candidates(), 100, seed=0)) == 30
    assert mutants.sample(_candidates(), 0, seed=0) == []


def test_coveragerc_settings(tmp_path):
    text = line_coverage.coveragerc(tmp_path, tmp_path / "tests" / "pytpu", tmp_path / ".cov")
    assert "parallel = True" in text and f"source = {tmp_path}" in text
    assert f"{tmp_path}/tests/pytpu/*" in text and f"{tmp_path}/**/tests/*" in text
