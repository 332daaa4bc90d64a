"""Training data: validation split, hard negatives (run file, BM25 through Pyserini), batches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.base import Side
from pyserini_moe.train.collator import Collator
from pyserini_moe.train.config import from_dict
from pyserini_moe.train.data import (
    NEGATIVES_RUN,
    bm25_index_dir,
    load_training_data,
    split_queries,
)

WORDS = ["cat", "dog", "sat", "mat", "model", "expert", "query", "passage", "dense", "sparse",
         "mixture", "retrieval"]




@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> Path:
    """12 documents d0..d11; q0..q9 judged in train (q0 has two positives), q10, q11 unjudged."""
    root = tmp_path_factory.mktemp("toy")
    docs = [(f"d{i}", WORDS[i], f"{WORDS[i]} {WORDS[(i + 1) % 12]} the {WORDS[(i + 5) % 12]}")
            for i in range(12)]
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in docs))
    (root / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": f"{WORDS[i]} {WORDS[(i + 1) % 12]}"}) + "\n"
        for i in range(12)))
    (root / "qrels").mkdir()
    rows = ["query-id\tcorpus-id\tscore", "q0\td0\t1", "q0\td1\t1", "q3\td4\t0"]
    rows += [f"q{i}\td{i}\t1" for i in range(1, 10)]
    (root / "qrels" / "train.tsv").write_text("\n".join(rows) + "\n")
    return root


def config(collection: Path, **data: object) -> object:
    raw = {"output_dir": "unused", "model": {"type": "siamese"},
           "data": {"collection": str(collection), "seed": 7, **data},
           "training": {"learning_rate": 1e-3}}
    return from_dict(raw, "test.yaml").data


def write_run(path: Path, run: dict[str, list[str]]) -> Path:
    path.write_text("".join(f"{q} Q0 {d} {r} {100 - r} test\n"
                            for q, docs in run.items() for r, d in enumerate(docs, 1)))
    return path


def every_doc_ranked(path: Path) -> Path:
    """Each query ranks its positives first, then every other document in id order."""
    run = {}
    for i in range(10):
        first = ["d0", "d1"] if i == 0 else [f"d{i}"]
        run[f"q{i}"] = first + [f"d{j}" for j in range(12) if f"d{j}" not in first]
    return write_run(path, run)


def test_validation_split_is_seeded_and_disjoint():
    qids = [f"q{i}" for i in range(40)]
    train, val = split_queries(qids, 0.1, seed=1)
    assert len(val) == 4 and not set(train) & set(val) and set(train) | set(val) == set(qids)
    assert split_queries(qids, 0.1, seed=1) == (train, val)
    assert split_queries(list(reversed(qids)), 0.1, seed=1)[1] == list(reversed(val))
    assert any(split_queries(qids, 0.1, seed=s)[1] != val for s in range(2, 6))
    assert split_queries(qids, 0.0, seed=1) == (qids, [])
    assert len(split_queries(qids[:3], 0.01, seed=1)[1]) == 1  # a fraction > 0 holds out >= 1


def test_examples_come_from_positive_judgments_and_validation_queries_are_held_out(collection,
                                                                                   tmp_path):
    run = every_doc_ranked(tmp_path / "run.trec")
    cfg = config(collection, validation_fraction=0.2, negatives={"source": "run", "run": str(run)})
    data = load_training_data(cfg, tmp_path)
    train_q = {q for q, _ in data.train_pairs}
    val_q = {q for q, _ in data.validation_pairs}
    assert len(val_q) == 2 and not train_q & val_q
    assert train_q | val_q == {f"q{i}" for i in range(10)}  # q3's grade-0 line adds nothing
    assert len(data.train_pairs) + len(data.validation_pairs) == 11  # q0 has two positives
    assert ("q3", "d4") not in data.train_pairs + data.validation_pairs
    again = load_training_data(cfg, tmp_path / "again")
    assert again.validation_pairs == data.validation_pairs and again.train_pairs == data.train_pairs
    assert (tmp_path / NEGATIVES_RUN).is_file()


def gold_second_in_sort_order(collection: Path, tmp_path: Path) -> Path:
    """The toy collection with q0's positives in DPR's order, the gold one first: d1, then d0."""
    root = tmp_path / "gold"
    (root / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl"):
        (root / name).write_text((collection / name).read_text())
    rows = (collection / "qrels" / "train.tsv").read_text().replace("q0\td0\t1\nq0\td1\t1",
                                                                   "q0\td1\t1\nq0\td0\t1")
    assert "q0\td1\t1\nq0\td0" in rows
    (root / "qrels" / "train.tsv").write_text(rows)
    return root


def test_positives_first_trains_on_the_gold_positive_once_per_query(collection, tmp_path):
    root = gold_second_in_sort_order(collection, tmp_path)
    run = every_doc_ranked(tmp_path / "run.trec")
    cfg = config(root, validation_fraction=0.0, positives="first",
                 negatives={"source": "run", "run": str(run)})
    data = load_training_data(cfg, tmp_path / "out")
    assert len(data.train_pairs) == 10 and ("q0", "d1") in data.train_pairs  # not sorted's d0
    assert ("q0", "d0") not in data.train_pairs
    assert data.positives["q0"] == {"d0", "d1"}  # both still kept out of q0's negatives
    assert sum(len(b) for b in data.epoch_batches(0, 4)) == 10


def test_positives_sample_draws_one_positive_per_query_each_epoch(collection, tmp_path):
    run = every_doc_ranked(tmp_path / "run.trec")
    cfg = config(collection, validation_fraction=0.0, positives="sample",
                 negatives={"source": "run", "run": str(run)})
    data = load_training_data(cfg, tmp_path)
    assert len(data.train_pairs) == 11  # all pairs kept; each epoch takes one per query
    q0_texts = {data.passages["d0"], data.passages["d1"]}
    seen = set()
    for epoch in range(12):
        examples = [e for b in data.epoch_batches(epoch, 4) for e in b]
        assert len(examples) == 10 == data.num_batches(epoch, 4) * 4 - 2
        positives = {e.positive for e in examples if e.query == data.queries["q0"]}
        assert len(positives) == 1
        seen |= positives
    assert seen == q0_texts  # over the epochs, both of q0's positives are drawn
    assert data.epoch_batches(3, 4) == data.epoch_batches(3, 4)  # seeded: resuming stays exact
    with pytest.raises(ValueError, match="positives"):
        config(collection, positives="gold")


def test_candidates_skip_top_ranks_respect_depth_and_never_hold_positives(collection, tmp_path):
    run = every_doc_ranked(tmp_path / "run.trec")
    cfg = config(collection, negatives={"source": "run", "run": str(run), "depth": 6,
                                        "skip_top": 1})
    data = load_training_data(cfg, tmp_path)
    assert data.candidate_ids("q0") == ["d2", "d3", "d4", "d5"]  # ranks 2-6 minus positive d1
    assert data.candidate_ids("q5") == ["d0", "d1", "d2", "d3", "d4"]
    for qid, candidates in ((q, data.candidate_ids(q)) for q in data.candidates):
        assert not set(candidates) & data.positives[qid]


def test_sampled_negatives_are_never_positives_of_any_query_in_the_batch(collection, tmp_path):
    run = every_doc_ranked(tmp_path / "run.trec")
    cfg = config(collection, num_negatives=3, validation_fraction=0.0,
                 negatives={"source": "run", "run": str(run)})
    data = load_training_data(cfg, tmp_path)
    text_to_id = {text: doc for doc, text in data.passages.items()}
    for epoch in range(5):
        batches = data.epoch_batches(epoch, batch_size=4)
        assert sum(len(b) for b in batches) == len(data.train_pairs) == 11
        for batch in batches:
            qids = [next(q for q, t in data.queries.items() if t == e.query) for e in batch]
            assert len(set(qids)) == len(qids)  # q0 (two positives) never twice in one batch
            batch_positives = set().union(*(data.positives[q] for q in qids))
            for example in batch:
                negatives = [text_to_id[n] for n in example.negatives]
                assert len(negatives) == len(set(negatives)) == 3
                assert not set(negatives) & batch_positives
    assert data.epoch_batches(1, 4) == data.epoch_batches(1, 4)  # resumable: same epoch, same data
    assert data.epoch_batches(1, 4) != data.epoch_batches(2, 4)


def test_random_negatives_fill_in_for_queries_the_run_misses(collection, tmp_path):
    run = write_run(tmp_path / "run.trec", {"q1": ["d1", "d7"]})
    cfg = config(collection, num_negatives=2, validation_fraction=0.0,
                 negatives={"source": "run", "run": str(run)})
    data = load_training_data(cfg, tmp_path)
    assert data.candidate_ids("q1") == ["d7"] and data.candidate_ids("q2") == []
    assert data.num_random_filled == 10  # every judged query has fewer than 2 candidates
    for batch in data.epoch_batches(0, 3):
        for example in batch:
            assert len(example.negatives) == 2 and example.positive not in example.negatives


def test_a_run_for_another_collection_is_refused(collection, tmp_path):
    run = write_run(tmp_path / "run.trec", {"q1": ["d1", "nope"]})
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ValueError) as err:
        load_training_data(config(collection, negatives={"source": "run", "run": str(run)}), out)
    # the user's run is named, not the copy in the output folder
    assert str(err.value).startswith(f"{run}: query 'q1' ranks document 'nope', which is not "
                                      "in collection")


def test_a_run_of_other_queries_is_refused(collection, tmp_path):
    # not a silent training on random negatives
    run = write_run(tmp_path / "run.trec", {"x1": ["d1", "d2"], "x2": ["d3"]})
    with pytest.raises(ValueError) as err:
        load_training_data(config(collection, negatives={"source": "run", "run": str(run)}),
                           tmp_path)
    assert str(err.value).startswith(f"{run}: ranks none of the ")
    assert "wrong run for this collection or split?" in str(err.value)


def test_an_edited_corpus_gets_another_bm25_cache(collection, tmp_path):
    """An edited corpus gets a BM25 cache of its own: a cache keyed by the folder alone would
    mine negatives from the old text."""
    import os

    from pyserini_moe.data.beir import BeirCollection

    before = bm25_index_dir(BeirCollection.load(str(collection)))
    corpus = BeirCollection.load(str(collection)).corpus_path
    stat = corpus.stat()
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert bm25_index_dir(BeirCollection.load(str(collection))) != before


def test_bm25_negatives_are_mined_through_pyserini(collection, tmp_path, monkeypatch):
    monkeypatch.setenv("PYSERINI_MOE_CACHE", str(tmp_path / "cache"))
    cfg = config(collection, num_negatives=2, negatives={"source": "bm25", "depth": 5})
    data = load_training_data(cfg, tmp_path / "out", progress=False)
    from pyserini_moe.data.beir import BeirCollection
    from pyserini_moe.runs import read_trec_run

    assert bm25_index_dir(BeirCollection.load(str(collection))).is_dir()  # cached for next time
    mined = read_trec_run(tmp_path / "out" / NEGATIVES_RUN)
    assert set(mined) == {f"q{i}" for i in range(10)}
    # q4 = "model expert": d4 = "model" + "model expert the sparse" holds both words, d0, d3, d5
    # and d11 one of them
    assert max(mined["q4"], key=mined["q4"].get) == "d4"
    assert "d4" not in data.candidate_ids("q4") and data.candidate_ids("q4")
    assert set(data.candidate_ids("q4")) <= set(mined["q4"])
    for qid, candidates in ((q, data.candidate_ids(q)) for q in data.candidates):
        assert not set(candidates) & data.positives[qid] and len(candidates) <= 5


def test_bm25_cache_built_by_another_training_meanwhile_is_used(collection, tmp_path,
                                                                  monkeypatch):
    """Two queues start trainings on one collection at once: the loser of the race to build the
    shared BM25 cache must search the winner's index, not fail."""
    from pyserini_moe.index import lucene
    from pyserini_moe.train import data as training_data

    monkeypatch.setenv("PYSERINI_MOE_CACHE", str(tmp_path / "cache"))
    real_build = lucene.build_bm25_index

    def other_writer_wins(corpus, index_dir, **kwargs):
        real_build(corpus, index_dir, **kwargs)  # the other training's build lands first
        raise FileExistsError(f"{index_dir} already exists (pass overwrite to replace it)")

    monkeypatch.setattr(training_data, "build_bm25_index", other_writer_wins)
    cfg = config(collection, num_negatives=2, negatives={"source": "bm25", "depth": 5})
    data = load_training_data(cfg, tmp_path / "out", progress=False)
    assert data.candidate_ids("q4")


