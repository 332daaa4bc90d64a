"""What every ``python -m pyserini_moe.*`` command shares: user errors become one line, exit 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

# Errors caused by the user's input or machine, reported without a traceback. Programming errors
# (TypeError, AttributeError, ...) still show their traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError,
    PermissionError,
    ValueError, RuntimeError, KeyError,
)


def output_file(value: str) -> str:
    """argparse type of a file output: a directory there is refused before any work is done."""
    if Path(value).is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a directory: name a file to write")
    return value


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run ``main``; print a user error as ``error: ...`` on stderr and return 2."""
    try:
        return main(argv)
    except USER_ERRORS as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
