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
    from pyserini_moe.modeling.folder import MODEL_FILE

    assert INDEX_MARKER == META_FILE != MODEL_FILE


def _package_graph() -> dict[str, set[str]]:
    """Edges between the package's parts (``modeling``, ``search``, ``io``, ...) from every import
    anywhere in a module, lazy ones and ``if __name__ == "__main__"`` blocks included; packages'
    ``__main__.py`` files are the command layer's doors and are left out."""
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__main__.py":
            continue
        rel = path.relative_to(PACKAGE).with_suffix("")
        part = rel.parts[0]
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = ([f"pyserini_moe.{a.name}" for a in node.names]
                         if node.module == "pyserini_moe" else [node.module])
            for name in names:
                bits = name.split(".")
                if bits[0] == "pyserini_moe" and len(bits) > 1 and bits[1] != part \
                        and not bits[1].startswith("__"):
                    edges.setdefault(part, set()).add(bits[1])
    return edges


# Thin ``python -m`` names kept at the package top (fuse, export, ...): each only calls cli.
SHIMS = {"fuse", "export", "pretrain", "regress", "encode_queries", "convert", "merge", "dpr",
         "sizes"}


def test_no_import_circle_between_packages() -> None:
    edges = _package_graph()
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(edges.get(node, ())):
            if nxt in path:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif len(path) < 12:
                visit(nxt, path + [nxt])

    for start in sorted(edges):
        visit(start, [start])
    assert not cycles, sorted(set(cycles))[:5]


def test_only_the_command_layer_imports_it() -> None:
    edges = _package_graph()
    users = {part for part, targets in edges.items() if "cli" in targets} - SHIMS - {"lab"}
    assert not users, users  # the lab's bench is `make bench`, a command of its own


def test_the_library_never_imports_the_lab() -> None:
    """The regression runner, the benchmark and the checkpoint study measure the library; only
    the command layer (and the lab itself) imports them, lazily or not."""
    edges = _package_graph()
    users = {part for part, targets in edges.items() if "lab" in targets} - {"cli", "lab"}
    assert not users, users
    assert "lab" in edges.get("cli", set())  # the walk sees the command layer's use of it


def _lab_files() -> list[Path]:
    return sorted([*(PACKAGE / "lab").rglob("*.py"), *(PACKAGE.parent / "lab").rglob("*.py")])


def test_the_lab_imports_the_library_by_its_public_names() -> None:
    """The lab (regression runner, bench, studies, GPU driver) imports a package's exported
    names (``from pyserini_moe.search import SearchSettings``), never a module inside it, so
    the library's modules stay free to move; top-level modules (``io``, ``runs``) are their
    own public names, and the command layer is the lab's door."""
    import importlib

    found = []
    for path in _lab_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""])
            for module in modules:
                parts = module.split(".")
                if parts[0] != "pyserini_moe" or len(parts) < 2 or parts[1] in ("lab", "cli"):
                    continue
                top = importlib.import_module(f"pyserini_moe.{parts[1]}")
                if not hasattr(top, "__path__"):
                    continue  # a top-level module: io, runs, errors, ...
                names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
                if len(parts) > 2 or any(n not in top.__all__ for n in names):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {module}")
    assert not found, found
    assert len(_lab_files()) > 20  # the walk sees the lab


def test_no_package_exports_the_name_of_one_of_its_modules() -> None:
    """``from pyserini_moe.search import hybrid`` would be the function or the module depending
    on what was imported before: an exported name is never a module's."""
    import importlib

    for init in sorted(PACKAGE.rglob("__init__.py")):
        package = importlib.import_module(
            ".".join(init.parent.relative_to(PACKAGE.parent).parts))
        modules = {p.stem for p in init.parent.glob("*.py")} | {
            p.name for p in init.parent.iterdir() if (p / "__init__.py").is_file()}
        assert not set(getattr(package, "__all__", ())) & modules, init
        for name in getattr(package, "__all__", ()):
            assert getattr(package, name) is not None, (init, name)


def test_every_door_is_thin() -> None:
    """A top-level ``python -m`` name imports its command and nothing else, so no library code
    hides behind a door (the code lives in cli/ and the library layers)."""
    for name in sorted(SHIMS):
        tree = ast.parse((PACKAGE / f"{name}.py").read_text())
        imported_modules = {node.module for node in ast.walk(tree)
                            if isinstance(node, ast.ImportFrom)}
        assert imported_modules == {"pyserini_moe.cli", f"pyserini_moe.cli.{name}"}, name


def test_commands_start_without_torch() -> None:
    """The command layer imports the library when a command runs (the library imports at the
    top): importing every other command leaves torch, transformers and the JVM unloaded, so
    ``--help`` answers at once."""
    import subprocess
    import sys

    commands = sorted(f"pyserini_moe.cli.{p.stem}" for p in (PACKAGE / "cli").glob("*.py")
                      if p.stem != "__init__") + ["pyserini_moe.cli"]
    code = ("import importlib, sys\n"
            f"for m in {commands!r}: importlib.import_module(m)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'torch', 'transformers', 'pyserini', 'jnius', 'ranx'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
