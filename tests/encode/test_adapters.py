"""Pyserini adapters end to end on tiny random models: encoders, three index kinds, Pyserini's own
searchers returning the same runs as our command line, quantisation, mismatch and failure cases."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pyserini_moe import _java
from pyserini_moe.cli import run_main
from pyserini_moe.errors import UserError
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.index.meta import IndexMismatchError, read_meta
from pyserini_moe.modeling.base import Side
from pyserini_moe.modeling.biencoder import SiameseBiEncoder
from pyserini_moe.modeling.colbert import ColbertEncoder
from pyserini_moe.modeling.sbmoe import SbMoeEncoder
from pyserini_moe.modeling.splade import SpladeEncoder
from pyserini_moe.modeling.taser import TaserEncoder
from pyserini_moe.runs import read_trec_run
from pyserini_moe.search import __main__ as search_cli

_java.bootstrap()

from pyserini_moe.encode import (  # noqa: E402
    DenseDocumentEncoder,
    DenseQueryEncoder,
    ImpactDocumentEncoder,
    ImpactQueryEncoder,
    MultiVectorDocumentEncoder,
    MultiVectorQueryEncoder,
)
from pyserini_moe.encode.impact import dequantize, quantize  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tiny_corpus) -> Path:
    return tiny_corpus


@pytest.fixture(scope="module")
def models(tiny_bert, tiny_mlm, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    return {
        "dense": str(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(out / "siamese")),
        "impact": str(SpladeEncoder.from_backbone(tiny_mlm, device="cpu").save(out / "splade")),
        "multivector": str(ColbertEncoder.from_backbone(tiny_bert, dim=16, device="cpu")
                           .save(out / "colbert")),
        "other-dense": str(SiameseBiEncoder.from_backbone(tiny_mlm, device="cpu").save(out / "other")),
        "taser": str(_trained_like_taser(tiny_bert).save(out / "taser")),
    }


def _trained_like_taser(path: Path) -> TaserEncoder:
    """Det-R TASER whose passage expert differs from its question expert, as after training."""
    model = TaserEncoder.from_backbone(path, every=1, device="cpu")
    with torch.no_grad():
        for block in model.expert_layers:
            block.experts[1].intermediate.dense.weight.mul_(1.5)
    return model


def build(kind: str, corpus: Path, encoder: str, index: Path, *extra: str) -> Path:
    assert index_cli.main(["--retriever", kind, "--corpus", str(corpus), "--index", str(index),
                           "--encoder", encoder, "--device", "cpu", "--quiet", *extra]) == 0
    return index


def search(kind: str, corpus: Path, index: Path, out: Path, *extra: str) -> dict:
    assert search_cli.main(["--retriever", kind, "--index", str(index), "--topics", f"{corpus}:test",
                            "--output", str(out), "--hits", "10", "--device", "cpu", "--quiet",
                            *extra]) == 0
    return read_trec_run(out)


def test_dense_adapters_match_the_model(models):
    doc_enc = DenseDocumentEncoder(models["dense"], device="cpu")
    q_enc = DenseQueryEncoder(models["dense"], device="cpu")
    vectors = doc_enc.encode(["the cat sat", "dense model"], titles=["mat", ""])
    assert vectors.dtype == np.float32 and vectors.shape == (2, 32)
    expected = doc_enc.model.encode(["mat the cat sat", "dense model"], Side.PASSAGE).dense.numpy()
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    np.testing.assert_allclose(q_enc.encode("what is dense"), q_enc.encode_batch(["what is dense"])[0])


def test_quantisation_round_trip():
    vocab = ["a", "b", "c", "d"]
    weights = torch.tensor([[0.0, 0.004, 0.4, 2.346]])
    (vector,) = quantize(weights, vocab, 100)
    assert vector == {"c": 40, "d": 235}  # 0.004 rounds to 0 and is dropped; ints only
    assert all(isinstance(w, int) for w in vector.values())
    back = dequantize(vector, 100)
    assert back["c"] == pytest.approx(0.4) and abs(back["d"] - 2.346) <= 0.5 / 100


def test_impact_adapters_emit_integer_term_weights(models):
    doc_enc = ImpactDocumentEncoder(models["impact"], device="cpu", quantization=100)
    (vec,) = doc_enc.encode(["the cat sat on the mat"])
    assert vec and all(isinstance(w, int) and w > 0 for w in vec.values())
    q = ImpactQueryEncoder(models["impact"], device="cpu", quantization=100).encode("cat")
    assert set(q) <= set(doc_enc.vocab)


def test_multivector_adapters_drop_padding(models):
    doc_enc = MultiVectorDocumentEncoder(models["multivector"], device="cpu")
    short, long = doc_enc.encode(["cat", "the cat sat on the mat"])
    assert short.shape == (3, 16) and long.shape[0] == 8  # [CLS] cat [SEP]; 6 words + 2
    assert MultiVectorQueryEncoder(models["multivector"], device="cpu").encode("cat dog").shape == (4, 16)


def test_wrong_representation_is_refused(models):
    with pytest.raises(ValueError, match="has no impact representation"):
        ImpactDocumentEncoder(models["dense"], device="cpu")


def test_empty_query_is_refused(models):
    with pytest.raises(ValueError, match="empty query"):
        DenseQueryEncoder(models["dense"], device="cpu").encode("  ")


def test_dense_cli_run_equals_pyserini_faiss_searcher(corpus, models, tmp_path):
    from pyserini.search.faiss import FaissSearcher

    index = build("dense", corpus, models["dense"], tmp_path / "dense")
    assert {"index", "docid", "pyserini_moe_index.json"} <= {p.name for p in index.iterdir()}
    assert read_meta(index).model_type == "siamese"
    ours = search("dense", corpus, index, tmp_path / "run.trec")
    pyserini = FaissSearcher(str(index), DenseQueryEncoder(models["dense"], device="cpu"))
    queries = {"q0": "what is dense retrieval", "q1": "cat sat on the mat",
               "q2": "mixture of expert model", "q3": "sparse query"}
    for qid, text in queries.items():
        hits = pyserini.search(text, k=10)
        assert [h.docid for h in hits] == list(ours[qid])
        np.testing.assert_allclose([h.score for h in hits], list(ours[qid].values()), atol=1e-5)


def test_taser_index_holds_passage_experts_and_pyserini_searches_it(corpus, models, tmp_path):
    """Documents go through the passage expert, queries through the question expert, and
    Pyserini's FaissSearcher with our query encoder returns the run of our command line."""
    import faiss
    from pyserini.search.faiss import FaissSearcher

    index = build("dense", corpus, models["taser"], tmp_path / "taser")
    assert read_meta(index).model_type == "taser"
    stored = faiss.read_index(str(index / "index")).reconstruct_n(0, 2)
    doc_enc = DenseDocumentEncoder(models["taser"], device="cpu")
    model = doc_enc.model
    first = [json.loads(line) for line in (corpus / "corpus.jsonl").read_text().splitlines()[:2]]
    texts = [f"{d['title']} {d['text']}" for d in first]
    np.testing.assert_allclose(stored, model.encode(texts, Side.PASSAGE).dense.numpy(), atol=1e-5)
    assert not np.allclose(stored, model.encode(texts, Side.QUERY).dense.numpy(), atol=1e-3)
    ours = search("dense", corpus, index, tmp_path / "run.trec")
    pyserini = FaissSearcher(str(index), DenseQueryEncoder(models["taser"], device="cpu"))
    for qid, text in {"q0": "what is dense retrieval", "q2": "mixture of expert model"}.items():
        hits = pyserini.search(text, k=10)
        # Same documents and scores; tied scores may come in another order (ours: trec_eval's).
        assert {h.docid: pytest.approx(h.score, abs=1e-5) for h in hits} == ours[qid]
        np.testing.assert_allclose([h.score for h in hits], list(ours[qid].values()), atol=1e-5)
        expected = model.encode([text], Side.QUERY).dense.numpy()[0]
        np.testing.assert_allclose(pyserini.query_encoder.encode(text), expected, atol=1e-6)


