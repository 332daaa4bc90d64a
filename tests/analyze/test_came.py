"""CAME's expert analysis (table 3, section 5.3's RBO, figure 4): RBO_ext against values computed
by hand, top-k overlap, complementarity, the choice of case-study queries, and the command on
hand-built runs (Markdown, PNG, errors). No model, no Java."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyserini_moe.analyze.came import (
    Complement,
    complementarity,
    disagreements,
    first_relevant,
    mean_pairwise,
    overlap_at,
    parse_named_runs,
    rbo,
)
from pyserini_moe.cli import run_main
from pyserini_moe.cli.analyze import main as analyze_main
from pyserini_moe.runs import write_trec_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- RBO_ext (Webber et al. 2010, eq. 30 / 32) -----------------------------------------------
def test_rbo_of_identical_and_disjoint_lists() -> None:
    assert rbo(list("abcd"), list("abcd"), 0.9) == pytest.approx(1.0)
    assert rbo(list("abcd"), list("abcd"), 0.2) == pytest.approx(1.0)
    assert rbo(list("abc"), list("xyz"), 0.9) == 0.0
    assert rbo(list("abc"), list("wxyz"), 0.9) == 0.0  # uneven and disjoint
    assert rbo(list("abc"), [], 0.9) == 0.0
    with pytest.raises(ValueError, match="undefined"):
        rbo([], [], 0.9)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        rbo(list("ab"), list("ab"), 1.0)


def test_rbo_even_lists_by_hand() -> None:
    # [a b c] vs [a c b], p = 0.9: X_1 = 1, X_2 = 1, X_3 = 3.
    # (1-p)/p * (1*0.9 + 1/2*0.81 + 3/3*0.729) + 3/3 * 0.729 = 2.034/9 + 0.729 = 0.955
    assert rbo(list("abc"), list("acb"), 0.9) == pytest.approx(0.955)
    # A published worked example (rankmeasures, after R. Agrawal's RBO): 0.828.
    # X = 0, 1, 2, 4, 5: (0.5*0.81 + 2/3*0.729 + 0.6561 + 0.59049)/9 + 0.59049 = 0.82800
    assert rbo([1, 2, 3, 4, 5], [2, 3, 4, 1, 5], 0.9) == pytest.approx(0.828, abs=5e-4)
    assert rbo(list("abcde"), list("bcdae"), 0.9) == pytest.approx(0.8280)


def test_rbo_uneven_lists_by_hand_and_symmetry() -> None:
    # S = [a b], L = [b c a], p = 0.5: s = 2, l = 3, X_1 = 0, X_2 = 1, X_3 = |{a,b} & {b,c,a}| = 2.
    # sums: 0*0.5 + 1/2*0.25 + 2/3*0.125 = 0.208333; second: X_s*(3-2)/(2*3)*0.125 = 0.0208333
    # (1-p)/p = 1 -> 0.2291667; tail: ((2-1)/3 + 1/2) * 0.125 = 0.1041667; total 1/3
    assert rbo(list("ab"), list("bca"), 0.5) == pytest.approx(1 / 3)
    assert rbo(list("bca"), list("ab"), 0.5) == pytest.approx(1 / 3)
    # A list that is a prefix of the other: its agreement (all) is extrapolated, RBO_ext = 1.
    assert rbo(["a"], ["a", "b"], 0.9) == pytest.approx(1.0)
    assert rbo(list("ab"), list("abcdef"), 0.7) == pytest.approx(1.0)


def test_rbo_weighs_the_top_more() -> None:
    top_swap = rbo(list("bacdef"), list("abcdef"), 0.9)
    bottom_swap = rbo(list("abcdfe"), list("abcdef"), 0.9)
    assert 0 < top_swap < bottom_swap < 1


def test_overlap_at_k_divides_by_k() -> None:
    assert overlap_at(list("abc"), list("bd"), 2) == 0.5  # {a, b} & {b, d}
    assert overlap_at(list("abc"), list("bd"), 10) == 0.1  # short lists still divide by k
    assert overlap_at(list("abc"), list("cba"), 3) == 1.0


def test_mean_pairwise_counts_one_sided_queries_as_no_overlap() -> None:
    lists = {"lexical": {"q1": list("abc"), "q2": list("abc"), "q3": list("abc")},
             "local": {"q1": list("abc"), "q2": list("xyz")}}
    qids = ["q1", "q2", "q3", "q4"]  # q3: lexical only (0); q4: neither (left out)
    means = mean_pairwise(lists, qids, lambda a, b: rbo(a, b, 0.9))
    assert means == {("lexical", "local"): pytest.approx((1 + 0 + 0) / 3)}


# -- complementarity and case study ----------------------------------------------------------
def test_complementarity_counts_relevant_documents_only_one_expert_finds() -> None:
    qrels = {"q1": {"d1": 1, "d2": 2, "n": 0}, "q2": {"d3": 1}, "q3": {"n": 0}}
    lists = {"lexical": {"q1": ["d1", "d2", "n"], "q2": ["x"]},
             "local": {"q1": ["d2", "x"], "q2": ["d3"]},
             "global": {"q1": ["z"], "q2": ["d3"]}}
    out = complementarity(lists, qrels, k=100)
    # lexical: d1 (alone), d2 (local has it); local: d2, d3 (global has d3); global: d3
    assert out == {"lexical": Complement(2, 1), "local": Complement(2, 0),
                   "global": Complement(1, 0)}
    assert out["lexical"].share == 0.5 and Complement(0, 0).share is None
    # the cut-off applies to every expert: lexical's top 1 holds d1 (d2 is 2nd) on q1 only
    assert complementarity(lists, qrels, k=1)["lexical"] == Complement(1, 1)


def test_first_relevant_rank_within_depth() -> None:
    assert first_relevant(["x", "d2", "d1"], {"d1", "d2"}, 10) == 2
    assert first_relevant(["x", "y", "d1"], {"d1"}, 2) is None
    assert first_relevant([], {"d1"}, 2) is None


def test_disagreement_is_the_spread_of_reciprocal_ranks() -> None:
    qrels = {q: {"r": 1} for q in ("qa", "qb", "qc", "qd", "qe", "qf")}
    qrels["qg"] = {"r": 0}  # nothing relevant: never a case
    lists = {
        "lexical": {"qa": ["r"], "qb": ["r"], "qc": ["x", "r"], "qd": ["r"], "qe": ["x", "r"],
                    "qf": ["r"], "qg": ["r"]},
        "local": {"qa": ["x"], "qb": ["x", "x2", "x3", "r"], "qc": ["r"], "qd": ["r"],
                  "qf": ["x", "r"], "qg": ["x"]},
    }
    # spreads: qa 1 (worst: beyond depth), qb 1 - 1/4, qc 1/2 (worst 2), qd 0 (agree),
    # qe 1/2 (local has nothing: worst beyond depth), qf 1/2 (worst 2)
    cases = disagreements(lists, qrels, depth=10, n=10)
    assert [q for q, _ in cases] == ["qa", "qb", "qe", "qc", "qf"]
    assert [s for _, s in cases] == pytest.approx([1, 0.75, 0.5, 0.5, 0.5])
    assert [q for q, _ in disagreements(lists, qrels, depth=10, n=2)] == ["qa", "qb"]
    # with depth 3, local's rank 4 on qb is beyond reach: spread 1, tied with qa, qa first
    assert disagreements(lists, qrels, depth=3, n=2) == [("qa", 1.0), ("qb", 1.0)]


def test_parse_named_runs() -> None:
    assert parse_named_runs(["local=b.trec", "lexical = a.trec"], "--expert-runs",
                            ["lexical", "local", "global"]) == {"local": "b.trec",
                                                                "lexical": "a.trec"}
    assert parse_named_runs(["sum=s.trec"], "--fused") == {"sum": "s.trec"}
    with pytest.raises(ValueError, match="given twice"):
        parse_named_runs(["sum=a", "sum=b"], "--fused")


# -- the command -----------------------------------------------------------------------------
# Four queries, each with one relevant document d<i>; n* are not relevant.
RUNS = {
    "lexical": {"q1": ["d1", "n1", "n2"], "q2": ["n1", "n2", "d2"], "q3": ["d3", "n1", "n2"],
                "q4": ["n3", "d4", "n1"]},
    "local": {"q1": ["n1", "n2", "n3"], "q2": ["d2", "n1", "n2"], "q3": ["d3", "n2", "n1"],
              "q4": ["n1", "d4", "n2"]},
    "global": {"q1": ["n2", "n3", "n4"], "q2": ["n1", "d2", "n3"], "q3": ["d3", "n1", "n2"],
               "q4": ["d4", "n1", "n2"]},
    "sum": {q: [f"d{q[1]}", "n1", "n2"] for q in ("q1", "q2", "q3", "q4")},
}


def write_run(path: Path, hits: dict[str, list[str]]) -> Path:
    write_trec_run({qid: {doc: float(len(docs) - r) for r, doc in enumerate(docs)}
                    for qid, docs in hits.items()}, path)
    return path


@pytest.fixture
def toy(tmp_path: Path) -> dict[str, Path]:
    """A BEIR folder (d1 titled, d2 untitled, four judged queries) and the four runs."""
    root = tmp_path / "toy"
    root.mkdir()
    docs = [{"_id": "d1", "title": "Stomach stapling cost", "text": "costs 20,000 dollars"},
            {"_id": "d2", "title": "", "text": "GPS satellites circle the Earth " * 5}]
    docs += [{"_id": d, "title": f"title of {d}", "text": "x"}
             for d in ("d3", "d4", "n1", "n2", "n3", "n4")]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(1, 5)))
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(1, 5)))
    return {"root": root, **{name: write_run(tmp_path / f"{name}.trec", hits)
                             for name, hits in RUNS.items()}}


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table(text: str, corner: str, index: int = 0) -> dict[str, list[str]]:
    """The ``index``-th Markdown table whose header starts with ``corner``: row name -> cells."""
    blocks = [b for b in text.split("\n\n")
              if b.startswith("|") and cells(b.splitlines()[0])[0] == corner]
    return {cells(line)[0]: cells(line)[1:] for line in blocks[index].splitlines()[2:]}


def test_cli_writes_table_overlap_cases_and_png(toy, tmp_path, capsys) -> None:
    out, plot = tmp_path / "came.md", tmp_path / "came.png"
    root = toy["root"]
    assert analyze_main(["came", "--expert-runs", f"lexical={toy['lexical']}",
                         f"local={toy['local']}", f"global={toy['global']}",
                         "--fused", f"sum={toy['sum']}", "--qrels", f"{root}:test",
                         "--topics", f"{root}:test", "--corpus", str(root), "--cases", "2",
                         "--output", str(out), "--plot", str(plot), "--quiet"]) == 0
    text = out.read_text()
    assert text.strip() in capsys.readouterr().out
    assert plot.read_bytes()[:8] == PNG_MAGIC
    assert not list(tmp_path.glob(".*.tmp-*"))  # atomic writes leave no temporaries

    # Table 3: nDCG@10 = mean of 1/log2(rank + 1); lexical (ranks 1, 3, 1, 2) is the best expert.
    # lexical: (1 + 0.5 + 1 + 0.6309) / 4; local: (0 + 1 + 1 + 0.6309) / 4; sum: all at rank 1.
    assert "best single expert by ndcg@10, lexical" in text
    metrics = table(text, "run")
    assert list(metrics) == ["lexical (baseline)", "local", "global", "sum"]
    assert metrics["lexical (baseline)"] == ["0.7827", "1.0000", "1.0000"]  # finds all four
    assert metrics["local"][0].startswith("0.6577 (p=")
    assert metrics["sum"][0].startswith("1.0000") and "(p=" in metrics["sum"][0]
    assert metrics["sum"][1].startswith("1.0000")

    # RBO matrix: symmetric, 1 on the diagonal, the mean of per-query RBO_ext (p = 0.9).
    matrix = table(text, "RBO")
    expected = sum(rbo(RUNS["lexical"][q], RUNS["local"][q], 0.9) for q in RUNS["sum"]) / 4
    assert matrix["lexical"][1] == f"{expected:.3f}" == matrix["local"][0]
    assert [matrix[n][i] for i, n in enumerate(matrix)] == ["1.000"] * 3
    assert "p = 0.9" in text and "top 1000" in text
    # top-10 overlap lexical / local: (2 + 3 + 3 + 2) / 10 / 4
    assert table(text, "pair")["lexical / local"][0] == "0.250"
    # complementarity: only lexical finds d1; every expert finds d2, d3, d4
    complement = table(text, "expert")
    assert complement["lexical"] == ["4", "1", "25.00%"] and complement["local"] == ["3", "0",
                                                                                     "0.00%"]
    assert "find 4 of the 4 relevant documents" in text

    # Case study: q1 (only lexical, rank 1: spread 1), then q2 (ranks 3, 1, 2: spread 2/3).
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings == ["### 1. q1: query 1", "### 2. q2: query 2"]
    case1, case2 = table(text, "run", 1), table(text, "run", 2)
    assert "Relevant: d1 (Stomach stapling cost)." in text
    assert case1["lexical"] == ["1", "d1 (Stomach stapling cost), n1 (title of n1), "
                                     "n2 (title of n2)"]
    assert case1["local"][0] == "-" and case1["global"][0] == "-" and case1["sum"][0] == "1"
    assert [case2[n][0] for n in RUNS] == ["3", "1", "2", "1"]
    assert "Disagreement 0.667" in text
    assert "d2 (GPS satellites circle the Earth GPS satellites circle the…)" in text  # snippet


def test_cli_without_fused_topics_or_corpus(toy, capsys) -> None:
    root = toy["root"]
    assert analyze_main(["came", "--expert-runs", f"local={toy['local']}",
                         f"global={toy['global']}", "--qrels", f"{root}:test",
                         "--metrics", "recall@2", "--depth", "1", "--quiet"]) == 0
    text = capsys.readouterr().out
    # recall@2: local (0, 1, 1, 1) = global (0, 1, 1, 1): a tie goes to the first given
    assert "best single expert by recall@2, local" in text
    assert table(text, "run")["global"][0] == "0.7500 (p=1.000)"
    # depth 1: only rank 1 counts; q2 (local 1, global '-') and q4 (global 1, local '-')
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings == ["### 1. q2", "### 2. q4"]
    assert "find 3 of the 4 relevant documents" in text  # neither has d1
    assert "Fused" not in text and list(table(text, "RBO")) == ["local", "global"]


def test_cli_says_when_no_query_is_disputed(toy, tmp_path, capsys) -> None:
    same = write_run(tmp_path / "same.trec", RUNS["lexical"])
    assert analyze_main(["came", "--expert-runs", f"lexical={toy['lexical']}", f"local={same}",
                         "--qrels", f"{toy['root']}:test", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "No query on which the experts disagree." in text
    assert table(text, "RBO")["lexical"] == ["1.000", "1.000"]


@pytest.mark.parametrize("experts, message", [
    (["lexical=LEX", "sparse=LOC"], "unknown expert 'sparse'; valid: lexical, local, global"),
    (["lexical=LEX"], "need at least two of lexical, local, global; got lexical"),
    (["lexical=LEX", "local=missing.trec"], "--expert-runs local: run file not found"),
    (["lexical=LEX", "local=OTHER"], "none of its 1 queries is in the qrels"),
    (["lexical", "local=LOC"], "expected NAME=RUN_FILE"),
    (["lexical=LEX", "local=LOC", "--fused", "local=LEX"], "--fused: local is already an expert"),
    (["lexical=LEX", "local=LOC", "--fused", "sum=gone.trec"], "--fused sum: run file not found"),
    (["lexical=LEX", "local=LOC", "--rbo-p", "1"], "--rbo-p must be in (0, 1)"),
    (["lexical=LEX", "local=LOC", "--metrics", "ndcg"], "unknown metric 'ndcg'"),
])
def test_cli_errors_are_one_line(toy, tmp_path, capsys, experts, message) -> None:
    other = write_run(tmp_path / "other.trec", {"q99": ["d1"]})
    paths = {"LEX": toy["lexical"], "LOC": toy["local"], "OTHER": other}

    def fill(arg: str) -> str:  # NAME=LEX -> NAME=<the lexical run's path>
        name, _, key = arg.partition("=")
        return f"{name}={paths[key]}" if key in paths else arg

    argv = ["came", "--expert-runs", *map(fill, experts), "--qrels", f"{toy['root']}:test",
            "--quiet"]
    assert run_main(analyze_main, argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err


# -- the competition during training ----------------------------------------------------------
def _log(path: Path, weights: list[tuple[float, float, float]]) -> Path:
    path.write_text("".join(json.dumps(
        {"step": i + 1, "loss": 1.0, **{f"weight_{e}": w for e, w in zip(("lexical", "local",
                                                                          "global"), ws)},
         **{f"loss_{e}": float(i) for e in ("lexical", "local", "global")}}) + "\n"
        for i, ws in enumerate(weights)))
    return path


def test_competition_summary_bins_steps_and_counts_the_leader(tmp_path) -> None:
    from pyserini_moe.analyze.came import competition_summary, read_competition

    rows = read_competition(_log(tmp_path / "log", [(1, 1, 1)] * 2 + [(0.6, 0.2, 0.2),
                                                                      (0.2, 0.2, 0.6)]))
    first, second = competition_summary(rows, bins=2)
    assert (first["from_step"], first["to_step"], second["from_step"]) == (1, 2, 3)
    assert first["weight_lexical"] == 1 and first["leads_lexical"] == 0  # standardized: a tie
    assert second["weight_lexical"] == pytest.approx(0.4)
    assert second["leads_lexical"] == second["leads_global"] == 0.5
    assert second["leads_local"] == 0 and second["loss_local"] == 2.5


def test_competition_cli_writes_table_and_png(tmp_path, capsys) -> None:
    log = _log(tmp_path / "train_log.jsonl", [(1, 1, 1), (0.5, 0.3, 0.2)])
    out, png = tmp_path / "c.md", tmp_path / "c.png"
    assert run_main(analyze_main, ["came-competition", "--log", f"came={log}", "--bins", "2",
                                   "--output", str(out), "--plot", str(png)]) == 0
    text = out.read_text()
    assert "| 2-2 | 0.500 | 0.300 | 0.200 |" in text and "### came" in text
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert run_main(analyze_main, ["came-competition", "--log", f"x={tmp_path / 'nope'}"]) != 0
    (tmp_path / "other.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    assert run_main(analyze_main, ["came-competition", "--log",
                                   f"x={tmp_path / 'other.jsonl'}"]) != 0
    assert "not a CAME training log" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--corpus", "--topics"])
def test_a_corpus_or_topics_of_other_documents_is_refused(toy, tmp_path, capsys, flag) -> None:
    """The case study showed ids alone, as if no corpus or topics were given."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "corpus.jsonl").write_text(json.dumps({"_id": "z1", "text": "z"}) + "\n")
    (other / "queries.jsonl").write_text(json.dumps({"_id": "z1", "text": "z"}) + "\n")
    (other / "qrels").mkdir()
    (other / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nz1\tz1\t1\n")
    given = str(other) if flag == "--corpus" else f"{other}:test"
    argv = ["came", "--expert-runs", f"lexical={toy['lexical']}", f"local={toy['local']}",
            "--qrels", f"{toy['root']}:test", flag, given, "--cases", "2", "--quiet"]
    assert run_main(analyze_main, argv) == 2
    assert f"{flag} {given} holds none of the" in capsys.readouterr().err
