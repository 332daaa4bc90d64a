"""The scale check at toy size: the synthetic MS MARCO's shape, the measurement of a process
tree, the stage runner (resumable, refusing a stage before its inputs) and the projections."""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

import pytest

from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.lab.scale.measure import Measurement, run_measured
from pyserini_moe.lab.scale.runner import run_stages, table
from pyserini_moe.lab.scale.stages import Context, _with_every_candidate
from pyserini_moe.lab.scale.synth import MSMARCO, STOP_WORDS, generate

FRACTION = 0.0005  # 4,421 passages, 251 training queries


def _digest(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("synth"), FRACTION, progress=False)


class Recorder:
    """A scale-check context whose commands are recorded, not run; each is measured by
    :meth:`measure` (1 s and 1 MB a thousand passages, the slice's size ending its name)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.ran = ctx, []

    @staticmethod
    def measure(name: str) -> Measurement:
        passages = int(name.rsplit("-", 1)[1])
        return Measurement(passages / 1_000, passages * 1_000, passages * 10, 0)


@pytest.fixture
def recorder(toy: Path, tmp_path: Path, monkeypatch) -> Recorder:
    """Slices of 1,000 and 2,000 passages of the toy collection, a mining sample of 100."""
    from pyserini_moe.lab.scale import stages

    root = tmp_path / "root"
    root.mkdir()
    (root / "msmarco").symlink_to(toy)
    rec = Recorder(Context(root, FRACTION, threads=1))
    for slices in ("FUSED_SLICES", "MULTIVECTOR_SLICES"):
        monkeypatch.setattr(stages, slices, (1_000, 2_000))
    monkeypatch.setattr(stages, "MINING_SAMPLE", 100)

    def run(self, name: str, argv: list[str], watch: list[Path]) -> Measurement:
        rec.ran.append((name, argv))
        return rec.measure(name)

    monkeypatch.setattr(Context, "run", run)
    return rec


def test_full_size_is_ms_marco_and_a_fraction_keeps_the_shape() -> None:
    assert MSMARCO.scaled(1.0) == MSMARCO
    assert MSMARCO.passages == 8_841_823
    assert MSMARCO.train_queries + MSMARCO.dev_queries + MSMARCO.test_queries == 509_962
    small = MSMARCO.scaled(1e-7)  # every count at least one, judgments within their queries
    assert small.train_queries == small.dev_queries == small.test_queries == 1
    assert small.passages >= 3 and small.train_second_positives <= small.train_queries


def test_the_collection_has_the_scaled_counts_in_beir_layout(toy: Path) -> None:
    shape = MSMARCO.scaled(FRACTION)
    collection = BeirCollection.load(toy)
    assert collection.num_docs() == shape.passages
    assert len(collection.queries()) == shape.train_queries + shape.dev_queries + \
        shape.test_queries
    train = collection.qrels("train")
    assert len(train) == shape.train_queries
    assert sum(len(d) for d in train.values()) == shape.train_queries + \
        shape.train_second_positives
    assert len(collection.qrels("dev")) == shape.dev_queries
    ids = collection.doc_ids()
    assert all(d in ids for split in ("train", "dev", "test")
               for docs in collection.qrels(split).values() for d in docs)


def test_lengths_and_words_have_ms_marcos_shape(toy: Path) -> None:
    collection = BeirCollection.load(toy)
    passages = {d.id: d.text.split() for d in collection.corpus()}
    mean = sum(map(len, passages.values())) / len(passages)
    assert 50 < mean < 62  # ~56 words
    queries = collection.queries()
    assert 5 < sum(len(q.split()) for q in queries.values()) / len(queries) < 7.5
    words = [w for text in passages.values() for w in text]
    stop_share = sum(w in STOP_WORDS for w in words) / len(words)
    assert 0.15 < stop_share < 0.45  # the Zipf head is the stop words
    # a training query is written from its first judged passage: BM25 can find it
    for qid, docs in list(collection.qrels("train").items())[:50]:
        first = next(iter(docs))
        content = set(passages[first]) - set(STOP_WORDS)
        assert set(queries[qid].split()) & content, qid


def test_the_same_seed_writes_the_same_bytes_and_a_second_call_reuses(toy: Path,
                                                                     tmp_path: Path) -> None:
    again = generate(tmp_path, FRACTION, progress=False)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv"):
        assert _digest(again / name) == _digest(toy / name)
    before = (again / "corpus.jsonl").stat().st_mtime_ns
    generate(tmp_path, FRACTION, progress=False)
    assert (again / "corpus.jsonl").stat().st_mtime_ns == before  # reused, not rewritten
    other = generate(tmp_path, FRACTION, seed=1, progress=False)  # another seed: rewritten
    assert _digest(other / "corpus.jsonl") != _digest(toy / "corpus.jsonl")


def test_a_measurement_sums_the_process_tree_and_watches_the_disk(tmp_path: Path) -> None:
    child = ("import time; block = bytearray(150 * 2**20); block[::4096] = b'x' * len(block[::4096]);"
             " time.sleep(1.5)")
    parent = (f"import subprocess, sys, time, pathlib; p = subprocess.Popen([sys.executable, "
              f"'-c', {child!r}]); pathlib.Path({str(tmp_path / 'out')!r}).write_bytes("
              f"b'y' * 5 * 2**20); p.wait()")
    m = run_measured([sys.executable, "-c", parent], watch=[tmp_path])
    assert m.returncode == 0
    assert m.peak_memory > 150 * 2**20  # the grandchild's block is counted
    assert 5 * 2**20 <= m.peak_disk < 6 * 2**20
    assert m.cpu_seconds > 0  # the tree's, the grandchild's included
    assert run_measured([sys.executable, "-c", "raise SystemExit(3)"]).returncode == 3


def test_the_disk_is_what_the_command_wrote_a_replaced_file_whole(tmp_path: Path) -> None:
    """A file there before counts only if the command replaces or changes it: a re-run that
    rewrites its output is measured at the output's size, not at the difference."""
    (tmp_path / "old.bin").write_bytes(b"o" * 2**20)  # left alone: not counted
    (tmp_path / "out.bin").write_bytes(b"x" * 2**20)  # the previous output, replaced
    rewrite = (f"import os, pathlib; t = pathlib.Path({str(tmp_path / 'out.tmp')!r}); "
               f"t.write_bytes(b'y' * 3 * 2**20); os.replace(t, {str(tmp_path / 'out.bin')!r})")
    m = run_measured([sys.executable, "-c", rewrite], watch=[tmp_path])
    assert 3 * 2**20 <= m.peak_disk < 4 * 2**20
    spin = "import time; t = time.process_time(); exec('while time.process_time() - t < 0.5: pass')"
    busy = run_measured([sys.executable, "-c", spin])
    assert 0.5 <= busy.cpu_seconds <= busy.seconds + 0.1


