"""Writing an impact index's document vectors (:mod:`pyserini_moe.index.doc_vectors`) from a
damaged shard file."""

from __future__ import annotations

import json

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.index.doc_vectors import write_doc_vectors


def test_a_damaged_vectors_file_names_the_shards_file_and_line(tmp_path):
    shard = tmp_path / "i-1" / "vectors.jsonl"
    shard.parent.mkdir()
    line = json.dumps({"id": "d0", "vector": {"cat": 3}}) + "\n"
    shard.write_text(line + line[:-10])  # an interrupted copy
    link = tmp_path / "links" / "vectors-00001.jsonl"  # as the merge reads the shards
    link.parent.mkdir()
    link.symlink_to(shard)
    with pytest.raises(UserError, match=f"^{shard}:2: not a vector line"):
        write_doc_vectors([link], tmp_path / "out")
