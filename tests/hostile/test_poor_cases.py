"""The poor cases left from the hostile passes (work/note.md, issue 39): each was accepted or
dropped without a word; each is now one error line or one notice."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.modeling.base import Side, is_blank


@pytest.mark.parametrize("query", ["\u200b", " \u200b\ufeff ", "\u2060\t", ""])
def test_an_invisible_query_is_an_empty_query(tiny_bert: Path, query: str) -> None:  # S13
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    assert is_blank(query)
    with pytest.raises(UserError, match="cannot encode an empty query"):
        model.encode(["fine", query], Side.QUERY, 16)


def test_a_query_with_one_visible_character_is_not_blank() -> None:
    assert not is_blank("\u200bq") and not is_blank("é")