def test_the_candidates_projection_scales_the_negatives_part_only() -> None:
    probe = {"candidates": 2_000, "queries": 100, "queries_with_candidates": 10,
             "train_pairs": 1_000, "negatives_peak_bytes": 40_000,
             "negatives_held_bytes": 10_000 + 4 * 2_000 + 112 * 10,  # a fixed 10,000
             "example_seconds": {"with_candidates": 0.003, "without_candidates": 0.001},
             "phases": [{"phase": "read and candidates", "seconds": 5.0, "memory": 1000},
                        {"phase": "negatives read again", "seconds": 1.5, "memory": 1000}]}
    m = Measurement(seconds=20.0, peak_memory=2_000, peak_disk=0, returncode=0)
    projected = _with_every_candidate(m, probe)
    assert projected["projected_candidates"] == 20_000
    # what the sample added past the fixed part, for 9 more samples' worth of queries
    assert projected["projected_memory"] == 2_000 + (40_000 - 10_000) * 9
    # the negatives once (read twice by the probe) at 10x, examples at the with-candidates cost
    assert projected["projected_seconds"] == pytest.approx(20.0 + 1.5 * 8 + 0.002 * 1_000)
    assert _with_every_candidate(m, {**probe, "candidates": 0}) == {}


def test_a_training_row_adds_what_its_data_side_projects() -> None:
    from pyserini_moe.lab.scale.runner import _with_data_side

    results = {"train-came": {"seconds": 100.0, "peak_memory": 10, "projected_seconds": 100.0,
                              "projected_memory": 10},
               "examples-came": {"seconds": 50.0, "peak_memory": 6, "projected_seconds": 80.0,
                                 "projected_memory": 9}}
    row = _with_data_side("train-came", results)
    assert (row["projected_seconds"], row["projected_memory"]) == (130.0, 13)
    assert _with_data_side("examples-came", results) == results["examples-came"]


