"""The atomic writer never loses data: no directory replaced by a file, no second writer's
output silently replaced, and outputs get ordinary permissions."""

from __future__ import annotations

import argparse
import os

import pytest

from pyserini_moe.cli import output_file, run_main
from pyserini_moe.io import atomic_path


def test_file_output_naming_a_directory_is_refused_and_the_directory_kept(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "keep.trec").write_text("precious\n")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        with atomic_path(folder) as tmp:
            tmp.write_text("run\n")
    assert (folder / "keep.trec").read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no temporary left


def test_directory_appearing_while_writing_is_not_replaced(tmp_path):
    target = tmp_path / "run.trec"
    with pytest.raises(IsADirectoryError):
        with atomic_path(target) as tmp:
            tmp.write_text("run\n")
            target.mkdir()
            (target / "keep").write_text("x")
    assert (target / "keep").read_text() == "x"


def test_directory_output_naming_a_file_is_refused(tmp_path):
    target = tmp_path / "index"
    target.write_text("not a folder")
    with pytest.raises(FileExistsError, match="is a file"):
        with atomic_path(target, directory=True):
            pass
    assert target.read_text() == "not a folder"


def test_second_writer_without_overwrite_is_refused_at_rename(tmp_path):
    target = tmp_path / "index"
    with pytest.raises(FileExistsError, match="already exists"):
        with atomic_path(target, directory=True, overwrite=False) as first:
            (first / "a").write_text("first")
            with atomic_path(target, directory=True, overwrite=False) as second:
                (second / "b").write_text("second")
            # the second writer finished first and owns the folder now
    assert [p.name for p in target.iterdir()] == ["b"]
    assert [p.name for p in tmp_path.iterdir()] == ["index"]


def test_outputs_get_umask_permissions_not_the_temporary_ones(tmp_path):
    old = os.umask(0o022)
    try:
        with atomic_path(tmp_path / "f.txt") as tmp:
            tmp.write_text("x")
        with atomic_path(tmp_path / "d", directory=True) as tmp:
            (tmp / "x").write_text("x")
    finally:
        os.umask(old)
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755


def test_files_saved_through_a_writers_own_temporary_get_umask_permissions(tmp_path):
    """Issue 39: model.safetensors came out 0600. safetensors' save_file writes a temporary of
    its own and renames it over the path it is given, so the chmod of the temporary before the
    block was lost."""
    import torch
    from safetensors.torch import save_file

    old = os.umask(0o022)
    try:
        with atomic_path(tmp_path / "model", directory=True) as tmp:
            (tmp / "sub").mkdir(mode=0o700)
            save_file({"w": torch.zeros(2)}, str(tmp / "sub" / "model.safetensors"))
        with atomic_path(tmp_path / "w.safetensors") as tmp:
            save_file({"w": torch.zeros(2)}, str(tmp))
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777
             for p in tmp_path.rglob("*")}
    assert modes == {"model": 0o755, "model/sub": 0o755, "model/sub/model.safetensors": 0o644,
                     "w.safetensors": 0o644}


def test_index_arrays_holding_objects_are_refused_and_damaged_ones_said(tmp_path):
    """Issue 39: a pickle or object array in an index's .npy ended in numpy's traceback, whose
    advice (allow_pickle=True) would run it."""
    import pickle

    import numpy as np

    from pyserini_moe.errors import UserError
    from pyserini_moe.io import load_array

    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object))
    (tmp_path / "pickle.npy").write_bytes(pickle.dumps({"a": 1}))
    (tmp_path / "zeros.npy").write_bytes(b"\0" * 64)
    np.save(tmp_path / "good.npy", np.arange(100))
    (tmp_path / "short.npy").write_bytes((tmp_path / "good.npy").read_bytes()[:200])
    for name in ("objects", "pickle"):
        for mmap_mode in (None, "r"):
            with pytest.raises(UserError) as info:
                load_array(tmp_path / f"{name}.npy", mmap_mode)
            assert str(info.value) == (f"{tmp_path / name}.npy: not loaded: it holds code or "
                                       "objects a safe load refuses; rebuild the index")
    with pytest.raises(UserError, match=r"zeros.npy: the index file is damaged \(not a NumPy"):
        load_array(tmp_path / "zeros.npy")
    with pytest.raises(UserError, match="short.npy: the index file is damaged"):
        load_array(tmp_path / "short.npy", "r")
    assert load_array(tmp_path / "good.npy", "r").sum() == 4950


def test_output_file_argument_type(tmp_path):
    assert output_file(str(tmp_path / "new.trec")) == str(tmp_path / "new.trec")
    with pytest.raises(argparse.ArgumentTypeError, match="is a directory"):
        output_file(str(tmp_path))


def test_run_main_reports_a_directory_error_in_one_line(capsys):
    def main(argv):
        raise IsADirectoryError("runs is a directory: name a file to write")
    assert run_main(main, []) == 2
    assert capsys.readouterr().err == "error: runs is a directory: name a file to write\n"


def test_run_main_reports_user_errors_and_keeps_the_traceback_of_bugs(capsys):
    from pyserini_moe.errors import DataFormatError, UserError

    def user(argv):
        raise DataFormatError("qrels.tsv", "expected 3 columns", line=4)

    assert run_main(user, []) == 2 and issubclass(DataFormatError, UserError)
    assert capsys.readouterr().err == "error: qrels.tsv:4: expected 3 columns\n"

    def bug(argv):
        return {}["missing"]  # a KeyError from a bug is no user error

    with pytest.raises(KeyError):
        run_main(bug, [])


def test_leftovers_of_a_killed_writer_are_swept_and_a_live_writers_kept(tmp_path):
    """SIGKILL runs no cleanup: the next write of the same target removes temporaries named with
    a process id that no longer runs, never those of a running writer."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale_dir = tmp_path / f".index.tmp-{dead}-abc123"
    stale_dir.mkdir()
    (stale_dir / "vectors").write_text("half")
    stale_old = tmp_path / f".index.old-{dead}"
    stale_old.mkdir()
    live = tmp_path / f".index.tmp-{os.getpid()}-zzz"
    live.mkdir()
    other = tmp_path / f".other.tmp-{dead}-abc"  # another target's: not ours to sweep
    other.mkdir()
    with atomic_path(tmp_path / "index", directory=True) as tmp:
        assert tmp.name.startswith(f".index.tmp-{os.getpid()}-")
        (tmp / "done").write_text("x")
    assert not stale_dir.exists() and not stale_old.exists()
    assert live.exists() and other.exists()
    assert (tmp_path / "index" / "done").is_file()


def test_a_killed_writers_leftover_inside_an_output_is_part_of_it(tmp_path):
    """The trainer writes best/ and last/ through atomic_path inside its output: the temporary
    a killed training left there (``.best.tmp-PID-x``) made the whole training folder "foreign"
    to ``--overwrite``; a leftover of a name the output never writes still is."""
    from pyserini_moe.outputs import refuse_foreign_folder

    run = tmp_path / "run"
    (run / ".best.tmp-123-abc").mkdir(parents=True)
    (run / ".last.old-123").mkdir()
    (run / "recipe.yaml").write_text("x")
    refuse_foreign_folder(run)
    (run / ".notes.tmp-123-abc").write_text("mine")
    with pytest.raises(FileExistsError, match=r"\(e\.g\. \.notes\.tmp-123-abc\)"):
        refuse_foreign_folder(run)
