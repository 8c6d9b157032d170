"""The files a team applies to run PyTPU on a Kubernetes TPU pool (docs/deploy.md): the Helm
values of ARC's gha-runner-scale-set chart (examples/arc/values.yaml) and the Dockerfile's runner
stage, linted offline and checked for what the deployment relies on (one TPU VM per job, the TPU
taint tolerated, a non-root runner, the image built from this Dockerfile, one scale set name
everywhere).

The linters are the dev extras' yamllint, kubernetes-validate (Kubernetes' JSON schemas ship in
its wheel, so the runner pod is checked against Kubernetes' own schema without a cluster) and
hadolint. As in tests/test_action_files.py, each is also fed a broken copy and must fail on it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from math import prod
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_action_files import bad_copy, hadolint, instructions, report, run

ROOT = Path(__file__).resolve().parents[1]
VALUES = ROOT / "examples" / "arc" / "values.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
WORKFLOW = ROOT / "examples" / "workflows" / "pytpu.yml"
README = ROOT / "README.md"

SCALE_SET = "pytpu-tpu"
RUN_SH = "/home/runner/run.sh"
WORK = "/home/runner/_work"
TPU = "google.com/tpu"
ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"

# The dev requirements that install the linters run here (the same lines as pyproject.toml's).
REQUIREMENTS = {
    "yamllint": "yamllint>=1.38,<2",
    "kubernetes-validate": "kubernetes-validate>=1.37,<2",
}
# default's rules, lines up to 100 characters as in the rest of the project, and no `---`: Helm
# values files (the chart's own too) start without one. Warnings fail as well (--strict).
YAMLLINT_CONFIG = "{extends: default, rules: {line-length: {max: 100}, document-start: disable}}"
# An older Kubernetes minor a cluster may still run and the newest the wheel has schemas for: the
# pod must be valid on both (an API server drops or refuses a field it does not know).
KUBERNETES_VERSIONS = ["1.31", "1.37"]


def tool(name: str) -> str:
    # The interpreter's own bin folder first: the linters are console scripts of the dev extras.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = shutil.which(name, path=path)
    if found is None:
        pytest.fail(
            f"{name} is not installed: it comes with PyTPU's dev extras "
            f"(pip install -e '.[dev]'), from the requirement {REQUIREMENTS[name]!r}"
        )
    return found


def load_values(path: Path = VALUES) -> dict[str, Any]:
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(values, dict), f"{path.name} is not a YAML mapping"
    return values


def test_the_linters_are_dev_requirements() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    dev = pyproject["project"]["optional-dependencies"]["dev"]
    assert set(REQUIREMENTS.values()) <= set(dev)


# -- yamllint ------------------------------------------------------------------------------------


def yamllint(path: Path) -> subprocess.CompletedProcess[str]:
    return run(tool("yamllint"), "--strict", "-f", "parsable", "-d", YAMLLINT_CONFIG, path)


def test_yamllint_finds_nothing() -> None:
    result = yamllint(VALUES)
    assert result.returncode == 0, report(result)
    assert result.stdout.strip() == "", report(result)


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        # Two minRunners: which one counts would be up to the YAML reader.
        ("minRunners: 0\n", "minRunners: 0\nminRunners: 1\n", "key-duplicates"),
        ("maxRunners: 2\n", "maxRunners: 2  # " + "x" * 90 + "\n", "line-length"),
        (
            "      - name: work\n        emptyDir:",
            "    - name: work\n      emptyDir:",
            "indentation",
        ),
    ],
    ids=["duplicate-key", "long-line", "indentation"],
)
def test_yamllint_catches(old: str, new: str, rule: str, tmp_path: Path) -> None:
    result = yamllint(bad_copy(tmp_path, VALUES, old, new))
    assert result.returncode == 1, report(result)
    assert f"({rule})" in result.stdout, report(result)


# -- the runner pod against Kubernetes' schema (kubernetes-validate, offline) ----------------------


def pod_template(values: dict[str, Any]) -> dict[str, Any]:
    """The chart's `template` as a PodTemplate: ARC copies it into each runner pod (adding only
    the runner's registration, a service account and restartPolicy Never)."""
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": values.get("runnerScaleSetName", SCALE_SET)},
        "template": values["template"],
    }


