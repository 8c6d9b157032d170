"""The program's environment: what the repository declares it needs, installed apart from PyTPU.

A migration runs the user's commands and tests in a virtual environment built for the repository:
its declared requirements (`requirements.txt` at the root and beside each program's script, the
`dependencies` of its `pyproject.toml`, where neither is a conda `environment.yml`, or the files
the configuration's `requirements` lists), then the configuration's `setup` commands. The
environment is layered over a base that holds the target's torch and backend (kb/targets.yaml):
PyTPU's own environment when it has that pair, else an environment of the pair built once. A
`.pth` file adds the base's site folders after the environment's own, so a version the program
asks for wins over the base's, and pip sees torch as installed and keeps it. The target's torch,
backend and torch's companions (torchvision, torchaudio) are constraints: a repository pin that
excludes them is replaced, and the report names it with the reason.

Built once per set of requirements: cached by their hash under PyTPU's cache folder
(`PYTPU_CACHE_DIR`, default `~/.cache/pytpu`), under a lock (concurrent migrations wait for one
build), marked complete only at the end (a build cut off is built again). A repository that
declares nothing runs in PyTPU's environment when that has the pair and the companions its code
imports.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import site
import sys
import sysconfig
import time
import tomllib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

from pytpu.engine import processes
from pytpu.engine.config import Config
from pytpu.engine.source_roots import project_names
from pytpu.runtime import launch

REQUIREMENTS = "requirements.txt"
PYPROJECT = "pyproject.toml"
CONDA_FILES = ("environment.yml", "environment.yaml")
# conda packages that are not Python requirements here (the interpreter, CUDA's libraries, the
# toolchain), and the conda names whose PyPI distribution is named otherwise
CONDA_SKIPPED = re.compile(
    r"python|pip|setuptools|wheel|mkl.*|blas|libblas|openblas|nccl|cudnn|cudatoolkit.*|cuda.*"
    r"|pytorch-cuda|pytorch-mutex|cpuonly|magma.*|lib[a-z0-9_+-]*|_.*|ca-certificates|openssl"
    r"|gcc.*|gxx.*|cxx-compiler|compilers|make|cmake|ninja|git|zlib|xz|tk|readline|ncurses|sqlite"
)
CONDA_NAMES = {
    "pytorch": "torch",
    "pytorch-lightning": "pytorch-lightning",
    "py-opencv": "opencv-python",
    "opencv": "opencv-python",
    "pyyaml": "pyyaml",
    "tensorflow-gpu": "tensorflow",
    "scikit-learn": "scikit-learn",
    "matplotlib-base": "matplotlib",
}
COMPLETE = ".pytpu-environment.json"  # written last: the environment is whole
INSTALL_TIMEOUT = 1800.0  # seconds for pip (a large requirement set on a cold cache)
_PIP_FAILURE = (
    re.compile(r"No matching distribution found for ([^\s;]+)"),
    re.compile(r"Could not find a version that satisfies the requirement ([^\s;]+)"),
    re.compile(r"Cannot install ([^\s,]+)"),
    re.compile(r"Failed to build ([^\s,]+)"),
    re.compile(r"ResolutionImpossible"),
)
# A release with no wheel for this Python is built from its source, which fails before pip names
# it in an ERROR line (an old pandas pinned for Python 3.6): the last `Collecting` line says which.
_BUILD_FAILURE = re.compile(
    r"Getting requirements to build wheel did not run successfully|metadata-generation-failed"
    r"|Preparing metadata \(pyproject\.toml\) did not run successfully"
    r"|pip subprocess to install build dependencies did not run successfully"
)
_COLLECTING = re.compile(r"^(?:Collecting (\S+)|Processing (\S+))")  # from an index; a file


OWN_PACKAGE = (
    "the repository's own package: the programs import the checkout (the migrated code on the"
    " migrated side), as after `pip install -e .`, not a release of it"
)


class EnvironmentSetupError(Exception):
    """The program's environment cannot be built; the message names what and says what to do."""


