"""Defects found by the second hostile pass on a fresh clone (2026-11-24): each case failed
before its fix. Inputs are never deleted or rewritten, even with --overwrite; tracebacks became
one error line; silently wrong results became refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import analyze, dpr, export, fuse, merge, pretrain, regress, run_main, sizes
from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import search as search_cli
from pyserini_moe.modeling import SiameseBiEncoder


@pytest.fixture(scope="module")
def ws(tiny_bert, tiny_corpus, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("second-pass")
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


def snapshot(path: Path) -> dict[str, bytes]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): p.read_bytes() for p in files}


def refused(main, argv: list[str], message: str, capsys, keep: Path | None = None) -> None:
    before = snapshot(keep) if keep is not None else None
    assert run_main(main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and message in err[-1], err
    if keep is not None:
        assert snapshot(keep) == before  # the input is untouched


def test_an_index_over_its_own_corpus_is_refused(ws, capsys) -> None:
    refused(index_cli.main, ["--retriever", "bm25", "--corpus", str(ws["corpus"]), "--index",
                             str(ws["corpus"]), "--overwrite"], "is also an input", capsys,
            ws["corpus"])


def test_an_index_over_its_own_encoder_is_refused(ws, capsys) -> None:
    refused(index_cli.main, ["--retriever", "dense", "--corpus", str(ws["corpus"]), "--encoder",
                             str(ws["model"]), "--index", str(ws["model"]), "--overwrite",
                             "--device", "cpu"], "is also an input", capsys, ws["model"])


def test_an_export_over_its_model_and_a_folder_holding_it_are_refused(ws, capsys) -> None:
    refused(export.main, ["--encoder", str(ws["model"]), "--output", str(ws["model"]),
                          "--overwrite"], "is also an input", capsys, ws["model"])
    refused(export.main, ["--encoder", str(ws["model"]), "--output", str(ws["root"]),
                          "--overwrite"], "holds the input", capsys, ws["model"])


def test_pre_training_over_its_backbone_is_refused(ws, capsys) -> None:
    refused(pretrain.main, ["--backbone", str(ws["model"]), "--corpus", str(ws["corpus"]),
                            "--output-dir", str(ws["model"]), "--overwrite"],
            "is also an input", capsys, ws["model"])


def test_analysis_and_run_merging_do_not_write_over_their_runs(ws, capsys) -> None:
    refused(analyze.main, ["came", "--expert-runs", f"lexical={ws['run']}",
                           f"global={ws['other']}", "--qrels", f"{ws['corpus']}:test",
                           "--output", str(ws["other"])], "is also an input", capsys, ws["other"])
    refused(dpr.main, ["merge-runs", "--runs", str(ws["run"]), str(ws["other"]), "--output",
                       str(ws["other"])], "is also an input", capsys, ws["other"])


def test_merging_shards_into_a_shard_is_refused(ws, capsys) -> None:
    refused(merge.main, ["--shards", str(ws["bm25"]), "--index", str(ws["bm25"]), "--overwrite"],
            "is also an input", capsys, ws["bm25"])
    refused(merge.main, ["--shards", str(ws["bm25"]), "--index", str(ws["root"] / "m"),
                         "--threads", "-3"], "--threads must be >= 1", capsys)


@pytest.mark.parametrize("removed,message", [
    (("tokenizer.json", "tokenizer_config.json", "vocab.txt"), "tokenizer files"),
    (("config.json",), "no config.json"),
])
def test_an_incomplete_model_folder_is_refused(ws, tmp_path, capsys, removed, message) -> None:
    broken = tmp_path / "model"
    shutil.copytree(ws["model"], broken)
    for name in removed:
        (broken / name).unlink(missing_ok=True)
    refused(index_cli.main, ["--retriever", "dense", "--corpus", str(ws["corpus"]), "--encoder",
                             str(broken), "--index", str(tmp_path / "i"), "--device", "cpu",
                             "--quiet"], message, capsys)
    assert not (tmp_path / "i").exists()


@pytest.mark.parametrize("lines,message", [
    ("q0 Q0 d1 1 1.0 t\nq0 Q0 d1 2 0.1 t\n", ":2: document 'd1' is listed twice for query 'q0'"),
    ("q0 Q0 d1 1 nan t\n", ":1: score 'nan' is not a finite number"),
])
def test_ambiguous_runs_are_refused(ws, tmp_path, capsys, lines, message) -> None:
    run = tmp_path / "bad.trec"
    run.write_text(lines)
    refused(eval_cli.main, ["--run", str(run), "--qrels", f"{ws['corpus']}:test"], message, capsys)


def test_fusion_parameters_that_invert_or_break_it(ws, tmp_path, capsys) -> None:
    out = tmp_path / "f.trec"
    with pytest.raises(SystemExit):  # argparse: "argument --rrf-k/--rrf.k: must be >= 1"
        fuse.main(["--runs", str(ws["run"]), str(ws["other"]), "--method", "rrf", "--rrf-k", "-5",
                   "--output", str(out)])
    assert "--rrf-k/--rrf.k: must be >= 1, got -5" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: one usage line, exit 2
        fuse.main(["--runs", str(ws["run"]), str(ws["other"]), "--method", "rrf", "--norm",
                   "banana", "--output", str(out)])
    assert not out.exists()


def test_an_unknown_regression_condition_runs_nothing(ws, tmp_path, capsys) -> None:
    spec = tmp_path / "r.yaml"
    spec.write_text(json.dumps({
        "name": "r", "description": "d", "scale": "local",
        "steps": [f"touch {tmp_path / 'ran'}"],
        "conditions": [{"name": "c1", "run": "x.trec", "qrels": "scifact:test",
                        "metrics": {"ndcg@10": None}, "source": "test"}]}))
    refused(regress.main, ["--condition", "nosuch", str(spec), "--work-dir", str(tmp_path / "w")],
            "no such condition", capsys)
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("extra,message", [
    (["--hits", "99999999999"], "must be <= 2147483647"),
    (["--k1", "-1"], "BM25 needs --k1 >= 0 and --b in [0, 1]"),
    (["--b", "7"], "BM25 needs --k1 >= 0 and --b in [0, 1]"),
])
def test_search_values_java_cannot_take(ws, tmp_path, capsys, extra, message) -> None:
    refused(search_cli.main, ["--index", str(ws["bm25"]), "--topics", f"{ws['corpus']}:test",
                              "--output", str(tmp_path / "o.trec"), *extra], message, capsys)


def test_a_collection_or_a_damaged_index_as_index(ws, tmp_path, capsys) -> None:
    refused(search_cli.main, ["--index", str(ws["corpus"]), "--topics", f"{ws['corpus']}:test",
                              "--output", str(tmp_path / "o.trec")],
            "is not a Lucene index (it looks like a collection)", capsys)
    broken = tmp_path / "bm25"
    shutil.copytree(ws["bm25"], broken)
    for segments in broken.glob("segments*"):
        segments.unlink()
    refused(search_cli.main, ["--index", str(broken), "--topics", f"{ws['corpus']}:test",
                              "--output", str(tmp_path / "o.trec")], "no segments file", capsys)


def test_bad_device_and_faiss_form_are_refused_before_encoding(ws, tmp_path, capsys) -> None:
    base = ["--retriever", "dense", "--corpus", str(ws["corpus"]), "--encoder", str(ws["model"]),
            "--quiet"]
    refused(index_cli.main, [*base, "--index", str(tmp_path / "a"), "--device", "tpu:7"],
            "--device 'tpu:7'", capsys)
    refused(index_cli.main, [*base, "--index", str(tmp_path / "b"), "--faiss", "hnswXYZ",
                             "--device", "cpu"], "unknown faiss index 'hnswXYZ'", capsys)
    assert not any(tmp_path.iterdir())


def test_a_config_no_model_can_be_built_from(tmp_path, tiny_bert, capsys) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(tiny_bert, bad)
    config = json.loads((bad / "config.json").read_text())
    config["hidden_size"] = -5
    (bad / "config.json").write_text(json.dumps(config))
    refused(sizes.main, ["--backbone", str(bad)], "its config's hidden_size is -5, not a count "
            ">= 1", capsys)
    assert "| model" not in capsys.readouterr().out


def test_misplaced_folders_say_what_they_are(ws, tmp_path, capsys, monkeypatch) -> None:
    refused(index_cli.main, ["--retriever", "bm25", "--corpus", str(ws["bm25"]), "--index",
                             str(tmp_path / "i")], "an index, not a collection", capsys)
    refused(search_cli.main, ["--index", str(ws["bm25"]), "--topics", str(ws["corpus"]),
                              "--output", str(tmp_path / "o.trec")],
            "is a folder, not a topics file", capsys)
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(tmp_path / "missing"))
    refused(search_cli.main, ["--index", str(ws["bm25"]), "--topics", "cranfield:test",
                              "--output", str(tmp_path / "o.trec")],
            "PYSERINI_MOE_DATA=", capsys)


def test_merging_an_empty_run_is_refused(ws, tmp_path, capsys) -> None:
    empty = tmp_path / "empty.trec"
    empty.write_text("")
    refused(dpr.main, ["merge-runs", "--runs", str(empty), str(ws["run"]), "--output",
                       str(tmp_path / "m.trec")], "the run is empty", capsys)


def test_export_over_a_file_and_metadata_that_disagrees_with_faiss(ws, tmp_path,
                                                                   capsys) -> None:
    target = tmp_path / "victim.trec"
    target.write_text("keep")
    refused(export.main, ["--encoder", str(ws["model"]), "--output", str(target),
                          "--overwrite"], "is a file: name a folder", capsys, target)
    dense = tmp_path / "dense"
    assert index_cli.main(["--retriever", "dense", "--corpus", str(ws["corpus"]), "--encoder",
                           str(ws["model"]), "--index", str(dense), "--device", "cpu",
                           "--quiet"]) == 0
    meta = json.loads((dense / "pyserini_moe_index.json").read_text())
    meta["dim"] = meta["dim"] * 2
    (dense / "pyserini_moe_index.json").write_text(json.dumps(meta))
    refused(search_cli.main, ["--retriever", "dense", "--index", str(dense), "--topics",
                              f"{ws['corpus']}:test", "--output", str(tmp_path / "o.trec"),
                              "--device", "cpu"], "the metadata says", capsys)
