"""Installs PyTPU's harness in the user's program when PYTPU_HARNESS is set (see pytpu_harness).

Python imports this file at start-up because the harness puts its folder first on PYTHONPATH; it
then hands over to any other sitecustomize the environment has, so nothing of that is lost.
"""

import os
import sys


def _chain_to_the_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path, saved_module = sys.path[:], sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401 - the environment's own, if it has one
    except ImportError:
        pass
    finally:
        sys.path[:] = saved_path
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module


def _install() -> None:
    if os.environ.get("COVERAGE_PROCESS_START"):
        import coverage

        coverage.process_startup()
    if not os.environ.get("PYTPU_HARNESS"):
        return
    support_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, support_dir)
    try:
        import pytpu_harness
    finally:
        sys.path.remove(support_dir)
    pytpu_harness.install_harness()


_chain_to_the_next_sitecustomize()
_install()