@dataclass(frozen=True)
class Target:
    """What a target needs in the program's environment (kb/targets.yaml)."""

    name: str
    torch: str
    backend: str  # the backend's distribution
    backend_version: str
    why: str
    companions: dict[str, str | None]
    install: tuple[str, ...]  # what pip installs for an environment of the pair
    device: str = "xla"  # what the migrated program runs on (PYTPU_DEVICE)
    title: str = "PyTorch/XLA"  # the target's name for people
    stand_in: dict[str, str] | None = None  # where the backend cannot run: module, environment
    hosts: str | None = None  # the target whose stand-in runs in this one's environment

    @property
    def pins(self) -> dict[str, str | None]:
        """The release of each torch-family distribution, by canonical name (None: none)."""
        return {
            "torch": self.torch,
            canonicalize_name(self.backend): self.backend_version,
            **{canonicalize_name(name): version for name, version in self.companions.items()},
        }

    def reason(self, name: str) -> str:
        if name == "torch":
            why = f"{self.backend} {self.backend_version} is built for torch {self.torch} only"
            if self.hosts:
                return f"{self.hosts}'s stand-in runs in {self.title}'s environment, and {why}"
            return why
        if name == canonicalize_name(self.backend):
            return f"the target is {self.name} {self.backend_version}: {' '.join(self.why.split())}"
        if self.companions.get(name) is None:
            return f"{name} has no release built for torch {self.torch}"
        return f"{name} {self.companions[name]} is the release built for torch {self.torch}"


def target(name: str = "torch_xla") -> Target:
    """The target `name`'s entry of kb/targets.yaml."""
    from pytpu.engine.rewriter import kb

    entry = kb.default().tables["targets"]["targets"][name]
    backend = entry["backend"]
    return Target(
        name, entry["torch"], backend["distribution"], backend["version"], backend["why"],
        dict(entry["companions"]), tuple(entry["install"]), entry["device"], entry["title"],
        entry.get("stand_in"),
    )  # fmt: skip


def tpu_present() -> bool:
    """A TPU VM exposes its chips as /dev/accel* (v2 to v4) or /dev/vfio/<n> (v5e and later)."""
    return any(Path("/dev").glob("accel[0-9]*")) or any(Path("/dev/vfio").glob("[0-9]*"))


def runs_on(wanted: Target) -> tuple[Target, dict[str, str] | None]:
    """The target whose environment the migrated side runs in, and the stand-in it runs on: the
    target itself where its backend can run (a TPU is here, or it needs none), else its
    stand-in's (kb/targets.yaml)."""
    if wanted.stand_in is None or tpu_present():
        return wanted, None
    host = dataclasses.replace(target(wanted.stand_in["environment"]), hosts=wanted.title)
    return host, wanted.stand_in


@dataclass(frozen=True)
class PinChange:
    """A requirement of the repository on the torch family that the target overrides."""

    declared: str  # as written, `torch<2.6`
    used: str  # `torch==2.9.0`, or `left out`
    where: str  # `requirements.txt:3`
    why: str


@dataclass(frozen=True)
class Declared:
    """What the repository declares its programs need."""

    files: tuple[str, ...] = ()  # read, relative to the root
    requirements: tuple[str, ...] = ()  # for pip, the torch family as the target has it
    origins: dict[str, str] = field(default_factory=dict)  # canonical name -> `file:line`
    changes: tuple[PinChange, ...] = ()
    problems: tuple[str, ...] = ()  # lines left out: `file:line: what; what to do`
    setup: tuple[str, ...] = ()
    # conda's own packages (environment.yml): most have a release of the same name on PyPI, some
    # none; each is installed if pip can, else named and left out
    optional: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.requirements or self.setup or self.optional)


@dataclass(frozen=True)
class ProgramEnvironment:
    """Where the program's commands and tests run."""

    scripts: Path | None  # the environment's scripts folder; None: PyTPU's own environment
    python: str
    torch: str
    backend: str  # `torch-xla 2.9.0`
    declared: Declared
    installed: tuple[tuple[str, str], ...] = ()  # (name, version) pip installed
    cached: bool = False  # built by an earlier run
    seconds: float = 0.0
    base: str | None = None  # the environment of the target's pair; None: PyTPU's own has it
    left_out: tuple[str, ...] = ()  # conda packages pip could not install: `file:line: why`
    device: str = "xla"  # the migrated side's device
    # the stand-in the migrated side runs on (its module, and why), with the folder whose
    # entry point loads it on `import torch`; None: the target's own backend
    stand_in: dict[str, str] | None = None
    autoload: Path | None = None
    virtual_devices: int = 1  # XLA:CPU devices the migrated side has (CPU_NUM_DEVICES)


