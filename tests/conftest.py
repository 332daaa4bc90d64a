"""Shared fixtures: tiny random BERTs (built here, saved with a WordPiece tokenizer) so tests need
no downloads, and the workspaces, runs and collections that modules in several folders use
(their plain helpers are in tests/helpers.py)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import string
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from transformers import BertConfig, BertForMaskedLM, BertModel, BertTokenizerFast  # noqa: E402

from pyserini_moe.train.data import TrainingData  # noqa: E402
from tests.helpers import (  # noqa: E402
    BOM,
    GIVEN_RUN,
    QRELS_AB,
    QRELS_HALF,
    READER,
    RUN_A,
    RUN_B,
    RUN_HALF,
    WRITER,
)

WORDS = ["the", "a", "of", "what", "is", "retrieval", "query", "passage", "dense", "sparse",
         "expert", "mixture", "model", "cat", "dog", "sat", "on", "mat"]
TOY_TEXTS = [f"{WORDS[i % 18]} {WORDS[(3 * i + 1) % 18]} {WORDS[(5 * i + 2) % 18]}"
             for i in range(24)]


def _vocab() -> list[str]:
    letters = list(string.ascii_lowercase)
    return list(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + letters
                              + [f"##{c}" for c in letters] + list(string.punctuation)))


def _save_tiny_bert(path: Path, mlm: bool) -> Path:
    vocab = _vocab()
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
    assert len(tokenizer) == len(vocab)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    model = (BertForMaskedLM if mlm else BertModel)(config)
    _extend_positions(model, 512)
    if mlm:  # a recognisable, non-default head so the test can tell it was loaded
        with torch.no_grad():
            model.cls.predictions.bias.uniform_(-1, 1)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _extend_positions(model: torch.nn.Module, positions: int) -> None:
    """BERT's 512 positions (encoders refuse a max length beyond them) while every weight drawn
    above stays what the tests were written against: the new rows come from their own seed."""
    bert = model.bert if hasattr(model, "bert") else model
    old = bert.embeddings.position_embeddings
    with torch.random.fork_rng():  # the global generator stays where the draws above left it
        new = torch.nn.Embedding(positions, old.embedding_dim)
    with torch.no_grad():
        new.weight.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
        new.weight[:old.num_embeddings] = old.weight
    bert.embeddings.position_embeddings = new
    bert.embeddings.register_buffer("position_ids", torch.arange(positions).expand((1, -1)),
                                    persistent=False)
    model.config.max_position_embeddings = positions


@pytest.fixture
def texts() -> list[str]:
    return ["what is dense retrieval?", "the cat sat on the mat", "a mixture of experts model"]


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain encoder checkpoint (no MLM head), like MiniLM."""
    return _save_tiny_bert(tmp_path_factory.mktemp("tiny") / "bert", mlm=False)


