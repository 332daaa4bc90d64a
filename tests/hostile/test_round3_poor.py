"""Third hostile pass (work/hostile3/report.md), "poor" cases: an edited index kind blames the
metadata, an output under a file says so, a missing topics file with a colon, a mistyped index
folder and an unreachable prebuilt index are one plain line each, Pyserini's query-encoder flags
on search and its fusion flags on fuse are understood."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyserini_moe.cli import fuse as fuse_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.index.meta import META_FILE
from pyserini_moe.runs import read_trec_run

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    return model_index_run(tmp_path_factory.mktemp("round3poor"))


def _err(capsys) -> str:
    """stderr, which must be one ``error:`` line and no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def _search(ws: dict[str, Path], tmp_path: Path, *extra: str, index: str | None = None) -> int:
    defaults = {"--topics": f"{ws['corpus']}:test", "--output": str(tmp_path / "run.trec")}
    argv = [arg for flag, value in defaults.items() if flag not in extra for arg in (flag, value)]
    return run_main(search_cli.main, ["--index", index or str(ws["index"]), *argv, "--device",
                                      "cpu", "--quiet", *extra])


def test_an_edited_index_kind_blames_the_metadata(ws, tmp_path, capsys) -> None:  # H62
    edited = tmp_path / "dense"
    edited.mkdir()
    for f in ws["index"].iterdir():
        (edited / f.name).write_bytes(f.read_bytes())
    meta = json.loads((edited / META_FILE).read_text())
    (edited / META_FILE).write_text(json.dumps({**meta, "kind": "multivector"}))
    err = _err(capsys) if _search(ws, tmp_path, index=str(edited)) == 2 else ""
    assert f"index metadata ({META_FILE}) says kind 'multivector'" in err
    assert "holds a dense index" in err and "produces" not in err


def test_an_output_under_a_file_says_the_parent_is_a_file(ws, tmp_path, capsys) -> None:  # H66
    (tmp_path / "runA.trec").write_text("q0 Q0 d0 1 3.0 t\n")
    code = _search(ws, tmp_path, "--output", str(tmp_path / "runA.trec" / "x.trec"))
    err = _err(capsys)
    assert code == 2 and f"{tmp_path / 'runA.trec'} is a file, not a folder" in err
    assert "cannot be written by this user" not in err


@pytest.mark.parametrize("name", ["topics:v2.tsv", "topics.tsv:v2", "sub/topics:v2"])
def test_a_missing_topics_file_with_a_colon_is_not_found(ws, tmp_path, capsys, name) -> None:
    # H76
    code = _search(ws, tmp_path, "--topics", str(tmp_path / name))
    err = _err(capsys)
    assert code == 2 and f"topics file not found: {tmp_path / name}" in err
    assert "unknown collection" not in err


def test_a_mistyped_index_folder_is_not_found(ws, tmp_path, capsys) -> None:  # H79
    for index in (str(tmp_path / "no-such-index"), "./no-such-index"):
        code = _search(ws, tmp_path, index=index)
        out, err = capsys.readouterr()
        assert code == 2 and err == f"error: index folder not found: {index}\n"
        assert "Unrecognized" not in out


def test_an_unreachable_prebuilt_index_says_so(ws, tmp_path, capsys, monkeypatch) -> None:  # H78
    from pyserini.search.lucene import _searcher  # noqa: PLC0415

    def offline(name: str, **_: object) -> str:
        raise ValueError("Unable to download prebuilt index at any known URLs.")

    monkeypatch.setattr(_searcher, "download_prebuilt_index", offline)
    name = "beir-v1.0.0-nfcorpus.flat"
    code = _search(ws, tmp_path, index=name)
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1
    assert err.startswith(f"error: {name} is a Pyserini prebuilt index that could not be "
                          "downloaded (Unable to download")
    assert "neither" not in err and not out.strip()


@pytest.mark.parametrize("flags", [["--pooling", "mean", "--l2-norm"], ["--query-prefix", "q: "],
                                   ["--encoder-class", "auto"]])
def test_pyserini_query_encoder_flags_say_the_index_records_them(ws, tmp_path, capsys,
                                                                 flags) -> None:  # H85
    code = _search(ws, tmp_path, *flags)
    err = _err(capsys)
    assert code == 2 and "unrecognized" not in err and "come from the index" in err
    assert all(f in err for f in flags if f.startswith("--"))
    assert not (tmp_path / "run.trec").exists()


def test_fuse_takes_pyserini_fusion_flags(tmp_path, capsys) -> None:  # H49
    a, b = tmp_path / "a.trec", tmp_path / "b.trec"
    a.write_text("q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\nq1 Q0 d3 3 1.0 t\n")
    b.write_text("q1 Q0 d2 1 9.0 t\nq1 Q0 d3 2 8.0 t\n")
    out = tmp_path / "fused.trec"
    assert run_main(fuse_cli.main, ["--runs", str(a), str(b), "--rrf.k", "10", "--k", "2",
                                    "--depth", "1", "--runtag", "mine", "--output",
                                    str(out)]) == 0  # no --method: rrf, as Pyserini's fusion
    # depth 1: d1 (a's first) and d2 (b's first) only, each 1 / (10 + 1)
    assert read_trec_run(out) == {"q1": pytest.approx({"d1": 1 / 11, "d2": 1 / 11})}
    assert {line.split()[-1] for line in out.read_text().splitlines()} == {"mine"}
    capsys.readouterr()
    code = run_main(fuse_cli.main, ["--runs", str(a), str(b), "--run-tag", "two words",
                                    "--output", str(tmp_path / "t.trec")])
    assert code == 2 and "the last column of a TREC run is one word" in _err(capsys)
    assert not (tmp_path / "t.trec").exists()
