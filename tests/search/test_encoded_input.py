"""Opening an encoded index (:mod:`pyserini_moe.search.encoded`): queries of another export
of the model, and an index rebuilt while a search opens it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")


def test_queries_of_an_int8_export_are_named_the_same_models_export(tmp_path) -> None:
    from pyserini_moe.index.meta import IndexMeta, IndexMismatchError
    from pyserini_moe.search.encoded import check_encoded_queries

    meta = IndexMeta(kind="dense", encoder="/m", encoder_fingerprint="abcd")
    with pytest.raises(IndexMismatchError, match=r"encoded by the same model exported otherwise "
                                                 r"\(an int8 export is another encoder\)"):
        check_encoded_queries(meta, "abcd-int8-x", "idx", "q")
    with pytest.raises(IndexMismatchError, match="encoded by another model"):
        check_encoded_queries(meta, "ffff", "idx", "q")


def test_an_index_rebuilt_while_a_search_opens_it_is_refused(ws, tmp_path, monkeypatch) -> None:
    """The metadata (query encoder) and the vectors must come from one build."""
    import shutil  # noqa: PLC0415

    from pyserini_moe.index.meta import IndexMismatchError  # noqa: PLC0415
    from pyserini_moe.search import encoded  # noqa: PLC0415

    index = Path(shutil.copytree(ws["index"], tmp_path / "live"))
    read = encoded.open_index

    def rebuilt_meanwhile(*args, **kwargs):
        meta = read(*args, **kwargs)
        shutil.copytree(index, tmp_path / "new")  # an --overwrite rebuild renames a new folder
        index.rename(tmp_path / "old")
        (tmp_path / "new").rename(index)
        return meta

    monkeypatch.setattr(encoded, "open_index", rebuilt_meanwhile)
    with pytest.raises(IndexMismatchError, match="was replaced .* search again"):
        encoded.open_searcher("dense", index, device="cpu")
    monkeypatch.setattr(encoded, "open_index", read)
    assert encoded.open_searcher("dense", index, device="cpu").meta.kind == "dense"
