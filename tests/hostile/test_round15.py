"""Cases of the fifteenth hostile pass: a no-op --switch-experts (H15-24, defect), impact
queries of another quantisation (H15-58, defect: tests/search/test_encoded_queries.py), and the
POOR cases: fuse and a missing run (H15-05), hybrid runs in the wrong order (H15-09), regress
--condition with --scale or in another file (H15-10, H15-11), shards of a copied corpus
(H15-17), the messages of H15-34, H15-35, H15-42, H15-54, H15-55 and sizes on a trained model
(H15-25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe import fuse
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import regress, run_main, sizes
from pyserini_moe.errors import UserError
from pyserini_moe.runs import RunFormatError, read_trec_run


def test_switch_experts_on_a_siamese_encoder_is_refused() -> None:
    from pyserini_moe.train.pretrain import PretrainArgs

    with pytest.raises(UserError, match="a siamese encoder shares one for both, so nothing would "
                                        "change"):
        PretrainArgs(backbone="b", variant="siamese", corpora=["c"], switch_experts=True).check()
    for variant in ("mote", "separate"):
        PretrainArgs(backbone="b", variant=variant, corpora=["c"], switch_experts=True).check()


@pytest.mark.parametrize("method", ["combsum", "rrf"])
def test_fuse_says_a_missing_run_is_not_found_for_every_method(tmp_path, capsys, error_line,
                                                               method) -> None:
    (tmp_path / "b.trec").write_text("q1 Q0 d1 1 1.0 bm25\n")
    missing = tmp_path / "nosuch.trec"
    assert error_line(fuse.main, ["--runs", str(missing), str(tmp_path / "b.trec"), "--method",
                                  method, "--output", str(tmp_path / "f.trec")], capsys) == (
        f"error: run file not found: {missing}")


def _tagged(path: Path, tag: str) -> str:
    path.write_text(f"q1 Q0 d1 1 2.0 {tag}\nq1 Q0 d2 2 1.0 {tag}\n")
    return str(path)


@pytest.mark.parametrize(("first", "second", "warned"), [
    ("bm25", "dense", True), ("impact", "fused-came_sum", True), ("Anserini", "Faiss", True),
    ("dense", "bm25", False),
    ("bm25", "impact", False), ("run-a", "run-b", False)])
def test_hybrid_runs_whose_tags_say_sparse_first_are_warned_of(tmp_path, capsys, first, second,
                                                               warned) -> None:
    runs = [_tagged(tmp_path / "a.trec", first), _tagged(tmp_path / "b.trec", second)]
    assert run_main(fuse.main, ["--runs", *runs, "--method", "hybrid", "--output",
                                str(tmp_path / "f.trec")]) == 0
    err = capsys.readouterr().err
    assert ("takes the dense (or model) run first and the sparse run second, but the run tags "
            f"say --runs {runs[0]} is {first} and {runs[1]} {second}" in err) == warned


def test_a_condition_only_in_a_file_scale_drops_is_refused(capsys, error_line) -> None:
    assert error_line(regress.main, ["regressions/bm25-scifact.yaml", "regressions/bm25-paper.yaml",
                                     "--scale", "local", "--condition", "bm25.dl19-passage",
                                     "--dry-run"], capsys) == (
        "error: --condition bm25.dl19-passage: regressions/bm25-paper.yaml holds it, a "
        "paper-scale file that --scale local leaves out: drop --scale or the condition")


def test_a_file_without_the_condition_runs_none_of_its_steps(capsys) -> None:
    assert run_main(regress.main, ["regressions/bm25-scifact.yaml", "regressions/bm25-classic.yaml",
                                   "--condition", "bm25-flat.scifact.test", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "note: regressions/bm25-classic.yaml holds none of --condition: skipped" in err
    assert "cranfield" not in out and "--corpus scifact" in out


def test_shards_of_one_corpus_copied_under_another_folder_name_merge(tmp_path) -> None:
    from pyserini_moe.index.merge import check_shards
    from pyserini_moe.index.meta import IndexMeta, IndexMismatchError

    corpus = {"documents": 4, "sha256": "ab" * 32}
    for name in "012":
        (tmp_path / name).mkdir()
    for i, collection in enumerate(("scifact", "scifact-copy")):
        IndexMeta(kind="dense", collection=collection, encoder="m", encoder_fingerprint="f",
                  dim=4, corpus=corpus, shard={"id": i, "num": 2, "start": 2 * i,
                                               "stop": 2 * i + 2}).write(tmp_path / str(i))
    assert [folder.name for folder, _ in check_shards([tmp_path / "0", tmp_path / "1"])] == [
        "0", "1"]
    other = dict(corpus, sha256="cd" * 32)  # a different corpus is still refused
    IndexMeta(kind="dense", collection="scifact", encoder="m", encoder_fingerprint="f", dim=4,
              corpus=other, shard={"id": 1, "num": 2, "start": 2, "stop": 4}).write(tmp_path / "2")
    with pytest.raises(IndexMismatchError, match="were encoded from different"):
        check_shards([tmp_path / "0", tmp_path / "2"])


def test_a_model_without_the_representation_names_retriever_kinds(tiny_bert) -> None:
    from pyserini_moe.encode.adapters import MultiVectorDocumentEncoder
    from pyserini_moe.modeling import SiameseBiEncoder

    with pytest.raises(UserError, match=r"^model type 'siamese' has no multivector "
                                        r"representation \(its --retriever kinds: dense\)$"):
        MultiVectorDocumentEncoder(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"))


def test_an_encoder_without_retriever_asks_for_the_retriever(tmp_path, capsys, error_line) -> None:
    assert error_line(index_cli.main, ["--corpus", "scifact", "--encoder", "m", "--index",
                                       str(tmp_path / "i")], capsys) == (
        "error: --encoder names a model, but --retriever was not given and builds BM25 by "
        "default: add --retriever dense / impact / multivector (or leave --encoder out for a "
        "BM25 index)")


def test_a_bm25_index_flag_naming_another_kind_names_the_flag(tmp_path) -> None:
    from pyserini_moe.index.meta import IndexMeta, IndexMismatchError
    from pyserini_moe.search.dispatch import SearchSettings, _open

    for name in "id":
        (tmp_path / name).mkdir()
    IndexMeta(kind="impact", encoder="m", quantization=100).write(tmp_path / "i")
    IndexMeta(kind="dense", encoder="m", dim=4).write(tmp_path / "d")
    settings = SearchSettings("dense", str(tmp_path / "d"), bm25_index=str(tmp_path / "i"))
    with pytest.raises(IndexMismatchError, match=r"^--bm25-index .*/i is an impact index: the "
                                                 r"hybrid's BM25 side needs a BM25 index"):
        _open(settings)


def test_a_comment_line_first_in_a_run_is_named(tmp_path) -> None:
    run = tmp_path / "run.trec"
    run.write_text("# bm25 run\nq1 Q0 d1 1 1.0 t\n")
    with pytest.raises(RunFormatError, match=r"run.trec:1: a comment line: a run holds none"):
        read_trec_run(run)


def test_sizes_of_a_trained_model_gives_its_own_count_first(tiny_bert, tmp_path, capsys) -> None:
    from pyserini_moe.modeling import SiameseBiEncoder

    folder = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "m")
    assert run_main(sizes.main, ["--backbone", str(folder)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{folder} is a saved siamese model: ") and "parameters" in first
