"""What a checkout's other files say about a file: a corpus laid out in columns by one file's
function and sliced in another's, both called from a script (salesforce's awd-lstm-lm:
utils.py's `batchify` and `get_batch`, called from main.py), is found across the files, as
within one; what is not a corpus is left alone."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytpu.engine.rewriter import checkout

UTILS = """\
import torch


def batchify(data, bsz, args):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    data = data.view(bsz, -1).t().contiguous()
    if args.cuda:
        data = data.cuda()
    return data


def get_batch(source, i, args, seq_len=None):
    seq_len = min(seq_len if seq_len else args.bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def window(tokens, i):
    return tokens[i:i + 35]
"""

# the script imports the helpers by name, by module, or from its package (a relative import)
IMPORTS = {
    "by_name": ("from utils import batchify, get_batch, window", "", ""),
    "by_module": ("import utils as u", "u.", "u."),
    "relative": ("from . import utils", "utils.", "utils."),
}

MAIN = """\
import torch
{imports}

train_data = {prefix}batchify(corpus.train, 20, args)


def evaluate(data_source):
    for i in range(0, data_source.size(0) - 1, 35):
        data, targets = {prefix}get_batch(data_source, i, args)


for i in range(0, train_data.size(0) - 1, 35):
    data, targets = {prefix}get_batch(train_data, i, args, seq_len=35)
    words = {window}window("a b c".split(), i)
evaluate(train_data)
"""


def _checkout(tmp_path: Path, how: str) -> Path:
    imports, prefix, window = IMPORTS[how]
    package = tmp_path / "lm"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "utils.py").write_text(UTILS)
    main = MAIN.format(imports=imports, prefix=prefix, window=window)
    (package / "main.py").write_text(textwrap.dedent(main))
    return tmp_path


@pytest.mark.parametrize("how", sorted(IMPORTS))
def test_a_corpus_batched_and_sliced_in_another_file_is_sliced_by_index(tmp_path, how):
    root = _checkout(tmp_path, how)
    run = checkout.run(root)
    utils = next(f for f in run.files if f.path == "lm/utils.py")
    assert utils.after is not None, [f.path for f in run.changed]
    assert (
        "data = source.index_select(0, torch.arange(len(source))[i:i + seq_len].to(source.device))"
        in utils.after
    )
    assert "return tokens[i:i + 35]" in utils.after  # (a list of words is no corpus)
    assert [f.rule.id for f in utils.findings].count("R-SLICE-01") == 2


@pytest.mark.parametrize("how", sorted(IMPORTS))
def test_under_spmd_a_corpus_batched_by_another_file_is_sharded(tmp_path, how):
    root = _checkout(tmp_path, how)
    run = checkout.run(root, settings={"data_parallel": "spmd"})
    main = next(f for f in run.files if f.path == "lm/main.py")
    assert main.after is not None
    assert "xs.mark_sharding(train_data, xs.get_1d_mesh(), (None, 0))" in main.after


def test_a_function_of_the_same_name_elsewhere_is_not_followed(tmp_path):
    """Only the file the script imports from is the callee: another file's `get_batch` is
    not sliced by index, and a script that imports nothing gives nothing."""
    root = _checkout(tmp_path, "by_name")
    other = tmp_path / "other"
    other.mkdir()
    (other / "helpers.py").write_text(UTILS.replace("def batchify", "def shape"))
    run = checkout.run(root)
    helpers = next(f for f in run.files if f.path == "other/helpers.py")
    assert "index_select" not in (helpers.after or "")


def test_a_file_whose_facts_fail_costs_only_those_facts(tmp_path, monkeypatch):
    """An engine bug while gathering (here: following the corpus raises) gives that file no
    facts; the run goes on and migrates every file as it would alone."""
    from pytpu.engine.rewriter import checkout_facts

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(checkout_facts, "follow", broken)
    run = checkout.run(_checkout(tmp_path, "by_name"))
    assert not run.errors
    utils = next(f for f in run.files if f.path == "lm/utils.py")
    assert "data = data.to(torch_xla.device())" in (utils.after or "")
    assert "index_select" not in (utils.after or "")
