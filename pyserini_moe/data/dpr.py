"""DPR's published open-domain QA data -> the BEIR layout, topics and answers this package reads.

TASER (like DPR) trains on NQ, TriviaQA, WebQuestions, CuratedTREC and SQuAD together, retrieves
from DPR's 21M-passage Wikipedia and scores by answer strings, not qrels. The formats below were
checked against their readers, not guessed:

* ``psgs_w100.tsv``: a header ``id<TAB>text<TAB>title``, then one passage a row, CSV-quoted (DPR's
  ``CsvCtxSrc`` in ``dpr/data/retriever_data.py`` reads it with ``csv.reader(delimiter="\\t")`` and
  strips stray ``"`` from the text). Pyserini's ``wikipedia-dpr`` index has the same 21,015,324
  passages and ids.
* ``biencoder-<set>-{train,dev}.json``: one JSON array of ``{question, answers, positive_ctxs,
  negative_ctxs, hard_negative_ctxs}``, each ctx ``{title, text, score, passage_id}`` (TriviaQA:
  ``psg_id``); DPR's ``JsonQADataset`` (``dpr/data/biencoder_data.py``) drops questions without
  positives, and ``hard_negative_ctxs`` are its BM25 negatives (top BM25 passages without the
  answer). File names as ``dpr/data/download_data.py`` publishes them.
* ``<set>-test.qa.csv``: ``question<TAB>answers`` with the answers a Python list literal, CSV-quoted
  (DPR's ``CsvQASrc`` ``eval``s the column; we ``literal_eval`` it). CuratedTREC's answers are
  regular expressions (DPR and Pyserini evaluate it with regex matching).
* Pyserini's ``dpr-<set>-test`` topics are the same CSV read by Anserini's ``DprNqTopicReader``: qid
  = 0-based row number, fields ``title`` and ``answers`` (the list literal, possibly still quoted,
  which ``pyserini/eval/convert_trec_run_to_dpr_retrieval_run.py`` unquotes). Our test topics use
  the same qids, so runs on either are interchangeable.

Outputs: ``corpus.jsonl.gz`` (``wiki``), and in the same folder ``queries.jsonl`` (with each
question's ``answers``), ``qrels/{train,dev}.tsv`` (DPR's positives), ``bm25-negatives.train.trec``
(DPR's BM25 hard negatives, for ``data.negatives.source: run``) and ``topics/<split>[.<set>].tsv``
(``train``); test topics with answers as JSONL (``qa``). Every file is written to a temporary path
and renamed. ``python -m pyserini_moe.dpr --help`` shows the commands.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import gzip
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from pyserini_moe.data.beir import QRELS_HEADER, Document, check_id
from pyserini_moe.data.export import write_topics_tsv
from pyserini_moe.errors import DataFormatError, UserError
from pyserini_moe.io import atomic_path, iter_lines, json_record, open_binary, open_text_output
from pyserini_moe.runs import Run, read_nonempty_run, write_trec_run

WIKIPEDIA_PASSAGES = 21_015_324  # rows of psgs_w100.tsv: only sizes the progress bar
_NON_SPACE = re.compile(r"\S")
_MAX_EXAMPLE_CHARS = 256 << 20  # a JSON example this long is a broken file, not a big example


def _open_text(path: Path) -> IO[str]:
    """UTF-8 text (gunzipped for ``.gz``), newlines untranslated so the csv module sees quotes."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", newline="")


