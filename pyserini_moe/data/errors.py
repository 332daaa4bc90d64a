"""One exception type for malformed input, always pointing at the offending file and line."""

from __future__ import annotations

import os
from pathlib import Path

from pyserini_moe.errors import UserError


class DataFormatError(UserError):
    """Bad input data; the message starts with ``file[:line]:`` so the user can open the spot.

    ``path`` and ``line`` (1-based, or None when the problem is not tied to one line) are kept as
    attributes for callers that want to report them differently.
    """

    def __init__(self, path: str | os.PathLike, message: str, line: int | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {message}")