def test_a_bm25_cache_path_taken_by_a_file_is_still_an_error(collection, tmp_path, monkeypatch):
    from pyserini_moe.train import data as training_data

    monkeypatch.setenv("PYSERINI_MOE_CACHE", str(tmp_path / "cache"))

    def refuse(corpus, index_dir, **kwargs):
        raise FileExistsError(f"{index_dir} is a file")

    monkeypatch.setattr(training_data, "build_bm25_index", refuse)
    cfg = config(collection, num_negatives=2, negatives={"source": "bm25", "depth": 5})
    with pytest.raises(FileExistsError, match="is a file"):
        load_training_data(cfg, tmp_path / "out", progress=False)


def test_collator_tokenises_each_side_and_orders_passages(tiny_bert, collection, tmp_path):
    from pyserini_moe.modeling.biencoder import SiameseBiEncoder

    model = SiameseBiEncoder.from_backbone(str(tiny_bert), device="cpu")
    run = every_doc_ranked(tmp_path / "run.trec")
    data = load_training_data(config(collection, num_negatives=2,
                                     negatives={"source": "run", "run": str(run)}), tmp_path)
    examples = data.epoch_batches(0, 3)[0]
    sides = []
    original = model.tokenize
    model.tokenize = lambda texts, side, max_length: (sides.append((side, max_length))
                                                      or original(texts, side, max_length))
    batch = Collator(model, query_max_length=6, passage_max_length=9)(examples)
    assert sides == [(Side.QUERY, 6), (Side.PASSAGE, 9)]
    assert batch.queries["input_ids"].shape[0] == 3 and batch.queries["input_ids"].shape[1] <= 6
    assert batch.passages["input_ids"].shape[0] == 3 + 3 * 2
    assert batch.passages["input_ids"].shape[1] <= 9
    assert batch.positive_index.tolist() == [0, 1, 2] and batch.size == 3
    first_negative = model.tokenize([examples[0].negatives[0]], Side.PASSAGE, 9)["input_ids"][0]
    assert batch.passages["input_ids"][3][:len(first_negative)].tolist() == first_negative.tolist()


