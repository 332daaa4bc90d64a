"""Bad input to every command, as a user would type it: each case asserts the exit code, the one
`error:` line (or argparse's usage error) and that no output was left on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import fuse, merge, pretrain, regress, run_main
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import search as search_cli
from pyserini_moe.cli import train as train_cli

MAINS = {"index": index_cli.main, "search": search_cli.main, "eval": eval_cli.main,
         "train": train_cli.main, "fuse": fuse.main, "regress": regress.main,
         "pretrain": pretrain.main, "merge": merge.main}


@pytest.fixture(scope="module")
def ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    """A workspace: the tiny corpus, a model, its dense index, a run, qrels and broken files."""
    shared = model_index_run(tmp_path_factory.mktemp("hostile"))
    root, model = shared["root"], shared["model"]
    (root / "five.trec").write_text("q0 Q0 d0 1 3.0\n")
    (root / "badrel.txt").write_text("q0 0 d0 high\n")
    broken = root / "broken-corpus"
    broken.mkdir()
    (broken / "corpus.jsonl").write_text('{"_id": "d0", "text": "a cat"}\n{"_id": "d1", "text"\n')
    (root / "topics-empty.tsv").write_text("q0\t \n")
    (root / "recipe-unknown.yaml").write_text(
        "output_dir: x\nmodel: {type: siamese}\ndata: {collection: scifact, colour: red}\n"
        "training: {learning_rate: 1e-3}\n")
    (root / "recipe-ok.yaml").write_text(
        f"output_dir: {root}/trained\nmodel: {{type: siamese, backbone: {model}}}\n"
        f"data: {{collection: {shared['corpus']}, split: test}}\ntraining: {{learning_rate: 1e-3}}\n")
    (root / "reg-dup.yaml").write_text(
        "name: r\nconditions:\n" + "".join(
            f"  - {{name: c, run: {root}/run.trec, qrels: {root}/qrels.txt, "
            "metrics: {ndcg@10: 0.5}, source: x}\n" for _ in range(2)))
    (root / "reg-none.yaml").write_text("name: r\n")
    (root / "pseudo.tsv").write_text("d0 what is a cat\n")
    return shared


def case(cmd: str, argv: str, message: str, code: int = 2, leaves: str | None = None):
    return pytest.param(cmd, argv, message, code, leaves, id=f"{cmd}: {message[:40]}")


CASES = [
    case("index", "--retriever dense --corpus {corpus} --index {index} --encoder {model}",
         "already exists; pass --overwrite"),
    case("index", "--retriever nope --corpus {corpus} --index {root}/out", "invalid choice",
         leaves="out"),
    case("index", "--retriever bm25 --corpus {root}/no-such --index {root}/out", "no-such",
         leaves="out"),
    case("index", "--retriever bm25 --corpus {root}/broken-corpus --index {root}/out",
         "corpus.jsonl:2", leaves="out"),
    case("index", "--retriever dense --corpus {corpus} --index {root}/out --encoder {root}/dense",
         "dense is a 'dense' index, not a model: pass the model that built it", leaves="out"),
    case("index", "--retriever dense --corpus {corpus} --index {root}/out --encoder {model} "
                  "--max-length 4096", "above the 512 token positions", leaves="out"),
    case("search", "--retriever dense --index {root}/no-index --topics {corpus}:test "
                   "--output {root}/o.trec", "no-index", leaves="o.trec"),
    case("search", "--retriever dense --index {index} --topics {root}/no-topics.tsv "
                   "--output {root}/o.trec", "no-topics.tsv", leaves="o.trec"),
    case("search", "--retriever dense --index {index} --topics {root}/topics-empty.tsv "
                   "--output {root}/o.trec", "empty text for query 'q0'", leaves="o.trec"),
    case("search", "--retriever dense --index {index} --topics {corpus}:test --hits 0 "
                   "--output {root}/o.trec", "--hits must be >= 1", leaves="o.trec"),
    case("search", "--retriever impact --index {index} --topics {corpus}:test "
                   "--output {root}/o.trec", "dense", leaves="o.trec"),
    case("search", "--retriever dense --index {index} --topics {corpus}:test --alpha -2 "
                   "--bm25-index {index} --output {root}/o.trec", "--alpha must be >= 0",
         leaves="o.trec"),
    case("search", "--retriever dense --index {index} --topics {corpus}:test "
                   "--output {root}", "is a directory"),
    case("eval", "--run {root}/no-run.trec --qrels {root}/qrels.txt", "no-run.trec"),
    case("eval", "--run {root}/five.trec --qrels {root}/qrels.txt", "five.trec:1"),
    case("eval", "--run {root}/run.trec --qrels {root}/qrels.txt --metrics ndcg@ten", "ndcg@ten"),
    case("eval", "--run {root}/run.trec --qrels {root}/badrel.txt", "badrel.txt:1"),
    case("eval", "--run {root}/run.trec --qrels {root}/qrels.txt --output {root}",
         "is a directory"),
    case("train", "--config {root}/no-recipe.yaml", "no-recipe.yaml"),
    case("train", "--config {root}/recipe-unknown.yaml", "data.colour: unknown field"),
    case("train", "--config {root}/recipe-ok.yaml --set nonsense", "FIELD=VALUE",
         leaves="trained"),
    case("train", "--config {root}/recipe-ok.yaml --set training.epochs=two",
         "--set training.epochs=two: expected an integer", leaves="trained"),
    case("fuse", "--runs {root}/run.trec --method rrf --output {root}/f.trec",
         "at least two runs", leaves="f.trec"),
    case("fuse", "--runs {root}/run.trec {root}/run.trec --method wsum --weights 1 "
                 "--output {root}/f.trec", "--weights needs 2 values", leaves="f.trec"),
    case("fuse", "--runs {root}/run.trec {root}/five.trec --method rrf --output {root}/f.trec",
         "five.trec:1", leaves="f.trec"),
    case("regress", "{root}/reg-dup.yaml", "duplicate condition name"),
    case("regress", "{root}/reg-none.yaml", "missing field 'conditions'"),
    case("regress", "{root}/no-such.yaml", "no-such.yaml"),
    case("pretrain", "--backbone {model} --pseudo-queries {corpus}={root}/pseudo.tsv "
                     "--output-dir {root}/pt --max-steps 1", "pseudo.tsv:1", leaves="pt"),
    case("pretrain", "--backbone {model} --output-dir {root}/pt", "nothing to pre-train on",
         leaves="pt"),
    case("merge", "--shards {index} --index {root}/merged", "is not an index shard",
         leaves="merged"),
]


@pytest.mark.parametrize("cmd,argv,message,code,leaves", CASES)
def test_bad_input_is_one_line_and_leaves_nothing(ws, capsys, cmd, argv, message, code,
                                                  leaves) -> None:
    args = argv.format(**{k: str(v) for k, v in ws.items()}).split()
    try:
        got = run_main(MAINS[cmd], args)
    except SystemExit as stop:  # argparse's own usage errors
        got = stop.code
    err = capsys.readouterr().err.strip().splitlines()
    assert got == code, err
    assert err and (err[-1].startswith("error: ") or ": error: " in err[-1]), err
    assert message in err[-1], err[-1]
    assert "Traceback" not in "\n".join(err)
    if leaves:
        assert not (ws["root"] / leaves).exists()
        assert not list(ws["root"].glob(f".{leaves}.tmp-*"))
