"""Context fuzzer: a rule rewrites code the same wherever the code stands.

Every KB example's `before` is split into its imports, which stay at the top of the module, and
its body, which goes into each block of `CONTEXTS`: the arms of an `if ... elif
torch.cuda.is_available(): ... else:` chain, that `elif` without the `else`, an `if` made always
true, a plain `if`, try/except/else/finally, with, for and while and their `else`, functions
(nested, async, decorated, methods), a class body, a match case and `if __name__ ==
"__main__":`. A body of simple statements also goes on one line (`if x: a; b`, the same under
an `if` made always true, `a; b; x = 0`), and the value of each one-line assignment or
expression statement into a lambda, a comprehension, a default argument and a conditional
expression. Per case:

- the engine does not raise (an `OutputDoesNotParse` is a failure like any other),
- the output compiles and a second run changes nothing,
- the change is the one made at top level. The reference is the body migrated alone at the top
  of the module after the same imports (`test_references_are_the_examples_after` checks it is
  the example's `after`). In a block, the output must be, to the character, the context alone
  migrated (`__pytpu_hole__()` in the snippet's place) with the hole replaced by the
  reference's body re-indented, below the reference's imports: the same code and the same
  comments at the same places. A one-line suite or a semicolon cannot hold a block: there the
  output must be equivalent to that text for the context written with a block (the same syntax
  tree and the same comments). A value's reference is its statement at top level (an
  assignment's target renamed, so that no match depends on the name); in an expression the
  output must be equivalent to the context holding the reference's new value, the reference's
  comments above it. Where the reference removed the statement or added one, which an
  expression cannot take, the code must stay as it was and the site be flagged.
- A few rules depend on the code around a snippet by design (`CONTEXT_RULES`: a loop makes a
  step, a function's body runs after a launch). In those contexts only, the comparison is made
  again with those rules left out of the KB, on both sides: every other rule still makes the
  same change.

A line `__pytpu_context__ = 0` between the imports and the rest cuts each output into the
module's imports and the code under test.

With the KB of this writing that is 4403 example x context cases (157 examples, 22 block, 3 line
and 4 expression contexts; `test_every_example_is_in_twenty_contexts` prints the number), plus
40 hypothesmith programs with CUDA idioms put into their blocks and `if` tests. The file takes
about 48 s of one core.
"""

from __future__ import annotations

import ast
import difflib
import io
import textwrap
import tokenize
from dataclasses import dataclass
from functools import cache

import hypothesmith
import libcst as cst
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pytpu.engine.rewriter import checkout, cst_nodes, kb, node_edits
from pytpu.engine.rewriter.findings import FLAGGED
from pytpu.engine.rewriter.index import RuleIndex
from tests.test_kb import EXAMPLES
from tests.test_properties import _compile, check_migration, examples

# hypothesmith's programs may compile with a SyntaxWarning (`1()` and the like)
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")

# Each example migrates with the rules of its rule's first target (as tests/test_kb.py checks it).
INDEXES = {target: checkout.rule_index(target) for target in kb.TARGET_VERSIONS}
INDEX = INDEXES[kb.DEFAULT_TARGET]
SENTINEL = "__pytpu_context__ = 0"
HOLE = "__pytpu_hole__()"
VALUE = "__pytpu_value__"


@dataclass(frozen=True)
class Context:
    """Code with a place for the snippet: a `{hole}` line (a block), `{line}` (simple statements
    joined by semicolons) or `{expr}` (a value)."""

    name: str
    template: str
    block_form: str = ""  # `{line}`: the same context written with a block

    @property
    def kind(self) -> str:
        return next(k for k in ("hole", "line", "expr") if "{" + k + "}" in self.template)

    @property
    def imports(self) -> str:
        return "import torch\n" if "torch." in self.template else ""

    def fill(self, code: str) -> str:
        return fill(self.template, code)


def fill(template: str, code: str) -> str:
    """`template` with its place taken by `code`; a block is indented as the `{hole}` line is."""
    if "{hole}" not in template:
        return template.replace("{line}", code).replace("{expr}", code)
    out = []
    for line in template.splitlines(keepends=True):
        if line.strip() == "{hole}":
            line = textwrap.indent(code, line[: line.index("{")])
        out.append(line)
    return "".join(out)