def declared(root: Path, settings: Config, chosen: Target | None = None) -> Declared:
    """The requirements the repository at `root` declares, the torch family as `chosen` has it."""
    chosen = chosen or target()
    reader = _Reader(root, chosen)
    if settings.requirements is not None:
        for name in settings.requirements:
            if not (root / name).is_file():
                where = settings.source or "the configuration"
                raise EnvironmentSetupError(
                    f"{where}: `requirements` lists {name}, which the repository does not have;"
                    " fix the path or remove it from the list"
                )
            reader.read_file(root / name)
    else:
        for path in _default_files(root, settings):
            reader.read_file(path)
        reader.read_pyproject(root / PYPROJECT)
        if not reader.files:  # (a conda environment file, where nothing else declares)
            for name in CONDA_FILES:
                if (root / name).is_file():
                    reader.read_conda(root / name)
                    break
    return Declared(
        tuple(reader.files), tuple(reader.requirements), reader.origins, tuple(reader.changes),
        tuple(reader.problems), settings.setup, tuple(reader.optional),
    )  # fmt: skip


def imported_companions(root: Path, found: Declared, chosen: Target) -> Declared:
    """`found` with the torch companions the repository's code imports and nothing declares (a
    repository written for a PyTorch container image, which has torchvision), at the release
    built for the target's torch, each named in the changes with the line that imports it."""
    from pytpu.engine.rewriter.sources import discover

    wanted = {
        name: release
        for name, release in chosen.companions.items()
        if release and canonicalize_name(name) not in found.origins
    }
    added: dict[str, PinChange] = {}
    for path in discover(root)[0] if wanted else ():
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text) if any(name in text for name in wanted) else None
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue  # (the rewriter names such a file; here it declares nothing)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                modules = [node.module]
            else:
                continue
            for name in {module.split(".")[0] for module in modules} & wanted.keys() - added.keys():
                where = f"{path.relative_to(root.resolve()).as_posix()}:{node.lineno}"
                why = f"imported there, declared nowhere: {chosen.reason(canonicalize_name(name))}"
                added[name] = PinChange("", f"{name}=={wanted[name]}", where, why)
    if not added:
        return found
    return dataclasses.replace(
        found,
        requirements=(*found.requirements, *(change.used for change in added.values())),
        origins={**found.origins, **{canonicalize_name(n): c.where for n, c in added.items()}},
        changes=(*found.changes, *added.values()),
    )


def _missing_here(found: Declared) -> bool:
    """Some distribution `found` asks for is not in PyTPU's own environment (torchvision, which
    a repository that declares nothing imports: eriklindernoren/PyTorch-GAN, yunjey's
    pytorch-tutorial)."""
    for name in found.origins:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return True
    return False


def _default_files(root: Path, settings: Config) -> list[Path]:
    """requirements.txt at the root and beside each program's script."""
    from pytpu.engine.testgen.invocation import entry_script

    folders = [root]
    for program in settings.run:
        script = entry_script(root, program.command)
        if script:
            folders.append((root / script).parent)
    files = [folder / REQUIREMENTS for folder in dict.fromkeys(folders)]
    return [path for path in files if path.is_file()]