@pytest.fixture(scope="session")
def tiny_mlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint with an MLM head, like bert-base-uncased."""
    return _save_tiny_bert(tmp_path_factory.mktemp("tiny") / "mlm", mlm=True)


@pytest.fixture(scope="session")
def bert3(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three layers (TASER's default block pattern and CAME's shared bottoms of 0-3 layers need
    them) and an MLM head whose random bias lets some vocabulary logits start positive (sparse
    heads are non-zero at once)."""
    path = tmp_path_factory.mktemp("bert3") / "bert3"
    config = BertConfig.from_pretrained(tiny_bert)
    config.num_hidden_layers = 3
    torch.manual_seed(0)
    model = BertForMaskedLM(config)
    with torch.no_grad():
        model.cls.predictions.bias.uniform_(-1, 1)
    model.save_pretrained(path)
    BertTokenizerFast.from_pretrained(tiny_bert).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BEIR-layout collection: 30 documents of tiny-vocabulary text, 4 judged test queries."""
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("corpus")
    with open(root / "corpus.jsonl", "w") as f:
        for i in range(30):
            text = " ".join(rng.choice(WORDS, size=int(rng.integers(4, 12))))
            f.write(json.dumps({"_id": f"d{i}", "title": WORDS[i % len(WORDS)], "text": text})
                    + "\n")
    queries = ["what is dense retrieval", "cat sat on the mat", "mixture of expert model",
               "sparse query"]
    (root / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": q}) + "\n" for i, q in enumerate(queries)))
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(4)))
    return root


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy machine idle-spinning
    threads make every step ~10x slower. Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def toy_data() -> Callable[..., TrainingData]:
    """A learnable in-memory task: each query is the text of its positive passage; 18 training
    and 6 validation queries, each with 5 candidate negatives."""
    def make(num_negatives: int = 1) -> TrainingData:
        ids = [f"d{i}" for i in range(24)]
        number = {d: n for n, d in enumerate(sorted(ids))}  # candidates are document numbers
        return TrainingData(
            queries={f"q{i}": t for i, t in enumerate(TOY_TEXTS)},
            passages=dict(zip(ids, TOY_TEXTS)),
            positives={f"q{i}": frozenset({f"d{i}"}) for i in range(24)},
            train_pairs=[(f"q{i}", f"d{i}") for i in range(18)],
            validation_pairs=[(f"q{i}", f"d{i}") for i in range(18, 24)],
            candidates={f"q{i}": np.array([number[f"d{(i + k) % 24}"] for k in range(1, 6)],
                                          dtype=np.int32) for i in range(24)},
            num_negatives=num_negatives, seed=3)
    return make


@pytest.fixture
def siamese_recipe(tiny_bert: Path, tmp_path: Path) -> "TrainConfig":  # noqa: F821
    """A two-step recipe for a Siamese model on the tiny BERT, output in ``tmp_path/run``: for
    tests that need a real training run and its folders, on :func:`toy_data`."""
    from pyserini_moe.train.config import from_dict  # noqa: PLC0415

    return from_dict({"output_dir": str(tmp_path / "run"),
                      "model": {"type": "siamese", "backbone": str(tiny_bert)},
                      "data": {"collection": "toy", "query_max_length": 8,
                               "passage_max_length": 8},
                      "training": {"learning_rate": 1e-3, "batch_size": 4, "max_steps": 2,
                                   "device": "cpu"}}, "toy.yaml")


@pytest.fixture(scope="session")
def model_index_run(tiny_bert: Path, tiny_corpus: Path) -> Callable[[Path], dict[str, Path]]:
    """Builds, in a folder, the workspace below (``ws`` builds one for each module)."""
    return lambda root: _model_index_run(root, tiny_bert, tiny_corpus)


def _model_index_run(root: Path, tiny_bert: Path, tiny_corpus: Path) -> dict[str, Path]:
    """A tiny Siamese model saved in ``root``, its dense index over the tiny corpus, a two-query
    run and its qrels (``run.trec``, ``qrels.txt``)."""
    from pyserini_moe.cli import index as index_cli  # noqa: PLC0415
    from pyserini_moe.modeling import SiameseBiEncoder  # noqa: PLC0415

    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(root / "model")
    index = root / "dense"
    assert index_cli.main(["--retriever", "dense", "--corpus", str(tiny_corpus), "--index",
                           str(index), "--encoder", str(model), "--device", "cpu",
                           "--max-length", "64", "--quiet"]) == 0
    (root / "run.trec").write_text("q0 Q0 d0 1 3.0 t\nq1 Q0 d1 1 2.0 t\n")
    (root / "qrels.txt").write_text("q0 0 d0 1\nq1 0 d1 1\n")
    return {"root": root, "model": model, "index": index, "corpus": tiny_corpus}


@pytest.fixture
def smoked(monkeypatch) -> list:
    """The regressions ``regress --smoke`` would run, recorded instead of run."""
    from pyserini_moe.lab import smoke as smoke_module

    calls: list = []
    monkeypatch.setattr(smoke_module, "smoke", lambda regs, work: calls.append(regs) or 0)
    return calls


@pytest.fixture
def error_line() -> Callable[..., str]:
    """``error_line(main, argv, capsys)``: the one error line a refused command prints (exit
    2)."""
    from pyserini_moe.cli import run_main

    def line(main: Callable[[list[str]], int], argv: list[str],
             capsys: pytest.CaptureFixture) -> str:
        assert run_main(main, argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        return err[0]
    return line


@pytest.fixture
def fuse_argv() -> Callable[..., list[str]]:
    """``fuse_argv(files, method, (dev_a, dev_b), *extra)``: a fuse command over ``files``'
    d.trec and b.trec, tuned on two dev runs there against its qrels.txt."""

    def argv(files: Path, method: str, dev: tuple[str, str], *extra: str) -> list[str]:
        return ["--runs", str(files / "d.trec"), str(files / "b.trec"), "--method", method,
                "--dev-runs", *(str(files / name) for name in dev), "--dev-qrels",
                str(files / "qrels.txt"), "--output", str(files / "f.trec"), *extra]
    return argv


@pytest.fixture(scope="module")
def ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    """A model, its dense index over the tiny corpus, a run and its qrels (a module with other
    files in mind defines its own ``ws``)."""
    return model_index_run(tmp_path_factory.mktemp("ws"))


@pytest.fixture(scope="module")
def bm25_ws(tiny_bert, tiny_corpus, tmp_path_factory) -> dict[str, Path]:
    """A saved model, a copy of the tiny corpus, its BM25 index and two runs of it."""
    from pyserini_moe.cli import index as index_cli  # noqa: PLC0415
    from pyserini_moe.modeling import SiameseBiEncoder  # noqa: PLC0415

    root = tmp_path_factory.mktemp("bm25-ws")
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(root / "model")
    corpus = root / "corpus"
    shutil.copytree(tiny_corpus, corpus)
    bm25 = root / "bm25"
    assert index_cli.main(["--retriever", "bm25", "--corpus", str(corpus), "--index", str(bm25),
                           "--quiet"]) == 0
    run = root / "run.trec"
    run.write_text("q0 Q0 d1 1 2.0 t\nq0 Q0 d2 2 1.0 t\nq1 Q0 d3 1 1.0 t\n")
    other = root / "other.trec"
    other.write_text("q0 Q0 d2 1 2.0 t\nq1 Q0 d4 1 1.0 t\n")
    return {"root": root, "model": model, "corpus": corpus, "bm25": bm25, "run": run,
            "other": other}


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    """Two runs over two queries (a dense-like ``a`` and a sparse-like ``b``) and their qrels."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 a\nq1 Q0 d2 2 2.0 a\nq1 Q0 d3 3 1.0 a\n"
                                     "q2 Q0 d2 1 3.0 a\nq2 Q0 d1 2 2.0 a\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d1 1 9.0 b\nq1 Q0 d4 2 8.0 b\nq1 Q0 d5 3 7.0 b\n"
                                     "q2 Q0 d3 1 9.0 b\nq2 Q0 d2 2 8.0 b\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return tmp_path


