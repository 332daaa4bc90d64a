"""``python -m pyserini_moe.lab.bench``."""

import sys

from pyserini_moe.cli import run_main
from pyserini_moe.cli.bench import main

if __name__ == "__main__":  # a spawned tokenizer worker imports this module again: run nothing
    sys.exit(run_main(main))
