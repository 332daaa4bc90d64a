"""``search --retriever`` may be left out: the index's metadata says its kind (an index without
ours is a BM25 Lucene index, as before); a --retriever that contradicts the index is still an
error. ``--max-length`` is Pyserini's name for ``--query-max-length``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.index.meta import META_FILE, write_meta
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.runs import read_trec_run
from pyserini_moe.search.dispatch import recorded_retriever

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ws(tiny_bert, tiny_corpus, tmp_path_factory) -> dict[str, Path]:
    """Our BM25 and dense indexes of the tiny corpus, and each copied without our metadata (as
    Pyserini builds them)."""
    root = tmp_path_factory.mktemp("kinds")
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(root / "model")
    assert index_cli.main(["--retriever", "bm25", "--corpus", str(tiny_corpus), "--index",
                           str(root / "bm25"), "--quiet"]) == 0
    assert index_cli.main(["--retriever", "dense", "--corpus", str(tiny_corpus), "--index",
                           str(root / "dense"), "--encoder", str(model), "--device", "cpu",
                           "--quiet"]) == 0
    for kind in ("bm25", "dense"):
        shutil.copytree(root / kind, root / f"pyserini-{kind}")
        (root / f"pyserini-{kind}" / META_FILE).unlink()
    return {"root": root, "topics": f"{tiny_corpus}:test", "model": model}


def search(ws, out: Path, *args: str) -> int:
    bm25 = "bm25" in Path(args[args.index("--index") + 1]).name
    device = [] if bm25 else ["--device", "cpu"]  # a BM25 search refuses --device
    return run_main(search_cli.main, ["--topics", ws["topics"], "--quiet", *device,
                                      "--output", str(out), *args])


def test_a_dense_index_is_searched_without_retriever(ws, tmp_path) -> None:
    index = str(ws["root"] / "dense")
    assert search(ws, tmp_path / "named.trec", "--retriever", "dense", "--index", index) == 0
    assert search(ws, tmp_path / "found.trec", "--index", index) == 0
    assert read_trec_run(tmp_path / "found.trec") == read_trec_run(tmp_path / "named.trec")
    assert (tmp_path / "found.trec").read_text().split("\n", 1)[0].endswith(" dense")


@pytest.mark.parametrize("index", ["bm25", "pyserini-bm25"])
def test_a_bm25_index_is_still_searched_without_retriever(ws, tmp_path, index) -> None:
    folder = str(ws["root"] / index)
    assert search(ws, tmp_path / "named.trec", "--retriever", "bm25", "--index", folder) == 0
    assert search(ws, tmp_path / "found.trec", "--index", folder) == 0
    assert read_trec_run(tmp_path / "found.trec") == read_trec_run(tmp_path / "named.trec")
    assert (tmp_path / "found.trec").read_text().split("\n", 1)[0].endswith(" bm25")


def test_a_retriever_that_contradicts_the_index_is_refused(ws, tmp_path, capsys) -> None:
    assert search(ws, tmp_path / "x.trec", "--retriever", "bm25", "--index",
                  str(ws["root"] / "dense")) == 2
    assert "is a dense index; the 'bm25' retriever cannot search it" in capsys.readouterr().err
    assert not (tmp_path / "x.trec").exists()


def test_a_faiss_index_without_our_metadata_says_to_name_the_retriever(ws, tmp_path,
                                                                       capsys) -> None:
    assert search(ws, tmp_path / "x.trec", "--index", str(ws["root"] / "pyserini-dense")) == 2
    err = capsys.readouterr().err
    assert "looks like a Faiss index" in err and "--retriever dense --encoder" in err


def test_what_the_metadata_records(tmp_path) -> None:
    assert recorded_retriever(["no-such-folder"]) == "bm25"  # a Pyserini prebuilt index name
    assert recorded_retriever(["a", "b"]) == "fused"  # several indexes of one model
    for kind in ("dense", "impact", "multivector", "bm25"):
        (tmp_path / kind).mkdir()
        write_meta(tmp_path / kind, kind)
        assert recorded_retriever([str(tmp_path / kind)]) == kind
    (tmp_path / "shard").mkdir()
    write_meta(tmp_path / "shard", "impact-shard")
    with pytest.raises(ValueError, match="shard.*pyserini_moe.merge"):
        recorded_retriever([str(tmp_path / "shard")])


def test_max_length_is_pyserinis_name_for_query_max_length() -> None:
    parser = search_cli.build_parser()
    base = ["--index", "i", "--topics", "t", "--output", "o"]
    assert parser.parse_args([*base, "--max-length", "32"]).query_max_length == 32
    assert parser.parse_args([*base, "--query-max-length", "32"]).query_max_length == 32
    assert parser.parse_args(base).retriever is None


def test_a_dense_metadata_without_encoder_is_one_error_line(ws, tmp_path, capsys) -> None:
    """Found without --retriever, a dense index whose metadata lost its encoder (damaged) says
    so instead of a KeyError traceback."""
    fake = tmp_path / "dense-index"
    fake.mkdir()
    write_meta(fake, "dense")
    assert search(ws, tmp_path / "x.trec", "--index", str(fake)) == 2
    assert "records no encoder" in capsys.readouterr().err
