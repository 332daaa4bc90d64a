"""Cases of the eighth hostile pass in the commands around search: one measure under several
spellings, ``fuse`` settings that change nothing or scramble the ranking, tuning on the runs
fused, ``eval``'s outputs (gzip, a user's file in the way, a baseline spelt as a path), gzipped
and doubled collection files, one file as two inputs (``dpr train``, ``analyze divergence``,
``regress --smoke``), ``convert`` outputs named for another format, two recipes counted as two
seeds, lengths past a model's positions, a topics file's header line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

from pyserini_moe.cli import convert as convert_cli
from pyserini_moe.cli import dpr as dpr_cli
from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import fuse as fuse_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli.analyze import main as analyze_main
from pyserini_moe.cli.regress import main as regress_main
from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.errors import UserError


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """Two runs over two queries (a dense-like ``a`` and a sparse-like ``b``) and their qrels."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 a\nq1 Q0 d2 2 2.0 a\nq1 Q0 d3 3 1.0 a\n"
                                     "q2 Q0 d2 1 3.0 a\nq2 Q0 d1 2 2.0 a\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d1 1 9.0 b\nq1 Q0 d4 2 8.0 b\nq1 Q0 d5 3 7.0 b\n"
                                     "q2 Q0 d3 1 9.0 b\nq2 Q0 d2 2 8.0 b\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return tmp_path


def _runs(ws: Path) -> list[str]:
    return ["--runs", str(ws / "a.trec"), str(ws / "b.trec"), "--output", str(ws / "f.trec")]


# H8-13: one measure under several spellings ---------------------------------------------------

@pytest.mark.parametrize("other", ["nDCG@10", "ndcg@010", "ndcg_cut.10"])
def test_eval_refuses_one_measure_spelt_twice(ws, capsys, other, error_line) -> None:
    error = error_line(eval_cli.main, ["--run", str(ws / "a.trec"), "--qrels", str(ws / "qrels.txt"),
                                   "--metrics", "ndcg@10", other], capsys)
    assert error == (f"error: --metrics: 'ndcg@10' and {other!r} are one measure (ndcg@10); "
                     "give it once")


def test_a_metric_repeated_as_written_is_still_one_row() -> None:
    from pyserini_moe.eval.metrics import distinct_metrics

    assert [m.name for m in distinct_metrics(["ndcg@10", "ndcg@10", "map"])] == ["ndcg@10", "map"]


# H8-21, H8-22: --norm with rrf ----------------------------------------------------------------

@pytest.mark.parametrize("norm", ["min-max", "borda"])
def test_fuse_refuses_a_normalisation_for_rrf(ws, capsys, norm, error_line) -> None:
    error = error_line(fuse_cli.main, [*_runs(ws), "--method", "rrf", "--norm", norm], capsys)
    assert error == ("error: --method rrf does not use --norm (rrf reads ranks only: no "
                     "normalisation of the scores can change it)")
    assert not (ws / "f.trec").exists()


def test_fuse_help_offers_norm_for_score_fusions_only() -> None:
    text = " ".join(fuse_cli.build_parser().format_help().split())
    assert "ranx normalisation for combsum/combmnz/wsum;" in text


# H8-24: a hybrid whose candidates cannot fill --hits ---------------------------------------------

def test_fuse_says_when_the_hybrid_cannot_fill_the_hits(ws, capsys) -> None:
    assert run_main(fuse_cli.main, [*_runs(ws), "--method", "hybrid", "--candidates", "1",
                                    "--hits", "10"]) == 0
    assert ("warning: each run's top 1 is fused (--candidates): at most 2 hits a query, "
            "not --hits 10") in capsys.readouterr().err
    assert run_main(fuse_cli.main, [*_runs(ws), "--method", "hybrid", "--candidates", "5",
                                    "--hits", "10"]) == 0
    assert "warning" not in capsys.readouterr().err
    # every method, not the hybrid only (H13-85)
    assert run_main(fuse_cli.main, [*_runs(ws), "--method", "rrf", "--candidates", "1",
                                    "--hits", "5"]) == 0
    assert "at most 2 hits a query, not --hits 5" in capsys.readouterr().err


# H8-25: tuning on the runs fused -----------------------------------------------------------------

def test_fuse_refuses_dev_runs_that_are_the_runs_fused(ws, capsys, error_line) -> None:
    error = error_line(fuse_cli.main, [*_runs(ws), "--method", "wsum", "--dev-runs",
                                   f"{ws}/./a.trec", str(ws / "b.trec"), "--dev-qrels",
                                   str(ws / "qrels.txt")], capsys)
    assert error == (f"error: --dev-runs {ws}/./a.trec is also fused (--runs {ws / 'a.trec'}): "
                     "tuning on the runs being fused fits them to their own queries; give the "
                     "same systems' runs on dev queries")
    assert not (ws / "f.trec").exists()


# H8-39, H8-40, H8-42: eval's baseline and outputs ---------------------------------------------

def _eval(ws: Path, *extra: str) -> int:
    return run_main(eval_cli.main, ["--run", str(ws / "a.trec"), str(ws / "b.trec"), "--qrels",
                                    str(ws / "qrels.txt"), "--metrics", "ndcg@10", *extra])


