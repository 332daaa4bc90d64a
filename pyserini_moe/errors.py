"""The one exception base for user errors.

Anything raised as a :class:`UserError` (bad flags, files, recipes, models; a collection, index
or run that does not fit the command) is printed by every command line as one ``error:`` line
with exit code 2; anything else is a programming error and keeps its traceback. It subclasses
``ValueError`` so library callers that catch ``ValueError`` keep working.
"""

from __future__ import annotations

import os
from pathlib import Path


class UserError(ValueError):
    """Input the user can fix; the message says what and, where it can, how."""


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


class Terminated(KeyboardInterrupt):
    """SIGTERM, unwound like Ctrl-C so that nothing half-written stays behind."""


# The termination signal received, if any. The command layer's handler raises
# :class:`Terminated`, but a signal that lands inside a finaliser (a ``__del__``) has its
# exception swallowed ("Exception ignored in ..."), and the command would run on to write its
# output: writers check this before they commit one (:func:`raise_if_terminated`).
_received: list[str] = []


def note_termination(name: str) -> None:
    """Record a termination signal (the command layer's handler)."""
    _received.append(name)


def raise_if_terminated() -> None:
    """Raise :class:`Terminated` if a termination signal was received and its exception lost."""
    if _received:
        raise Terminated(_received[0])