class _Reader:
    """Reads requirement files (following `-r`) and pyproject.toml's dependencies."""

    def __init__(self, root: Path, chosen: Target):
        self.root, self.target = root, chosen
        self.files: list[str] = []
        self.requirements: list[str] = []
        self.origins: dict[str, str] = {}
        self.changes: list[PinChange] = []
        self.problems: list[str] = []
        self.optional: list[str] = []
        self.own = project_names(root)  # the repository's own distribution, by name

    def relative(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(path)

    def read_file(self, path: Path) -> None:
        name = self.relative(path)
        if name in self.files:
            return
        self.files.append(name)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.problems.append(f"{name}: cannot be read ({exc}); make it a readable UTF-8 file")
            return
        for number, line in _logical_lines(text):
            where = f"{name}:{number}"
            if line.startswith(("-r ", "--requirement ", "-r", "--requirement=")):
                included = re.sub(r"^(-r|--requirement)[=\s]*", "", line).strip()
                target = (path.parent / included).resolve()
                if not target.is_file() or not target.is_relative_to(self.root.resolve()):
                    self.problems.append(
                        f"{where}: includes {included}, which the repository does not have;"
                        " fix the path (the rest is installed)"
                    )
                    continue
                self.read_file(target)
            elif line.startswith("-e") or line in (".", "./") or line.startswith("--editable"):
                # (the repository's own code runs from its checkout, its folders on PYTHONPATH)
                self.problems.append(
                    f"{where}: `{line}` installs the repository itself, which PyTPU runs from"
                    " its checkout; left out"
                )
            elif line.startswith("-"):
                self.problems.append(
                    f"{where}: the pip option `{line}` is not applied (the environment installs"
                    " from the package index pip is configured with); left out. Put what it is"
                    " needed for in `setup` in PyTPU's settings"
                )
            else:
                self.add(line, where)

    def read_pyproject(self, path: Path) -> None:
        if not path.is_file():
            return
        try:
            project = tomllib.loads(path.read_text(encoding="utf-8")).get("project") or {}
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            self.problems.append(f"{PYPROJECT}: cannot be read ({exc}); its dependencies left out")
            return
        dependencies = project.get("dependencies") or []
        if dependencies:
            self.files.append(PYPROJECT)
        for dependency in dependencies:
            self.add(str(dependency), f"{PYPROJECT} [project] dependencies")

    def read_conda(self, path: Path) -> None:
        """A conda environment file: its pip section as requirements; conda's own packages by
        their PyPI names, each installed if pip can (`optional`)."""
        import yaml

        name = self.relative(path)
        self.files.append(name)
        try:
            node = yaml.compose(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            self.problems.append(f"{name}: cannot be read ({exc}); its dependencies left out")
            return
        dependencies = next(
            (value for key, value in getattr(node, "value", []) if key.value == "dependencies"),
            None,
        ) if isinstance(node, yaml.MappingNode) else None  # fmt: skip
        for item in getattr(dependencies, "value", []):
            where = f"{name}:{item.start_mark.line + 1}"
            if isinstance(item, yaml.ScalarNode):
                line = _pip_form(str(item.value))
                if line:
                    self.add(line, where, optional=True)
            elif isinstance(item, yaml.MappingNode):
                for key, value in item.value:
                    for entry in getattr(value, "value", []) if key.value == "pip" else []:
                        self.add(str(entry.value), f"{name}:{entry.start_mark.line + 1}")

    def add(self, line: str, where: str, optional: bool = False) -> None:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            why = str(exc).splitlines()[0]
            self.problems.append(
                f"{where}: `{line}` is not a requirement ({why}); fix or remove the line (the"
                " rest is installed)"
            )
            return
        if requirement.marker is not None and not requirement.marker.evaluate():
            return  # (for another platform or Python)
        name = canonicalize_name(requirement.name)
        line = str(requirement)  # (written one way: `tqdm >= 4` is `tqdm>=4`)
        if name in self.own:
            self.changes.append(PinChange(line, "left out", where, OWN_PACKAGE))
            return
        pins = self.target.pins
        if name in pins:
            line = self.torch_family(requirement, name, pins[name], where)
            if line is None:
                return
        self.origins.setdefault(name, where)
        kept = self.optional if optional and name not in self.target.pins else self.requirements
        if line not in self.requirements and line not in self.optional:
            kept.append(line)

    def torch_family(
        self, requirement: Requirement, name: str, release: str | None, where: str
    ) -> str | None:
        """The line pip installs for a torch-family requirement (None: the base has it, or no
        release fits), and the change, when the declared one excludes the target's release."""
        fits = release is not None and requirement.specifier.contains(release, prereleases=True)
        if not fits:
            used = f"{requirement.name}=={release}" if release else "left out"
            change = PinChange(str(requirement), used, where, self.target.reason(name))
            if change not in self.changes:
                self.changes.append(change)
        if release is None or name in ("torch", canonicalize_name(self.target.backend)):
            return None  # (the base layer's)
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        return f"{requirement.name}{extras}=={release}"


def _pip_form(spec: str) -> str | None:
    """A conda package spec as a pip requirement (`numpy=1.26` is `numpy==1.26.*`), or None for
    what is not a Python requirement here."""
    spec = spec.split("::")[-1].strip()  # (a channel: conda-forge::numpy)
    match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", spec)
    if not match:
        return None
    name, version = match[1].lower(), match[2].strip()
    if CONDA_SKIPPED.fullmatch(name):
        return None
    name = CONDA_NAMES.get(name, name)
    if re.fullmatch(r"=[^=<>!~]+(=.*)?", version):  # `=1.26` or `=1.26=build`: that release line
        version = f"=={version[1:].split('=')[0].rstrip('.*')}.*"
    elif re.fullmatch(r"\d[^\s<>=!~]*", version):  # `numpy 1.26`
        version = f"=={version}"
    return f"{name}{version}"


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, line) of a requirements file: comments dropped, `\\` continued."""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            yield start, line


def prepare(root: Path, settings: Config, cache: Path | None = None) -> ProgramEnvironment:
    """The environment the programs of the repository at `root` run in: built (or found in the
    cache) when the repository declares requirements or PyTPU's environment lacks the target's
    torch pair, else PyTPU's own."""
    from pytpu.engine.rewriter.checkout import parse_target

    wanted = target(parse_target(settings.target)[0])
    chosen, stand_in = runs_on(wanted)
    cache = cache or cache_folder()
    found = declared(root, settings, chosen)
    backend = f"{wanted.backend} {wanted.backend_version}"
    side = {
        "device": wanted.device,
        "stand_in": stand_in,
        "autoload": None,
        "virtual_devices": settings.virtual_devices,
    }
    if stand_in is not None:
        backend = f"{backend}'s stand-in ({stand_in['module']}, on the CPU)"
        folder = cache / "stand-ins" / stand_in["module"]
        side["autoload"] = launch.write_autoload(folder, stand_in["module"])
    started = time.perf_counter()
    base = _base(chosen, cache, root)
    companions = imported_companions(root, found, chosen)
    if found.empty and base.own and not _missing_here(companions):
        return ProgramEnvironment(None, sys.executable, chosen.torch, backend, found, **side)
    found = companions  # (a repository that declares nothing but imports torchvision: built)
    key = _key(found, chosen, base)
    folder = cache / "environments" / key
    with _locked(folder.with_name(f"{key}.lock")):
        complete = folder / COMPLETE
        cached = complete.is_file()
        if not cached:
            shutil.rmtree(folder, ignore_errors=True)  # (a build cut off)
            try:
                left_out = _build(folder, root, found, chosen, base)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)  # (nothing half-built is kept)
                raise
            # (what pip and the setup commands put in the environment itself)
            installed = _distributions(_site_folder(folder / "bin" / "python", root))
            installed = [item for item in installed if item[0] not in ("pip", "setuptools")]
            built = {"installed": installed, "left_out": left_out}
            complete.write_text(json.dumps(built), encoding="utf-8")
        built = json.loads(complete.read_text(encoding="utf-8"))
        installed, left_out = built["installed"], built.get("left_out", [])
    base.reach()
    scripts = folder / "bin"
    return ProgramEnvironment(
        scripts, str(scripts / "python"), chosen.torch, backend, found,
        tuple((item[0], item[1]) for item in installed), cached and base.cached,
        time.perf_counter() - started, base.folder, tuple(left_out), **side,
    )  # fmt: skip


