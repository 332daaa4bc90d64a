"""``search`` writes its run a part at a time (a mining search of 500k queries never holds its
whole run): the file and every notice read as one part's would."""

from __future__ import annotations

import json

import pytest

from pyserini_moe.cli import search as search_cli
from pyserini_moe.search import dispatch
from pyserini_moe.search.dispatch import Findings, TopicSearcher

pytestmark = pytest.mark.usefixtures("one_thread")


def _search(ws, topics, out, capsys, *extra: str) -> list[str]:
    assert search_cli.main(["--retriever", "dense", "--index", str(ws["index"]), "--topics",
                            str(topics), "--output", str(out), "--device", "cpu", "--quiet",
                            *extra]) == 0
    return [line for line in capsys.readouterr().err.splitlines()
            if not line.endswith(f"run written to {out}")]


def test_a_search_in_parts_writes_the_run_and_notices_of_one(model_index_run, tmp_path, capsys,
                                                             monkeypatch) -> None:
    ws = model_index_run(tmp_path)
    docs = [json.loads(line) for line in (ws["corpus"] / "corpus.jsonl").open()]
    topics = tmp_path / "topics.tsv"  # queries that are documents: --remove-query has work
    topics.write_text("".join(f"{d['_id']}\t{d['title']} {d['text']}\n" for d in docs[:7]))
    flags = ("--remove-query", "--hits", "40")
    capsys.readouterr()  # the workspace's own output
    whole = _search(ws, topics, tmp_path / "whole.trec", capsys, *flags)
    parts = []
    real = TopicSearcher.search
    monkeypatch.setattr(TopicSearcher, "search",
                        lambda self, t, hits=None: parts.append(len(t)) or real(self, t, hits))
    monkeypatch.setattr(dispatch, "SEARCH_PART", 3)
    in_parts = _search(ws, topics, tmp_path / "parts.trec", capsys, *flags)
    assert parts == [3, 3, 1]
    assert (tmp_path / "parts.trec").read_bytes() == (tmp_path / "whole.trec").read_bytes()
    assert in_parts == whole
    assert any("--remove-query dropped the document of the query's own id for" in n and
               "of 7 queries" in n for n in whole), whole
    assert any("the index holds 30 documents" in n for n in whole), whole


def test_findings_add_up_over_parts() -> None:
    """Counts add, an expert is silent only if silent in every part, the first example stays."""
    a = Findings(queries=3, empty=1, empty_example=("q1", "the of"), self_hits=(2, 2),
                 silent=["impact index i", "dense index d"], cut_lengths={48})
    b = Findings(queries=2, empty=1, empty_example=("q9", "a"), self_hits=(1, 0),
                 silent=["impact index i"], cut_lengths={64})
    total = a + b
    assert (total.queries, total.empty, total.empty_example, total.self_hits) == \
        (5, 2, ("q1", "the of"), (3, 2))
    assert total.silent == ["impact index i"] and total.cut_lengths == {48, 64}
    assert total.notices == [
        "warning: the impact index i retrieved nothing for any query: the fused run comes from "
        "the other indexes alone",
        "warning: queries longer than 48 or 64 tokens are cut (--query-max-length)",
        "note: --remove-query dropped the document of the query's own id for 3 of 5 queries (2 "
        "of them ranked first)",
        "warning: 2 of 5 queries retrieved nothing (e.g. q1: 'the of'); the run has no line for "
        "them and evaluation counts them as 0"]
    assert (Findings() + a).notices == a.notices


def test_max_passage_over_ids_without_the_delimiter_is_said(model_index_run, tmp_path,
                                                            capsys) -> None:
    """Every hit was its own document and the run came out as searched, without a word."""
    ws = model_index_run(tmp_path)
    capsys.readouterr()
    said = _search(ws, f"{ws['corpus']}:test", tmp_path / "r.trec", capsys, "--max-passage")
    assert any("--max-passage: no hit's id holds '#'" in line for line in said), said
    unsplit, split = Findings(queries=2, unsplit="#"), Findings(queries=1)
    assert (unsplit + unsplit).unsplit == "#" and (Findings() + unsplit).unsplit == "#"
    assert (unsplit + split).unsplit is None and (unsplit + Findings()).unsplit == "#"
