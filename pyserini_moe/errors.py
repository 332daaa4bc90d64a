"""The one exception base for user errors.

Anything raised as a :class:`UserError` (bad flags, files, recipes, models; a collection, index
or run that does not fit the command) is printed by every command line as one ``error:`` line
with exit code 2; anything else is a programming error and keeps its traceback. It subclasses
``ValueError`` so library callers that catch ``ValueError`` keep working.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
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


# What to do about the operating system's refusals of a write (or a read), by errno.
_ADVICE = {
    errno.ENOSPC: "no space left on the device: free some, or write elsewhere",
    errno.EDQUOT: "the disk quota is exceeded: free some, or write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EACCES: "permission denied: write elsewhere, or change the folder's permissions",
    errno.EPERM: "operation not permitted: write elsewhere, or change the folder's permissions",
    errno.EIO: "input/output error: the disk or its mount is failing",
    errno.EFBIG: "the file is too large for this file system: write elsewhere",
}


def os_error_line(e: OSError) -> str:
    """One line for an operating-system error: the path, what happened and what to do."""
    where = e.filename if e.filename is not None else None
    advice = _ADVICE.get(e.errno) if e.errno is not None else None
    reason = advice or (e.strerror or str(e))
    return f"{where}: {reason}" if where else reason


_ERRNO_IN_TEXT = re.compile(r"\b(\d{1,3}) \(([A-Za-z][^)]*)\)")
_ERRNO_NAMES = {os.strerror(code).lower(): code for code in _ADVICE}


def _errno_behind(error: BaseException, path: Path) -> int | None:
    """The errno a library's write error stands for: named in its message (Faiss: "write error
    in F: 28 (No space left on device)"), or, for messages that name none (PyTorch: "file write
    failed"), what the destination's file system says: read-only, or full."""
    text = str(error)
    for code, _name in _ERRNO_IN_TEXT.findall(text):
        if int(code) in _ADVICE:
            return int(code)
    for name, code in _ERRNO_NAMES.items():
        if name in text.lower():
            return code
    folder = path if path.is_dir() else path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        stats = os.statvfs(folder)
    except OSError:
        return None
    if stats.f_flag & os.ST_RDONLY:
        return errno.EROFS
    if stats.f_bavail == 0:
        return errno.ENOSPC
    if not os.access(folder, os.W_OK):
        return errno.EACCES
    return None


@contextlib.contextmanager
def library_write(path: str | os.PathLike) -> Iterator[None]:
    """Around a write done by a library that reports the operating system's refusal as its own
    error (Faiss's and PyTorch's RuntimeError): that refusal is raised as the ``OSError`` it is,
    naming ``path``, so the command layer says it in one line; any other error is unchanged."""
    try:
        yield
    except RuntimeError as e:
        code = _errno_behind(e, Path(path))
        if code is None:
            raise
        raise OSError(code, os.strerror(code), str(path)) from e
