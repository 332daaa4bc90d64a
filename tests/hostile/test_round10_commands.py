"""Cases of the tenth hostile pass in index and analyze: index flags no kind of the build reads,
analyze checkpoints' cache served after its qrels changed or when damaged, a metric typo found
after the indexing, a user's Matplotlib figure taken for analyze's plot, ``--seed`` read by
nothing, runs covering part of the judged queries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyserini_moe.analyze.common import PLOT_KEY, PLOT_MARK, figure, save_png
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli.analyze import main as analyze_main
from pyserini_moe.errors import UserError
from pyserini_moe.eval.outputs import png_text
from pyserini_moe.index.encoded import BuildSettings
from pyserini_moe.lab import checkpoints


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """Two runs, one holding one of the two judged queries, and the qrels."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 a\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d4 1 9.0 b\nq2 Q0 d2 1 9.0 b\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return tmp_path


# H10-24: BM25 index with a model's flags ----------------------------------------------------------

@pytest.mark.parametrize("flags, said", [
    (["--pooling", "cls"], "--pooling applies to dense, impact and multivector indexes"),
    (["--passage-prefix", "p: "], "--passage-prefix applies to"),
    (["--faiss", "hnsw8", "--batch-size", "3", "--max-length", "4"],
     "--batch-size and --max-length apply to dense, impact and multivector indexes: BM25 has "
     "none (Lucene indexes the text itself); --faiss applies to dense and multivector indexes"),
])
def test_bm25_index_refuses_model_flags(tiny_corpus, tmp_path, capsys, error_line, flags,
                                        said) -> None:
    argv = ["--retriever", "bm25", "--corpus", str(tiny_corpus), "--index",
            str(tmp_path / "i"), *flags]
    error = error_line(index_cli.main, argv, capsys)
    assert error.startswith("error: building bm25: ") and said in error
    assert not (tmp_path / "i").exists()


def test_bm25_index_keeps_its_defaults_and_its_own_flags(tiny_corpus, tmp_path) -> None:
    assert run_main(index_cli.main, ["--retriever", "bm25", "--corpus", str(tiny_corpus),
                                     "--index", str(tmp_path / "i"), "--threads", "2",
                                     "--layout", "multifield", "--quiet",
                                     "--faiss", "flat"]) == 0  # the default, spelt out


# H10-25: impact --faiss, dense --quantization --------------------------------------------------

@pytest.mark.parametrize("kind, flags, setting, said", [
    ("impact", ["--faiss", "hnsw8"], {"faiss": "hnsw8"},
     "--faiss applies to dense and multivector indexes"),
    ("dense", ["--quantization", "50"], {"quantization": 50},
     "--quantization applies to impact indexes"),
])
def test_model_index_refuses_another_kinds_flags(tiny_corpus, tmp_path, capsys, error_line,
                                                 kind, flags, setting, said) -> None:
    argv = ["--retriever", kind, "--corpus", str(tiny_corpus), "--index", str(tmp_path / "i"),
            "--encoder", "x", *flags]
    assert error_line(index_cli.main, argv, capsys) == \
        f"error: building {kind}: {said}; leave it out"
    with pytest.raises(UserError, match=said):
        BuildSettings("c", "m", {kind: "d"}, **setting)
    BuildSettings("c", "m", {"dense": "d", "impact": "i"}, faiss="hnsw8", quantization=50)


# H10-30, H10-31, H10-32: analyze checkpoints' cache -----------------------------------------------

def _fake_training(root: Path) -> Path:
    (root / "snapshots" / "step-2").mkdir(parents=True)
    (root / "snapshots" / "step-2" / "model.bin").write_bytes(b"weights")
    (root / "train_log.jsonl").write_text(json.dumps({"step": 2, "val_loss": 0.5}) + "\n")
    (root / "dev_topics.tsv").write_text("q0\twhat\n")
    (root / "dev_qrels.txt").write_text("q0 0 d0 1\n")
    return root


def _counting() -> tuple[list[int], object]:
    calls: list[int] = []

    def searcher(*_args: object) -> dict:
        calls.append(1)
        return {"dev": {"ndcg@10": float(len(calls))}}
    return calls, searcher


