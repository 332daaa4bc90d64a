"""Encoder lengths (:mod:`pyserini_moe.encode.common`): a max length beyond the model's
position embeddings is refused when the encoder is built, naming the flag of its side, and
a query cut is said once."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, RobertaConfig

from pyserini_moe.encode import DenseDocumentEncoder, DenseQueryEncoder
from pyserini_moe.encode.common import position_limit
from pyserini_moe.errors import UserError
from pyserini_moe.modeling import SiameseBiEncoder

pytestmark = pytest.mark.usefixtures("one_thread")


def test_index_and_query_encoders_refuse_a_length_beyond_the_positions(tiny_bert) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")  # 512 positions
    assert position_limit(model) == 512
    with pytest.raises(ValueError, match=r"max length 513 is above the 512 token positions"):
        DenseDocumentEncoder(model, max_length=513)
    with pytest.raises(ValueError, match=r"--query-max-length 512 or less"):
        DenseQueryEncoder(model, max_length=1024)
    assert DenseDocumentEncoder(model, max_length=512).max_length == 512


def test_roberta_positions_lose_the_padding_offset() -> None:
    class Wrapper(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config

    assert position_limit(Wrapper(RobertaConfig(max_position_embeddings=514, pad_token_id=1))) \
        == 512
    assert position_limit(Wrapper(BertConfig(max_position_embeddings=512))) == 512
    assert position_limit(object()) is None


def test_queries_default_to_every_position_and_a_cut_is_said(tiny_bert, caplog) -> None:
    """A query encoder used to keep 64 tokens whatever the model (CISI's long queries lost their
    tail silently); it now keeps every position the model has, and says when a query is cut."""
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
    assert DenseQueryEncoder(model).max_length == 512
    short = DenseQueryEncoder(model, max_length=4)
    with caplog.at_level("WARNING", logger="pyserini_moe.encode.common"):
        short.encode_batch(["a cat", "what is the dense retrieval of a mixture of experts"])
        short.encode_batch(["what is the dense retrieval of a mixture of experts"])
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ["queries longer than 4 tokens are cut (--query-max-length); the first "
                        "batch has 1"]  # said once per encoder
    assert short.queries_cut == 2


def test_a_very_long_query_is_said_cut_once_not_by_transformers_too(caplog, capfd) -> None:
    """Counting the tokens of a whole 200k-character query made transformers warn of its length
    ("Token indices sequence length is longer ...") beside this notice."""
    from pyserini_moe.modeling import packaged_minilm

    model = SiameseBiEncoder.from_backbone(packaged_minilm(), device="cpu")  # 512 positions
    with caplog.at_level("WARNING"):
        DenseQueryEncoder(model, max_length=8).encode_batch(["cat sat " * 5_000])
    said = [r.getMessage() for r in caplog.records] + capfd.readouterr().err.splitlines()
    assert not [line for line in said if "Token indices sequence length" in line], said
    assert any("queries longer than 8 tokens are cut" in line for line in said)


def test_a_too_long_length_names_the_flag_of_its_side(tiny_bert) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
    with pytest.raises(UserError, match=r"use --query-max-length 512 or less$"):
        DenseQueryEncoder(model, max_length=10**11)
    with pytest.raises(UserError, match=r"use --max-length 512 or less$"):
        DenseDocumentEncoder(model, max_length=10**11)