def _csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(first line of the record, fields)`` of a tab-separated, CSV-quoted file; a broken quote
    or bad UTF-8 is a DataFormatError at the record where it starts."""
    csv.field_size_limit(1 << 24)
    with _open_text(path) as handle:
        reader = csv.reader(handle, delimiter="\t")
        start = 1
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except (csv.Error, UnicodeDecodeError) as e:
                raise DataFormatError(path, f"unreadable record ({e}); an unbalanced quote?",
                                      start) from e
            if row and any(field.strip() for field in row):
                yield start, row
            start = reader.line_num + 1


# --------------------------------------------------------------------------- Wikipedia passages


def iter_wikipedia(path: str | os.PathLike) -> Iterator[Document]:
    """Stream DPR's ``psgs_w100.tsv`` (or ``.tsv.gz``) as documents, header skipped."""
    path = Path(path)
    for lineno, row in _csv_rows(path):
        if len(row) != 3:
            raise DataFormatError(path, f"expected 3 tab-separated columns (id, text, title), "
                                        f"found {len(row)}", lineno)
        if row[0] == "id" and lineno == 1:
            continue
        yield Document(check_id(path, lineno, row[0].strip(), "passage"), row[2],
                       row[1].strip('"'))


def _rows_with_id(path: Path, passage: str) -> tuple[int, int]:
    """The lines of the first two rows of ``path`` with id ``passage``: read again on the error
    path only (21M ids with their lines would double the memory the uniqueness check takes)."""
    lines = []
    for lineno, row in _csv_rows(path):
        if row and row[0].strip() == passage:
            lines.append(lineno)
            if len(lines) == 2:
                break
    return lines[0], lines[-1]


def check_corpus_output(target: Path) -> None:
    """``wiki`` writes a gzipped corpus, named so; beside a plain one of the same name
    (``corpus.jsonl`` in a BEIR folder) it would make a folder ``index`` refuses (which of the
    two is the corpus?), so that is refused before hours of conversion, not after."""
    if not target.name.endswith(".jsonl.gz"):
        raise UserError(f"{target}: the corpus must be named *.jsonl.gz (e.g. corpus.jsonl.gz)")
    plain = target.with_name(target.name.removesuffix(".gz"))
    if plain.is_file():
        raise UserError(f"--output {target}: {plain.parent} already holds {plain.name}, and a "
                        f"folder with both {plain.name} and {target.name} is refused by index "
                        f"(which is the corpus?); write elsewhere or move {plain.name} away")


def convert_wikipedia(source: str | os.PathLike, target: str | os.PathLike,
                      progress: bool = True, overwrite: bool = False) -> int:
    """Write ``psgs_w100.tsv`` as a BEIR ``corpus.jsonl.gz``, streaming; returns the passage count.

    Ids are checked for uniqueness in passing (a set of 21M short strings, ~2 GB); texts are never
    held in memory. An existing ``target`` is replaced only with ``overwrite``.
    """

    source, target = Path(source), Path(target)
    check_corpus_output(target)
    refuse_existing(target, overwrite)
    total = WIKIPEDIA_PASSAGES if source.name.startswith("psgs_w100") else None
    seen: set[str] = set()
    with atomic_path(target, overwrite=overwrite) as tmp, \
            gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6) as out, \
            tqdm(total=total, unit="psg", unit_scale=True, desc=source.name,
                 disable=not progress) as bar:
        for doc in iter_wikipedia(source):
            if doc.id in seen:
                first, again = _rows_with_id(source, doc.id)
                raise DataFormatError(source, f"duplicate passage id {doc.id!r} (first at line "
                                              f"{first})", again)
            seen.add(doc.id)
            out.write(json.dumps({"_id": doc.id, "title": doc.title, "text": doc.text},
                                 ensure_ascii=False) + "\n")
            bar.update()
        if not seen:
            raise DataFormatError(source, "no passages")
    return len(seen)


def passage_texts(source: str | os.PathLike, wanted: Iterable[str]) -> dict[str, str]:
    """``{docid: text}`` for the ``wanted`` ids only, streamed from ``psgs_w100.tsv``, a BEIR
    ``corpus.jsonl(.gz)`` or a folder holding one. The text is without its title: DPR's answer
    match searches the passage text alone."""
    path = Path(source).expanduser()
    if path.is_dir():
        found = [path / n for n in ("corpus.jsonl.gz", "corpus.jsonl") if (path / n).is_file()]
        if not found:
            raise FileNotFoundError(f"{path}: no corpus.jsonl(.gz) in this folder")
        path = found[0]
    if not path.is_file():
        raise FileNotFoundError(f"passages file not found: {path}")
    wanted = set(wanted)
    texts: dict[str, str] = {}
    if not wanted:
        return texts
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        for lineno, line in iter_lines(path):
            obj = json_record(path, lineno, line)
            if not isinstance(obj, dict) or "_id" not in obj:
                raise DataFormatError(path, 'expected a JSON object with "_id"', lineno)
            if str(obj["_id"]) in wanted:
                texts[str(obj["_id"])] = str(obj.get("text") or "")
                if len(texts) == len(wanted):
                    break
    else:
        for doc in iter_wikipedia(path):
            if doc.id in wanted:
                texts[doc.id] = doc.text
                if len(texts) == len(wanted):
                    break
    return texts


