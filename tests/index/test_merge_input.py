"""Checking index shards before a merge (:mod:`pyserini_moe.index.merge`): shards of one
corpus copied elsewhere, and of a gzipped copy."""

from __future__ import annotations

import pytest


def test_shards_of_one_corpus_copied_under_another_folder_name_merge(tmp_path) -> None:
    from pyserini_moe.index.merge import check_shards
    from pyserini_moe.index.meta import IndexMeta, IndexMismatchError

    corpus = {"documents": 4, "sha256": "ab" * 32}
    for name in "012":
        (tmp_path / name).mkdir()
    for i, collection in enumerate(("scifact", "scifact-copy")):
        IndexMeta(kind="dense", collection=collection, encoder="m", encoder_fingerprint="f",
                  dim=4, corpus=corpus, shard={"id": i, "num": 2, "start": 2 * i,
                                               "stop": 2 * i + 2}).write(tmp_path / str(i))
    assert [folder.name for folder, _ in check_shards([tmp_path / "0", tmp_path / "1"])] == [
        "0", "1"]
    other = dict(corpus, sha256="cd" * 32)  # a different corpus is still refused
    IndexMeta(kind="dense", collection="scifact", encoder="m", encoder_fingerprint="f", dim=4,
              corpus=other, shard={"id": 1, "num": 2, "start": 2, "stop": 4}).write(tmp_path / "2")
    with pytest.raises(IndexMismatchError, match="were encoded from different"):
        check_shards([tmp_path / "0", tmp_path / "2"])


def test_shards_of_a_gzipped_copy_say_the_digest_is_of_the_bytes(tmp_path) -> None:
    from pyserini_moe.index.merge import check_shards
    from pyserini_moe.index.meta import IndexMeta, IndexMismatchError

    for i, digest in enumerate(("ab", "cd")):
        (tmp_path / str(i)).mkdir()
        IndexMeta(kind="dense", collection="c", encoder="m", encoder_fingerprint="f", dim=4,
                  corpus={"documents": 4, "sha256": digest * 32},
                  shard={"id": i, "num": 2, "start": 2 * i, "stop": 2 * i + 2}
                  ).write(tmp_path / str(i))
    with pytest.raises(IndexMismatchError, match=r"or one copy of the corpus is gzipped"):
        check_shards([tmp_path / "0", tmp_path / "1"])
