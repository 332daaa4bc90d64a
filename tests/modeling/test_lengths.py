"""One query, one vector, whatever the route: the model's own ``encode``, ``encode_query``, the
Python API, Pyserini's query encoders, ``search``'s encoder (through the index), and
sentence-transformers' ``encode_query`` / ``encode_document`` all cut texts at the lengths the
model folder records, for every model kind."""

from __future__ import annotations

import pytest
import torch

from pyserini_moe.modeling import Side, load_model
from pyserini_moe.modeling.lengths import PASSAGE_MAX_LENGTH, encode_length, passage_length
from pyserini_moe.representation import Representation
from tests.modeling.conftest import BUILD, QUERY_LENGTH

pytestmark = pytest.mark.usefixtures("one_thread")

QUERIES = ["what is dense retrieval and why does a cat sit on the mat of experts",
           "sparse query about a mixture of expert model with many many words in it"]

def _rep(out, representation: str) -> torch.Tensor:
    return getattr(out, representation)


def test_the_folder_records_the_query_length_and_the_card_states_both(saved) -> None:
    model = load_model(saved, device="cpu")
    assert model.query_max_length == QUERY_LENGTH
    assert encode_length(model, Side.QUERY) == QUERY_LENGTH
    assert encode_length(model, Side.PASSAGE) == passage_length(model) <= PASSAGE_MAX_LENGTH
    card = (saved / "README.md").read_text()
    assert f"| query length | {QUERY_LENGTH} tokens (as trained) |" in card
    assert f"| passage length | {passage_length(model)} tokens |" in card
    assert str(saved.parent) not in card  # no machine path: the folder travels


def test_every_query_route_gives_the_same_vectors(saved) -> None:
    from pyserini_moe.encode.adapters import (
        DenseQueryEncoder,
        ImpactQueryEncoder,
        MultiVectorQueryEncoder,
    )

    model = load_model(saved, device="cpu")
    cut = model.encode(QUERIES, Side.QUERY, QUERY_LENGTH)
    longer = model.encode(QUERIES, Side.QUERY, 64)
    for representation in model.representations:  # the queries really are cut
        short, full = _rep(cut, representation), _rep(longer, representation)
        assert short.shape != full.shape or not torch.allclose(short, full)
    routes = {"encode": model.encode(QUERIES, Side.QUERY),
              "encode_query": model.encode_query(QUERIES)}
    for name, out in routes.items():
        for representation in model.representations:
            torch.testing.assert_close(_rep(out, representation), _rep(cut, representation),
                                       msg=f"{name} {representation}")
    adapters = {Representation.DENSE: DenseQueryEncoder, Representation.SPARSE: ImpactQueryEncoder,
                Representation.MULTI: MultiVectorQueryEncoder}
    for representation in model.representations:
        encoder = adapters[Representation(representation)](model)  # Pyserini's route
        assert encoder.max_length == QUERY_LENGTH
    if "dense" in model.representations:
        vectors = DenseQueryEncoder(str(saved), device="cpu").encode_batch(QUERIES)
        torch.testing.assert_close(torch.as_tensor(vectors), cut.dense, atol=1e-5, rtol=1e-5)


def test_sentence_transformers_cuts_each_side_as_the_model_does(saved) -> None:
    from sentence_transformers import SentenceTransformer

    model = load_model(saved, device="cpu")
    if "dense" not in model.representations:
        pytest.skip("sentence-transformers' dense route: models with a dense vector")
    st = SentenceTransformer(str(saved), device="cpu",
                             trust_remote_code=model.model_type != "siamese")
    queries = torch.as_tensor(st.encode_query(QUERIES))
    passages = torch.as_tensor(st.encode_document(QUERIES))
    only = "dense" if len(model.representations) > 1 else None
    torch.testing.assert_close(queries, model.encode(QUERIES, Side.QUERY, only=only).dense,
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(passages, model.encode(QUERIES, Side.PASSAGE, only=only).dense,
                               atol=1e-5, rtol=1e-5)


def test_sentence_transformers_save_round_trips_every_model_folder(saved, tmp_path) -> None:
    """``SentenceTransformer(folder).save(new)`` (and so ``push_to_hub``) writes a folder that
    loads again, in sentence-transformers and in this package, with the same vectors."""
    from sentence_transformers import SentenceTransformer

    model = load_model(saved, device="cpu")
    if "dense" not in model.representations:
        pytest.skip("impact / multi-vector folders are not sentence-transformers models")
    remote = model.model_type != "siamese"
    st = SentenceTransformer(str(saved), device="cpu", trust_remote_code=remote)
    st.save(str(tmp_path / "copy"))
    again = SentenceTransformer(str(tmp_path / "copy"), device="cpu", trust_remote_code=remote)
    torch.testing.assert_close(torch.as_tensor(again.encode_query(QUERIES)),
                               torch.as_tensor(st.encode_query(QUERIES)))
    if remote:  # an MoE folder stays ours: same type, length and weights
        copy = load_model(tmp_path / "copy", device="cpu")
        assert (copy.model_type, copy.query_max_length) == (model.model_type, QUERY_LENGTH)
        for representation in model.representations:
            torch.testing.assert_close(_rep(copy.encode_query(QUERIES), representation),
                                       _rep(model.encode_query(QUERIES), representation))


def test_came_in_sentence_transformers_says_it_is_one_expert(tiny_mlm, tmp_path, caplog) -> None:
    """CAME ranks by fusing three experts; sentence-transformers carries one vector: loading it
    there says so, never gives the global expert alone in silence."""
    import logging

    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    folder = BUILD["came"](None, tiny_mlm).save(tmp_path / "came")
    with caplog.at_level(logging.WARNING):
        SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
    said = [r.getMessage() for r in caplog.records if "global expert alone" in r.getMessage()]
    assert len(said) == 1 and "--retriever fused" in said[0]