def test_eval_finds_the_baseline_by_another_spelling_of_its_path(ws, capsys) -> None:
    assert _eval(ws, "--baseline", f"{ws}/./b.trec") == 0
    assert "b.trec (baseline)" in capsys.readouterr().out


def test_eval_keeps_a_users_file_in_the_way_of_an_output(ws, capsys) -> None:
    for flag, name in (("--table", "mine.md"), ("--output", "mine.json"),
                       ("--per-query", "mine.tsv")):
        (ws / name).write_text("my own notes\n")
        assert _eval(ws, flag, str(ws / name)) == 2
        assert capsys.readouterr().err == (
            f"error: {flag} {ws / name} exists and is not a file eval wrote: eval replaces only "
            "its own earlier output; name another file or move this one\n")
        assert (ws / name).read_text() == "my own notes\n"
    outputs = ["--table", str(ws / "t.md"), "--output", str(ws / "o.json"), "--per-query",
               str(ws / "p.tsv")]
    assert _eval(ws, *outputs) == 0
    (ws / "t.md").write_text((ws / "t.md").read_text().replace("### ", "### old "))
    assert _eval(ws, *outputs) == 0  # its own earlier outputs: replaced
    assert "old" not in (ws / "t.md").read_text()


def test_eval_outputs_named_gz_are_gzip(ws) -> None:
    assert _eval(ws, "--table", str(ws / "t.md.gz"), "--output", str(ws / "o.json.gz"),
                 "--per-query", str(ws / "p.tsv.gz")) == 0
    assert gzip.decompress((ws / "t.md.gz").read_bytes()).startswith(b"### ")
    assert json.loads(gzip.decompress((ws / "o.json.gz").read_bytes()))["metrics"] == ["ndcg@10"]
    assert gzip.decompress((ws / "p.tsv.gz").read_bytes()).startswith(b"run\tqid\tndcg@10\n")
    assert _eval(ws, "--table", str(ws / "t.md.gz")) == 0  # its own gzipped page: replaced


# H8-47, H8-48: gzipped qrels, two files of one kind --------------------------------------------

def _collection(root: Path, gz: tuple[str, ...] = (), both: tuple[str, ...] = ()) -> Path:
    """A two-document collection; the files named in ``gz`` gzipped, in ``both`` twice."""
    files = {"corpus.jsonl": "".join(json.dumps({"_id": f"d{i}", "text": f"text {i}"}) + "\n"
                                     for i in (1, 2)),
             "queries.jsonl": json.dumps({"_id": "q1", "text": "text"}) + "\n",
             "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t1\n"}
    (root / "qrels").mkdir(parents=True)
    for name, text in files.items():
        if name in gz or name in both:
            (root / f"{name}.gz").write_bytes(gzip.compress(text.encode()))
        if name not in gz:
            (root / name).write_text(text)
    return root


def test_gzipped_beir_qrels_are_a_split(tmp_path) -> None:
    root = _collection(tmp_path / "c", gz=("queries.jsonl", "qrels/test.tsv"))
    assert BeirCollection(root).splits() == ["test"]
    assert load_qrels(f"{root}:test") == {"q1": {"d1": 1}}
    assert load_topics(f"{root}:test") == {"q1": "text"}