# --------------------------------------------------------------------------- retriever training data


@dataclass(frozen=True)
class DprExample:
    """One question of a DPR retriever file, with passage ids only."""

    qid: str
    question: str
    answers: tuple[str, ...]
    positives: tuple[str, ...]
    hard_negatives: tuple[str, ...]  # DPR's BM25 negatives, in DPR's (BM25) order


class _JsonArray:
    """Streams the elements of a top-level JSON array with the line each one starts on.

    DPR's training files are one array of several GB; ``json.load`` would hold it all (and name no
    line on an error), so elements are decoded one by one from a sliding buffer.
    """

    def __init__(self, handle: IO[str], path: Path, chunk: int = 1 << 20) -> None:
        self.handle, self.path, self.chunk = handle, path, chunk
        self.buf, self.pos, self.line, self.eof = "", 0, 1, False
        self.decoder = json.JSONDecoder()

    def _more(self) -> bool:
        if self.eof:
            return False
        try:
            data = self.handle.read(self.chunk)
        except UnicodeDecodeError as e:
            raise DataFormatError(self.path, f"not valid UTF-8 ({e.reason})", self.line) from e
        if not data:
            self.eof = True
            return False
        self.buf, self.pos = self.buf[self.pos:] + data, 0
        return True

    def _advance(self, to: int) -> None:
        self.line += self.buf.count("\n", self.pos, to)
        self.pos = to

    def _next_char(self) -> str | None:
        """Skip whitespace; the next character, or None at the end of the file."""
        while True:
            match = _NON_SPACE.search(self.buf, self.pos)
            if match:
                self._advance(match.start())
                return self.buf[self.pos]
            self._advance(len(self.buf))
            if not self._more():
                return None

    def _decode(self) -> Any:
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                if len(self.buf) - self.pos < _MAX_EXAMPLE_CHARS and self._more():
                    continue  # the element may just be cut by the buffer's end
                line = self.line + self.buf.count("\n", self.pos, e.pos)
                raise DataFormatError(self.path, f"malformed JSON ({e.msg})", line) from None
            self._advance(end)
            return value

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        if self._next_char() != "[":
            raise DataFormatError(self.path, "expected a JSON array ([...]) of DPR examples",
                                  self.line)
        self._advance(self.pos + 1)
        if self._next_char() == "]":
            return
        while True:
            self._next_char()
            start = self.line
            yield start, self._decode()
            char = self._next_char()
            if char == ",":
                self._advance(self.pos + 1)
            elif char == "]":
                return
            else:
                raise DataFormatError(self.path, "expected ',' or ']' after an example" if char
                                      else "the JSON array is not closed (truncated file?)",
                                      self.line)


def _ctx_ids(path: Path, line: int, example: dict, key: str, required: bool) -> tuple[str, ...]:
    ctxs = example.get(key)
    if ctxs is None and not required:
        return ()
    if not isinstance(ctxs, list):
        raise DataFormatError(path, f'"{key}" must be a list of passages', line)
    ids: dict[str, None] = {}
    for i, ctx in enumerate(ctxs):
        raw = ctx.get("passage_id", ctx.get("psg_id")) if isinstance(ctx, dict) else None
        if raw is None:
            raise DataFormatError(path, f'{key}[{i}] has no "passage_id" (or "psg_id"): '
                                        "needed to find the passage in psgs_w100", line)
        ids[check_id(path, line, raw, "passage")] = None
    return tuple(ids)


