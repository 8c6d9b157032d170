"""`python -m benchmarks.testgen REPO --run CMD`: see the package's docstring."""

import sys

from benchmarks.testgen.cli import main

try:
    sys.exit(main())
except KeyboardInterrupt:
    sys.exit("interrupted: the running suites were stopped")
