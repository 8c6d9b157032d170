"""A Jupyter notebook as a program: `python -m pytpu.runtime.notebook train.ipynb` runs its code
cells in order in a kernel of this Python, headless, as `jupyter execute` does.

It differs from `jupyter execute` in what a run command needs: the kernel is always this
Python's ipykernel (a notebook's kernelspec names its author's environment, `conda-env-torch`),
the notebook's folder is the working directory, what the cells print goes to standard output as
they print it (the kernel echoes its output), nothing is written back, and a cell's error ends
the run with exit status 1 and the cell's traceback on standard error. Under PyTPU, the harness
or the step timer run in the kernel, not here (`pytpu.runtime.kernel`).

This module imports no torch, and nbclient only when it runs a notebook.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pytpu.runtime.command import RUNNER_MODULE
from pytpu.runtime.kernel import ECHO

# The kernel's own log (its transport, its debugger) is not the notebook's: errors only. (The
# debugger warns of frozen modules unless Python runs without them.)
KERNEL_OPTIONS = (ECHO, "--IPKernelApp.log_level=ERROR")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# --- the runner ----------------------------------------------------------------------------------


def run(path: Path, timeout: int | None = None) -> int:
    """Execute the notebook at `path`; its exit status."""
    import nbclient
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    kernels = []  # the kernel's process, for its exit status
    client = nbclient.NotebookClient(
        nbformat.read(path, as_version=4),
        kernel_manager_class=_kernel_manager_class(),
        timeout=timeout,
        resources={"metadata": {"path": str(path.parent.resolve())}},
        on_notebook_start=lambda notebook: kernels.append(client.km.provisioner.process),
    )
    try:
        client.execute()
    except DeadKernelError:
        # A kernel that ended itself with status 0 (`os._exit(0)` in a cell, as PyTPU's step
        # timer ends a program once its steps are timed) ends the run as a script's would.
        status = kernels[0].wait() if kernels else None
        if status == 0:
            return 0
        return _failed(path, f"the kernel died (exit status {status})")
    except (CellExecutionError, CellTimeoutError) as exc:
        return _failed(path, _ANSI.sub("", str(exc)).strip())
    return 0


def _failed(path: Path, message: str) -> int:
    sys.stdout.flush()
    print(f"{path}: {message}", file=sys.stderr)
    return 1


def _kernel_manager_class() -> type:
    """A kernel manager whose kernel is this Python's ipykernel, echoing its output, whatever
    kernel the notebook's metadata names."""
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict
    from jupyter_client.kernelspec import KernelSpec
    from jupyter_client.manager import AsyncKernelManager

    class ThisPython(AsyncKernelManager):
        @property
        def kernel_spec(self) -> KernelSpec:
            spec = get_kernel_dict(list(KERNEL_OPTIONS), ["-Xfrozen_modules=off"])
            return KernelSpec(resource_dir=RESOURCES, **spec)

    return ThisPython


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {RUNNER_MODULE}", description="Run a notebook's code cells headless."
    )
    parser.add_argument("notebook", type=Path, help="the .ipynb file")
    parser.add_argument("--timeout", type=int, help="seconds a cell may take (default: no limit)")
    arguments = parser.parse_args(argv)
    if not arguments.notebook.is_file():
        parser.error(f"{arguments.notebook}: no such notebook")
    return run(arguments.notebook, arguments.timeout)


if __name__ == "__main__":
    sys.exit(main())
