"""The benchmark's own logic (targets, percentiles, corpus slices, child memory) and the sections
that index the whole corpus end to end on tiny models (the encoding and latency sections have
their own modules, test_encoding.py and test_search.py, so that xdist runs them side by side);
`make bench` runs every section on the real data."""

from __future__ import annotations

import json
import math
import time

import pytest

from pyserini_moe.cli import HelpFormatter, run_main
from pyserini_moe.cli.bench import (
    FLAG_SECTIONS,
    SECTIONS,
    build_parser,
    main,
    parse,
)
from pyserini_moe.errors import UserError
from pyserini_moe.lab.bench import pipeline
from pyserini_moe.lab.bench.corpora import pooled_corpus, subset
from pyserini_moe.lab.bench.models import build_models
from pyserini_moe.lab.bench.processes import run_process
from pyserini_moe.lab.bench.report import Report, cpu_description, device_name, percentile
from pyserini_moe.lab.bench.scaling import affine, earlier_scaling, join_earlier, scaling_fit


def test_targets_say_met_or_by_how_much() -> None:
    report = Report()
    report.target("fast enough", 0.45, 0.9)
    report.target("small enough", 1.5, 3.0, higher=False, unit="GB")
    assert [t["met"] for t in report.targets] == [False, True]
    assert report.targets[0]["ratio_to_target"] == 0.5
    text = report.markdown()
    assert "NOT met (0.50 of target)" in text and "| small enough | 1.5 | GB | <= 3.0 | met |" in text


def test_a_report_without_targets_has_no_targets_table() -> None:
    report = Report()
    report.add("scaling", retriever="bm25", docs=1000)
    assert "## scaling" in report.markdown() and "## targets" not in report.markdown()


def test_cpu_description_names_the_model_and_the_instruction_sets_that_matter(tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU 9000\n"
                       "flags\t\t: fpu sse avx2 avx512f avx512_vnni\n\n"
                       "processor\t: 1\nmodel name\t: Some CPU 9000\n"
                       "flags\t\t: fpu sse avx2 avx512f avx512_vnni\n")
    assert cpu_description(cpuinfo) == "Some CPU 9000 (avx2 avx512f avx512_vnni)"
    cpuinfo.write_text("model name\t: Old CPU\nflags\t\t: fpu sse\n")
    assert cpu_description(cpuinfo) == "Old CPU (no avx2)"
    assert cpu_description(tmp_path / "missing") == "unknown"


def test_percentile_and_subset(tiny_corpus, tmp_path) -> None:
    assert percentile([5, 1, 3, 2, 4], 0.5) == 3 and percentile([5, 1, 3, 2, 4], 0.95) == 5
    part = subset(str(tiny_corpus), 7, tmp_path / "part")
    assert len((part / "corpus.jsonl").read_text().splitlines()) == 7
    assert (part / "qrels" / "test.tsv").read_text() == \
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(4))


def test_pooled_corpus_appends_the_pool_then_shuffled_copies(tiny_corpus, tmp_path) -> None:
    out = pooled_corpus([str(tiny_corpus), str(tiny_corpus)], 70, tmp_path / "pool")
    docs = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    ids = [d["_id"] for d in docs]
    assert len(ids) == len(set(ids)) == 70
    assert ids[:2] == ["d0", "d1"] and ids[30] == f"{tiny_corpus.name}:d0" and ids[60] == "d0~1"
    original, copy = docs[0], docs[60]
    assert sorted(f"{original['title']} {original['text']}".split()) == sorted(copy["text"].split())
    assert (out / "queries.jsonl").read_text() == (subset(str(tiny_corpus), 5, tmp_path / "s")
                                                   / "queries.jsonl").read_text()
    assert len((subset(str(tiny_corpus), 99, tmp_path / "all") / "corpus.jsonl").read_text()
               .splitlines()) == 30  # a slice never invents documents


def test_affine_fit_separates_fixed_from_per_document_cost() -> None:
    rows = [(n, {"t": 5.0 + 0.02 * n}) for n in (1000, 5000, 20000)]
    assert affine(rows, "t") == pytest.approx((5.0, 0.02))
    # a cost that falls with more documents is noise around a flat one
    assert affine([(1000, {"t": 9.8}), (5000, {"t": 9.4})], "t") == pytest.approx((9.6, 0.0))