def read_biencoder(path: str | os.PathLike, prefix: str) -> Iterator[DprExample]:
    """Stream a DPR retriever file (``.json`` or ``.json.gz``); qid = ``<prefix>-<index>``, index
    the 0-based position in the file (so an id leads back to its source)."""
    path = Path(path)
    with _open_text(path) as handle:
        for index, (line, obj) in enumerate(_JsonArray(handle, path)):
            if not isinstance(obj, dict):
                raise DataFormatError(path, f"example {index}: expected a JSON object, found "
                                            f"{type(obj).__name__}", line)
            question = obj.get("question")
            if not isinstance(question, str) or not question.strip():
                raise DataFormatError(path, f'example {index}: "question" must be a non-empty '
                                            "string", line)
            answers = obj.get("answers", [])
            if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
                raise DataFormatError(path, f'example {index}: "answers" must be a list of '
                                            "strings", line)
            yield DprExample(f"{prefix}-{index}", question.strip(), tuple(answers),
                             _ctx_ids(path, line, obj, "positive_ctxs", required=True),
                             _ctx_ids(path, line, obj, "hard_negative_ctxs", required=False))


@dataclass(frozen=True)
class ConversionStats:
    """What ``convert_training`` wrote, per ``<set>/<split>``."""

    questions: dict[str, int]
    skipped_without_positive: dict[str, int]
    negatives: int = 0  # hard-negative lines written (none: no negatives run is written)


def _checked_sets(files: Mapping[str, str | os.PathLike], what: str) -> dict[str, Path]:
    out = {}
    for name, file in files.items():
        if not re.fullmatch(r"[A-Za-z0-9_.]+", name):
            raise UserError(f"{what}: data set name {name!r} must be letters, digits, '_' or '.' "
                            "(it prefixes the query ids)")
        out[name] = Path(file)
        if not out[name].is_file():
            raise FileNotFoundError(f"{what}: DPR file not found for {name!r}: {file}")
    return out


def convert_training(train: Mapping[str, str | os.PathLike], output: str | os.PathLike,
                     dev: Mapping[str, str | os.PathLike] | None = None,
                     overwrite: bool = False) -> ConversionStats:
    """Merge DPR retriever files into one collection folder for the trainer (multi-set training).

    ``train``/``dev`` map a data set name (``nq``, ``trivia``, ...) to its file; query ids are
    ``<set>-<split>-<index>``. Writes ``queries.jsonl`` (train and dev questions with their
    answers), ``qrels/train.tsv`` and ``qrels/dev.tsv`` (positives, grade 1),
    ``bm25-negatives.train.trec`` (DPR's BM25 hard negatives in DPR's order) and topics files
    ``topics/train.<set>.tsv`` (per set, for mining from a chosen subset, as TASER mines only NQ,
    TriviaQA and WebQ) and ``topics/dev.tsv`` (all dev sets, TASER's model selection set). The
    corpus (``wiki``, ``corpus.jsonl.gz``) goes into the same folder and is kept; an earlier
    collection is replaced only with ``overwrite`` (:func:`check_collection_output`).
    """
    output = Path(output)
    check_collection_output(output, overwrite)
    splits = {"train": _checked_sets(train, "train"), "dev": _checked_sets(dev or {}, "dev")}
    if not splits["train"]:
        raise UserError("no training files given")
    with _staged_collection(output) as stage:
        return _write_training(splits, stage)


