"""Where the installed knowledge base is (`kb/`, data only), its error, and the tables the
vocabulary reads by themselves (`kb/torch_api.yaml`): below the KB's loader (`kb.py`) and the
vocabulary, so that both can read kb/ without importing each other."""

from __future__ import annotations

from functools import cache
from pathlib import Path


class KBError(ValueError):
    """A knowledge-base file that cannot be used. The message names the file and the rule."""

    def __init__(self, path: str, rule_id: str | None, problem: str):
        where = f"{path}: rule {rule_id}" if rule_id else path
        super().__init__(f"{where}: {problem}")
        self.path, self.rule_id, self.problem = path, rule_id, problem


def kb_dir() -> Path:
    """The installed `kb/` folder (a data-only namespace package: no code, so no resources API)."""
    import pytpu.kb

    for entry in pytpu.kb.__path__:
        if (Path(entry) / "schema.json").is_file():
            return Path(entry)
    raise KBError("kb/", None, "the knowledge base is not installed (no kb/schema.json)")


@cache
def torch_api() -> dict[str, frozenset[str]]:
    """kb/torch_api.yaml's sets, by name (`kb.load` checks the file against its schema)."""
    import yaml

    path = kb_dir() / "torch_api.yaml"
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # (libyaml's where PyYAML has it)
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506
        return {name: frozenset(entry["names"]) for name, entry in document["sets"].items()}
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise KBError(str(path), None, f"cannot be read ({exc}); reinstall PyTPU") from None
