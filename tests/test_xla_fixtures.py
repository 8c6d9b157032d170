"""Migrated programs run on XLA: one CUDA-style fixture program per rule family is migrated with
`rewrite --write`, then run on XLA:CPU. Each must exit 0, really execute graphs, compile no more
graphs when it runs twice as many steps, and compute what the original computes."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytpu.engine.rewriter import checkout

FIXTURES = Path(__file__).parent / "fixtures" / "xla"
HARNESS = Path(__file__).parent / "fixtures" / "xla_metrics.py"
# (fixture, flag that sets its length, a length past warm-up, whether the original runs on a CPU)
PROGRAMS = [
    ("train_loop.py", "--steps", 4, True),
    ("amp.py", "--steps", 3, False),
    ("checkpoint.py", "--steps", 3, False),
    ("ddp.py", "--epochs", 2, False),
    ("rollout.py", "--steps", 8, False),  # sampled on XLA: not the CPU's random numbers
]


def _run(args: list[str], cwd: Path, xla: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "XLA_"))}
    if xla:
        env["PJRT_DEVICE"] = "CPU"
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _losses(output: str) -> list[float]:
    return [float(v) for v in re.findall(r"^loss (\S+)$", output, flags=re.MULTILINE)]


def _migrated_run(tmp_path: Path, script: str, flag: str, length: int) -> tuple[dict, str]:
    metrics = tmp_path / f"metrics-{length}.json"
    result = _run([str(HARNESS), str(metrics), script, flag, str(length)], tmp_path, xla=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(metrics.read_text()), result.stdout


@pytest.mark.parametrize(
    ("name", "flag", "length", "runs_on_cpu"), PROGRAMS, ids=[p[0] for p in PROGRAMS]
)
def test_migrated_fixture_runs_on_xla(tmp_path, name, flag, length, runs_on_cpu):
    shutil.copy(FIXTURES / name, tmp_path / name)
    original = _run([name, flag, str(length)], tmp_path, xla=False) if runs_on_cpu else None

    result = checkout.run(tmp_path / name, write=True)
    assert [f.error for f in result.files if f.error] == []
    assert result.changed, "the fixture must need a migration"

    metrics, output = _migrated_run(tmp_path, name, flag, length)
    assert metrics["executions"] > 0, "nothing ran on the XLA device"
    losses = _losses(output)
    assert losses and all(math.isfinite(v) for v in losses), output

    longer, _ = _migrated_run(tmp_path, name, flag, 2 * length)
    assert longer["compiles"] == metrics["compiles"], "compiles grew with the step count"
    assert longer["executions"] > metrics["executions"]

    if original is not None:
        assert original.returncode == 0, original.stderr[-3000:]
        expected = _losses(original.stdout)
        assert len(expected) == len(losses)
        for got, want in zip(losses, expected, strict=True):
            assert got == pytest.approx(want, rel=1e-4), (losses, expected)
    if name == "checkpoint.py":
        assert "roundtrip 0.000000" in output
