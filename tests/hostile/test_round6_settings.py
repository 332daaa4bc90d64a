"""Hostile pass 6: settings a command read and then ignored, or dropped for another (fuse's tuning
flags, search's fusion weights and Faiss settings, eval's --stat-test with seeds), one input
counted twice (a run in fuse or eval, a training folder in analyze checkpoints), and analyze
checkpoints' labels and warnings."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pyserini_moe import fuse
from pyserini_moe.cli import run_main
from pyserini_moe.cli.analyze import main as analyze_main
from pyserini_moe.cli.eval import seed_names
from pyserini_moe.errors import UserError
from pyserini_moe.eval import __main__ as eval_cli
from pyserini_moe.lab import checkpoints
from pyserini_moe.lab.checkpoints import check_seed, training_folders
from pyserini_moe.search.dispatch import SearchSettings

A = "q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\nq2 Q0 d2 1 1.0 t\n"
B = "q1 Q0 d2 1 9.0 t\nq1 Q0 d1 2 8.0 t\nq2 Q0 d1 1 4.0 t\n"
QRELS = "q1 0 d2 1\nq2 0 d2 1\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """Two runs, their qrels, and the same two systems' runs of dev queries dq1, dq2 (the same
    rankings of the fused queries are refused as dev runs, H13-29, H14-16), judged in the same
    qrels file."""
    dev_a, dev_b = (run.replace("q", "dq") for run in (A, B))
    for name, text in (("a", A), ("b", B), ("dev-a", dev_a), ("dev-b", dev_b)):
        (tmp_path / f"{name}.trec").write_text(text)
    (tmp_path / "qrels.txt").write_text(QRELS + QRELS.replace("q", "dq"))
    return tmp_path


def fuse_error(ws: Path, capsys, *extra: str, runs: tuple[str, ...] = ("a.trec", "b.trec")) -> str:
    """fuse's one error line (exit 2, no output written)."""
    out = ws / "fused.trec"
    code = run_main(fuse.main, ["--runs", *(str(ws / r) for r in runs), "--output", str(out),
                                *extra])
    assert code == 2 and not out.exists()
    return capsys.readouterr().err.strip()


def dev(ws: Path) -> list[str]:
    return ["--dev-runs", str(ws / "dev-a.trec"), str(ws / "dev-b.trec"), "--dev-qrels",
            str(ws / "qrels.txt")]


# fuse --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["rrf", "combsum", "came_sum"])
def test_fuse_refuses_a_metric_for_a_method_that_tunes_nothing(ws, capsys, method) -> None:
    """H6-40: --metric (even bogus@@) was accepted and ignored by every method."""
    assert fuse_error(ws, capsys, "--method", method, "--metric", "bogus@@") == \
        f"error: --method {method} does not use --metric"


def test_fuse_refuses_a_metric_without_dev_runs(ws, capsys) -> None:
    """H6-40: a tuning method given --metric but nothing to tune on."""
    assert fuse_error(ws, capsys, "--method", "hybrid", "--metric", "map") == (
        "error: --metric is the metric maximised on dev: give --dev-runs and --dev-qrels with "
        "it, or leave it out")


def test_fuse_checks_the_dev_metric_before_reading_a_run(ws, capsys) -> None:
    """H6-40: a bad metric is named before any run is read (the runs here do not exist)."""
    err = fuse_error(ws, capsys, "--method", "hybrid", "--metric", "bogus@@", "--dev-runs",
                     "nope1", "nope2", "--dev-qrels", "nope3", runs=("nope4", "nope5"))
    assert err.startswith("error: unknown metric 'bogus@@'")


@pytest.mark.parametrize("method", ["rrf", "combmnz"])
def test_fuse_refuses_dev_runs_for_a_method_that_tunes_nothing(ws, capsys, method) -> None:
    """H6-41: the dev runs and qrels were read, then ignored (the output was plain rrf)."""
    assert fuse_error(ws, capsys, "--method", method, *dev(ws)) == \
        f"error: --method {method} does not use --dev-runs, --dev-qrels"


