"""Layers one way: the model layer knows torch and transformers only, never Pyserini, the JVM or
the retrieval and command layers above it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pyserini_moe"
ABOVE_MODELING = ("pyserini", "jnius", "pyserini_moe.encode", "pyserini_moe.index",
                  "pyserini_moe.search", "pyserini_moe.eval", "pyserini_moe._java",
                  "pyserini_moe.cli")


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_modeling_imports_nothing_above_it() -> None:
    bad = {f"{path.name}: {name}" for path in (PACKAGE / "modeling").glob("*.py")
           for name in imported(path)
           if any(name == m or name.startswith(m + ".") for m in ABOVE_MODELING)}
    assert not bad, sorted(bad)


def test_one_vocabulary_for_representations_and_index_kinds() -> None:
    from pyserini_moe.representation import INDEX_KINDS, Representation

    assert [r.index_kind for r in Representation] == list(INDEX_KINDS)
    assert all(Representation.of_index_kind(r.index_kind) is r for r in Representation)
    assert INDEX_KINDS == ("dense", "impact", "multivector")  # the names indexes record


def test_model_and_index_folders_have_distinct_metadata_files() -> None:
    from pyserini_moe.index.meta import META_FILE
    from pyserini_moe.modeling.auto import INDEX_MARKER
    from pyserini_moe.modeling.base import MODEL_FILE

    assert INDEX_MARKER == META_FILE != MODEL_FILE
