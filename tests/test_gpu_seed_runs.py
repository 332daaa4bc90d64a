"""tools/gpu_seed_runs.py: the GPU machine's exact search and the runs it brings back must be the
runs the regressions would write here (same documents, same order, the query's own id dropped)."""

from __future__ import annotations

import argparse
import importlib.util
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
    "gpu_seed_runs", Path(__file__).resolve().parents[1] / "tools" / "gpu_seed_runs.py")
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
    tool.unpack(argparse.Namespace(tars=[str(tmp_path / "runs-0.tar")], output=str(out)))
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
    tool.unpack(argparse.Namespace(tars=[str(tmp_path / "runs-0.tar")], output=str(tmp_path / "r")))
    label = {kind: "last" if kind == "dense" else f"last+{kind}" for kind in kinds.split(",")}
    return {kind: read_trec_run(tmp_path / "r" / f"job-s1.{name}.{corpus.name}-test.trec")
            for kind, name in label.items()}


def test_impact_and_hybrid_runs_are_the_lucene_and_fused_runs(tiny_bert: Path, tiny_corpus: Path,
                                                               tmp_path: Path) -> None:
    """The device's impact and hybrid runs of a CoT-MoTE model rank as the Lucene impact index
    and ``search --retriever fused --fusion exact`` here (top 10 of every query)."""
    from pyserini_moe.cli import run_main
    from pyserini_moe.index import __main__ as index_cli
    from pyserini_moe.modeling import CotMoteEncoder
    from pyserini_moe.search import __main__ as search_cli

    torch.manual_seed(0)
    model = CotMoteEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "mote")
    dense, impact = tmp_path / "dense", tmp_path / "impact"
    assert run_main(index_cli.main, ["--retriever", "dense", "impact", "--index", str(dense),
                                     str(impact), "--corpus", str(tiny_corpus), "--encoder",
                                     str(model), "--max-length", "32", "--device", "cpu",
                                     "--quiet"]) == 0
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