_MISSING_MODULE = re.compile(r"No module named '([A-Za-z0-9_]+)")
# `np.Inf` and friends, and extensions built for NumPy 1, as NumPy 2 words their failures
_NUMPY_2 = re.compile(
    r"was removed in the NumPy 2\.0 release|compiled using NumPy 1\.x cannot be run in\s+NumPy 2"
)


def environment_hint(output: str, environment: ProgramEnvironment) -> str:
    """What to change in the requirements when a program's run failed for want of something in
    its environment: a module it does not declare (`No module named 'x'`: declare it, with the
    target's release for a torch companion), or NumPy 1's API under NumPy 2 (torch_xla brings
    NumPy 2 when nothing pins it); nothing when the output says no such thing."""
    where = ", ".join(environment.declared.files) or "a requirements.txt at the root"
    if _NUMPY_2.search(output):
        return (
            " The program uses NumPy 1's API, and the environment has NumPy 2 (what torch's"
            f" family installs when nothing pins it): add `numpy<2` to {where}"
        )
    found = _MISSING_MODULE.search(output)
    if not found or found[1] in ("torch", "torch_xla"):
        return ""
    module = found[1]
    release = target().companions.get(canonicalize_name(module))
    requirement = f"{module}=={release}" if release else module
    return (
        f" The program's environment has no `{module}`: the repository does not declare it."
        f" Add `{requirement}` to {where} (or install it in `setup` in PyTPU's settings, for a"
        " package whose distribution is named otherwise)"
    )


