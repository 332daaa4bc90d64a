"""BEIR collections (:mod:`pyserini_moe.data.beir`) with gzipped files, or a file beside its
gzipped twin."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.errors import UserError

# --- gzipped qrels, two files of one kind ---------------------------------------------------------


def _collection(root: Path, gz: tuple[str, ...] = (), both: tuple[str, ...] = ()) -> Path:
    """A two-document collection; the files named in ``gz`` gzipped, in ``both`` twice."""
    files = {"corpus.jsonl": "".join(json.dumps({"_id": f"d{i}", "text": f"text {i}"}) + "\n"
                                     for i in (1, 2)),
             "queries.jsonl": json.dumps({"_id": "q1", "text": "text"}) + "\n",
             "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t1\n"}
    (root / "qrels").mkdir(parents=True)
    for name, text in files.items():
        if name in gz or name in both:
            (root / f"{name}.gz").write_bytes(gzip.compress(text.encode()))
        if name not in gz:
            (root / name).write_text(text)
    return root


def test_gzipped_beir_qrels_are_a_split(tmp_path) -> None:
    root = _collection(tmp_path / "c", gz=("queries.jsonl", "qrels/test.tsv"))
    assert BeirCollection(root).splits() == ["test"]
    assert load_qrels(f"{root}:test") == {"q1": {"d1": 1}}
    assert load_topics(f"{root}:test") == {"q1": "text"}


@pytest.mark.parametrize("name", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_a_file_beside_its_gzipped_twin_is_refused(tmp_path, name) -> None:
    root = _collection(tmp_path / "c", both=(name,))
    file = Path(name).name
    with pytest.raises(UserError) as info:  # the qrels are checked against queries and corpus
        load_qrels(f"{root}:test")
    assert str(info.value) == (f"{(root / name).parent} holds both {file} and {file}.gz: which "
                               "one is the collection's cannot be told; keep one of them")
