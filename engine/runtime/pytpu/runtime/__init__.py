"""PyTPU's test runtime: what the behaviour tests `pytpu testgen` writes need to run.

`support` holds the functions the tests call; `plugin` is the pytest plugin (loaded by pytest
through the `pytest11` entry point); `bootstrap` starts PyTPU inside a program it runs, with the
harness of test generation (`harness`) or the step timer of the benchmark (`timer`). Importing
this package imports neither torch nor torch_xla.
"""

from importlib.metadata import version

DISTRIBUTION = "pytpu-runtime"
__version__ = version(DISTRIBUTION)
# What a generated suite pins in its requirements.txt.
REQUIREMENT = f"{DISTRIBUTION}=={__version__}"
