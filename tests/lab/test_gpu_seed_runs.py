"""lab/gpu_seed_runs.py: the GPU machine's exact search and the runs it brings back must be the
runs the regressions would write here (same documents, same order, the query's own id dropped)."""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.modeling.auto import load_encoder
from pyserini_moe.modeling.base import Side
from pyserini_moe.runs import ranked, read_trec_run

_SPEC = importlib.util.spec_from_file_location(
    "gpu_seed_runs", Path(__file__).resolve().parents[2] / "lab" / "gpu_seed_runs.py")
tool = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tool)


def test_plan_lines_name_seed_recipe_overrides_and_encodings(tmp_path: Path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text("# comment\n\nminilm 0 zero-shot\n"
                    "sbmoe 43 encoders/sbmoe-protocol-minilm.yaml --set model.args.gate=random | "
                    "inference=all\n")
    jobs = tool.parse_plan(plan)
    assert [j["name"] for j in jobs] == ["minilm-s0", "sbmoe-s43"]
    assert jobs[1]["seed"] == 43 and jobs[1]["recipe"] == "encoders/sbmoe-protocol-minilm.yaml"
    assert jobs[1]["sets"] == ["--set", "model.args.gate=random"]
    assert jobs[1]["options"] == ["inference=all"] and jobs[0]["options"] == []


def test_search_is_exact_top_k_and_drops_the_query_itself() -> None:
    docs = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.5, 0.5]])
    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    doc_ids = ["a", "b", "c", "d"]
    positions, scores = tool.search(queries, docs, ["x", "y"], doc_ids, 2, False)
    assert positions.tolist() == [[0, 1], [2, 3]]
    # query "a" is document "a": it is dropped and the next hit fills its place
    positions, scores = tool.search(queries, docs, ["a", "c"], doc_ids, 2, True)
    assert positions.tolist() == [[1, 3], [3, 1]]
    assert np.all(np.diff(scores, axis=1) <= 0)


def test_encode_all_returns_vectors_in_the_texts_order(tiny_bert: Path) -> None:
    model = load_encoder(str(tiny_bert), device="cpu")
    texts = ["cat", "the cat sat on the mat today", "dense", "a mixture of expert models"]
    batched = tool.encode_all(model, texts, Side.PASSAGE, 32, batch=3)
    one_by_one = torch.cat([model.encode([t], Side.PASSAGE, 32).dense for t in texts])
    assert torch.allclose(batched, one_by_one, atol=1e-5)


def test_evaluate_pack_unpack_gives_the_runs_of_an_exact_search(
        tiny_bert: Path, tiny_corpus: Path, tmp_path: Path) -> None:
    npz = tmp_path / "job-s42.npz"
    tool.evaluate(argparse.Namespace(
        checkpoint=[f"zeroshot={tiny_bert}"], option=[], dev_topics="",
        topics=[f"{tiny_corpus}:test"], output=str(npz), device="cpu", batch=7, doc_length=256,
        query_length=512, kinds="dense"))
    packer = tool.Packer(tmp_path)
    packer.add(0, [npz])
    with tarfile.open(tmp_path / "runs-0.tar") as tar:
        assert tar.getnames() == ["job-s42.npz"]
    out = tmp_path / "runs"
    tool.unpack(argparse.Namespace(tars=[str(tmp_path / "runs-0.tar")], output=str(out),
                                    overwrite=False))
    run = read_trec_run(out / f"job-s42.zeroshot.{tiny_corpus.name}-test.trec")

    collection = BeirCollection.load(str(tiny_corpus))
    docs = list(collection.corpus())
    model = load_encoder(str(tiny_bert), device="cpu")
    d = model.encode([doc.contents for doc in docs], Side.PASSAGE, 256).dense
    queries = collection.topics("test")
    for qid, text in queries.items():
        scores = (model.encode([text], Side.QUERY, 512).dense @ d.T)[0]
        expected = [docs[i].id for i in torch.argsort(scores, descending=True).tolist()]
        ranked = sorted(run[qid], key=lambda doc: -run[qid][doc])
        assert ranked == expected[:len(ranked)]
        assert run[qid][ranked[0]] == pytest.approx(scores.max().item(), abs=1e-5)