def kubernetes_validate(
    values_path: Path, tmp_path: Path, version: str
) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "pod-template.yaml"
    manifest.write_text(yaml.safe_dump(pod_template(load_values(values_path))), encoding="utf-8")
    # --strict: a misspelt field is an error, not a field Kubernetes silently drops.
    return run(tool("kubernetes-validate"), "--strict", "-k", version, manifest, cwd=tmp_path)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_runner_pod_matches_kubernetes_schema(version: str, tmp_path: Path) -> None:
    result = kubernetes_validate(VALUES, tmp_path, version)
    assert result.returncode == 0, report(result)
    # A kind without a schema only warns and exits 0: the pod must really have been checked.
    assert f"passed for resource podtemplate/{SCALE_SET}" in result.stdout, report(result)


@pytest.mark.parametrize(
    ("old", "new", "error"),
    [
        ("    tolerations:\n", "    toleration:\n", "'toleration' was unexpected"),
        ("runAsNonRoot: true", 'runAsNonRoot: "yes"', "is not of type 'boolean'"),
        ("      - name: runner\n", "      - nme: runner\n", "'name' is a required property"),
    ],
    ids=["misspelt-field", "wrong-type", "missing-name"],
)
def test_kubernetes_schema_catches(old: str, new: str, error: str, tmp_path: Path) -> None:
    bad = bad_copy(tmp_path, VALUES, old, new)
    result = kubernetes_validate(bad, tmp_path, KUBERNETES_VERSIONS[-1])
    assert result.returncode == 1, report(result)
    assert error in result.stdout, report(result)


# -- hadolint on the runner stage (the whole Dockerfile: tests/test_action_files.py) --------------


def stages(dockerfile: str) -> dict[str, list[tuple[str, str]]]:
    """Each build stage's instructions by the stage's name (`FROM image AS name`)."""
    found: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for keyword, argument in instructions(dockerfile):
        if keyword == "FROM":
            words = argument.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else f"#{len(found)}"
            current = found[name] = []
        current.append((keyword, argument))
    return found


def runner_stage_lines() -> range:
    lines = DOCKERFILE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines, 1) if re.match(r"FROM \S+ AS runner$", line))
    end = next(i for i, line in enumerate(lines, 1) if i > start and line.startswith("FROM "))
    return range(start, end)


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        ("--no-install-recommends libicu72", "libicu72", "DL3015"),
        ('CMD ["/home/runner/run.sh"]', 'USER root\nCMD ["/home/runner/run.sh"]', "DL3002"),
    ],
    ids=["recommends", "root-user"],
)
def test_hadolint_checks_the_runner_stage(old: str, new: str, rule: str, tmp_path: Path) -> None:
    result = hadolint(bad_copy(tmp_path, DOCKERFILE, old, new))
    assert result.returncode == 1, report(result)
    found = re.search(rf":(\d+) {rule} ", result.stdout)
    assert found is not None, report(result)
    assert int(found.group(1)) in runner_stage_lines(), report(result)


# -- the Dockerfile's two images ---------------------------------------------------------------


def runner_image_problems(dockerfile: str) -> list[str]:
    """What is wrong with the Dockerfile's runner stage as ARC's docs ask of a runner image:
    [] when it builds on this file's PyTPU stage, copies the runner to /home/runner from GitHub's
    runner image at a pinned release, runs as a non-root user and starts run.sh."""
    found = stages(dockerfile)
    names = list(found)
    if "runner" not in found:
        return ["no stage `runner` (docker build --target runner)"]
    problems = []
    if names[-1] == "runner":
        problems.append("`runner` is the last stage: `docker build .` would build the runner")
    runner = found["runner"]
    parent = runner[0][1].split()[0]
    installs = " ".join(arg for key, arg in found.get(parent, []) if key == "RUN")
    if "/usr/src/pytpu" not in installs:
        problems.append(f"the runner builds on {parent!r}, not on the stage that installs PyTPU")
    copies = [arg for key, arg in runner if key == "COPY"]
    pinned = r"--from=ghcr\.io/actions/actions-runner:\d+\.\d+\.\d+ .*/home/runner /home/runner"
    if not any(re.search(pinned, arg) for arg in copies):
        problems.append("the runner's files are not copied from a pinned actions-runner tag")
    users = [arg for key, arg in runner if key == "USER"]
    if not users or users[-1].split(":")[0] in {"0", "root"}:
        problems.append("the runner stage does not end as a non-root user")
    if ("CMD", f'["{RUN_SH}"]') not in runner:
        problems.append(f"the runner stage does not start {RUN_SH}")
    if names[-1] in {"runner", parent} or found[names[-1]][0][1].split()[0] != parent:
        problems.append("the last stage (the default image) is not PyTPU's own image")
    return problems


