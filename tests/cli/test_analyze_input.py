"""Unusual input to the ``analyze`` command (:mod:`pyserini_moe.cli.analyze`): checkpoints
of trainings that are not seeds of one condition, training logs that are cut, gzipped or
not text, plots and reports that would replace a user's file, counts and lengths out of
range, one run or model given twice; each is one ``error:`` line or one warning."""

from __future__ import annotations

import gzip
import json
import logging
import shutil
from pathlib import Path

import pytest
import yaml

from pyserini_moe.analyze.common import PLOT_KEY, PLOT_MARK, figure, save_png
from pyserini_moe.cli import run_main
from pyserini_moe.cli.analyze import main as analyze_main
from pyserini_moe.eval.outputs import png_text
from pyserini_moe.lab import checkpoints
from pyserini_moe.lab.checkpoints import check_seed
from tests.helpers import help_blocks, seed_training, seed_training_with_negatives

ENCODING = {"experts": ["--model", "m", "--topics", "t"],
            "routing": ["--model", "m", "--corpus", "c", "--topics", "t"],
            "divergence": ["--model", "a=m", "--corpus", "c", "--topics", "t", "--qrels", "q"],
            "checkpoints": ["--train-dir", "d", "--corpus", "c"]}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """Two runs, one holding one of the two judged queries, and the qrels."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 a\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d4 1 9.0 b\nq2 Q0 d2 1 9.0 b\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return tmp_path


@pytest.mark.parametrize("flag", ["--metric", "--dev-metric"])
def test_checkpoints_refuses_an_unknown_metric_first(tmp_path, capsys, error_line, flag) -> None:
    argv = ["checkpoints", "--train-dir", str(tmp_path / "nowhere"), "--corpus", "tc", flag,
            "ndcg@0", "--quiet"]
    assert error_line(analyze_main, argv, capsys).startswith(
        f"error: {flag}: unknown metric 'ndcg@0'")


# --- a user's Matplotlib figure as --plot ---------------------------------------------------------


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


# --- --seed with nothing drawn at random ----------------------------------------------------------


def test_seed_read_by_nothing_is_refused(tmp_path, capsys, error_line) -> None:
    experts = ["experts", "--model", str(tmp_path), "--corpus", str(tmp_path), "--seed", "3"]
    assert error_line(analyze_main, experts, capsys) == (
        "error: --seed 3: nothing in this analysis is drawn at random (only --sample N "
        "would); leave --seed out")
    divergence = ["divergence", "--model", f"a={tmp_path}", "--corpus", "c", "--topics", "t",
                  "--qrels", "q", "--sample", "0", "--seed", "7"]
    assert "only --sample N or --plot (t-SNE) would" in error_line(analyze_main, divergence,
                                                                   capsys)


# --- expert-count with runs covering part of the judged queries -----------------------------------


def test_expert_count_says_judged_queries_a_run_lacks(ws, capsys) -> None:
    argv = ["expert-count", "--runs", f"1={ws / 'a.trec'}", f"3={ws / 'b.trec'}", "--qrels",
            str(ws / "qrels.txt"), "--quiet"]
    assert run_main(analyze_main, argv) == 0
    err = capsys.readouterr().err
    assert f"--runs 1={ws / 'a.trec'}: 1 of 2 judged queries have no results (e.g. q2); they " \
           "count as 0" in err
    assert "--runs 3=" not in err


# --- analyze came-competition: a log cut mid-line, --log syntax -----------------------------------


def _log(path: Path, steps: int, tail: str = "") -> Path:
    path.write_text("".join(json.dumps(
        {"step": i + 1, "loss": 1.0, "weight_lexical": 0.5, "weight_local": 0.3,
         "weight_global": 0.2, "loss_lexical": 1.0, "loss_local": 2.0, "loss_global": 3.0}) + "\n"
        for i in range(steps)) + tail)
    return path


def test_a_log_cut_in_its_last_line_is_summarised_with_one_warning(tmp_path, capsys) -> None:
    log = _log(tmp_path / "train_log.jsonl", 3, '{"step": 4, "loss": 1.0, "weight_lex')
    assert run_main(analyze_main, ["came-competition", "--log", f"came={log}",
                                   "--bins", "1"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"warning: {log}: line 4, the last, is cut off (a training "
                                "stopped while writing it): summarising the 3 complete steps "
                                "before it"]
    assert "| 1-3 | 0.500 | 0.300 | 0.200 |" in out


def test_a_log_broken_inside_is_refused_naming_the_line(tmp_path, capsys, error_line) -> None:
    log = _log(tmp_path / "train_log.jsonl", 2)
    log.write_text(log.read_text().replace('"step": 2', '"step": 2,,', 1) + log.read_text())
    assert error_line(analyze_main, ["came-competition", "--log", f"came={log}"], capsys) == (
        f"error: {log}: line 2 is not a JSON record: not a whole training log")


def test_a_log_without_its_name_is_told_the_log_syntax(tmp_path, capsys, error_line) -> None:
    log = _log(tmp_path / "train_log.jsonl", 2)
    assert error_line(analyze_main, ["came-competition", "--log", str(log)], capsys) == (
        f"error: --log {str(log)!r}: expected NAME=LOG, e.g. came=work/came/train_log.jsonl")


# --- analyze --plot not a PNG name ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["a8.txt", "a8.pdf", "a8"])
def test_a_plot_name_that_is_not_a_png_is_refused(tmp_path, capsys, error_line, name) -> None:
    log = _log(tmp_path / "train_log.jsonl", 2)
    plot = tmp_path / name
    assert error_line(analyze_main, ["came-competition", "--log", f"came={log}", "--plot",
                                     str(plot)], capsys) == (
        f"error: --plot {plot}: the plot is written as a PNG image: give a file name ending in "
        ".png")
    assert not plot.exists()
    assert run_main(analyze_main, ["came-competition", "--log", f"came={log}", "--plot",
                                   str(tmp_path / "a8.PNG")]) == 0


# --- --help defaults ------------------------------------------------------------------------------


def test_came_competition_bins_says_its_default(capsys) -> None:
    with pytest.raises(SystemExit):
        analyze_main(["came-competition", "--help"])
    assert "(default: 10)" in help_blocks(capsys.readouterr().out)["--bins"]


# --- analyze came-competition: the log, --bins ----------------------------------------------------


def _rows(steps: int) -> str:
    return "".join(json.dumps(
        {"step": i + 1, "loss": 1.0, "weight_lexical": 0.5, "weight_local": 0.3,
         "weight_global": 0.2, "loss_lexical": 1.0, "loss_local": 2.0, "loss_global": 3.0}) + "\n"
        for i in range(steps))


def test_a_gzipped_log_is_read(tmp_path, capsys) -> None:
    """``--log c=log.jsonl.gz`` died with a UnicodeDecodeError traceback."""
    log = tmp_path / "train_log.jsonl.gz"
    with gzip.open(log, "wt") as f:
        f.write(_rows(2))
    assert run_main(analyze_main, ["came-competition", "--log", f"c={log}", "--bins", "1"]) == 0
    assert "| 1-2 | 0.500 | 0.300 | 0.200 |" in capsys.readouterr().out


@pytest.mark.parametrize("name, data", [
    ("a60.PNG", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
    ("utf16.jsonl", _rows(1).encode("utf-16")),
    # mtime=0: a gzip header holds the time, and xdist's workers must collect the same ids
    ("packed.jsonl", gzip.compress(_rows(1).encode(), mtime=0)),
], ids=["png", "utf16", "gzip-named-jsonl"])
def test_a_log_that_is_not_utf8_text_is_refused_in_one_line(tmp_path, capsys, error_line, name,
                                                            data) -> None:
    """A PNG or a UTF-16 file as the log ended in a UnicodeDecodeError traceback."""
    log = tmp_path / name
    log.write_bytes(data)
    line = error_line(analyze_main, ["came-competition", "--log", f"c={log}"], capsys)
    assert line.startswith(f"error: {log}:1: " + ("gzip-compressed: name it with .gz"
                                                   if name == "packed.jsonl" else
                                                   "not valid UTF-8"))
    assert line.endswith("not a training log, which is UTF-8 JSON lines (or gzipped, named .gz)")


def test_a_training_folder_is_read_as_its_log(tmp_path, capsys, error_line) -> None:
    """``--log c=<training folder>`` said "no such training log" of an existing
    folder."""
    (tmp_path / "train_log.jsonl").write_text(_rows(2))
    assert run_main(analyze_main, ["came-competition", "--log", f"c={tmp_path}"]) == 0
    assert "| 1-1 | 0.500 | 0.300 | 0.200 |" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert error_line(analyze_main, ["came-competition", "--log", f"c={empty}"], capsys) == (
        f"error: {empty} is a folder without a train_log.jsonl: give a training output folder or "
        "its train_log.jsonl")


def test_the_header_counts_the_stretches_shown(tmp_path, capsys) -> None:
    """``--bins 1000`` on a one-step log said "in 1000 stretches of steps" above one
    row."""
    (tmp_path / "train_log.jsonl").write_text(_rows(1))
    assert run_main(analyze_main, ["came-competition", "--log", f"c={tmp_path}",
                                   "--bins", "1000"]) == 0
    out = capsys.readouterr().out
    assert "in 1 stretch of steps (not --bins 1000:" in out
    assert "1000 stretches" not in out
    (tmp_path / "train_log.jsonl").write_text(_rows(10))
    assert run_main(analyze_main, ["came-competition", "--log", f"c={tmp_path}",
                                   "--bins", "5"]) == 0
    out = capsys.readouterr().out
    assert "in 5 stretches of steps: each" in out


# --- analyze --plot an existing folder ------------------------------------------------------------


def test_a_plot_that_is_a_folder_is_refused_before_the_analysis(tmp_path, capsys) -> None:
    """The refusal came after the whole table was printed to stdout."""
    (tmp_path / "train_log.jsonl").write_text(_rows(2))
    plot = tmp_path / "d62.png"
    plot.mkdir()
    assert run_main(analyze_main, ["came-competition", "--log", f"c={tmp_path}",
                                   "--plot", str(plot)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == f"error: --plot {plot} is a directory: name a file to write"


def test_a_label_contradicting_the_recipes_seed_is_refused(tmp_path, capsys) -> None:
    """7=DIR, whose recipe says seed 2, was reported as seed 7."""
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
    """12 timestamped warnings naming --query-max-length, which the command lacks."""
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


def _usageerror_line(main, argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The last line of argparse's refusal (usage, then one error line; exit 2)."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


# --- analyze checkpoints --------------------------------------------------------------------------


def test_two_folders_of_one_training_seed_are_refused(tmp_path, capsys, error_line) -> None:
    for name in ("s1", "s1-copy"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "recipe.yaml").write_text(
            f"data:\n  collection: {tmp_path / 'tc'}\ntraining:\n  seed: 1\n")
    error = error_line(analyze_main, ["checkpoints", "--train-dir", str(tmp_path / "s1"),
                                  str(tmp_path / "s1-copy"), "--corpus", str(tmp_path / "tc"),
                                  "--quiet"], capsys)
    assert error == (f"error: --train-dir s1={tmp_path / 's1'} and s1-copy={tmp_path / 's1-copy'}"
                     ": both recipes trained with seed 1, one training twice; give one folder "
                     "per training seed")


# --- analyze counts -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-3", "0"])
@pytest.mark.parametrize("command, flag", [
    *((command, "--max-length") for command in ENCODING),
    ("experts", "--query-max-length"), ("divergence", "--query-max-length"),
    ("experts", "--batch-size"), ("experts", "--min-docs")])
def test_a_count_below_one_is_refused_by_argparse(command, flag, value, capsys) -> None:
    error = _usageerror_line(analyze_main, [command, *ENCODING[command], flag, value], capsys)
    assert error.endswith(f"argument {flag}: must be >= 1, got {value}")


@pytest.mark.parametrize("argv, flag", [
    (["came", "--expert-runs", "lexical=a", "local=b", "--qrels", "q"], "--depth"),
    (["came-competition", "--log", "x=a"], "--bins")])
def test_came_counts_below_one_are_refused_by_argparse(argv, flag, capsys) -> None:
    assert _usageerror_line(analyze_main, [*argv, flag, "0"], capsys).endswith(
        f"argument {flag}: must be >= 1, got 0")


# --- one run file in two places, overlap of short lists -------------------------------------------


def test_expert_count_refuses_one_run_for_two_counts_or_as_the_baseline(tmp_path, capsys, error_line) -> None:
    run = tmp_path / "dense.trec"
    run.write_text("q1 Q0 d1 1 3.0 t\n")
    same = f"{tmp_path}/./dense.trec"
    assert error_line(analyze_main, ["expert-count", "--runs", f"3={run}", f"6={same}", "--qrels",
                                 "q"], capsys) == (
        f"error: --runs 3={run} and --runs 6={same} are one run file: give each once")
    assert error_line(analyze_main, ["expert-count", "--runs", f"3={run}", "--baseline", same,
                                 "--qrels", "q"], capsys) == (
        f"error: --runs 3={run} and --baseline {same} are one run file: give each once")


def test_came_refuses_one_run_as_two_experts_or_as_a_fused_run(tmp_path, capsys, error_line) -> None:
    run = tmp_path / "ex.impact.trec"
    run.write_text("q1 Q0 d1 1 3.0 t\n")
    assert error_line(analyze_main, ["came", "--expert-runs", f"lexical={run}", f"local={run}",
                                 "--qrels", "q"], capsys) == (
        f"error: --expert-runs lexical={run} and --expert-runs local={run} are one run file: "
        "give each once")
    assert "are one run file" in error_line(
        analyze_main, ["came", "--expert-runs", f"lexical={run}", f"local={tmp_path / 'b'}",
                       "--fused", f"sum={run}", "--qrels", "q"], capsys)


# --- analyze checkpoints, two recipes as two seeds ------------------------------------------------


@pytest.mark.parametrize("rate, args, field", [
    (0.05, {}, "training.learning_rate (0.001 vs 0.05)"),
    (0.001, {"pooling": "cls"}, "model.args.pooling (unset vs 'cls')")])
def test_checkpoints_refuses_two_recipes_as_two_seeds(tmp_path, capsys, rate, args,
                                                      field, error_line) -> None:
    one = seed_training(tmp_path / "s1", 1, 0.001)
    other = seed_training(tmp_path / "lr", 3, rate, **args)
    error = error_line(analyze_main, ["checkpoints", "--train-dir", one, other, "--corpus", "tc",
                                  "--quiet"], capsys)
    assert error == (f"error: --train-dir {one} and {other}: their recipes differ in {field}, "
                     "not only in the seed: two conditions, not seeds of one; analyse each on "
                     "its own")


# --- analyze lengths past the model's positions ---------------------------------------------------


@pytest.fixture(scope="module")
def saved_models(tiny_bert, tmp_path_factory) -> dict[str, Path]:
    from pyserini_moe.modeling import SbMoeEncoder, SiameseBiEncoder, TaserEncoder

    root = tmp_path_factory.mktemp("models")
    return {"experts": SbMoeEncoder.from_backbone(tiny_bert, n_experts=2, device="cpu")
            .save(root / "sbmoe"),
            "routing": TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu")
            .save(root / "taser"),
            "divergence": SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
            .save(root / "siamese")}


@pytest.mark.parametrize("command, flag", [("experts", "--max-length"),
                                           ("experts", "--query-max-length"),
                                           ("routing", "--max-length"),
                                           ("divergence", "--max-length")])
def test_analyze_refuses_a_length_past_the_positions(saved_models, tiny_corpus, capsys, command,
                                                     flag, error_line) -> None:
    model = str(saved_models[command])
    argv = {"experts": ["--model", model, "--corpus", str(tiny_corpus), "--min-docs", "1"],
            "routing": ["--model", model, "--corpus", str(tiny_corpus), "--topics",
                        f"{tiny_corpus}:test"],
            "divergence": ["--model", f"m={model}", "--corpus", str(tiny_corpus), "--topics",
                           f"{tiny_corpus}:test", "--qrels", f"{tiny_corpus}:test"]}[command]
    extra = ["--topics", f"{tiny_corpus}:test"] if command == "experts" else []
    error = error_line(analyze_main, [command, *argv, *extra, flag, "1000", "--device", "cpu"],
                   capsys)
    assert error == (f"error: {flag} 1000 is above the 512 token positions this model has: use "
                     f"{flag} 512 or less")


# --- analyze divergence, one model under two names ------------------------------------------------


def test_divergence_refuses_one_model_under_two_names(tmp_path, capsys, error_line) -> None:
    (tmp_path / "m").mkdir()
    error = error_line(analyze_main, ["divergence", "--model", f"a={tmp_path / 'm'}",
                                  f"b={tmp_path}/./m", "--corpus", "c", "--topics", "t",
                                  "--qrels", "q"], capsys)
    assert error == (f"error: --model a={tmp_path / 'm'} and --model b={tmp_path}/./m are one "
                     "model: give each once")


def _count(run_files: Path, *more: str) -> list[str]:
    return ["expert-count", "--runs", f"1={run_files / 'a.trec'}", f"3={run_files / 'b.trec'}", "--qrels",
            str(run_files / "qrels.txt"), "--quiet", *more]


# --- analyze checkpoints, negatives of two conditions as two seeds --------------------------------


@pytest.mark.parametrize("field, one, other", [("run", "negA.trec", "negB.trec"),
                                               ("model", "work/model", "work/sbmoe/best"),
                                               ("run", "work/s1.trec", "work/s1-b.trec")])
def test_checkpoints_refuses_negatives_of_another_condition(tmp_path, capsys, field, one,
                                                            other, error_line) -> None:
    first = seed_training_with_negatives(tmp_path / "s1", 1, **{field: one})
    second = seed_training_with_negatives(tmp_path / "s2", 2, **{field: other})
    error = error_line(analyze_main, ["checkpoints", "--train-dir", first, second, "--corpus", "tc",
                                  "--quiet"], capsys)
    assert error.startswith(f"error: --train-dir {first} and {second}: their recipes differ in "
                            f"data.negatives.{field} ({one!r} vs {other!r}), not only in the seed")
    assert error.endswith(f"(a seed's own {field} may differ from another seed's only by the seed "
                          "number in its path, e.g. detr-s42.train.trec and detr-s43.train.trec)")


# --- analyze checkpoints of a training without held-out queries -----------------------------------


def test_checkpoints_says_a_training_held_out_no_queries(tmp_path, capsys, error_line) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    recipe = {"data": {"collection": "tc", "validation_fraction": 0.0}, "training": {"seed": 1}}
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    error = error_line(analyze_main, ["checkpoints", "--train-dir", str(folder), "--corpus", "tc",
                                  "--quiet"], capsys)
    assert error == (f"error: {folder} was trained with data.validation_fraction 0: it held out "
                     "no queries, so neither the validation-loss nor the dev rule can pick a step; "
                     "train with data.validation_fraction above 0 to compare its checkpoints")


# --- analyze expert-count of runs sharing no query with the qrels ---------------------------------


@pytest.mark.parametrize("ones, baseline, name", [("other.trec", [], "the 1-expert"),
                                                  ("a.trec", ["other.trec"], "the baseline")])
def test_expert_count_refuses_a_run_of_other_queries(run_files, capsys, ones, baseline, name,
                                                     error_line) -> None:
    argv = ["expert-count", "--runs", f"1={run_files / ones}", f"3={run_files / 'b.trec'}",
            "--qrels", str(run_files / "qrels.txt"), "--quiet",
            *[f for b in baseline for f in ("--baseline", str(run_files / b))]]
    error = error_line(analyze_main, argv, capsys)
    assert error == (f"error: {name} run {run_files / 'other.trec'}: none of its 2 queries is in the "
                     f"qrels {run_files / 'qrels.txt'} (wrong --qrels?)")


# --- analyze expert-count with one metric twice ---------------------------------------------------


def test_expert_count_shows_a_metric_given_twice_once(run_files, capsys) -> None:
    assert run_main(analyze_main, _count(run_files, "--metrics", "ndcg@10", "ndcg@10")) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if "experts" in line
                  and line.startswith("|"))
    assert header == "| experts | ndcg@10 |"


# --- analyze outputs over a user's file -----------------------------------------------------------


@pytest.mark.parametrize("flag, name", [("--output", "notes.md"), ("--plot", "notes.md"),
                                        ("--plot", "picture.png")])
def test_analyze_refuses_to_replace_a_users_file(run_files, capsys, flag, name, error_line) -> None:
    target = run_files / name
    target.write_bytes(b"my precious notes\n" if name.endswith(".md")
                       else b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    error = error_line(analyze_main, _count(run_files, flag, str(target)), capsys)
    assert error == (f"error: {flag} {target} exists and is not a file analyze wrote: analyze "
                     "replaces only its own earlier output; name another file or move this one")
    assert target.read_bytes().startswith((b"my precious", b"\x89PNG"))


def test_analyze_replaces_its_own_outputs(run_files, capsys) -> None:
    argv = _count(run_files, "--output", str(run_files / "c.md"), "--plot", str(run_files / "c.png"))
    assert run_main(analyze_main, argv) == 0
    assert run_main(analyze_main, argv) == 0  # its own report and plot: replaced
    assert (run_files / "c.md").read_text().startswith("SB-MoE against the number of experts")


# --- analyze divergence of one model in two folders -----------------------------------------------


def test_divergence_refuses_one_model_in_two_folders(tiny_bert, tiny_corpus, tmp_path,
                                                     capsys, error_line) -> None:
    from pyserini_moe.modeling import SiameseBiEncoder

    best = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "best")
    last = tmp_path / "last"
    shutil.copytree(best, last)
    error = error_line(analyze_main, ["divergence", "--model", f"a={best}", f"b={last}", "--corpus",
                                  str(tiny_corpus), "--topics", f"{tiny_corpus}:test", "--qrels",
                                  f"{tiny_corpus}:test", "--device", "cpu"], capsys)
    assert error.startswith(f"error: --model a={best} and --model b={last} hold the same model "
                            "(fingerprint ")
    assert error.endswith("give models that differ")


# --- divergence of one sampled pair -------------------------------------------------------------


def test_a_divergence_sample_of_one_pair_is_refused_first(tiny_corpus, tmp_path, capsys,
                                                         error_line) -> None:
    """'--sample 1' was blamed on the topics, qrels and corpus not belonging together (they
    do here; refused before the model, which is not there, is loaded)."""
    argv = ["divergence", "--model", f"a={tmp_path / 'no-model'}", "--corpus", str(tiny_corpus),
            "--topics", f"{tiny_corpus}:test", "--qrels", f"{tiny_corpus}:test", "--sample", "1"]
    assert error_line(analyze_main, argv, capsys) == (
        "error: --sample 1 keeps fewer than two judged pairs: use --sample 2 or more (0 = every "
        "judged query)")
