"""POOR cases of the sixteenth hostile pass (no defect was found): hybrid dev runs in the wrong
order (H16-06) and the rank-only advice per method (H16-10, H16-11), a comment line anywhere in
a run (H16-15), a collection's qrels/ folder as qrels or topics (H16-28, H16-29), a gzipped YAML
(H16-36), regress --condition naming (H16-38) and --work-dir inside an index or a collection
(H16-42, H16-43), dense encoded queries named .gz (H16-53), an int8 export's queries (H16-67),
shards of a gzipped copy (H16-69), pre-training on fewer examples than a step (H16-74), sizes of
an ONNX export (H16-78), gpu plans (H16-92, H16-93, H16-97)."""

from __future__ import annotations

import gzip
import logging
import sys
from pathlib import Path

import pytest

from pyserini_moe import fuse
from pyserini_moe.cli import regress, run_main, sizes
from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.errors import UserError
from pyserini_moe.io import read_yaml
from pyserini_moe.runs import RunFormatError, read_trec_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))
import gpu_seed_runs as tool  # noqa: E402


def _tagged(path: Path, tag: str, qid: str = "q1") -> str:
    path.write_text(f"{qid} Q0 d1 1 2.0 {tag}\n{qid} Q0 d2 2 1.0 {tag}\n")
    return str(path)


def test_hybrid_dev_runs_given_sparse_first_are_warned_of(tmp_path, capsys) -> None:
    runs = [_tagged(tmp_path / "d.trec", "Faiss"), _tagged(tmp_path / "b.trec", "Anserini")]
    dev = [_tagged(tmp_path / "dev-b.trec", "bm25", "q3"),
           _tagged(tmp_path / "dev-d.trec", "dense", "q3")]
    (tmp_path / "qrels.txt").write_text("q3 0 d1 1\n")
    assert run_main(fuse.main, ["--runs", *runs, "--method", "hybrid", "--dev-runs", *dev,
                                "--dev-qrels", str(tmp_path / "qrels.txt"), "--output",
                                str(tmp_path / "f.trec")]) == 0
    err = capsys.readouterr().err
    assert f"the run tags say --dev-runs {dev[0]} is bm25 and {dev[1]} dense" in err
    assert "say --runs" not in err


@pytest.mark.parametrize(("method", "norm"), [("hybrid", False), ("came_sum", False),
                                              ("combsum", True)])
def test_the_rank_only_advice_offers_norm_only_where_the_method_takes_it(
        tmp_path, capsys, error_line, method, norm) -> None:
    (tmp_path / "ms.tsv").write_text("q1\td1\t1\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d1 1 1.0 bm25\n")
    line = error_line(fuse.main, ["--runs", str(tmp_path / "ms.tsv"), str(tmp_path / "b.trec"),
                                  "--method", method, "--output", str(tmp_path / "f.trec")],
                      capsys)
    assert ("or --norm rank" in line) == norm and "use a rank fusion" in line


def test_a_comment_line_inside_a_run_is_named(tmp_path) -> None:
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\n# the second query\nq2 Q0 d1 1 1.0 t\n")
    with pytest.raises(RunFormatError, match=r"run.trec:2: a comment line: a run holds none"):
        read_trec_run(run)


@pytest.fixture
def collection(tmp_path) -> Path:
    root = tmp_path / "tc"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    return root


@pytest.mark.parametrize("load", [load_qrels, load_topics], ids=["qrels", "topics"])
def test_a_collections_qrels_folder_names_the_collection(collection, load) -> None:
    with pytest.raises(UserError, match=rf"is a folder, not a \w+ file: for a collection's \w+ "
                                        rf"give COLLECTION:SPLIT, e.g. {collection}:test "
                                        r"\(its splits: test\)$"):
        load(str(collection / "qrels"))


def test_another_folder_as_qrels_is_named_a_folder(tmp_path) -> None:
    with pytest.raises(UserError, match=r"is a folder, not a qrels file: give the file, or a "
                                        r"collection's COLLECTION:SPLIT$"):
        load_qrels(str(tmp_path))


