"""TREC run files (and MS MARCO's three-column runs, read alike), the currency between searching,
fusion and evaluation.

A run is ``{qid: {docid: score}}`` with string ids, the shape ranx and Pyserini's fusion use.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import numbers
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pyserini_moe.errors import DataFormatError, UserError
from pyserini_moe.io import atomic_path, check_path, iter_lines, open_text_output

Run = dict[str, dict[str, float]]
# The largest int the engines below take: Lucene's hit counts and impact weights (Java ints),
# trec_eval's cut-offs and Faiss's nprobe / efSearch (C ints); ranx's compiled metrics overflow
# on larger numbers. The deepest a run, or a metric's cut-off, can go.
JAVA_INT_MAX = 2**31 - 1
# Reads one split line of a run (``where``: file:line for errors) as (qid, docid, score).
LineParser = Callable[[list[str], str], tuple[str, str, float]]
# Lines of an existing output read to tell a run from another file (a header, a JSON line or
# a four-column qrels line shows at once; reading a whole run of millions of lines would not)
_RUN_CHECK_LINES = 100


class RunFormatError(UserError):
    """A malformed run file; the message names the file and line."""


def check_id(value: object, what: str) -> str:
    """A query or document id as a run holds it: one word of text (a TREC line's column), else
    one line naming it; an id that is not text (``1`` and ``"1"`` would be one line's ``1``)
    or holds whitespace would write a line no reader parses back as written."""
    if not isinstance(value, str):
        raise UserError(f"{what} {value!r} is {type(value).__name__}, not a string: a run's ids "
                        "are text (e.g. str(id))")
    if value.split() != [value]:
        raise UserError(f"{what} {value!r}: an id is one word, without whitespace")
    if _CONTROL.search(value):  # a NUL ends the id in trec_eval and Lucene
        raise UserError(f"{what} {value!r}: an id holds no control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{what} {value!r} holds half of a UTF-16 surrogate pair, not a "
                        "character: fix the id's decoding") from None
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_run(run: object) -> Run:
    """``run`` if it is ``{qid: {docid: score}}`` with one-word string ids and finite numeric
    scores (a NaN ranks anywhere; a string score sorts as text): else one line naming the first
    entry that is not."""
    return check_table(run, "the run", "score", "a finite number",
                       "{qid: {docid: score}} or a run file",
                       lambda v: isinstance(v, numbers.Real) and math.isfinite(v))


def check_table(table: object, what: str, value: str, kind: str, give: str,
                valid: Callable[[object], bool]) -> Any:
    """``table`` if it is ``{qid: {docid: value}}`` (a run, qrels) with one-word string ids and
    values ``valid`` says are ``kind`` (a bool is none: it is a mistake, not a number); else one
    line naming the first entry that is not."""
    if not isinstance(table, Mapping):
        raise UserError(f"{what} is {type(table).__name__}: give {give}")
    for qid, row in table.items():
        check_id(qid, f"{what}: query id")
        if not isinstance(row, Mapping):
            raise UserError(f"{what}: query {qid!r} holds {type(row).__name__}, not "
                            f"{{docid: {value}}}")
        for docid, v in row.items():
            check_id(docid, f"{what}: query {qid!r}: document id")
            if isinstance(v, bool) or not valid(v):
                raise UserError(f"{what}: query {qid!r}, document {docid!r}: {value} {v!r} is "
                                f"not {kind}")
    return table


def check_depth(hits: object) -> int | None:
    """How many hits a query to keep: None (all) or a whole number >= 1."""
    if hits is None:
        return None
    if isinstance(hits, bool) or not isinstance(hits, numbers.Integral) or hits < 1:
        raise UserError(f"hits {hits!r}: give a whole number >= 1, or None for every hit")
    return int(hits)


def ranked(hits: Mapping[str, float]) -> list[tuple[str, float]]:
    """Hits by descending score, ties in the order they came: a searcher's (Lucene's own, which
    Pyserini writes as returned), a file's, or a fusion's (:func:`by_docid`). So a written run
    diffs line for line against Pyserini's, and a cut at k keeps the documents Pyserini keeps.
    (Equal float scores are not always Lucene ties: it ranks before rounding to float.)"""
    return sorted(hits.items(), key=lambda kv: -kv[1])


def by_docid(hits: Mapping[str, float]) -> list[tuple[str, float]]:
    """Hits by descending score, ties by ascending docid: the order Pyserini's fusion and its
    ``tie_breaker`` give a ranking that has no order of its own (a union of documents)."""
    return sorted(hits.items(), key=lambda kv: (-kv[1], kv[0]))


def trec_order(hits: Mapping[str, float]) -> list[str]:
    """Docids in trec_eval's order: score descending, ties by docid *descending*. trec_eval ignores
    a file's rank column and ranks ties so, which is the order every metric here counts; the
    training data ranks its candidates so too, as the evaluator would."""
    return [docid for docid, _ in sorted(hits.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def check_run_tag(tag: str) -> str:
    """``tag``, if it is one word: an empty tag or one with whitespace in it writes lines of
    five or seven columns, which this tool's readers and trec_eval then refuse."""
    if tag.split() != [tag]:
        raise UserError(f"run tag {tag!r}: the last column of a TREC run is one word, without "
                        "whitespace (e.g. my_tag)")
    return tag


def write_trec_run(run: Run, path: str | os.PathLike, tag: str = "pyserini-moe",
                   hits: int | None = None, *, overwrite: bool = True) -> Path:
    """Write ``qid Q0 docid rank score tag`` lines, best first, atomically (gzipped for a
    ``.gz`` name). An existing file is replaced only with ``overwrite`` and only if it is a run
    (:func:`refuse_non_run_output`). A run without a hit is refused, as every reader of runs
    refuses it."""
    if isinstance(run, Mapping) and not any(run.values()):
        raise UserError(f"{path}: the run is empty (no query has a hit): nothing to write")
    with run_writer(path, tag, hits, overwrite=overwrite) as write:
        write(run)
    return Path(path)


def trec_run_lines(run: Run, tag: str = "pyserini-moe") -> Iterator[str]:
    """The lines :func:`write_trec_run` writes for ``run``: a run written a part at a time (a
    mining of 500k queries at depth 1000 is never one dict) reads back as one written whole."""
    check_run_tag(tag)
    return _ranked_lines(run, None, _trec_format(tag))


# One query's lines from its ranked (docid, score) hits.
QueryLines = Callable[[str, list[tuple[str, float]]], Iterable[str]]


def _trec_format(tag: str) -> QueryLines:
    def lines(qid: str, hits: list[tuple[str, float]]) -> list[str]:
        texts = score_texts([score for _, score in hits])
        return [f"{qid} Q0 {docid} {rank} {text} {tag}\n"
                for rank, ((docid, _), text) in enumerate(zip(hits, texts), start=1)]
    return lines


def score_texts(scores: list[float]) -> list[str]:
    """A query's scores, best first, as a TREC run writes them: six decimals (as Pyserini), or,
    where two different scores would be written alike (2e-7 and 1e-7 are both 0.000000), every
    score of the query in full, since trec_eval ranks by the written score and breaks the tie
    by docid, reordering the ranking."""
    texts = [f"{score:.6f}" for score in scores]
    if any(a != b and ta == tb for a, b, ta, tb in zip(scores, scores[1:], texts, texts[1:])):
        return [repr(float(score)) for score in scores]
    return texts


def write_msmarco_run(run: Run, path: str | os.PathLike, hits: int | None = None) -> Path:
    """Write ``qid<TAB>docid<TAB>rank`` lines, best first (MS MARCO's run format, Pyserini's
    ``--output-format msmarco``), atomically, as :func:`write_trec_run`."""
    with run_writer(path, hits=hits, output_format="msmarco") as write:
        write(run)
    return Path(path)


def refuse_non_run_output(path: str | os.PathLike) -> None:
    """Run outputs replace an existing run without ``--overwrite`` (as Pyserini's search does),
    but a file that is not a run (a collection's ``queries.jsonl`` or qrels named by mistake) is
    refused: it was replaced by a run without a word. Its first lines are read as a run; an
    empty file is one (a search that found nothing)."""
    path = Path(path)
    if not path.is_file():
        return
    lines = itertools.islice(iter_lines(path), _RUN_CHECK_LINES)
    try:
        parse: LineParser | None = None
        for lineno, line in lines:
            parts = line.split()
            parse = parse or _line_parser(parts, f"{path}:{lineno}")
            parse(parts, f"{path}:{lineno}")
    except (RunFormatError, DataFormatError) as e:
        raise UserError(f"{path} exists and is not a run ({e}): a run output replaces only "
                        "an earlier run; name another output or move the file") from None


@contextlib.contextmanager
def run_writer(path: str | os.PathLike, tag: str = "pyserini-moe", hits: int | None = None,
               output_format: str = "trec", *, overwrite: bool = True
               ) -> Iterator[Callable[[Run], None]]:
    """A run written a part at a time: each call of the function yielded writes one part's
    queries (in the ``trec`` or ``msmarco`` format, as :func:`write_trec_run` /
    :func:`write_msmarco_run`), and the file appears whole when the block ends, or not at all if
    it raises. A search of 500k queries so never holds its whole run."""
    line = _msmarco_format if output_format == "msmarco" else _trec_format(check_run_tag(tag))
    path = check_path(path, "run path")
    hits = check_depth(hits)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass --overwrite to replace it")
    refuse_non_run_output(path)
    with atomic_path(path, overwrite=overwrite) as tmp, open_text_output(tmp, path) as f:
        def write(part: Run) -> None:
            check_run(part)
            f.writelines(_ranked_lines(part, hits, line))

        yield write


def _msmarco_format(qid: str, hits: list[tuple[str, float]]) -> list[str]:
    return [f"{qid}\t{docid}\t{rank}\n" for rank, (docid, _) in enumerate(hits, start=1)]


def _ranked_lines(run: Run, hits: int | None, lines: QueryLines) -> Iterator[str]:
    for qid in run:
        yield from lines(qid, ranked(run[qid])[:hits])


def read_trec_run(path: str | os.PathLike) -> Run:
    """Read a run file: six-column TREC (``qid Q0 docid rank score tag``) or MS MARCO's three
    columns (``qid<TAB>docid<TAB>rank``: ``search --output-format msmarco``, Pyserini's too),
    told apart per file by its first line. An MS MARCO run's score is ``1 / rank``: the file's
    order exactly (distinct ranks, distinct scores), the scores Pyserini's trec_eval gives such a
    run, and positive, so that raw-score fusion still favours a document found by more runs
    (``-rank`` would not). A rank given twice for one query is refused (the ranking is ambiguous,
    and a headerless qrels file reads so); gaps are kept (a run filtered after it was written).
    A bad line raises :class:`RunFormatError` naming file and line.

    Lines are read as every other input is (:func:`~pyserini_moe.io.iter_lines`): gunzipped
    when the name ends in ``.gz``, a UTF-8 byte-order mark dropped (else the first query id would
    carry it and match no judged query), bytes that are not UTF-8 an error naming the line."""
    lines = iter_run(path)  # a missing file is named here, before its first line is read
    run: Run = {}
    ranks: dict[str, set[float]] | None = {} if is_rank_only(path) else None  # a query's ranks
    for qid, docid, value, lineno in lines:
        hits = run.setdefault(qid, {})
        if docid in hits:  # which line wins differs between tools: refuse the ambiguity
            raise RunFormatError(f"{path}:{lineno}: document {docid!r} is listed twice for "
                                 f"query {qid!r}")
        if ranks is not None:
            seen = ranks.setdefault(qid, set())
            if value in seen:
                raise RunFormatError(f"{path}:{lineno}: rank {round(1 / value)} is given twice "
                                     f"for query {qid!r}: a run ranks each document once (a "
                                     "qrels file of query, document and relevance has three "
                                     "columns too)")
            seen.add(value)
        hits[docid] = value
    return run


def iter_run(path: str | os.PathLike) -> Iterator[tuple[str, str, float, int]]:
    """Each line of a run as (qid, docid, score, line number), in file order, checked line by
    line as :func:`read_trec_run` reads it (a comment line, a bad column count, score or rank:
    one error naming file and line). What spans lines (a document or rank listed twice for a
    query) is the reader's to check: a streaming reader keeps no per-query sets. A missing
    file is refused when this is called, not when its lines are first asked for."""
    path = check_path(path, "run path")
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a run file")
    if not path.is_file():
        raise FileNotFoundError(f"run file not found: {path}")
    return _run_lines(path)


def _run_lines(path: Path) -> Iterator[tuple[str, str, float, int]]:
    parse: LineParser | None = None
    for lineno, line in iter_lines(path):
        parts = line.split()
        if parts[0].startswith("#"):  # else its words read as qid, docid and rank (or 3 columns)
            raise RunFormatError(f"{path}:{lineno}: a comment line: a run holds none (trec_eval "
                                 "reads every line as a result); remove it")
        parse = parse or _line_parser(parts, f"{path}:{lineno}")
        qid, docid, value = parse(parts, f"{path}:{lineno}")
        yield qid, docid, value, lineno


def _line_parser(parts: list[str], where: str) -> LineParser:
    """The format of a run, told by its first line; a line that fits neither names both."""
    if len(parts) not in (3, 6):
        raise RunFormatError(f"{where}: expected 6 columns (TREC: qid Q0 docid rank score tag) "
                             f"or 3 (MS MARCO: qid docid rank), got {len(parts)}")
    return _msmarco_line if len(parts) == 3 else _trec_line


def _trec_line(parts: list[str], where: str) -> tuple[str, str, float]:
    if len(parts) != 6:
        raise RunFormatError(f"{where}: expected 6 columns (qid Q0 docid rank score tag), got "
                             f"{len(parts)}")
    qid, _, docid, _, score, _ = parts
    try:
        value = float(score)
    except ValueError:
        raise RunFormatError(f"{where}: score {score!r} is not a number") from None
    if not math.isfinite(value):
        raise RunFormatError(f"{where}: score {score!r} is not a finite number")
    return qid, docid, value


def _msmarco_line(parts: list[str], where: str) -> tuple[str, str, float]:
    if len(parts) != 3:
        raise RunFormatError(f"{where}: expected 3 columns (qid docid rank: an MS MARCO run, as "
                             f"the first line), got {len(parts)}")
    qid, docid, rank = parts
    if not (rank.isascii() and rank.isdigit()) or int(rank) < 1:
        # a BEIR qrels file (query-id corpus-id score, with a header) has three columns too
        hint = (": this looks like a BEIR qrels file (query-id corpus-id score), not a run"
                if (qid, docid) == ("query-id", "corpus-id") else "")
        raise RunFormatError(f"{where}: rank {rank!r} is not a whole number >= 1{hint}")
    return qid, docid, 1 / int(rank)


def first_line_columns(path: str | os.PathLike) -> list[str]:
    """The columns of a run's first non-empty line (empty for an empty file): what tells its
    format (TREC or MS MARCO) and its run tag."""
    for _, line in iter_lines(Path(path)):
        if line.strip():
            return line.split()
    return []


def is_rank_only(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an MS MARCO run (``qid docid rank``): its scores are ``1 / rank``,
    made up here, so a fusion that adds scores must not take it for a system's scores."""
    return len(first_line_columns(path)) == 3


def read_nonempty_run(path: str | os.PathLike, purpose: str) -> Run:
    """A run that must hold results: an empty one (a search that failed or found nothing) is
    refused, since fusing or evaluating it would silently give the other runs, or zeros."""
    run = read_trec_run(path)
    if not any(run.values()):
        raise UserError(f"{path}: the run is empty: nothing to {purpose} (did its search fail?)")
    return run
