"""TREC CAR paragraphs: files built here in the CBOR layout trec_car.read_data expects."""

from __future__ import annotations

import re
from pathlib import Path

import cbor
import pytest

from pyserini_moe.data.beir import Document
from pyserini_moe.data.car import read_car_paragraphs
from pyserini_moe.errors import DataFormatError

PARAGRAPHS_FILE = 2  # CAR file-type tag of a paragraphs file (0 = pages, 1 = outlines)


def paragraph(para_id: str, *bodies: list) -> list:
    """``Paragraph.from_cbor`` layout: [0, id bytes, [body, ...]]."""
    return [0, para_id.encode("ascii"), list(bodies)]


def text(s: str) -> list:
    return [0, s]


def link(page: str, anchor: str) -> list:
    """``ParaLink``: [1, [tag, page name, [section] or [], page id bytes, anchor text]]."""
    return [1, [0, page, [], f"enwiki:{page}".encode("ascii"), anchor]]


PARAS = [
    paragraph("aaa111", text("Aftertaste is the "), link("Taste", "taste"), text(" after eating.")),
    paragraph("bbb222", text("Second paragraph.")),
]


def write_car(path: Path, paras: list, file_type: int | None = PARAGRAPHS_FILE) -> Path:
    """With a header: ["CAR", [file type], provenance], then an indefinite array of paragraphs."""
    with path.open("wb") as f:
        if file_type is not None:
            f.write(cbor.dumps(["CAR", [file_type], [[], "built by pyserini_moe tests"]]))
            f.write(b"\x9f")
        for p in paras:
            f.write(cbor.dumps(p))
        if file_type is not None:
            f.write(b"\xff")
    return path


@pytest.mark.parametrize("file_type", [PARAGRAPHS_FILE, None], ids=["header", "headerless"])
def test_reads_paragraphs(tmp_path: Path, file_type: int | None) -> None:
    path = write_car(tmp_path / "paragraphs.cbor", PARAS, file_type)
    assert list(read_car_paragraphs(path)) == [
        Document("aaa111", "", "Aftertaste is the taste after eating."),
        Document("bbb222", "", "Second paragraph."),
    ]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="TREC CAR paragraphs file not found: .*nope.cbor"):
        read_car_paragraphs(tmp_path / "nope.cbor")


@pytest.mark.parametrize(("content", "message"), [
    (b"", "the file is empty"),
    (b"para1\tsome text\n", "it does not start with a CBOR array"),
    (b'{"_id": "1", "text": "json"}\n', "it does not start with a CBOR array"),
])
def test_not_car_is_rejected_before_decoding(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.cbor"
    path.write_bytes(content)
    with pytest.raises(DataFormatError, match=re.escape(f"{path}: not a TREC CAR paragraphs file "
                                                       f"({message}")):
        read_car_paragraphs(path)


def test_wrong_car_file_type_and_bad_records(tmp_path: Path) -> None:
    outlines = write_car(tmp_path / "outlines.cbor", PARAS, file_type=1)
    with pytest.raises(DataFormatError, match=re.escape(f"{outlines}: not a TREC CAR paragraphs "
                                                       "file (paragraph 1")):
        list(read_car_paragraphs(outlines))
    broken = write_car(tmp_path / "broken.cbor", [PARAS[0], [7, "not a paragraph"]])
    with pytest.raises(DataFormatError, match=re.escape(f"{broken}: not a TREC CAR paragraphs "
                                                       "file (paragraph 2")):
        list(read_car_paragraphs(broken))


def test_header_without_paragraphs(tmp_path: Path) -> None:
    path = write_car(tmp_path / "empty.cbor", [])
    with pytest.raises(DataFormatError, match=re.escape(f"{path}: no paragraphs")):
        list(read_car_paragraphs(path))