def check_collection_output(output: Path, overwrite: bool) -> None:
    """Before any work: ``train``'s folder is new, empty, or holds ``wiki``'s corpus alone; with
    ``overwrite``, also an earlier ``train`` output. A folder holding anything else (a BEIR
    collection's ``corpus.jsonl`` or test qrels) is refused even with ``overwrite``: writing into
    it made a folder mixing two collections, and replacing it would delete files ``dpr`` did not
    write."""
    if not output.exists():
        return
    if not output.is_dir():
        raise FileExistsError(f"{output} is a file: name a folder for the collection")
    entries = [e.relative_to(output) for e in output.rglob("*")]  # hidden: temporaries
    entries = [e for e in entries if not any(part.startswith(".") for part in e.parts)]
    foreign = sorted(str(e) for e in entries if not _dpr_entry(e))
    if foreign:
        raise FileExistsError(f"{output} holds files dpr train does not write (e.g. "
                              f"{foreign[0]}): name a new folder, or the one wiki's "
                              f"{_CORPUS} is in")
    if _earlier_training(output) and not overwrite:
        raise FileExistsError(f"{output} already holds a DPR collection; pass --overwrite to "
                              f"replace it whole ({_CORPUS} is kept)")


_CORPUS = "corpus.jsonl.gz"  # wiki's output, which train's collection folder holds beside its own
_TRAINING_FILES = ("queries.jsonl", "bm25-negatives.train.trec", "qrels", "topics")


def _dpr_entry(entry: Path) -> bool:
    """Whether a path inside the collection folder is one ``wiki`` or ``train`` writes."""
    parts = entry.parts
    if len(parts) == 1:
        return parts[0] in (_CORPUS, *_TRAINING_FILES)
    if len(parts) == 2 and parts[0] == "qrels":
        return parts[1] in ("train.tsv", "dev.tsv")
    return len(parts) == 2 and parts[0] == "topics" and \
        re.fullmatch(r"(train\.[A-Za-z0-9_.]+|dev)\.tsv", parts[1]) is not None


def _earlier_training(output: Path) -> bool:
    """Whether ``output`` holds what an earlier ``train`` wrote."""
    return any((output / name).exists() for name in _TRAINING_FILES)


@contextlib.contextmanager
def _staged_collection(output: Path) -> Iterator[Path]:
    """An empty folder beside ``output`` to write the collection into; on success its files
    become ``output``'s (:func:`_commit_collection`), on failure it is removed with the folders
    made for it, so an earlier collection is never half replaced."""
    created = [p for p in output.absolute().parents if not p.exists()]
    output.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{output.name}.tmp-{os.getpid()}-",
                                  dir=output.parent))
    try:
        stage.chmod(0o777 & ~_umask())  # as a plain mkdir would: mkdtemp's is owner-only
        yield stage
        _commit_collection(stage, output)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _commit_collection(stage: Path, output: Path) -> None:
    """Move the written collection into place. A new folder, or one holding wiki's corpus
    alone, takes the files (nothing old to mix with; a running ``wiki`` keeps its folder); an
    earlier collection is swapped out whole by two renames, its corpus linked into the new one
    first, so a reader sees the old collection or the new, never a mix."""
    if not output.exists():
        stage.rename(output)
    elif not _earlier_training(output):
        for entry in stage.iterdir():
            entry.rename(output / entry.name)
        stage.rmdir()
    else:
        if (output / _CORPUS).is_file():
            os.link(output / _CORPUS, stage / _CORPUS)
        old = output.with_name(f".{output.name}.old-{os.getpid()}")
        output.rename(old)
        try:
            stage.rename(output)
        except BaseException:
            old.rename(output)
            raise
        shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_training(splits: dict[str, dict[str, Path]], output: Path) -> ConversionStats:
    """Write the collection's files into the (new, empty) folder ``output``."""
    questions: dict[str, int] = {}
    skipped: dict[str, int] = {}
    topics: dict[str, dict[str, str]] = {}
    written = 0
    with contextlib.ExitStack() as stack:
        def out(name: str) -> IO[str]:
            (output / name).parent.mkdir(parents=True, exist_ok=True)
            return stack.enter_context((output / name).open("w", encoding="utf-8"))

        queries, negatives = out("queries.jsonl"), out("bm25-negatives.train.trec")
        for split, files in splits.items():
            if not files:
                continue
            qrels = out(f"qrels/{split}.tsv")
            qrels.write("\t".join(QRELS_HEADER) + "\n")
            for name, path in files.items():
                key, kept = f"{name}/{split}", 0
                skipped[key] = 0
                topic_key = f"{split}.{name}" if split == "train" else split
                for ex in read_biencoder(path, f"{name}-{split}"):
                    if not ex.positives:  # as DPR's JsonQADataset.load_data
                        skipped[key] += 1
                        continue
                    kept += 1
                    queries.write(json.dumps({"_id": ex.qid, "text": ex.question,
                                              "answers": list(ex.answers)},
                                             ensure_ascii=False) + "\n")
                    topics.setdefault(topic_key, {})[ex.qid] = ex.question
                    qrels.writelines(f"{ex.qid}\t{doc}\t1\n" for doc in ex.positives)
                    if split == "train":
                        ranked_negs = [d for d in ex.hard_negatives if d not in ex.positives]
                        written += len(ranked_negs)
                        negatives.writelines(
                            f"{ex.qid} Q0 {doc} {rank} {len(ranked_negs) - rank + 1} dpr-bm25\n"
                            for rank, doc in enumerate(ranked_negs, start=1))
                if not kept:
                    raise DataFormatError(path, "no question with a positive passage")
                questions[key] = kept
    if not written:  # an empty run, which every reader of runs refuses
        (output / "bm25-negatives.train.trec").unlink()
    for name, texts in topics.items():
        write_topics_tsv(texts, output / "topics" / f"{name}.tsv")
    return ConversionStats(questions, skipped, written)


