"""The functions the behaviour tests that `pytpu testgen` writes call, and `Suite`: a suite's
settings and recordings.

The tests pin down what the code does today, on the CPU, so that the same files can check the code
after its migration to PyTorch/XLA. One switch decides where the code under test runs:
PYTPU_DEVICE=cpu (the default), PYTPU_DEVICE=xla (PyTorch/XLA) or PYTPU_DEVICE=tpu (TorchTPU, or
its CPU stand-in). This module needs only the standard library and torch (torch_xla on the XLA
side, imported only there). It holds calling the code under test and the suite; where the code
runs (`placement`), comparing with a recording (`comparison`), random numbers on XLA
(`host_random`) and running the program (`program_run`) have modules of their own, and their
names are reached through this one.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import sys
import types
from pathlib import Path
from typing import Any

import torch

from pytpu.runtime import cells, ipython
from pytpu.runtime.channel import BASELINE_ENV, MIGRATED_DEVICES
from pytpu.runtime.command import is_notebook

# The generated tests and the harness reach the rest of the runtime through this module: its
# names are the suites' API, wherever they are defined.
from pytpu.runtime.comparison import (  # noqa: F401 - the suites' API
    GRADIENT_FACTOR,
    METRIC_RTOL,
    METRIC_WORDS,
    PRECISIONS,
    PRINTED_DEVICE,
    TOLERANCES,
    assert_close,
    metric_close,
    metric_lines,
    tolerances,
)
from pytpu.runtime.host_random import HostRandom, host_random  # noqa: F401 - the suites API
from pytpu.runtime.placement import (  # noqa: F401 - the suites' API
    SEED,
    device,
    device_kind,
    map_tensors,
    seed_everything,
    tensors,
    to_cpu,
    to_device,
)
from pytpu.runtime.program_run import (  # noqa: F401 - the suites' API
    ProgramRun,
    check_program_ran,
    command_for_device,
    expect_metrics,
    expect_training_step,
    harness_records,
    run_program,
)
from pytpu.runtime.records import StepRecord, UnitUnavailable  # UnitUnavailable: the suites' API

# --- calling the code under test ----------------------------------------------------------------


def definitions(path: Path) -> list[tuple[str, ast.Module]]:
    """What loading a script or a notebook without running it keeps: its imports, functions and
    classes at the top level, as (the name to compile them under, the module). A notebook's code
    cells each on their own, in order (`nb.ipynb#cell5`), IPython's lines masked as the rewriter
    masks them; a cell magic that is not Python (`%%bash`) or a cell that does not parse is left
    out."""
    if not is_notebook(path.name):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        return [(str(path), _definitions_of(tree))]
    found, numbers = [], []  # numbers: the placeholders handed out, as ipython.mask wants
    for number, source in cells.code_cells(path):
        try:
            masked = ipython.mask(source, numbers)
        except ipython.NotPython:
            continue
        name = cells.cell_id(str(path), number)
        found.append((name, _definitions_of(ast.parse(masked.text, filename=name))))
    return found


def _definitions_of(tree: ast.Module) -> ast.Module:
    tree.body = [node for node in tree.body if is_definition(node)]
    return tree


def is_definition(node: ast.stmt) -> bool:
    """An import, def or class at a script's top level (or a try of them): what loading a script
    without running its program keeps."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
        return True
    if isinstance(node, ast.AsyncFunctionDef):
        return True
    if isinstance(node, ast.Try):  # try: import x / except ImportError: ...
        return all(is_definition(inner) for inner in node.body)
    return False


def build(factory: Any, *args: Any, **kwargs: Any) -> torch.nn.Module:
    """Construct a module with seeded initialisation on the CPU, then move it to the device."""
    seed_everything()
    module = factory(*args, **kwargs)
    return module.to(device())


def call(unit: Any, inputs: tuple[list[Any], dict[str, Any]]) -> Any:
    args, kwargs = inputs
    seed_everything()
    with host_random():
        return unit(*args, **kwargs)


def call_method(method: Any, **arguments: Any) -> Any:
    """Call a module's method as `call` calls forward: seeded, random draws as on the CPU."""
    seed_everything()
    with host_random():
        return method(**arguments)


