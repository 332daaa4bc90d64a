"""A termination signal (:mod:`pyserini_moe.errors`) that a finaliser swallowed is still
honoured before an output is committed."""

from __future__ import annotations

import pytest

from pyserini_moe.cli import run_main


def test_a_sigterm_a_finaliser_swallowed_is_honoured_before_an_output_is_committed(
        tmp_path, monkeypatch, capsys) -> None:
    """make test under load: a SIGTERM landed in a ``__del__`` ("Exception ignored in"), and
    the index build ran on to write its index and exit 0."""
    from pyserini_moe import errors
    from pyserini_moe.io import atomic_path

    monkeypatch.setattr(errors, "_received", [])
    errors.note_termination("SIGTERM")  # as the handler does before its exception is lost
    with pytest.raises(errors.Terminated), atomic_path(tmp_path / "out.txt") as tmp:
        tmp.write_text("half")
    assert list(tmp_path.iterdir()) == []

    def finishes(argv):
        return 0
    assert run_main(finishes, []) == 143
    assert capsys.readouterr().err.strip() == "interrupted"