def test_model_negatives_are_what_the_model_retrieves(collection, tiny_bert, tmp_path):
    """source: model indexes the corpus with the given encoder and searches it (round 2)."""
    from pyserini_moe.modeling.biencoder import SiameseBiEncoder
    from pyserini_moe.runs import read_trec_run
    from pyserini_moe.search.encoded import DenseSearcher

    encoder = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "round1")
    cfg = config(collection, negatives={"source": "model", "model": str(encoder), "kind": "dense",
                                        "depth": 4})
    data = load_training_data(cfg, tmp_path / "out", progress=False)
    mined = read_trec_run(tmp_path / "out" / NEGATIVES_RUN)
    index = tmp_path / "out" / "mining" / "mining-dense-index"
    expected = DenseSearcher(index, device="cpu").search(
        {"q4": data.queries["q4"]}, hits=4, progress=False)
    assert list(mined["q4"]) == list(expected["q4"]) and len(mined["q4"]) == 4
    for qid, candidates in ((q, data.candidate_ids(q)) for q in data.candidates):
        assert not set(candidates) & data.positives[qid]


def test_a_training_seed_resamples_batches_but_keeps_the_split_and_validation(collection,
                                                                             tmp_path):
    run = every_doc_ranked(tmp_path / "run.trec")
    cfg = config(collection, validation_fraction=0.2, negatives={"source": "run", "run": str(run)})
    by_seed = {seed: load_training_data(cfg, tmp_path / str(seed), sampling_seed=seed)
               for seed in (cfg.seed, 7, 8)}
    base = by_seed[cfg.seed]
    assert load_training_data(cfg, tmp_path / "default").epoch_batches(0, 3) == \
        base.epoch_batches(0, 3)  # the data seed is the default training seed
    for data in by_seed.values():
        assert data.validation_pairs == base.validation_pairs
        assert data.validation_batches(3) == base.validation_batches(3)
    assert by_seed[7].epoch_batches(0, 3) != by_seed[8].epoch_batches(0, 3)