def runner_uid(dockerfile: str) -> int:
    users = [arg for key, arg in stages(dockerfile)["runner"] if key == "USER"]
    return int(users[-1].split(":")[0])


def test_dockerfile_has_the_runner_stage() -> None:
    assert runner_image_problems(DOCKERFILE.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("AS runner\n", "AS runners\n", "no stage `runner`"),
        ("actions-runner:2.336.0", "actions-runner:latest", "pinned actions-runner tag"),
        ("USER 1001:1001\nWORKDIR /home/runner", "USER root\nWORKDIR /home/runner", "non-root"),
        ('CMD ["/home/runner/run.sh"]', 'CMD ["bash"]', "does not start"),
        ("FROM base AS pytpu\n", "FROM runner AS pytpu\n", "last stage"),
    ],
)
def test_the_runner_stage_check_can_fail(old: str, new: str, problem: str) -> None:
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    assert old in dockerfile, f"the Dockerfile no longer contains {old!r}: update the test"
    problems = runner_image_problems(dockerfile.replace(old, new, 1))
    assert any(problem in p for p in problems), problems


def test_dockerfile_header_says_how_to_build_each_image() -> None:
    header = DOCKERFILE.read_text(encoding="utf-8").split("\nFROM ", 1)[0]
    assert "docker build -t pytpu ." in header
    assert "docker build --target runner" in header


# -- the values: what the deployment relies on -----------------------------------------------


def values_problems(values: dict[str, Any], runner_user: int) -> list[str]:
    """What is wrong with the chart's values for one TPU VM per `/pytpu migrate`: [] when right.
    `runner_user` is the runner image's uid (the Dockerfile's runner stage)."""
    problems = []
    if values.get("runnerScaleSetName") != SCALE_SET:
        problems.append(f"runnerScaleSetName is not {SCALE_SET!r}")
    if values.get("minRunners") != 0:
        problems.append("minRunners is not 0: idle runners would hold TPU VMs")
    if not isinstance(values.get("maxRunners"), int) or values["maxRunners"] < 1:
        problems.append("maxRunners is not a positive number: it caps the TPU VMs billed")
    if not isinstance(values.get("githubConfigSecret"), str):
        problems.append("githubConfigSecret is not a secret's name: credentials in the values")
    if not str(values.get("githubConfigUrl", "")).startswith("https://github.com/"):
        problems.append("githubConfigUrl is not a GitHub address")
    if values.get("containerMode"):
        problems.append("containerMode moves the job out of the container that has the TPU")
    spec = values.get("template", {}).get("spec", {})
    runners = [c for c in spec.get("containers", []) if c.get("name") == "runner"]
    if len(runners) != 1:
        return [*problems, "no container named runner (ARC finds the runner by that name)"]
    runner = runners[0]
    if runner.get("command") != [RUN_SH]:
        problems.append(f"the runner container does not run {RUN_SH}")
    if {"name": "PJRT_DEVICE", "value": "TPU"} not in runner.get("env", []):
        problems.append("PJRT_DEVICE=TPU is not set")
    resources = runner.get("resources", {})
    chips = resources.get("limits", {}).get(TPU)
    if not isinstance(chips, int) or chips < 1:
        problems.append(f"the runner does not ask for {TPU}")
    elif resources.get("requests", {}).get(TPU) != chips:
        problems.append(f"{TPU} requests differ from its limits")
    selector = spec.get("nodeSelector", {})
    if ACCELERATOR not in selector or TOPOLOGY not in selector:
        problems.append("the pod does not select a TPU node pool (accelerator and topology)")
    elif chips != prod(int(n) for n in str(selector[TOPOLOGY]).split("x")):
        # A single-host slice: the topology's chips are all one VM's, and the pod takes them all.
        problems.append(f"{TPU}: {chips} is not all chips of the {selector[TOPOLOGY]} slice")
    if not any(tolerates_tpu_taint(t) for t in spec.get("tolerations", [])):
        problems.append("the pod does not tolerate the TPU taint google.com/tpu=present")
    context = {**spec.get("securityContext", {}), **runner.get("securityContext", {})}
    if context.get("runAsNonRoot") is not True or context.get("runAsUser") != runner_user:
        problems.append(f"the runner does not run as non-root uid {runner_user}")
    if context.get("privileged"):
        problems.append("the runner is privileged")
    volumes = {v.get("name"): v for v in spec.get("volumes", [])}
    mounts = {m.get("mountPath"): m.get("name") for m in runner.get("volumeMounts", [])}
    if WORK not in mounts or "emptyDir" not in volumes.get(mounts[WORK], {}):
        problems.append(f"{WORK} is not an emptyDir volume")
    return problems


