"""``regress --record``: measured values written back into the file, the rest of it kept."""

from pathlib import Path

import pytest

from pyserini_moe import regress
from pyserini_moe.errors import UserError
from pyserini_moe.lab.record import record
from pyserini_moe.lab.regress import load_regression, run_regression

QRELS = "q1 0 d1 1\nq2 0 d2 1\n"
# Seed 1 (and the unseeded run): q1 finds d1 at rank 1, q2 d2 at rank 2 -> MRR@10 0.75,
# recall@1 0.5. Seed 2 puts q2's d2 first -> MRR@10 1.0, recall@1 1.0.
RUN = "q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\nq2 Q0 d1 1 3.0 t\nq2 Q0 d2 2 2.0 t\n"
RUN2 = RUN.replace("q2 Q0 d1 1 3.0", "q2 Q0 d1 1 1.0")

FILE = """\
name: r
# a comment of the file, kept
description: >
  folded text
  over two lines
conditions:
  - name: inline  # a comment after the name
    run: {files}/run.trec
    qrels: {files}/qrels.txt
    metrics: {{mrr@10: 0.5, recall@2: {{expected: 0.1, tolerance: 0.01}}}}  # kept too
    tolerance: 0.01
    source: "hand"
  - name: block
    run: {files}/run.trec
    qrels: {files}/qrels.txt
    metrics:
      mrr@10: null

    source: "hand, and kept"
  - name: seeded
    seeds: [1, 2]
    run: {files}/made-s{{seed}}.trec
    qrels: {files}/qrels.txt
    metrics:
      mrr@10: {{expected: null, tolerance: 0.01}}
      recall@1:
        {{expected: 0.5, sd: 0.0,
         seeds: [0.5, 0.5], tolerance: 0.3}}
    source: "hand"
"""


@pytest.fixture
def path(tmp_path: Path) -> Path:
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "run.trec").write_text(RUN)
    (tmp_path / "made-s1.trec").write_text(RUN)
    (tmp_path / "made-s2.trec").write_text(RUN2)
    target = tmp_path / "r.yaml"
    target.write_text(FILE.format(files=tmp_path))
    return target


def test_measured_values_are_written_in_each_entry_s_own_style(path):
    before = path.read_text().split("\n")
    reg = load_regression(path)
    rows, _ = run_regression(reg, path.parent / "work", evaluate_only=True)
    assert [r.status for r in rows] == ["FAIL", "FAIL", "UNSET", "UNSET", "OK"]
    assert record(reg, rows) == (["inline", "block", "seeded"], [])
    after = path.read_text().split("\n")
    assert ("    metrics: {mrr@10: 0.7500, recall@2: {expected: 1.0000, tolerance: 0.01}}"
            "  # kept too") in after
    assert "      mrr@10: 0.7500" in after
    # a metric not measured before gets the spread once its seeds are in; a numeric tolerance stays
    assert ("      mrr@10: {expected: 0.8750, sd: 0.1768, seeds: [0.7500, 1.0000], "
            "tolerance: spread}") in after
    assert ("      recall@1: {expected: 0.7500, sd: 0.3536, seeds: [0.5000, 1.0000], "
            "tolerance: 0.3}") in after
    # every other line as it was: comments, the folded description, the blank line, the sources
    rewritten = ("metrics", "expected", "mrr@10", "recall@1", "seeds: [0.5")
    kept = [line for line in before if not any(text in line for text in rewritten)]
    assert [line for line in after if line in kept] == kept
    assert len(after) == len(before) - 2  # the wrapped recall@1 entry is one line now
    rows, _ = run_regression(load_regression(path), path.parent / "work", evaluate_only=True)
    assert [r.status for r in rows] == ["OK"] * 5


def test_a_seed_re_run_alone_replaces_its_value_where_the_others_are_recorded(path):
    reg = load_regression(path)
    rows, _ = run_regression(reg, path.parent / "work", only_seeds=[2])
    assert {r.status for r in rows if r.condition == "seeded"} == {"SEEDS"}
    text = path.read_text()
    # mrr@10 has no recorded values for seed 1 to keep: the condition is left whole
    recorded, left = record(reg, [r for r in rows if r.condition == "seeded"])
    assert (recorded, left) == ([], ["seeded"])
    assert path.read_text() == text
    path.write_text(text.replace("mrr@10: {expected: null, tolerance: 0.01}",
                                 "mrr@10: {expected: 0.5, sd: 0.0, seeds: [0.5, 0.5], "
                                 "tolerance: spread}"))
    reg = load_regression(path)
    rows, _ = run_regression(reg, path.parent / "work", only_seeds=[2])
    assert record(reg, [r for r in rows if r.condition == "seeded"]) == (["seeded"], [])
    after = path.read_text()
    # seed 2 measured (1.0), seed 1 kept as recorded (0.5); the tolerances as written
    assert ("      mrr@10: {expected: 0.7500, sd: 0.3536, seeds: [0.5000, 1.0000], "
            "tolerance: spread}") in after
    assert ("      recall@1: {expected: 0.7500, sd: 0.3536, seeds: [0.5000, 1.0000], "
            "tolerance: 0.3}") in after


def test_a_row_not_measured_is_left_as_it_was(path):
    reg = load_regression(path)
    (path.parent / "run.trec").unlink()  # the unseeded rows: ERROR, nothing to record
    rows, _ = run_regression(reg, path.parent / "work", evaluate_only=True)
    assert record(reg, rows) == (["seeded"], ["inline", "block"])
    assert "mrr@10: 0.5, recall@2" in path.read_text()


def test_a_comment_inside_the_metrics_is_refused_and_the_file_left_whole(path):
    path.write_text(path.read_text().replace("      mrr@10: null\n",
                                             "      # why null\n      mrr@10: null\n"))
    _refused_whole(path, "'block': a comment inside its metrics would be lost")


def _refused_whole(path: Path, match: str) -> None:
    """Recording the file's measured values is refused, the file left as it was."""
    text = path.read_text()
    reg = load_regression(path)
    rows, _ = run_regression(reg, path.parent / "work", evaluate_only=True)
    with pytest.raises(UserError, match=match):
        record(reg, rows)
    assert path.read_text() == text


def test_the_command_line_records_and_refuses_what_measures_nothing(path, capsys):
    work = ["--work-dir", str(path.parent / "w")]
    assert regress.main([str(path), *work, "--evaluate-only", "--record"]) == 1  # old values failed
    out = capsys.readouterr().out
    assert f"recorded in {path}: inline, block, seeded" in out
    assert regress.main([str(path), *work, "--evaluate-only"]) == 0
    with pytest.raises(UserError, match="cannot go with --dry-run"):
        regress.main([str(path), *work, "--record", "--dry-run"])


def test_a_metric_s_own_comment_stays_on_its_line_and_one_inside_a_wrapped_value_is_refused(
        path):
    path.write_text(path.read_text().replace("      mrr@10: null\n",
                                             "      mrr@10: null  # why null\n"))
    reg = load_regression(path)
    rows, _ = run_regression(reg, path.parent / "work", evaluate_only=True)
    record(reg, rows)
    assert "      mrr@10: 0.7500  # why null" in path.read_text().split("\n")
    path.write_text(path.read_text().replace(
        "{expected: 0.7500, sd: 0.3536, seeds: [0.5000, 1.0000], tolerance: 0.3}",
        "{expected: 0.7500, sd: 0.3536,\n         seeds: [0.5000, 1.0000], tolerance: 0.3}  # why"))
    _refused_whole(path, "'seeded': a comment inside its metrics would be lost")
