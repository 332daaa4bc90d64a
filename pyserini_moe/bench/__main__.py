"""``python -m pyserini_moe.bench``."""

import sys

from pyserini_moe.bench.run import main
from pyserini_moe.cli import run_main

if __name__ == "__main__":  # a spawned tokenizer worker imports this module again: run nothing
    sys.exit(run_main(main))