def test_scaling_fit_projects_the_per_document_rate_and_flags_a_flat_latency() -> None:
    """The 2026-11-25 dense rows: a power law projected 18.5 h, the per-document rate ~42 h."""
    rows = [(1000, {"index_s": 21.9, "index_mb": 1.47, "p50_ms": 9.78}),
            (5183, {"index_s": 93.4, "index_mb": 7.64, "p50_ms": 9.46})]
    fit = scaling_fit("dense", rows)
    assert fit["index_s_per_1k_docs"] == pytest.approx(17.1, abs=0.05)
    assert fit["index_s_fixed"] == pytest.approx(4.81, abs=0.01)
    assert fit["msmarco_index_h"] == pytest.approx(42.0, abs=0.1)
    assert fit["msmarco_index_GB"] == pytest.approx(12.7, abs=0.1)
    assert fit["p50_ms_per_1k_docs"] == 0 and fit["note"].startswith("latency flat")
    assert fit["points"] == 2


def _bench_json(path, cpu: str, rows: list[dict]) -> None:
    path.write_text(json.dumps({"sections": {"scaling": rows, "run": [{"cpu": cpu}]},
                                "targets": []}))


def _point(retriever: str, docs: int, index_s: float, **extra) -> dict:
    return {"retriever": retriever, "docs": docs, "index_s": index_s, "index_mb": docs / 1000,
            "build_peak_mb": 900.0, "p50_ms": 9.0, **extra}


def test_earlier_scaling_points_join_the_fit_where_this_run_has_no_point(tmp_path) -> None:
    """A 100k point measured in a sitting of its own joins the 1k / 5k / 20k of an earlier run;
    this run's own measurement of a size wins, and rows an earlier run took from a file are not
    counted again."""
    earlier = tmp_path / "bench.json"
    _bench_json(earlier, cpu_description(), [
        _point("dense", 1000, 999.0), _point("dense", 5000, 85.0), _point("dense", 20000, 340.0),
        _point("dense", 100000, 1.0, measured_in="older.json"), _point("colbert", 1000, 1.0)])
    cpu, rows = earlier_scaling(earlier)
    assert cpu == cpu_description() and len(rows) == 4  # the measured_in row is left out
    report = Report()
    points = {"dense": [(1000, {"index_s": 17.0, "index_mb": 1.0, "p50_ms": 9.0}),
                        (100000, {"index_s": 1700.0, "index_mb": 100.0, "p50_ms": 9.0})]}
    assert join_earlier(report, points, {earlier: (cpu, rows)}) == set()
    assert sorted(docs for docs, _ in points["dense"]) == [1000, 5000, 20000, 100000]
    assert dict(points["dense"])[1000]["index_s"] == 17.0  # this run's, not the file's 999
    assert [row["measured_in"] for row in report.sections["scaling"]] == [str(earlier)] * 2
    fit = scaling_fit("dense", sorted(points["dense"], key=lambda point: point[0]))
    assert fit["points"] == 4 and fit["index_s_per_1k_docs"] == pytest.approx(17.0, abs=0.1)
    # another machine's points are named, so the fit can say its points mix CPUs
    _bench_json(earlier, "Another CPU (avx2)", [_point("dense", 5000, 85.0)])
    assert join_earlier(Report(), {"dense": []}, {earlier: earlier_scaling(earlier)}) == {
        "Another CPU (avx2)"}


def test_a_bad_scaling_from_file_fails_before_anything_is_built(tmp_path, capsys) -> None:
    (tmp_path / "empty.json").write_text(json.dumps({"sections": {"onnx": []}, "targets": []}))
    for name, message in (("missing.json", "not a readable bench.json"),
                          ("empty.json", "has no scaling rows")):
        out = tmp_path / "out"
        assert run_main(main, ["--scaling-from", str(tmp_path / name),
                               "--output-dir", str(out)]) == 2
        assert message in capsys.readouterr().err and not out.exists()


COUNTS = ("--docs", "--max-length", "--batch-size", "--pipeline-docs", "--tokenizer-workers",
          "--length-bucket", "--repeats", "--latency-docs", "--latency-queries",
          "--batched-queries")


