"""``python -m pyserini_moe.dpr``: the command lives in :mod:`pyserini_moe.cli.dpr`."""

import sys

from pyserini_moe.cli import run_main
from pyserini_moe.cli.dpr import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(run_main(main))