def test_impact_cli_run_equals_pyserini_impact_searcher(corpus, models, tmp_path):
    from pyserini.search.lucene import LuceneImpactSearcher

    index = build("impact", corpus, models["impact"], tmp_path / "impact", "--quantization", "50")
    assert read_meta(index).quantization == 50
    ours = search("impact", corpus, index, tmp_path / "run.trec")
    pyserini = LuceneImpactSearcher(str(index), ImpactQueryEncoder(models["impact"], device="cpu",
                                                                   quantization=50))
    hits = pyserini.batch_search(["what is dense retrieval", "cat sat on the mat"], ["q0", "q1"], k=10)
    for qid in ("q0", "q1"):
        assert [h.docid for h in hits[qid]] == list(ours[qid])
        assert [float(h.score) for h in hits[qid]] == pytest.approx(list(ours[qid].values()))


def test_multivector_cli_matches_exhaustive_maxsim(corpus, models, tmp_path):
    from pyserini_moe.index.multivector import MultiVectorIndex

    index = build("multivector", corpus, models["multivector"], tmp_path / "mv")
    ours = search("multivector", corpus, index, tmp_path / "run.trec")
    q_vectors = MultiVectorQueryEncoder(models["multivector"], device="cpu").encode("cat sat on the mat")
    exact = MultiVectorIndex(index).exhaustive_search(q_vectors, k=10)
    assert [d for d, _ in exact] == list(ours["q1"])


