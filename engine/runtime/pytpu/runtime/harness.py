"""PyTPU's harness inside the user's program: what test generation and the suite's program runs
record.

`pytpu.runtime.bootstrap` installs it when PYTPU_HARNESS is set (on the CPU after mapping the
program's CUDA calls there). It fixes the seeds, records the first iteration of each training
step, and, while `pytpu testgen` records, the first inputs of each module and function the
repository defines. What it saw is written at exit, one file per process.
"""

from __future__ import annotations

import ast
import atexit
import dis
import functools
import inspect
import linecache
import os
import sys
import types
import weakref
from pathlib import Path
from typing import Any

import torch

from pytpu.runtime import descriptions
from pytpu.runtime.cells import MAGIC_BODY, source_file
from pytpu.runtime.descriptions import describable_output, describe, describe_input
from pytpu.runtime.host_random import HostRandom
from pytpu.runtime.placement import SEED, map_tensors, seed_everything, tensors
from pytpu.runtime.records import (
    HarnessRecord,
    StepRecord,
    UnitInputs,
    UnitRecord,
    UnitUnavailable,
)
from pytpu.runtime.repository_files import RepositoryFiles, class_file, is_main, module_file
from pytpu.runtime.support import batch_size, definitions

# --- the harness ---------------------------------------------------------------------------------


def _leaves(loss: torch.Tensor) -> list[torch.Tensor]:
    """The leaf tensors whose gradients a backward pass from `loss` accumulated (its graph's
    AccumulateGrad nodes), each once."""
    leaves: dict[int, torch.Tensor] = {}
    seen: dict[int, Any] = {}  # (the nodes kept, so that no id is reused while walking)
    stack = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves.setdefault(id(variable), variable)
        stack.extend(following for following, _ in node.next_functions)
    return list(leaves.values())


# Samples kept of a recorded batch (the leading dimension of the inputs).
KEPT_SAMPLES = 4


def _over_nodes(tensor: torch.Tensor, size: int) -> bool:
    """A sparse tensor, or a square one over the leading size (an adjacency of N nodes)."""
    return tensor.layout is not torch.strided or tensor.shape[:2] == (size, size)


# A gradient this much smaller than the largest of its optimizer's is rounding left where the
# exact gradient is zero (a convolution's bias before a BatchNorm, which subtracts it again): an
# adaptive optimizer (Adam) turns its signs into a full step, and another backend rounds to other
# signs, so that parameter's norm after the step is not behaviour to pin.
ROUNDING_GRADIENT = 1e-5


def _rounding_only(parameters: list[torch.Tensor]) -> list[int]:
    """The positions of the parameters whose gradient is only rounding (none without a grad)."""
    largest = {}
    for index, parameter in enumerate(parameters):
        grad = parameter.grad
        if grad is None or not grad.numel():
            continue
        if grad.is_sparse:
            grad = grad.coalesce().values()
        largest[index] = float(grad.detach().abs().max()) if grad.numel() else 0.0
    top = max(largest.values(), default=0.0)
    return [index for index, value in largest.items() if top and value <= ROUNDING_GRADIENT * top]


