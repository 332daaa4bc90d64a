"""README.md says only what the repository holds: its command lines parse with each command's own
parser, its numbers are the regression rows they name, its per-paper table names models, recipes
and files that exist, and its links lead somewhere. Fast: no model is loaded, nothing is trained.
"""

from __future__ import annotations

import argparse
import ast
import glob
import importlib
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

NUMBER = re.compile(r"(?<![\d.])0\.\d{4}(?![\d])")
# A regression row quoted with its nDCG@10: `FILE:CONDITION` or `CONDITION` (a name only one file
# has), then the mean and, for a seeded row, its sd.
ROW_REF = re.compile(r"`(?:(?P<file>[\w-]+):)?(?P<cond>[^`\s:]+)`:?\s*(?P<value>0\.\d{4})"
                     r"(?:\s*±\s*(?P<sd>0\.\d{4}))?")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SEEDS = [42, 43, 44]


# --------------------------------------------------------------------------- README structure


def section(title: str) -> str:
    """The text under the ``## title`` heading, up to the next ``## `` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table in ``text``: rows of stripped cells, the header first, the rule
    dropped. A ``|`` inside backticks is not a cell border in these tables, so a plain split."""
    found, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def bash_lines(text: str) -> list[str]:
    """The lines of every ```bash block, backslash-continued lines joined."""
    lines = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S):
        lines += block.replace("\\\n", " ").splitlines()
    return lines


def command_lines(text: str) -> list[tuple[str, str, list[str]]]:
    """(line, command, argv) of every ``python -m pyserini_moe.<command>`` or ``pyserini-moe
    <command>`` line of the bash blocks; lines with placeholders (``...``) are left out."""
    commands = []
    for line in bash_lines(text):
        if "..." in line:
            continue
        words = shlex.split(line, comments=True)
        for i, word in enumerate(words[:-1]):
            if word == "-m" and words[i + 1].startswith("pyserini_moe."):
                commands.append((line.strip(), words[i + 1], words[i + 2:]))
                break
            if Path(word).name == "pyserini-moe" and i == 0:
                from pyserini_moe.cli.main import COMMANDS

                assert words[1] in COMMANDS, f"unknown pyserini-moe command in: {line}"
                commands.append((line.strip(), f"pyserini_moe.cli.{COMMANDS[words[1]][0]}",
                                 words[2:]))
                break
    return commands


# --------------------------------------------------------------------------- (a) command lines


def command_module(command: str) -> str:
    """The module whose ``main`` ``python -m <command>`` runs: what its ``__main__.py`` (a
    package) or the module itself imports ``main`` from."""
    if command.startswith("pyserini_moe.cli."):
        return command
    relative = Path(*command.split("."))
    source = ROOT / relative / "__main__.py"
    if not source.is_file():
        source = ROOT / relative.with_suffix(".py")
    assert source.is_file(), f"python -m {command}: no such module"
    match = re.search(r"^from (pyserini_moe(?:\.\w+)+) import main\b", source.read_text(), re.M)
    assert match, f"{source.relative_to(ROOT)} does not say where its main lives"
    return match.group(1)


class Parsed(Exception):
    """Raised in place of running a command once its arguments parsed."""


