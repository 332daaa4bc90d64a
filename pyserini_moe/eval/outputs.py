"""Outputs a command replaces only when it wrote them: ``eval``'s tables and ``analyze``'s
reports and plots.

A results page being regenerated is the normal case (the regression files rewrite theirs on
every run), so an ``--overwrite`` flag would be needed on every such call; a file of the user's
(notes, a hand-written table, a picture) named by mistake is what must not go without a word.
Each output flag therefore has a *sign*: a test of an existing file's first bytes or lines by
which the command knows the file as one it wrote. An empty file has nothing to lose and is
always replaced.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO

from pyserini_moe.errors import UserError
from pyserini_moe.io import GZIP_MAGIC

# A test of an existing output file: True when the command wrote it.
Sign = Callable[[Path], bool]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def refuse_foreign_outputs(outputs: Mapping[str, str | None], signs: Mapping[str, Sign],
                           command: str) -> None:
    """Each existing, non-empty ``{flag: file}`` whose ``signs[flag]`` does not know it is
    refused before the work, naming the file and the flag."""
    for flag, target in outputs.items():
        if target is None or not Path(target).is_file() or Path(target).stat().st_size == 0:
            continue
        if not signs[flag](Path(target)):
            raise UserError(f"{flag} {target} exists and is not a file {command} wrote: "
                            f"{command} replaces only its own earlier output; name another file "
                            "or move this one")


def text_sign(test: Callable[[list[str]], bool], count: int = 3) -> Sign:
    """A sign reading the first ``count`` lines (:func:`head_lines`); a file without a line
    (only gzip's frame) is known, as an empty one is."""
    return lambda path: (lambda lines: not lines or test(lines))(head_lines(path, count))


def head_lines(path: Path, count: int = 3) -> list[str]:
    """The first ``count`` lines of ``path`` (blank ones included), gunzipped when it is gzip
    (an earlier eval wrote plain text under .gz names); a file that cannot be read as text
    gives a line no sign matches."""
    try:
        with path.open("rb") as handle:
            packed = handle.read(2) == GZIP_MAGIC
        with (gzip.open(path, "rb") if packed else path.open("rb")) as handle:
            raw = [handle.readline(1 << 16) for _ in range(count)]
        return [line.decode("utf-8-sig").rstrip("\r\n") for line in raw if line]
    except (OSError, EOFError, UnicodeDecodeError, zlib.error):
        return ["\0"]


def png_sign(keyword: str, text: str) -> Sign:
    """A sign of PNG files whose text chunks (``tEXt``, before the image data) hold ``keyword``
    = ``text``: the entry the command itself writes. Matplotlib's own ``Software`` entry is in
    every figure a user saves with it, so it is no sign; a picture of the user's, or a text
    file, is not known."""
    return lambda path: png_text(path).get(keyword) == text


def png_text(path: Path) -> dict[str, str]:
    """The ``tEXt`` entries of a PNG file read up to its image data ({} for a file that is not
    a PNG or cannot be read): the chunks are walked by their lengths, so a keyword that merely
    occurs inside another entry's text is not taken for one."""
    try:
        with path.open("rb") as handle:
            if handle.read(len(PNG_MAGIC)) != PNG_MAGIC:
                return {}
            return _text_chunks(handle)
    except OSError:
        return {}


def _text_chunks(handle: BinaryIO) -> dict[str, str]:
    """``tEXt`` keyword -> text of the chunks before the first ``IDAT`` (``handle`` just past
    the PNG signature); a truncated file gives what was read."""
    found: dict[str, str] = {}
    while len(header := handle.read(8)) == 8:
        size, kind = int.from_bytes(header[:4], "big"), header[4:]
        if kind == b"IDAT" or size > 1 << 24:
            break
        data = handle.read(size)
        handle.seek(4, 1)  # the chunk's CRC
        if kind == b"tEXt" and b"\0" in data:
            keyword, _, text = data.partition(b"\0")
            found[keyword.decode("latin-1")] = text.decode("latin-1")
    return found
