"""Write documents, topics and qrels in the formats Pyserini/Anserini and trec_eval read."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from pyserini_moe.data.beir import Document
from pyserini_moe.errors import UserError
from pyserini_moe.io import atomic_path, open_text_output

_FIELD_BREAKS = re.compile(r"[\t\r\n]")


def _checked_id(value: str, kind: str) -> str:
    """Ids end up in whitespace-separated files (runs, TREC qrels), so blanks would corrupt them."""
    if not value or any(c.isspace() for c in value):
        raise UserError(f"invalid {kind} id {value!r}: ids must be non-empty and contain no whitespace")
    return value


def write_json_collection(docs: Iterable[Document], out_dir: str | os.PathLike,
                          multifield: bool = False) -> Path:
    """Write ``docs`` as a Pyserini JsonCollection: ``out_dir/docs.jsonl``, one ``{"id", "contents"}``
    per line. ``out_dir`` is replaced atomically, so an indexer never sees a half-written collection.

    ``multifield`` writes Pyserini's BEIR "multifield" form instead (Anserini's
    ``BeirMultifieldCollection``): ``contents`` is the text alone and the title a field of its
    own, ``{"id", "contents", "title"}``, which ``IndexCollection -fields title`` indexes apart.

    Returns ``out_dir``. Raises UserError if ``docs`` is empty (Anserini would build an empty index).
    """
    out_dir = Path(out_dir)
    with atomic_path(out_dir, directory=True) as tmp:
        count = 0
        with (tmp / "docs.jsonl").open("w", encoding="utf-8") as f:
            for doc in docs:
                f.write(json.dumps(_json_record(doc, multifield), ensure_ascii=False) + "\n")
                count += 1
        if count == 0:
            raise UserError(f"no documents to write to {out_dir}")
    return out_dir


def _json_record(doc: Document, multifield: bool) -> dict[str, str]:
    """One JsonCollection record: flat ``contents`` = title + " " + text, or multifield."""
    docid = _checked_id(doc.id, "document")
    if multifield:
        return {"id": docid, "contents": doc.text, "title": doc.title}
    return {"id": docid, "contents": doc.contents}


def write_topics_tsv(topics: Mapping[str, str], path: str | os.PathLike) -> Path:
    """Write ``qid<TAB>text`` lines (Anserini's TsvString topic reader); tabs and newlines inside a
    text become spaces because they would split the record. Returns ``path``."""
    path = Path(path)
    if not topics:
        raise UserError(f"no topics to write to {path}")
    with atomic_path(path) as tmp, open_text_output(tmp, path) as f:
        for qid, text in topics.items():
            f.write(f"{_checked_id(qid, 'query')}\t{_FIELD_BREAKS.sub(' ', text)}\n")
    return path


def write_trec_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | os.PathLike) -> Path:
    """Write TREC qrels (``qid 0 docid rel``), the format trec_eval expects. Returns ``path``."""
    path = Path(path)
    if not any(qrels.values()):
        raise UserError(f"no judgments to write to {path}")
    with atomic_path(path) as tmp, open_text_output(tmp, path) as f:
        for qid, judged in qrels.items():
            _checked_id(qid, "query")
            for docid, rel in judged.items():
                f.write(f"{qid} 0 {_checked_id(docid, 'document')} {int(rel)}\n")
    return path
