"""``python -m pyserini_moe.convert``: the command lives in :mod:`pyserini_moe.cli.convert`."""

import sys

from pyserini_moe.cli import run_main
from pyserini_moe.cli.convert import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(run_main(main))
