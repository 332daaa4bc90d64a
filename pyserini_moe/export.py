"""``python -m pyserini_moe.export``: the command lives in :mod:`pyserini_moe.cli.export`."""

import sys

from pyserini_moe.cli import run_main
from pyserini_moe.cli.export import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(run_main(main))