def test_judged_documents_outside_the_corpus_and_the_query_itself_are_not_trained_on(
        collection, tmp_path, caplog):
    """ArguAna: queries are corpus documents, and some judged documents are missing."""
    root = tmp_path / "selfish"
    shutil.copytree(collection, root)
    with open(root / "qrels" / "train.tsv", "a") as f:
        f.write("q1\tgone\t1\n")
    run = write_run(tmp_path / "run.trec", {f"q{i}": [f"q{i}", *[f"d{j}" for j in range(12)]]
                                            for i in range(10)})
    with open(root / "corpus.jsonl", "a") as f:  # each query id is also a document
        for i in range(10):
            f.write(json.dumps({"_id": f"q{i}", "title": "", "text": f"query {i}"}) + "\n")
    cfg = config(root, validation_fraction=0.0, negatives={"source": "run", "run": str(run)})
    with caplog.at_level("WARNING"):
        data = load_training_data(cfg, tmp_path / "out")
    assert "1 judged positive(s) are not in the corpus (e.g. 'gone')" in caplog.text
    assert all(doc != "gone" for _, doc in data.train_pairs)
    assert all(qid not in data.candidate_ids(qid) for qid in data.candidates)


def test_candidates_rank_ties_as_runs_do_and_are_held_as_numbers(collection, tmp_path):
    """Equal scores order by descending docid (runs.trec_order, the evaluator's order), however
    the file lists them: the candidates are the reference ranking, as 4-byte document numbers."""
    import random

    import numpy as np

    from pyserini_moe.runs import read_trec_run, trec_order

    rng = random.Random(0)
    lines = []
    for i in range(10):
        docs = [f"d{j}" for j in range(12)]
        rng.shuffle(docs)
        lines += [f"q{i} Q0 {d} {r} {rng.randint(0, 3)} t\n" for r, d in enumerate(docs, 1)]
    run = tmp_path / "ties.trec"
    run.write_text("".join(lines))
    data = load_training_data(config(collection, num_negatives=2, negatives={
        "source": "run", "run": str(run), "depth": 9, "skip_top": 1}), tmp_path / "out")
    reference = read_trec_run(run)
    for qid in reference:
        window = trec_order(reference[qid])[1:9]
        assert data.candidate_ids(qid) == [d for d in window if d not in data.positives[qid]]
        assert data.candidates[qid].dtype == np.int32