@pytest.fixture
def dev_ws(tmp_path: Path) -> Path:
    """Two runs, their qrels, and the same two systems' runs of dev queries dq1, dq2 (the same
    rankings of the fused queries are refused as dev runs), judged in the same
    qrels file."""
    dev_a, dev_b = (run.replace("q", "dq") for run in (RUN_A, RUN_B))
    for name, text in (("a", RUN_A), ("b", RUN_B), ("dev-a", dev_a), ("dev-b", dev_b)):
        (tmp_path / f"{name}.trec").write_text(text)
    (tmp_path / "qrels.txt").write_text(QRELS_AB + QRELS_AB.replace("q", "dq"))
    return tmp_path


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Test runs of q1-q2 tagged dense and bm25; dev runs of q3-q4 with the same tags; qrels of
    q3-q4."""
    (tmp_path / "d.trec").write_text("q1 Q0 d1 1 3.0 dense\nq2 Q0 d2 1 3.0 dense\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.0 bm25\nq2 Q0 d1 1 3.0 bm25\n")
    (tmp_path / "dev-d.trec").write_text("q3 Q0 d3 1 3.0 dense\nq3 Q0 d4 2 2.0 dense\n"
                                         "q4 Q0 d4 1 3.0 dense\nq4 Q0 d3 2 2.0 dense\n")
    (tmp_path / "dev-b.trec").write_text("q3 Q0 d4 1 3.0 bm25\nq3 Q0 d3 2 2.0 bm25\n"
                                         "q4 Q0 d3 1 3.0 bm25\nq4 Q0 d4 2 2.0 bm25\n")
    (tmp_path / "qrels.txt").write_text("q3 0 d3 1\nq4 0 d4 1\n")
    return tmp_path


@pytest.fixture
def bom_ws(tmp_path: Path) -> Path:
    """A clean run and qrels, and the same run with a BOM and gzipped."""
    (tmp_path / "run.trec").write_text(RUN_HALF)
    (tmp_path / "qrels.txt").write_text(QRELS_HALF)
    (tmp_path / "bom.trec").write_bytes(BOM + RUN_HALF.encode())
    (tmp_path / "run.trec.gz").write_bytes(gzip.compress(RUN_HALF.encode()))
    return tmp_path


@pytest.fixture
def collection(tmp_path) -> Path:
    """A collection folder with an empty corpus and qrels of no judgement."""
    root = tmp_path / "tc"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    return root


@pytest.fixture
def two_conditions(tmp_path: Path) -> Path:
    """Condition ``train`` writes {work}/model.trec; condition ``search`` reads it."""
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    (tmp_path / "given.trec").write_text(GIVEN_RUN)
    common = {"qrels": str(tmp_path / "qrels.txt"), "tolerance": 0.01, "source": "by hand"}
    doc = {"name": "deps", "conditions": [
        {"name": "train", "steps": [WRITER % (tmp_path / "given.trec")],
         "run": "{work}/model.trec", "metrics": {"mrr@10": 0.75}, **common},
        {"name": "search", "steps": [READER], "run": "{work}/run.trec",
         "metrics": {"mrr@10": 0.75}, **common},
        {"name": "page", "steps": ['{python} -c "import sys, os; os.makedirs(sys.argv[2], '
                                   'exist_ok=True)" --output {results}'],
         "run": "{work}/run.trec", "metrics": {"mrr@10": 0.75}, **common}]}
    path = tmp_path / "deps.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
