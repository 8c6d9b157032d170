"""IPython's syntax in a notebook cell (magics, shell lines, help), masked line for line.

The code is the test runtime's, `pytpu.runtime.ipython`: a generated suite loads a notebook's
definitions with it, where PyTPU's engine is not installed. The rewriter and test generation
import it under this name too: one module, the same object.
"""

import sys

from pytpu.runtime import ipython

sys.modules[__name__] = ipython