def test_stages_run_once_in_order_and_write_their_table(tmp_path: Path) -> None:
    ctx = Context(tmp_path, FRACTION, threads=1)
    with pytest.raises(SystemExit, match="needs bm25-index"):
        run_stages(ctx, ["bm25-mining"])
    stages = ["generate", "examples-sbmoe", "pretrain-cotmote", "train-sbmoe"]
    assert run_stages(ctx, stages) == stages
    # the BM25 index is built where the stages' trainer looks, under the root (disk measured)
    assert ctx.bm25_index.is_relative_to(tmp_path / "cache")
    assert run_stages(ctx, ["generate", "examples-sbmoe"]) == []  # measured: skipped
    result = json.loads((tmp_path / "results" / "examples-sbmoe.json").read_text())
    assert result["probe"]["passages"] == MSMARCO.scaled(FRACTION).passages
    assert result["peak_memory"] > 0 and result["fraction"] == FRACTION
    pretrain = json.loads((tmp_path / "results" / "pretrain-cotmote.json").read_text())
    assert [p["pairs"] for p in pretrain["points"]] == [2210, 4420]  # 10% and 20%, five each
    text = table(ctx)
    assert "| generate | full size |" in text and "| train-sbmoe |" in text
    assert "Not measured yet: bm25-index" in text
    assert (tmp_path / "work" / "models").is_dir()  # the paper file's output folder, under root


def test_the_fused_mining_runs_the_paper_files_steps_on_slices_and_projects_a_line(
        recorder: Recorder) -> None:
    """The paper file's three index steps and fused search on each corpus slice (the sample of
    training queries, this machine's threads), each command's figures projected by a line
    through the two slices to the whole corpus, the search's time times its parts."""
    from pyserini_moe.lab.scale import stages

    ctx, ran, root = recorder.ctx, recorder.ran, recorder.ctx.root
    result = stages.fused_mining(ctx)
    assert [name for name, _ in ran] == [f"fused-mining-{kind}-{n}" for n in (1_000, 2_000)
                                         for kind in ("impact", "multivector", "dense", "search")]
    search = dict(ran)["fused-mining-search-2000"]
    assert search[search.index("--topics") + 1] == str(ctx.sample_topics)
    assert search[search.index("--threads") + 1] == "1"
    assert str(root / "work" / "slice-2000-indexes" / "came-r1.dense") in search
    impact = dict(ran)["fused-mining-impact-2000"]  # a trained head's few hundred terms
    assert impact[impact.index("--doc-max-terms") + 1] == str(stages.IMPACT_TERMS)
    assert (root / "work" / "slice-1000" / "corpus.jsonl").read_text().count("\n") == 1_000
    full, parts = MSMARCO.scaled(FRACTION).passages, math.ceil(result["all_queries"] / 100)
    assert result["commands"]["dense"]["projected_seconds"] == pytest.approx(full / 1_000, 0.01)
    assert result["commands"]["search"]["projected_seconds"] == pytest.approx(
        full / 1_000 * parts, 0.01)
    assert result["projected_memory"] == pytest.approx(full * 1_000, 0.01)


def test_the_table_joins_kept_figures_and_keeps_rows_it_has_no_figures_for(tmp_path: Path) -> None:
    """A new machine's sitting adds its stages to the figures kept with the table; a stage whose
    figures are in neither keeps the row the table file had, and its head line."""
    from pyserini_moe.lab.scale.runner import measured

    ctx, kept = Context(tmp_path / "root"), tmp_path / "kept"
    figures = {"fraction": 1.0, "threads": 2, "cores": 2, "seconds": 60.0, "peak_memory": 2 ** 30,
               "peak_disk": 0, "projected_seconds": 60.0, "projected_memory": 2 ** 30,
               "projected_disk": 0}
    kept.mkdir()
    (kept / "generate.json").write_text(json.dumps(figures))
    (ctx.root / "results").mkdir(parents=True)
    (ctx.root / "results" / "bm25-index.json").write_text(json.dumps({**figures, "seconds": 900.0}))
    earlier = ("Measured at full size, 4 Lucene threads, 8 cores; full run: projected to MS MARCO "
               "on the same machine.\n\n| stage | scope |\n|---|---|\n"
               "| generate | full size | 9 min | old |\n| train-sbmoe | kept as it was |\n")
    assert set(measured(ctx, kept)) == {"generate", "bm25-index"}
    text = table(ctx, kept, earlier)
    assert "| generate | full size | 60 s | 1.00 GiB |" in text and "old" not in text
    assert "| bm25-index | full size | 15 min |" in text
    assert "| train-sbmoe | kept as it was |" in text
    assert "4 Lucene threads, 8 cores" in text and "2 Lucene threads, 2 cores" in text
    assert "examples-came" in text.split("Not measured yet:")[1]
    assert text.index("| generate |") < text.index("| bm25-index |") < text.index("| train-sbmoe")


