"""The knowledge base: every file passes the schema, and every rule's examples are its tests."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from pytpu.engine.rewriter import kb
from pytpu.engine.rewriter.checkout import migrate_text, rule_index

KB = kb.default()
# A rule's examples are checked with the rules of its first target, chosen by its settings.
INDEXES = {target: rule_index(target) for target in kb.TARGET_VERSIONS}


def _index(rule):
    return rule_index(rule.targets[0], None, tuple(sorted(rule.settings.items())))


EXAMPLES = [(rule, i, ex) for rule in KB.rules for i, ex in enumerate(rule.examples)]
UNCHANGED = [(rule, i, text) for rule in KB.rules for i, text in enumerate(rule.unchanged)]


@pytest.mark.parametrize(
    ("rule", "index", "example"), EXAMPLES, ids=lambda v: getattr(v, "id", str(v))
)
def test_example_rewrites_as_documented(rule, index, example):
    after, findings = migrate_text(example.before, _index(rule), example.path)
    assert after == example.after, f"{rule.id} example {index + 1} ({rule.path})"
    if rule.cases[0].analysis is None:  # built-in analyses have no site of their own
        assert rule.id in {f.rule.id for f in findings}, f"{rule.id}'s example does not exercise it"


@pytest.mark.parametrize(
    ("rule", "index", "example"), EXAMPLES, ids=lambda v: getattr(v, "id", str(v))
)
def test_example_output_is_stable(rule, index, example):
    """Running the engine over its own output changes nothing (idempotence)."""
    again, _ = migrate_text(example.after, _index(rule), example.path)
    assert again == example.after


@pytest.mark.parametrize(
    ("rule", "index", "text"), UNCHANGED, ids=lambda v: getattr(v, "id", str(v))
)
def test_unchanged_examples_stay_unchanged(rule, index, text):
    after, findings = migrate_text(text, _index(rule))
    assert after == text
    assert rule.id not in {f.rule.id for f in findings if f.case.changes_code}


@pytest.mark.parametrize("path", sorted(kb.kb_dir().glob("*.yaml")), ids=lambda p: p.name)
def test_family_file_matches_the_schema(path):
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    kb.validate_document(document, str(path))  # raises KBError naming file, rule and field


def test_every_rule_has_examples_and_a_unique_code():
    assert all(rule.examples for rule in KB.rules)
    codes = [rule.diagnostic.code for rule in KB.rules]
    assert len(codes) == len(set(codes))


def test_every_family_the_issue_names_has_a_file():
    families = {rule.family for rule in KB.rules}
    assert {"imports", "device", "cuda", "rng", "checkpoint", "compile", "legacy"} <= families


def test_catalogue_rules_are_present():
    """The device, torch.cuda.*, RNG, checkpoint, compile and legacy-upgrade IDs of the catalogue
    (kb_catalogue.md), minus the ones that need the execution analysis of the next issue."""
    wanted = (
        [f"R-DEV-{n:02d}" for n in (1, 2, 3, 4, 5, 6, 7, 8, 11, 12)]
        + [f"R-CUDA-{n:02d}" for n in range(1, 20)]
        + [f"R-RNG-{n:02d}" for n in range(1, 5)]
        + [f"R-CKPT-{n:02d}" for n in range(1, 5)]
        + ["R-COMP-01", "R-COMP-03", "R-COMP-04"]
        + [f"U-{n:02d}" for n in range(1, 27)]
        + [f"R-IMP-{n:02d}" for n in range(1, 6)]
    )
    missing = [rule_id for rule_id in wanted if KB.find(rule_id) is None]
    assert not missing


def test_kb_show_lookup_by_id_and_code():
    assert KB.find("R-DEV-04") is KB.find("PYTPU104")
    assert KB.find("pytpu104") is KB.find("R-DEV-04")
    assert KB.find("R-NOPE-01") is None


# --- malformed files fail with the file, the rule ID and what is wrong --------------------------


def _copy_kb(tmp_path: Path) -> Path:
    target = tmp_path / "kb"
    shutil.copytree(kb.kb_dir(), target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _edit_rule(directory: Path, family_file: str, rule_id: str, **changes) -> None:
    path = directory / family_file
    document = yaml.safe_load(path.read_text())
    rule = next(r for r in document["rules"] if r["id"] == rule_id)
    for key, value in changes.items():
        if value is None:
            rule.pop(key)
        else:
            rule[key] = value
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def test_schema_error_names_file_rule_and_field(tmp_path):
    directory = _copy_kb(tmp_path)
    _edit_rule(directory, "device.yaml", "R-DEV-04", applicability="sometimes")
    with pytest.raises(kb.KBError) as info:
        kb.load(directory)
    message = str(info.value)
    assert "device.yaml" in message and "R-DEV-04" in message and "applicability" in message


def test_missing_examples_is_an_error(tmp_path):
    directory = _copy_kb(tmp_path)
    _edit_rule(directory, "cuda.yaml", "R-CUDA-08", examples=None)
    with pytest.raises(kb.KBError, match=r"cuda\.yaml: rule R-CUDA-08: .*examples"):
        kb.load(directory)


def test_template_using_an_unbound_wildcard_is_an_error(tmp_path):
    directory = _copy_kb(tmp_path)
    _edit_rule(directory, "rng.yaml", "R-RNG-01", replace="torch_xla.manual_seed($other)")
    with pytest.raises(kb.KBError, match=r"R-RNG-01: replace uses \$other"):
        kb.load(directory)


def test_pattern_that_does_not_parse_is_an_error(tmp_path):
    directory = _copy_kb(tmp_path)
    _edit_rule(directory, "cuda.yaml", "R-CUDA-06", match="torch.cuda.is_bf16_supported(")
    with pytest.raises(kb.KBError, match=r"R-CUDA-06: match: does not parse"):
        kb.load(directory)


def test_example_that_does_not_parse_is_an_error(tmp_path):
    directory = _copy_kb(tmp_path)
    examples = [{"before": "x = (", "after": "x = 1\n"}]
    _edit_rule(directory, "cuda.yaml", "R-CUDA-06", examples=examples)
    with pytest.raises(kb.KBError, match=r"cuda\.yaml: rule R-CUDA-06: examples: 'before' does"):
        kb.load(directory)


def test_duplicate_code_is_an_error(tmp_path):
    directory = _copy_kb(tmp_path)
    rule = yaml.safe_load((directory / "device.yaml").read_text())["rules"][0]
    _edit_rule(directory, "cuda.yaml", "R-CUDA-08", diagnostic={**rule["diagnostic"]})
    with pytest.raises(kb.KBError, match=r"diagnostic code PYTPU101 is already used by"):
        kb.load(directory)


def test_an_override_of_no_rule_is_an_error(tmp_path):
    directory = _copy_kb(tmp_path)
    _edit_rule(directory, "parallel.yaml", "R-SPMD-04", overrides=["R-DIST-99"])
    with pytest.raises(kb.KBError, match=r"R-SPMD-04: overrides: R-DIST-99 is no other rule"):
        kb.load(directory)


def test_a_rule_that_overrides_another_comes_first_on_code_both_match():
    # R-SPMD-04 (chosen by `data_parallel: spmd`) and R-DIST-01 both match `mp.spawn(...)`;
    # R-DIST-01's pattern is as specific, and comes earlier in the KB's order
    source = textwrap.dedent(
        """\
        import torch.multiprocessing as mp
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel


        def main(rank, size):
            dist.init_process_group("nccl", rank=rank, world_size=size)
            DistributedDataParallel(Net())


        mp.spawn(main, args=(2,), nprocs=2)
        """
    )
    spmd = rule_index("torch_xla", None, (("data_parallel", "spmd"),))
    after, findings = migrate_text(source, spmd)
    assert "main(0, 2)" in after and "torch_xla.launch" not in after
    codes = {f.rule.diagnostic.code for f in findings}
    assert {"PYTPU894", "PYTPU895", "PYTPU896"} <= codes
    assert not codes & {"PYTPU851", "PYTPU854", "PYTPU857", "PYTPU868"}  # (nor their flags)
    after, _ = migrate_text(source, rule_index("torch_xla", None, ()))
    assert "torch_xla.launch(main" in after  # without the setting, one process per device
    # processes in different roles over RPC (pytorch/examples' ddp_rpc: a master, a parameter
    # server, trainers) are no program run N times: they stay processes
    roles = source.replace(
        "def main(rank, size):\n",
        "def main(rank, size):\n    if rank == 2:\n        dist.rpc.init_rpc('master')\n",
    )
    after, _ = migrate_text(roles, spmd)
    assert "torch_xla.launch(main" in after and "main(0, 2)" not in after


def test_invalid_yaml_names_the_line(tmp_path):
    directory = _copy_kb(tmp_path)
    (directory / "rng.yaml").write_text("family: rng\nrules: [\n  - id: x\n")
    with pytest.raises(kb.KBError, match=r"rng\.yaml: not valid YAML \(line \d+\)"):
        kb.load(directory)


def test_version_range_selects_rules():
    """Rules whose replacement needs a newer torch_xla are not applied for an older target."""
    from packaging.version import Version

    old = {rule.id for rule in KB.select("torch_xla", Version("2.4"))}
    assert "R-CUDA-07" not in old  # torch_xla.sync(wait=) is 2.5+
    assert "R-DEV-04" in old
    assert "R-CUDA-07" in {rule.id for rule in KB.select("torch_xla", Version("2.9"))}


def test_target_version_changes_the_output():
    source = textwrap.dedent(
        """\
        import torch

        torch.cuda.synchronize()
        """
    )
    new, _ = migrate_text(source, rule_index("torch_xla", "2.9"))
    old, _ = migrate_text(source, rule_index("torch_xla", "2.4"))
    assert "torch_xla.sync(wait=True)" in new
    assert "torch_xla.sync" not in old


def test_every_case_gives_the_pre_filter_a_word():
    """A case that asks for no word makes every file parsed (correct, but slow): each rule
    names something a file must contain."""
    assert frozenset() not in INDEXES["torch_xla"].alternatives
    text = "import torch\nx = 1\n"  # no CUDA word: skipped without parsing
    assert not INDEXES["torch_xla"].may_match(text)


def test_a_rule_with_settings_is_chosen_only_by_them():
    spmd = {rule.id for rule in KB.rules if rule.settings.get("data_parallel") == "spmd"}
    assert {"R-SPMD-01", "R-SPMD-02"} <= spmd
    assert not spmd & {rule.id for rule in KB.select("torch_xla")}
    assert not spmd & {
        rule.id for rule in KB.select("torch_xla", settings={"data_parallel": "none"})
    }
    chosen = {rule.id for rule in KB.select("torch_xla", settings={"data_parallel": "spmd"})}
    assert {"R-SPMD-01", "R-SPMD-02"} <= chosen
    assert {rule.id for rule in KB.select("torch_xla")} <= chosen
    # a rule that names two settings needs both (per-device batches only under SPMD)
    assert "R-SPMD-03" not in chosen
    both = {"data_parallel": "spmd", "batch": "per_device"}
    assert "R-SPMD-03" in {rule.id for rule in KB.select("torch_xla", settings=both)}
    assert "R-SPMD-03" not in {
        rule.id for rule in KB.select("torch_xla", settings={"batch": "per_device"})
    }
