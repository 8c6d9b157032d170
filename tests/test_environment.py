"""The program's environment (pytpu.engine.environment): what a repository declares, read with
file and line; the target's torch family as constraints, a changed pin named with its reason; the
environment built over PyTPU's, cached, and used by the program's runs; a requirement that cannot
be installed named before any test; and `pytpu migrate` on a program that needs a package PyTPU's
environment does not have.

pip runs offline here: PIP_NO_INDEX, and PIP_FIND_LINKS naming a folder of wheels the tests write.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import git
import pytest

from pytpu.engine import config, environment, processes

FIXTURE = Path(__file__).parent / "fixtures" / "testgen" / "tiny"
PERSON = git.Actor("A Person", "person@example.invalid")


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel of one module `name` whose VALUE is its version."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name}/__init__.py": f"VALUE = {version!r}\n",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def _failing_sdist(folder: Path, name: str, version: str) -> None:
    """A source distribution whose build fails before it has any metadata, as an old release
    with no wheel for this Python does (its in-tree backend raises)."""
    root = f"{name}-{version}"
    files = {
        f"{root}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{root}/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
        'backend-path = ["."]\n',
        f"{root}/backend.py": "def get_requires_for_build_wheel(config_settings=None):\n"
        "    raise RuntimeError('needs a compiler of 2019')\n",
    }
    with tarfile.open(folder / f"{root}.tar.gz", "w:gz") as archive:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


@pytest.fixture
def offline_index(tmp_path, monkeypatch):
    """pip installs from a folder of wheels only."""
    wheels = tmp_path / "wheels"
    _wheel(wheels, "pytpu_tinydep", "1.2")
    _wheel(wheels, "pytpu_needsdep", "0.3", requires=("pytpu_absent_dist>=1",))
    _wheel(wheels, "pytpu_other", "0.5.2")
    _failing_sdist(wheels, "pytpu_oldsrc", "0.1")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PYTPU_CACHE_DIR", str(tmp_path / "cache"))
    return wheels


def _declared(root: Path, **settings) -> environment.Declared:
    return environment.declared(root, config.Config(**settings))


# --- what the repository declares ----------------------------------------------------------


def test_requirement_lines_are_read_with_includes_markers_and_continuations(tmp_path):
    (tmp_path / "reqs").mkdir()
    (tmp_path / "requirements.txt").write_text(
        "# what the training needs\n"
        "einops>=0.6  # tensors\n"
        "tqdm \\\n"
        "  >=4\n"
        "-r reqs/extra.txt\n"
        'legacy-only; python_version < "3.0"\n'
    )
    (tmp_path / "reqs" / "extra.txt").write_text("pyyaml\neinops>=0.6\n")
    found = _declared(tmp_path)
    assert found.files == ("requirements.txt", "reqs/extra.txt")
    assert found.requirements == ("einops>=0.6", "tqdm>=4", "pyyaml")
    assert found.origins == {
        "einops": "requirements.txt:2",
        "tqdm": "requirements.txt:3",
        "pyyaml": "reqs/extra.txt:1",
    }
    assert found.problems == () and found.changes == ()


def test_a_line_that_cannot_be_used_is_named_with_file_and_line_and_the_rest_is_kept(tmp_path):
    (tmp_path / "requirements.txt").write_text(
        "einops\nnot a requirement!!\n-e .\n--index-url https://example.invalid/simple\n"
        "-r missing.txt\ntqdm\n"
    )
    found = _declared(tmp_path)
    assert found.requirements == ("einops", "tqdm")
    where = [problem.split(": ")[0] for problem in found.problems]
    assert where == [
        "requirements.txt:2",
        "requirements.txt:3",
        "requirements.txt:4",
        "requirements.txt:5",
    ]
    assert "fix or remove the line" in found.problems[0]
    assert "installs the repository itself" in found.problems[1]
    assert "`setup`" in found.problems[2]
    assert "missing.txt" in found.problems[3]


def test_the_torch_family_follows_the_target_and_a_changed_pin_says_why(tmp_path):
    (tmp_path / "requirements.txt").write_text(
        "torch<2.6\ntorch-xla>=2.5\ntorchvision==0.20.1\ntorchaudio\ntorchtext==0.18.0\n"
    )
    found = _declared(tmp_path)
    chosen = environment.target()
    companions = chosen.companions
    # torch and the backend come from the base layer; the companions at torch's releases
    assert found.requirements == (
        f"torchvision=={companions['torchvision']}",
        f"torchaudio=={companions['torchaudio']}",
    )
    changed = {change.declared: change for change in found.changes}
    assert set(changed) == {"torch<2.6", "torchvision==0.20.1", "torchtext==0.18.0"}
    assert changed["torch<2.6"].used == f"torch=={chosen.torch}"
    assert changed["torch<2.6"].where == "requirements.txt:1"
    assert chosen.backend in changed["torch<2.6"].why
    assert changed["torchvision==0.20.1"].used == f"torchvision=={companions['torchvision']}"
    assert changed["torchtext==0.18.0"].used == "left out"
    assert "no release built for torch" in changed["torchtext==0.18.0"].why


def test_a_companion_the_code_imports_and_nothing_declares_is_added_with_its_line(tmp_path):
    # milesial/Pytorch-UNet declares Pillow, tqdm and wandb; torchvision came with its Docker
    # image (a PyTorch container), so `import torchvision.transforms` failed in the environment
    (tmp_path / "requirements.txt").write_text("tqdm\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "data.py").write_text("import os\nimport torchvision.transforms as T\n")
    (tmp_path / "train.py").write_text("from torchvision import models\nimport torchaudio\n")
    (tmp_path / "broken.py").write_text("import torchvision(\n")  # the rewriter names it
    chosen = environment.target()
    found = environment.imported_companions(tmp_path, _declared(tmp_path), chosen)
    release = chosen.companions["torchvision"]
    assert found.requirements == (
        "tqdm",
        f"torchvision=={release}",
        f"torchaudio=={chosen.companions['torchaudio']}",
    )
    added = {change.used: change for change in found.changes}
    assert added[f"torchvision=={release}"].declared == ""
    assert added[f"torchvision=={release}"].where == "train.py:1"  # the first file that does
    assert "declared nowhere" in added[f"torchvision=={release}"].why
    assert found.origins["torchaudio"] == "train.py:2"
    # declared, at whatever pin: the declaration stands (and its pin follows the target)
    (tmp_path / "requirements.txt").write_text("tqdm\ntorchvision\ntorchaudio\n")
    declared = _declared(tmp_path)
    assert environment.imported_companions(tmp_path, declared, chosen) == declared


def test_pyproject_dependencies_and_a_programs_own_requirements_are_read(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\nversion = "0"\ndependencies = ["einops", "torch>=2.0"]\n'
    )
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "train.py").write_text("print(1)\n")
    (tmp_path / "examples" / "requirements.txt").write_text("tqdm\n")
    run = (config.Program("python examples/train.py --steps 2"),)
    found = _declared(tmp_path, run=run)
    assert found.files == ("examples/requirements.txt", "pyproject.toml")
    assert found.requirements == ("tqdm", "einops")
    assert found.changes == ()  # torch>=2.0 admits the target's torch
    assert found.origins["einops"] == "pyproject.toml [project] dependencies"


CONDA = """\
name: research
channels: [conda-forge, defaults]
dependencies:
  - python=3.11
  - pip
  - cudatoolkit=11.8
  - pytorch=2.1.0
  - conda-forge::pytpu_other=0.5
  - pytpu-conda-only=1.0
  - pip:
      - pytpu_tinydep==1.2