def test_multivector_search_passes_faiss_parameters_to_the_token_index(corpus, models, tmp_path):
    index = build("multivector", corpus, models["multivector"], tmp_path / "mv", "--faiss",
                  "hnsw16")
    default = search("multivector", corpus, index, tmp_path / "a.trec")
    wide = search("multivector", corpus, index, tmp_path / "b.trec", "--faiss-params",
                  "efSearch=512")
    assert wide == default  # 30 documents: any efSearch finds the same candidates
    with pytest.raises(UserError, match="'bogus' is not one of its parameters"):  # before Faiss
        search("multivector", corpus, index, tmp_path / "c.trec", "--faiss-params", "bogus=1")


def test_searching_with_another_encoder_is_refused(corpus, models, tmp_path, capsys):
    index = build("dense", corpus, models["dense"], tmp_path / "dense")
    code = run_main(search_cli.main, ["--retriever", "dense", "--index", str(index), "--topics",
                                      f"{corpus}:test", "--output", str(tmp_path / "r.trec"),
                                      "--encoder", models["other-dense"], "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and "different" in err and "model" in err
    assert not (tmp_path / "r.trec").exists()


def test_index_kind_mismatch_is_refused(corpus, models, tmp_path):
    from pyserini_moe.search.encoded import ImpactSearcher

    index = build("dense", corpus, models["dense"], tmp_path / "dense")
    with pytest.raises(IndexMismatchError, match="is a dense index"):
        ImpactSearcher(index, device="cpu")


def test_interrupted_dense_build_leaves_nothing(corpus, models, tmp_path, monkeypatch):
    from pyserini_moe.index import encoded

    calls = {"n": 0}
    original = encoded.batches

    def failing(*args, **kwargs):
        for batch in original(*args, **kwargs):
            calls["n"] += 1
            yield batch
            raise KeyboardInterrupt

    monkeypatch.setattr(encoded, "batches", failing)
    with pytest.raises(KeyboardInterrupt):
        encoded.build_dense_index(str(corpus), models["dense"], tmp_path / "idx", batch_size=4,
                                  device="cpu", progress=False)
    assert calls["n"] == 1 and list(tmp_path.iterdir()) == []


def test_encode_time_options_are_recorded_and_applied_to_queries(corpus, tiny_bert, tmp_path,
                                                                   capsys):
    """SB-MoE's ALL mode chosen at indexing: stored in the index, used for the queries too."""
    import faiss

    torch.manual_seed(0)
    model = SbMoeEncoder.from_backbone(tiny_bert, device="cpu")
    with torch.no_grad():  # experts that matter, as after training
        for expert in model.experts:
            expert.up.weight.normal_(0, 0.5)
    saved = str(model.save(tmp_path / "sbmoe"))
    top1 = build("dense", corpus, saved, tmp_path / "top1")
    every = build("dense", corpus, saved, tmp_path / "all", "--encoder-option", "inference=all")
    assert read_meta(top1).encoder_options == {"inference": "top1"}
    assert read_meta(every).encoder_options == {"inference": "all"}
    vectors = {name: faiss.read_index(str(index / "index")).reconstruct_n(0, 3)
               for name, index in (("top1", top1), ("all", every))}
    assert not np.allclose(vectors["top1"], vectors["all"], atol=1e-4)
    run = search("dense", corpus, every, tmp_path / "all.trec")  # the fingerprint matches
    from pyserini_moe.search.encoded import DenseSearcher

    query_model = DenseSearcher(every, device="cpu").query_encoder.model
    assert query_model.args["inference"] == "all"
    assert len(run["q0"]) == 10
    from pyserini.search.faiss import FaissSearcher  # Pyserini's own searcher, our encoder

    pyserini = FaissSearcher(str(every), DenseQueryEncoder(query_model))
    hits = pyserini.search("what is dense retrieval", k=10)
    assert {h.docid: pytest.approx(h.score, abs=1e-5) for h in hits} == run["q0"]
    for bad, message in ((["inference=most"], "inference: must be one of top1, all"),
                         (["gate=random"], "no encode-time option gate")):
        code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(corpus), "--index",
                                         str(tmp_path / "bad"), "--encoder", saved, "--quiet",
                                         "--encoder-option", *bad])
        assert code == 2 and message in capsys.readouterr().err
    code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(corpus), "--index",
                                     str(tmp_path / "bad"), "--encoder", saved,
                                     "--encoder-option", "inference"])
    assert code == 2 and "expected NAME=VALUE" in capsys.readouterr().err


