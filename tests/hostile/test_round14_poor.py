"""The POOR cases of the fourteenth hostile pass: copies of the fused runs that pass as dev runs
once gzipped or re-tagged (H14-16, H14-17); an MS MARCO run (or a headerless qrels file) with a
rank given twice (H14-41, H14-42); a collection's folder given as qrels (H14-54); one run given
twice to eval (H14-55); runs of different depths compared past the shallower (H14-57, H14-58);
the hybrid named a dense search (H14-72); --max-steps beyond the epochs (H14-79); two models'
indexes of one kind (H14-86); onnxruntime's advice printed by ``export --int8`` (H14-101)."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import pytest

from pyserini_moe import fuse
from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import run_main
from pyserini_moe.errors import UserError
from pyserini_moe.eval.metrics import say_if_depths_differ
from pyserini_moe.runs import RunFormatError, read_trec_run

# -- fuse: copies of the fused runs as dev runs (H14-16, H14-17) ----------------------------------


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Test runs of q1-q2 (dense, bm25), dev runs of q3-q4 and their qrels."""
    (tmp_path / "d.trec").write_text("q1 Q0 d1 1 3.0 dense\nq1 Q0 d2 2 1.0 dense\n"
                                     "q2 Q0 d2 1 3.0 dense\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.0 bm25\nq2 Q0 d1 1 3.0 bm25\n")
    (tmp_path / "dev-d.trec").write_text("q3 Q0 d3 1 3.0 dense\nq4 Q0 d4 1 3.0 dense\n")
    (tmp_path / "dev-b.trec").write_text("q3 Q0 d4 1 3.0 bm25\nq4 Q0 d3 1 3.0 bm25\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return tmp_path


def _gzipped(runs: Path, name: str) -> str:
    target = runs / f"copy-{name}.gz"
    target.write_bytes(gzip.compress((runs / name).read_bytes(), mtime=0))
    return target.name


def _retagged(runs: Path, name: str) -> str:
    target = runs / f"dev-tagged-{name}"
    target.write_text((runs / name).read_text().replace(" dense\n", " dev\n")
                      .replace(" bm25\n", " dev\n"))
    return target.name


@pytest.mark.parametrize("copy", [_gzipped, _retagged], ids=["gzipped", "retagged"])
def test_a_dev_run_with_the_rankings_of_a_fused_run_is_refused(fuse_argv, runs, capsys,
                                                              error_line, copy) -> None:
    dev = (copy(runs, "d.trec"), copy(runs, "b.trec"))
    assert error_line(fuse.main, fuse_argv(runs, "hybrid", dev), capsys) == (
        f"error: --dev-runs {runs / dev[0]} holds the same rankings as --runs {runs / 'd.trec'}: "
        "tuning on a copy of a run being fused fits it to its own queries; give the same "
        "systems' runs on dev queries")
    assert not (runs / "f.trec").exists()


def test_dev_runs_of_the_fused_queries_judged_on_dev_are_warned_of(fuse_argv, runs,
                                                                    capsys) -> None:
    """Dev runs that also rank q1, a fused query, under qrels judging it: tuned on it. One qrels
    file judging both splits (H16-04) is no such case while the dev runs hold q3 and q4 only."""
    (runs / "qrels.txt").write_text("q1 0 d1 1\nq3 0 d3 1\nq4 0 d4 1\n")
    assert run_main(fuse.main, fuse_argv(runs, "wsum", ("dev-d.trec", "dev-b.trec"))) == 0
    assert "fused queries are judged" not in capsys.readouterr().err
    for name in ("dev-d.trec", "dev-b.trec"):  # another system's ranking of q1 joins the dev runs
        (runs / name).write_text((runs / name).read_text() + "q1 Q0 d3 1 5.0 dev\n")
    assert run_main(fuse.main, fuse_argv(runs, "wsum", ("dev-d.trec", "dev-b.trec"))) == 0
    assert ("warning: 1 of the 2 fused queries are judged in --dev-qrels: tuning on them fits "
            "the fused run to its own queries (are the dev runs and qrels of another split?)"
            in capsys.readouterr().err.splitlines())


# -- runs: a rank twice in an MS MARCO run (H14-41, H14-42) ----------------------------------------


@pytest.mark.parametrize("text", ["q1\td1\t1\nq1\td2\t1\n", "q1 d1 1\nq1 d2 2\nq1 d3 02\n"],
                         ids=["headerless-qrels", "duplicate-rank"])
def test_a_rank_given_twice_for_a_query_is_refused(tmp_path, text) -> None:
    run = tmp_path / "run.tsv"
    run.write_text(text)
    with pytest.raises(RunFormatError, match=r"run.tsv:\d: rank 0?[12] is given twice for query "
                                             r"'q1': a run ranks each document once \(a qrels"):
        read_trec_run(run)


def test_gapped_ranks_and_one_rank_in_two_queries_are_read(tmp_path) -> None:
    """A run filtered after it was written keeps its gaps; each query has its own rank 1."""
    run = tmp_path / "run.tsv"
    run.write_text("q1\td1\t1\nq1\td2\t3\nq2\td1\t1\n")
    assert read_trec_run(run) == {"q1": {"d1": 1.0, "d2": 1 / 3}, "q2": {"d1": 1.0}}


# -- eval: a collection folder as qrels (H14-54), a run twice (H14-55), depths (H14-57/58) ------


def test_a_collection_folder_given_as_qrels_names_the_split_to_add(tmp_path, error_line,
                                                                   capsys) -> None:
    collection = tmp_path / "tc"
    (collection / "qrels").mkdir(parents=True)
    for split in ("test", "dev"):
        (collection / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n")
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    assert error_line(eval_cli.main, ["--run", str(tmp_path / "run.trec"), "--qrels",
                                      str(collection)], capsys) == (
        f"error: qrels {collection} is a folder, not a qrels file: for a collection's qrels give "
        f"COLLECTION:SPLIT, e.g. {collection}:dev (its splits: dev, test)")


def test_one_run_given_twice_is_named_as_such(tmp_path, error_line, capsys) -> None:
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\n")
    assert error_line(eval_cli.main, ["--run", str(run), str(run), "--qrels", "x"], capsys) == (
        f"error: --run {run} is given twice: give each run once")


def _run(depth: int) -> dict[str, dict[str, float]]:
    return {"q1": {f"d{i}": 1 / (i + 1) for i in range(depth)}}


def test_runs_of_different_depths_are_said_where_a_metric_reads_past_the_shallower(capsys) -> None:
    say_if_depths_differ({"a": _run(10), "b": _run(30)}, ["ndcg@10", "recall@100", "map"])
    assert capsys.readouterr().err == (
        "warning: the runs hold different numbers of hits a query (at most a: 10, b: 30): "
        "recall@100, map then compare list lengths as well as rankings; cut the runs to one "
        "depth to compare rankings alone\n")
    say_if_depths_differ({"a": _run(10), "b": _run(30)}, ["ndcg@10", "recall@10"])
    say_if_depths_differ({"a": _run(10), "b": _run(10)}, ["recall@100"])
    assert capsys.readouterr().err == ""


def test_eval_says_the_depths_of_the_runs_it_compares(tmp_path, capsys) -> None:
    paths = []
    for name, depth in (("short", 2), ("long", 5)):
        path = tmp_path / f"{name}.trec"
        path.write_text("".join(f"{q} Q0 d{i} {i + 1} {10 - i} t\n" for q in ("q1", "q2")
                                for i in range(depth)))
        paths.append(str(path))
    (tmp_path / "qrels.txt").write_text("q1 0 d4 1\nq2 0 d0 1\n")
    assert run_main(eval_cli.main, ["--run", *paths, "--qrels", str(tmp_path / "qrels.txt"),
                                    "--metrics", "recall@5"]) == 0
    assert "(at most short.trec: 2, long.trec: 5): recall@5 then compares" in capsys.readouterr().err


# -- search: the hybrid's name (H14-72); two models of one kind (H14-86) --------------------------


def test_a_setting_a_hybrid_does_not_read_names_the_hybrid() -> None:
    from pyserini_moe.search.dispatch import SearchSettings

    with pytest.raises(UserError, match=r"^--fusion: not used by a dense search with its BM25 "
                                        r"hybrid \(--bm25-index, weighed by --alpha\); leave it"):
        SearchSettings("dense", "i", bm25_index="b", fusion="rrf")


def test_two_models_indexes_of_one_kind_are_pointed_at_fuse(tmp_path) -> None:
    from pyserini_moe.index.meta import write_meta
    from pyserini_moe.search.experts import ExpertFusionSearcher

    for name, model in (("a", "aaaa"), ("b", "bbbb")):
        (tmp_path / name).mkdir()
        write_meta(tmp_path / name, "dense", encoder=f"/models/{model}", encoder_fingerprint=model)
    with pytest.raises(UserError, match="were built by different models.*pyserini_moe.fuse"):
        ExpertFusionSearcher([tmp_path / "a", tmp_path / "b"])


# -- train: --max-steps beyond the epochs (H14-79) ------------------------------------------------


@pytest.mark.parametrize(("max_steps", "warned"), [(50, True), (2, False)])
def test_max_steps_the_epochs_cannot_hold_is_said(siamese_recipe, toy_data, tiny_bert, caplog,
                                                  max_steps, warned) -> None:
    import torch

    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.train.trainer import Trainer

    recipe = siamese_recipe.with_settings([f"training.max_steps={max_steps}"])
    torch.manual_seed(0)
    trainer = Trainer(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"), recipe,
                      toy_data(), progress=False)
    with caplog.at_level(logging.WARNING, logger="pyserini_moe"):
        steps = trainer.train()["metrics"]["steps"]
    said = [r.getMessage() for r in caplog.records if "epoch(s) hold" in r.getMessage()]
    assert said == ([f"warning: max_steps {max_steps} is more than the 1 epoch(s) hold: training "
                     f"stops after {steps} steps (raise --epochs to train longer)"]
                    if warned else [])
    assert steps == (steps if warned else max_steps) and (steps < max_steps) == warned


# -- export --int8: onnxruntime's advice (H14-101) ------------------------------------------------


def test_int8_export_logs_no_advice_and_leaves_the_root_logger_as_it_was(tiny_bert, tmp_path,
                                                                        caplog) -> None:
    pytest.importorskip("onnxruntime")
    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.modeling.onnx import export

    root = logging.getLogger()
    with caplog.at_level(logging.WARNING):
        handlers, level = list(root.handlers), root.level
        export(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"), tmp_path / "int8",
               source="siamese", int8=True)
        assert (root.handlers, root.level) == (handlers, level)
    assert "pre-processing" not in caplog.text