class Harness(RepositoryFiles):
    """What the harness watches in one process of the program."""

    def __init__(self, settings: dict[str, Any]):
        super().__init__(settings["root"])
        self.settings = settings
        self.out = Path(settings["out"])
        self.capture = settings.get("capture", False)
        self.recording = settings.get("recording", False)
        self.max_unit_bytes = settings.get("max_unit_bytes", 1 << 20)
        self.steps: list[StepRecord] = []  # optimizer steps of the first iteration of each site
        self.finished_sites: set[str] = set()
        self.stepped: dict[str, set[int]] = {}
        self.step_lines: dict[tuple[str, str, str], list[int]] = {}
        self.backwards: list[StepRecord] = []  # first backward passes of each call site
        self.last_loss: float | None = None
        self.in_backward = False
        self.units: dict[str, UnitRecord] = {}  # captured modules and functions
        self.skipped: dict[str, str] = {}
        self.constructors: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.busy = False
        self.probe_failures: dict[str, str] = {}
        self.probing: str | None = None  # the class being called for the suite, not the program
        self.written = False
        # (a recording run that nudges the parameters after each backward pass: see `nudge`)
        self.rounding = torch.Generator().manual_seed(SEED) if settings.get("nudge") else None

    # where code comes from

    def call_site(self) -> tuple[str, int, str] | None:
        """The innermost frame of the repository's code: file, line and function. The body of
        a `%%time` cell is the cell's: IPython compiles it apart, its lines after the magic's."""
        frame, body = sys._getframe(2), None
        while frame is not None:
            code = frame.f_code
            if self.in_repo(code.co_filename):
                line, name = self.line(code.co_filename, frame.f_lineno), code.co_qualname
                if body is not None:
                    line, name = line + body.f_lineno, body.f_code.co_qualname
                return self.relative(code.co_filename), line, name
            if code.co_filename == MAGIC_BODY and body is None:
                body = frame
            elif code.co_name == "run_line_magic":
                body = None  # `%time x = f()`: on the magic's own line
            frame = frame.f_back
        return None

    # installation

    def install(self) -> None:
        seed_everything(self.settings.get("seed", SEED))
        if self.settings.get("device", "cpu") != "cpu":
            # The migrated code runs as it is (a CUDA call left in it must show), its random
            # numbers drawn as on the CPU.
            HostRandom().__enter__()
        self._watch_training()
        if self.capture:
            self._watch_units()
        atexit.register(self.write)
        descriptions.class_source = self.class_source  # (a notebook's classes by their cell)

    def cell_ran(self) -> None:
        # In a kernel, IPython clears the notebook's namespace at exit, by an atexit function
        # registered as the kernel started, after the one above: registered again now, the
        # write runs first (atexit runs the latest first) and can still call the cells' classes.
        atexit.unregister(self.write)
        atexit.register(self.write)

    def class_source(self, cls: type) -> str:
        """The file a class is defined in, as a path: a notebook cell's class as
        `<root>/nb.ipynb#cell5`, or, without code of its own there (a dataclass's methods are
        made from strings), `<root>/nb.ipynb`."""
        filename = class_file(cls)
        if filename and self.in_repo(filename):
            return str(self.root / self.relative(filename))
        if is_main(cls.__module__) and self.notebooks():
            return str(self.root / self.notebooks()[0])
        return filename or ""

    def _watch_training(self) -> None:
        harness = self
        original_backward = torch.Tensor.backward

        def backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            # Under a TorchFunctionMode, Tensor.backward calls itself again through the mode:
            # one backward pass is noted once.
            if tensor.numel() == 1 and not harness.in_backward:
                harness.last_loss = float(tensor.detach().cpu().double())
                harness.note_backward()
            outer, harness.in_backward = harness.in_backward, True
            try:
                result = original_backward(tensor, *args, **kwargs)
            finally:
                harness.in_backward = outer
            if harness.rounding is not None and not outer:
                harness.nudge(tensor)
            return result

        torch.Tensor.backward = backward
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        register_optimizer_step_pre_hook(self._before_step)
        register_optimizer_step_post_hook(self._after_step)

    def site_key(self, site: tuple[str, int, str], kind: str) -> str:
        # Lines move when code is migrated; the k-th call site of a function does not.
        file, line, function = site
        lines = self.step_lines.setdefault((file, function, kind), [])
        if line not in lines:
            lines.append(line)
        return f"{file}::{function}#{kind}{lines.index(line) + 1}"

    def nudge(self, loss: torch.Tensor) -> None:
        """Move each float leaf the loss was computed from (the parameters) by one rounding
        error, up or down at random: another backend rounds differently (XLA fuses and
        reorders float work), and a printed number that such a nudge changes (a loss printed
        after a stop that depends on it, a long chaotic run) is not behaviour a test can pin
        across the migration."""
        with torch.no_grad():
            for leaf in _leaves(loss):
                if leaf.is_floating_point() and leaf.numel():
                    signs = torch.randint(0, 2, leaf.shape, generator=self.rounding) * 2 - 1
                    step = torch.finfo(leaf.dtype).eps
                    leaf.mul_(1 + step * signs.to(device=leaf.device, dtype=leaf.dtype))

    def note_backward(self) -> None:
        """The losses of the first two backward passes of each call site: where parameters are
        updated by hand, the second loss shows the update."""
        site = self.call_site()
        if site is None:
            return
        key = self.site_key(site, "backward")
        if sum(event["key"] == key for event in self.backwards) < 2:
            event: StepRecord = {"site": f"{site[0]}:{site[1]}", "key": key, "loss": self.last_loss}
            self.backwards.append(event)

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        site = self.call_site()
        optimizer._pytpu_site = None
        if site is None:
            return
        file, line, function = site
        key = self.site_key(site, "step")
        stepped = self.stepped.setdefault(key, set())
        if id(optimizer) in stepped:
            self.finished_sites.add(key)
        if key in self.finished_sites:
            return
        stepped.add(id(optimizer))
        optimizer._pytpu_site = key
        self.steps.append(
            {
                "site": f"{file}:{line}",
                "key": key,
                "optimizer": type(optimizer).__name__,
                "loss": self.last_loss,
            }
        )

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if getattr(optimizer, "_pytpu_site", None) is None:
            return
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        if any(p.device.type == "xla" for p in parameters):
            # Read one by one before a barrier, two parameters whose updates are alike (an LSTM's
            # two biases) came back as one, and stayed so (torch_xla 2.9): end the step first.
            import torch_xla

            torch_xla.sync()
        norms: list[float | None] = [float(p.detach().cpu().double().norm()) for p in parameters]
        if self.recording:
            for index in _rounding_only(parameters):
                norms[index] = None
        self.steps[-1]["parameter_norms"] = norms
        optimizer._pytpu_site = None

    # capturing the first inputs of each module and function (recording only)

    def _watch_units(self) -> None:
        harness = self
        module_init = torch.nn.Module.__init__
        module_call = torch.nn.Module.__call__

        def init(module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
            module_init(module, *args, **kwargs)
            if harness.is_repo_class(type(module)):
                harness.constructors[module] = harness.constructor_arguments(module)

        def call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            cls = type(module)
            if harness.busy or not harness.is_repo_class(cls):
                return module_call(module, *args, **kwargs)
            name = harness.class_id(cls)
            if name in harness.units or name in harness.skipped:
                return module_call(module, *args, **kwargs)
            harness.busy = True
            try:
                harness.capture_module(module, name, args, kwargs)
            except Exception as exc:  # noqa: BLE001 - recording must never stop the program
                harness.skipped[name] = f"the harness could not record it: {_first_line(exc)}"
            finally:
                harness.busy = False
            return module_call(module, *args, **kwargs)

        torch.nn.Module.__init__ = init
        torch.nn.Module.__call__ = call
        sys.setprofile(self._profile)

    def is_repo_class(self, cls: type) -> bool:
        filename = class_file(cls)
        return bool(filename) and self.in_repo(filename)

    def class_id(self, cls: type) -> str:
        return f"{self.relative(class_file(cls))}::{cls.__qualname__}"

    def constructor_arguments(self, module: torch.nn.Module) -> dict[str, Any]:
        """The arguments of the outermost __init__ of this instance, read from its frame."""
        frame, outer = sys._getframe(2), None
        while frame is not None and frame.f_code.co_name == "__init__":
            names = frame.f_code.co_varnames
            if not names or frame.f_locals.get(names[0]) is not module:
                break
            outer, frame = frame, frame.f_back
        if outer is None:
            return {"error": "constructed without an __init__ of its own"}
        info = inspect.getargvalues(outer)
        arguments = {name: info.locals[name] for name in info.args[1:]}
        if info.varargs and info.locals.get(info.varargs):
            return {"error": f"constructed with *{info.varargs}"}
        if info.keywords:
            arguments.update(info.locals.get(info.keywords) or {})
        try:
            return {"kwargs": {key: describe(value) for key, value in arguments.items()}}
        except UnitUnavailable as exc:
            return {"error": str(exc)}

    def script_globals(
        self, code_objects: list[types.CodeType], namespace: dict, name: str
    ) -> dict:
        """Module-level values a script's (or notebook's) definition reads, the definition's
        file named `name` (scripts and notebooks are loaded without running).

        Names the script binds by an import, def or class are loaded with it; every other global
        the code reads must be written down, or the unit cannot be reproduced.
        """
        names: set[str] = set()
        pending = list(code_objects)
        while pending:
            code = pending.pop()
            names.update(
                i.argval
                for i in dis.get_instructions(code)
                if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")
            )
            pending.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        defined = _defined_names(str(self.root / source_file(name)))
        return {
            name: describe(namespace[name])
            for name in sorted(names)
            if name in namespace and name not in defined and not name.startswith("__")
        }

    def capture_module(self, module: torch.nn.Module, name: str, args: tuple, kwargs: dict) -> None:
        cls = type(module)
        constructor = self.constructors.get(module, {"error": "constructed before recording"})
        if "error" in constructor:
            self.skipped[name] = constructor["error"]
            return
        try:
            file = name.partition("::")[0]
            script = is_main(cls.__module__)
            inputs = self.unit_inputs(args, kwargs)
            functions = [f for f in vars(cls).values() if isinstance(f, types.FunctionType)]
            namespace = functions[0].__globals__ if functions else vars(sys.modules[cls.__module__])
            codes = [f.__code__ for f in functions]
            record: UnitRecord = {
                "kind": "module",
                "file": file,
                "line": self.class_line(cls),
                "script": script,
                **inputs,
                "globals": self.script_globals(codes, namespace, file) if script else {},
                "constructor": constructor["kwargs"],
                "training": module.training,
                "submodule_of_repo": False,
            }
        except UnitUnavailable as exc:
            self.skipped[name] = str(exc)
            return
        except (OSError, TypeError) as exc:
            self.skipped[name] = f"not inspectable: {exc}"
            return
        if self.probing:
            record["probe"] = self.probing
        self.units[name] = record
        self.skipped.pop(name, None)

    def class_line(self, cls: type) -> int:
        """The line of a class (inspect does not find a notebook cell's: its first method's)."""
        try:
            return inspect.getsourcelines(cls)[1]
        except (OSError, TypeError):
            codes = [f.__code__ for f in vars(cls).values() if isinstance(f, types.FunctionType)]
            if not codes:
                raise
            return min(self.line(c.co_filename, c.co_firstlineno) for c in codes)

    def unit_inputs(self, args: tuple, kwargs: dict) -> UnitInputs:
        """A unit's inputs as its record keeps them: `args` and `kwargs` on the CPU, a large
        batch cut to its first rows."""
        if not tensors([args, kwargs]):
            raise UnitUnavailable("called without tensor inputs")
        for value in [*args, *kwargs.values()]:
            describe_input(value)
        args, kwargs = map_tensors([list(args), dict(kwargs)], lambda t: t.detach().cpu().clone())
        size = sum(t.numel() * t.element_size() for t in tensors([args, kwargs]))
        kept = 0  # the rows kept of a batch cut short
        batch = batch_size([args, kwargs]) if any(t.dim() for t in tensors(args)) else 0
        if batch > KEPT_SAMPLES:  # a few samples pin the behaviour; outputs stay small too
            # (a graph's adjacency, sparse or a dense N x N, says the leading size is no batch:
            # its rows and columns are the same nodes; such inputs are kept whole, if small)
            if not any(_over_nodes(t, batch) for t in tensors([args, kwargs])):
                args, kwargs = self.cut_batch(args, kwargs)
                kept = KEPT_SAMPLES
            size = sum(t.numel() * t.element_size() for t in tensors([args, kwargs]))
            if size > self.max_unit_bytes:
                raise UnitUnavailable(
                    f"its inputs take {size // 1024} KiB, over the {self.max_unit_bytes // 1024}"
                    " KiB a unit may record; raise --max-unit-kib or exclude the unit"
                )
        inputs: UnitInputs = {"args": list(args), "kwargs": kwargs}
        if kept:
            inputs["cut"], inputs["batch"] = kept, batch
        return inputs

    def cut_batch(self, args: list, kwargs: dict) -> tuple[list, dict]:
        """Keep the first few samples of inputs that share the first input's leading size."""
        size = batch_size([args, kwargs])
        return map_tensors(
            [args, kwargs],
            lambda t: t[:KEPT_SAMPLES].clone() if t.dim() and t.shape[0] == size else t,
        )

    def _profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event != "call" and event != "return":
            return
        code = frame.f_code
        if not self.in_repo(code.co_filename) or "." in code.co_qualname:
            return
        if code.co_name.startswith("<") or frame.f_globals.get(code.co_name) is None:
            return
        name = f"{self.relative(code.co_filename)}::{code.co_name}"
        if event == "call":
            if name in self.units or name in self.skipped or self.busy:
                return
            info = inspect.getargvalues(frame)
            if info.varargs or info.keywords:
                return
            values = [info.locals[a] for a in info.args]
            if not tensors(values):
                return
            self.busy = True
            try:
                file, script = name.partition("::")[0], is_main(frame.f_globals["__name__"])
                self.units[name] = {
                    "kind": "function",
                    "file": file,
                    "line": self.line(code.co_filename, code.co_firstlineno),
                    "script": script,
                    **self.unit_inputs(tuple(values), {}),
                    "globals": self.script_globals([code], frame.f_globals, file) if script else {},
                    "pending": id(frame),
                }
            except UnitUnavailable as exc:
                self.skipped[name] = str(exc)
            except Exception as exc:  # noqa: BLE001 - recording must never stop the program
                self.skipped[name] = f"the harness could not record it: {_first_line(exc)}"
            finally:
                self.busy = False
        else:
            record = self.units.get(name)
            if record is None or record.get("pending") != id(frame):
                return
            del record["pending"]
            if not tensors(arg) or not describable_output(arg):
                del self.units[name]
                self.skipped.setdefault(name, "does not return tensors")

    def write(self) -> None:
        if self.written:
            return
        self.written = True
        sys.setprofile(None)
        if self.capture:
            # Twice: a class may be called inside another that comes later in the list.
            for probe in self.settings.get("probes", ()):
                self.call_uncalled(probe)
            for name, reason in self.probe_failures.items():
                if name not in self.units:
                    self.skipped.setdefault(name, reason)
        for name, record in list(self.units.items()):
            if record.pop("pending", None) is not None:
                del self.units[name]
        result: HarnessRecord = {
            "steps": self.steps + self.backwards,
            "files": self.files_run(),
            "units": self.units,
            "skipped": self.skipped,
            "device_executions": _device_executions(),
        }
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"harness-{os.getpid()}.pt"
        torch.save(result, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)

    def files_run(self) -> list[str]:
        """The repository's files the program loaded, and the notebook cells it ran (code that
        linecache keeps without a file: what a kernel compiled)."""
        files = {
            self.relative(filename)
            for module in list(sys.modules.values())
            if (filename := module_file(module)) and self.in_repo(filename)
        }
        for filename, entry in list(linecache.cache.items()):
            if len(entry) == 4 and entry[1] is None and self.in_repo(filename):
                files.add(self.relative(filename))
        return sorted(files)

    # classes the run never called: constructed as the repository does, fed what the first layer
    # expects

    def call_uncalled(self, probe: dict[str, Any]) -> None:
        name = f"{probe['file']}::{probe['class']}"
        if name in self.units:
            return
        cls = getattr(self.loaded(probe["file"]), probe["class"], None)
        if not isinstance(cls, type):
            return
        try:
            arguments = self.probe_arguments(cls, probe)
            seed_everything()
            module = cls(**arguments)
            example, layer = first_layer_input(module)
            self.skipped.pop(name, None)
            self.probing = probe["class"]
            module(example)
        except Exception as exc:  # noqa: BLE001 - the user's code may raise anything
            self.units.pop(name, None)
            # Noted apart: the class may still be called inside one probed later.
            self.probe_failures[name] = (
                f"not called by the run, and a call made for it failed: {exc}"
            )
            return
        finally:
            self.probing = None
        if name in self.units:
            self.units[name]["made_for"] = layer

    def loaded(self, relative: str) -> types.ModuleType | None:
        if source_file(relative) in self.notebooks():
            return sys.modules.get("__main__")  # a kernel's namespace: its notebook's cells'
        path = (self.root / relative).resolve()
        for module in list(sys.modules.values()):
            filename = module_file(module)
            if filename and Path(filename).resolve() == path:
                return module
        return None

    def probe_arguments(self, cls: type, probe: dict[str, Any]) -> dict[str, Any]:
        """The constructor arguments of a call site, evaluated where it is (plain expressions
        only), or none when every parameter has a default."""
        parameters = list(inspect.signature(cls).parameters)
        problems = []
        for site in probe.get("sites", ()):
            namespace = getattr(self.loaded(site["file"]), "__dict__", None)
            if namespace is None:
                problems.append(f"{site['file']} is not loaded")
                continue
            try:
                values = [_evaluate(source, namespace) for source in site["args"]]
                keywords = {k: _evaluate(v, namespace) for k, v in site["kwargs"].items()}
            except (NameError, AttributeError, ValueError) as exc:
                problems.append(f"{site['file']}: {exc}")
                continue
            return {**dict(zip(parameters, values, strict=False)), **keywords}
        signature = inspect.signature(cls)
        if all(p.default is not p.empty for p in signature.parameters.values()):
            return {}
        detail = "; ".join(dict.fromkeys(problems)) or "it is never constructed"  # (once each)
        raise UnitUnavailable(f"no constructor arguments known when the run ended ({detail})")


def _evaluate(source: str, namespace: dict[str, Any]) -> Any:
    """Evaluate a name, attribute, literal or arithmetic on them; nothing that calls code."""
    tree = ast.parse(source, mode="eval")
    allowed = (ast.Expression, ast.Name, ast.Attribute, ast.Constant, ast.Load, ast.BinOp,
               ast.UnaryOp, ast.operator, ast.unaryop, ast.Tuple, ast.List)  # fmt: skip
    if not all(isinstance(node, allowed) for node in ast.walk(tree)):
        raise ValueError(f"{source}: not a plain expression")
    return eval(compile(tree, "<call site>", "eval"), dict(namespace))  # noqa: S307


def first_layer_input(module: torch.nn.Module) -> tuple[torch.Tensor, str]:
    """An input of the shape the module's first layer expects: token ids for an embedding,
    else features for the first linear, convolution or recurrent layer."""
    layers = list(module.modules())
    embedding = next((m for m in layers if isinstance(m, torch.nn.Embedding)), None)
    if embedding is not None:
        ids = torch.randint(0, embedding.num_embeddings, (8, KEPT_SAMPLES))
        return ids, f"token ids for its {embedding}"
    for layer in layers:
        if isinstance(layer, torch.nn.Linear):
            return torch.randn(KEPT_SAMPLES, layer.in_features), f"features for its {layer}"
        if isinstance(layer, torch.nn.modules.conv._ConvNd):
            size = (KEPT_SAMPLES, layer.in_channels, *[16] * len(layer.kernel_size))
            return torch.randn(size), f"images for its {layer}"
        if isinstance(layer, torch.nn.RNNBase):
            shape = (KEPT_SAMPLES, 8) if layer.batch_first else (8, KEPT_SAMPLES)
            return torch.randn(*shape, layer.input_size), f"sequences for its {layer}"
    raise UnitUnavailable("no embedding, linear, convolution or recurrent layer to size an input")


def _device_executions() -> int | None:
    """What ran on the migrated side's device: XLA's executed graphs, or the ops the TorchTPU
    stand-in ran (None: neither is loaded, or TorchTPU's own device, which counts nothing)."""
    standin = sys.modules.get("pytpu.runtime.tpu_standin")
    if standin is not None and standin.active():
        return standin.executions()
    if "torch_xla" not in sys.modules:
        return None
    import torch_xla.debug.metrics as met

    return (met.counter_value("ExecuteComputation") or 0) + (
        met.counter_value("ExecuteReplicated") or 0
    )


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


@functools.cache
def _defined_names(filename: str) -> frozenset[str]:
    """Names a file (a script, or a notebook's cells) binds by imports, defs and classes at
    module level."""
    try:
        trees = definitions(Path(filename))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    names = set()
    for node in (node for _, tree in trees for node in tree.body):
        for inner in ast.walk(node) if isinstance(node, ast.Try) else [node]:
            if isinstance(inner, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in inner.names)
            elif isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(inner.name)
    return frozenset(names)


def install(settings: dict[str, Any]) -> None:
    """Called by `pytpu.runtime.bootstrap` inside the user's program when PYTPU_HARNESS is set."""
    Harness(settings).install()