@pytest.mark.parametrize("alpha", ["0.3", "0"])
def test_fuse_refuses_an_alpha_that_tuning_would_replace(ws, capsys, alpha) -> None:
    """H6-42: the given alpha was replaced by the tuned one without a word."""
    assert fuse_error(ws, capsys, "--method", "hybrid", "--alpha", alpha, *dev(ws)) == \
        "error: --alpha or --dev-runs (which tunes alpha), not both"


def test_fuse_refuses_an_alpha_of_zero_for_a_method_without_alpha(ws, capsys) -> None:
    """--alpha 0 equals False: it slipped through the check of settings a method ignores."""
    assert fuse_error(ws, capsys, "--method", "came_sum", "--alpha", "0") == \
        "error: --method came_sum does not use --alpha"


def test_fuse_tunes_alpha_on_its_dev_metric_and_keeps_pyserinis_default_otherwise(ws, capsys):
    out = ws / "fused.trec"
    argv = ["--runs", str(ws / "a.trec"), str(ws / "b.trec"), "--output", str(out),
            "--method", "hybrid"]
    assert run_main(fuse.main, [*argv, *dev(ws), "--metric", "map"]) == 0
    assert "tuned on dev: " in capsys.readouterr().err
    assert run_main(fuse.main, argv) == 0
    # no dev runs, no --alpha: Pyserini's 0.1; q1: d1 = 3 + 0.1 * 8, d2 = 2 + 0.1 * 9
    scores = {line.split()[2]: float(line.split()[4]) for line in out.read_text().splitlines()
              if line.startswith("q1 ")}
    assert scores == pytest.approx({"d1": 3.8, "d2": 2.9}, abs=1e-4)


def test_fuse_refuses_one_run_given_twice(ws, capsys) -> None:
    """H6-38: the same run twice was fused (weighing it double) without a word."""
    a = str(ws / "a.trec")
    assert fuse_error(ws, capsys, "--method", "rrf", runs=("a.trec", "a.trec")) == \
        f"error: --runs {a} is given twice: give each once"
    spelt = f"{ws}/./a.trec"
    (ws / "link.trec").symlink_to(ws / "a.trec")
    for other in (spelt, str(ws / "link.trec")):
        code = run_main(fuse.main, ["--runs", a, other, "--method", "rrf", "--output",
                                    str(ws / "fused.trec")])
        assert code == 2
        assert capsys.readouterr().err.strip() == \
            f"error: --runs {a} and --runs {other} are one run file: give each once"


def test_fuse_refuses_one_dev_run_given_twice(ws, capsys) -> None:
    out = ws / "fused.trec"
    code = run_main(fuse.main, ["--runs", str(ws / "a.trec"), str(ws / "b.trec"), "--output",
                                str(out), "--method", "hybrid", "--dev-runs",
                                str(ws / "dev-a.trec"), str(ws / "dev-a.trec"), "--dev-qrels",
                                str(ws / "qrels.txt")])
    assert code == 2 and "--dev-runs " in capsys.readouterr().err


# search settings --------------------------------------------------------------------------------

@pytest.mark.parametrize("fusion", ["rrf", "combsum", "combmnz", "came_sum", "exact"])
def test_fused_search_refuses_weights_its_fusion_does_not_read(fusion) -> None:
    """H6-55 (a TypeError after the whole search), H6-56 (exact: weights ignored)."""
    with pytest.raises(UserError, match=f"^--fusion-weights: --fusion {fusion} does not weigh "
                                        "the indexes \\(only linear and wsum do\\)"):
        SearchSettings(retriever="fused", index=["a", "b", "c"], fusion=fusion,
                       fusion_weights=[5.0, 0.0, 0.0])
    SearchSettings(retriever="fused", index=["a", "b"], fusion="wsum", fusion_weights=[1.0, 2.0])


def test_the_search_command_refuses_them_before_loading_anything(tmp_path, capsys) -> None:
    """H6-55: refused before any model or index is read (these indexes do not exist)."""
    from pyserini_moe.search import __main__ as search_cli

    code = run_main(search_cli.main, ["--retriever", "fused", "--index", str(tmp_path / "i1"),
                                      str(tmp_path / "i2"), "--topics", str(tmp_path / "t.tsv"),
                                      "--output", str(tmp_path / "run.trec"), "--fusion", "rrf",
                                      "--fusion-weights", "1", "2"])
    assert code == 2
    assert capsys.readouterr().err.startswith("error: --fusion-weights: --fusion rrf does not")