def test_model_index_needs_an_encoder(corpus, tmp_path, capsys):
    code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(corpus),
                                     "--index", str(tmp_path / "x")])
    assert code == 2 and "--encoder is required" in capsys.readouterr().err


def test_unknown_encoder_is_clear(corpus, tmp_path, capsys):
    code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(corpus), "--index",
                                     str(tmp_path / "x"), "--encoder", "no-such/encoder-xyz"])
    assert code == 2 and "no-such/encoder-xyz" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_dense_hnsw_option_finds_the_flat_results(corpus, models, tmp_path):
    import faiss

    flat = search("dense", corpus, build("dense", corpus, models["dense"], tmp_path / "flat"),
                  tmp_path / "flat.trec")
    index = build("dense", corpus, models["dense"], tmp_path / "hnsw", "--faiss", "hnsw16")
    assert isinstance(faiss.read_index(str(index / "index")), faiss.IndexHNSWFlat)
    hnsw = search("dense", corpus, index, tmp_path / "hnsw.trec")
    for qid in flat:  # 30 documents: the graph search is exact here
        assert list(hnsw[qid])[:5] == list(flat[qid])[:5]


def test_query_term_cap_keeps_the_heaviest_terms_ties_in_vocabulary_order():
    vocab = ["a", "b", "c", "d", "e", "f"]
    weights = torch.tensor([[0.3, 0.5, 0.3, 0.1, 0.5, 0.0], [0.0, 0.0, 0.2, 0.0, 0.0, 0.0]])
    capped, short = quantize(weights, vocab, 10, max_terms=3)
    assert capped == {"b": 5, "e": 5, "a": 3}  # "c" ties with "a" and comes later in the vocabulary
    assert short == {"c": 2}
    assert quantize(weights, vocab, 10, max_terms=5)[0] == quantize(weights, vocab, 10)[0]


def test_impact_query_encoder_keeps_its_top_terms(models):
    full = ImpactQueryEncoder(models["impact"], device="cpu").encode("what is dense retrieval")
    capped = ImpactQueryEncoder(models["impact"], device="cpu", max_terms=4).encode(
        "what is dense retrieval")
    vocab = ImpactQueryEncoder(models["impact"], device="cpu").vocab
    ranked = sorted(full, key=lambda t: (-full[t], vocab.index(t)))
    assert len(full) > 4 and capped == {t: full[t] for t in ranked[:4]}


