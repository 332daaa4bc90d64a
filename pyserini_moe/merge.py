"""``python -m pyserini_moe.merge``: the command lives in :mod:`pyserini_moe.cli.merge`."""

import sys

from pyserini_moe.cli import run_main
from pyserini_moe.cli.merge import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(run_main(main))