@pytest.mark.parametrize(("retriever", "setting", "flag"), [
    ("impact", {"ef_search": 5}, "--ef-search"),                  # H6-62
    ("impact", {"faiss_params": "nprobe=1"}, "--faiss-params"),   # H6-62
    ("dense", {"faiss_params": "nprobe=1"}, "--faiss-params"),    # dense reads --ef-search
    ("fused", {"ef_search": 5}, "--ef-search"),                   # experts are not given it
])
def test_a_search_refuses_faiss_settings_its_index_does_not_read(retriever, setting, flag):
    index = ["a", "b"] if retriever == "fused" else "a"
    article = "an" if retriever == "impact" else "a"
    with pytest.raises(UserError, match=f"^{flag}: not used by {article} {retriever} search"):
        SearchSettings(retriever=retriever, index=index, **setting)


def test_the_faiss_settings_that_are_read_stay_accepted() -> None:
    SearchSettings(retriever="dense", index="a", ef_search=64)
    SearchSettings(retriever="multivector", index="a", faiss_params="nprobe=4")
    SearchSettings(retriever="fused", index=["a", "b"], faiss_params="nprobe=4")


# eval -------------------------------------------------------------------------------------------

def eval_argv(ws: Path, *runs: str) -> list[str]:
    return ["--run", *runs, "--qrels", str(ws / "qrels.txt"), "--metrics", "ndcg@10"]


def test_seeds_in_folders_with_one_file_name_are_all_compared(ws, capsys) -> None:
    """H6-16: 'x=DIR/s*/run.trec' (work/detr-s42/run.trec style): a StopIteration traceback."""
    for seed, text in (("s1", A), ("s2", B), ("s3", A.replace("3.0", "0.5"))):
        (ws / seed).mkdir()
        (ws / seed / "run.trec").write_text(text)
    out = ws / "out.json"
    assert run_main(eval_cli.main, [*eval_argv(ws, f"x={ws}/s*/run.trec", str(ws / "b.trec")),
                                    "--output", str(out)]) == 0
    names = list(json.loads(out.read_text())["runs"])
    assert names == [f"x/{ws}/s1/run.trec", f"x/{ws}/s2/run.trec", f"x/{ws}/s3/run.trec",
                     "b.trec"]


def test_a_plain_run_named_like_a_seed_is_refused() -> None:
    """The guard that keeps the names apart: one name for two runs would replace one of them."""
    with pytest.raises(UserError, match="two runs are named 'x/a.trec'"):
        seed_names({"x/a.trec": ["x/a.trec"], "y/a.trec": ["y/a.trec"],
                    "x": ["z/a.trec", "z/b.trec"]})


def test_two_groups_of_the_same_files_are_refused(ws, capsys) -> None:
    """H6-19: two groups matching the same files were compared with each other (p = 1)."""
    pattern = f"{ws}/dev-*.trec"
    assert run_main(eval_cli.main, eval_argv(ws, f"a={pattern}", f"b={pattern}")) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --run a={ws}/dev-a.trec and --run b={ws}/dev-a.trec are one run file: give "
        "each once")


def test_one_run_under_two_spellings_is_refused(ws, capsys) -> None:
    """H6-23: dense.trec and ./dense.trec were compared with each other (p = 1)."""
    spelt = f"{ws}/./a.trec"
    assert run_main(eval_cli.main, eval_argv(ws, str(ws / "a.trec"), spelt)) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --run {ws / 'a.trec'} and --run {spelt} are one run file: give each once")