@pytest.mark.parametrize("value", ["0", "-3"])
@pytest.mark.parametrize("flag", COUNTS)
def test_a_count_under_one_is_refused_at_parsing(flag, value, tmp_path, capsys) -> None:
    """0 or a negative count was a ZeroDivisionError or a ValueError traceback, some after
    minutes of timing with bench.json left incomplete."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        main([flag, value, "--output-dir", str(out)])
    assert exit_.value.code == 2 and not out.exists()
    assert f"argument {flag}: must be >= 1, got {value}" in capsys.readouterr().err


@pytest.mark.parametrize(("given", "least"), [([], 64), (["--batch-size", "2"], 4)])
def test_pipeline_docs_under_two_batches_are_refused_at_parsing(given, least, tmp_path,
                                                                capsys) -> None:
    """A pipeline's rate is timed from its first batch on: one batch gave 0 passages/s and a
    ZeroDivisionError after every model was built."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        main([*given, "--pipeline-docs", str(least - 1), "--output-dir", str(out)])
    assert exit_.value.code == 2 and not out.exists()
    [line] = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert f"--pipeline-docs {least - 1}: the pipeline section needs at least 2 x --batch-size = " \
           f"{least} passages" in line and "first batch" in line
    # two batches pass the parser (a bad --scaling-from then stops the run before any work)
    assert run_main(main, [*given, "--pipeline-docs", str(least), "--scaling-from",
                           str(tmp_path / "missing.json"), "--output-dir", str(out)]) == 2
    assert "not a readable bench.json" in capsys.readouterr().err and not out.exists()