CHAIN = "if __pytpu_flag__:\n    {}\nelif torch.cuda.is_available():\n    {}\nelse:\n    {}\n"
CUDA_IF = "if torch.cuda.is_available():"
CONTEXTS = [
    Context("if", "if __pytpu_flag__:\n    {hole}\n"),
    # an `if` a rule makes always true gives way to its body
    Context("cuda_if", f"{CUDA_IF}\n    {{hole}}\n"),
    Context("cuda_chain_if", CHAIN.format("{hole}", "pass", "pass")),
    Context("cuda_chain_elif", CHAIN.format("pass", "{hole}", "pass")),
    Context("cuda_chain_else", CHAIN.format("pass", "pass", "{hole}")),
    # without an `else`, the `elif` the rule makes always true becomes the `else`
    Context(
        "cuda_elif_last",
        "if __pytpu_flag__:\n    pass\nelif torch.cuda.is_available():\n    {hole}\n",
    ),
    Context("try", "try:\n    {hole}\nexcept OSError:\n    pass\n"),
    Context("except", "try:\n    pass\nexcept OSError as __pytpu_error__:\n    {hole}\n"),
    Context("try_else", "try:\n    pass\nexcept OSError:\n    pass\nelse:\n    {hole}\n"),
    Context("finally", "try:\n    pass\nfinally:\n    {hole}\n"),
    Context("with", "with open(__pytpu_path__) as __pytpu_file__:\n    {hole}\n"),
    Context("for", "for __pytpu_item__ in range(2):\n    {hole}\n"),
    Context("for_else", "for __pytpu_item__ in range(2):\n    pass\nelse:\n    {hole}\n"),
    Context("while", "while __pytpu_flag__:\n    {hole}\n"),
    Context("while_else", "while __pytpu_flag__:\n    pass\nelse:\n    {hole}\n"),
    Context(
        "nested_function",
        "def __pytpu_outer__():\n    def __pytpu_inner__():\n        {hole}\n"
        "    return __pytpu_inner__\n",
    ),
    Context("async_function", "async def __pytpu_task__():\n    {hole}\n"),
    Context("method", "class __PytpuTask__:\n    def run(self):\n        {hole}\n"),
    Context("class_body", "class __PytpuTask__:\n    {hole}\n"),
    Context("decorated_function", "@__pytpu_decorator__(1)\ndef __pytpu_task__():\n    {hole}\n"),
    Context(
        "match_case",
        "match __pytpu_flag__:\n    case 1:\n        {hole}\n    case _:\n        pass\n",
    ),
    # (the empty string balances the guard's quotes: new strings keep the example's quote)
    Context("main_guard", "__pytpu_quotes__ = ''\nif __name__ == \"__main__\":\n    {hole}\n"),
    Context("one_line_if", "if __pytpu_flag__: {line}\n", "if __pytpu_flag__:\n    {hole}\n"),
    Context("one_line_cuda_if", f"{CUDA_IF} {{line}}\n", f"{CUDA_IF}\n    {{hole}}\n"),
    Context("semicolon_before", "{line}; __pytpu_after__ = 0\n", "{hole}\n__pytpu_after__ = 0\n"),
    Context("lambda", f"{VALUE} = lambda: {{expr}}\n"),
    Context("list_comprehension", f"{VALUE} = [{{expr}} for __pytpu_item__ in range(2)]\n"),
    Context("default_argument", "def __pytpu_task__(value={expr}):\n    return value\n"),
    Context("conditional", f"{VALUE} = ({{expr}}) if __pytpu_flag__ else None\n"),
]

LOOPS = {"for", "while"}
FUNCTIONS = {"nested_function", "async_function", "method", "decorated_function"}
VALUES = {c.name for c in CONTEXTS if c.kind == "expr"}
NAMES_CUDA = {c.name for c in CONTEXTS if "cuda" in c.template}


def _rules(*names: str) -> frozenset[str]:
    """The rules with a case whose context, built-in analysis or condition is one of `names`."""
    return frozenset(
        rule.id
        for rule in INDEX.rules
        for case in rule.cases
        if (
            {getattr(case.context, "name", None), getattr(case.analysis, "name", None)}
            | {condition.name for condition, _ in case.where.values()}
        )
        & set(names)
    )