def tolerates_tpu_taint(toleration: dict[str, Any]) -> bool:
    if toleration.get("key") != TPU or toleration.get("effect") not in {"NoSchedule", None}:
        return False
    if toleration.get("operator") == "Exists":
        return True
    return toleration.get("operator", "Equal") == "Equal" and toleration.get("value") == "present"


def test_values_run_one_tpu_vm_per_job() -> None:
    uid = runner_uid(DOCKERFILE.read_text(encoding="utf-8"))
    assert values_problems(load_values(), uid) == []


def _runner(values: dict[str, Any]) -> dict[str, Any]:
    return values["template"]["spec"]["containers"][0]


BREAKS: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("scale-set", lambda v: v.update(runnerScaleSetName="tpu"), "runnerScaleSetName"),
    ("idle-runner", lambda v: v.update(minRunners=1), "minRunners"),
    ("no-cap", lambda v: v.pop("maxRunners"), "maxRunners"),
    (
        "inline-credentials",
        lambda v: v.update(githubConfigSecret={"github_app_id": "1"}),
        "credentials",
    ),
    ("dind", lambda v: v.update(containerMode={"type": "dind"}), "containerMode"),
    ("no-tpu", lambda v: _runner(v)["resources"].pop("limits"), "does not ask"),
    ("few-chips", lambda v: _runner(v)["resources"]["limits"].update({TPU: 1}), "requests"),
    ("no-selector", lambda v: v["template"]["spec"].pop("nodeSelector"), "select a TPU"),
    (
        "chips-of-slice",
        lambda v: v["template"]["spec"]["nodeSelector"].update({TOPOLOGY: "2x4"}),
        "not all chips",
    ),
    ("no-toleration", lambda v: v["template"]["spec"].pop("tolerations"), "TPU taint"),
    (
        "wrong-toleration",
        lambda v: v["template"]["spec"]["tolerations"][0].update(value="absent"),
        "TPU taint",
    ),
    (
        "root",
        lambda v: v["template"]["spec"]["securityContext"].update(runAsUser=0),
        "non-root",
    ),
    (
        "privileged",
        lambda v: _runner(v)["securityContext"].update(privileged=True),
        "privileged",
    ),
    ("no-pjrt", lambda v: _runner(v).pop("env"), "PJRT_DEVICE"),
    ("command", lambda v: _runner(v).update(command=["bash"]), "run.sh"),
    ("work", lambda v: v["template"]["spec"].pop("volumes"), "emptyDir"),
    ("name", lambda v: _runner(v).update(name="main"), "named runner"),
]


@pytest.mark.parametrize(("breaks", "problem"), [pytest.param(b, p, id=i) for i, b, p in BREAKS])
def test_the_values_check_can_fail(breaks: Callable[[dict[str, Any]], Any], problem: str) -> None:
    values = load_values()
    breaks(values)
    problems = values_problems(values, runner_uid(DOCKERFILE.read_text(encoding="utf-8")))
    assert any(problem in p for p in problems), problems


