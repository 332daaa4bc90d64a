"""``python -m pyserini_moe.analyze``: see :mod:`pyserini_moe.analyze`."""

import sys

from pyserini_moe.analyze import main
from pyserini_moe.cli import run_main

sys.exit(run_main(main))
