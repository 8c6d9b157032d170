"""The knowledge base: YAML rule files under `kb/`, checked against `kb/schema.json` on load.

A malformed file fails with the file, the rule ID and what is wrong. Each rule is compiled once:
its patterns and templates are parsed, its wildcards checked, its version range parsed.

Beside the rule families, `kb/` holds data tables (`TABLES`): YAML files with a schema of their
own (`kb/<name>.schema.json`) whose entries name rules; a rule they name must exist.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import libcst as cst
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from pytpu.engine.rewriter import cst_nodes, patterns
from pytpu.engine.rewriter.kb_files import KBError, kb_dir
from pytpu.engine.rewriter.vocabulary import (
    ACTIONS,
    ANALYSES,
    CONDITIONS,
    CONTEXTS,
    MATCH_KINDS,
    Action,
    BuiltinAnalysis,
    Condition,
    Context,
    MatchKind,
)
from pytpu.engine.rewriter.vocabulary.matches.patterns import PATTERN

DEFAULT_TARGET = "torch_xla"
# Data tables in kb/ that are not rule families, by the file's stem; each is checked against
# kb/<stem>.schema.json, and every rule it names must exist.
TABLES = ("device_api", "targets", "torch_api")
# The keys of a device_api entry that name a rule, by what the rule does to the name.
DEVICE_API_RULE_KEYS = ("rewrite", "note", "flag")
# The version each target migrates to, by default (kb/targets.yaml holds what each one needs).
TARGET_VERSIONS = {"torch_xla": Version("2.9"), "torch_tpu": Version("0.2.0")}
# Minutes of review a finding costs a person, by the effort its diagnostic states.
EFFORT_MINUTES = {"none": 0, "low": 5, "medium": 30, "high": 120}


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    why: str
    fix: str
    effort: str
    source: str


@dataclass(frozen=True)
class Example:
    before: str
    after: str
    path: str = "example.py"


@dataclass(eq=False)
class RuleCase:
    """One way a rule matches, with what it does there (the vocabulary's entries it uses)."""

    rule: Rule
    kind: MatchKind
    applicability: str
    patterns: list[cst.CSTNode] = field(default_factory=list)
    where: dict[str, tuple[Condition, Any]] = field(default_factory=dict)
    template: cst.CSTNode | None = None
    actions: tuple[tuple[Action, Any], ...] = ()  # in the order they apply
    note: str | None = None
    context: Context | None = None
    template_wildcards: frozenset[str] = frozenset()  # the wildcards `replace` uses
    names: tuple[str, ...] = ()  # the names a match kind lists (namespace, import, env ...)
    values: tuple[str, ...] = ()  # env: the values that trigger it (empty: any)
    options: dict[str, Any] = field(default_factory=dict)  # the match mapping's other keys
    analysis: BuiltinAnalysis | None = None  # `match: {engine: name}`

    @property
    def changes_code(self) -> bool:
        return self.applicability != "display_only"

    def action(self, name: str) -> Any:
        """The value of the named action (None when the case has no such action)."""
        return next((value for action, value in self.actions if action.name == name), None)


@dataclass(eq=False)
class Rule:
    id: str
    family: str
    title: str
    applicability: str
    versions: dict[str, SpecifierSet]  # by target: the target's releases the rule is right for
    diagnostic: Diagnostic
    examples: list[Example]
    unchanged: list[str]
    imports: list[str]
    path: str
    raw: dict[str, Any]
    cases: list[RuleCase] = field(default_factory=list)
    # the migration settings that select the rule (`data_parallel: spmd`); none: every migration
    settings: dict[str, str] = field(default_factory=dict)
    # rules whose cases this rule's cases come before on a node both match (a setting's rule
    # over the default one: R-SPMD-04 turns the `mp.spawn` that R-DIST-01 would launch)
    overrides: tuple[str, ...] = ()

    def valid_for(self, target: str, version: Version) -> bool:
        return target in self.versions and version in self.versions[target]

    def chosen_by(self, settings: Mapping[str, str]) -> bool:
        """Whether the migration's settings select the rule: each setting the rule names must
        have the rule's value."""
        return all(settings.get(key) == value for key, value in self.settings.items())

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets the rule is written for; its examples are checked against the first."""
        return tuple(self.versions)


@dataclass
class KnowledgeBase:
    rules: list[Rule]
    modules: dict[str, str | None]
    device_positions: dict[str, list[str]]
    rank_guards: dict[str, list[str]]
    loops: dict[str, Any]
    files: list[str]
    # family -> its file's top-level entries other than the rules (title, description, settings)
    families: dict[str, dict[str, Any]] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)  # TABLES, by name
    # the fingerprint of the files as they were read (`sources_digest`): the cached index's name
    digest: str = ""

    def __post_init__(self) -> None:
        self.by_id = {r.id: r for r in self.rules}
        self.by_code = {r.diagnostic.code: r for r in self.rules}

    def find(self, key: str) -> Rule | None:
        key = key.strip()
        return self.by_id.get(key) or self.by_code.get(key.upper())

    def select(
        self,
        target: str = DEFAULT_TARGET,
        version: Version | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> list[Rule]:
        """The rules for the target's release and the migration's settings (a rule that names
        settings is chosen only by them)."""
        version = version or TARGET_VERSIONS[target]
        settings = settings or {}
        return [r for r in self.rules if r.valid_for(target, version) and r.chosen_by(settings)]


@cache
def schema(name: str = "schema.json") -> dict[str, Any]:
    """A schema of kb/: the family files' (`schema.json`) or a table's (`<table>.schema.json`)."""
    return json.loads((kb_dir() / name).read_text(encoding="utf-8"))


def schema_name(path: str | Path) -> str:
    """The schema a file of kb/ is checked against, by its name."""
    stem = Path(path).stem
    return f"{stem}.schema.json" if stem in TABLES else "schema.json"


def _rule_id_at(document: Any, path: list[Any]) -> str | None:
    if len(path) >= 2 and path[0] == "rules" and isinstance(path[1], int):
        rules = document.get("rules") or []
        if path[1] < len(rules) and isinstance(rules[path[1]], dict):
            return str(rules[path[1]].get("id", f"#{path[1] + 1}"))
    return None


def validate_document(document: Any, path: str) -> None:
    """Check one file of kb/ against its schema; raise KBError on the first (most precise) error."""
    import jsonschema  # (only for a file not checked before: see `_validated_marker`)

    validator = jsonschema.Draft202012Validator(schema(schema_name(path)))
    errors = sorted(validator.iter_errors(document), key=lambda e: (len(e.path), str(e.path)))
    if not errors:
        return
    error = jsonschema.exceptions.best_match(errors)
    location = "/".join(str(p) for p in list(error.absolute_path)[2:]) or "rule"
    rule_id = _rule_id_at(document, list(error.absolute_path))
    if rule_id is None:
        location = "/".join(str(p) for p in error.absolute_path) or "file"
    raise KBError(path, rule_id, f"{location}: {error.message}")


def load_file(path: Path, text: str | None = None) -> dict[str, Any]:
    """One file of kb/ (its `text` when it was read already), checked against its schema."""
    import yaml  # (only when the KB is built: a run that finds the index in the cache skips it)

    try:
        # (libyaml's loader where PyYAML has it: five times the pure-Python one's speed)
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        text = path.read_text(encoding="utf-8") if text is None else text
        document = yaml.load(text, Loader=loader)  # noqa: S506
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark else ""
        raise KBError(str(path), None, f"not valid YAML{line}: {exc}") from None
    if not isinstance(document, dict):
        raise KBError(
            str(path), None, "a family file is a mapping with 'family', 'title' and 'rules'"
        )
    seen = _validated_marker(text, schema_name(path))
    if seen is None or not seen.exists():
        validate_document(document, str(path))
        if path.stem not in TABLES:
            _check_examples(document, f"kb/{path.name}")
        _remember(seen)
    return document


def _validated_marker(text: str, name: str = "schema.json") -> Path | None:
    """A file in the user's cache whose name says this family file, as it is now, passed this
    schema: the check is then skipped (it is most of loading the KB). None without a cache."""
    root = os.environ.get("PYTPU_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pytpu"
    )
    if root.startswith("~"):
        return None  # no home folder
    digest = hashlib.sha256(f"{_schema_digest(name)}\0{text}".encode()).hexdigest()
    return Path(root) / "kb-checked" / digest


@cache
def _schema_digest(name: str = "schema.json") -> str:
    """The schema's fingerprint, computed once per process (not once per family file)."""
    return hashlib.sha256(json.dumps(schema(name), sort_keys=True).encode()).hexdigest()


def _remember(marker: Path | None) -> None:
    if marker is None:
        return
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:
        pass  # a read-only home: the check runs each time


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _compile_case(rule: Rule, spec: dict[str, Any]) -> RuleCase:
    applicability = spec.get("applicability", rule.applicability)
    case = RuleCase(
        rule=rule,
        kind=MATCH_KINDS[PATTERN],
        applicability=applicability,
        note=spec.get("note") or rule.raw.get("note"),
        context=CONTEXTS[spec["context"]] if "context" in spec else None,
    )
    _compile_match(rule, case, spec["match"])
    case.where = {
        name: _condition(rule, name, constraint)
        for name, constraint in spec.get("where", {}).items()
    }
    if "replace" in spec:
        try:
            case.template = patterns.parse_code(spec["replace"])
        except patterns.PatternError as exc:
            raise KBError(rule.path, rule.id, f"replace: {exc}") from None
        case.template_wildcards = frozenset(_wildcards(case.template))
    case.actions = _actions(spec.get("action"))
    if case.analysis is not None:
        return case  # the analysis decides what it does; a template or action is its data
    if applicability == "display_only":
        if case.template is not None or case.actions:
            raise KBError(rule.path, rule.id, "a display_only case has no 'replace' or 'action'")
    elif case.template is None and not case.actions:
        raise KBError(rule.path, rule.id, f"a {applicability} case needs 'replace' or 'action'")
    if applicability == "safe+note" and not case.note:
        raise KBError(rule.path, rule.id, "a safe+note case needs a 'note'")
    _check_wildcards(rule, case)
    return case


def _compile_match(rule: Rule, case: RuleCase, match: Any) -> None:
    if not isinstance(match, dict):
        try:
            case.patterns = [patterns.parse_code(p) for p in _as_list(match)]
        except patterns.PatternError as exc:
            raise KBError(rule.path, rule.id, f"match: {exc}") from None
        return
    # the kind is the key its schema requires; the others are its options (`value`)
    name = next(k for k in match if MATCH_KINDS.get(k) is not None)
    case.kind = MATCH_KINDS[name]
    case.names = tuple(_as_list(match[name]))
    case.values = case.kind.values_of(match)
    case.options = {key: value for key, value in match.items() if key != name}
    if name == "engine":
        case.analysis = ANALYSES[match[name]]


def _condition(rule: Rule, name: str, constraint: Any) -> tuple[Condition, Any]:
    if isinstance(constraint, dict):
        ((key, parameter),) = constraint.items()
    else:
        key, parameter = constraint, None
    condition = CONDITIONS.get(key)
    if condition is None:  # (the schema lists the names; a KB loaded without it may not)
        raise KBError(rule.path, rule.id, f"where: unknown condition {key!r}")
    return condition, parameter


def _actions(action: Any) -> tuple[tuple[Action, Any], ...]:
    if action is None:
        return ()
    items = (
        [(ACTIONS[action], None)]
        if isinstance(action, str)
        else [(ACTIONS[key], value) for key, value in action.items()]
    )
    return tuple(sorted(items, key=lambda item: item[0].order))


def _wildcards(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()
    for sub in cst_nodes.walk(node):
        if type(sub) is cst.Name:
            name = patterns.wildcard_name(sub)
            if name:
                found.add(name)
            elif sub.value.startswith(patterns.REST_PREFIX):
                found.add(sub.value[len(patterns.REST_PREFIX) :])
    return found


def _check_wildcards(rule: Rule, case: RuleCase) -> None:
    if case.kind.name != PATTERN:
        return
    bound = [_wildcards(p) for p in case.patterns]
    common = set.intersection(*bound) if bound else set()
    for name in case.where:
        if not any(name in b for b in bound):
            raise KBError(rule.path, rule.id, f"where: ${name} is not a wildcard of the pattern")
    if case.template is not None:
        missing = _wildcards(case.template) - common
        if missing:
            names = ", ".join(f"${m}" for m in sorted(missing))
            raise KBError(
                rule.path, rule.id, f"replace uses {names}, which not every pattern binds"
            )


def compile_rule(raw: dict[str, Any], family: str, path: str) -> Rule:
    versions = {}
    for target, text in raw["versions"].items():
        try:
            versions[target] = SpecifierSet(text)
        except InvalidSpecifier:
            raise KBError(
                path, raw["id"], f"versions: {target}: not a version range: {text!r}"
            ) from None
    rule = Rule(
        id=raw["id"],
        family=family,
        title=raw["title"],
        applicability=raw["applicability"],
        versions=versions,
        diagnostic=Diagnostic(**raw["diagnostic"]),
        examples=[Example(**e) for e in raw["examples"]],
        unchanged=list(raw.get("unchanged", [])),
        imports=list(raw.get("imports", [])),
        path=path,
        raw=raw,
        settings=dict(raw.get("settings", {})),
        overrides=tuple(raw.get("overrides", ())),
    )
    keys = ("match", "where", "replace", "action", "note", "context")
    shared = {k: raw[k] for k in keys if k in raw}  # with `cases`: what every case has
    specs = [{**shared, **case} for case in raw["cases"]] if raw.get("cases") else [shared]
    rule.cases = [_compile_case(rule, spec) for spec in specs]
    return rule


def _check_examples(document: dict[str, Any], path: str) -> None:
    """Each example's code parses (with the interpreter's parser: the examples run on it)."""
    for raw in document["rules"]:
        for example in raw["examples"]:
            for label in ("before", "after"):
                try:
                    ast.parse(example[label])
                except SyntaxError as exc:
                    message = f"examples: '{label}' does not parse: {exc.msg}"
                    raise KBError(path, raw["id"], message) from None


def device_api_entries(table: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(section, name, entry) for every name of the device_api table, in the file's order."""
    return [
        (section, name, entry)
        for section, body in table["sections"].items()
        for name, entry in body["names"].items()
    ]


def device_api_rule(entry: dict[str, Any]) -> tuple[str, str | None]:
    """What a device_api entry says PyTPU does with its name: ('rewrite' | 'note' | 'flag', the
    rule's ID) or ('nothing', None)."""
    for key in DEVICE_API_RULE_KEYS:
        if key in entry:
            return key, entry[key]
    return "nothing", None


def _check_tables(tables: dict[str, dict[str, Any]], rule_ids: dict[str, str]) -> None:
    """Every rule a table names exists (each table's schema checked the rest)."""
    table = tables.get("device_api")
    if table is None:
        return
    for section, name, entry in device_api_entries(table):
        _, rule_id = device_api_rule(entry)
        if rule_id is not None and rule_id not in rule_ids:
            where = f"sections/{section}/names/{name}"
            raise KBError("kb/device_api.yaml", None, f"{where}: no rule {rule_id} in the KB")


def load(directory: Path | None = None) -> KnowledgeBase:
    directory = directory or kb_dir()
    rules: list[Rule] = []
    modules: dict[str, str | None] = {}
    device_positions: dict[str, list[str]] = {"keywords": [], "first_argument_of": [], "names": []}
    rank_guards: dict[str, list[str]] = {}
    loops: dict[str, Any] = {}
    read = read_sources(directory)  # (once: the fingerprint is of the very bytes loaded)
    files = [p for p in read if p.suffix == ".yaml"]
    if not files:
        raise KBError(str(directory), None, "no *.yaml rule files found")
    families: dict[str, dict[str, Any]] = {}
    seen_ids: dict[str, str] = {}
    seen_codes: dict[str, str] = {}
    tables: dict[str, dict[str, Any]] = {}
    for path in files:
        document = load_file(path, read[path].decode("utf-8"))  # (schema.json: by `schema`)
        rel = f"kb/{path.name}"
        if path.stem in TABLES:
            tables[path.stem] = document
            continue
        families[document["family"]] = {k: v for k, v in document.items() if k != "rules"}
        if "modules" in document:
            modules.update(document["modules"])
        if "device_positions" in document:
            device_positions = document["device_positions"]
        if "rank_guards" in document:
            rank_guards = document["rank_guards"]
        if "loops" in document:
            loops = document["loops"]
        for raw in document["rules"]:
            rule = compile_rule(raw, document["family"], rel)
            if rule.id in seen_ids:
                raise KBError(rel, rule.id, f"duplicate rule ID (also in {seen_ids[rule.id]})")
            code = rule.diagnostic.code
            if code in seen_codes:
                raise KBError(
                    rel, rule.id, f"diagnostic code {code} is already used by {seen_codes[code]}"
                )
            seen_ids[rule.id], seen_codes[code] = rel, rule.id
            rules.append(rule)
    _check_tables(tables, seen_ids)
    for rule in rules:
        for other in rule.overrides:
            if other not in seen_ids or other == rule.id:
                raise KBError(rule.path, rule.id, f"overrides: {other} is no other rule of the KB")
    return KnowledgeBase(
        rules=rules,
        modules=modules,
        device_positions=device_positions,
        rank_guards=rank_guards,
        loops=loops,
        files=[f"kb/{p.name}" for p in files if p.stem not in TABLES],
        families=families,
        tables=tables,
        digest=sources_digest(read),
    )


def sources_digest(read: Mapping[Path, bytes]) -> str:
    """The fingerprint of kb/'s files (`*.yaml` and `schema.json`, by name and content)."""
    digest = hashlib.sha256()
    for path in sorted(read):
        digest.update(f"kb/{path.name}\0".encode())
        digest.update(read[path])
    return digest.hexdigest()


def read_sources(directory: Path) -> dict[Path, bytes]:
    """kb/'s files as `load` reads them, for `sources_digest`."""
    paths = [*sorted(directory.glob("*.yaml")), directory / "schema.json"]
    return {path: path.read_bytes() for path in paths if path.suffix == ".yaml" or path.exists()}


@cache
def default() -> KnowledgeBase:
    return load()
