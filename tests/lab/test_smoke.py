"""The smoke scale of paper-scale regression files: the overrides it applies to each step, the
stand-ins in the papers' data formats, and real smoke runs that pass or name the failing step."""

from __future__ import annotations

import csv
import importlib
import json
import os
import warnings
from pathlib import Path

import pytest

from pyserini_moe.data.dpr import read_biencoder, read_qa_csv
from pyserini_moe.lab.regress import load_regression
from pyserini_moe.lab.smoke import build_standins, run_in_process, smoke_argv, smoke_regression
from pyserini_moe.paths import shared_data_root

TINY = "/tmp/tiny"


def test_training_steps_start_from_the_tiny_backbone_unless_the_step_names_its_own() -> None:
    argv = smoke_argv(["pyserini_moe.train", "--config", "r.yaml", "--set",
                       "model.backbone=/work/pretrained", "--max-steps", "9000", "--quiet"], TINY)
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    # the step's own backbone (a previous step's output), set once: train refuses a field set
    # to two values
    assert "model.backbone=/work/pretrained" in sets and f"model.backbone={TINY}" not in sets
    assert len({s.partition("=")[0] for s in sets}) == len(sets)
    assert argv[argv.index("--max-steps") + 1] == "2" and argv.count("--max-steps") == 1
    assert "training.batch_size=4" in sets and argv[argv.index("--device") + 1] == "cpu"
    hub = smoke_argv(["pyserini_moe.train", "--config", "r.yaml", "--set",
                      "model.backbone=Luyu/co-condenser-wiki"], TINY)
    assert "model.backbone=Luyu/co-condenser-wiki" not in hub
    own = smoke_argv(["pyserini_moe.train", "--config", "r.yaml", "--set",
                      "model.backbone=/work/round1/best"], TINY)
    assert own[own.index("model.backbone=/work/round1/best") - 1] == "--set"


def test_a_step_whose_main_is_already_imported_runs_without_runpy_warning(tmp_path) -> None:
    importlib.import_module("pyserini_moe.eval.__main__")  # as a test or an earlier step would
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run_in_process("{python} -m pyserini_moe.eval --help", tmp_path, TINY) is None
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_pretraining_indexing_and_search_are_cut_to_smoke_size(monkeypatch) -> None:
    monkeypatch.setenv("BEIR_DIR", "/stand-ins/beir")
    pre = smoke_argv(["pyserini_moe.pretrain", "--backbone", "bert-base-uncased", "--max-steps",
                      "80000", "--batch-size", "256", "--grad-accumulation", "8"], TINY)
    assert pre[pre.index("--backbone") + 1] == TINY
    assert [pre[pre.index(f) + 1] for f in ("--max-steps", "--batch-size",
                                            "--grad-accumulation")] == ["2", "4", "1"]
    index = smoke_argv(["pyserini_moe.index", "--retriever", "dense", "--encoder", "m",
                        "--max-length", "512", "--threads", "16"], TINY)
    assert index[index.index("--max-length") + 1] == "32" and "16" not in index
    bm25 = smoke_argv(["pyserini_moe.index", "--retriever", "bm25"], TINY)
    assert "--max-length" not in bm25
    search = smoke_argv(["pyserini_moe.search", "--topics", "msmarco-passage-dev-subset",
                         "--query-max-length", "512"], TINY)
    assert search[search.index("--topics") + 1] == "/stand-ins/beir/msmarco:dev"
    assert search[search.index("--query-max-length") + 1] == "16"
    assert "--batch-size" not in search  # only changed where the step sets it


@pytest.fixture(scope="module")
def standins(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = shared_data_root()
    if root is None or not (root / "scifact").is_dir():
        pytest.skip("shared SciFact data not available")
    folder = tmp_path_factory.mktemp("smoke")
    spec = folder / "paper.yaml"
    spec.write_text(
        "name: toy-paper\nscale: paper\nrequires: {gpu: true, data: ['$DPR_DIR/psgs_w100.tsv', "
        "'$DPR_DIR/nq-test.qa.csv', '$DPR_DIR/biencoder-nq-train.json']}\n"
        "steps:\n"
        "  - '{python} -m pyserini_moe.train --config {root}/encoders/sbmoe-bert-base.yaml "
        "--set data.collection=$BEIR_DIR/msmarco --output-dir {work}/m --overwrite --quiet'\n"
        "conditions:\n"
        "  - name: sbmoe.dev\n    steps:\n"
        "      - '{python} -m pyserini_moe.index --retriever dense --corpus $BEIR_DIR/msmarco "
        "--encoder {work}/m/best --max-length 512 --index {work}/i --overwrite --quiet'\n"
        "      - '{python} -m pyserini_moe.search --retriever dense --index {work}/i --topics "
        "msmarco-passage-dev-subset --output {work}/run.trec --quiet'\n"
        "    run: '{work}/run.trec'\n    qrels: msmarco-passage-dev-subset\n"
        "    metrics: {ndcg@10: 0.5}\n    source: toy\n"
        "  - name: broken\n    steps:\n"
        "      - '{python} -m pyserini_moe.search --retriever dense --index {work}/i --topics "
        "$BEIR_DIR/msmarco:test --no-such-flag --output {work}/b.trec --quiet'\n"
        "    run: '{work}/b.trec'\n    qrels: '$BEIR_DIR/msmarco:test'\n"
        "    metrics: {ndcg@10: 0.5}\n    source: toy\n")
    reg = load_regression(spec)
    env = build_standins(folder / "standins", [reg])
    return spec, env


def test_standins_are_in_the_papers_formats(standins) -> None:
    _, env = standins
    beir = Path(env["BEIR_DIR"]) / "msmarco"
    assert {p.name for p in (beir / "qrels").iterdir()} == {"train.tsv", "dev.tsv", "test.tsv"}
    docs = [json.loads(line) for line in (beir / "corpus.jsonl").read_text().splitlines()]
    assert len(docs) == 240 and {"_id", "title", "text"} <= set(docs[0])
    dpr = Path(env["DPR_DIR"])
    with (dpr / "psgs_w100.tsv").open(newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows[0] == ["id", "text", "title"] and len(rows) == 241
    assert read_qa_csv(dpr / "nq-test.qa.csv")
    assert Path(env["MSMARCO_DOCT5QUERY"]).read_text().split("\n")[0].count("\t") == 1
    assert (Path(env["SMOKE_BACKBONE"]) / "config.json").is_file()
    ids = {r[0] for r in rows[1:]}
    examples = list(read_biencoder(dpr / "biencoder-nq-train.json", "nq-train"))
    assert len(examples) == 40 and all(set(ex.positives) <= ids for ex in examples)


def test_a_smoke_run_evaluates_every_sound_condition_and_names_the_broken_step(standins,
                                                                               monkeypatch):
    spec, env = standins
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    reg = load_regression(spec)
    evaluated, failures, _ = smoke_regression(reg, spec.parent / "work", env["SMOKE_BACKBONE"],
                                              progress=False)
    assert evaluated == ["sbmoe.dev"]
    [failure] = failures
    assert (failure.file, failure.condition, failure.step) == ("paper.yaml", "broken", 1)
    assert "--no-such-flag" in failure.error and "--no-such-flag" in failure.command
    assert "condition broken, step 1" in str(failure)
    recipe = (spec.parent / "work" / "m" / "recipe.yaml").read_text()
    assert env["SMOKE_BACKBONE"] in recipe and "passage_max_length: 32" in recipe
    assert os.environ["BEIR_DIR"] == env["BEIR_DIR"]
