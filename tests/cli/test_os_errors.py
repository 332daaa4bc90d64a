"""The operating system's refusals (no space, read-only, quota, an I/O error), wherever a
command meets them, are one ``error:`` line naming the path and what to do, exit 2: whether
Python raised them (``OSError``) or a library reported them as its own error (Faiss's and
PyTorch's RuntimeError on a failed write)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pyserini_moe.cli import run_main
from pyserini_moe.errors import library_write, os_error_line


@pytest.mark.parametrize("code,words", [(errno.ENOSPC, "no space left"),
                                        (errno.EROFS, "read-only"),
                                        (errno.EDQUOT, "quota"),
                                        (errno.EIO, "input/output error")])
def test_an_os_error_in_any_command_is_one_line(code, words, capsys) -> None:
    def main(argv):
        raise OSError(code, os.strerror(code), "/data/out/run.trec")

    assert run_main(main, []) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: /data/out/run.trec: ") and words in err


def test_a_library_write_error_naming_its_errno_becomes_that_os_error(tmp_path) -> None:
    target = tmp_path / "index"
    with pytest.raises(OSError) as caught, library_write(target):
        raise RuntimeError(f"Error: 'ret == (n)' failed: write error in {target}: "
                           "28 (No space left on device)")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert os_error_line(caught.value) == f"{target}: no space left on the device: free some, " \
                                          "or write elsewhere"


def test_a_library_write_error_naming_none_is_read_from_the_file_system(tmp_path,
                                                                       monkeypatch) -> None:
    """PyTorch says only "file write failed": the destination's file system tells why."""

    class Full:
        f_flag = 0
        f_bavail = 0

    monkeypatch.setattr(os, "statvfs", lambda path: Full())
    with pytest.raises(OSError) as caught, library_write(tmp_path / "checkpoint" / "state.pt"):
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
    assert caught.value.errno == errno.ENOSPC

    class ReadOnly:
        f_flag = os.ST_RDONLY
        f_bavail = 10

    monkeypatch.setattr(os, "statvfs", lambda path: ReadOnly())
    with pytest.raises(OSError) as caught, library_write(tmp_path / "x"):
        raise RuntimeError("file write failed")
    assert caught.value.errno == errno.EROFS


def test_other_library_errors_pass_unchanged(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="shape mismatch"), library_write(tmp_path / "x"):
        raise RuntimeError("shape mismatch")


def test_a_full_disk_under_the_dense_index_build_is_one_line(tiny_bert, tiny_corpus, tmp_path,
                                                              monkeypatch, capsys) -> None:
    """Faiss's write of a dense index on a full disk: one line, no index left behind."""
    import faiss

    from pyserini_moe.index.__main__ import main as index_main

    def full(index, path):
        raise RuntimeError(f"Error: 'ret == (n)' failed: write error in {path}: 28 (No space "
                           "left on device)")

    monkeypatch.setattr(faiss, "write_index", full)
    out = tmp_path / "dense"
    code = run_main(index_main, ["--retriever", "dense", "--corpus", str(tiny_corpus),
                                 "--encoder", str(tiny_bert), "--index", str(out), "--device",
                                 "cpu", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"{out}" in err and "no space left on the device" in err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_writing_a_run_into_a_full_device_is_one_line(tmp_path, capsys) -> None:
    """A real ENOSPC from the kernel: /dev/full refuses every write."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")

    def main(argv):
        with open("/dev/full", "w") as f:
            f.write("q1 Q0 d1 1 1.0 run\n" * 1000)
            f.flush()
        return 0

    assert run_main(main, []) == 2
    err = capsys.readouterr().err
    assert "no space left on the device" in err and err.count("\n") == 1
