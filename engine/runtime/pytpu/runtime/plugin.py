"""The pytest plugin of PyTPU's behaviour tests (entry point `pytest11`: pytest loads it wherever
pytpu-runtime is installed, so it stays quiet outside a generated suite and imports no torch).

It registers the `pytpu_program` marker, checks PYTPU_DEVICE (cpu, the default, or xla), names
the device in the report of a run that collects a generated suite, and offers the fixtures
`pytpu_device` (the torch device the code under test runs on) and `pytpu_suite` (the requesting
test's `support.Suite`: its settings and recordings).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from pytpu.runtime.channel import DEVICES

SUITE_FILE = "suite.json"  # what marks a folder as a suite `pytpu testgen` wrote


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "pytpu_program: runs the program's own short command")
    kind = os.environ.get("PYTPU_DEVICE", "cpu").strip().lower()
    if kind not in DEVICES:
        raise pytest.UsageError(f"PYTPU_DEVICE={kind!r}: use one of {', '.join(DEVICES[:-1])}")
    if kind != "cpu" and importlib.util.find_spec("torch") is None:
        # (PyTPU itself installs without torch: its Python is not the programs')
        raise pytest.UsageError(
            f"PYTPU_DEVICE={kind}: this Python has no torch; run the suite with the python of"
            " an environment with the programs' requirements and the target's torch"
        )
    if kind == "tpu":
        _tpu_or_its_stand_in()


def _tpu_or_its_stand_in() -> None:
    """On 'tpu' without TorchTPU (no TPU here), the tests and the programs they start run on
    PyTPU's CPU stand-in for the device: loaded here, and in each child through torch's backend
    autoload (a folder of its entry point, which the children's start-up puts on sys.path)."""
    if importlib.util.find_spec("torch_tpu") is not None:
        return
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    from pytpu.runtime import channel, tpu_standin

    if not os.environ.get(channel.STAND_IN_ENV):
        folder = Path(tempfile.mkdtemp(prefix="pytpu-standin-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ[channel.STAND_IN_ENV] = str(tpu_standin.write_autoload(folder))
    tpu_standin.load()


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    if not any(_in_suite(item) for item in items):
        return None
    kind = os.environ.get("PYTPU_DEVICE", "cpu").strip().lower()
    return f"pytpu: code under test runs on {kind} (PYTPU_DEVICE)"


@pytest.fixture(scope="session")
def pytpu_device() -> Any:
    from pytpu.runtime import support

    return support.device()


@pytest.fixture(scope="module")
def pytpu_suite(request: pytest.FixtureRequest) -> Any:
    from pytpu.runtime import support

    return support.Suite(request.path)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The suites of several programs run in the programs' order (their `suite.json` says it):
    a later program may read what an earlier one wrote (`sample.py` a checkpoint of `train.py`),
    as in the recorded runs. Other tests keep their places."""
    orders: dict[Path, int | None] = {}
    places = [i for i, item in enumerate(items) if _order(item, orders) is not None]
    ordered = sorted((items[i] for i in places), key=lambda item: _order(item, orders))
    for place, item in zip(places, ordered, strict=True):
        items[place] = item


def _order(item: pytest.Item, orders: dict[Path, int | None]) -> int | None:
    folder = Path(item.path).parent
    if folder not in orders:
        settings = folder / SUITE_FILE
        order = None
        if settings.is_file():
            try:
                order = json.loads(settings.read_text(encoding="utf-8")).get("order")
            except (OSError, ValueError):
                order = None  # the suite's own tests report a broken suite.json
        orders[folder] = order
    return orders[folder]


def _in_suite(item: pytest.Item) -> bool:
    return (Path(item.path).parent / SUITE_FILE).is_file()