# Rules whose change depends on the code around the snippet by design: (rules, where, why).
CONTEXT_RULES = [
    (
        _rules(
            "train_barrier", "eval_barrier", "device_loader", "in_step_unwaited", "step_unthrottled"
        ),
        LOOPS,
        "a loop around the code makes it a step (a model called in it: an evaluation step)",
    ),
    (_rules("pre_launch"), FUNCTIONS, "a function's body runs after the launch, not before it"),
    (
        _rules(
            "train_barrier",
            "eval_barrier",
            "device_loader",
            "host_training",
            "implicit_model",
            "implicit_inputs",
            "implicit_factories",
            "implicit_host_reads",
            "implicit_unknown_inputs",
            "hand_trained_model",
            "trained_factories",
            "trained_random",
            "trained_tensors",
            "in_step_unwaited",
            "cpu_program_device",
        ),
        NAMES_CUDA,
        "code around the snippet that names CUDA makes the file do device work: its loops are "
        "steps, none trains on the CPU, no model moves because none was placed, and a CPU "
        "device is a choice for part of the work, not the program's one device",
    ),
    (
        _rules("parameter_default", "public_signature"),
        {"default_argument"},
        "a default runs at import, where torch_xla.device() must not",
    ),
    (
        frozenset({"R-DEV-07", "R-TPU-13"}),
        FUNCTIONS | {"class_body"},
        "an alias of a legacy CUDA type (`Tensor = torch.cuda.FloatTensor ...`) is followed to "
        "its uses only where the module binds it, once (not in a function or class)",
    ),
    (
        frozenset({"R-DIST-04"}),
        VALUES,
        "`$name = 'nccl'` matches the assignment: a bare 'nccl' is no site",
    ),
]


# --- the snippets: each example's imports, body, and the values of its simple statements -------


@dataclass(frozen=True)
class Snippet:
    label: str  # rule ID and example number
    imports: str
    body: str
    line: str  # the body on one line, semicolon-joined ("": it holds a compound statement)
    values: tuple[tuple[str, str], ...]  # (the reference statement, its value)
    target: str = kb.DEFAULT_TARGET  # whose rules migrate it
    settings: tuple[tuple[str, str], ...] = ()  # the settings that choose its rule
    # a script that trains at module level (R-SPMD-01's `single_script` case): inside a
    # function or class it is another program, which that case leaves alone
    module_level: bool = False
    # a DDP program that spawns its workers (R-SPMD-04): spawned again on each turn of a loop it
    # is no program (its loop, which launched processes, becomes one that runs the function)
    spawns_workers: bool = False
    # a function of it uses a name it binds at its top level (`get_batch`, `Tensor = ...`): in a
    # class body that name is a class attribute, which a method's body does not see
    uses_own_names: bool = False

    @property
    def index(self) -> RuleIndex:
        return checkout.rule_index(self.target, None, self.settings)

    def prefix(self, context: Context) -> str:
        """The module's imports: the example's, and the context's."""
        needs = context.imports and context.imports not in self.imports
        return self.imports + (context.imports if needs else "")