def parse(command: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse ``argv`` with the command's own parser: ``build_parser()`` where the module has one,
    else its ``main`` stopped right after ``parse_args`` (which argparse calls on the top-level
    parser only: sub-commands are parsed inside it)."""
    module = importlib.import_module(command_module(command))
    if hasattr(module, "build_parser"):
        module.build_parser().parse_args(argv)
        return
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    with pytest.raises(Parsed):
        module.main(argv)


COMMANDS = command_lines(README)


def test_readme_has_command_lines() -> None:
    modules = {command for _, command, _ in COMMANDS}
    assert len(COMMANDS) >= 30, "the README's bash blocks were not read"
    assert {f"pyserini_moe.{c}" for c in ("train", "index", "search", "eval", "regress")} <= modules


@pytest.mark.parametrize("line,command,argv", COMMANDS, ids=[c[0][:90] for c in COMMANDS])
def test_command_line_parses(line: str, command: str, argv: list[str], monkeypatch, capsys) -> None:
    try:
        parse(command, argv, monkeypatch)
    except SystemExit as exit_:
        if exit_.code == 0 and {"-h", "--help"} & set(argv):
            return  # --help prints and exits 0
        err = capsys.readouterr().err.strip().splitlines()
        pytest.fail(f"README.md: {line}\n  is refused by its parser (exit {exit_.code}): "
                    f"{err[-1] if err else ''}")


def test_walk_through_folders_match() -> None:
    """The walk-through's steps hand each other the same folders: the trained model's ``last/``
    to the index, the index to the search, the run to the evaluation."""
    steps = {command.split(".")[-1]: argv
             for _, command, argv in command_lines(section("From training to a run"))[:4]}
    assert list(steps) == ["train", "index", "search", "eval"]

    def flag(step: str, name: str) -> str:
        argv = steps[step]
        return argv[argv.index(name) + 1]

    model = f"{flag('train', '--output-dir')}/last"
    assert flag("index", "--encoder") == model, f"the index step should encode with {model}"
    assert flag("search", "--index") == flag("index", "--index"), "search another index"
    assert flag("eval", "--run") == flag("search", "--output"), "eval another run"


# --------------------------------------------------------------------------- (b) numbers


def load_regressions() -> dict[str, dict[str, dict]]:
    """file stem -> condition name -> condition, for every regression file."""
    rows = {}
    for path in sorted((ROOT / "regressions").glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        rows[path.stem] = {c["name"]: c for c in data.get("conditions", [])}
    return rows


REGRESSIONS = load_regressions()


def resolve(file: str | None, cond: str) -> tuple[str, dict]:
    """(file stem, condition) of a row reference; a bare name must be one file's only."""
    if file is not None:
        assert file in REGRESSIONS, f"README.md names regressions/{file}.yaml, which does not exist"
        assert cond in REGRESSIONS[file], f"regressions/{file}.yaml has no row {cond!r}"
        return file, REGRESSIONS[file][cond]
    holders = [stem for stem, rows in REGRESSIONS.items() if cond in rows]
    assert holders, f"README.md quotes row {cond!r}, which no regression file has"
    assert len(holders) == 1, (f"README.md quotes row {cond!r}, which {holders} all have: write "
                               f"`FILE:{cond}`")
    return holders[0], REGRESSIONS[holders[0]][cond]


def metric(condition: dict, name: str) -> tuple[float | None, float | None]:
    """(expected, sd) of one metric of a condition; sd None for a single-run row."""
    value = condition["metrics"][name]
    if isinstance(value, dict):
        return value.get("expected"), value.get("sd")
    return value, None


def test_quoted_rows_equal_the_regression_files() -> None:
    refs = list(ROW_REF.finditer(README))
    assert refs, "README.md quotes no regression row"
    for ref in refs:
        stem, condition = resolve(ref["file"], ref["cond"])
        expected, sd = metric(condition, "ndcg@10")
        where = f"README.md quotes {stem}:{ref['cond']}"
        assert expected is not None, f"{where}, whose nDCG@10 is not measured yet"
        assert ref["value"] == f"{expected:.4f}", f"{where} as {ref['value']}; the file: {expected:.4f}"
        if ref["sd"] is not None:
            assert sd is not None, f"{where} with an sd; the row has one run"
            assert ref["sd"] == f"{sd:.4f}", f"{where} with sd {ref['sd']}; the file: {sd:.4f}"
        elif sd is not None:
            pytest.fail(f"{where} without the sd of its {len(condition['seeds'])} seeds")


def test_every_number_names_its_row() -> None:
    """A four-decimal number is the demo's output or a quoted regression row: none is left to
    go stale without a test noticing."""
    allowed = [(m.start("value"), m.end("value")) for m in ROW_REF.finditer(README)]
    allowed += [(m.start("sd"), m.end("sd")) for m in ROW_REF.finditer(README) if m["sd"]]
    demo = re.search(r"^\| run \(SciFact test\).*?(?=\n\n)", README, re.M | re.S)
    assert demo, "README.md has no demo table"
    allowed.append(demo.span())
    loose = [m.group() for m in NUMBER.finditer(README)
             if not any(a <= m.start() < b for a, b in allowed)]
    assert not loose, f"README.md numbers without their regression row: {loose}"


# --------------------------------------------------------------------------- the per-paper map


def model_types() -> dict[str, tuple[str, ...]]:
    """model_type -> representations of every model class, read from the modeling sources with
    ``ast`` (nothing imported)."""
    found = {}
    for path in (ROOT / "pyserini_moe" / "modeling").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            values = {target.id: statement.value for statement in node.body
                      if isinstance(statement, ast.Assign) for target in statement.targets
                      if isinstance(target, ast.Name)}
            if "model_type" in values and "representations" in values:
                found[ast.literal_eval(values["model_type"])] = tuple(
                    ast.literal_eval(values["representations"]))
    return found


def modeling_strings() -> set[str]:
    return {s for path in (ROOT / "pyserini_moe" / "modeling").glob("*.py")
            for s in re.findall(r'"(\w+)"', path.read_text(encoding="utf-8"))}


def paper_rows() -> list[dict[str, str]]:
    [table] = tables(section("The four papers"))
    header = [h.lower() for h in table[0]]
    assert header[:4] == ["paper", "model kinds", "representations: indexes", "recipes"]
    assert header[-1] == "best measured row"
    rows = [dict(zip(header, row)) for row in table[1:]]
    assert [r["paper"] for r in rows] == ["TASER", "SB-MoE", "CoT-MoTE", "CAME"]
    return rows


def expand(pattern: str) -> list[str]:
    """``a{b,c}d`` -> ``abd``, ``acd`` (one brace group)."""
    match = re.search(r"\{([^}]*)\}", pattern)
    if not match:
        return [pattern]
    return [pattern[:match.start()] + alt + pattern[match.end():] for alt in match[1].split(",")]


@pytest.mark.parametrize("row", paper_rows(), ids=lambda r: r["paper"])
def test_paper_row(row: dict[str, str]) -> None:
    paper = row["paper"]
    kinds = re.findall(r"`([^`]+)`", row["model kinds"])
    types = model_types()
    assert kinds and kinds[0] in types, f"{paper}: {kinds[:1]} is no model_type ({sorted(types)})"
    strings = modeling_strings()
    for name in kinds[1:]:
        assert name in types or name in strings, f"{paper}: `{name}` is nowhere in modeling/"
    names = {"dense": "dense", "sparse": "sparse", "multi-vector": "multi"}
    listed = [names[r.strip()] for r in row["representations: indexes"].split(":")[0].split("+")]
    assert sorted(listed) == sorted(types[kinds[0]]), (
        f"{paper}: `{kinds[0]}` represents {types[kinds[0]]}, the README says {listed}")
    for pattern in re.findall(r"`([^`]+)`", row["recipes"]):
        for one in expand(pattern):
            assert glob.glob(str(ROOT / "encoders" / f"{one}.yaml")), (
                f"{paper}: no recipe encoders/{one}.yaml")
    linked = {Path(p).stem for p in LINK.findall(row["regressions"])}
    [ref] = list(ROW_REF.finditer(row["best measured row"]))
    stem, condition = resolve(ref["file"], ref["cond"])
    assert stem in linked, f"{paper}: its best row is in {stem}.yaml, which the row does not link"
    assert stem.endswith("-protocol"), f"{paper}: the best row should be a protocol row"
    assert condition.get("seeds") == SEEDS, f"{paper}: {ref['cond']} is not seeds {SEEDS}"
    assert ref["sd"], f"{paper}: the best row's sd is missing"
    # the best of the paper's own protocol rows on SciFact (its controls excluded)
    own = {"TASER": "taser-", "SB-MoE": "sbmoe-", "CoT-MoTE": "mote-", "CAME": "came-"}[paper]
    best = max((metric(c, "ndcg@10")[0], name) for name, c in REGRESSIONS[stem].items()
               if name.startswith(own) and name.endswith(".scifact.test")
               and c.get("seeds") == SEEDS
               and metric(c, "ndcg@10")[0] is not None)  # a row still being measured
    assert best[1] == ref["cond"], f"{paper}: the best measured row is {best[1]} ({best[0]:.4f})"


# --------------------------------------------------------------------------- (c) the demo table

# Demo rows whose runs a regression file holds (the same index, encoder and topics), and the row.
DEMO_ROWS = {
    "BM25": ("bm25-scifact", "bm25-flat.scifact.test"),
    "MiniLM zero-shot": ("dense-minilm-scifact", "minilm-zeroshot.scifact.test"),
}
# Demo rows no regression file holds: the one-epoch TASER Det-R is the demo's own training.
NOT_IN_REGRESSIONS = {"TASER Det-R, one epoch", "TASER Det-R + BM25"}


def demo_rows() -> dict[str, tuple[str, str]]:
    [table] = [t for t in tables(README) if t[0][0] == "run (SciFact test)"]
    assert table[0][1:] == ["nDCG@10", "R@100"]
    return {row[0]: (NUMBER.search(row[1]).group(), NUMBER.search(row[2]).group())
            for row in table[1:]}


def test_demo_table_matches_regressions() -> None:
    rows = demo_rows()
    assert set(rows) == set(DEMO_ROWS) | NOT_IN_REGRESSIONS
    for label, (stem, cond) in DEMO_ROWS.items():
        condition = REGRESSIONS[stem][cond]
        expected = (f"{metric(condition, 'ndcg@10')[0]:.4f}",
                    f"{metric(condition, 'recall@100')[0]:.4f}")
        assert rows[label] == expected, f"demo row {label!r}: {rows[label]}; {stem}:{cond}: {expected}"
    held = {(f"{metric(c, 'ndcg@10')[0]:.4f}", f"{metric(c, 'recall@100')[0]:.4f}")
            for conds in REGRESSIONS.values() for c in conds.values()
            if {"ndcg@10", "recall@100"} <= set(c.get("metrics", {}))
            and metric(c, "ndcg@10")[0] is not None and metric(c, "recall@100")[0] is not None}
    for label in NOT_IN_REGRESSIONS:
        assert rows[label] not in held, (f"demo row {label!r} is now a regression row: map it in "
                                         "DEMO_ROWS")


# --------------------------------------------------------------------------- (d) links


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    slugs = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slugs.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return slugs


def test_links_lead_somewhere() -> None:
    links = LINK.findall(re.sub(r"^```.*?^```", "", README, flags=re.M | re.S))
    assert links
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue  # http(s), mailto
        target, _, anchor = link.partition("#")
        path = ROOT / target if target else ROOT / "README.md"
        assert path.exists(), f"README.md links {link}: {target} does not exist"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), (
                f"README.md links {link}: no such heading in {target or 'README.md'}")


