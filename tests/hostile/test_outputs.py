"""Outputs that would destroy something (issue 39): a device node or symbolic link at the output
path was replaced by a regular file, and an output inside an input folder (``--output
<index>/docid``) overwrote part of that input. Each is now one error line, exit 2, with the node,
the link's target and the input untouched."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from pyserini_moe.cli import convert, encode_queries, fuse, run_main
from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import search as search_cli
from pyserini_moe.errors import UserError
from pyserini_moe.io import atomic_path


@pytest.fixture(scope="module")
def ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    """A model, its dense index over the tiny corpus, a run and its qrels."""
    return model_index_run(tmp_path_factory.mktemp("outputs"))


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


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


def test_a_run_written_inside_the_index_it_searches_is_refused(ws, capsys) -> None:
    before = snapshot(ws["index"])
    code = run_main(search_cli.main, ["--retriever", "dense", "--index", str(ws["index"]),
                                      "--topics", f"{ws['corpus']}:test", "--output",
                                      str(ws["index"] / "docid"), "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1] == (f"error: {ws['index'] / 'docid'} is inside the input "
                                     f"{ws['index']} of this command: writing it would replace "
                                     "what is being read; name another output")
    assert snapshot(ws["index"]) == before


def test_outputs_inside_index_model_and_collection_folders_are_refused(ws, capsys) -> None:
    kept = {name: snapshot(ws[name]) for name in ("index", "model", "corpus")}
    cases = [
        (encode_queries.main, ["--index", str(ws["index"]), "--topics", f"{ws['corpus']}:test",
                               "--output", str(ws["index"] / "queries"), "--overwrite"]),
        (encode_queries.main, ["--index", str(ws["index"]), "--topics", f"{ws['corpus']}:test",
                               "--encoder", str(ws["model"]), "--output",
                               str(ws["model"] / "config.json"), "--overwrite"]),
        # the collection of ``FOLDER:SPLIT`` is an input folder too
        (convert.main, ["--topics", f"{ws['corpus']}:test", "--output",
                        str(ws["corpus"] / "queries.jsonl"), "--overwrite"]),
    ]
    for main, argv in cases:
        assert run_main(main, argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: ") and "is inside the input" in err[-1], err
    assert {name: snapshot(ws[name]) for name in kept} == kept


@pytest.fixture
def read_only(tmp_path, monkeypatch) -> Path:
    """A folder made read-only (chmod 0o500). The tests run as root, whom the kernel lets write
    there anyway: ``os.access`` answers for that folder as for any other user."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    real = os.access

    def access(path, mode, **kwargs) -> bool:
        if Path(path).absolute() == folder and mode & os.W_OK:
            return bool(os.stat(folder).st_mode & stat.S_IWUSR)
        return real(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)
    yield folder
    folder.chmod(0o700)


def test_an_output_in_a_read_only_folder_is_refused_before_any_work(ws, read_only,
                                                                    capsys) -> None:
    """Issue 39: a read-only output folder was found only when the whole search was done."""
    cases = [
        (eval_cli.main, ["--run", str(ws["root"] / "run.trec"), "--qrels",
                         str(ws["root"] / "qrels.txt"), "--output", str(read_only / "m.json")]),
        (fuse.main, ["--runs", str(ws["root"] / "run.trec"), str(ws["root"] / "run.trec"),
                     "--method", "rrf", "--output", str(read_only / "sub" / "f.trec")]),
        (search_cli.main, ["--retriever", "dense", "--index", str(ws["index"]), "--topics",
                           f"{ws['corpus']}:test", "--output", str(read_only / "run.trec"),
                           "--device", "cpu", "--quiet"]),
    ]
    for main, argv in cases:
        out = argv[argv.index("--output") + 1]
        assert run_main(main, argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: {out}: the folder {read_only} cannot be written by this user; "
                       "name another output or make the folder writable"]
    assert list(read_only.iterdir()) == []