# -- one image, one scale set name, one chart version everywhere ---------------------------------


# `helm install NAME ... CHART` of the scale set's chart (not the controller's), once a command's
# continued lines are joined.
SCALE_SET_INSTALL = re.compile(
    r"helm install (\S+) [^\n]*oci://ghcr\.io/actions/actions-runner-controller-charts/"
    r"gha-runner-scale-set(?![-\w])"
)


def consistency_problems(values: dict[str, Any], values_text: str, doc: str) -> list[str]:
    """What the docs and the values (its text: the comment's helm command) disagree on: []
    when they agree."""
    problems = []
    image = _runner(values).get("image", "")
    built = re.findall(r"docker build --target runner -t (\S+) \.", doc)
    if built != [image]:
        problems.append(f"the docs build {built}, the values run {image!r}")
    if f"docker push {image}" not in doc:
        problems.append(f"the docs do not push {image!r}")
    name = values.get("runnerScaleSetName")
    for text, where in ((doc, "docs/deploy.md"), (values_text, "values.yaml's comment")):
        installs = re.findall(SCALE_SET_INSTALL, re.sub(r"\\\n[#\s]*", " ", text))
        if installs != [name]:
            problems.append(f"{where} installs {installs}, the values name {name!r}")
    if f"runs-on: {name}" not in doc:
        problems.append(f"the docs do not say `runs-on: {name}`")
    charts = set(re.findall(r"--version (\S+)", doc + values_text))
    if len(charts) != 1:
        problems.append(f"several chart versions: {sorted(charts)}")
    return problems


def test_docs_values_and_dockerfile_agree() -> None:
    values_text = VALUES.read_text(encoding="utf-8")
    doc = DEPLOY_DOC.read_text(encoding="utf-8")
    assert consistency_problems(yaml.safe_load(values_text), values_text, doc) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("pytpu-runner:0.1.0\n", "pytpu-runner:0.2.0\n", "the docs build"),
        ("runnerScaleSetName: pytpu-tpu", "runnerScaleSetName: pytpu-v5e", "installs"),
        ("--version 0.14.2", "--version 0.13.0", "chart versions"),
    ],
)
def test_the_consistency_check_can_fail(old: str, new: str, problem: str) -> None:
    values_text = VALUES.read_text(encoding="utf-8")
    assert old in values_text, f"values.yaml no longer contains {old!r}: update the test"
    values_text = values_text.replace(old, new, 1)
    doc = DEPLOY_DOC.read_text(encoding="utf-8")
    problems = consistency_problems(yaml.safe_load(values_text), values_text, doc)
    assert any(problem in p for p in problems), problems


def test_the_docs_pin_the_dockerfiles_runner_release() -> None:
    found = re.search(r"actions-runner:(\d+\.\d+\.\d+)", DOCKERFILE.read_text(encoding="utf-8"))
    assert found is not None
    assert f"ghcr.io/actions/actions-runner:{found.group(1)}" in DEPLOY_DOC.read_text("utf-8")


def comment_above_runs_on() -> str:
    """The comment lines right above the workflow's `runs-on:` (the one place the workflow names
    the scale set: its labels stay those of a runner on a TPU VM)."""
    lines = WORKFLOW.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("runs-on:"))
    above = []
    while at > 0 and lines[at - 1].strip().startswith("#"):
        at -= 1
        above.insert(0, lines[at].strip())
    return " ".join(above)


def test_workflow_readme_and_docs_point_at_each_other() -> None:
    comment = comment_above_runs_on()
    assert f"`runs-on: {SCALE_SET}`" in comment and "docs/deploy.md" in comment, comment
    assert "[docs/deploy.md](docs/deploy.md)" in README.read_text(encoding="utf-8")
    heading = "\n## GitHub App mode handing jobs to the pool\n"
    doc = DEPLOY_DOC.read_text(encoding="utf-8")
    assert heading in doc
    section = doc.split(heading, 1)[1].split("\n## ")[0]
    for words in ("pytpu serve --run-on workflow", "workflow_dispatch", "`issue`", "`comment`"):
        assert words in section, f"the App mode section does not mention {words}"
