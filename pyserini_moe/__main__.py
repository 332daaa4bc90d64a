"""``python -m pyserini_moe COMMAND ...``: the ``pyserini-moe`` console script
(:mod:`pyserini_moe.cli.main`), for an environment whose scripts folder is not on the PATH."""

import sys

from pyserini_moe.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