def test_checkpoints_cache_is_keyed_by_the_qrels_contents(tiny_corpus, tmp_path) -> None:
    folder = _fake_training(tmp_path / "t")
    calls, searcher = _counting()
    evaluate = lambda: checkpoints.evaluate_training(  # noqa: E731
        folder, str(tiny_corpus), [], ["ndcg@10"], searcher=searcher)
    evaluate()
    evaluate()
    assert len(calls) == 1  # cached
    (folder / "dev_qrels.txt").write_text("q0 0 d1 1\n")  # same name, other judgments
    assert evaluate()[0].metrics["dev"]["ndcg@10"] == 2.0 and len(calls) == 2
    (folder / "snapshots" / "step-2" / "model.bin").write_bytes(b"other weights")
    evaluate()
    assert len(calls) == 3


@pytest.mark.parametrize("damage", ["", '{"settings": {"corpus": "tc", "te'])
def test_checkpoints_rewrites_a_damaged_cache(tiny_corpus, tmp_path, capsys, damage) -> None:
    folder = _fake_training(tmp_path / "t")
    cache = folder / "snapshots" / checkpoints.CACHE_FILE
    cache.write_text(damage)
    calls, searcher = _counting()
    checkpoints.evaluate_training(folder, str(tiny_corpus), [], ["ndcg@10"], searcher=searcher)
    assert len(calls) == 1 and "not a readable evaluation cache" in capsys.readouterr().err
    assert json.loads(cache.read_text())["steps"]["2"]["metrics"] == {"dev": {"ndcg@10": 1.0}}


@pytest.mark.parametrize("flag", ["--metric", "--dev-metric"])
def test_checkpoints_refuses_an_unknown_metric_first(tmp_path, capsys, error_line, flag) -> None:
    argv = ["checkpoints", "--train-dir", str(tmp_path / "nowhere"), "--corpus", "tc", flag,
            "ndcg@0", "--quiet"]
    assert error_line(analyze_main, argv, capsys).startswith(
        f"error: {flag}: unknown metric 'ndcg@0'")


# H10-38: a user's Matplotlib figure as --plot ----------------------------------------------------

def _matplotlib_png(path: Path, **metadata: str) -> None:
    fig, (ax,) = figure()
    ax.plot([1, 2], [3, 4])
    fig.savefig(path, format="png", metadata=metadata or None)


def test_analyze_refuses_a_users_matplotlib_figure(ws, capsys, error_line) -> None:
    figure_path = ws / "fig.png"
    _matplotlib_png(figure_path)
    before = figure_path.read_bytes()
    argv = ["expert-count", "--runs", f"3={ws / 'b.trec'}", "--qrels", str(ws / "qrels.txt"),
            "--quiet", "--plot", str(figure_path)]
    assert "is not a file analyze wrote" in error_line(analyze_main, argv, capsys)
    assert figure_path.read_bytes() == before
    own = ws / "own.png"
    fig, _ = figure()
    save_png(fig, own)
    assert png_text(own)[PLOT_KEY] == PLOT_MARK
    assert run_main(analyze_main, [*argv[:-1], str(own)]) == 0  # its own plot: replaced


def test_committed_plots_carry_the_analyze_entry() -> None:
    plots = sorted(Path(__file__).parents[2].glob("docs/results/*.png"))
    assert plots and all(png_text(p).get(PLOT_KEY) == PLOT_MARK for p in plots)


# H10-40: --seed with nothing drawn at random ----------------------------------------------------

def test_seed_read_by_nothing_is_refused(tmp_path, capsys, error_line) -> None:
    experts = ["experts", "--model", str(tmp_path), "--corpus", str(tmp_path), "--seed", "3"]
    assert error_line(analyze_main, experts, capsys) == (
        "error: --seed 3: nothing in this analysis is drawn at random (only --sample N "
        "would); leave --seed out")
    divergence = ["divergence", "--model", f"a={tmp_path}", "--corpus", "c", "--topics", "t",
                  "--qrels", "q", "--sample", "0", "--seed", "7"]
    assert "only --sample N or --plot (t-SNE) would" in error_line(analyze_main, divergence,
                                                                   capsys)


# H10-41: expert-count with runs covering part of the judged queries ------------------------------

def test_expert_count_says_judged_queries_a_run_lacks(ws, capsys) -> None:
    argv = ["expert-count", "--runs", f"1={ws / 'a.trec'}", f"3={ws / 'b.trec'}", "--qrels",
            str(ws / "qrels.txt"), "--quiet"]
    assert run_main(analyze_main, argv) == 0
    err = capsys.readouterr().err
    assert f"--runs 1={ws / 'a.trec'}: 1 of 2 judged queries have no results (e.g. q2); they " \
           "count as 0" in err
    assert "--runs 3=" not in err