def test_the_dpr_data_stages_run_the_paper_files_steps_on_two_slices(tmp_path: Path) -> None:
    """DPR's files in their formats (read back by the toolkit's own readers), then the taser
    file's ``dpr wiki``, ``dpr train`` and the trainer's data side on each slice, each projected
    by a line to DPR's 21M passages."""
    from pyserini_moe.data.dpr import iter_wikipedia, read_biencoder
    from pyserini_moe.lab.scale.synth import DPR

    ctx = Context(tmp_path, FRACTION, threads=1)
    stages = ["dpr-generate", "dpr-wiki", "dpr-train", "dpr-examples-taser"]
    assert run_stages(ctx, stages) == stages
    source = tmp_path / "dpr-source"
    small, large = (round(n * FRACTION) for n in (1_000_000, 5_000_000))
    assert sum(1 for _ in iter_wikipedia(source / "psgs_w100.tsv")) == large
    trivia = list(read_biencoder(source / "biencoder-trivia-train.json", "t"))  # psg_id
    assert len(trivia) == dict(DPR.scaled(FRACTION).train)["trivia"]
    assert all(int(p) <= small for ex in trivia for p in (*ex.positives, *ex.hard_negatives))
    for passages in (small, large):
        folder = tmp_path / "work" / f"dpr-{passages}"
        assert (folder / "corpus.jsonl.gz").is_file() and (folder / "qrels" / "train.tsv").is_file()
    result = json.loads((tmp_path / "results" / "dpr-examples-taser.json").read_text())
    assert [p["passages"] for p in result["points"]] == [small, large]
    assert result["projected_memory"] > 0 and result["probe"]["passages"] == large
    negatives = sum(len(ex.hard_negatives) for name, _ in DPR.train
                    for ex in read_biencoder(source / f"biencoder-{name}-train.json", name))
    assert 0 < result["probe"]["candidates"] <= negatives  # DPR's BM25 negatives, as candidates
    assert "| dpr-wiki | slices of 1,000,000 and 5,000,000 passages" in table(ctx)


def test_sharded_encoding_runs_each_index_as_shards_then_merges(recorder: Recorder) -> None:
    """Each round-1 index command as shards (their flags, their own folders) and one merge of
    them; a kind's projection is its slowest shard's plus its merge's."""
    from pyserini_moe.lab.scale import stages

    ctx, ran = recorder.ctx, recorder.ran
    # the second shard is the slower
    recorder.measure = lambda name: Measurement(int(name.rsplit("-", 1)[1]) / 1_000
                                                * (2 if "-1-" in name else 1), 1, 0, 0)
    result = stages.sharded_encoding(ctx)
    names = [name for name, _ in ran]
    assert names[:3] == ["sharded-impact-0-1000", "sharded-impact-1-1000",
                         "sharded-impact-merge-1000"]
    assert len(names) == 2 * 3 * (stages.SHARDS + 1)
    shard = dict(ran)["sharded-dense-1-2000"]
    assert shard[shard.index("--shard-id") + 1] == "1" and "--shard-num" in shard
    assert shard[shard.index("--index") + 1].endswith("slice-2000-shards/dense-shard1")
    merge = dict(ran)["sharded-dense-merge-2000"]
    assert merge[merge.index("--shards") + 1].endswith("dense-shard0")
    full = MSMARCO.scaled(FRACTION).passages
    assert result["commands"]["dense-shard"]["projected_seconds"] == pytest.approx(
        2 * full / 1_000, 0.01)
    assert result["commands"]["dense-merge"]["projected_seconds"] == pytest.approx(
        full / 1_000, 0.01)


def test_the_multivector_build_runs_the_paper_files_compressed_index_on_slices(
        recorder: Recorder) -> None:
    from pyserini_moe.lab.scale import stages

    ctx, ran, root = recorder.ctx, recorder.ran, recorder.ctx.root
    result = stages.multivector_build(ctx)
    assert [name for name, _ in ran] == ["multivector-build-1000", "multivector-build-2000"]
    argv = ran[1][1]
    assert argv[argv.index("--retriever") + 1] == "multivector"
    assert argv[argv.index("--faiss") + 1].startswith("ivf")  # the compressed build
    assert str(root / "work" / "slice-2000") in argv
    assert result["projected_seconds"] == pytest.approx(MSMARCO.scaled(FRACTION).passages / 1_000,
                                                        0.01)


def test_table_only_runs_nothing_and_writes_the_table(tmp_path: Path) -> None:
    from pyserini_moe.lab.scale.runner import main

    target = tmp_path / "table.md"
    assert main(["--root", str(tmp_path / "root"), "--table", str(target), "--table-only"]) == 0
    assert "Not measured yet: generate" in target.read_text()
    assert not (tmp_path / "root" / "msmarco").exists()
