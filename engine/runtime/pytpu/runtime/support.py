"""The functions the behaviour tests that `pytpu testgen` writes call, and `Suite`: a suite's
settings and recordings.

The tests pin down what the code does today, on the CPU, so that the same files can check the code
after its migration to PyTorch/XLA. One switch decides where the code under test runs:
PYTPU_DEVICE=cpu (the default), PYTPU_DEVICE=xla (PyTorch/XLA) or PYTPU_DEVICE=tpu (TorchTPU, or
its CPU stand-in). This module needs only the standard library and torch (torch_xla on the XLA
side, imported only there). `Suite.run_program` runs the user's
program with the harness inside it (`pytpu.runtime.bootstrap`).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import torch

from pytpu.runtime import cells, channel, ipython, launch
from pytpu.runtime import command as shell
from pytpu.runtime.channel import BASELINE_ENV, DEVICES, MIGRATED_DEVICES
from pytpu.runtime.command import is_notebook

SEED = 0

# Tolerances by dtype, in one place: (rtol, atol) for torch.testing.assert_close. float32 is looser
# than torch's default because XLA fuses and reorders float work; the others are torch's defaults.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float16: (1e-3, 1e-5),
}
# Gradients and parameters after an optimizer step sum many products: ten times the above.
GRADIENT_FACTOR = 10
# Printed metrics carry a few digits: relative 1e-3, or one unit in the last printed digit.
METRIC_RTOL = 1e-3


class UnitUnavailable(Exception):
    """The unit cannot be exercised here (the reason is the message)."""


# --- where the code under test runs -----------------------------------------------------------


def device_kind() -> str:
    kind = os.environ.get("PYTPU_DEVICE", "cpu").strip().lower()
    if kind not in DEVICES:
        raise SystemExit(f"PYTPU_DEVICE={kind!r}: use one of {', '.join(DEVICES[:-1])}")
    return kind


def device() -> torch.device:
    if device_kind() == "xla":
        import torch_xla

        return torch_xla.device()
    return torch.device(device_kind())


def seed_everything(seed: int = SEED) -> None:
    """Seed every generator a test or program may draw from; on XLA also its own generator."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    if device_kind() == "xla":
        import torch_xla.backends
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(seed)
        # Full fp32 matmuls, as on the CPU, so that recorded numbers can be compared.
        torch_xla.backends.set_mat_mul_precision("highest")


def to_device(value: Any, target: torch.device | None = None) -> Any:
    target = device() if target is None else target
    return map_tensors(value, lambda t: t.to(target))


def to_cpu(value: Any) -> Any:
    return map_tensors(value, lambda t: t.detach().cpu())


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
    with _host_random():
        return unit(*args, **kwargs)


def call_method(method: Any, **arguments: Any) -> Any:
    """Call a module's method as `call` calls forward: seeded, random draws as on the CPU."""
    seed_everything()
    with _host_random():
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


def tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in `value` and in the lists, tuples and dicts it nests."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors(item)]
    return []


