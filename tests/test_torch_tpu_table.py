"""The torch_tpu target writes only what TorchTPU has: every `torch.tpu` name the KB's rules write,
and every name the CPU stand-in offers, is in the public table of the torch-tpu wheel that
kb/targets.yaml names (`torch_tpu/_internal/public_api.py`, read with `ast`, never imported: the
wheel needs torch 2.11+ and a TPU)."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile

import libcst as cst
import pytest

from pytpu.engine.rewriter import cst_nodes, kb

KB = kb.default()
TABLE_FILE = "torch_tpu/_internal/public_api.py"


def public_names(source: str) -> set[str]:
    """`torch.tpu.synchronize`, ...: the modules of `_PUBLIC_MODULES` with their exports."""
    for node in ast.walk(ast.parse(source)):
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if isinstance(target, ast.Name) and target.id == "_PUBLIC_MODULES":
            modules = node.value
            break
    else:
        raise AssertionError(f"{TABLE_FILE} has no _PUBLIC_MODULES table")
    names = set()
    for key, spec in zip(modules.keys, modules.values, strict=True):
        module = ast.literal_eval(key)
        names.add(module)
        exports = next(k.value for k in spec.keywords if k.arg == "exports")
        names |= {f"{module}.{ast.literal_eval(name)}" for name in exports.keys}
    return names


@pytest.fixture(scope="module")
def wheel_table(tmp_path_factory) -> set[str]:
    backend = KB.tables["targets"]["targets"]["torch_tpu"]["backend"]
    folder = tmp_path_factory.mktemp("torch_tpu_wheel")
    requirement = f"{backend['distribution']}=={backend['version']}"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder),
         requirement],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"pip download {requirement}: {done.stderr[-2000:]}"
    (wheel,) = folder.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return public_names(archive.read(TABLE_FILE).decode())


def written_tpu_names() -> dict[str, set[str]]:
    """The `torch.tpu...` names each torch_tpu rule's replacements write, by rule ID."""
    found: dict[str, set[str]] = {}
    for rule in KB.select("torch_tpu"):
        for case in rule.cases:
            if case.template is None:
                continue
            for node in cst_nodes.walk(case.template):
                name = cst_nodes.dotted_name(node) if isinstance(node, cst.Attribute) else None
                if name and name.startswith("torch.tpu"):
                    found.setdefault(rule.id, set()).add(name)
    return found


def test_the_reader_finds_exports_and_submodules() -> None:
    source = (
        "_PUBLIC_MODULES: Mapping[str, ModuleSpec] = {\n"
        "    'torch.tpu': ModuleSpec(exports={'synchronize': 'x:y', 'Event': _attr('Event')}),\n"
        "    'torch.tpu.ops': ModuleSpec(exports={'send': 'a:b'}, doc='ops'),\n"
        "}\n"
    )
    assert public_names(source) == {
        "torch.tpu", "torch.tpu.synchronize", "torch.tpu.Event", "torch.tpu.ops",
        "torch.tpu.ops.send",
    }  # fmt: skip
    with pytest.raises(AssertionError, match="_PUBLIC_MODULES"):
        public_names("OTHER = {}\n")


def test_rules_write_torch_tpu_names() -> None:
    written = set().union(*written_tpu_names().values())
    assert "torch.tpu.synchronize" in written and "torch.tpu.is_available" in written


def test_every_torch_tpu_name_the_rules_write_is_in_the_wheel(wheel_table) -> None:
    missing = {rule: sorted(names - wheel_table) for rule, names in written_tpu_names().items()}
    assert not any(missing.values()), f"names TorchTPU does not have: {missing}"


def test_the_stand_in_offers_only_the_wheels_names(wheel_table) -> None:
    from pytpu.runtime import tpu_standin

    submodules = {n for n in wheel_table if any(m.startswith(f"{n}.") for m in wheel_table)}
    exports = {name for name in wheel_table - submodules if name.count(".") == 2}
    table = {name.removeprefix("torch.tpu.") for name in exports}
    assert set(tpu_standin.PUBLIC_NAMES) == table
    assert set(tpu_standin.IMPLEMENTED) <= table


def test_each_target_version_is_in_the_target_table() -> None:
    targets = KB.tables["targets"]["targets"]
    assert set(kb.TARGET_VERSIONS) == set(targets)
    for name, version in kb.TARGET_VERSIONS.items():
        assert str(version) in (targets[name]["version"], targets[name]["backend"]["version"])


def test_a_torch_tpu_rule_is_not_selected_for_torch_xla() -> None:
    xla = {rule.id for rule in KB.select("torch_xla")}
    tpu = {rule.id for rule in KB.select("torch_tpu")}
    assert "R-TPU-04" in tpu and "R-TPU-04" not in xla
    assert "R-DEV-01" in xla and "R-DEV-01" not in tpu
