"""A notebook's run, seen from the processes it makes: the process that runs the notebook
(`jupyter execute nb.ipynb`, `python -m pytpu.runtime.notebook nb.ipynb`) and the IPython kernel
it starts, which runs the cells and inherits its environment.

PyTPU's start-up runs in both (`pytpu.runtime.bootstrap`). The kernel is the program: it takes
the harness or the step timer, and echoes what the cells print to its standard output, which is
the runner's (a notebook's printed metrics reach its run command's output as a script's do).
The runner is not: it takes nothing, and names the notebook for the kernel (NOTEBOOK_ENV), whose
cells' code `pytpu.runtime.cells` maps back to the notebook. Which process runs a notebook, and
which notebook, is read from its command line by `pytpu.runtime.command` (its notebook runners).

Standard library only.
"""

from __future__ import annotations

import os

from pytpu.runtime.command import executed_notebook

NOTEBOOK_ENV = "PYTPU_NOTEBOOK"  # the notebook a kernel runs, set by the process that runs it
# The kernel's option to echo what the cells print (IPython's terminal does; a kernel is quiet).
ECHO = "--IPKernelApp.quiet=False"


def is_kernel(argv: list[str]) -> bool:
    """Is this process (by `sys.orig_argv`) an IPython kernel, `python -m ipykernel_launcher`?"""
    return any(
        word in ("ipykernel_launcher", "ipykernel") and argv[index - 1] == "-m"
        for index, word in enumerate(argv[1:], 1)
    )


def hand_over(orig_argv: list[str], argv: list[str]) -> bool:
    """PyTPU's part in a process of a notebook's run, by its command line (`sys.orig_argv`).

    True in the process that runs the notebook: it is not the program, the kernel it starts
    with its environment is, so it takes no harness or timer itself and names the notebook for
    the kernel. In that kernel (False) the cells' printed output is echoed: `argv` (sys.argv,
    which the kernel reads after start-up) gets the kernel's option for it."""
    executed = executed_notebook(orig_argv)
    if executed is not None:
        os.environ[NOTEBOOK_ENV] = os.path.abspath(executed)
        return True
    if is_kernel(orig_argv) and ECHO not in argv:
        argv.append(ECHO)
    return False
