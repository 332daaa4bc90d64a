"""TREC CAR paragraph collections (CBOR) as :class:`Document` streams, for indexing or encoding."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from pyserini_moe.data.beir import Document
from pyserini_moe.errors import DataFormatError

_NOT_CAR = "not a TREC CAR paragraphs file"


def read_car_paragraphs(path: str | os.PathLike) -> Iterator[Document]:
    """Stream the paragraphs of a CAR ``*.cbor`` paragraphs file: id = paragraph id, no title.

    The file is checked before streaming starts: every CAR file begins with a CBOR array (the
    header or the first paragraph), and handing anything else to the CBOR decoder can make it
    try to allocate gigabytes for a bogus length.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"TREC CAR paragraphs file not found: {path}")
    with path.open("rb") as f:
        head = f.read(1)
    if not head:
        raise DataFormatError(path, f"{_NOT_CAR} (the file is empty)")
    if head[0] >> 5 != 4:  # CBOR major type 4 = array
        raise DataFormatError(path, f"{_NOT_CAR} (it does not start with a CBOR array)")
    return _iter_paragraphs(path)


def _iter_paragraphs(path: Path) -> Iterator[Document]:
    # imported here: every corpus reader imports this module, and a GPU node that trains or
    # encodes BEIR collections need not have the CAR reader installed
    from trec_car.read_data import iter_paragraphs  # noqa: PLC0415

    count = 0
    with path.open("rb") as f:
        try:
            for para in iter_paragraphs(f):
                doc = Document(para.para_id, "", para.get_text())
                count += 1
                yield doc
        except Exception as e:  # the CAR reader raises bare CBOR/type/index errors on bad input
            raise DataFormatError(path, f"{_NOT_CAR} (paragraph {count + 1}: {type(e).__name__}: "
                                        f"{e})") from e
    if count == 0:
        raise DataFormatError(path, "no paragraphs")