def split_example(
    label: str,
    before: str,
    target: str = kb.DEFAULT_TARGET,
    settings: tuple[tuple[str, str], ...] = (),
) -> Snippet:
    module = cst.parse_module(before)
    statements = list(module.body)
    count = 0
    while count < len(statements) and node_edits.is_import_line(statements[count]):
        count += 1
    if count == len(statements):
        count = 0  # a rule on imports: the imports are the snippet
    code = [module.code_for_node(s) for s in statements]
    header = "".join(module.code_for_node(line) for line in module.header)  # comments on top
    imports, body = "".join(code[:count]), "".join(code[count:]).lstrip("\n")
    imports, body = (header + imports, body) if imports else ("", header + body)
    simple = [s for s in statements[count:] if isinstance(s, cst.SimpleStatementLine)]
    lines = [module.code_for_node(s).strip() for s in simple]
    one_line = len(simple) == len(statements) - count and not any(
        "\n" in line or "#" in line for line in lines
    )
    values = []
    for statement, line in zip(simple, lines, strict=True):
        small = statement.body[0]
        if len(statement.body) > 1 or "\n" in line:
            continue
        if isinstance(small, cst.Expr) or (
            isinstance(small, cst.Assign) and len(small.targets) == 1
        ):
            value = module.code_for_node(small.value)
            reference = line if isinstance(small, cst.Expr) else f"{VALUE} = {value}"
            values.append((reference + "\n", value))
    one = "; ".join(lines) if one_line else ""
    index = checkout.rule_index(target, None, settings)
    findings = checkout.migrate_text(before, index)[1]
    module_level = any(
        f.case.context is not None
        and f.case.context.name in ("single_script", "single_unless_launched")
        for f in findings
    )
    spawns_workers = any(
        f.case.context is not None and f.case.context.name == "spawned_ddp_program"
        for f in findings
    )
    bound = {s.name.value for s in statements if isinstance(s, cst.FunctionDef)} | {
        t.target.value
        for s in statements
        if isinstance(s, cst.SimpleStatementLine)
        for small in s.body
        if isinstance(small, cst.Assign)
        for t in small.targets
        if isinstance(t.target, cst.Name)
    }
    uses_own = any(
        isinstance(n, cst.Name) and n.value in bound
        for s in statements
        if isinstance(s, cst.FunctionDef)
        for n in cst_nodes.walk(s.body)
    )
    return Snippet(
        label,
        imports,
        body,
        one,
        tuple(values),
        target,
        settings,
        module_level,
        spawns_workers,
        uses_own,
    )


SNIPPETS = [
    split_example(
        f"{rule.id}#{i + 1}", ex.before, rule.targets[0], tuple(sorted(rule.settings.items()))
    )
    for rule, i, ex in EXAMPLES
]
# contexts whose hole is inside a function or class body
DEFINITIONS = {"nested_function", "async_function", "method", "class_body", "decorated_function"}
LOOPS = {"for", "while"}  # contexts whose hole runs again and again
Case = tuple[Context, Snippet, tuple[str, str] | None]
CASES: list[Case] = [
    (context, snippet, value)
    for context in CONTEXTS
    for snippet in SNIPPETS
    # (under `data_parallel: spmd` the main guard is itself a site: R-SPMD-01 adds use_spmd)
    if not (context.name == "main_guard" and ("data_parallel", "spmd") in snippet.settings)
    and not (snippet.module_level and context.name in DEFINITIONS)
    and not (snippet.uses_own_names and context.name == "class_body")
    and not (snippet.spawns_workers and context.name in LOOPS)
    for value in {
        "hole": [None],
        "line": [None] if snippet.line else [],
        "expr": snippet.values,
    }[context.kind]
]


def case_id(case: Case) -> str:
    context, snippet, value = case
    suffix = f"-{snippet.values.index(value) + 1}" if value else ""
    return f"{context.name}-{snippet.label}{suffix}"


# --- migrating, and cutting the outputs ---------------------------------------------------------


@cache
def index_without(rule_ids: frozenset[str], index: RuleIndex = INDEX) -> RuleIndex:
    rules = [r for r in index.rules if r.id not in rule_ids]
    return RuleIndex(kb.default(), rules)


@cache
def migrated(text: str, index: RuleIndex = INDEX) -> checkout.MigratedSource:
    """The engine's output (references and contexts alone are asked for many times)."""
    return checkout.migrate_source(text, index, "example.py")


def module_source(prefix: str, code: str) -> str:
    return f"{prefix}\n{SENTINEL}\n{code}" if prefix else f"{SENTINEL}\n{code}"


def cut(text: str) -> tuple[str, str]:
    """A module built by `module_source`, migrated: (its imports, the code under test)."""
    lines = text.splitlines(keepends=True)
    at = lines.index(SENTINEL + "\n")
    return "".join(lines[:at]), "".join(lines[at + 1 :])


def comments(text: str) -> set[str]:
    """(A set: sites on one line share their statement's comment.)"""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return {t.string for t in tokens if t.type == tokenize.COMMENT}


def same_tree(a: str, b: str) -> bool:
    return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))


def equivalent(a: str, b: str) -> bool:
    """The same syntax tree and the same comments: the same code laid out another way."""
    return same_tree(a, b) and comments(a) == comments(b)