def test_a_stat_test_with_seed_groups_is_refused(ws, capsys) -> None:
    """H6-26: --stat-test fisher was dropped for the seeded t-test without a word."""
    argv = eval_argv(ws, f"a={ws}/dev-*.trec", str(ws / "b.trec"))
    assert run_main(eval_cli.main, [*argv, "--stat-test", "fisher"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --stat-test fisher: with several seeds the comparison is the t-test over queries "
        "and seeds, not a paired test; leave --stat-test out")
    assert run_main(eval_cli.main, argv) == 0
    assert run_main(eval_cli.main, [*eval_argv(ws, str(ws / "a.trec"), str(ws / "b.trec")),
                                    "--stat-test", "fisher"]) == 0


# analyze checkpoints ----------------------------------------------------------------------------

def test_one_training_folder_under_two_labels_is_refused(tmp_path) -> None:
    """H6-84: one training reported as two seeds, sd 0."""
    folder = tmp_path / "snap"
    folder.mkdir()
    with pytest.raises(UserError, match=f"^--train-dir: {folder} and {folder} are one training "
                                        "folder"):
        training_folders([f"42={folder}", f"43={folder}"])
    (tmp_path / "link").symlink_to(folder)
    with pytest.raises(UserError, match="are one training folder"):
        training_folders([f"42={folder}", f"2={tmp_path / 'link'}"])


def test_a_label_contradicting_the_recipes_seed_is_refused(tmp_path, capsys) -> None:
    """H6-85: 7=DIR, whose recipe says seed 2, was reported as seed 7."""
    (tmp_path / "recipe.yaml").write_text(f"data:\n  collection: {tmp_path / 'tc'}\n"
                                          "training:\n  seed: 2\n")
    code = run_main(analyze_main, ["checkpoints", "--train-dir", f"7={tmp_path}", "--corpus",
                                   str(tmp_path / "tc"), "--quiet"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --train-dir 7={tmp_path}: that training's recipe says seed 2; label it "
        f"2={tmp_path}, or with a name that is not a number")
    check_seed("2", tmp_path)
    check_seed("detr", tmp_path)  # a name, not a seed
    check_seed("7", tmp_path / "no-recipe")


def snapshots_folder(root: Path) -> Path:
    """A training folder with two (empty) snapshots and its log: enough for a fake search."""
    for step in (1, 2):
        (root / "snapshots" / f"step-{step}").mkdir(parents=True)
    (root / "train_log.jsonl").write_text('{"step": 1, "val_loss": 0.5}\n'
                                          '{"step": 2, "val_loss": 0.4}\n')
    return root


def test_cut_queries_are_one_warning_that_names_no_missing_flag(tiny_bert, tmp_path, capsys,
                                                                caplog, monkeypatch) -> None:
    """H6-87: 12 timestamped warnings naming --query-max-length, which the command lacks."""
    from pyserini_moe.encode import QUERY_ENCODER_LOG
    from pyserini_moe.encode.adapters import DenseQueryEncoder
    from pyserini_moe.modeling import SiameseBiEncoder

    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")

    def search(_model, _corpus, topic_sets, metrics, *_args) -> dict:
        encoder = DenseQueryEncoder(model, max_length=4)  # one encoder per snapshot, as searched
        encoder.encode_batch(["what is the dense retrieval of a mixture of experts"])
        return {name: dict.fromkeys(metrics, 0.5) for name in topic_sets}

    monkeypatch.setattr(checkpoints, "_index_and_search", search)
    # no collection 'tc' to digest for the evaluation cache: the search is faked too
    monkeypatch.setattr(checkpoints, "_corpus_digest", lambda corpus: "x")
    monkeypatch.setattr(checkpoints, "_topic_digests", lambda sets: {})
    folders = [snapshots_folder(tmp_path / name) for name in ("s1", "s2")]
    with caplog.at_level(logging.WARNING):
        assert run_main(analyze_main, ["checkpoints", "--train-dir", f"1={folders[0]}",
                                       f"2={folders[1]}", "--corpus", "tc", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "--query-max-length" not in caplog.text  # the encoder's own warnings are held
    # one line; the flag it names is the command's own since analyze checkpoints has one
    assert [line for line in err.splitlines() if "cut" in line] == [
        "warning: queries longer than 4 tokens (the query length the snapshots were trained "
        "with; --query-max-length searches them at another) were cut when searched"]
    assert logging.getLogger(QUERY_ENCODER_LOG).filters == []  # put back
