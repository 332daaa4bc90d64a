"""``python -m pyserini_moe.bench``."""

import sys

from pyserini_moe.bench.run import main
from pyserini_moe.cli import run_main

sys.exit(run_main(main))