def expected_block(
    prefix: str, context: Context, template: str, body: str, index: RuleIndex
) -> str:
    """The context alone migrated, with the top-level migration of `body` in the hole. (The
    context is migrated after its own imports only: once, not once per example.)"""
    reference_imports, reference = cut(migrated(module_source(prefix, body), index).text)
    alone = migrated(module_source(context.imports, fill(template, HOLE + "\n")), index)
    wrapper_imports, wrapper = cut(alone.text)
    unchanged = cut(module_source(context.imports, ""))[0]
    assert wrapper_imports == unchanged, "the context alone changed the imports"
    lines = wrapper.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.strip() == HOLE)
    indent = lines[at][: lines[at].index(HOLE)]
    reference = _not_repeating(_comments_above(lines, at), reference)
    rest = "".join(lines[:at]) + textwrap.indent(reference, indent) + "".join(lines[at + 1 :])
    return reference_imports + SENTINEL + "\n" + rest


def _comments_above(lines: list[str], at: int) -> set[str]:
    """The comment lines right above line `at`: the comments of its statement."""
    above = set()
    while at > 0 and lines[at - 1].lstrip().startswith("#"):
        at -= 1
        above.add(lines[at].strip())
    return above


def _not_repeating(above: set[str], code: str) -> str:
    """`code` without the comments above its first statement that `above` already has (the
    comments of a hoisted `if` go to its first statement, which carries each one once)."""
    lines = code.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    kept = [line for line in lines[:first] if line.strip() not in above]
    return "".join(kept + lines[first:])


def _show(source: str, out: str, expected: str) -> str:
    diff = difflib.unified_diff(
        expected.splitlines(keepends=True), out.splitlines(keepends=True), "expected", "output"
    )
    return f"\n--- input:\n{source}\n--- diff:\n{''.join(diff)}"


def mismatch(case: Case, source: str, result: checkout.MigratedSource, index: RuleIndex) -> str:
    """Why the output in a context is not the top-level change ("" when it is)."""
    context, snippet, value = case
    prefix, out = snippet.prefix(context), result.text
    if context.kind == "hole":
        expected = expected_block(prefix, context, context.template, snippet.body, index)
        return "" if out == expected else _show(source, out, expected)
    if context.kind == "line":
        expected = expected_block(prefix, context, context.block_form, snippet.body, index)
        return "" if equivalent(out, expected) else _show(source, out, expected)
    statement, expression = value
    reference = migrated(module_source(prefix, statement), index)
    reference_imports, rewritten = cut(reference.text)
    tree = cst.parse_module(rewritten)
    kept = tree.body[0].body[0] if len(tree.body) == 1 else None
    if type(kept) is type(cst.parse_statement(statement).body[0]):
        above = "".join(ln for ln in rewritten.splitlines(keepends=True) if ln.startswith("#"))
        filled = context.fill(tree.code_for_node(kept.value))
        expected = f"{reference_imports}{SENTINEL}\n{above}{filled}"
        return "" if equivalent(out, expected) else _show(source, out, expected)
    # The statement was removed or another added: an expression cannot take that.
    if not same_tree(cut(out)[1], context.fill(expression)):
        return "the code was changed" + _show(source, out, source)
    changed = {f.rule.id for f in reference.findings if f.case.changes_code}
    flagged = {f.rule.id for f in result.findings if f.kind == FLAGGED}
    return f"not flagged: {sorted(changed - flagged)}" if changed - flagged else ""


# --- the properties -----------------------------------------------------------------------------


def test_references_are_the_examples_after() -> None:
    """The reference (imports, the inert line, the body) migrates as the example documents."""
    for (_rule, _i, example), snippet in zip(EXAMPLES, SNIPPETS, strict=True):
        source = module_source(snippet.imports, snippet.body)
        imports, rest = cut(migrated(source, snippet.index).text)
        # (an import added above a class is followed by two blank lines, above the line by one)
        head = example.after[: len(example.after) - len(rest)]
        assert example.after.endswith(rest), snippet.label
        assert head.rstrip("\n") == imports.rstrip("\n"), snippet.label