def scalar_of(output: Any) -> torch.Tensor:
    """A scalar that depends on every floating-point value of `output`, to take gradients of."""
    differentiable = [t for t in tensors(output) if t.is_floating_point() and t.requires_grad]
    if not differentiable:
        raise UnitUnavailable("the output has no differentiable tensor")
    return sum(t.float().square().mean() for t in differentiable)


def gradients(module: torch.nn.Module, inputs: Any, output: Any) -> dict[str, Any]:
    """Backward of `scalar_of(output)`: each parameter's gradient norm, the inputs' gradients."""
    scalar_of(output).backward()
    # (summed in float64, kept in the gradient's dtype: its tolerance is that dtype's, as the
    # device computed it in that dtype; a float32 norm held in float64 met float64's tolerance)
    norms = {
        name: p.grad.detach().double().norm().to(p.grad.dtype).cpu()
        for name, p in module.named_parameters()
        if p.grad is not None
    }
    return {"parameters": norms, "inputs": [t.grad for t in tensors(inputs) if t.requires_grad]}


def float_inputs_require_grad(inputs: tuple[list[Any], dict[str, Any]]) -> None:
    for tensor in tensors(inputs):
        if tensor.is_floating_point():
            tensor.requires_grad_(True)


def batch_rows(inputs: tuple[list[Any], dict[str, Any]], rows: int) -> tuple[list, dict]:
    """The first `rows` samples of every input that carries the recorded batch dimension."""
    size = batch_size(inputs)
    return map_tensors(inputs, lambda t: t[:rows] if t.dim() and t.shape[0] == size else t)


def check_rows_follow(model: torch.nn.Module, inputs: tuple[list, dict], rows: int) -> None:
    """The first `rows` samples of the input give the first `rows` of the output."""
    size = batch_size(inputs)
    with torch.no_grad():
        whole = to_cpu(call(model, inputs))
        part = to_cpu(call(model, batch_rows(inputs, rows)))
    expected = map_tensors(whole, lambda t: t[:rows] if t.dim() and t.shape[0] == size else t)
    assert_close(part, expected, what=f"the first {rows} rows")


def batch_size(inputs: Any) -> int:
    """The leading size of the first input with dimensions: the batch the recording holds."""
    first = next((t for t in tensors(inputs) if t.dim()), None)
    if first is None:
        raise UnitUnavailable("no input has a batch dimension")
    return first.shape[0]


# --- a generated suite --------------------------------------------------------------------------


def package_location(path: Path) -> tuple[Path, str | None]:
    """The folder to import a file from and its dotted module name, when the file belongs to a
    package (its folder has an `__init__.py`): `src/pkg/sub/m.py` is `pkg.sub.m` from `src`.
    Otherwise (a script or a module beside one) its own folder and None."""
    parts = [] if path.stem == "__init__" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        parts.insert(0, folder.name)
        folder = folder.parent
    if folder == path.parent:
        return folder, None
    return folder, ".".join(parts)