def cache_folder() -> Path:
    configured = os.environ.get("PYTPU_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "pytpu"


@contextlib.contextmanager
def using(environment: ProgramEnvironment) -> Iterator[None]:
    """The program's commands and tests run in `environment` inside the block."""
    tokens = (
        processes.PROGRAM_SCRIPTS.set(environment.scripts),
        processes.TARGET_DEVICE.set(environment.device),
        processes.STAND_IN.set(environment.autoload),
        processes.VIRTUAL_DEVICES.set(environment.virtual_devices),
    )
    try:
        yield
    finally:
        for variable, token in zip(
            (
                processes.PROGRAM_SCRIPTS,
                processes.TARGET_DEVICE,
                processes.STAND_IN,
                processes.VIRTUAL_DEVICES,
            ),
            tokens,
            strict=True,
        ):
            variable.reset(token)


@dataclass(frozen=True)
class Base:
    """The site folders a program's environment is layered over: the target's torch pair, then
    PyTPU's own (its test runtime and what that needs)."""

    sites: tuple[str, ...]
    folder: str | None = None  # the base environment built for the pair; None: PyTPU's own
    cached: bool = True

    @property
    def own(self) -> bool:
        return self.folder is None

    def reach(self) -> None:
        """PyTPU reads the recordings with torch: the built base's, when PyTPU has none."""
        for site_folder in self.sites:
            if site_folder not in sys.path:
                site.addsitedir(site_folder)


def _own_sites() -> tuple[str, ...]:
    return tuple(dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]))


def _base(chosen: Target, cache: Path, root: Path) -> Base:
    """PyTPU's environment when it holds the target's pair; else an environment with the pair,
    built once per target and Python (several GB: torch), over which PyTPU's own is layered."""
    wanted = {"torch": chosen.torch, canonicalize_name(chosen.backend): chosen.backend_version}
    have = {}
    for name in wanted:
        try:
            have[name] = metadata.version(name).split("+")[0]
        except metadata.PackageNotFoundError:
            have[name] = None
    if have == wanted:
        return Base(_own_sites())
    python_tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    folder = cache / "bases" / f"{chosen.name}-{chosen.backend_version}-{python_tag}"
    with _locked(folder.with_name(f"{folder.name}.lock")):
        cached = (folder / COMPLETE).is_file()
        if not cached:
            shutil.rmtree(folder, ignore_errors=True)
            python = _new_venv(folder, root)
            command = [
                sys.executable, "-m", "pip", "--python", str(python), "install",
                "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
                *chosen.install,
            ]  # fmt: skip
            done = processes.run(command, root, processes.safe_environment(), INSTALL_TIMEOUT)
            if done.returncode != 0 or done.timed_out:
                tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
                raise EnvironmentSetupError(
                    f"PyTPU's environment ({sys.prefix}) has {_have(have)}, so the target's"
                    f" pair goes in an environment of its own ({folder}), and pip could not"
                    f" install {' '.join(chosen.install)} there: {tail}. Install them beside"
                    f" PyTPU instead: pip install {' '.join(repr(r) for r in chosen.install)}"
                )
            (folder / COMPLETE).write_text(json.dumps({"installed": chosen.install}))
        site_folder = _site_folder(folder / "bin" / "python", root)
    return Base((site_folder, *_own_sites()), str(folder), cached)


