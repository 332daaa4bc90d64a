"""A fused search of experts (:mod:`pyserini_moe.search.experts`) over indexes of different
models."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.errors import UserError


def test_two_models_indexes_of_one_kind_are_pointed_at_fuse(tmp_path) -> None:
    from pyserini_moe.index.meta import write_meta
    from pyserini_moe.search.experts import ExpertFusionSearcher

    for name, model in (("a", "aaaa"), ("b", "bbbb")):
        (tmp_path / name).mkdir()
        write_meta(tmp_path / name, "dense", encoder=f"/models/{model}", encoder_fingerprint=model)
    with pytest.raises(UserError, match="were built by different models.*pyserini_moe.fuse"):
        ExpertFusionSearcher([tmp_path / "a", tmp_path / "b"])


def test_fused_search_refuses_indexes_of_two_models_before_loading_either(tmp_path: Path) -> None:
    """A dense index of one model and an impact index of another were fused without a
    word, although a fused search sums one model's expert scores."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.index.meta import write_meta
    from pyserini_moe.search.experts import ExpertFusionSearcher

    for kind, model in (("dense", "aaaa"), ("impact", "bbbb")):
        (tmp_path / kind).mkdir()
        write_meta(tmp_path / kind, kind, encoder=f"/models/{model}", encoder_fingerprint=model)
    with pytest.raises(UserError, match="were built by different models; --retriever fused "
                                        "fuses the experts of one model"):
        ExpertFusionSearcher([tmp_path / "dense", tmp_path / "impact"])
    (tmp_path / "impact2").mkdir()
    write_meta(tmp_path / "impact2", "dense", encoder="/models/aaaa", encoder_fingerprint="aaaa")
    with pytest.raises(UserError, match="two indexes of the same kind"):
        ExpertFusionSearcher([tmp_path / "dense", tmp_path / "impact2"])
