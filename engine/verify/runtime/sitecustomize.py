"""Installs PyTPU's step timer in the user's program when PYTPU_BENCHMARK is set (pytpu_timer).

Python imports this file at start-up because the benchmark puts its folder first on PYTHONPATH; it
then hands over to any other sitecustomize the environment has, so nothing of that is lost (the
approach of the test-generation harness's sitecustomize).
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
    if not os.environ.get("PYTPU_BENCHMARK"):
        return
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    try:
        import pytpu_timer
    finally:
        sys.path.remove(here)
    pytpu_timer.install_timer()


_chain_to_the_next_sitecustomize()
_install()