def test_a_gzipped_yaml_is_named_gzip(tmp_path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes(gzip.compress(b"output_dir: x\n", mtime=0))
    with pytest.raises(ValueError, match=r"recipe.yaml: gzip-compressed: gunzip the recipe$"):
        read_yaml(recipe, "recipe", ValueError)


def test_regress_names_only_the_conditions_the_dropped_file_holds(capsys, error_line) -> None:
    assert error_line(regress.main, ["regressions/bm25-scifact.yaml", "regressions/bm25-paper.yaml",
                                     "--scale", "local", "--condition", "bm25-flat.scifact.test",
                                     "--condition", "bm25.dl19-passage", "--dry-run"], capsys) == (
        "error: --condition bm25.dl19-passage: regressions/bm25-paper.yaml holds it, a "
        "paper-scale file that --scale local leaves out: drop --scale or the condition")


def test_a_work_dir_inside_an_index_or_a_collection_is_refused(tmp_path, collection, capsys,
                                                               error_line) -> None:
    from pyserini_moe.index.meta import write_meta

    index = tmp_path / "index"
    index.mkdir()
    write_meta(index, "dense", encoder="/models/m", encoder_fingerprint="m")
    for work, where, what in ((index / "sub", index, "an index"),
                              (collection, None, "a collection"),
                              (collection / "work", collection, "a collection")):
        said = what if where is None else f"inside {where}, {what}"
        assert error_line(regress.main, ["regressions/bm25-scifact.yaml", "--work-dir", str(work),
                                         "--dry-run"], capsys) == (
            f"error: --work-dir {work} is {said}: name a folder of its own (made if missing)")
    (tmp_path / "proj").mkdir()  # a user's recipe above the work folder is not a training run
    (tmp_path / "proj" / "recipe.yaml").write_text("output_dir: x\n")
    assert run_main(regress.main, ["regressions/bm25-scifact.yaml", "--work-dir",
                                   str(tmp_path / "proj" / "work"), "--dry-run"]) == 0


def test_dense_encoded_queries_named_gz_or_pkl_are_refused(tmp_path) -> None:
    from pyserini_moe.search.encoded_queries import _check_output

    for name in ("q.pkl.gz", "embedding.pkl"):
        with pytest.raises(UserError, match=rf"--output .*{name}: a dense index's queries are a "
                                            "folder holding embedding.pkl"):
            _check_output(tmp_path / name, "dense", overwrite=False)
    _check_output(tmp_path / "q.jsonl.gz", "impact", overwrite=False)  # impact: a gzipped file


def test_queries_of_an_int8_export_are_named_the_same_models_export(tmp_path) -> None:
    from pyserini_moe.index.meta import IndexMeta, IndexMismatchError
    from pyserini_moe.search.encoded import check_encoded_queries

    meta = IndexMeta(kind="dense", encoder="/m", encoder_fingerprint="abcd")
    with pytest.raises(IndexMismatchError, match=r"encoded by the same model exported otherwise "
                                                 r"\(an int8 export is another encoder\)"):
        check_encoded_queries(meta, "abcd-int8-x", "idx", "q")
    with pytest.raises(IndexMismatchError, match="encoded by another model"):
        check_encoded_queries(meta, "ffff", "idx", "q")


def test_shards_of_a_gzipped_copy_say_the_digest_is_of_the_bytes(tmp_path) -> None:
    from pyserini_moe.index.merge import check_shards
    from pyserini_moe.index.meta import IndexMeta, IndexMismatchError

    for i, digest in enumerate(("ab", "cd")):
        (tmp_path / str(i)).mkdir()
        IndexMeta(kind="dense", collection="c", encoder="m", encoder_fingerprint="f", dim=4,
                  corpus={"documents": 4, "sha256": digest * 32},
                  shard={"id": i, "num": 2, "start": 2 * i, "stop": 2 * i + 2}
                  ).write(tmp_path / str(i))
    with pytest.raises(IndexMismatchError, match=r"or one copy of the corpus is gzipped"):
        check_shards([tmp_path / "0", tmp_path / "1"])


def test_pretraining_on_fewer_examples_than_a_step_is_said(tiny_mlm, tmp_path, caplog) -> None:
    from pyserini_moe.train.pretrain import PretrainArgs, pretrain

    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "corpus.jsonl").write_text("".join(
        f'{{"_id": "d{i}", "title": "", "text": "First sentence {i}. Second one {i}."}}\n'
        for i in range(6)))
    import torch

    args = PretrainArgs(backbone=str(tiny_mlm), corpora=[str(corpus)], max_steps=1,
                        batch_size=4, grad_accumulation=2, max_length=16, context_max_length=8)
    with caplog.at_level(logging.WARNING, logger="pyserini_moe"):
        pretrain(args, tmp_path / "out", torch.device("cpu"), progress=False)
    assert ("warning: 6 examples are fewer than one optimizer step takes (--batch-size 4 x "
            "--grad-accumulation 2): examples repeat within a step" in caplog.text)


def test_sizes_of_an_onnx_export_names_its_source(tmp_path, capsys, error_line) -> None:
    export = tmp_path / "onnx"
    export.mkdir()
    (export / "pyserini_moe_onnx.json").write_text('{"source": "/models/taser"}')
    assert error_line(sizes.main, ["--backbone", str(export)], capsys) == (
        f"error: {export} is an ONNX export of /models/taser: give --backbone /models/taser, "
        "the model it was exported from")


SIAMESE = "encoders/siamese-minilm.yaml"


def test_a_plan_name_keeps_its_model_however_spelt(tmp_path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text(f"a 42 {SIAMESE} --set training.epochs=2 --set training.batch_size=4\n"
                    f"a 43 ./{SIAMESE} --set training.batch_size=4 --set training.epochs=2\n")
    assert [j["name"] for j in tool.parse_plan(plan, check_sets=False)] == ["a-s42", "a-s43"]


def test_snapshots_yes_with_a_keep_snapshots_set_is_refused(tmp_path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text(f"a 42 {SIAMESE} --set training.keep_snapshots=false | snapshots=yes\n")
    with pytest.raises(SystemExit, match="snapshots=yes sets training.keep_snapshots itself"):
        tool.parse_plan(plan, check_sets=False)


def test_a_sigterm_a_finaliser_swallowed_is_honoured_before_an_output_is_committed(
        tmp_path, monkeypatch, capsys) -> None:
    """make test under load: a SIGTERM landed in a ``__del__`` ("Exception ignored in"), and
    the index build ran on to write its index and exit 0."""
    from pyserini_moe import errors
    from pyserini_moe.io import atomic_path

    monkeypatch.setattr(errors, "_received", [])
    errors.note_termination("SIGTERM")  # as the handler does before its exception is lost
    with pytest.raises(errors.Terminated), atomic_path(tmp_path / "out.txt") as tmp:
        tmp.write_text("half")
    assert list(tmp_path.iterdir()) == []

    def finishes(argv):
        return 0
    assert run_main(finishes, []) == 143
    assert capsys.readouterr().err.strip() == "interrupted"