def test_impact_cli_query_max_terms_is_what_pyserini_searches(corpus, models, tmp_path):
    from pyserini.search.lucene import LuceneImpactSearcher

    index = build("impact", corpus, models["impact"], tmp_path / "impact")
    ours = search("impact", corpus, index, tmp_path / "run.trec", "--query-max-terms", "53")
    pyserini = LuceneImpactSearcher(str(index), ImpactQueryEncoder(models["impact"], device="cpu",
                                                                   max_terms=53))
    queries = ["what is dense retrieval", "cat sat on the mat", "mixture of expert model", "sparse query"]
    hits = pyserini.batch_search(queries, ["q0", "q1", "q2", "q3"], k=10)
    assert ours  # the run writer orders tied scores as trec_eval does: compare docid -> score
    for qid, run in ours.items():
        assert {h.docid: float(h.score) for h in hits[qid]} == pytest.approx(run)


def test_more_query_terms_than_lucene_allows_is_refused(corpus, models, tmp_path, capsys):
    index = build("impact", corpus, models["impact"], tmp_path / "impact")
    code = run_main(search_cli.main, ["--retriever", "impact", "--index", str(index), "--topics",
                                      f"{corpus}:test", "--output", str(tmp_path / "r.trec"),
                                      "--device", "cpu", "--query-max-terms", "1025"])
    err = capsys.readouterr().err
    assert code == 2 and "1025 query terms" in err and "max clause count (1024)" in err
    assert not (tmp_path / "r.trec").exists()


def test_lucene_failure_in_a_batch_names_the_query_and_the_cause(corpus, models, tmp_path):
    """Anserini's batch search only says "queryCount = 4 is not equal to completedTaskCount = 0"."""
    from pyserini.pyclass import autoclass

    from pyserini_moe.search.encoded import ImpactSearcher

    lucene = autoclass("org.apache.lucene.search.IndexSearcher")
    searcher = ImpactSearcher(build("impact", corpus, models["impact"], tmp_path / "impact"),
                              device="cpu")
    limit = lucene.getMaxClauseCount()
    lucene.setMaxClauseCount(2)  # fewer than q1's terms found in the index (q0 has at most 2)
    try:
        with pytest.raises(UserError, match=r"Lucene failed on query 'q1': .*TooManyClauses: "
                                               r"maxClauseCount is set to 2"):
            searcher.search({"q0": "what is dense retrieval", "q1": "cat sat on the mat"}, hits=5,
                            progress=False)
    finally:
        lucene.setMaxClauseCount(limit)


def test_an_impact_index_without_any_term_is_refused(corpus, tiny_bert, tmp_path, capsys):
    model = SpladeEncoder.from_backbone(tiny_bert, device="cpu")
    with torch.no_grad():
        model.head.bias.fill_(-100.0)  # every logit negative: every weight is 0
    model.save(tmp_path / "silent")
    code = run_main(index_cli.main, ["--retriever", "impact", "--corpus", str(corpus), "--index",
                                     str(tmp_path / "idx"), "--encoder", str(tmp_path / "silent"),
                                     "--device", "cpu", "--quiet"])
    assert code == 2 and "round to 0" in capsys.readouterr().err
    assert not (tmp_path / "idx").exists()


def test_a_batch_lucene_fails_is_searched_one_query_at_a_time(corpus, models, tmp_path, caplog):
    """Anserini's batch search can fail where every query succeeds alone (1,024-term queries,
    measured on Cranfield): the batch's queries are searched one by one, with the same hits."""
    from jnius import JavaException

    from pyserini_moe.search.encoded import ImpactSearcher

    searcher = ImpactSearcher(build("impact", corpus, models["impact"], tmp_path / "impact"),
                              device="cpu")
    topics = {"q0": "what is dense retrieval", "q1": "cat sat on the mat"}
    expected = searcher.search(topics, hits=5, threads=2, progress=False)
    lucene, singles = searcher.searcher, []

    class FailingBatches:
        def batch_search(self, texts, qids, k, threads):
            raise JavaException("queryCount = 2 is not equal to completedTaskCount = 1",
                                "java.lang.RuntimeException",
                                "queryCount = 2 is not equal to completedTaskCount = 1", [])

        def search(self, text, k):
            singles.append(text)
            return lucene.search(text, k=k)

    searcher.searcher = FailingBatches()
    assert searcher.search(topics, hits=5, threads=2, progress=False) == expected
    assert singles == list(topics.values()) and "one at a time" in caplog.text