def _definitions_module(
    name: str, path: Path, folder: Path, names: dict[str, Any]
) -> types.ModuleType:
    """A new module `name` for the definitions of the file at `path`, registered in sys.modules
    (the recordings' classes are found by it), `folder` on sys.path."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    module.__dict__.update(names)
    return module


def _run_definitions(
    module: types.ModuleType, path: Path, names: dict[str, Any]
) -> types.ModuleType:
    for filename, tree in definitions(path):
        exec(compile(tree, filename, "exec"), module.__dict__)  # noqa: S102 - the user's own code
    module.__dict__.update(names)  # a definition must not shadow what the run had
    return module


class Suite:
    """The suite a test file belongs to: its folder holds `suite.json` (where the repository is,
    the recorded command, the repository's factor on the tolerances) and the recordings
    (`data/`). A test module makes one: `suite = support.Suite(__file__)`."""

    def __init__(self, test_file: str | Path):
        self.directory = Path(test_file).resolve().parent
        self.data = self.directory / "data"
        settings = json.loads((self.directory / "suite.json").read_text())
        # The suite lives in <root>/tests/pytpu (or wherever --out put it); the root is recorded.
        self.root = (self.directory / settings["root"]).resolve()
        self.command: str = settings["command"]
        self.tolerance = float(settings.get("tolerance", 1.0))
        # `precision: bf16`: the migrated program trains in bfloat16 (the original does not)
        self.precision = PRECISIONS[settings.get("precision", "fp32")]

    # the code under test

    def import_file(self, relative: str) -> types.ModuleType:
        """Import a module of the repository by path, as the program imported it."""
        path = self.root / relative
        top, dotted = package_location(path)
        if dotted is not None:
            # a module of a package is imported by its own name, so that its relative imports
            # (`from .model import Net`) and the recordings' references to it resolve
            if str(top) not in sys.path:
                sys.path.insert(0, str(top))
            return importlib.import_module(dotted)
        name = "pytpu_unit_" + re.sub(r"\W", "_", relative.removesuffix(".py"))
        if name in sys.modules:
            return sys.modules[name]
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def load_script(self, relative: str, **names: Any) -> types.ModuleType:
        """Load a script's imports, functions and classes without running the script.

        A script runs its program when executed, so only its definitions are loaded; the
        module-level values those definitions read are given as `names`, with the values the
        recorded run had.
        """
        path = self.root / relative
        top, dotted = package_location(path)
        name = "pytpu_script_" + re.sub(r"\W", "_", relative.removesuffix(".py"))
        module = _definitions_module(name, path, top, names)
        if dotted is not None:  # run as `python -m pkg.train`: its relative imports resolve
            module.__package__ = dotted.rpartition(".")[0]
        return _run_definitions(module, path, names)

    def load_notebook(self, relative: str, **names: Any) -> types.ModuleType:
        """Load a notebook's imports, functions and classes without running its cells.

        Its code cells' definitions, in order, make one module (the recorded run's `__main__`,
        whose classes the recordings name by their cells), its folder on sys.path; the
        module-level values the definitions read are given as `names`, as for a script."""
        path = self.root / relative
        name = "pytpu_notebook_" + re.sub(r"\W", "_", relative.removesuffix(".ipynb"))
        module = _definitions_module(name, path, path.parent, names)
        return _run_definitions(module, path, names)

    # the recordings

    def load_inputs(self, name: str) -> tuple[list[Any], dict[str, Any]]:
        record = self._load(name)
        return to_device(list(record["args"])), to_device(dict(record["kwargs"]))

    def expect(self, name: str, key: str, actual: Any, factor: float = 1) -> None:
        """Compare `actual` with the recording `name`/`key`; under PYTPU_TESTGEN_BASELINE,
        record it."""
        actual = to_cpu(actual)
        if os.environ.get(BASELINE_ENV):
            record = self._load(name)
            record.setdefault("expected", {})[key] = actual
            temporary = self._path(name).with_suffix(".tmp")
            torch.save(record, temporary)
            temporary.replace(self._path(name))
            return
        expected = self._load(name).get("expected", {})
        if key not in expected:
            raise AssertionError(f"no recorded {key!r} for {name}; re-record with `pytpu testgen`")
        assert_close(actual, expected[key], factor * self.tolerance, what=f"{name}: {key}")

    def load_program_recording(self) -> dict[str, Any]:
        return json.loads((self.data / "program.json").read_text())

    def _path(self, name: str) -> Path:
        return self.data / f"{name}.pt"

    def _load(self, name: str) -> dict[str, Any]:
        path = self._path(name)
        if not path.exists():
            missing = f"{path}: recorded data missing; re-record with `pytpu testgen`"
            raise FileNotFoundError(missing)
        return torch.load(path, weights_only=True)

    # the program as a whole

    def run_program(
        self,
        command: str,
        timeout: float,
        accelerator_flag: str | None = None,
        on_xla: str | None = None,
    ) -> ProgramRun:
        return run_program(self.root, command, timeout, accelerator_flag, on_xla)

    @property
    def computed_in(self) -> torch.dtype | None:
        """The dtype this side's program trains in where it is not float32: the migrated side
        under `precision: bf16`."""
        return self.precision if device_kind() in MIGRATED_DEVICES else None

    def expect_training_step(self, run: ProgramRun, recorded: list[StepRecord]) -> None:
        expect_training_step(run, recorded, self.tolerance, self.computed_in)

    def expect_metrics(self, run: ProgramRun, recorded: list[list[Any]]) -> None:
        expect_metrics(run, recorded, self.tolerance, self.computed_in)
