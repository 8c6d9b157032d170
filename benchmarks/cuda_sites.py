"""CUDA-specific sites of Python source, found with the standard library's `ast` alone.

The wild-corpus benchmark (`benchmarks/wild.py`) measures how many of these sites the engine
leaves with neither a rewrite nor a diagnostic. To be a fair judge the scanner shares nothing
with the engine: no KB, no libcst, none of its analysis; it reads imports with a small
flow-insensitive table (`import torch.backends.cudnn as cudnn`, `from torch.cuda.amp import
autocast`) and classifies what it sees by the categories below, one category per site.

Strings count only when the whole string is a device word ('cuda', 'cuda:0', 'gpu', 'nccl',
f'cuda:{rank}', 'cuda:{}'), so help texts and docs are never sites; a string used as a
subscript key (`cfg['gpu']`) or an attribute name (`getattr(args, 'cuda')`) is a name, not a
device, and docstrings (string statements) are skipped.

Not sites, on purpose: a DataLoader's `pin_memory=True` (it only warns without an NVIDIA
driver), `non_blocking=True` (a no-op hint elsewhere), `args.cuda`-style flags and
`self.is_cuda` (the user's own settings; what sets them is a site), `device_ids=` of other
functions than (Distributed)DataParallel, `isinstance(m, nn.DataParallel)` (unwrapping works
anywhere) and `torch.autocast(device_type=x)` with a variable (the literal that sets `x` is the
site). Nor are a message's strings (`print('cuda')`, `logger.info('gpu')`).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

# Every category with the one-line reason it is CUDA-specific (the order of the report).
CATEGORIES: dict[str, str] = {
    "cuda_api": "torch.cuda.* (devices, streams, events, memory, seeds, tensor types) and "
    "torch.version.cuda: the CUDA runtime, which a TPU host does not have",
    "tensor_cuda": "x.cuda(...): moves to a CUDA device; fails without one",
    "is_cuda": "x.is_cuda (read, not on self): False for XLA tensors, so the guarded code "
    "silently changes branch",
    "backends": "torch.backends.cuda* / torch.backends.cudnn*: cuBLAS/cuDNN switches, "
    "meaningless on a TPU",
    "amp": "torch.cuda.amp.*, GradScaler(...), autocast with a 'cuda' device: float16 mixed "
    "precision with loss scaling, set up for CUDA",
    "nccl": "'nccl', torch.cuda.nccl, Backend.NCCL: NVIDIA's collectives; a TPU uses 'xla'",
    "device_string": "a whole-string device word ('cuda', 'cuda:0', 'gpu', f'cuda:{rank}'): "
    "names a CUDA device",
    "cuda_env": "CUDA_*/NCCL_*/CUDNN_* variable names (CUDA_VISIBLE_DEVICES...): select or "
    "tune GPUs",
    "data_parallel": "nn.DataParallel(...): parallel over CUDA devices only; one device elsewhere",
    "device_ids": "device_ids=/output_device= given to (Distributed)DataParallel/DDP: CUDA "
    "device indices",
    "pin_memory": "x.pin_memory() and torch factories with pin_memory=True: raise without an "
    "NVIDIA driver",
    "cuda_other": "other CUDA-only code: apex, cupy, pycuda, pynvml, numba.cuda, CUDAExtension, "
    "CUDA_HOME (NVIDIA's libraries, kernels and their toolchain)",
    "import": "imports of NVIDIA-only packages (apex, cupy, pycuda, pynvml, numba.cuda) and the "
    "CUDA toolchain: they fail on a TPU host (an import of torch's own CUDA modules, such as "
    "torch.backends.cudnn, works on any build: its uses are the sites)",
}

# 'cuda', 'cuda:0', 'gpu', and the templates of a formatted device ('cuda:{}', 'cuda:%d').
DEVICE_WORD = re.compile(r"(cuda|gpu)(:(\d+|%[ds]|\{[^{}]*\}))?")
ENV_NAME = re.compile(r"([A-Z]+_)?(CUDA|NCCL|CUDNN)_[A-Z0-9_]+")
# Names in the import table that are CUDA modules or CUDA toolchain objects.
CUDA_SEGMENTS = frozenset({"cuda", "cudnn", "nccl"})
CUDA_PACKAGES = frozenset({"apex", "cupy", "pycuda", "pynvml"})  # NVIDIA-only libraries
TOOLCHAIN = frozenset({"CUDAExtension", "CUDA_HOME"})
DATA_PARALLEL = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel.DataParallel",
    }
)
AUTOCAST = frozenset({"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"})
# Arguments whose string literal names an attribute, not a device.
ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "hasattr", "setattr", "delattr"})
# Functions whose string arguments are messages for people: print("cuda"), logger.info("gpu").
MESSAGE_FUNCTIONS = frozenset(
    {"print", "debug", "info", "warning", "warn", "error", "critical", "exception", "write"}
)


@dataclass(frozen=True)
class Site:
    line: int
    column: int
    category: str
    idiom: str  # what the site is, to group sites: `torch.cuda.synchronize()`, `'cuda' in eq`
    code: str  # the source line, stripped
    # The first line of the innermost call the site is part of (0 outside calls): a tool that
    # reports a whole call, at its first line, has reported this site too.
    call_line: int = 0
    # The first line of the statement the site is in: a tool that reports an expression written
    # over several lines (a parenthesised chain, an outer call) at its first line reports it
    # between this line and the site's.
    statement_line: int = 0


def scan(text: str) -> list[Site]:
    """The CUDA-specific sites of `text`, in source order. Raises SyntaxError (and ValueError
    for null bytes) when `text` is not Python that this interpreter parses."""
    tree = ast.parse(text)
    # The interpreter's line breaks only (str.splitlines also splits at form feeds).
    scanner = _Scanner(_imports(tree), re.split(r"\r\n|\r|\n", text))
    scanner.visit(tree)
    return sorted(scanner.sites, key=lambda s: (s.line, s.column, s.category))


def scan_file(path: Path) -> list[Site] | None:
    """`scan` of a file; None when it does not parse here (the engine skips those too)."""
    data = path.read_bytes()
    try:
        # The file's declared encoding, a byte-order mark included.
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return scan(data.decode(encoding, errors="replace"))
    except (SyntaxError, ValueError, LookupError, RecursionError):
        return None


def _imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> qualified name for every import in the file, wherever it is (a function's
    imports too: the scanner does not follow scopes, it only needs to know what a name means)."""
    table: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    table[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    table[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    table[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return table


def _chain(node: ast.expr) -> list[str] | None:
    """`a.b.c` -> ['a', 'b', 'c']; None when the chain does not start at a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _is_device_word(node: ast.expr | None) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and DEVICE_WORD.fullmatch(node.value) is not None
    )


class _Scanner(ast.NodeVisitor):
    def __init__(self, imports: dict[str, str], lines: list[str]) -> None:
        self.imports = imports
        self.lines = lines
        self.sites: list[Site] = []
        # ids of strings that are no devices: keys, attribute names, messages, and arguments
        # already counted with their call (torch.autocast('cuda')).
        self.names: set[int] = set()
        self.parents: list[ast.AST] = []  # the nodes being visited, outermost first

    def visit(self, node: ast.AST) -> None:
        self.parents.append(node)
        super().visit(node)
        self.parents.pop()

    def add(self, node: ast.AST, category: str, idiom: str) -> None:
        line = getattr(node, "lineno", 0)
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        calls = [p for p in self.parents if isinstance(p, ast.Call) and p is not node]
        call_line = calls[-1].lineno if calls else 0
        statements = [p for p in self.parents if isinstance(p, ast.stmt)]
        statement_line = statements[-1].lineno if statements else line
        column = getattr(node, "col_offset", 0)
        self.sites.append(Site(line, column, category, idiom, code, call_line, statement_line))

    def role(self) -> str:
        """Where the string being visited stands: `==`, `device=`, `torch.device(...)`..."""
        parent = self.parents[-2] if len(self.parents) > 1 else None
        if isinstance(parent, ast.keyword):
            return f"{parent.arg}="
        if isinstance(parent, ast.Compare):
            return type(parent.ops[0]).__name__.lower()
        if isinstance(parent, ast.Call):
            parts = _chain(parent.func)
            return f"{'.'.join(parts) if parts else '...'}(...)"
        return type(parent).__name__.lower() if parent else "module"

    def qualified(self, parts: list[str]) -> tuple[str, bool]:
        """The dotted name and whether its head is imported (`torch` counts as imported even
        without an import: files that get it from a star import still mean torch)."""
        head = self.imports.get(parts[0])
        if head is None:
            return ".".join(parts), parts[0] == "torch"
        return ".".join([head, *parts[1:]]), True

    # --- names and attribute chains -----------------------------------------------------

    def reference(self, node: ast.expr, call: ast.Call | None = None) -> bool:
        """Record a name or attribute chain that refers to CUDA API; True when it was one
        (a pure chain holds nothing else to visit)."""
        parts = _chain(node)
        if parts is None:
            return False
        if parts[-1] == "is_cuda":
            # Not a variable `is_cuda`, nor the user's own `self.is_cuda`, nor an assignment.
            if len(parts) > 1 and parts[0] != "self" and isinstance(node.ctx, ast.Load):
                self.add(node, "is_cuda", "x.is_cuda")
            return True
        dotted, imported = self.qualified(parts)
        if call and len(parts) > 1 and parts[-1] == "cuda" and not dotted.startswith("torch."):
            category: str | None = "tensor_cuda"  # model.cuda(): a method of the user's object
            dotted = "x.cuda"
        else:
            category = self.classify(dotted, call) if imported else None
        if category is not None:
            self.add(node, category, f"{dotted}()" if call else dotted)
        return True

    def classify(self, dotted: str, call: ast.Call | None) -> str | None:
        """The category of an imported dotted name (and of its call, when it is called)."""
        segments = dotted.split(".")
        if dotted.startswith("torch.cuda.amp"):
            return "amp"
        if (
            dotted.startswith("torch.cuda.nccl")
            or dotted.endswith("Backend.NCCL")
            or segments[-1] == "is_nccl_available"
        ):
            return "nccl"
        if segments[:2] == ["torch", "cuda"] or dotted == "torch.version.cuda":
            return "cuda_api"
        if segments[:2] == ["torch", "backends"] and len(segments) > 2:
            return "backends" if segments[2].startswith("cud") else None
        if segments[0] == "torch" and call is not None:
            return self.classify_call(dotted, segments[-1], call)
        if (
            segments[-1] in TOOLCHAIN
            or segments[0] in CUDA_PACKAGES
            or (segments[0] != "torch" and CUDA_SEGMENTS.intersection(segments))
        ):
            return "cuda_other"
        return None

    def classify_call(self, dotted: str, name: str, call: ast.Call) -> str | None:
        """Calls of torch API that are CUDA-specific by their arguments or by default."""
        device = call.args[0] if call.args else None
        for keyword in call.keywords:
            if keyword.arg in ("device", "device_type"):
                device = keyword.value
        if name == "GradScaler" or dotted in AUTOCAST:
            # GradScaler's device defaults to 'cuda'; autocast needs its device named. A device
            # held in a variable is no site here (where the variable is set may be).
            if _is_device_word(device) or (device is None and name == "GradScaler"):
                self.names.add(id(device))  # the 'cuda' argument is part of this site
                return "amp"
            return None
        if dotted in DATA_PARALLEL:
            return "data_parallel"
        if name == "DataLoader":
            return None  # its pin_memory=True only warns
        if any(_is_true_keyword(k, "pin_memory") for k in call.keywords):
            return "pin_memory"
        return None

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):  # not `amp = None` after a failed `from apex...`
            self.reference(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not self.reference(node):
            if node.attr == "is_cuda" and isinstance(node.ctx, ast.Load):
                self.add(node, "is_cuda", "x.is_cuda")  # next(m.parameters()).is_cuda
            self.visit(node.value)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not self.reference(func, call=node):
            if isinstance(func, ast.Attribute) and func.attr == "cuda":
                self.add(func, "tensor_cuda", "x.cuda()")  # make_model().cuda()
            self.visit(func)
        if isinstance(func, ast.Attribute) and func.attr == "pin_memory":
            self.add(func, "pin_memory", "x.pin_memory()")
        parts = _chain(func)
        if parts and ("DataParallel" in parts[-1] or parts[-1] == "DDP"):
            callee = self.qualified(parts)[0]
            for keyword in node.keywords:
                if keyword.arg in ("device_ids", "output_device") and not _is_none(keyword.value):
                    self.add(keyword.value, "device_ids", f"{callee}({keyword.arg}=...)")
        if isinstance(func, ast.Name) and func.id in ATTRIBUTE_FUNCTIONS and len(node.args) > 1:
            self.names.add(id(node.args[1]))
        if parts and parts[-1] in MESSAGE_FUNCTIONS:
            self.names.update(id(arg) for arg in node.args)
        for child in (*node.args, *node.keywords):
            self.visit(child)

    # --- strings ------------------------------------------------------------------------

    def visit_Expr(self, node: ast.Expr) -> None:
        if not isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            self.visit(node.value)  # a string statement is a docstring or a comment

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.names.add(id(node.slice))  # cfg['gpu'] is a key's name (os.environ's too)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str):
            return
        if ENV_NAME.fullmatch(node.value):
            self.add(node, "cuda_env", repr(node.value))  # os.environ['CUDA_...'] included
        elif id(node) in self.names:
            return
        elif node.value == "nccl" or DEVICE_WORD.fullmatch(node.value):
            category = "nccl" if node.value == "nccl" else "device_string"
            self.add(node, category, f"{node.value!r} in {self.role()}")

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        # f'cuda:{rank}': the literal parts with each formatted value as {}.
        template = "".join(
            part.value if isinstance(part, ast.Constant) else "{}" for part in node.values
        )
        if id(node) not in self.names and DEVICE_WORD.fullmatch(template):
            self.add(node, "device_string", f"f{template!r} in {self.role()}")
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                self.visit(part)

    # --- imports ------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if _cuda_module(alias.name):
                self.add(node, "import", f"import {alias.name}")
                return

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        names = [f"{module}.{alias.name}" for alias in node.names]
        if not node.level and any(_cuda_module(name) for name in [module, *names]):
            self.add(node, "import", f"from {module} import ...")


def _cuda_module(dotted: str) -> bool:
    """An NVIDIA-only package or toolchain name; torch's own CUDA modules import anywhere."""
    segments = dotted.split(".")
    if segments[0] == "torch":
        return segments[-1] in TOOLCHAIN
    return (
        bool(CUDA_SEGMENTS.intersection(segments))
        or segments[0] in CUDA_PACKAGES
        or segments[-1] in TOOLCHAIN
    )


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_true_keyword(keyword: ast.keyword, name: str) -> bool:
    value = keyword.value
    return keyword.arg == name and isinstance(value, ast.Constant) and value.value is True
