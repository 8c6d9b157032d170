"""PyTPU inside a program it runs: Python imports this file at start-up because PyTPU puts its
folder first on the program's PYTHONPATH (see pytpu.runtime.bootstrap)."""

import os

from pytpu.runtime import bootstrap

bootstrap.start(os.path.dirname(os.path.abspath(__file__)))
