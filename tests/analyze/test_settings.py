"""The analyses' settings (issue 38): each analysis takes a frozen dataclass of what it reads,
which refuses a bad setting in one line when it is made, before any model or run is read; the
command line builds it, so no analysis module sees argparse."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import pyserini_moe.analyze
from pyserini_moe.analyze import came, cotmote, sbmoe, taser
from pyserini_moe.errors import UserError
from pyserini_moe.lab import checkpoints

CAME = {"expert_runs": ["lexical=a.trec", "local=b.trec"], "qrels": "scifact:test"}
PAIRS = {"corpus": "scifact", "topics": "scifact:test", "qrels": "scifact:test"}


@pytest.mark.parametrize("settings, given, message", [
    (taser.RoutingAnalysis, {"model": "m", "corpus": "c", "topics": "t", "sample": -1},
     "--sample must be >= 0"),
    (sbmoe.ExpertsAnalysis, {"model": "m"}, "experts: give --corpus, --topics or both"),
    (sbmoe.ExpertsAnalysis, {"model": "m", "corpus": "c", "threshold": 101.0},
     "--threshold is a percentage in [0, 100], got 101.0"),
    (sbmoe.ExpertsAnalysis, {"model": "m", "topics": "t", "min_docs": 0},
     "--min-docs must be >= 1, got 0"),
    (sbmoe.ExpertCountAnalysis, {"runs": ["six=a.trec"], "qrels": "q"},
     "expected EXPERTS=RUN_FILE"),
    (sbmoe.ExpertCountAnalysis, {"runs": ["3=a.trec", "3=b.trec"], "qrels": "q"},
     "--runs: 3 experts given twice"),
    (sbmoe.ExpertCountAnalysis, {"runs": ["3=a.trec"], "qrels": "q", "metrics": ["ndcg"]},
     "unknown metric 'ndcg'"),
    (cotmote.DivergenceAnalysis, {"model": ["a=x", "a=y"], **PAIRS},
     "--model name 'a' given twice"),
    (cotmote.DivergenceAnalysis, {"model": ["a="], **PAIRS}, "expected NAME=MODEL_FOLDER"),
    (cotmote.DivergenceAnalysis, {"model": ["a=x"], **PAIRS, "sample": -2},
     "--sample must be >= 0"),
    (came.CameAnalysis, {**CAME, "expert_runs": ["lexical=a.trec"]},
     "need at least two of lexical, local, global; got lexical"),
    (came.CameAnalysis, {**CAME, "expert_runs": ["lexical=a", "sparse=b"]},
     "unknown expert 'sparse'"),
    (came.CameAnalysis, {**CAME, "fused": ["local=c.trec"]},
     "--fused: local is already an expert's name"),
    (came.CameAnalysis, {**CAME, "depth": 0}, "--depth must be >= 1, got 0"),
    (came.CameAnalysis, {**CAME, "cases": -1}, "--cases must be >= 0, got -1"),
    (came.CameAnalysis, {**CAME, "rbo_p": 1.0}, "--rbo-p must be in (0, 1), got 1.0"),
    (came.CameAnalysis, {**CAME, "metrics": ["ndcg"]}, "unknown metric 'ndcg'"),
    (came.CompetitionAnalysis, {"log": ["train_log.jsonl"]}, "--log 'train_log.jsonl': expected"),
    (came.CompetitionAnalysis, {"log": ["came=log.jsonl"], "bins": 0},
     "--bins must be >= 1, got 0"),
    (checkpoints.CheckpointsAnalysis, {"train_dir": ["1=a", "1=b"], "corpus": "c"},
     "the label '1' is given twice"),
    (checkpoints.CheckpointsAnalysis, {"train_dir": ["a"], "corpus": "c", "kind": "bm25"},
     "--kind 'bm25': choose from dense, impact, multivector"),
])
def test_a_bad_setting_is_refused_in_one_line_when_the_settings_are_made(settings, given,
                                                                         message) -> None:
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        settings(**given)
    assert "\n" not in str(caught.value)


def test_good_settings_are_kept_as_given_and_frozen() -> None:
    made = [taser.RoutingAnalysis("m", "c", "t"), sbmoe.ExpertsAnalysis("m", topics="t"),
            sbmoe.ExpertCountAnalysis(["6=a.trec", "3=b.trec"], "q"),
            cotmote.DivergenceAnalysis(["a=x", "y"], **PAIRS), came.CameAnalysis(**CAME),
            came.CompetitionAnalysis(["came=log.jsonl"]),
            checkpoints.CheckpointsAnalysis(["42=a"], "c")]
    for settings in made:
        with pytest.raises(dataclasses.FrozenInstanceError):
            settings.output = "elsewhere.md"
    assert made[4].expert_paths() == {"lexical": "a.trec", "local": "b.trec"}
    assert made[4].fused_paths() == {} and made[4].metrics == came.DEFAULT_METRICS
    assert made[5].log_paths() == {"came": "log.jsonl"}


def test_no_analysis_module_imports_argparse() -> None:
    folder = Path(pyserini_moe.analyze.__file__).parent
    modules = sorted([*folder.glob("*.py"), folder.parent / "lab" / "checkpoints.py"])
    assert {"came.py", "checkpoints.py", "cotmote.py", "sbmoe.py", "taser.py"} <= {
        m.name for m in modules}
    for module in modules:
        imported = set()
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        assert "argparse" not in imported, module.name