def _have(have: dict[str, str | None]) -> str:
    return ", ".join(f"{name} {version or '(none)'}" for name, version in have.items())


def _key(found: Declared, chosen: Target, base: Base) -> str:
    described = {
        "python": [sys.version, os.path.realpath(sys.executable)],
        # (what the layers hold, not only where: PyTPU upgraded is another base)
        "base": {site: _distributions(site) for site in base.sites},
        # (one environment whichever target's stand-in it hosts)
        "target": {name: value for name, value in asdict(chosen).items() if name != "hosts"},
        "requirements": sorted(found.requirements),
        "optional": sorted(found.optional),
        "setup": list(found.setup),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]


def _distributions(site_folder: str) -> list[list[str]]:
    """[name, version] of each distribution installed in `site_folder`, sorted."""
    found = {
        (item.metadata["Name"] or "", item.version)
        for item in metadata.distributions(path=[site_folder])
    }
    return sorted([name, version] for name, version in found if name)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(folder: Path, root: Path, found: Declared, chosen: Target, base: Base) -> list[str]:
    """A virtual environment at `folder` over `base`, with `found` installed; the optional
    requirements pip could not install."""
    python = _new_venv(folder, root)
    site_folder = Path(_site_folder(python, root))
    # (site.addsitedir, not a bare path: the base's own .pth files, editable installs among
    # them, take effect too)
    lines = [f"import site; site.addsitedir({folder_!r})" for folder_ in base.sites]
    (site_folder / "pytpu-base.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _script_wrappers(folder / "bin", chosen, base)
    if found.requirements:
        _pip_install(python, root, folder, found, chosen, found.requirements)
    left_out = []
    if found.optional:
        try:  # (all at once; one by one when one of them has no release pip can install)
            _pip_install(python, root, folder, found, chosen, found.optional)
        except EnvironmentSetupError:
            for line in found.optional:
                try:
                    _pip_install(python, root, folder, found, chosen, (line,))
                except EnvironmentSetupError as exc:
                    name = canonicalize_name(Requirement(line).name)
                    left_out.append(
                        f"{found.origins.get(name, line)}: conda's `{line}` has no release pip"
                        f" could install here ({str(exc).split(': ', 2)[-1][:200]}); left out."
                        " If the program needs it, install it in `setup` in PyTPU's settings"
                    )
    env = processes.safe_environment()
    env["PATH"] = os.pathsep.join([str(folder / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(folder)
    # (a `pip install` of the setup keeps the target's torch family: unconstrained, pip would put
    # the newest torch in the environment, over the base's)
    env["PIP_CONSTRAINT"] = str(_constraints(folder, chosen))
    for command in found.setup:
        done = processes.run(command, root, env, INSTALL_TIMEOUT)
        if done.returncode != 0 or done.timed_out:
            why = "ran out of time" if done.timed_out else f"exited with {done.returncode}"
            tail = "\n".join((done.stderr + done.stdout).strip().splitlines()[-10:])
            raise EnvironmentSetupError(
                f"the setup command `{command}` (PyTPU's settings) {why} in the program's"
                f" environment; fix it and run again:\n{tail}"
            )
    return left_out


def _new_venv(folder: Path, root: Path) -> Path:
    """A virtual environment with its own pip: a `pip install` of the setup commands, or of the
    program, installs into it (not into whatever `pip` PATH finds next)."""
    command = [sys.executable, "-m", "venv", str(folder)]
    done = processes.run(command, root, processes.safe_environment(), 300)
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip()[-500:]
        raise EnvironmentSetupError(f"cannot create a virtual environment at {folder}: {why}")
    return folder / "bin" / "python"


def _site_folder(python: Path, root: Path) -> str:
    done = processes.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        root, processes.safe_environment(), 60,
    )  # fmt: skip
    return done.stdout.strip()


def _script_wrappers(scripts: Path, chosen: Target, base: Base) -> None:
    """The torch family's commands (torchrun) started by the environment's Python: the base's
    own scripts name another Python, which does not see the program's packages."""
    python = scripts / "python"
    for name in ("torch", chosen.backend):
        for found in list(metadata.Distribution.discover(name=name, path=list(base.sites)))[:1]:
            for point in found.entry_points:
                if point.group != "console_scripts" or (scripts / point.name).exists():
                    continue
                module, _, attribute = point.value.partition(":")
                path = scripts / point.name
                path.write_text(
                    f"#!{python}\nimport sys\nfrom {module} import {attribute.split('.')[0]}\n"
                    f"sys.exit({attribute}())\n",
                    encoding="utf-8",
                )
                path.chmod(0o755)


def _constraints(folder: Path, chosen: Target) -> Path:
    """The target's torch family as pip constraints, in a file of the environment."""
    constraints = folder / "pytpu-constraints.txt"
    pins = [f"{name}=={version}" for name, version in chosen.pins.items() if version]
    constraints.write_text("\n".join(pins) + "\n", encoding="utf-8")
    return constraints


def _pip_install(
    python: Path,
    root: Path,
    folder: Path,
    found: Declared,
    chosen: Target,
    lines: tuple[str, ...],
) -> None:
    requirements = folder / "pytpu-requirements.txt"
    requirements.write_text("\n".join(lines) + "\n", encoding="utf-8")
    constraints = _constraints(folder, chosen)
    command = [
        sys.executable, "-m", "pip", "--python", str(python), "install",
        "--disable-pip-version-check", "--no-input",
        "-r", str(requirements), "-c", str(constraints),
    ]  # fmt: skip
    done = processes.run(command, root, processes.safe_environment(), INSTALL_TIMEOUT)
    if done.returncode != 0 or done.timed_out:
        raise EnvironmentSetupError(_pip_failure(done, found))


def _distribution_file(path: str) -> str:
    """`name==version` of a wheel or source distribution pip processes from a file."""
    filename = Path(path).name
    try:
        if filename.endswith(".whl"):
            name, version, *_ = parse_wheel_filename(filename)
        else:
            name, version = parse_sdist_filename(filename)
    except (InvalidSdistFilename, InvalidWheelFilename):
        return filename
    return f"{name}=={version}"


def _declared_at(requirement: str, found: Declared) -> str:
    """` (declared at requirements.txt:5)` for what pip named (`'pandas'`, `pandas==0.24.1`)."""
    requirement = requirement.strip("'\"")
    try:
        name = canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        name = canonicalize_name(re.split(r"[<>=!~\[ ]", requirement)[0])
    where = found.origins.get(name)
    return f" (declared at {where})" if where else ""


def _pip_failure(done: processes.Finished, found: Declared) -> str:
    """Which requirement pip could not install, where the repository declares it, and why."""
    output = f"{done.stdout}\n{done.stderr}"
    if done.timed_out:
        return (
            f"installing the program's requirements ({', '.join(found.files)}) took longer than"
            f" {INSTALL_TIMEOUT:.0f} s; check the package index pip uses, then run again"
        )
    # (an indented line is a build's own pip: its requirements are the build's, not the program's)
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    top = [line for line in lines if not line[0].isspace()]
    errors = [line for line in top if line.startswith("ERROR:")] or [x.strip() for x in lines[-3:]]
    python = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    failed = next((i for i, line in enumerate(lines) if _BUILD_FAILURE.search(line)), None)
    starts = [m for line in lines[:failed] if (m := _COLLECTING.match(line))]
    collected = [m[1] or _distribution_file(m[2]) for m in starts]
    if failed is not None and collected:
        declared_at = _declared_at(collected[-1], found)
        return (
            f"the program's environment: {collected[-1]}{declared_at} has no wheel for {python}"
            f" and pip could not build it from its source ({lines[failed].strip('×. ')})."
            " Require a release that has one (a newer one), or remove the requirement, then run"
            " again"
        )
    for pattern in _PIP_FAILURE:
        match = next((m for line in top if (m := pattern.search(line))), None)
        if match and match.groups():
            declared_at = _declared_at(match[1], found)
            return (
                f"the program's environment: pip could not install {match[1]}{declared_at}:"
                f" {errors[-1]}. Fix or remove that requirement (a release that exists for"
                f" {python}, or one that works with the target's torch), then run again"
            )
    return (
        "the program's environment: pip could not install the requirements of"
        f" {', '.join(found.files) or 'the setup'}: {' / '.join(errors[-3:])}; fix them, then run"
        " again"
    )
