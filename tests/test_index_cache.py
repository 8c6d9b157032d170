"""The compiled rule index kept in the user's cache: loaded back, it migrates as the index it was
built from; another KB or a damaged file is never read as the cached one."""

from __future__ import annotations

import shutil
from pathlib import Path

from pytpu.engine.rewriter import checkout, index_cache, kb
from pytpu.engine.rewriter.index import RuleIndex

SOURCE = "import torch\nx = torch.zeros(3).cuda()\ntorch.cuda.synchronize()\n"


def _migrated(index: RuleIndex) -> tuple[str, list[tuple[str, int, str]]]:
    text, findings = checkout.migrate_text(SOURCE, index)
    return text, [(f.rule.id, f.line, f.kind) for f in findings]


def _build(directory: Path):
    calls = []

    def build() -> RuleIndex:
        calls.append(1)
        knowledge = kb.load(directory)
        return RuleIndex(knowledge, knowledge.select())

    return build, calls


def test_a_stored_index_is_read_back_and_migrates_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTPU_CACHE_DIR", str(tmp_path / "cache"))
    build, calls = _build(kb.kb_dir())
    first = index_cache.load_or_build(kb.kb_dir(), "t", build)
    second = index_cache.load_or_build(kb.kb_dir(), "t", build)
    assert len(calls) == 1 and second is not first
    assert _migrated(second) == _migrated(first)
    assert _migrated(first)[1]  # (sites were found)
    assert [r.id for r in second.rules] == [r.id for r in first.rules]


def test_another_kb_or_a_damaged_file_is_built_anew(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTPU_CACHE_DIR", str(tmp_path / "cache"))
    directory = tmp_path / "kb"
    shutil.copytree(kb.kb_dir(), directory)
    build, calls = _build(directory)
    index_cache.load_or_build(directory, "t", build)
    path = directory / "device.yaml"
    path.write_text(path.read_text() + "\n# a comment changes the fingerprint\n")
    index_cache.load_or_build(directory, "t", build)
    assert len(calls) == 2
    for stored in (tmp_path / "cache" / "index").glob("*.pickle"):
        stored.write_bytes(b"not a pickle")
    assert index_cache.load_or_build(directory, "t", build).rules
    assert len(calls) == 3


def test_an_index_built_from_a_kb_loaded_before_its_files_changed_is_not_stored(
    tmp_path, monkeypatch
):
    """A process that loaded the KB, then saw its files change (a long session, an upgrade while
    a server runs), builds from what it loaded: stored under the new files' name, the old rules
    would reach every later run (a CI run once read a rule removed two commits before)."""
    monkeypatch.setenv("PYTPU_CACHE_DIR", str(tmp_path / "cache"))
    directory = tmp_path / "kb"
    shutil.copytree(kb.kb_dir(), directory)
    loaded_before = kb.load(directory)
    path = directory / "device.yaml"
    path.write_text(path.read_text() + "\n# a comment changes the fingerprint\n")

    def stale_build() -> RuleIndex:
        return RuleIndex(loaded_before, loaded_before.select())

    assert index_cache.load_or_build(directory, "t", stale_build).rules
    assert not list((tmp_path / "cache" / "index").glob("*.pickle"))
    build, calls = _build(directory)
    fresh = index_cache.load_or_build(directory, "t", build)
    assert fresh.kb.digest != loaded_before.digest
    assert list((tmp_path / "cache" / "index").glob("*.pickle"))
    assert index_cache.load_or_build(directory, "t", build).kb.digest == fresh.kb.digest
    assert len(calls) == 1