def test_prepare_never_deletes_a_folder_it_did_not_build(tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine")
    plan = tmp_path / "plan.txt"
    plan.write_text("minilm 0 zero-shot\n")
    with pytest.raises(SystemExit, match="did not build"):
        tool.check_carry(precious, [plan])
    with pytest.raises(SystemExit, match="inside --carry"):
        tool.check_carry(tmp_path / "carry", [tmp_path / "carry" / "plan.txt"])
    assert (precious / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("line, message", [
    ("a fortytwo encoders/siamese-minilm.yaml", "plan.txt:1: expected NAME SEED RECIPE"),
    ("a 42 encoders/none.yaml", "recipe encoders/none.yaml not found"),
    ("a 42 'unclosed", "expected NAME SEED RECIPE"),
    ("a 42 encoders/siamese-minilm.yaml --set nokey", "overrides are --set KEY=VALUE"),
    # a dangling --set, a value without its --set
    ("a 42 encoders/siamese-minilm.yaml --set", "overrides are --set KEY=VALUE"),
    ("a 42 encoders/siamese-minilm.yaml --set a=1 b=2", "overrides are --set KEY=VALUE"),
    # a setting given twice (argparse kept the last, topics the first)
    ("a 42 encoders/siamese-minilm.yaml | topics=scifact:test topics=dev",
     "topics= is given twice"),
    ("a 42 encoders/siamese-minilm.yaml | kinds=dense kinds=impact", "kinds= is given twice"),
    ("a 42 encoders/siamese-minilm.yaml | inference=all inference=all",
     "inference= is given twice"),
    # a collection the carry does not hold, a path climbing out of its data/
    ("a 42 encoders/siamese-minilm.yaml | topics=nosuch:test", "nosuch is not a collection"),
    ("a 42 encoders/siamese-minilm.yaml | topics=../../etc:test",
     "../../etc is not a collection"),
    # no tokens
    ("a 42 encoders/siamese-minilm.yaml | doc_length=0", "doc_length=0: a number of tokens"),
    ("a 42 encoders/siamese-minilm.yaml | query_length=00", "query_length=00: a number of tokens"),
])
def test_a_malformed_plan_line_is_named_before_any_device_time(line, message, tmp_path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text(line + "\n")
    with pytest.raises(SystemExit, match=message):
        tool.parse_plan(plan)


def test_plan_settings_after_the_bar_say_how_to_search(tmp_path: Path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text("mote 43 encoders/cotmote-protocol-minilm.yaml | kinds=dense,impact,hybrid "
                    "doc_length=128 query_length=64\n"
                    "sbmoe 42 encoders/sbmoe-protocol-minilm.yaml | inference=all\n")
    mote, sbmoe = tool.parse_plan(plan)
    assert mote["options"] == [] and mote["evaluation"] == [
        "--kinds=dense,impact,hybrid", "--doc-length=128", "--query-length=64"]
    assert sbmoe["options"] == ["inference=all"] and sbmoe["evaluation"] == []
    plan.write_text("mote 43 encoders/cotmote-protocol-minilm.yaml | kinds=dense,bm25\n")
    with pytest.raises(SystemExit, match="kinds=dense,bm25: choose from dense,impact,hybrid"):
        tool.parse_plan(plan)
    plan.write_text("came 42 encoders/came-minilm.yaml | kinds=came topics=scifact:test,dev\n")
    (came,) = tool.parse_plan(plan)
    assert came["topics"] == ["scifact:test", "dev"] and came["evaluation"] == ["--kinds=came"]
    assert mote["topics"] is None  # run's --topics
    plan.write_text("came 42 encoders/came-minilm.yaml | topics=scifact\n")
    with pytest.raises(SystemExit, match="topics=scifact: comma-separated COLLECTION:SPLIT"):
        tool.parse_plan(plan)


def test_packer_fills_tars_by_size_and_keeps_what_would_not_come_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Jobs go into tars in the order they finish, a new tar where one would pass TAR_BYTES;
    a job past TARS tars is left in scratch and said (a call brings back 8 files)."""
    monkeypatch.setattr(tool, "TAR_BYTES", 250)
    monkeypatch.setattr(tool, "TARS", 2)
    jobs = []
    for i in range(5):
        (tmp_path / f"j{i}.npz").write_bytes(b"x" * 100)
        jobs.append(tmp_path / f"j{i}.npz")
    out = tmp_path / "out"
    out.mkdir()
    packer = tool.Packer(out)
    assert [packer.add(i, [job]) for i, job in enumerate(jobs)] == [True] * 4 + [False]
    with tarfile.open(out / "runs-0.tar") as tar:
        assert tar.getnames() == ["j0.npz", "j1.npz"]
    with tarfile.open(out / "runs-1.tar") as tar:
        assert tar.getnames() == ["j2.npz", "j3.npz"]
    assert "job 4: 0.0 MiB of runs do not fit" in capsys.readouterr().out


def test_quantized_weights_are_the_impact_index_terms() -> None:
    from pyserini_moe.encode.impact import quantize

    torch.manual_seed(0)
    weights = torch.relu(torch.randn(5, 40)) * 0.05
    weights[0, :8] = 0.1  # ties at the cut
    vocab = [f"t{i}" for i in range(40)]
    for max_terms in (None, 6):
        dense = tool.quantized(weights, max_terms)
        expected = quantize(weights, vocab, tool.QUANTIZATION, max_terms)
        got = [{vocab[i]: int(w) for i, w in enumerate(row.tolist()) if w} for row in dense]
        assert got == expected


def _device_runs(model: Path, corpus: Path, kinds: str, tmp_path: Path) -> dict[str, dict]:
    """The runs of ``kinds`` the device step writes for ``model`` (its last checkpoint) on
    ``corpus``'s test queries, through evaluate, a tar and unpack, as on the machine."""
    npz = tmp_path / "job-s1.npz"
    tool.evaluate(argparse.Namespace(
        checkpoint=[f"last={model}"], option=[], dev_topics="", topics=[f"{corpus}:test"],
        output=str(npz), device="cpu", batch=7, doc_length=32, query_length=16, kinds=kinds))
    tool.Packer(tmp_path).add(0, [npz])
    _unpack([tmp_path / "runs-0.tar"], tmp_path / "r")
    label = {kind: "last" if kind == "dense" else f"last+{kind}" for kind in kinds.split(",")}
    return {kind: read_trec_run(tmp_path / "r" / f"job-s1.{name}.{corpus.name}-test.trec")
            for kind, name in label.items()}


def _mote_indexes(tiny_bert: Path, corpus: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A tiny random CoT-MoTE model and its dense and impact indexes of ``corpus`` built here
    (32 passage tokens): what the device's runs are compared with."""
    from pyserini_moe.cli import run_main
    from pyserini_moe.index import __main__ as index_cli
    from pyserini_moe.modeling import CotMoteEncoder

    torch.manual_seed(0)
    model = CotMoteEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "mote")
    dense, impact = tmp_path / "dense", tmp_path / "impact"
    assert run_main(index_cli.main, ["--retriever", "dense", "impact", "--index", str(dense),
                                     str(impact), "--corpus", str(corpus), "--encoder",
                                     str(model), "--max-length", "32", "--device", "cpu",
                                     "--quiet"]) == 0
    return model, dense, impact


def test_impact_and_hybrid_runs_are_the_lucene_and_fused_runs(tiny_bert: Path, tiny_corpus: Path,
                                                               tmp_path: Path) -> None:
    """The device's impact and hybrid runs of a CoT-MoTE model rank as the Lucene impact index
    and ``search --retriever fused --fusion exact`` here (top 10 of every query)."""
    from pyserini_moe.search import __main__ as search_cli

    model, dense, impact = _mote_indexes(tiny_bert, tiny_corpus, tmp_path)
    here = {}
    for kind, indexes in (("impact", [impact]), ("hybrid", [dense, impact])):
        out = tmp_path / f"{kind}.trec"
        extra = ["--fusion", "exact"] if kind == "hybrid" else []
        assert search_cli.main(["--retriever", "fused" if kind == "hybrid" else kind, "--index",
                                *map(str, indexes), "--topics", f"{tiny_corpus}:test",
                                "--query-max-length", "16", "--hits", "10", "--output", str(out),
                                "--device", "cpu", "--quiet", *extra]) == 0
        here[kind] = read_trec_run(out)
    runs = _device_runs(model, tiny_corpus, "dense,impact,hybrid", tmp_path)
    for kind, run in here.items():
        device = runs[kind]
        for qid, hits in run.items():  # both in trec_eval's order (ties: docid descending)
            assert [d for d, _ in ranked(hits)] == [d for d, _ in ranked(device[qid])][:10], \
                (kind, qid)


def test_came_local_and_fused_runs_are_the_multivector_and_came_sum_runs(
        bert3: Path, tiny_corpus: Path, tmp_path: Path) -> None:
    """The device's ``local`` run of a CAME model ranks and scores as the multi-vector index here
    and its ``came`` run ranks as ``search --retriever fused --fusion came_sum`` (top 10 of every
    query). Fused scores may differ where the index's candidate stage left a passage out of the
    local expert's list here (eq. 12 then fills in its K-th score); the device scores them all."""
    from pyserini_moe.cli import run_main
    from pyserini_moe.index import __main__ as index_cli
    from pyserini_moe.modeling import CameEncoder
    from pyserini_moe.search import __main__ as search_cli

    torch.manual_seed(0)
    model = CameEncoder.from_backbone(bert3, shared_layers=1, dim=16, pooling="mean", device="cpu")
    with torch.no_grad():  # terms above 0, as after training (see tests/search/test_experts.py)
        model.heads["lexical"].bias.add_(0.5)
    came = model.save(tmp_path / "came")
    kinds = ("impact", "multivector", "dense")
    paths = [str(tmp_path / kind) for kind in kinds]
    assert run_main(index_cli.main, ["--retriever", *kinds, "--corpus", str(tiny_corpus),
                                     "--index", *paths, "--encoder", str(came), "--max-length",
                                     "32", "--device", "cpu", "--quiet"]) == 0
    here = {}
    for kind, indexes in (("local", paths[1:2]), ("came", paths)):
        out = tmp_path / f"{kind}.trec"
        retriever = "fused" if kind == "came" else "multivector"
        assert search_cli.main(["--retriever", retriever, "--index", *indexes, "--topics",
                                f"{tiny_corpus}:test", "--query-max-length", "16", "--hits", "10",
                                "--output", str(out), "--device", "cpu", "--quiet"]) == 0
        here[kind] = read_trec_run(out)
    runs = _device_runs(came, tiny_corpus, "local,came", tmp_path)
    for kind, run in here.items():
        device = runs[kind]
        for qid, hits in run.items():
            assert [d for d, _ in ranked(hits)] == [d for d, _ in ranked(device[qid])][:10], \
                (kind, qid)
            if kind == "local":
                assert [s for _, s in ranked(hits)] == pytest.approx(
                    [s for _, s in ranked(device[qid])][:10], abs=1e-4), qid


def test_arguana_queries_are_searched_at_512_tokens_whatever_the_plan_says(
        tiny_bert: Path, tiny_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ArguAna's queries are whole arguments: a plan's 64-token cut must not reach them."""
    spec = f"{tiny_corpus}:test"
    monkeypatch.setitem(tool.LONG_QUERY_TOPICS, spec, 512)
    lengths = []
    real = tool.encode_fields

    def spy(model, texts, side, max_length, batch, fields):
        lengths.append((side.name, max_length))
        return real(model, texts, side, max_length, batch, fields)

    monkeypatch.setattr(tool, "encode_fields", spy)
    tool.evaluate(argparse.Namespace(
        checkpoint=[f"last={tiny_bert}"], option=[], dev_topics="", topics=[spec],
        output=str(tmp_path / "j.npz"), device="cpu", batch=7, doc_length=32, query_length=16,
        kinds="dense"))
    assert ("QUERY", 512) in lengths and ("QUERY", 16) not in lengths


# ---------------------- plan, prepare, evaluate, unpack and run: bad inputs, failed jobs, one line

def _unpack(tars: list[Path], output: Path, overwrite: bool = False) -> None:
    tool.unpack(argparse.Namespace(tars=[str(t) for t in tars], output=str(output),
                                   overwrite=overwrite))


def _npz(meta: dict | None, **arrays: np.ndarray) -> bytes:
    """A job's npz as evaluate writes it (``meta`` None: none)."""
    if meta is not None:
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _job(corpus: Path, key: str = "last.c-test", collection: str | None = None,
         digests: bool = True) -> bytes:
    """One run of query q0 (hits: the corpus's first two passages) over ``corpus``."""
    collection = collection or str(corpus)
    meta = {"topics": {key: {"qids": ["q0"], "collection": collection}}}
    if digests:
        meta["digests"] = {collection: tool.ids_digest(tool.read_corpus(str(corpus))[0])}
    return _npz(meta, **{f"{key}.pos": np.array([[0, 1]], dtype=np.int16)})


def test_the_same_job_twice_in_a_plan_is_refused_naming_both_lines(tmp_path: Path) -> None:
    """Both would train into one scratch folder and write one npz."""
    plan = tmp_path / "plan.txt"
    plan.write_text("a 42 encoders/siamese-minilm.yaml\na 43 encoders/siamese-minilm.yaml\n"
                    "# again\na 42 encoders/siamese-minilm.yaml | kinds=dense\n")
    with pytest.raises(SystemExit, match=r"plan.txt:1 and 4: both are a seed 42"):
        tool.parse_plan(plan)


def test_plan_topics_of_a_carried_collection_are_known(tmp_path: Path) -> None:
    """COLLECTION:SPLIT is known where the carry holds the collection (prepare's
    --collections; on the device its data/), TOPICS' specs always."""
    plan = tmp_path / "plan.txt"
    plan.write_text("a 42 encoders/siamese-minilm.yaml | topics=tc:test,scifact:test,dev\n")
    (job,) = tool.parse_plan(plan, ["tc"])
    assert job["topics"] == ["tc:test", "scifact:test", "dev"]
    with pytest.raises(SystemExit, match="tc is not a collection the carry holds"):
        tool.parse_plan(plan, ["cranfield"])


def test_a_recipe_outside_the_repository_is_refused(tmp_path: Path) -> None:
    """Only the repository travels to the device: an absolute path, or one climbing
    out of it, would not be found there, even where it exists here."""
    recipe = tmp_path / "mine.yaml"
    shutil.copy(tool.ROOT / "encoders" / "siamese-minilm.yaml", recipe)
    plan = tmp_path / "plan.txt"
    for path in (recipe, os.path.relpath(recipe, tool.ROOT),
                 tool.ROOT / "encoders" / "siamese-minilm.yaml"):
        plan.write_text(f"a 42 {path}\n")
        with pytest.raises(SystemExit, match="give a path inside the repository"):
            tool.parse_plan(plan)


def test_dev_is_searched_in_the_recipes_own_collection(
        tiny_bert: Path, tiny_corpus: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The held-out queries are the recipe's data.collection's (recipe.yaml beside
    dev_topics.tsv, as the trainer writes it), not SciFact's whatever the recipe."""
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(tmp_path))  # no SciFact here
    train = tmp_path / "a-s42"
    train.mkdir()
    (train / "dev_topics.tsv").write_text("q0\tcat sat on the mat\nq1\tdense retrieval\n")
    npz = tmp_path / "j.npz"
    namespace = argparse.Namespace(
        checkpoint=[f"last={tiny_bert}"], option=[], dev_topics=str(train / "dev_topics.tsv"),
        topics=["dev"], output=str(npz), device="cpu", batch=7, doc_length=32,
        query_length=16, kinds="dense")
    with pytest.raises(SystemExit, match="recipe.yaml beside it"):
        tool.evaluate(namespace)
    (train / "recipe.yaml").write_text(
        f"output_dir: {train}\nmodel: {{type: siamese}}\ndata: {{collection: {tiny_corpus}}}\n"
        "training: {learning_rate: 1.0e-5}\n")
    tool.evaluate(namespace)
    meta = json.loads(bytes(np.load(npz)["meta"]).decode())
    assert meta["topics"]["last.dev"] == {"qids": ["q0", "q1"], "collection": str(tiny_corpus)}
    tool.Packer(tmp_path).add(0, [npz])
    _unpack([tmp_path / "runs-0.tar"], tmp_path / "runs")
    run = read_trec_run(tmp_path / "runs" / "j.last.dev.trec")
    assert set(run) == {"q0", "q1"} and all(d.startswith("d") for h in run.values() for d in h)


@pytest.fixture
def prepare_setup(tiny_bert: Path, tiny_corpus: Path, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> argparse.Namespace:
    """prepare's arguments over a data root holding ``tc`` (the tiny corpus), the tiny BERT in
    the packaged MiniLM's place, and a carry it built once."""
    from pyserini_moe.modeling import backbone

    monkeypatch.setattr(backbone, "resolve_backbone", lambda name: tiny_bert)
    shutil.copytree(tiny_corpus, tmp_path / "data" / "tc")
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(tmp_path / "data"))
    (tmp_path / "neg.trec").write_text("q0 Q0 d1 1 1.0 bm25\n")
    (tmp_path / "plan.txt").write_text("a 42 encoders/siamese-minilm.yaml | topics=tc:test\n")
    args = argparse.Namespace(carry=str(tmp_path / "carry"), plan=str(tmp_path / "plan.txt"),
                              negatives=str(tmp_path / "neg.trec"), collections=["tc"])
    tool.prepare(args)
    return args


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_prepare_builds_a_marked_carry_the_device_parses(prepare_setup) -> None:
    """The carry holds the tool's mark; on the device, its data/ is what the plan's topics
    may name."""
    carry = Path(prepare_setup.carry)
    assert tool.is_carry(carry)
    assert {"minilm/model.fp16.safetensors", "data/tc/corpus.jsonl", tool.NEGATIVES,
            "plan.txt"} <= set(_tree(carry))
    assert tool.parse_plan(carry / "plan.txt", ["tc"])[0]["topics"] == ["tc:test"]
    tool.prepare(prepare_setup)  # its own carry is rebuilt
    assert tool.is_carry(carry) and sorted(p.name for p in carry.parent.iterdir()) == [
        "carry", "data", "neg.trec", "plan.txt"]


@pytest.mark.parametrize("change, message", [
    ({"env": "nodata"}, "no shared data folder"),
    ({"collections": ["tc", "nosuch"]}, "--collections nosuch: no such collection"),
    ({"collections": ["../data/tc"]}, "no such collection"),
    ({"negatives": "nosuch.trec"}, "--negatives .*nosuch.trec not found"),
    # in the data root, but not carried
    ({"plan": "a 42 encoders/siamese-minilm.yaml | topics=other:test\n"},
     "other is not a collection the carry holds"),
])
def test_prepare_checks_every_input_before_it_touches_the_carry(
        prepare_setup, change: dict, message: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing input is one error line, and the earlier carry stays whole."""
    carry = Path(prepare_setup.carry)
    before = _tree(carry)
    if "env" in change:
        monkeypatch.setenv("PYSERINI_MOE_DATA", str(tmp_path / change["env"]))
    if "collections" in change:
        prepare_setup.collections = change["collections"]
    if "negatives" in change:
        prepare_setup.negatives = str(tmp_path / change["negatives"])
    if "plan" in change:
        shutil.copytree(tmp_path / "data" / "tc", tmp_path / "data" / "other")
        Path(prepare_setup.plan).write_text(change["plan"])
    with pytest.raises(SystemExit, match=message):
        tool.prepare(prepare_setup)
    assert _tree(carry) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["carry", "data", "neg.trec",
                                                          "plan.txt"]


def test_a_failed_build_leaves_the_earlier_carry_whole(
        prepare_setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The carry is built beside it and renamed into place: a failure midway leaves
    neither half a carry nor the half-built folder."""
    from pyserini_moe.modeling import backbone

    carry = Path(prepare_setup.carry)
    before = _tree(carry)
    def gone(name: str) -> Path:
        raise OSError("the backbone is gone")

    monkeypatch.setattr(backbone, "resolve_backbone", gone)
    with pytest.raises(OSError, match="the backbone is gone"):
        tool.prepare(prepare_setup)
    assert _tree(carry) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["carry", "data", "neg.trec",
                                                          "plan.txt"]


def test_only_the_tools_own_mark_makes_a_folder_its_carry(tmp_path: Path) -> None:
    """A user's folder with a plan.txt of their own (or a file named like the mark) is
    not a carry: prepare would delete it."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("mine")
    (mine / "plan.txt").write_text("my notes")
    with pytest.raises(SystemExit, match="did not build"):
        tool.check_carry(mine, [])
    (mine / tool.CARRY_MARK).write_text("something else")
    with pytest.raises(SystemExit, match="did not build"):
        tool.check_carry(mine, [])
    (mine / tool.CARRY_MARK).write_text(tool.CARRY_SIGNATURE)
    tool.check_carry(mine, [])
    assert (mine / "thesis.tex").read_text() == "mine"


@pytest.mark.parametrize("kinds, topics, message", [
    ("dense,bogus", "{corpus}:test", "--kinds dense,bogus: choose from dense,impact"),
    ("impact", "{corpus}:test", r"needs sparse, which .* \(its representations: dense\)"),
    ("hybrid", "{corpus}:test", r"needs sparse, which"),
    ("dense", "nosuch:test", "collection nosuch: unknown collection"),
])
def test_evaluate_refuses_a_kind_or_collection_in_one_line(
        kinds: str, topics: str, message: str, tiny_bert: Path, tiny_corpus: Path,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(tmp_path))
    with pytest.raises(SystemExit, match=message):
        tool.evaluate(argparse.Namespace(
            checkpoint=[f"last={tiny_bert}"], option=[], dev_topics="",
            topics=[topics.format(corpus=tiny_corpus)], output=str(tmp_path / "j.npz"),
            device="cpu", batch=7, doc_length=32, query_length=16, kinds=kinds))
    assert not (tmp_path / "j.npz").exists()


def test_unpack_refuses_member_and_run_names_that_leave_the_output(
        tiny_corpus: Path, tmp_path: Path) -> None:
    """A tar's names become paths here: '../../x.npz' must not write two folders above."""
    out = tmp_path / "a" / "b" / "out"
    for name, data in (("../../evil.npz", _job(tiny_corpus)),
                       ("evil.npz", _job(tiny_corpus, key="../../last.c-test"))):
        tar = _tar(tmp_path / "evil.tar", {name: data})
        with pytest.raises(SystemExit, match="not a plain file name"):
            _unpack([tar], out)
    assert [p for p in tmp_path.rglob("*.trec")] == []


@pytest.mark.parametrize("members, message", [
    ({"j.npz": "no digests"}, r"j.npz is not a job's runs \(KeyError"),
    ({"j.npz": "truncated"}, r"j.npz is not a job's runs \(BadZipFile"),
    ({"j.npz": "not a zip"}, r"j.npz is not a job's runs"),
    ({"j.npz": "no meta"}, r"j.npz is not a job's runs \(KeyError"),
    (None, "nosuch.tar is not a tar file"),
])
def test_unpack_of_a_broken_tar_is_one_error_line(members, message, tiny_corpus: Path,
                                                  tmp_path: Path) -> None:
    good = _job(tiny_corpus)
    payload = {"no digests": _job(tiny_corpus, digests=False), "truncated": good[:len(good) // 2],
               "not a zip": b"x" * 100, "no meta": _npz(None, x=np.zeros(2))}
    tar = (_tar(tmp_path / "t.tar", {name: payload[what] for name, what in members.items()})
           if members else tmp_path / "nosuch.tar")
    with pytest.raises(SystemExit, match=message):
        _unpack([tar], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unpack_where_the_collection_is_not_here_is_one_error_line(
        tiny_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The device's collection 'tc' is not in this machine's data root."""
    shutil.copytree(tiny_corpus, tmp_path / "data" / "tc")
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(tmp_path / "data"))
    tar = _tar(tmp_path / "t.tar", {"j.npz": _job(tmp_path / "data" / "tc", collection="tc")})
    _unpack([tar], tmp_path / "ok")
    assert (tmp_path / "ok" / "j.last.c-test.trec").is_file()
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(tmp_path / "empty"))
    with pytest.raises(SystemExit, match="collection tc: unknown collection 'tc'"):
        _unpack([tar], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unpack_replaces_a_file_in_the_output_only_with_overwrite(
        tiny_corpus: Path, tmp_path: Path) -> None:
    """A same-named file in --output may be the user's own run."""
    tar = _tar(tmp_path / "t.tar", {"j.npz": _job(tiny_corpus)})
    out = tmp_path / "out"
    out.mkdir()
    (out / "j.last.c-test.trec").write_text("my run")
    with pytest.raises(SystemExit, match="j.last.c-test.trec exists .*--overwrite"):
        _unpack([tar], out)
    assert (out / "j.last.c-test.trec").read_text() == "my run"
    _unpack([tar], out, overwrite=True)
    assert read_trec_run(out / "j.last.c-test.trec") == {"q0": {"d0": 2.0, "d1": 1.0}}


def _run_args(tmp_path: Path, **changes) -> argparse.Namespace:
    """run's arguments over a carry of one zero-shot job, its backbone already restored."""
    carry = tmp_path / "carry"
    (carry / "data").mkdir(parents=True, exist_ok=True)
    (carry / "plan.txt").write_text("a 42 zero-shot\n")
    (tmp_path / "scratch" / "minilm").mkdir(parents=True, exist_ok=True)
    (tmp_path / "scratch" / "minilm" / "model.safetensors").write_text("")
    (tmp_path / "out").mkdir(exist_ok=True)
    return argparse.Namespace(**{
        "carry": str(carry), "out": str(tmp_path / "out"), "scratch": str(tmp_path / "scratch"),
        "workers": 1, "threads": 1, "budget": 60.0, "topics": ["scifact:test"],
        "evaluate_only": False, **changes})


def test_run_exits_non_zero_saying_how_many_jobs_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """A call whose every job failed must not say "all done" and exit 0."""
    def failing(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, "", "boom")

    monkeypatch.setattr(tool.subprocess, "run", failing)
    with pytest.raises(SystemExit, match=r"1 of 1 jobs failed \(see .*log.tsv\)"):
        tool.run(_run_args(tmp_path))
    assert "0 jobs searched, 1 failed" in capsys.readouterr().out
    assert "a-s42\tevaluate\t" in (tmp_path / "out" / "log.tsv").read_text()


@pytest.mark.parametrize("flag", ["workers", "threads"])
def test_run_refuses_fewer_than_one_worker_or_thread(flag: str, tmp_path: Path) -> None:
    """--workers 0 is refused up front, not a ValueError traceback after the backbone is
    restored."""
    args = _run_args(tmp_path, **{flag: 0})
    with pytest.raises(SystemExit, match=f"--{flag} 0: at least 1"):
        tool.run(args)
    assert not (tmp_path / "out" / "log.tsv").exists()


def test_only_recipes_that_mine_bm25_negatives_get_the_carried_run() -> None:
    """The SB-MoE recipes train on in-batch negatives (num_negatives 0) and refuse any
    negatives section: the device's training must not be given one."""
    carry = Path("/carry")
    sbmoe = {"recipe": "encoders/sbmoe-protocol-minilm.yaml", "sets": []}
    came = {"recipe": "encoders/came-protocol-minilm.yaml", "sets": []}
    assert tool.negatives_sets(sbmoe, carry) == []
    assert tool.negatives_sets(came, carry) == [
        "--set", "data.negatives.source=run", "--set", f"data.negatives.run={carry / 'negatives.trec'}"]


# ------------------------- stricter plan lines, evaluate's flags, --negatives, unpack's output

def _plan(tmp_path: Path, text: str) -> Path:
    plan = tmp_path / "plan.txt"
    plan.write_text(text)
    return plan


SIAMESE = "encoders/siamese-minilm.yaml"


@pytest.mark.parametrize("line, message", [
    # NAME names the job's folder and files under --scratch
    ("../../h12evil 42 zero-shot", r"NAME '../../h12evil': letters, digits"),
    ("a/b 42 zero-shot", r"NAME 'a/b'"),
    ("a..b 42 zero-shot", r"NAME 'a..b'"),
    # superscript digits pass str.isdigit
    (f"a 42 {SIAMESE} | doc_length=²", "doc_length=²: a number of tokens"),
    (f"a 42 {SIAMESE} | query_length=³", "query_length=³: a number of tokens"),
    # more than one bar
    (f"a 42 {SIAMESE} | kinds=dense | topics=dev", "one | a line"),
    # an empty option key would become --option==x
    (f"a 42 {SIAMESE} | =x", "'=x': the settings after | are OPTION=VALUE, with a name"),
    (f"a 42 {SIAMESE} --set =1", "overrides are --set KEY=VALUE"),
    # a trailing comment
    (f"a 42 {SIAMESE} # first seed", "a comment goes on its own line"),
    (f"a 42 {SIAMESE} | kinds=dense #note", "a comment goes on its own line"),
])
def test_plan_lines_refused(line: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=message):
        tool.parse_plan(_plan(tmp_path, line + "\n"))


@pytest.mark.parametrize("sets, message", [
    # what train refuses is refused here, naming the plan line
    ("--set training.nosuch=1", r"plan.txt:1: --set training.nosuch=1: unknown field"),
    ("--set training.max_steps=1 --set training.max_steps=2", "training.max_steps is given twice"),
    ("--set data.seed=1 --set 'data={}'", "replaces the whole of data"),
    ("--set training.max_steps=0", r"plan.txt:1: --set training.max_steps=0"),
    # run sets these itself; train on the device would refuse them as given twice
    ("--set model.backbone=/x", "run sets model.backbone itself"),
    ("--set 'model={type: siamese}'", "run sets model.backbone itself"),
    ("--set data.negatives.source=bm25", "run sets data.negatives.source itself"),
    ("--set data.negatives.run=x.trec --set data.negatives.source=bm25",
     "--set data.negatives.run=x.trec: not read when source is 'bm25'"),
])
def test_plan_sets_are_applied_to_the_recipe_at_prepare(
        sets: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=message):
        tool.parse_plan(_plan(tmp_path, f"a 42 {SIAMESE} {sets} | topics=scifact:test\n"))


def test_plan_sets_run_does_not_give_are_kept(tmp_path: Path) -> None:
    """Only the fields run sets clash: depth of the carried run, or a model-mined
    recipe's own negatives (run then sets none), pass."""
    (job,) = tool.parse_plan(_plan(tmp_path, f"a 42 {SIAMESE} --set data.negatives.depth=30\n"))
    assert job["sets"] == ["--set", "data.negatives.depth=30"]
    with pytest.raises(SystemExit, match="zero-shot trains nothing"):
        tool.parse_plan(_plan(tmp_path, "a 42 zero-shot --set training.max_steps=1\n"))


def test_a_bar_inside_quotes_stays_in_its_value(tmp_path: Path) -> None:
    """The line is not cut at a '|' inside quotes (that gave "No closing quotation")."""
    plan = _plan(tmp_path, f"a 42 {SIAMESE} --set 'training.note=a|b' | kinds=dense\n"
                           f"b 42 {SIAMESE}|kinds=impact\n")
    a, b = tool.parse_plan(plan, check_sets=False)
    assert a["sets"] == ["--set", "training.note=a|b"] and a["evaluation"] == ["--kinds=dense"]
    assert b["evaluation"] == ["--kinds=impact"]


def test_bom_crlf_and_indented_comments(tmp_path: Path) -> None:
    """A BOM does not begin the first job's name, and an indented comment is no job line."""
    plan = tmp_path / "plan.txt"
    plan.write_bytes("\ufeffa 42 zero-shot\r\n  # my seeds\r\n\t# more\r\nb 1 zero-shot\r\n"
                     .encode())
    assert [j["name"] for j in tool.parse_plan(plan)] == ["a-s42", "b-s1"]


def test_shipped_plans_still_parse() -> None:
    """The protocol plans pass the stricter checks (their --set applied to their recipes)."""
    collections = ["scifact", "arguana", "cranfield", "cisi", "vaswani"]
    for plan in sorted((tool.ROOT / "lab" / "gpu_plans").glob("*.txt")):
        assert tool.parse_plan(plan, collections), plan


def test_run_logs_a_job_whose_setup_raises_as_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """A recipe refused with its --set on the device is a failed job, not a traceback with no
    summary and no log line; the other jobs go on and the summary counts it."""
    args = _run_args(tmp_path)
    (Path(args.carry) / "plan.txt").write_text(
        f"a 42 {SIAMESE} --set training.nosuch=1\nb 42 zero-shot\n")

    def fake(cmd, **kwargs):
        Path(cmd[cmd.index("--output") + 1]).write_bytes(b"npz")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(tool.subprocess, "run", fake)
    with pytest.raises(SystemExit, match=r"1 of 2 jobs failed"):
        tool.run(args)
    assert "1 jobs searched, 1 failed" in capsys.readouterr().out
    log = (tmp_path / "out" / "log.tsv").read_text()
    assert "a-s42\tsetup\t" in log and "# ConfigError: --set training.nosuch=1" in log
    assert (tmp_path / "out" / "runs-0.tar").is_file()


@pytest.mark.parametrize("make, message", [
    ("folder", "is a folder, not a file"),
    ("missing", "not found"),
    ("empty", "is empty"),
    ("blank", "is empty"),
    ("trec qrels", r"has 4 columns \(it looks like a qrels file\)"),
    ("beir qrels", r"has 3 columns \(it looks like a qrels file\)"),
])
def test_negatives_must_be_a_trec_run(make: str, message: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data" / "tc").mkdir(parents=True)
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(tmp_path / "data"))
    path = tmp_path / "neg"
    content = {"empty": "", "blank": "\n  \n", "trec qrels": "q0 0 d1 1\n",
               "beir qrels": "query-id\tcorpus-id\tscore\nq0\td1\t1\n"}
    if make == "folder":
        path.mkdir()
    elif make in content:
        path.write_text(content[make])
    with pytest.raises(SystemExit, match=message):
        tool.check_inputs(["tc"], str(path))
    path.unlink(missing_ok=True) if not path.is_dir() else path.rmdir()
    path.write_text("\nq0 Q0 d1 1 1.0 bm25\n")
    assert tool.check_inputs(["tc"], str(path)) == tmp_path / "data"


def _eval_args(tmp_path: Path, **changes) -> argparse.Namespace:
    return argparse.Namespace(**{
        "checkpoint": [], "option": [], "dev_topics": "", "topics": ["scifact:test"],
        "output": str(tmp_path / "j.npz"), "device": "cpu", "batch": 7, "doc_length": 32,
        "query_length": 16, "kinds": "dense", **changes})


@pytest.mark.parametrize("change, message", [
    # the second checkpoint's runs would replace the first's
    ({"checkpoint": ["last={bert}", "last={bert}"]}, "--checkpoint last= is given twice"),
    # not a ValueError unpacking
    ({"option": ["inference"]}, "--option inference: expected KEY=VALUE"),
    ({"option": ["=all"]}, "--option =all: expected KEY=VALUE"),
    # an empty path is the current folder; a collection is no model
    ({"checkpoint": ["last="]}, "--checkpoint last=: expected NAME=FOLDER"),
    ({"checkpoint": ["last={corpus}"]}, "is neither a saved model nor a backbone"),
    ({"checkpoint": ["last={corpus}/corpus.jsonl"]}, "is not a folder"),
    ({"checkpoint": ["../x={bert}"]}, "expected NAME=FOLDER"),
    # the npz's folder is checked before the search, not found missing after it
    ({"output": "{tmp}/nodir/e.npz"}, "its folder .*nodir does not exist"),
    ({"output": "{tmp}"}, "is a folder: name the npz file"),
    # not the ValueError "range() arg 3 must not be zero"
    ({"batch": 0}, "--batch 0: at least 1"),
    ({"doc_length": 0}, "--doc-length 0: at least 1"),
])
def test_evaluate_refuses_flags_before_any_model_is_loaded(
        change: dict, message: str, tiny_bert: Path, tiny_corpus: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pyserini_moe.modeling import auto

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded before the flags were checked")

    monkeypatch.setattr(auto, "load_encoder", no_load)
    values = {"bert": tiny_bert, "corpus": tiny_corpus, "tmp": tmp_path}
    change = {k: [x.format(**values) for x in v] if isinstance(v, list)
              else v.format(**values) if isinstance(v, str) else v for k, v in change.items()}
    args = _eval_args(tmp_path, **{"checkpoint": [f"last={tiny_bert}"], **change})
    with pytest.raises(SystemExit, match=message):
        tool.evaluate(args)
    assert not (tmp_path / "j.npz").exists()


@pytest.mark.parametrize("option, message", [
    ("bogus=1", "--option bogus=1: siamese models have no encode-time option bogus"),
    ("inference=all", "have no encode-time option inference"),
])
def test_an_option_the_model_refuses_is_one_line(
        option: str, message: str, tiny_bert: Path, tiny_corpus: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One error line before any search, not a UserError traceback from configure after the
    plain checkpoint was searched."""
    encoded = []
    monkeypatch.setattr(tool, "encode_fields", lambda *a, **k: encoded.append(1))
    with pytest.raises(SystemExit, match=message):
        tool.evaluate(_eval_args(tmp_path, checkpoint=[f"last={tiny_bert}"], option=[option],
                                 topics=[f"{tiny_corpus}:test"]))
    assert encoded == [] and not (tmp_path / "j.npz").exists()


def test_a_checkpoint_that_does_not_load_is_one_line(tmp_path: Path) -> None:
    """A folder with a config.json transformers cannot read."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(SystemExit, match=f"--checkpoint {broken}: "):
        tool.evaluate(_eval_args(tmp_path, checkpoint=[f"last={broken}"]))


def test_dev_without_its_file_is_said_and_no_run_is_an_error(
        tiny_bert: Path, tiny_corpus: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture) -> None:
    """--topics dev without a dev file is said; an npz of no runs is an error, not a silent
    exit 0."""
    for dev in ("", str(tmp_path / "nosuch.tsv")):
        with pytest.raises(SystemExit, match="--topics dev: nothing to search"):
            tool.evaluate(_eval_args(tmp_path, checkpoint=[f"last={tiny_bert}"], topics=["dev"],
                                     dev_topics=dev))
        assert "--topics dev is not searched: no dev topics file" in capsys.readouterr().err
    assert not (tmp_path / "j.npz").exists()
    tool.evaluate(_eval_args(tmp_path, checkpoint=[f"best={tiny_bert}"],
                             topics=[f"{tiny_corpus}:test", "dev"]))
    assert "--topics dev is not searched" in capsys.readouterr().err
    meta = json.loads(bytes(np.load(tmp_path / "j.npz")["meta"]).decode())
    assert list(meta["topics"]) == [f"best.{tiny_corpus.name}-test"]
    with pytest.raises(SystemExit, match="nothing to search"):  # zero-shot topics: last only
        tool.evaluate(_eval_args(tmp_path, checkpoint=[f"best={tiny_bert}"],
                                 topics=["arguana:test"]))


@pytest.mark.parametrize("output", ["file", "file/sub", "file/sub/deeper"])
def test_unpack_output_under_a_file_is_one_line(output: str, tiny_corpus: Path,
                                                tmp_path: Path) -> None:
    """--output under a file is one error line, not a NotADirectoryError from mkdir."""
    (tmp_path / "file").write_text("mine")
    tar = _tar(tmp_path / "t.tar", {"j.npz": _job(tiny_corpus)})
    with pytest.raises(SystemExit, match=f"--output .*{output}: .*file is a file, not a folder"):
        _unpack([tar], tmp_path / output)
    assert (tmp_path / "file").read_text() == "mine"


def test_unpack_refuses_a_run_name_that_is_a_folder_before_writing(
        tiny_corpus: Path, tmp_path: Path) -> None:
    """Even with --overwrite: not an IsADirectoryError after the earlier runs were written."""
    tar = _tar(tmp_path / "t.tar", {"j1.npz": _job(tiny_corpus), "j2.npz": _job(tiny_corpus)})
    out = tmp_path / "out"
    (out / "j2.last.c-test.trec").mkdir(parents=True)
    for overwrite in (False, True):
        with pytest.raises(SystemExit, match="j2.last.c-test.trec is a folder, not a run file"):
            _unpack([tar], out, overwrite=overwrite)
    assert sorted(p.name for p in out.iterdir()) == ["j2.last.c-test.trec"]


# ------------------------- plan --set of the fields run sets, SEED's range, topics given twice

@pytest.mark.parametrize("check_sets", [True, False])  # prepare, and the device's parse
@pytest.mark.parametrize("sets, field", [
    # --set would beat run's --seed: jobs a-s42 and b-s43 would both train seed 3
    ("--set training.seed=3", "training.seed"),
    ("--set 'training={max_steps: 5}'", "training.seed"),  # the section holding it
    # --set would beat run's --output-dir: the model would go outside --scratch
    ("--set output_dir=/tmp/x", "output_dir"),
    ("--set ' output_dir =/tmp/x'", "output_dir"),
])
def test_plan_sets_of_the_seed_or_output_folder_are_refused(
        sets: str, field: str, check_sets: bool, tmp_path: Path) -> None:
    plan = _plan(tmp_path, "# seeds\n"
                           f"a 42 {SIAMESE} {sets} | topics=scifact:test\n")
    with pytest.raises(SystemExit, match=rf"^error: .*plan.txt:2: --set .*: run sets {field} "
                                         r"itself \(.*\): leave it out$"):
        tool.parse_plan(plan, ["scifact"], check_sets=check_sets)


def test_plan_sets_of_other_training_fields_are_kept(tmp_path: Path) -> None:
    """Only the fields run sets clash: training.seed's neighbours and data.seed pass."""
    (job,) = tool.parse_plan(_plan(
        tmp_path, f"a 42 {SIAMESE} --set training.max_steps=5 --set data.seed=7\n"))
    assert job["seed"] == 42
    assert job["sets"] == ["--set", "training.max_steps=5", "--set", "data.seed=7"]


@pytest.mark.parametrize("seed", ["99999999999999999999999", str(2**32)])
def test_a_seed_train_refuses_is_refused_in_the_plan(seed: str, tmp_path: Path) -> None:
    """Refused when the plan is read, not only by train --seed on the device, in that job."""
    plan = _plan(tmp_path, f"a {seed} zero-shot\n")
    with pytest.raises(SystemExit, match=rf"^error: .*plan.txt:1: SEED {seed} must be in "
                                         r"\[0, 2\*\*32\)"):
        tool.parse_plan(plan)
    (job,) = tool.parse_plan(_plan(tmp_path, f"a {2**32 - 1} zero-shot\nb 0 zero-shot\n"))[:1]
    assert job["seed"] == 2**32 - 1


def test_a_topics_spec_given_twice_is_refused(
        tiny_bert: Path, tiny_corpus: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """evaluate --topics tc:test tc:test would write one run, collapsed without a word; a plan's
    topics= and run's --topics pass it to every job's evaluate."""
    from pyserini_moe.modeling import auto

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded before the flags were checked")

    monkeypatch.setattr(auto, "load_encoder", no_load)
    spec = f"{tiny_corpus}:test"
    with pytest.raises(SystemExit, match=f"--topics {spec} is given twice"):
        tool.evaluate(_eval_args(tmp_path, checkpoint=[f"last={tiny_bert}"],
                                 topics=[spec, "dev", spec]))
    assert not (tmp_path / "j.npz").exists()
    with pytest.raises(SystemExit, match=r"plan.txt:1: topics=scifact:test,dev,scifact:test: "
                                         "scifact:test is given twice"):
        tool.parse_plan(_plan(tmp_path, "a 42 zero-shot | topics=scifact:test,dev,scifact:test\n"),
                        ["scifact"])
    args = _run_args(tmp_path, topics=["scifact:test", "scifact:test"])
    with pytest.raises(SystemExit, match="--topics scifact:test is given twice"):
        tool.run(args)
    assert not (tmp_path / "out" / "log.tsv").exists()


def test_evaluate_says_what_it_wrote(tiny_bert: Path, tiny_corpus: Path,
                                    tmp_path: Path,
                                    capsys: pytest.CaptureFixture) -> None:
    """evaluate says what it wrote on success, not nothing at all."""
    tool.evaluate(_eval_args(tmp_path, checkpoint=[f"last={tiny_bert}", f"best={tiny_bert}"],
                             topics=[f"{tiny_corpus}:test"], kinds="dense"))
    out = capsys.readouterr().out
    assert out.splitlines() == [f"{tmp_path / 'j.npz'}: 2 runs written, of 2 checkpoints "
                                "(last, best)"]
    meta = json.loads(bytes(np.load(tmp_path / "j.npz")["meta"]).decode())
    assert len(meta["topics"]) == 2


# -- snapshots=yes: every snapshot searched, for issue 35's plot of test nDCG against the step --


def test_snapshots_yes_is_a_job_setting_not_an_encoding(tmp_path: Path) -> None:
    jobs = tool.parse_plan(_plan(tmp_path, f"a 42 {SIAMESE} | snapshots=yes kinds=dense\n"
                                           f"b 42 {SIAMESE} | inference=all\n"), check_sets=False)
    assert [(j["snapshots"], j["options"]) for j in jobs] == [(True, []), (False, ["inference=all"])]


@pytest.mark.parametrize("line, message", [
    (f"a 42 {SIAMESE} | snapshots=no", "snapshots=no: snapshots=yes searches every snapshot"),
    ("a 42 zero-shot | snapshots=yes", "a zero-shot job trains nothing to keep snapshots of"),
])
def test_a_bad_snapshots_setting_is_refused(line: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=message):
        tool.parse_plan(_plan(tmp_path, line + "\n"), check_sets=False)


def test_run_keeps_and_searches_every_snapshot_of_a_snapshots_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = _run_args(tmp_path)
    (Path(args.carry) / "plan.txt").write_text(f"a 42 {SIAMESE} | snapshots=yes\n"
                                               f"b 42 {SIAMESE}\n")
    calls: list[list[str]] = []

    def fake(cmd, **kwargs):
        calls.append(cmd)
        if "pyserini_moe.train" in cmd:  # a training that kept snapshots at steps 4 and 12
            out = Path(cmd[cmd.index("--output-dir") + 1])
            for step in (12, 4):
                (out / "snapshots" / f"step-{step}").mkdir(parents=True)
            (out / "snapshots" / "evaluation.json").write_text("{}")
        else:
            Path(cmd[cmd.index("--output") + 1]).write_bytes(b"npz")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(tool.subprocess, "run", fake)
    tool.run(args)
    trains = {c[c.index("--output-dir") + 1].rsplit("/", 1)[1]: c for c in calls
              if "pyserini_moe.train" in c}
    assert "training.keep_snapshots=true" in trains["a-s42"]
    assert "training.keep_snapshots=true" not in trains["b-s42"]
    checkpoints = {c[c.index("--output") + 1].rsplit("/", 1)[1]:
                   [w.split("=")[1] for w in c if w.startswith("--checkpoint=")]
                   for c in calls if "evaluate" in c}
    assert checkpoints == {"a-s42.npz": ["last", "best", "step-4", "step-12"],
                           "b-s42.npz": ["last", "best"]}


def test_one_name_with_two_models_is_refused(tmp_path: Path) -> None:
    """``a 42 dpr`` and ``a 43 siamese`` must not come back as two seeds of condition ``a``."""
    with pytest.raises(SystemExit, match=r"plan.txt:1 and 2: a is trained or encoded otherwise"):
        tool.parse_plan(_plan(tmp_path, f"a 42 {SIAMESE}\na 43 encoders/dpr-minilm.yaml\n"),
                        check_sets=False)
    with pytest.raises(SystemExit, match="a is trained or encoded otherwise"):
        tool.parse_plan(_plan(tmp_path, f"a 42 {SIAMESE} | inference=all\na 43 {SIAMESE}\n"),
                        check_sets=False)
    jobs = tool.parse_plan(_plan(tmp_path, f"a 42 {SIAMESE} | snapshots=yes\na 43 {SIAMESE}\n"),
                           check_sets=False)  # how a seed is searched may differ
    assert [j["name"] for j in jobs] == ["a-s42", "a-s43"]


def test_unpack_writes_a_jobs_training_files_beside_its_runs(tiny_corpus: Path,
                                                             tmp_path: Path) -> None:
    log = b'{"step": 4, "val_loss": 1.5}\n'
    tar = _tar(tmp_path / "runs-0.tar", {"a-s42.npz": _job(tiny_corpus),
                                         "a-s42.train_log.jsonl": log,
                                         "a-s42.dev_qrels.txt": b"q9 0 d1 1\n",
                                         "notes.txt": b"not the job's"})
    _unpack([tar], tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "a-s42.dev_qrels.txt", "a-s42.last.c-test.trec", "a-s42.train_log.jsonl"]
    assert (tmp_path / "out" / "a-s42.train_log.jsonl").read_bytes() == log
    with pytest.raises(SystemExit, match=r"exists \(3 of the 3 files do\): --overwrite"):
        _unpack([tar], tmp_path / "out")


def _curve_files(runs: Path, topics: str) -> None:
    """Snapshots at steps 4 and 12 of job a-s42 over the tiny corpus's q0-q3 (relevant: d0-d3),
    as unpack names them for ``topics``: step 4 ranks each query's relevant passage second,
    step 12 first; dev at step 4 only."""
    runs.mkdir()
    for step, first in ((4, False), (12, True)):
        lines = []
        for i in range(4):
            ranking = [f"d{i}", "d29"] if first else ["d29", f"d{i}"]
            lines += [f"q{i} Q0 {d} {r} {2 - r} t\n" for r, d in enumerate(ranking, 1)]
        (runs / f"{tool.run_key(f'a-s42.step-{step}', topics)}.trec").write_text("".join(lines))
    (runs / "a-s42.step-4.dev.trec").write_text("q9 Q0 d1 1 1.0 t\n")
    (runs / "a-s42.dev_qrels.txt").write_text("q9 0 d1 1\n")
    (runs / "a-s42.train_log.jsonl").write_text(
        '{"step": 4, "val_loss": 1.5}\n{"step": 8, "loss": 1.0}\n{"step": 12, "val_loss": 1.25}\n')


def test_curve_tables_each_snapshots_metric_and_validation_loss(tiny_corpus: Path, tmp_path: Path,
                                                               capsys) -> None:
    runs, test = tmp_path / "runs", f"{tiny_corpus}:test"
    _curve_files(runs, test)
    tool.curve(argparse.Namespace(runs=str(runs), job="a-s42", kind="dense", test=test,
                                  metric="ndcg@10", title="t", output=str(tmp_path / "c.md"),
                                  plot=str(tmp_path / "c.png")))
    text = (tmp_path / "c.md").read_text()
    assert text == capsys.readouterr().out.rstrip("\n") + "\n"
    rows = [line.split("|")[1:5] for line in text.splitlines() if line.startswith("| ")][1:]
    assert [[cell.strip() for cell in row] for row in rows] == [
        ["4", "1.5000", "1.0000", "0.6309"], ["12", "1.2500", "-", "1.0000"]]
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_curve_without_snapshot_runs_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit, match=r"no a-s42.step-N\+hybrid.scifact-test.trec runs"):
        tool.curve(argparse.Namespace(runs=str(tmp_path / "runs"), job="a-s42", kind="hybrid",
                                      test="scifact:test", metric="ndcg@10", title=None,
                                      output=None, plot=None))


# ------------------------------------------------------- round 2 on the device (negatives_from)

def test_mine_writes_the_run_the_regressions_mine_with(tiny_bert: Path, tiny_corpus: Path,
                                                       tmp_path: Path) -> None:
    """A round-2 job's negatives pool is the run ``search`` writes here: dense top DEPTH, and
    the exact hybrid over the union of both top-DEPTH lists (``--candidates DEPTH``)."""
    from pyserini_moe.search import __main__ as search_cli

    model, dense, impact = _mote_indexes(tiny_bert, tiny_corpus, tmp_path)
    topics = f"{tiny_corpus}:test"
    for kind, depth in (("dense", 4), ("hybrid", 3)):
        here = tmp_path / f"{kind}.here.trec"
        searched = (["--retriever", "fused", "--fusion", "exact", "--candidates", str(depth),
                     "--index", str(dense), str(impact)] if kind == "hybrid"
                    else ["--retriever", "dense", "--index", str(dense)])
        assert search_cli.main([*searched, "--topics", topics, "--query-max-length", "16",
                                "--hits", str(depth), "--output", str(here), "--device", "cpu",
                                "--quiet"]) == 0
        mined = tmp_path / f"{kind}.mined.trec"
        tool.mine(argparse.Namespace(checkpoint=str(model), topics=topics, kind=kind,
                                     depth=depth, output=str(mined), device="cpu", batch=7,
                                     doc_length=32, query_length=16))
        expected, got = read_trec_run(here), read_trec_run(mined)
        assert got.keys() == expected.keys()
        for qid, hits in expected.items():  # the same hits up to near-ties of the tiny model
            mine_ranked, here_ranked = ranked(got[qid]), ranked(hits)
            assert len(mine_ranked) == depth
            assert all(abs(a[1] - b[1]) < 1e-4 for a, b in zip(mine_ranked, here_ranked)), \
                (kind, qid)
            assert all(abs(s - hits[d]) < 1e-4 for d, s in got[qid].items() if d in hits), \
                (kind, qid)
    assert not list(tmp_path.glob("*.tmp"))


def test_a_round2_line_names_its_source_and_what_to_mine(tmp_path: Path) -> None:
    plan = _plan(tmp_path, f"r1 43 {SIAMESE} | doc_length=128 query_length=64\n"
                           f"r2 43 {SIAMESE} | negatives_from=r1 mine=hybrid:200 "
                           "doc_length=256 topics=scifact:test\n")
    first, second = tool.parse_plan(plan, check_sets=False)
    assert first["mining"] is None
    assert second["mining"] == {"source": "r1-s43", "kind": "hybrid", "depth": 200,
                                "doc_length": 128, "query_length": 64}
    assert second["options"] == [] and second["doc_length"] == 256


@pytest.mark.parametrize("lines, message", [
    ([f"r2 42 {SIAMESE} | negatives_from=r1"], r"negatives_from=NAME and mine=KIND:DEPTH go"),
    ([f"r2 42 {SIAMESE} | mine=dense:100"], r"go together"),
    ([f"r1 42 {SIAMESE}", f"r2 42 {SIAMESE} | negatives_from=r1 mine=local:100"],
     r"mine=local:100: KIND:DEPTH, KIND one of dense,impact,hybrid"),
    ([f"r1 42 {SIAMESE}", f"r2 42 {SIAMESE} | negatives_from=r1 mine=dense:0"], r"KIND:DEPTH"),
    ([f"r2 42 {SIAMESE} | negatives_from=r1 mine=dense:100", f"r1 42 {SIAMESE}"],
     r"no earlier line trains r1 seed 42"),
    ([f"r1 43 {SIAMESE}", f"r2 42 {SIAMESE} | negatives_from=r1 mine=dense:100"],
     r"no earlier line trains r1 seed 42"),
    (["r1 42 zero-shot", f"r2 42 {SIAMESE} | negatives_from=r1 mine=dense:100"],
     r"a zero-shot job has no training to mine with"),
    ([f"r1 42 {SIAMESE}", "r2 42 zero-shot | negatives_from=r1 mine=dense:100"],
     r"a zero-shot job trains nothing to give mined negatives to"),
    ([f"r1 42 {SIAMESE}", f"r2 42 {SIAMESE} --set data.negatives.run=x.trec | "
                          "negatives_from=r1 mine=dense:100"],
     r"run sets data.negatives.run itself \(the run mined with r1\)"),
])
def test_a_malformed_round2_line_is_refused_before_any_device_time(
        lines: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=message):
        tool.parse_plan(_plan(tmp_path, "\n".join(lines) + "\n"), check_sets=False)


def test_a_round2_line_of_an_in_batch_recipe_is_refused(tmp_path: Path) -> None:
    """The SB-MoE recipes train on in-batch negatives: a mined run would be read by nothing."""
    sbmoe = "encoders/sbmoe-protocol-minilm.yaml"
    with pytest.raises(SystemExit, match=r"in-batch negatives only \(num_negatives 0\)"):
        tool.parse_plan(_plan(tmp_path, f"r1 42 {sbmoe}\n"
                                        f"r2 42 {sbmoe} | negatives_from=r1 mine=dense:100\n"))


def test_seeds_of_one_round2_name_mine_alike(tmp_path: Path) -> None:
    plan = _plan(tmp_path, f"r1 42 {SIAMESE}\nr1 43 {SIAMESE}\n"
                           f"r2 42 {SIAMESE} | negatives_from=r1 mine=dense:100\n"
                           f"r2 43 {SIAMESE} | negatives_from=r1 mine=dense:200\n")
    with pytest.raises(SystemExit, match=r"r2 is trained or encoded otherwise"):
        tool.parse_plan(plan, check_sets=False)


def _fake_device(calls: list[list[str]], fail_train: str | None = None):
    """subprocess.run of run's stages: a training of ``fail_train`` fails, the rest succeed;
    a stage with an --output writes it."""
    def fake(cmd, **kwargs):
        calls.append(cmd)
        if "pyserini_moe.train" in cmd:
            out = Path(cmd[cmd.index("--output-dir") + 1])
            if out.name == fail_train:
                return subprocess.CompletedProcess(cmd, 1, "", "boom")
            (out / "last").mkdir(parents=True, exist_ok=True)
        else:
            Path(cmd[cmd.index("--output") + 1]).write_bytes(b"x")
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return fake


def test_run_mines_a_round2_jobs_negatives_with_its_sources_trained_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = _run_args(tmp_path, workers=2)
    (Path(args.carry) / "plan.txt").write_text(
        f"r1 42 {SIAMESE} | doc_length=128 query_length=64\n"
        f"r2 42 {SIAMESE} | negatives_from=r1 mine=hybrid:200\n")
    calls: list[list[str]] = []
    monkeypatch.setattr(tool.subprocess, "run", _fake_device(calls))
    tool.run(args)
    scratch = Path(args.scratch)
    mine = next(c for c in calls if "mine" in c)
    option = {mine[i]: mine[i + 1] for i in range(3, len(mine) - 1, 2)}
    assert option == {"--checkpoint": str(scratch / "r1-s42" / "last"),
                      "--topics": "scifact:train", "--kind": "hybrid", "--depth": "200",
                      "--doc-length": "128", "--query-length": "64",
                      "--output": str(scratch / "r2-s42.negatives.trec")}
    trains = {c[c.index("--output-dir") + 1].rsplit("/", 1)[1]: c for c in calls
              if "pyserini_moe.train" in c}
    assert calls.index(trains["r1-s42"]) < calls.index(mine) < calls.index(trains["r2-s42"])
    assert f"data.negatives.run={scratch / 'r2-s42.negatives.trec'}" in trains["r2-s42"]
    assert f"data.negatives.run={Path(args.carry).resolve() / tool.NEGATIVES}" in trains["r1-s42"]
    parsed = []  # the device runs that command line through the script's own parser
    monkeypatch.setattr(tool, "mine", parsed.append)
    monkeypatch.setattr(tool.sys, "argv", mine[1:])
    tool.main()
    assert (parsed[0].kind, parsed[0].depth, parsed[0].doc_length) == ("hybrid", 200, 128)


def test_a_round2_job_whose_source_did_not_train_fails_without_training(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = _run_args(tmp_path)
    (Path(args.carry) / "plan.txt").write_text(
        f"r1 42 {SIAMESE}\nr2 42 {SIAMESE} | negatives_from=r1 mine=dense:100\n")
    (Path(args.scratch) / "r1-s42" / "last").mkdir(parents=True)  # an earlier call's model
    calls: list[list[str]] = []
    monkeypatch.setattr(tool.subprocess, "run", _fake_device(calls, fail_train="r1-s42"))
    with pytest.raises(SystemExit, match=r"2 of 2 jobs failed"):
        tool.run(args)
    assert not [c for c in calls if "mine" in c]
    assert [c[c.index("--output-dir") + 1].rsplit("/", 1)[1] for c in calls
            if "pyserini_moe.train" in c] == ["r1-s42"]
    assert "r2-s42\tmine\t0.0\t1\t" in (Path(args.out) / "log.tsv").read_text()