def test_an_unknown_document_below_the_depth_is_never_read(collection, tmp_path):
    run = write_run(tmp_path / "run.trec", {"q1": ["d2", "d3", "elsewhere"]})
    data = load_training_data(config(collection, num_negatives=1, negatives={
        "source": "run", "run": str(run), "depth": 2}), tmp_path / "out")
    assert data.candidate_ids("q1") == ["d2", "d3"]


def test_a_document_listed_twice_in_a_negatives_run_is_refused(collection, tmp_path):
    run = tmp_path / "twice.trec"
    run.write_text("q1 Q0 d2 1 5 t\nq1 Q0 d3 2 4 t\nq1 Q0 d2 3 3 t\n")
    with pytest.raises(ValueError, match="document 'd2' is listed twice for query 'q1'"):
        load_training_data(config(collection, negatives={"source": "run", "run": str(run)}),
                           tmp_path / "out")


def test_mining_in_parts_writes_and_draws_what_one_mining_would(collection, tmp_path,
                                                                 monkeypatch):
    """The BM25 mining runs a part of the queries at a time (MS MARCO's 500k queries at depth
    1000 are never one run in memory): the kept run and the examples do not depend on the part
    size."""
    import pyserini_moe.train.data as data_module

    monkeypatch.setenv("PYSERINI_MOE_CACHE", str(tmp_path / "cache"))
    cfg = config(collection, num_negatives=2, negatives={"source": "bm25", "depth": 6})
    whole = load_training_data(cfg, tmp_path / "whole", progress=False)
    monkeypatch.setattr(data_module, "MINING_PART", 3)
    parts = load_training_data(cfg, tmp_path / "parts", progress=False)
    assert (tmp_path / "parts" / NEGATIVES_RUN).read_text() == \
        (tmp_path / "whole" / NEGATIVES_RUN).read_text()
    assert parts.epoch_batches(0, 4) == whole.epoch_batches(0, 4)
    resumed = load_training_data(cfg, tmp_path / "parts", reuse_mined=True, progress=False)
    assert resumed.epoch_batches(1, 4) == whole.epoch_batches(1, 4)


def test_packing_defers_a_clashing_pair_to_the_front_of_the_next_batch():
    """Batches hold no query or positive twice; a pair that would repeat one waits at the front
    of the rest, in its order (the reference below copies the queue for each batch, as packing
    once did: the same batches, in quadratic time)."""
    import random
    from collections import deque

    from pyserini_moe.train.data import pack_batches

    def reference(pairs, rng, size):
        pending, batches = deque(rng.sample(pairs, len(pairs))), []
        while pending:
            batch, queries, docs, deferred = [], set(), set(), deque()
            while pending and len(batch) < size:
                qid, doc = pair = pending.popleft()
                if qid in queries or doc in docs:
                    deferred.append(pair)
                else:
                    batch.append(pair)
                    queries.add(qid)
                    docs.add(doc)
            pending = deferred + pending
            batches.append(batch)
        return batches

    rng = random.Random(5)
    pairs = [(f"q{rng.randrange(60)}", f"d{rng.randrange(40)}") for _ in range(500)]
    packed = pack_batches(pairs, random.Random(1), 8)
    assert packed == reference(pairs, random.Random(1), 8)
    assert sorted(p for b in packed for p in b) == sorted(pairs)
    assert all(len({q for q, _ in b}) == len(b) == len({d for _, d in b}) for b in packed)


def test_more_negatives_than_the_corpus_holds_are_refused_before_mining(collection, tmp_path):
    """12 passages: at most 11 negatives a query (a step holds batch x (1 + n) passages)."""
    cfg = config(collection, num_negatives=12)
    with pytest.raises(UserError, match=r"data.num_negatives 12 is not below the 12 passages "
                                        r"of .*: a query has at most 11 negatives"):
        load_training_data(cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()
