"""Habits an experienced Pyserini user brings: shards of two corpora that share a folder name are
not merged, and the BM25 hybrid's ``--alpha`` defaults to Pyserini's 0.1 (every regression step
that relied on the old default names its alpha)."""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from pyserini_moe.cli import fuse, run_main
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import merge as merge_cli
from pyserini_moe.cli import search as search_cli
from pyserini_moe.index.meta import META_FILE, read_meta
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.runs import read_trec_run, write_trec_run
from pyserini_moe.search.dispatch import SearchSettings

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[2]


# --- merge: shards of one corpus only ------------------------------------------------------------


@pytest.fixture(scope="module")
def corpora(tiny_corpus, tiny_bert, tmp_path_factory) -> dict[str, Path]:
    """A model and three collections named ``scifact``: ``a``, ``b`` (one document's text
    differs) and ``copy`` (``a``'s bytes at another path, as on another machine)."""
    root = tmp_path_factory.mktemp("habits")
    torch.manual_seed(0)
    found = {"model": SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(root / "model")}
    for name in ("a", "b", "copy"):
        found[name] = shutil.copytree(tiny_corpus, root / name / "scifact")
    corpus = found["b"] / "corpus.jsonl"
    lines = corpus.read_text().splitlines(keepends=True)
    lines[-1] = json.dumps({"_id": "d29", "title": "cat", "text": "another corpus"}) + "\n"
    corpus.write_text("".join(lines))
    return found


def shard(corpora: dict[str, Path], corpus: str, shard_id: int, out: Path) -> str:
    """Shard ``shard_id`` of 2 of ``corpora[corpus]``, encoded by the module's model."""
    assert index_cli.main(["--retriever", "dense", "--corpus", str(corpora[corpus]), "--index",
                           str(out), "--encoder", str(corpora["model"]), "--device", "cpu",
                           "--quiet", "--shard-id", str(shard_id), "--shard-num", "2"]) == 0
    return str(out)


def test_shards_of_two_corpora_with_one_folder_name_are_refused(corpora, tmp_path,
                                                                capsys) -> None:
    first = shard(corpora, "a", 0, tmp_path / "a0")
    second = shard(corpora, "b", 1, tmp_path / "b1")
    assert read_meta(first).collection == read_meta(second).collection == "scifact"
    merged = tmp_path / "merged"
    capsys.readouterr()
    assert run_main(merge_cli.main, ["--shards", first, second, "--index", str(merged),
                                     "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert first in err and second in err and "different corpora" in err
    assert str(corpora["a"].resolve()) in err and str(corpora["b"].resolve()) in err
    assert not merged.exists()


def test_shards_of_one_corpus_copied_elsewhere_merge(corpora, tmp_path) -> None:
    """Shards encoded on two machines read the same bytes from different paths: the content
    digest, not the path, says whether they are one corpus."""
    parts = [shard(corpora, "a", 0, tmp_path / "a0"), shard(corpora, "copy", 1, tmp_path / "c1")]
    recorded = [read_meta(p).corpus for p in parts]
    assert recorded[0]["path"] != recorded[1]["path"]
    assert recorded[0]["sha256"] == recorded[1]["sha256"]
    assert recorded[0]["documents"] == 30
    assert merge_cli.main(["--shards", *parts, "--index", str(tmp_path / "merged"),
                           "--quiet"]) == 0
    assert read_meta(tmp_path / "merged").num_docs == 30


def test_shards_written_before_the_corpus_was_recorded_still_merge(corpora, tmp_path) -> None:
    parts = [shard(corpora, "a", 0, tmp_path / "a0"), shard(corpora, "a", 1, tmp_path / "a1")]
    for part in parts:
        meta = json.loads((Path(part) / META_FILE).read_text())
        del meta["corpus"]
        (Path(part) / META_FILE).write_text(json.dumps(meta))
    assert merge_cli.main(["--shards", *parts, "--index", str(tmp_path / "merged"),
                           "--quiet"]) == 0


# --- hybrid --alpha: Pyserini's default ----------------------------------------------------------


def pyserini_default_alpha() -> float:
    """The ``alpha`` default of Pyserini's ``HybridSearcher.search``, read from its source (no
    JVM, no Faiss)."""
    spec = importlib.util.find_spec("pyserini")
    source = Path(spec.origin).parent / "search" / "hybrid" / "_searcher.py"
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == "search":
            args = node.args.args
            defaults = dict(zip([a.arg for a in args[len(args) - len(node.args.defaults):]],
                                node.args.defaults))
            return ast.literal_eval(defaults["alpha"])
    raise AssertionError(f"no search() in {source}")


def alpha_action(parser):
    return next(a for a in parser._actions if "--alpha" in a.option_strings)


@pytest.mark.parametrize("module", [search_cli, fuse])
def test_alpha_defaults_to_pyserinis(module) -> None:
    assert pyserini_default_alpha() == 0.1
    action = alpha_action(module.build_parser())
    assert action.default == pyserini_default_alpha()
    assert "Pyserini's default" in action.help
    assert SearchSettings("dense", "i").alpha == pyserini_default_alpha()


def test_fuse_hybrid_without_alpha_weighs_bm25_by_a_tenth(tmp_path) -> None:
    dense = {"q1": {"d1": 1.0, "d2": 0.8}}
    sparse = {"q1": {"d2": 10.0, "d1": 1.0}}  # 1.0 + 0.1 * 1 > 0.8 + 0.1 * 10 is false
    write_trec_run(dense, tmp_path / "dense.trec")
    write_trec_run(sparse, tmp_path / "bm25.trec")

    def fused(*extra: str) -> dict:
        out = tmp_path / f"fused{len(extra)}.trec"
        assert fuse.main(["--runs", str(tmp_path / "dense.trec"), str(tmp_path / "bm25.trec"),
                          "--method", "hybrid", "--output", str(out), *extra]) == 0
        return read_trec_run(out)

    assert fused() == fused("--alpha", "0.1")
    assert fused()["q1"] == pytest.approx({"d1": 1.1, "d2": 1.8})


def _strings(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    values = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    return [s for value in values for s in _strings(value)]


def _hybrid_steps() -> list[str]:
    steps = []
    for path in sorted((ROOT / "regressions").glob("*.yaml")):
        for text in _strings(yaml.safe_load(path.read_text())):
            search = "pyserini_moe.search" in text and "--bm25-index" in text
            fused = "pyserini_moe.fuse" in text and "--method hybrid" in text
            if search or fused:
                steps.append(text)
    return steps


def test_every_regression_hybrid_names_its_alpha_or_tunes_it() -> None:
    """The default moved from 1.0 to Pyserini's 0.1: a shipped step that relied on the old
    default would now reproduce other numbers."""
    steps = _hybrid_steps()
    assert steps
    untuned = [s for s in steps if "--alpha" not in s.split() and "--dev-runs" not in s.split()]
    assert not untuned
