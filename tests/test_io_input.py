"""Safe outputs (:mod:`pyserini_moe.io`): device nodes and symbolic links are never replaced,
a failed write keeps the folders that were there, ``--overwrite`` replaces only a folder
of the toolkit's own files, and YAML that is gzipped or not UTF-8 is named as such."""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
from pathlib import Path

import pytest

from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import run_main
from pyserini_moe.errors import UserError
from pyserini_moe.io import atomic_path, read_yaml
from pyserini_moe.outputs import refuse_foreign_folder

pytestmark = pytest.mark.usefixtures("one_thread")


def special_node(folder: Path) -> tuple[Path, str]:
    """A character device like /dev/null (the tests run as root), else a FIFO."""
    node = folder / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return node, "a character device"
    except (OSError, AttributeError):
        pass
    try:
        os.mkfifo(node)
        return node, "a named pipe (FIFO)"
    except (OSError, AttributeError):
        pytest.skip("neither a device node nor a FIFO can be made here")


def _eval_to(ws: dict[str, Path], output: Path, capsys) -> str:
    code = run_main(eval_cli.main, ["--run", str(ws["root"] / "run.trec"), "--qrels",
                                    str(ws["root"] / "qrels.txt"), "--output", str(output)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_a_device_node_as_output_is_refused_and_kept(ws, tmp_path, capsys) -> None:
    node, kind = special_node(tmp_path)
    mode = os.lstat(node).st_mode
    assert _eval_to(ws, node, capsys) == (f"error: {node} is {kind}: an output replaces only a "
                                          "regular file or folder; name another path")
    assert os.lstat(node).st_mode == mode  # still the node, not a run file
    with pytest.raises(UserError, match=re.escape(kind)), atomic_path(node) as tmp:
        tmp.write_text("{}")
    assert os.lstat(node).st_mode == mode and sorted(tmp_path.iterdir()) == [node]


def test_a_symlink_as_output_is_refused_and_its_target_unchanged(ws, tmp_path, capsys) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "metrics.json"
    target.write_text("precious\n")
    link = tmp_path / "metrics.json"
    link.symlink_to(target)
    assert "metrics.json is a symbolic link" in _eval_to(ws, link, capsys)
    for directory in (False, True):
        with pytest.raises(UserError, match="is a symbolic link"), \
                atomic_path(link, directory=directory) as tmp:
            (tmp / "x" if directory else tmp).write_text("{}")
    assert link.is_symlink() and target.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "metrics.json"]


def test_a_failed_write_keeps_folders_that_were_there(tmp_path: Path) -> None:
    from pyserini_moe.io import atomic_path

    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "kept" / "a" / "out.txt"):
        raise RuntimeError
    assert (tmp_path / "kept").is_dir() and not (tmp_path / "kept" / "a").exists()
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "kept" / "b" / "out.txt") as tmp:
        (tmp.parent / "other.txt").write_text("written beside it")  # not the writer's: kept
        raise RuntimeError
    assert (tmp_path / "kept" / "b" / "other.txt").is_file()


