"""``python -m pyserini_moe.sizes``: the command lives in :mod:`pyserini_moe.cli.sizes`."""

import sys

from pyserini_moe.cli import run_main
from pyserini_moe.cli.sizes import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(run_main(main))