# --------------------------------------------------------------------------- test questions, answers


def _answer_list(path: str | os.PathLike, line: int | None, text: str) -> list[str]:
    """A Python list literal of answer strings (DPR's CSV column; Pyserini's ``answers`` field,
    which may still carry its CSV quotes)."""
    text = text.strip()
    if text.startswith('"') and text.endswith('"'):
        text = text[1:-1].replace('""', '"')
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise DataFormatError(path, f"answers must be a non-empty list of strings such as "
                                    f"['Paris'], found {text[:80]!r}", line)
    return value


def read_qa_csv(path: str | os.PathLike, prefix: str = "") -> dict[str, tuple[str, list[str]]]:
    """DPR's ``<set>-test.qa.csv`` as ``{qid: (question, answers)}``; qid = ``<prefix><row>``
    with the 0-based row number, the qids of Pyserini's ``dpr-<set>-test`` topics."""
    path = Path(path)
    check_qid_prefix(prefix)
    out: dict[str, tuple[str, list[str]]] = {}
    for row, (line, fields) in enumerate(_csv_rows(path)):
        if len(fields) < 2:
            raise DataFormatError(path, "expected question<TAB>answers (a list such as "
                                        f"['Paris']), found {len(fields)} column(s)", line)
        if not fields[0].strip():
            raise DataFormatError(path, "empty question", line)
        out[f"{prefix}{row}"] = (fields[0].strip(), _answer_list(path, line, fields[1]))
    if not out:
        raise DataFormatError(path, "no questions")
    return out


def read_answers_jsonl(path: str | os.PathLike) -> dict[str, tuple[str, list[str]]]:
    """Our topics-with-answers JSONL (``{"_id", "text", "answers"}``, as ``qa`` writes it)."""
    path = Path(path)
    out: dict[str, tuple[str, list[str]]] = {}
    for line, raw in iter_lines(path):
        obj = json_record(path, line, raw)
        if not isinstance(obj, dict) or not {"_id", "text", "answers"} <= obj.keys():
            raise DataFormatError(path, 'expected {"_id", "text", "answers"}', line)
        answers = obj["answers"]
        if not isinstance(answers, list) or not answers or \
                not all(isinstance(a, str) for a in answers):
            raise DataFormatError(path, '"answers" must be a non-empty list of strings', line)
        qid = check_id(path, line, obj["_id"], "query")
        if qid in out:
            raise DataFormatError(path, f"duplicate query id {qid!r}", line)
        out[qid] = (str(obj["text"]), answers)
    if not out:
        raise DataFormatError(path, "no questions")
    return out


