"""Unusual input to the ``merge`` command (:mod:`pyserini_moe.merge`,
:mod:`pyserini_moe.cli.merge`): shards of two corpora that share a folder name, shards
copied elsewhere or written before the corpus was recorded, and a merge into a shard."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import merge, run_main
from pyserini_moe.cli import merge as merge_cli
from pyserini_moe.index.meta import META_FILE, read_meta
from pyserini_moe.modeling import SiameseBiEncoder
from tests.helpers import refused

pytestmark = pytest.mark.usefixtures("one_thread")


# --- merge: shards of one corpus only -------------------------------------------------------------


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


def test_merging_shards_into_a_shard_is_refused(bm25_ws, capsys) -> None:
    refused(merge.main, ["--shards", str(bm25_ws["bm25"]), "--index", str(bm25_ws["bm25"]), "--overwrite"],
            "is also an input", capsys, bm25_ws["bm25"])
    refused(merge.main, ["--shards", str(bm25_ws["bm25"]), "--index", str(bm25_ws["root"] / "m"),
                         "--threads", "-3"], "--threads must be >= 1", capsys)