def test_every_example_is_in_twenty_contexts() -> None:
    blocks = [c for c in CONTEXTS if c.kind == "hole"]
    assert len(blocks) >= 20 and len(SNIPPETS) == len(EXAMPLES)
    print(f"{len(CASES)} cases: {len(SNIPPETS)} examples in {len(CONTEXTS)} contexts")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_example_in_context(case: Case) -> None:
    context, snippet, value = case
    code = {"hole": snippet.body, "line": snippet.line, "expr": value and value[1]}
    source = module_source(snippet.prefix(context), context.fill(code[context.kind]))
    try:
        result = migrated(source, snippet.index)
    except checkout.OutputDoesNotParse as error:
        pytest.fail(f"output does not parse: {error}\n--- input:\n{source}")
    _compile(result.text)
    again = migrated(result.text, snippet.index).text
    assert again == result.text, "a second run changed it" + _show(source, again, result.text)
    error = mismatch(case, source, result, snippet.index)
    ignored = frozenset().union(
        *(rules for rules, where, _ in CONTEXT_RULES if context.name in where)
    )
    if error and ignored:
        index = index_without(ignored, snippet.index)
        error = mismatch(case, source, migrated(source, index), index) and error
    assert not error, error


# --- the bugs it found, each as a program someone wrote -----------------------------------------


def migrate(text: str) -> checkout.MigratedSource:
    return checkout.migrate_source(textwrap.dedent(text), INDEX, "train.py")


def test_elif_made_always_true_becomes_the_else() -> None:
    """The `elif` a rule makes `True` cannot be replaced by its body's statements (libcst raised
    "FlattenSentinel ... parent does not allow for it to be replaced with a sequence")."""
    result = migrate(
        """\
        import torch

        if args.mps:
            device = torch.device("mps")
        elif torch.cuda.is_available():
            device = torch.device("cuda")
            model = model.cuda()
        """
    )
    lines = result.text.splitlines()
    assert lines.pop(5).startswith("# PYTPU201: torch.cuda.is_available() now True")
    assert lines == [
        "import torch",
        "import torch_xla",
        "",
        "if args.mps:",
        "    device = torch_xla.device()",  # an Apple GPU's branch runs on XLA too (R-ACC)
        "else:",
        "    device = torch_xla.device()",
        "    model = model.to(torch_xla.device())",
    ]
    assert migrated(result.text).text == result.text


def test_if_made_always_true_on_one_line_keeps_its_line() -> None:
    """`if torch.cuda.is_available(): a; b` gives way to `a; b`, one line still. Split into a
    line each, the comments about the line stood above the first only, and a second run added
    the second's again."""
    result = migrate(
        """\
        import torch

        if torch.cuda.is_available(): name = torch.cuda.get_device_name(0); cap = get_cap()
        """
    )
    lines = result.text.splitlines()
    assert [line[:10] for line in lines[3:5]] == ["# PYTPU201", "# PYTPU205"]
    assert lines[5:] == ["name = xm.xla_device_kind(); cap = get_cap()"]
    assert migrated(result.text).text == result.text


def test_comments_of_an_if_made_always_true_go_first() -> None:
    """The removed `if`'s comment goes above the comments of its body's first statement, as it
    stood above them before (the same as the body on its own with the `if`'s comment above),
    and the statement has each comment once."""
    result = migrate(
        """\
        import torch

        if torch.cuda.is_available():
            model = model.half()
        if torch.cuda.is_available():
            cuda = not args.no_cuda and torch.cuda.is_available()
        """
    )
    lines = [line[:10] for line in result.text.splitlines()[2:]]
    assert lines == ["# PYTPU201", "# PYTPU724", "model = mo", "# PYTPU201", "cuda = not"]


def test_statement_added_on_one_line_is_not_doubled() -> None:
    """`torch_xla.manual_seed(0)` goes after `torch.manual_seed(0)` unless the next statement,
    once rewritten, is that; on one line the next statement was judged before its rewrite."""
    result = migrate(
        """\
        import torch

        if seeded: torch.manual_seed(0); torch.cuda.manual_seed(0)
        torch.manual_seed(1); x = 1
        """
    )
    lines = result.text.splitlines()
    assert "if seeded: torch.manual_seed(0); torch_xla.manual_seed(0)" in lines
    assert "torch.manual_seed(1); torch_xla.manual_seed(1); x = 1" in lines
    assert [f.rule.id for f in result.findings] == ["R-RNG-01", "R-RNG-02"]


def test_device_variable_as_load_location_needs_no_cuda_word() -> None:
    """The text pre-filter let a file through for `map_location=` only with 'cuda' in it,
    though a device variable there is a site: whether it became 'cpu' depended on other words
    (`range(`, which another rule looks for)."""
    for other in ("", "steps = range(2)\n"):
        result = migrate(
            f"import torch\n\nstate = torch.load(p, map_location=args.device)\n{other}"
        )
        assert "torch.load(p, map_location='cpu')" in result.text