@pytest.mark.parametrize("name", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_a_file_beside_its_gzipped_twin_is_refused(tmp_path, name) -> None:
    root = _collection(tmp_path / "c", both=(name,))
    file = Path(name).name
    with pytest.raises(UserError) as info:  # the qrels are checked against queries and corpus
        load_qrels(f"{root}:test")
    assert str(info.value) == (f"{(root / name).parent} holds both {file} and {file}.gz: which "
                               "one is the collection's cannot be told; keep one of them")


# H8-51: dpr train, one file as two sets -------------------------------------------------------

@pytest.mark.parametrize("sets, second", [
    (["--train", "nq=F", "trivia=./F"], "--train trivia=./F"),
    (["--train", "nq=F", "--dev", "nq=./F"], "--dev nq=./F")])
def test_dpr_train_refuses_one_file_as_two_sets(tmp_path, monkeypatch, capsys, sets,
                                                second, error_line) -> None:
    monkeypatch.chdir(tmp_path)
    Path("F").write_text("[]")
    error = error_line(dpr_cli.main, ["train", *sets, "--output", "coll"], capsys)
    assert error == f"error: --train nq=F and {second} are one DPR file: give each once"
    assert not Path("coll").exists()


# H8-54: convert, an output named for JSON ------------------------------------------------------

@pytest.mark.parametrize("what, name, usual", [("--topics", "t.jsonl", "t.tsv"),
                                               ("--topics", "t.json.gz", "t.tsv.gz"),
                                               ("--qrels", "q.jsonl", "q.txt")])
def test_convert_refuses_an_output_named_for_json(ws, capsys, what, name, usual, error_line) -> None:
    (ws / "topics.tsv").write_text("q1\tcat\n")
    source = str(ws / ("topics.tsv" if what == "--topics" else "qrels.txt"))
    error = error_line(convert_cli.main, [what, source, "--output", str(ws / name)], capsys)
    assert error.startswith(f"error: --output {ws / name}: convert writes ")
    assert error.endswith(f", not JSON; name it {ws / usual}")
    assert not (ws / name).exists()


# H8-59: analyze checkpoints, two recipes as two seeds -------------------------------------------

def _training(folder: Path, seed: int, rate: float, **more) -> str:
    folder.mkdir()
    recipe = {"model": {"type": "siamese", "args": more}, "data": {"collection": "tc", "seed": seed},
              "training": {"learning_rate": rate, "seed": seed}, "output_dir": str(folder)}
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return f"{seed}={folder}"


@pytest.mark.parametrize("rate, args, field", [
    (0.05, {}, "training.learning_rate (0.001 vs 0.05)"),
    (0.001, {"pooling": "cls"}, "model.args.pooling (unset vs 'cls')")])
def test_checkpoints_refuses_two_recipes_as_two_seeds(tmp_path, capsys, rate, args,
                                                      field, error_line) -> None:
    one = _training(tmp_path / "s1", 1, 0.001)
    other = _training(tmp_path / "lr", 3, rate, **args)
    error = error_line(analyze_main, ["checkpoints", "--train-dir", one, other, "--corpus", "tc",
                                  "--quiet"], capsys)
    assert error == (f"error: --train-dir {one} and {other}: their recipes differ in {field}, "
                     "not only in the seed: two conditions, not seeds of one; analyse each on "
                     "its own")


def test_checkpoints_takes_seeds_of_one_recipe(tmp_path) -> None:
    from pyserini_moe.lab.checkpoints import check_one_condition, training_folders

    folders = training_folders([_training(tmp_path / "s1", 1, 0.05),
                                _training(tmp_path / "s2", 2, 0.05)])
    check_one_condition(folders)  # seeds, data seeds and output folders differ: one condition


# H8-62: analyze lengths past the model's positions ----------------------------------------------

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


# H8-63: analyze divergence, one model under two names -------------------------------------------

def test_divergence_refuses_one_model_under_two_names(tmp_path, capsys, error_line) -> None:
    (tmp_path / "m").mkdir()
    error = error_line(analyze_main, ["divergence", "--model", f"a={tmp_path / 'm'}",
                                  f"b={tmp_path}/./m", "--corpus", "c", "--topics", "t",
                                  "--qrels", "q"], capsys)
    assert error == (f"error: --model a={tmp_path / 'm'} and --model b={tmp_path}/./m are one "
                     "model: give each once")


# H8-68: regress --smoke, one file twice ----------------------------------------------------------

def _paper_file(folder: Path, name: str = "mix") -> Path:
    (folder / "qrels.txt").write_text("q1 0 d1 1\n")
    (folder / "plain.trec").write_text("q1 Q0 d1 1 3.0 t\n")
    doc = {"name": name, "scale": "paper", "conditions": [
        {"name": "plain", "run": str(folder / "plain.trec"), "steps": [],
         "qrels": str(folder / "qrels.txt"), "source": "x",
         "metrics": {"ndcg@10": {"expected": None}}}]}
    path = folder / f"{name}-{len(list(folder.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path




@pytest.mark.parametrize("smoke", [["--smoke"], []])
def test_regress_refuses_one_file_twice_with_or_without_smoke(smoked, tmp_path, capsys,
                                                              smoke, error_line) -> None:
    path = _paper_file(tmp_path)
    error = error_line(regress_main, [str(path), f"{tmp_path}/./{path.name}", *smoke, "--work-dir",
                                  str(tmp_path / "w")], capsys)
    assert error == (f"error: {path} and {tmp_path}/./{path.name} are one regression file: give "
                     "each once")
    assert smoked == [] and not (tmp_path / "w").exists()


def test_smoke_refuses_two_files_of_one_name(smoked, tmp_path, capsys, error_line) -> None:
    first, second = _paper_file(tmp_path), _paper_file(tmp_path)
    error = error_line(regress_main, [str(first), str(second), "--smoke", "--work-dir",
                                  str(tmp_path / "w")], capsys)
    assert error.startswith("error: several files are named mix:")
    assert smoked == []


# H8-76: a topics TSV's header line -------------------------------------------------------------

@pytest.mark.parametrize("header", ["qid\ttext", "query_id\tquery", "QID\tText"])
def test_a_topics_header_line_is_skipped_with_a_note(tmp_path, capsys, header) -> None:
    path = tmp_path / "topics.tsv"
    path.write_text(f"{header}\nq1\tcat sat\n")
    assert load_topics(str(path)) == {"q1": "cat sat"}
    names = ", ".join(header.split("\t"))
    assert capsys.readouterr().err == (f"note: {path}:1: the line '{names}' names the columns: "
                                       "skipped as a header, not searched as a query\n")
    path.write_text("qid\twhat is a cat\nq2\ttext\n")  # a query's text: not a header
    assert load_topics(str(path)) == {"qid": "what is a cat", "q2": "text"}
    assert capsys.readouterr().err == ""
