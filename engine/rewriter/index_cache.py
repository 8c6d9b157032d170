"""The compiled rule index, kept in the user's cache between runs.

Loading the KB (YAML, patterns parsed, cases compiled) and indexing it takes a tenth of a second,
which every command pays before its first file; loading the index back takes a fiftieth. The
cache's name is a fingerprint of everything the index is made from: the KB's files, the
rewriter's own sources, the interpreter's and libcst's versions, the target and its version. A
changed KB or engine is a new name, so nothing stale is ever read. The vocabulary's entries
(which hold functions) are not stored: the index refers to them by registry and name.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytpu.engine.rewriter import kb, vocabulary
from pytpu.engine.rewriter.index import RuleIndex

_REWRITER = Path(__file__).parent


def cache_root() -> Path | None:
    """PyTPU's folder in the user's cache (`PYTPU_CACHE_DIR`, else XDG's); None without a home."""
    root = os.environ.get("PYTPU_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pytpu"
    )
    return None if root.startswith("~") else Path(root)


def load_or_build(kb_dir: Path, key: str, build: Callable[[], RuleIndex]) -> RuleIndex:
    """The index stored under the fingerprint of its sources, else `build()` (then stored).

    An index is stored only under the fingerprint of what it was built from: a process that
    loaded the KB before its files changed (a long test session, a server while PyTPU is
    upgraded) builds from what it loaded, and storing that under the new files' name would
    hand the old rules to every later run."""
    root = cache_root()
    if root is None:
        return build()
    kb_digest = kb_files_digest(kb_dir)
    path = root / "index" / f"{_fingerprint(kb_digest, key)}.pickle"
    vocabulary.load()
    try:
        with open(path, "rb") as stored:
            return _Unpickler(stored).load()
    except Exception:  # missing, from another pickle protocol, cut short: build it anew
        pass
    index = build()
    if index.kb.digest == kb_digest:
        _store(path, index)
    return index


def kb_files_digest(kb_dir: Path) -> str:
    """The fingerprint of kb/'s files as they are now (`KnowledgeBase.digest` when loaded)."""
    return kb.sources_digest(kb.read_sources(kb_dir))


def _libcst_version() -> str:
    try:  # (importlib.metadata would cost a hundredth of a second at every start)
        from libcst._version import __version__
    except ImportError:
        from importlib.metadata import version

        return version("libcst")
    return __version__


def _fingerprint(kb_digest: str, key: str) -> str:
    digest = hashlib.sha256()
    digest.update(f"{sys.version}\0{_libcst_version()}\0{key}\0{kb_digest}\0{_ENGINE}".encode())
    return digest.hexdigest()


def _engine_digest() -> str:
    """The rewriter's sources, read when it is imported: the code this process runs."""
    digest = hashlib.sha256()
    for source in sorted(_REWRITER.rglob("*.py")):
        digest.update(f"{source.relative_to(_REWRITER)}\0".encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()


_ENGINE = _engine_digest()


def _store(path: Path, index: RuleIndex) -> None:
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(index)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as temporary:
            temporary.write(buffer.getvalue())
        os.replace(temporary.name, path)  # (a reader never sees half a file)
    except (OSError, pickle.PicklingError, RecursionError):
        pass  # a read-only cache, or an index that cannot be stored: built each time


def _entries() -> dict[int, tuple[str, str]]:
    return {
        id(entry): (registry.package, name)
        for registry in vocabulary.REGISTRIES
        for name, entry in registry.entries.items()
    }


class _Pickler(pickle.Pickler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entries = _entries()

    def persistent_id(self, obj: Any) -> tuple[str, str] | None:
        return self.entries.get(id(obj))


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        package, name = pid
        registry = next(r for r in vocabulary.REGISTRIES if r.package == package)
        return registry.entries[name]
