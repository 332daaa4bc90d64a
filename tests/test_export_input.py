"""Unusual input to the ``export`` command (:mod:`pyserini_moe.export`,
:mod:`pyserini_moe.cli.export`): ``--overwrite`` replaces only an earlier export, a failed
export keeps the old one, and the model is never written over."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pyserini_moe.cli import export, run_main
from pyserini_moe.cli import export as export_cli
from tests.helpers import err_no_warning, folder_files, refused

pytestmark = pytest.mark.usefixtures("one_thread")


# --- export --overwrite ---------------------------------------------------------------------------


def _folders(root: Path, ws: dict[str, Path]) -> dict[str, Path]:
    """A folder of user files, a copy of a model and one of an index: none is an export."""
    user = root / "user"
    (user / "sub").mkdir(parents=True)
    (user / "notes.txt").write_text("keep")
    (user / "sub" / "y").write_text("keep")
    return {"user": user, "model": Path(shutil.copytree(ws["model"], root / "model")),
            "index": Path(shutil.copytree(ws["index"], root / "index"))}


def test_export_overwrite_replaces_no_folder_but_an_export(ws, tmp_path, capsys) -> None:
    for name, folder in _folders(tmp_path, ws).items():
        before = folder_files(folder)
        code = run_main(export_cli.main, ["--encoder", str(ws["model"]), "--output", str(folder),
                                          "--overwrite"])
        said = {"user": "holds files this toolkit did not write (e.g. notes.txt)",
                "model": "is a model, not an ONNX export", "index": "is an index, not an ONNX "
                "export"}[name]
        assert code == 2 and said in err_no_warning(capsys), name
        assert folder_files(folder) == before, name


def _fake_export(folder: Path) -> Path:
    folder.mkdir()
    (folder / "pyserini_moe_onnx.json").write_text("{}")
    (folder / "query-dense.onnx").write_bytes(b"old graph")
    return folder


@pytest.mark.parametrize("encoder", ["corpus", "export"])
def test_a_failed_export_keeps_the_old_output(ws, tmp_path, capsys, encoder) -> None:
    output = _fake_export(tmp_path / "out")
    source = ws["corpus"] if encoder == "corpus" else _fake_export(tmp_path / "other-export")
    before = folder_files(output)
    code = run_main(export_cli.main, ["--encoder", str(source), "--output", str(output),
                                      "--overwrite"])
    assert code == 2 and err_no_warning(capsys).startswith("error: ")
    assert folder_files(output) == before


def test_export_overwrite_replaces_an_export_whole(ws, tmp_path) -> None:
    output = _fake_export(tmp_path / "out")
    (output / "query-sparse.onnx").write_bytes(b"a graph the new export does not write")
    (output / "vocab.txt").write_text("[PAD]\n")
    assert export_cli.main(["--encoder", str(ws["model"]), "--output", str(output),
                            "--overwrite"]) == 0
    assert json.loads((output / "pyserini_moe_onnx.json").read_text())["source"] == \
        str(ws["model"])
    assert not (output / "query-sparse.onnx").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary left beside it


@pytest.mark.parametrize("extra", ["notes.txt", "sub/data.bin"])
def test_export_overwrite_keeps_an_export_holding_user_files(ws, tmp_path, capsys,
                                                             extra) -> None:
    output = _fake_export(tmp_path / "out")
    (output / extra).parent.mkdir(exist_ok=True)
    (output / extra).write_text("the user's")
    before = folder_files(output)
    code = run_main(export_cli.main, ["--encoder", str(ws["model"]), "--output", str(output),
                                      "--overwrite"])
    shown = extra.split("/")[0] + ("/" if "/" in extra else "")
    assert code == 2 and f"holds files this toolkit did not write (e.g. {shown})" in err_no_warning(capsys)
    assert folder_files(output) == before


def test_an_export_over_its_model_and_a_folder_holding_it_are_refused(bm25_ws, capsys) -> None:
    refused(export.main, ["--encoder", str(bm25_ws["model"]), "--output", str(bm25_ws["model"]),
                          "--overwrite"], "is also an input", capsys, bm25_ws["model"])
    refused(export.main, ["--encoder", str(bm25_ws["model"]), "--output", str(bm25_ws["root"]),
                          "--overwrite"], "holds the input", capsys, bm25_ws["model"])
