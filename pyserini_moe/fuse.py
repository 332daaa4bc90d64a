"""``python -m pyserini_moe.fuse``: the command lives in :mod:`pyserini_moe.cli.fuse`."""

import sys

from pyserini_moe.cli import run_main
from pyserini_moe.cli.fuse import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(run_main(main))