def _refused(argv: list[str], tmp_path, capsys) -> str:
    """The one error line of a bench run refused before anything is written."""
    out = tmp_path / "out"
    assert run_main(main, [*argv, "--output-dir", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize(("argv", "message"), [
    (["--sections", "latency", "--multivector-compression", "pq0"],
     "--multivector-compression 'pq0': expected"),
    (["--sections", "latency", "--multivector-compression", "pq48"],
     "m dividing the 128 dimensions"),
    (["--sections", "scaling", "--multivector-compression", "bogus"],
     "--multivector-compression 'bogus': expected"),
    (["--sections", "latency", "--multivector-compression", "none"],
     "--multivector-compression none: the compressed multi-vector index is measured against"),
    (["--sections", "approximate", "--multivector-faiss", "bogus"],
     "--multivector-faiss bogus: unknown Faiss index component 'bogus'"),
    (["--sections", "approximate", "--multivector-faiss", "ivf64,pq48"],
     "--multivector-faiss ivf64,pq48: does not fit the model's 128-dimensional token vectors"),
    (["--sections", "approximate", "--multivector-faiss", "hnsw32"],
     "--multivector-faiss hnsw32: the approximate section searches its token index at nprobe"),
])
def test_multivector_index_settings_are_checked_before_anything_is_built(argv, message, tmp_path,
                                                                        capsys) -> None:
    """A bad value is not the index process's RuntimeError traceback after the models, the
    corpus slice and the indexes before it were built: the index command's own checks refuse
    it at parsing, under bench's flag name."""
    assert message in _refused(argv, tmp_path, capsys)


def test_multivector_index_settings_the_index_command_takes_pass() -> None:
    for argv in (["--sections", "latency", "--multivector-compression", "pq32x12"],
                 ["--sections", "scaling", "--multivector-compression", "PQ16"],
                 ["--sections", "approximate", "--multivector-faiss", "IVF16,pq8x4"],
                 ["--sections", "approximate", "--multivector-faiss", "ivf32,flat"]):
        parse(argv)


def test_a_child_that_refuses_a_setting_is_one_error_line(tmp_path, monkeypatch) -> None:
    (tmp_path / "refuse.py").write_text("import sys\nprint('a warning', file=sys.stderr)\n"
                                        "print('error: --faiss x: unknown', file=sys.stderr)\n"
                                        "sys.exit(2)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(UserError, match=r"^python -m refuse --faiss x: --faiss x: unknown$"):
        run_process("refuse", ["--faiss", "x"])


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "cpu:7"])
def test_every_cpu_spelling_is_the_cpu(device) -> None:
    """cpu:N does not go to torch.cuda.get_device_name after every timing (an AssertionError
    without CUDA, bench.md lost); it is the CPU, so the onnx section runs too."""
    assert device_name(device) == "cpu"
    assert parse(["--device", device, "--sections", "encoding"]).device == "cpu"


@pytest.mark.parametrize(("argv", "message"), [
    (["--sections", "encoding", "--scaling-retrievers", "dense"],
     "--sections encoding does not run the section that reads --scaling-retrievers (scaling): "
     "add it to --sections or leave the flag out"),
    (["--sections", "encoding", "--pipeline-docs", "4096"], "--pipeline-docs (pipeline)"),
    (["--sections", "encoding", "--multivector-faiss", "bogus"],
     "reads --multivector-faiss (approximate)"),
    (["--sections", "encoding", "--latency-queries", "5", "--batched-queries", "3"],
     "--sections encoding does not run the sections that read --latency-queries (latency, "
     "scaling) and --batched-queries (latency): add one to --sections or leave the flags out"),
    (["--sections", "encoding", "--latency-queries", "50"], "--latency-queries"),  # the default
    (["--sections", "latency", "--docs", "8"], "--docs (encoding, onnx)"),
    (["--sections", "pipeline", "--topics", "scifact:dev"], "--topics"),
    (["--sections", "onnx", "--scaling-from", "x.json"], "--scaling-from (scaling)"),
    (["--sections", "pipeline", "--scaling-pool"], "--scaling-pool (scaling)"),
    (["--sections", "scaling", "--scaling-retrievers", "bm25", "--multivector-compression",
      "pq32"], "--multivector-compression is read by the latency section and the scaling "
               "section's multivector-compressed retriever, and this run has neither"),
])
def test_a_flag_of_a_section_that_does_not_run_is_refused(argv, message, tmp_path,
                                                          capsys) -> None:
    """Such flags are not ignored without a word."""
    assert message in _refused(argv, tmp_path, capsys)


def test_flags_left_at_their_defaults_or_read_by_a_section_that_runs_pass() -> None:
    for section in SECTIONS:
        parse(["--sections", section])
    parse(["--sections", "encoding", "pipeline", "--pipeline-docs", "4096", "--docs", "8"])
    parse(["--sections", "scaling", "--latency-queries", "5", "--multivector-compression", "pq32",
           "--scaling-retrievers", "multivector-compressed", "--scaling-pool"])
    parse(["--sections", "approximate", "--latency-docs", "100", "--topics", "scifact:test"])
    dests = {action.dest for action in build_parser()._actions}
    assert set(FLAG_SECTIONS) <= dests



@pytest.mark.parametrize(("argv", "message"), [
    (["--sections", "scaling", "--scaling-retrievers", "bm25", "bm25", "--scaling-sizes", "20"],
     "--scaling-retrievers lists bm25 twice: give each once"),
    (["--sections", "scaling", "--scaling-sizes", "20", "all", "20"],
     "--scaling-sizes lists 20 twice"),
    (["--sections", "scaling", "--scaling-sizes", "all", "all"], "--scaling-sizes lists all twice"),
    (["--sections", "encoding", "latency", "encoding"], "--sections lists encoding twice"),
    (["--sections", "scaling", "--scaling-from", "a.json", "sub/../a.json"],
     "--scaling-from a.json and --scaling-from sub/../a.json are one bench.json file"),
])
def test_a_value_listed_twice_is_refused(argv, message, tmp_path, capsys, monkeypatch) -> None:
    """bm25 listed twice would be timed twice: two rows at one size, both in the fit."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    assert message in _refused(argv, tmp_path, capsys)


def test_every_flag_says_what_it_is_and_its_default() -> None:
    """Every flag has help and its default, --backbone, --corpus, --batch-size, --latency-docs,
    --sections and --output-dir included."""
    parser = build_parser()
    formatter = HelpFormatter(parser.prog)
    for action in parser._actions:
        if action.dest == "help":
            continue
        assert action.help, action.option_strings
        assert "default" in formatter._get_help_string(action), action.option_strings
    text = parser.format_help()
    for default in ("all-minilm-l6-v2", "scifact", "work/bench", "(default: 32)",
                    "(default: 1000)"):
        assert default in text


def test_a_stream_of_one_batch_has_no_rate() -> None:
    with pytest.raises(ValueError, match="fewer than two batches"):
        pipeline._stream_rate(iter([(["a", "b"], None)]), "cpu", 1)
    assert pipeline._stream_rate(iter([(["a"], None), (["b", "c"], None)]), "cpu", 2)[0] > 0
    with pytest.raises(ValueError, match="gave 2 batches, not 3"):
        pipeline._stream_rate(iter([(["a"], None), (["b", "c"], None)]), "cpu", 3)


def test_a_streams_rate_leaves_out_its_end() -> None:
    """Joining the tokenizer processes after the last batch is not the steady state."""

    def stream():
        try:
            yield ["a"], None
            time.sleep(0.05)
            yield ["b", "c"], None
        finally:
            time.sleep(0.5)  # the pool's shutdown

    rate, first = pipeline._stream_rate(stream(), "cpu", 2)
    assert 2 / 0.5 < rate < 2 / 0.05 * 1.01 and first < 0.05


def test_a_backbone_too_shallow_for_taser_is_refused_before_anything_is_built(
        tiny_bert, tmp_path, capsys) -> None:
    """The 2-layer tiny BERT: the message named TASER's ``every``, which bench has no flag for,
    after several models were built into --output-dir."""
    out = tmp_path / "out"
    assert run_main(main, ["--backbone", str(tiny_bert), "--sections", "pipeline",
                           "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--backbone {tiny_bert} has 2 layer(s)" in err and "at least 3 layers" in err
    assert "every=" not in err and not out.exists()


def test_a_model_bench_cannot_build_is_named_with_the_backbone(tiny_bert, tmp_path,
                                                               monkeypatch) -> None:
    import pyserini_moe.lab.bench.models as run

    def refuse(model_type: str):
        raise UserError("every=2 leaves no specialised block in 2 layers")

    monkeypatch.setattr(run, "model_types", lambda: ["taser"])
    monkeypatch.setattr(run, "model_class", lambda model_type: type(
        "Refusing", (), {"from_backbone": staticmethod(lambda *a, **k: refuse(model_type))}))
    with pytest.raises(UserError, match=rf"--backbone {tiny_bert}: .* its taser model cannot be "
                                        r"built \(every=2 .*\); give another backbone"):
        build_models(str(tiny_bert), tmp_path / "models")


def test_child_processes_report_their_own_peak_memory(tmp_path, monkeypatch) -> None:
    (tmp_path / "hog.py").write_text("import sys\nblock = bytearray(int(sys.argv[1]) * 2 ** 20)\n"
                                     "block[::4096] = b'x' * len(block[::4096])\n"
                                     "sys.exit(int(sys.argv[2]))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    small, big = run_process("hog", ["1", "0"]), run_process("hog", ["300", "0"])
    assert 250 < big.peak_mb - small.peak_mb < 350  # its own pages, not its parent's
    with pytest.raises(RuntimeError, match="failed"):
        run_process("hog", ["1", "3"])


def test_child_processes_report_the_peak_disk_their_scratch_filled(tmp_path, monkeypatch) -> None:
    """A build's scratch in the system's temp folder counts towards its peak disk (TMPDIR is
    redirected into the watched folder), though it is gone when the build ends."""
    (tmp_path / "scratch.py").write_text(
        "import sys, tempfile, time\n"
        "with tempfile.NamedTemporaryFile() as f:\n"
        "    f.write(b'x' * 40 * 2 ** 20); f.flush(); time.sleep(1.0)\n"
        "open(sys.argv[1], 'wb').write(b'y' * 2 ** 20)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    work = tmp_path / "work"
    (work / "earlier").mkdir(parents=True)
    (work / "earlier" / "index").write_bytes(b"z" * 3 * 2 ** 20)  # there before: not counted
    done = run_process("scratch", [str(work / "out")], watch=work)
    assert 39 < done.peak_disk_mb < 42
    assert (work / "out").stat().st_size == 2 ** 20 and not any((work / ".tmp").iterdir())
    assert math.isnan(run_process("scratch", [str(tmp_path / "out2")]).peak_disk_mb)


@pytest.mark.usefixtures("one_thread")
def test_a_scaling_sitting_cut_short_keeps_the_points_it_measured(bert3, tiny_corpus, tmp_path,
                                                                 monkeypatch) -> None:
    """bench.json is written after each scaling point, marked incomplete, and an interrupted
    100k sitting's points can join a later run through --scaling-from; --scaling-retrievers
    measures only the retrievers it names."""
    # the scaling section imports the search layer when it runs (Faiss): patch it there
    import pyserini_moe.lab.bench.search as search

    timed = search.single_query_times
    calls = []

    def stop_at_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return timed(*args, **kwargs)

    monkeypatch.setattr(search, "single_query_times", stop_at_the_second)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        main(["--backbone", str(bert3), "--corpus", str(tiny_corpus), "--topics",
              f"{tiny_corpus}:test", "--max-length", "16", "--latency-queries", "3",
              "--sections", "scaling", "--scaling-sizes", "all", "--scaling-retrievers", "bm25",
              "impact", "--output-dir", str(out)])
    assert (out / "scale-30-impact").is_dir() and not (out / "scale-30-dense").exists()
    saved = json.loads((out / "bench.json").read_text())
    assert [(row["retriever"], row["docs"]) for row in saved["sections"]["scaling"]] == [
        ("bm25", 30)]
    assert [row["complete"] for row in saved["sections"]["run"]] == [False]
    assert "## scaling" in (out / "bench.md").read_text()
    assert earlier_scaling(out / "bench.json")[1] == [
        ("bm25", 30, {k: saved["sections"]["scaling"][0][k] for k in
                      ("index_s", "index_mb", "build_peak_mb", "p50_ms")})]


@pytest.mark.usefixtures("one_thread")
def test_onnx_scaling_and_approximate_sections_share_the_corpus_dense_index(tiny_bench,
                                                                           tiny_corpus) -> None:
    """The sections that index the whole corpus: the scaling rows of indexes built earlier carry
    those builds' numbers."""
    result = tiny_bench("--scaling-sizes", "all", "45", "--scaling-pool", str(tiny_corpus),
                        "--multivector-faiss", "ivf2,pq4x4",
                        "--sections", "onnx", "scaling", "approximate")
    sections = result["sections"]
    assert {"onnx", "memory and size", "scaling", "scaling fit", "approximate"} <= set(sections)
    assert "latency" not in sections
    memory = {row["what"]: row for row in sections["memory and size"]}
    # scaling: every retriever at each size (a compressed index needs 256 tokens): all is the
    # corpus (30), 45 its 30 documents then 15 of the pool (the same tiny corpus again, ids
    # prefixed); the whole corpus's dense index is the onnx section's PyTorch one, not rebuilt
    scaling = sections["scaling"]
    [whole] = [row for row in scaling if row["retriever"] == "dense" and row["docs"] == 30]
    assert whole["index_s"] == pytest.approx(
        memory[f"dense index of {tiny_corpus} (pytorch)"]["build_s"], abs=0.051)
    assert {(row["retriever"], row["docs"]) for row in scaling} == {
        (name, docs) for name in ("bm25", "dense", "impact", "multivector-compressed")
        for docs in (30, 45)}
    assert all(row["index_mb"] > 0 and row["p50_ms"] > 0 for row in scaling)
    fits = {row["retriever"]: row for row in sections["scaling fit"]}
    assert set(fits) == {"bm25", "dense", "impact", "multivector-compressed"}
    assert fits["multivector-compressed"]["paper_files_estimate"].startswith("float16")
    assert all(row["msmarco_index_GB"] > 0 for row in fits.values())
    assert {"onnx-fp32", "onnx-int8", "pytorch", "came", "came-onnx-int8"} == {
        r["backend"] for r in sections["onnx"]}
    assert "came through onnx-int8 encodes at >= 0.55x its PyTorch backbone" in {
        t["target"] for t in result["targets"]}
    assert all(0 <= row["recall_at_100"] <= 1 for row in sections["approximate"])
    assert [row["complete"] for row in sections["run"]] == [True]  # one run row, the last


def test_the_default_scaling_pool_is_the_measured_sittings_collections() -> None:
    """A scaling point means the same documents in every sitting: a collection added to the
    local data later (ArguAna) does not join the default pool and change the 20k and 100k
    corpora under the points measured before it."""
    assert parse(["--sections", "scaling"]).scaling_pool == ["cisi", "cranfield", "vaswani"]
    assert parse(["--sections", "scaling", "--corpus", "vaswani"]).scaling_pool == [
        "cisi", "cranfield", "scifact"]
    assert parse(["--sections", "scaling", "--scaling-pool", "arguana"]).scaling_pool == [
        "arguana"]