def test_a_gzipped_yaml_is_named_gzip(tmp_path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes(gzip.compress(b"output_dir: x\n", mtime=0))
    with pytest.raises(ValueError, match=r"recipe.yaml: gzip-compressed: gunzip the recipe$"):
        read_yaml(recipe, "recipe", ValueError)


@pytest.mark.parametrize(("text", "words"), [
    ("model: a\nmodel: b\n", "line 2, column 1: the key 'model' is written twice in one mapping"),
    ("model: [a\n", "line 2, column 1: expected ',' or ']', but got '<stream end>' (while "
                    "parsing a flow sequence at line 1)")])
def test_bad_yaml_is_one_line_saying_where(tmp_path, text, words) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(text)
    with pytest.raises(UserError) as refused:
        read_yaml(recipe, "recipe", UserError)
    assert str(refused.value) == f"{recipe}: not valid YAML: {words}"


def test_a_recipe_in_another_encoding_is_one_line(tmp_path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes("# caf\u00e9\noutput_dir: x\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"recipe.yaml: not UTF-8 text \(byte 5\)"):
        read_yaml(recipe, "recipe", UserError)


def test_lucenes_own_file_names_are_an_indexs(tmp_path) -> None:
    """The names of a Lucene 9 impact index (as Anserini writes them) stay the index's own."""
    folder = tmp_path / "lucene"
    folder.mkdir()
    names = ["pyserini_moe_index.json", "segments_1", "write.lock", "_0.cfs", "_0.cfe", "_0.si",
             "_0.fdm", "_0.fdt", "_0.fdx", "_0.fnm", "_0.nvd", "_0.nvm", "_0.tvd", "_0.tvm",
             "_0.tvx", "_0_1.liv", "_a.kdd", "_0_Lucene90_0.dvd", "_0_Lucene90_0.dvm",
             "_0_Lucene99_0.doc", "_0_Lucene99_0.pos", "_0_Lucene99_0.tim", "_0_Lucene99_0.tip",
             "_0_Lucene99_0.tmd"]
    for name in names:
        (folder / name).write_text("")
    refuse_foreign_folder(folder, "pyserini_moe_index.json")


# --- a sub-folder is judged by what it holds ------------------------------------------------------


def test_an_impact_indexs_own_doc_vectors_are_its_own(tmp_path) -> None:
    folder = tmp_path / "impact"
    (folder / "doc_vectors").mkdir(parents=True)
    for name in ("pyserini_moe_index.json", "_0.si", "segments_1", "doc_vectors/docids.txt",
                 "doc_vectors/vocab.json", "doc_vectors/indptr.i64", "doc_vectors/terms.i32",
                 "doc_vectors/weights.i32"):
        (folder / name).write_text("")
    refuse_foreign_folder(folder, "pyserini_moe_index.json")
    (folder / "doc_vectors" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"\(e\.g\. doc_vectors/notes\.txt\)"):
        refuse_foreign_folder(folder, "pyserini_moe_index.json")


# --- index --overwrite judged a dense index by every kind's files ---------------------------------


@pytest.mark.parametrize("user_files", [["vectors.npy", "docids.txt"], ["vectors.jsonl"],
                                        ["offsets.npy"]])
def test_a_dense_index_holds_only_a_dense_indexs_files(ws, tmp_path, user_files) -> None:
    from pyserini_moe.outputs import refuse_foreign_folder

    index = tmp_path / "dense"
    index.mkdir()
    for path in ws["index"].iterdir():
        (index / path.name).write_bytes(path.read_bytes())
    refuse_foreign_folder(index, "pyserini_moe_index.json")  # its own files: replaceable
    for name in user_files:
        (index / name).write_text("the user's")
    with pytest.raises(FileExistsError, match=f"holds files this toolkit did not write \\(e.g. "
                                              f"{sorted(user_files)[0]}\\)"):
        refuse_foreign_folder(index, "pyserini_moe_index.json")


def test_an_index_of_unreadable_kind_may_hold_any_index_kinds_files(tmp_path) -> None:
    from pyserini_moe.outputs import refuse_foreign_folder

    index = tmp_path / "old"
    index.mkdir()
    (index / "pyserini_moe_index.json").write_text("not json")
    for name in ("docid", "index", "vectors.npy", "segments_1"):
        (index / name).write_text("x")
    refuse_foreign_folder(index, "pyserini_moe_index.json")


# --- a folder of an index and encoded queries is refused for that reason --------------------------


def test_a_folder_of_two_kinds_of_output_is_named_as_such(ws, tmp_path) -> None:
    from pyserini_moe.outputs import refuse_foreign_folder

    index = tmp_path / "mixed"
    index.mkdir()
    for path in ws["index"].iterdir():
        (index / path.name).write_bytes(path.read_bytes())
    (index / "embedding.pkl").write_bytes(b"x")
    for marker in ("embedding.pkl", "pyserini_moe_index.json", None):
        with pytest.raises(FileExistsError, match=f"^{index} holds an index and encoded queries "
                                                  "together: --overwrite replaces a folder of "
                                                  "one kind of output only"):
            refuse_foreign_folder(index, marker)


# --- an ONNX export holds what its record says it wrote -------------------------------------------


def test_an_export_holds_only_the_files_it_records(tmp_path) -> None:
    from pyserini_moe.outputs import refuse_foreign_folder

    export = tmp_path / "export"
    export.mkdir()
    written = ["passage-dense.onnx", "query-dense.onnx", "tokenizer.json", "vocab.txt"]
    for name in written:
        (export / name).write_text("x")
    (export / "pyserini_moe_onnx.json").write_text(json.dumps(
        {"written": [*written, "pyserini_moe_onnx.json"]}))
    refuse_foreign_folder(export, "pyserini_moe_onnx.json")
    for name in ("notes.onnx", "merges.txt"):  # a graph and a BPE file the export never wrote
        (export / name).write_text("the user's")
        with pytest.raises(FileExistsError, match=f"did not write \\(e.g. {name}\\)"):
            refuse_foreign_folder(export, "pyserini_moe_onnx.json")
        (export / name).unlink()
    # an export from before the record: its graphs by the names it records
    (export / "pyserini_moe_onnx.json").write_text(json.dumps(
        {"files": {"query/dense": "query-dense.onnx", "passage/dense": "passage-dense.onnx"}}))
    (export / "merges.txt").write_text("x")
    refuse_foreign_folder(export, "pyserini_moe_onnx.json")
    (export / "my-distilled.onnx").write_text("the user's")
    with pytest.raises(FileExistsError, match="did not write \\(e.g. my-distilled.onnx\\)"):
        refuse_foreign_folder(export, "pyserini_moe_onnx.json")