def test_lucene_holds_a_bounded_number_of_hits_at_once(corpus, models, tmp_path, monkeypatch):
    """Anserini loads each hit's stored document: queries are sent in slices of at most
    MAX_HITS_IN_FLIGHT hits, with the run unchanged."""
    from pyserini_moe.search import encoded

    searcher = encoded.ImpactSearcher(build("impact", corpus, models["impact"],
                                            tmp_path / "impact"), device="cpu")
    topics = {"q0": "what is dense retrieval", "q1": "cat sat on the mat", "q2": "a dog"}
    expected = searcher.search(topics, hits=5, progress=False)
    lucene, slices = searcher.searcher, []

    class Recording:
        def batch_search(self, texts, qids, k, threads):
            slices.append(list(qids))
            return lucene.batch_search(texts, qids, k=k, threads=threads)

    searcher.searcher = Recording()
    monkeypatch.setattr(encoded, "MAX_HITS_IN_FLIGHT", 10)
    assert searcher.search(topics, hits=5, progress=False) == expected
    assert slices == [["q0", "q1"], ["q2"]]


def test_an_impact_query_has_one_encoding_alone_or_in_a_batch(models, monkeypatch):
    """Issue 39: encode_queries (batches) and search (Pyserini: one query at a time) gave
    vectors one quantisation unit apart. A batch is now encoded query by query."""
    encoder = ImpactQueryEncoder(models["impact"], device="cpu")
    seen = []
    encode = encoder.model.encode
    monkeypatch.setattr(encoder.model, "encode",
                        lambda texts, *a, **k: seen.append(len(texts)) or encode(texts, *a, **k))
    queries = ["cat", "what is dense retrieval with many experts", "sparse"]
    batched = encoder.encode_batch(queries)
    assert seen == [1, 1, 1]
    assert batched == [encoder.encode(q) for q in queries]
    assert encoder.queries == 6


@pytest.mark.parametrize("kind", ["dense", "impact", "multivector"])
def test_streamed_query_batches_are_encode_batch_of_each_batch(models, kind):
    """encode_queries streams its batches (the next tokenized while the model encodes): the
    same vectors as encode_batch, batch by batch; impact still one query at a time."""
    make = {"dense": DenseQueryEncoder, "impact": ImpactQueryEncoder,
            "multivector": MultiVectorQueryEncoder}[kind]
    batches = [["cat", "what is dense retrieval with many experts"], ["sparse"],
               ["a b c d e f", "experts", "mixture of them"]]
    streamed = list(make(models[kind], device="cpu").encode_batches(iter(batches)))
    one_by_one = [make(models[kind], device="cpu").encode_batch(b) for b in batches]
    assert len(streamed) == len(batches)
    for got, expected in zip(streamed, one_by_one, strict=True):
        if kind == "impact":
            assert got == expected
        else:
            assert len(got) == len(expected)
            for a, b in zip(got, expected, strict=True):
                np.testing.assert_array_equal(a, b)


def test_quantised_weights_that_overflow_a_fields_length_are_refused_while_encoding() -> None:
    """Each term fits Lucene's int but their sum (the field's length) does not: Anserini failed
    after the whole encoding pass, naming neither the cause nor the flag."""
    weights = torch.full((1, 4), 1.0)
    factor = 600_000_000  # 4 x 6e8 > 2^31 - 1
    assert quantize(weights[:, :3], ["a", "b", "c"], factor)  # 1.8e9 fits
    with pytest.raises(UserError, match=r"^--quantization 600000000: a text's quantised term "
                                        r"weights add up to 2\.4e\+09"):
        quantize(weights, ["a", "b", "c", "d"], factor)