"""


def test_a_conda_environment_file_is_read_where_nothing_else_declares(tmp_path):
    (tmp_path / "environment.yml").write_text(CONDA)
    found = _declared(tmp_path)
    assert found.files == ("environment.yml",)
    assert found.requirements == ("pytpu_tinydep==1.2",)  # (its pip section)
    assert found.optional == ("pytpu_other==0.5.*", "pytpu-conda-only==1.0.*")
    assert [(c.declared, c.where) for c in found.changes] == [
        ("torch==2.1.0.*", "environment.yml:7")
    ]
    assert found.origins["pytpu-tinydep"] == "environment.yml:11"
    (tmp_path / "requirements.txt").write_text("einops\n")
    assert _declared(tmp_path).files == ("requirements.txt",)


def test_a_conda_package_pip_cannot_install_is_left_out_and_named(tmp_path, offline_index):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "environment.yml").write_text(CONDA)
    built = environment.prepare(root, config.Config())
    names = {name for name, _ in built.installed}
    assert {"pytpu_tinydep", "pytpu_other"} <= names
    (left,) = built.left_out
    assert left.startswith("environment.yml:9: conda's `pytpu-conda-only==1.0.*`"), left
    assert "install it in `setup`" in left
    assert environment.prepare(root, config.Config()).left_out == built.left_out  # (cached)


def test_the_settings_can_name_the_files_and_a_missing_one_is_an_error(tmp_path):
    (tmp_path / "requirements.txt").write_text("einops\n")
    (tmp_path / "train.txt").write_text("tqdm\n")
    assert _declared(tmp_path, requirements=("train.txt",)).requirements == ("tqdm",)
    with pytest.raises(environment.EnvironmentSetupError, match="nothere.txt"):
        _declared(tmp_path, requirements=("nothere.txt",), source=".github/pytpu.yml")


def test_the_settings_keys_are_checked(tmp_path):
    (tmp_path / ".github").mkdir()
    settings = tmp_path / ".github" / "pytpu.yml"
    settings.write_text("requirements: [train.txt]\nsetup: pip install ./ops\n")
    loaded = config.load(tmp_path)
    assert loaded.requirements == ("train.txt",) and loaded.setup == ("pip install ./ops",)
    settings.write_text("requirements: [../outside.txt]\n")
    with pytest.raises(config.ConfigError, match="pytpu.yml:1: `requirements`.*outside"):
        config.load(tmp_path)
    settings.write_text("setup: [1, 2]\n")
    with pytest.raises(config.ConfigError, match="`setup` must be a shell command"):
        config.load(tmp_path)


# --- the environment, built -----------------------------------------------------------------


def test_nothing_declared_runs_in_pytpus_environment(tmp_path):
    prepared = environment.prepare(tmp_path, config.Config(), cache=tmp_path / "cache")
    assert prepared.scripts is None and prepared.python == sys.executable
    assert not (tmp_path / "cache").exists()


def test_nothing_declared_but_a_companion_imported_builds_an_environment_with_it(
    tmp_path, monkeypatch
):
    # eriklindernoren/PyTorch-GAN and yunjey's pytorch-tutorial declare nothing and import
    # torchvision: PyTPU's own environment has none, so their programs failed to start.
    (tmp_path / "gan.py").write_text("import torchvision.transforms as T\n")
    chosen = environment.runs_on(environment.target())[0]
    release = chosen.companions["torchvision"]
    built = []

    def build(folder, root, found, *args):
        built.append(found.requirements)
        raise RuntimeError("stop here")

    monkeypatch.setattr(environment, "_build", build)
    installed = set()
    real = environment.metadata.distribution

    def distribution(name):
        if name != "torchvision":
            return real(name)
        if name not in installed:
            raise environment.metadata.PackageNotFoundError(name)
        return None

    monkeypatch.setattr(environment.metadata, "distribution", distribution)
    with pytest.raises(RuntimeError, match="stop here"):
        environment.prepare(tmp_path, config.Config(), cache=tmp_path / "cache")
    assert built == [(f"torchvision=={release}",)]
    # where PyTPU's environment has it, the program runs there
    installed.add("torchvision")
    prepared = environment.prepare(tmp_path, config.Config(), cache=tmp_path / "cache")
    assert prepared.scripts is None and prepared.python == sys.executable


def test_an_environment_is_built_over_pytpus_cached_and_used_by_the_programs_runs(
    tmp_path, offline_index
):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "requirements.txt").write_text("pytpu_tinydep==1.2\ntorch<2.6\n")
    # (a setup's pip installs into the environment, within the target's torch family)
    settings = config.Config(
        setup=(
            "python -c \"open('setup-ran', 'w')\"",
            "pip --version > pip-said",
            "pip install torch==2.1 >> pip-said 2>&1 || true",
        )
    )
    first = environment.prepare(root, settings)
    assert first.scripts is not None and not first.cached
    assert ("pytpu_tinydep", "1.2") in first.installed
    assert (root / "setup-ran").is_file()  # (the setup commands ran in the environment)
    said = (root / "pip-said").read_text()
    assert str(first.scripts.parent) in said.splitlines()[0], said
    assert "torch==2.1" in said and "conflict" in said.lower(), said
    assert [c.used for c in first.declared.changes] == [f"torch=={first.torch}"]
    # The environment's Python has the program's package, and torch, torch_xla and PyTPU's
    # runtime from the base layer; PyTPU's own Python does not have the package.
    probe = "import pytpu_tinydep, torch, torch_xla, pytpu.runtime; print(pytpu_tinydep.VALUE)"
    shown = subprocess.run([first.python, "-c", probe], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert shown.stdout.strip() == "1.2"
    alone = subprocess.run([sys.executable, "-c", "import pytpu_tinydep"], capture_output=True)
    assert alone.returncode != 0
    # torch's commands start the environment's Python
    torchrun = first.scripts / "torchrun"
    assert torchrun.read_text().startswith(f"#!{first.python}\n")
    # The second time, the same environment from the cache.
    second = environment.prepare(root, settings)
    assert second.cached and second.python == first.python
    assert second.installed == first.installed
    # The program's runs use it: its `python` first on PATH, and pytest's.
    with environment.using(second):
        assert processes.program_python() == second.python
        env = processes.program_environment("cpu", processes.HARNESS_ENV, {})
        which = processes.run("python -c 'import sys; print(sys.executable)'", root, env, 60)
        assert which.stdout.strip() == second.python
    assert processes.program_python() == sys.executable


def test_a_build_cut_off_is_built_again(tmp_path, offline_index):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "requirements.txt").write_text("pytpu_tinydep\n")
    built = environment.prepare(root, config.Config())
    (built.scripts.parent / environment.COMPLETE).unlink()  # as if killed before the end
    again = environment.prepare(root, config.Config())
    assert not again.cached and again.python == built.python
    assert ("pytpu_tinydep", "1.2") in again.installed


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("pytpu_absent_dist==3.1", "pytpu_absent_dist==3.1 (declared at requirements.txt:2)"),
        # a dependency of a declared requirement: named, with no line of the repository's
        ("pytpu_needsdep", "pytpu_absent_dist>=1"),
    ],
)
def test_a_requirement_that_cannot_be_installed_is_named(tmp_path, offline_index, line, named):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "requirements.txt").write_text(f"pytpu_tinydep\n{line}\n")
    with pytest.raises(environment.EnvironmentSetupError) as caught:
        environment.prepare(root, config.Config())
    message = str(caught.value)
    assert f"pip could not install {named}" in message
    assert "Fix or remove that requirement" in message
    # nothing half-built is kept
    built = tmp_path / "cache" / "environments"
    assert [path.name for path in built.iterdir() if path.is_dir()] == []


def test_a_requirement_whose_source_build_fails_is_named_with_its_line(tmp_path, offline_index):
    # pip names no requirement in an ERROR line then: its `Collecting` line says which
    root = tmp_path / "repo"
    root.mkdir()
    (root / "requirements.txt").write_text("pytpu_tinydep\npytpu_oldsrc==0.1\n")
    with pytest.raises(environment.EnvironmentSetupError) as caught:
        environment.prepare(root, config.Config())
    message = str(caught.value)
    assert "pytpu-oldsrc==0.1 (declared at requirements.txt:2) has no wheel for Python" in message
    assert "Require a release that has one" in message


def test_a_setup_command_that_fails_is_named(tmp_path, offline_index):
    root = tmp_path / "repo"
    root.mkdir()
    settings = config.Config(setup=("echo preparing; exit 3",))
    with pytest.raises(environment.EnvironmentSetupError, match="`echo preparing; exit 3`.*3"):
        environment.prepare(root, settings)


# --- the main job ---------------------------------------------------------------------------


def test_migrate_builds_the_programs_environment_and_reports_it(tmp_path, offline_index):
    folder = tmp_path / "tiny"
    shutil.copytree(FIXTURE, folder)
    train = folder / "train.py"
    # the program needs a package that PyTPU's environment does not have
    train.write_text("import pytpu_tinydep  # noqa: F401\n" + train.read_text())
    (folder / "requirements.txt").write_text("pytpu_tinydep==1.2\ntorch>=2.0,<2.6\n")
    (folder / ".gitignore").write_text("*.pt\n")
    (folder / ".github").mkdir()
    (folder / ".github" / "pytpu.yml").write_text(
        "run: python train.py --cuda --steps 16\ntolerance: 2.0\n"
    )
    repo = git.Repo.init(folder, initial_branch="main")
    repo.git.add("--all")
    repo.index.commit("A CUDA program", author=PERSON, committer=PERSON)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTPU_DEVICE", "PYTPU_HARNESS")}
    done = subprocess.run(
        [sys.executable, "-m", "pytpu.engine.cli", "migrate", str(folder)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((folder / ".pytpu" / "report.json").read_text())
    section = document["environment"]
    assert section["own"] is False
    assert {"name": "pytpu_tinydep", "version": "1.2"} in section["installed"]
    assert section["declared"]["changes"][0]["declared"] == "torch<2.6,>=2.0"
    assert document["verdict"]["status"] == "parity"
    page = (folder / ".pytpu" / "report.md").read_text()
    assert "## Environment" in page and "pytpu_tinydep 1.2" in page
    assert "| `torch<2.6,>=2.0` | `torch==2.9.0` | requirements.txt:2 |" in page


def test_a_module_the_repository_does_not_declare_is_named_with_what_to_add(tmp_path):
    (tmp_path / "requirements.txt").write_text("einops\n")
    prepared = environment.ProgramEnvironment(
        None, sys.executable, "2.9.0", "torch-xla 2.9.0", _declared(tmp_path)
    )
    output = "`python train.py` exited with 1: ModuleNotFoundError: No module named 'torchvision'"
    hint = environment.environment_hint(output, prepared)
    release = environment.target().companions["torchvision"]
    assert f"Add `torchvision=={release}` to requirements.txt" in hint
    assert environment.environment_hint("No module named 'torch'", prepared) == ""
    assert environment.environment_hint("ValueError: shapes", prepared) == ""


def test_a_build_dependency_s_failure_is_blamed_on_the_requirement_being_built():
    # scipy==1.5.4 has no wheel for Python 3.11: its build's own pip (indented) failed on an old
    # numpy, which the repository also declares; the requirement to change is scipy's
    output = (
        "Collecting scipy==1.5.4 (from -r pytpu-requirements.txt (line 2))\n"
        "  Installing build dependencies: finished with status 'error'\n"
        "  error: subprocess-exited-with-error\n"
        "      Collecting numpy==1.14.5\n"
        "      ERROR: Could not build wheels for numpy, which is required to install ...\n"
        "× pip subprocess to install build dependencies did not run successfully.\n"
    )
    found = environment.Declared(
        ("requirements.txt",),
        ("numpy", "scipy==1.5.4"),
        {"numpy": "requirements.txt:1", "scipy": "requirements.txt:6"},
    )
    message = environment._pip_failure(processes.Finished(1, output, "", 1.0, False), found)
    assert message.startswith(
        "the program's environment: scipy==1.5.4 (declared at requirements.txt:6) has no wheel"
    )


def test_numpy_1_s_api_under_numpy_2_is_named_with_the_pin_to_add(tmp_path):
    # cure-lab/LTSF-Linear declares plain `numpy`, and torch_xla's NumPy 2 met its `np.Inf`
    (tmp_path / "requirements.txt").write_text("numpy\npandas\n")
    prepared = environment.ProgramEnvironment(
        None, sys.executable, "2.9.0", "torch-xla 2.9.0", _declared(tmp_path)
    )
    output = (
        "`python run.py` exited with 1: AttributeError: `np.Inf` was removed in the NumPy 2.0"
        " release. Use `np.inf` instead."
    )
    assert environment.environment_hint(output, prepared).endswith(
        "add `numpy<2` to requirements.txt"
    )


def test_the_repository_s_own_package_is_left_out_of_what_pip_installs(tmp_path):
    # schedulefree's examples/mnist/requirements.txt names `schedulefree`: PyPI's release of the
    # library shadowed the checkout, so neither side ran the repository's (migrated) code
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "schedulefree"\nversion = "1"\ndependencies = ["typing_extensions"]\n'
    )
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "main.py").write_text("import schedulefree\n")
    (tmp_path / "examples" / "requirements.txt").write_text("torchvision\nschedulefree>=1.2\n")
    found = _declared(tmp_path, run=(config.Program("cd examples && python main.py"),))
    assert "schedulefree" not in " ".join(found.requirements)
    assert "typing_extensions" in found.requirements
    (change,) = [c for c in found.changes if c.declared == "schedulefree>=1.2"]
    assert change.used == "left out" and change.where == "examples/requirements.txt:2"
    assert change.why == environment.OWN_PACKAGE


def test_virtual_devices_give_the_migrated_side_that_many_xla_devices_on_the_cpu(tmp_path):
    from pytpu.engine.verify import parity

    settings = config.Config(virtual_devices=4)
    with environment.using(environment.prepare(tmp_path, settings)):
        after = processes.pytest_environment(tmp_path, "xla")
        before = processes.pytest_environment(tmp_path, "cpu")
        named = parity.device_names("cpu", "xla").target
    assert after["CPU_NUM_DEVICES"] == "4" and "CPU_NUM_DEVICES" not in before
    assert "CPU_NUM_DEVICES=4" in processes.shown(after, "xla")
    assert named.endswith("PJRT_DEVICE=CPU, CPU_NUM_DEVICES=4)"), named
    count = "import torch_xla.runtime as xr; print(xr.global_runtime_device_count())"
    ran = processes.run(f"{sys.executable} -c '{count}'", tmp_path, after, 120)
    assert ran.stdout.split()[-1:] == ["4"], ran.stdout + ran.stderr[-2000:]
    # One device is the default.
    with environment.using(environment.prepare(tmp_path, config.Config())):
        assert "CPU_NUM_DEVICES" not in processes.pytest_environment(tmp_path, "xla")