def test_statement_to_add_after_a_value_is_flagged() -> None:
    """A lambda or an assignment cannot take a statement after its value: the site is flagged
    rather than passed over without a word."""
    result = migrate(
        """\
        import torch

        reseed = lambda: torch.manual_seed(0)
        """
    )
    assert "reseed = lambda: torch.manual_seed(0)" in result.text
    assert [(f.rule.id, f.kind) for f in result.findings] == [("R-RNG-02", FLAGGED)]


def test_class_body_and_defaults_run_before_the_launch() -> None:
    """A class body and a parameter's default run when the module is imported, before the
    launch, as module-level code does; a function's body does not."""
    result = migrate(
        """\
        import torch_xla

        class Config:
            device = torch_xla.device()

        def main(index, device=torch_xla.device()):
            train(torch_xla.device())

        if __name__ == "__main__":
            torch_xla.launch(main)
        """
    )
    assert [(f.rule.id, f.line) for f in result.findings] == [("R-DEV-14", 4), ("R-DEV-14", 6)]


# --- generated programs with CUDA idioms inside ------------------------------------------------

IDIOMS = [
    "x = torch.zeros(3).cuda()",
    "torch.cuda.synchronize()",
    "torch.cuda.empty_cache()",
    "torch.manual_seed(0); torch.cuda.manual_seed(0)",
    "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')",
    "torch.backends.cudnn.benchmark = True",
    "n = torch.cuda.device_count()",
    "if mps:\n    device = 'mps'\nelif torch.cuda.is_available():\n    device = 'cuda'\n",
    "with torch.cuda.device(0):\n    y = model(x)\n",
    "for x, y in loader:\n    loss = model(x.cuda())\n    loss.backward()\n    opt.step()\n",
]


class _Splice(cst.CSTTransformer):
    """Counts the blocks and `if` tests of a module (in the order it leaves them) and puts the
    idioms chosen into them; the tests chosen become `torch.cuda.is_available()`."""

    def __init__(self, blocks: dict[int, list[tuple[int, str]]], tests: set[int]):
        super().__init__()
        self.blocks, self.tests = blocks, tests
        self.block_count = self.test_count = 0

    def _splice(self, node, statements):
        chosen = self.blocks.get(self.block_count, [])
        self.block_count += 1
        body = list(node.body)
        for position, idiom in chosen:
            body[position % (len(body) + 1) : 0] = statements(cst.parse_statement(idiom))
        return node.with_changes(body=body) if chosen else node

    def leave_Module(self, original, updated):
        return self._splice(updated, lambda line: [line])

    def leave_IndentedBlock(self, original, updated):
        return self._splice(updated, lambda line: [line])

    def leave_SimpleStatementSuite(self, original, updated):
        simple = cst.SimpleStatementLine  # (a compound statement cannot go on a line)
        return self._splice(updated, lambda line: line.body if isinstance(line, simple) else [])

    def leave_If(self, original, updated):
        self.test_count += 1
        if self.test_count - 1 in self.tests:
            return updated.with_changes(test=cst.parse_expression("torch.cuda.is_available()"))
        return updated


@st.composite
def programs_with_idioms(draw) -> str:
    source = draw(hypothesmith.from_node())
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        assume(False)
    counts = _Splice({}, set())
    module.visit(counts)
    where = st.integers(0, counts.block_count - 1)
    idioms = st.tuples(where, st.integers(0, 9), st.sampled_from(IDIOMS))
    picks = draw(st.lists(idioms, min_size=1, max_size=4))
    blocks: dict[int, list[tuple[int, str]]] = {}
    for block, position, idiom in picks:
        blocks.setdefault(block, []).append((position, idiom))
    tests = set()
    if counts.test_count:
        tests = draw(st.sets(st.integers(0, counts.test_count - 1), max_size=2))
    return "import torch\n" + module.visit(_Splice(blocks, tests)).code


@examples(40)
@given(source=programs_with_idioms())
def test_generated_programs_with_cuda_idioms_inside(source: str) -> None:
    check_migration(source, INDEX)