def map_tensors(value: Any, fn: Any) -> Any:
    """`value` with `fn` applied to each tensor it holds, its containers rebuilt."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        mapped = [map_tensors(item, fn) for item in value]
        return type(value)(mapped) if not hasattr(value, "_fields") else type(value)(*mapped)
    if isinstance(value, dict):
        return {key: map_tensors(item, fn) for key, item in value.items()}
    return value


# --- comparing with the recording ---------------------------------------------------------------


def assert_close(actual: Any, expected: Any, factor: float = 1, what: str = "value") -> None:
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise AssertionError(f"{what}: expected a tensor, got {type(actual).__name__}")
        rtol, atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
        rtol, atol = rtol * factor, atol * factor
        if rtol and expected.numel():
            # an element near zero computed from large ones (a variance as E[x^2] - E[x]^2, a
            # difference of sums) carries the rounding of those large ones: the absolute part
            # of the tolerance scales with the tensor's largest magnitude
            largest = expected.detach().abs().nan_to_num(0.0, 0.0, 0.0).max()
            atol = max(atol, rtol * float(largest))
        torch.testing.assert_close(
            actual, expected, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}"
        )
    elif isinstance(expected, dict):
        if set(actual) != set(expected):
            raise AssertionError(f"{what}: keys {sorted(actual)} != recorded {sorted(expected)}")
        for key in expected:
            assert_close(actual[key], expected[key], factor, f"{what}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        if len(actual) != len(expected):
            raise AssertionError(f"{what}: {len(actual)} items, recorded {len(expected)}")
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_close(a, e, factor, f"{what}[{index}]")
    elif isinstance(expected, float):
        if not math.isclose(actual, expected, rel_tol=1e-4 * factor, abs_tol=1e-6 * factor):
            raise AssertionError(f"{what}: {actual!r} != recorded {expected!r}")
    elif actual != expected:
        raise AssertionError(f"{what}: {actual!r} != recorded {expected!r}")


# --- random numbers on the XLA side ------------------------------------------------------------

_RANDOM_FACTORIES = {
    torch.rand, torch.randn, torch.randint, torch.randperm, torch.normal,
    torch.rand_like, torch.randn_like, torch.randint_like, torch.bernoulli, torch.multinomial,
    torch.Tensor.bernoulli, torch.Tensor.multinomial,
}  # fmt: skip
_RANDOM_IN_PLACE = {
    torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.bernoulli_, torch.Tensor.random_,
    torch.Tensor.exponential_, torch.Tensor.geometric_, torch.Tensor.log_normal_,
    torch.Tensor.cauchy_,
    # torch.nn.init hands its own function to the mode, and the draw inside it is not seen again
    torch.nn.init.uniform_, torch.nn.init.normal_, torch.nn.init.trunc_normal_,
    torch.nn.init.xavier_uniform_, torch.nn.init.xavier_normal_, torch.nn.init.kaiming_uniform_,
    torch.nn.init.kaiming_normal_, torch.nn.init.orthogonal_, torch.nn.init.sparse_,
}  # fmt: skip
_DROPOUTS = {torch.dropout, torch.feature_dropout, torch.nn.functional.dropout,
             torch.nn.functional.dropout1d, torch.nn.functional.dropout2d,
             torch.nn.functional.dropout3d}  # fmt: skip
_IN_PLACE_DROPOUTS = {torch.dropout_: torch.dropout, torch.feature_dropout_: torch.feature_dropout}
# Kept here: a test may hide it from torch.nn.functional to exercise the code's fallback.
_ATTENTION = torch.nn.functional.scaled_dot_product_attention


def _no_torch_function(*args: Any) -> bool:
    return False


class HostRandom(torch.overrides.TorchFunctionMode):
    """On XLA, draw random numbers from the CPU generator and move them to the device.

    XLA's generator gives other numbers than the CPU's for the same seed; drawing on the CPU keeps
    dropout masks, noise and initial values equal to the recording, so results stay comparable.
    """

    # torch.nn.functional and torch.nn.init hand a whole Python function to the mode, and the
    # draws inside it would not be seen; while the mode is on they skip that step, so the mode
    # sees the builtins they call (dropout, normal_, scaled_dot_product_attention, ...).
    _PYTHON_LEVEL = (torch.nn.functional, torch.nn.init)
    _CHECKS = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")

    def __enter__(self):
        self._saved = [
            (module, name, getattr(module, name))
            for module in self._PYTHON_LEVEL
            for name in self._CHECKS
            if hasattr(module, name)
        ]
        for module, name, _ in self._saved:
            setattr(module, name, _no_torch_function)
        return super().__enter__()

    def __exit__(self, *exc):
        for module, name, original in self._saved:
            setattr(module, name, original)
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _RANDOM_FACTORIES:
            given = list(tensors([args, kwargs]))
            on_xla = [t.device for t in given if t.device.type == "xla"]
            target = kwargs.get("device")
            if target is None and not given:
                # torch.set_default_device('xla') applies below this mode: without a device
                # of its own, a factory draws on the default device
                target = torch.get_default_device()
            if target is not None and torch.device(target).type == "xla":
                on_xla.append(torch.device(target))
            if on_xla:
                args, kwargs = map_tensors([list(args), dict(kwargs)], lambda t: t.cpu())
                if target is not None:
                    kwargs["device"] = "cpu"
                return func(*args, **kwargs).to(on_xla[0])
        elif func in _RANDOM_IN_PLACE:
            target = args[0] if args else kwargs.get("tensor")
            if isinstance(target, torch.Tensor) and target.device.type == "xla":
                on_cpu = target.detach().cpu()
                if args:
                    func(on_cpu, *args[1:], **kwargs)
                else:
                    func(**{**kwargs, "tensor": on_cpu})
                with torch.no_grad():
                    return target.copy_(on_cpu.to(target.device))
        elif func in _IN_PLACE_DROPOUTS and args and args[0].device.type == "xla":
            masked = self.__torch_function__(_IN_PLACE_DROPOUTS[func], types, args, kwargs)
            return args[0].copy_(masked)  # copy_ keeps the autograd history
        elif func in _DROPOUTS and args and isinstance(args[0], torch.Tensor):
            x = args[0]
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            probability = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            if x.device.type == "xla" and training and probability > 0:
                # The CPU computes dropout as x * mask; drawing the mask on ones gives that mask.
                ones = torch.ones(x.shape, dtype=x.dtype, device="cpu")
                mask = func(ones, probability, True)
                return x * mask.to(x.device)
        elif func in _RECURRENT and len(args) == 9 and isinstance(args[2], (list, tuple)):
            if args[0].device.type == "xla" and args[5] > 0 and args[6] and args[4] > 1:
                return _recurrent_with_cpu_dropout(func, *args)
        elif func is _ATTENTION:
            dropout = kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)
            if args and args[0].device.type == "xla" and dropout > 0:
                return _attention_with_cpu_dropout(*args, **kwargs)
        return func(*args, **kwargs)


# Kernels that draw their own dropout masks: run layer by layer, with the masks drawn as above.
_RECURRENT = {torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu}


def _cpu_dropout_mask(like: torch.Tensor, p: float) -> torch.Tensor:
    ones = torch.ones(like.shape, dtype=like.dtype, device="cpu")
    return torch.nn.functional.dropout(ones, p, True).to(like.device)


def _recurrent_with_cpu_dropout(func, input, hx, params, has_biases, layers, p, train, both, first):
    """A multi-layer RNN as the CPU computes it: each layer, then dropout on its output."""
    directions = 2 if both else 1
    per_layer = (4 if has_biases else 2) * directions
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    output, finals = input, [[] for _ in states]
    for layer in range(layers):
        rows = slice(layer * directions, (layer + 1) * directions)
        layer_hx = [state[rows] for state in states]
        layer_params = params[layer * per_layer : (layer + 1) * per_layer]
        hidden = layer_hx if isinstance(hx, (list, tuple)) else layer_hx[0]
        result = func(output, hidden, layer_params, has_biases, 1, 0.0, train, both, first)
        output = result[0]
        for collected, state in zip(finals, result[1:], strict=True):
            collected.append(state)
        if layer < layers - 1:
            output = output * _cpu_dropout_mask(output, p)
    return (output, *(torch.cat(collected) for collected in finals))


def _attention_with_cpu_dropout(query, key, value, attn_mask=None, dropout_p=0.0,
                                is_causal=False, scale=None, enable_gqa=False):  # fmt: skip
    """Scaled dot-product attention as the CPU's math kernel computes it, mask drawn on the CPU."""
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    if enable_gqa:
        repeat = query.size(-3) // key.size(-3)
        key, value = key.repeat_interleave(repeat, -3), value.repeat_interleave(repeat, -3)
    weights = query @ key.transpose(-2, -1) * scale
    if is_causal:
        allowed = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool, device=query.device)
        weights = weights.masked_fill(~allowed.tril(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            weights = weights.masked_fill(~attn_mask, float("-inf"))
        else:
            weights = weights + attn_mask
    weights = weights.softmax(-1)
    return (weights * _cpu_dropout_mask(weights, dropout_p)) @ value


class _NoMode:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _host_random():
    return HostRandom() if device_kind() == "xla" else _NoMode()


# --- running the program --------------------------------------------------------------------


class ProgramRun:
    def __init__(self, returncode: int, stdout: str, stderr: str, harness: list[dict[str, Any]]):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.steps = [step for record in harness for step in record["steps"]]
        self.executions = sum(record.get("device_executions") or 0 for record in harness)


def command_for_device(command: str, accelerator_flag: str | None, kind: str | None = None) -> str:
    """On the migrated side (xla, tpu), a `--device cpu` argument names its device, and an
    accelerator flag is passed."""
    kind = kind or device_kind()
    if kind not in MIGRATED_DEVICES:
        return command
    command = shell.parse(command).replace_value(("--device", "--device_type"), "cpu", kind)
    if accelerator_flag and not shell.parse(command).has_flag(accelerator_flag):
        command = f"{command} {accelerator_flag}"  # the python invocation ends the line
    return command


def run_program(
    root: Path,
    command: str,
    timeout: float,
    accelerator_flag: str | None = None,
    on_xla: str | None = None,
) -> ProgramRun:
    """Run the program's short command in `root` with the harness inside it, on this device;
    this environment's secrets stay out. On the migrated side (xla, tpu: the name is older than
    TorchTPU) `on_xla` runs instead, as written: the command with the accelerator on, which test
    generation wrote (a suite written before it passes `accelerator_flag`, and
    `command_for_device` makes that command)."""
    if on_xla is not None and device_kind() in MIGRATED_DEVICES:
        command = on_xla
    else:
        command = command_for_device(command, None if on_xla is not None else accelerator_flag)
    with tempfile.TemporaryDirectory(prefix="pytpu-run-") as out:
        settings = {"root": str(root), "out": out, "device": device_kind()}
        env = launch.program_environment(channel.HARNESS_ENV, settings)
        done = launch.run(command, root, env, timeout)  # (what it leaves behind is killed)
        if done.timed_out:
            raise subprocess.TimeoutExpired(command, timeout, done.stdout, done.stderr)
        harness = harness_records(Path(out))
    return ProgramRun(done.returncode, done.stdout, done.stderr, harness)


def harness_records(out: Path) -> list[dict[str, Any]]:
    """What the harness wrote into `out`, one record per process of the program."""
    return [torch.load(path, weights_only=True) for path in sorted(out.glob("harness-*.pt"))]


def check_program_ran(run: ProgramRun, on_device: bool = True) -> None:
    """The program exited with 0 and, with `on_device` on the XLA side, ran something there (a
    test comparing its numbers would compare the host with itself otherwise)."""
    if run.returncode != 0:
        # (reports keep a failure's first line: it names the exception)
        output = run.stderr or run.stdout
        raise AssertionError(launch.exit_message("the program", run.returncode, output))
    kind = device_kind()
    if on_device and kind in MIGRATED_DEVICES and not run.executions:
        raise AssertionError(
            f"PYTPU_DEVICE={kind} but the program ran nothing on the {kind.upper()} device"
        )


def expect_training_step(
    run: ProgramRun, recorded: list[dict[str, Any]], tolerance: float = 1.0
) -> None:
    """The first iteration of a training step: each optimizer step's loss and parameter norms
    (`tolerance`: a factor on the tolerances)."""
    check_program_ran(run)
    keys = {step["key"] for step in recorded}
    actual = [step for step in run.steps if step["key"] in keys][: len(recorded)]
    if len(actual) < len(recorded):
        raise AssertionError(f"the program made {len(actual)} of the {len(recorded)} steps")
    factor = GRADIENT_FACTOR * tolerance
    for index, (got, want) in enumerate(zip(actual, recorded, strict=True)):
        what = f"step {index + 1} ({want.get('optimizer', 'backward')} at {want['site']})"
        if want.get("loss") is not None:
            assert_close(got["loss"], want["loss"], factor, f"{what}: loss")
        if want.get("parameter_norms") is not None:
            assert_close(got["parameter_norms"], want["parameter_norms"], factor, f"{what}: norms")


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
METRIC_WORDS = re.compile(r"loss|cost|acc|ppl|perplexity|error|score|bleu|mse|mae", re.IGNORECASE)
# A printed tensor names its device unless it is the CPU (`tensor([0.5], device='xla:0')`): the
# same value printed on either side of the migration reads the same without it.
PRINTED_DEVICE = re.compile(r",\s*device='\w+(?::\d+)?'")


def metric_lines(stdout: str) -> list[tuple[str, list[float]]]:
    """Printed lines that report a metric, as (the line with numbers masked, the numbers)."""
    lines = []
    for line in PRINTED_DEVICE.sub("", stdout).splitlines():
        if METRIC_WORDS.search(line) and _NUMBER.search(line):
            lines.append((_shape(line), [float(n) for n in _NUMBER.findall(line)]))
    return lines


def _shape(line: str) -> str:
    """A printed line with its numbers masked; padding that depends on a number's width goes."""
    return re.sub(r"\s+", " ", _NUMBER.sub("#", line)).strip()


def expect_metrics(run: ProgramRun, recorded: list[list[Any]], tolerance: float = 1.0) -> None:
    """Each recorded metric line appears again, in order, with the same numbers (None: unstable;
    `tolerance`: a factor on the tolerance)."""
    check_program_ran(run)
    remaining = iter(metric_lines(run.stdout))
    for pattern, numbers in recorded:
        found = next((got for shape, got in remaining if shape == _shape(pattern)), None)
        if found is None:
            raise AssertionError(f"no printed line like {pattern!r}")
        for want, got in zip(numbers, found, strict=True):
            if want is not None and not metric_close(got, want, tolerance):
                raise AssertionError(f"{pattern!r}: printed {got}, recorded {want}")


def metric_close(got: float, want: float, tolerance: float = 1.0) -> bool:
    """A printed number agrees with its recording: relative METRIC_RTOL (times `tolerance`), or
    one and a half units in the recording's last printed digit."""
    rtol = METRIC_RTOL * tolerance
    return math.isclose(got, want, rel_tol=rtol, abs_tol=1.5 * 10 ** -_decimals(want))


def _decimals(number: float) -> int:
    text = repr(number)
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0


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

    def expect_training_step(self, run: ProgramRun, recorded: list[dict[str, Any]]) -> None:
        expect_training_step(run, recorded, self.tolerance)

    def expect_metrics(self, run: ProgramRun, recorded: list[list[Any]]) -> None:
        expect_metrics(run, recorded, self.tolerance)