# --------------------------------------------------------------------------- Python snippets


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README, re.M | re.S)


def defined_names(module: str) -> set[str]:
    """Top-level functions, classes and assignments of a module's source (nothing imported:
    pyserini_moe.encode.adapters would start the JVM)."""
    path = ROOT / Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    assert path.is_file(), f"README.md imports {module}, which does not exist"
    names = set()
    if path.name == "__init__.py":  # a package: its exported names, loaded on first use
        names |= set(getattr(importlib.import_module(module), "__all__", ()))
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def exported_names() -> set[str]:
    """What ``import pyserini_moe as pm`` offers: its ``__all__`` (importing the package loads
    nothing behind the names)."""
    import pyserini_moe

    return set(pyserini_moe.__all__)


def test_python_snippets_name_real_things() -> None:
    """What the snippets import from this package is defined there, and every ``pm.<name>``
    they call is exported by it."""
    blocks = python_blocks()
    assert len(blocks) >= 2
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyserini_moe"):
                missing = {a.name for a in node.names} - defined_names(node.module)
                assert not missing, f"README.md imports {missing} from {node.module}: not there"
        if "import pyserini_moe as pm" in block:
            used = set(re.findall(r"\bpm\.(\w+)", block))
            assert used <= exported_names(), (
                f"README.md calls pm.{sorted(used - exported_names())}: not exported")


def test_status_rows_are_short() -> None:
    """The status table gives each piece's gist and links its docs page; the numbers and the
    p-values live there."""
    rows = [line for line in section("Status").splitlines() if line.startswith("|")]
    assert len(rows) > 5
    for row in rows:
        assert len(row) < 200, f"status row of {len(row)} characters: {row[:80]}..."
        assert not re.search(r"\bp [=<]", row), f"status row with a p-value: {row[:80]}..."