def _pyserini_answers(name: str) -> dict[str, list[str]]:
    from pyserini_moe._java import bootstrap  # noqa: PLC0415 - starts a JVM; only when needed

    bootstrap()
    from pyserini.search import get_topics

    try:
        topics = get_topics(name)
    except ValueError as e:
        raise UserError(f"unknown answers {name!r}: not a file and not a Pyserini topics name "
                        "(e.g. dpr-nq-test)") from e
    answers = {}
    for qid, fields in topics.items():
        if "answers" not in fields:
            raise UserError(f"Pyserini topics {name!r} carry no answers (topic {qid})")
        answers[str(qid)] = _answer_list(name, None, fields["answers"])
    return answers


def load_answers(spec: str | os.PathLike) -> dict[str, list[str]]:
    """``{qid: answers}`` from our JSONL, a DPR ``.qa.csv`` (gz allowed) or a Pyserini DPR topics
    name (``dpr-nq-test``, ``dpr-trivia-test``, ``dpr-wq-test``, ``dpr-curated-test``,
    ``dpr-squad-test``)."""
    path = Path(spec).expanduser()
    if path.is_file():
        read = read_answers_jsonl if ".jsonl" in path.name else read_qa_csv
        return {qid: answers for qid, (_, answers) in read(path).items()}
    if os.sep in str(spec) or "." in path.name:
        raise FileNotFoundError(f"answers file not found: {spec}")
    return _pyserini_answers(str(spec))


def check_qid_prefix(prefix: str) -> str:
    """``prefix``, if query ids made with it are ids: whitespace in one wrote topics that
    ``search`` then refused (``invalid query id 'a b0'``)."""
    if any(c.isspace() for c in prefix):
        raise UserError(f"--prefix {prefix!r}: query ids may contain no whitespace; use e.g. "
                        "'nq-' or 'nq_'")
    return prefix


def refuse_existing(target: str | os.PathLike, overwrite: bool) -> None:
    """Before any work: an existing output is replaced only with ``overwrite`` (``dpr`` once
    replaced a user's file without a word)."""
    if Path(target).exists() and not overwrite:
        raise FileExistsError(f"{target} already exists; pass --overwrite to replace it")


def convert_qa(source: str | os.PathLike, target: str | os.PathLike, prefix: str = "",
               overwrite: bool = False) -> int:
    """Write DPR test questions as JSONL ``{"_id", "text", "answers"}`` (gzipped for a ``.gz``
    name): a ``--topics`` file for search (extra fields are ignored) and an ``answers:`` file for
    the regression runner. An existing ``target`` is replaced only with ``overwrite``."""
    check_qid_prefix(prefix)
    refuse_existing(target, overwrite)
    rows = read_qa_csv(source, prefix)
    with atomic_path(target, overwrite=overwrite) as tmp, \
            open_text_output(tmp, Path(target)) as f:
        for qid, (question, answers) in rows.items():
            f.write(json.dumps({"_id": qid, "text": question, "answers": answers},
                               ensure_ascii=False) + "\n")
    return len(rows)


# --------------------------------------------------------------------------- runs


def merge_runs(paths: Iterable[str | os.PathLike], target: str | os.PathLike,
               overwrite: bool = False) -> Run:
    """Per query, the hits of the first run that has it: model-mined negatives for some data sets,
    DPR's BM25 negatives for the rest (TASER appendix D mines only NQ, TriviaQA and WebQ). An
    existing ``target`` is replaced only with ``overwrite``."""
    refuse_existing(target, overwrite)
    merged: Run = {}
    for path in paths:
        for qid, hits in read_nonempty_run(path, "merge").items():
            merged.setdefault(qid, hits)
    if not merged:
        raise UserError("the runs to merge are empty")
    write_trec_run(merged, target, tag="merged", overwrite=overwrite)
    return merged


if __name__ == "__main__":  # the door moved: library modules import no command
    raise SystemExit("python -m pyserini_moe.data.dpr is now python -m pyserini_moe.dpr (same arguments)")
