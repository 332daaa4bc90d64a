"""ONNX export: every model family's graphs give the PyTorch outputs (fp32, within 1e-4) for both
sides, with padding; the export is an encoder the adapters accept; int8 is its own encoder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pyserini_moe.modeling import (
    CameEncoder,
    CotMoteEncoder,
    SbMoeEncoder,
    SiameseBiEncoder,
    Side,
    TaserEncoder,
)
from pyserini_moe.modeling.auto import load_encoder
from pyserini_moe.modeling.base import TextEncoder
from pyserini_moe.modeling.folder import fingerprint
from pyserini_moe.modeling.onnx import INT8_SCHEME, OnnxModel, export

pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["what is dense retrieval?", "a cat",
         "the mixture of sparse and dense experts model sat on the mat"]


def _trained_like(model):
    """Experts and heads away from their (often identical) starting points, as after training."""
    torch.manual_seed(3)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "experts" in name or "route" in name or "gate" in name or "stacks" in name:
                param.add_(0.05 * torch.randn_like(param))
    return model.eval()


MODELS = {
    "cotmote": lambda p: CotMoteEncoder.from_backbone(p, sparse_top_k=20, device="cpu"),
    "taser-tok": lambda p: TaserEncoder.from_backbone(p, router="tok", every=0, device="cpu"),
    "sbmoe-all": lambda p: SbMoeEncoder.from_backbone(p, n_experts=3, inference="all",
                                                      device="cpu"),
    "came": lambda p: CameEncoder.from_backbone(p, shared_layers=1, dim=8, device="cpu"),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_onnx_graphs_match_pytorch(name, tiny_bert, tiny_mlm, tmp_path) -> None:
    torch.manual_seed(0)
    model = _trained_like(MODELS[name](tiny_mlm if name == "came" else tiny_bert))
    model.query_max_length = 20  # what training recorded travels with the export
    export(model, tmp_path / "onnx", source=name)
    onnx = load_encoder(str(tmp_path / "onnx"))
    assert onnx.query_max_length == 20
    assert isinstance(onnx, OnnxModel) and onnx.representations == model.representations
    assert isinstance(onnx, TextEncoder) and isinstance(model, TextEncoder)  # one contract
    assert fingerprint(onnx) == fingerprint(model)
    for side in (Side.QUERY, Side.PASSAGE):
        expected = model.encode(TEXTS, side, 24)
        for representation in model.representations:
            got = onnx.encode(TEXTS, side, 24, only=representation)
            torch.testing.assert_close(getattr(got, representation),
                                       getattr(expected, representation), atol=1e-4, rtol=1e-4)
        if "multi" in model.representations:
            torch.testing.assert_close(onnx.encode(TEXTS, side, 24).mask,
                                       expected.mask.to(torch.int64))


def test_impact_models_also_export_the_graph_anserini_runs(tiny_mlm, tmp_path) -> None:
    import numpy as np
    import onnxruntime as ort

    torch.manual_seed(0)
    model = _trained_like(CotMoteEncoder.from_backbone(tiny_mlm, sparse_top_k=20,
                                                       sparse_head="mlm", device="cpu"))
    export(model, tmp_path / "onnx", source="cotmote")
    assert (tmp_path / "onnx" / "vocab.txt").is_file()  # Anserini maps ids to tokens with it
    session = ort.InferenceSession(str(tmp_path / "onnx" / "query-sparse-anserini.onnx"))
    assert [i.name for i in session.get_inputs()] == ["input_ids", "token_type_ids",
                                                      "attention_mask"]
    for text in TEXTS:  # one query at a time, as Anserini sends them
        batch = model.tokenize([text], Side.QUERY, 24)
        ids = batch["input_ids"].numpy()
        idx, weights = session.run(["output_idx", "output_weights"], {
            "input_ids": ids, "token_type_ids": np.zeros_like(ids),
            "attention_mask": batch["attention_mask"].numpy()})
        expected = model.encode([text], Side.QUERY, 24).sparse[0]
        nonzero = torch.nonzero(expected > 0).squeeze(1)
        assert 0 < len(nonzero) <= 20
        np.testing.assert_array_equal(idx, nonzero.numpy())
        np.testing.assert_allclose(weights, expected[nonzero].numpy(), atol=1e-4, rtol=1e-4)


def test_int8_is_another_encoder_and_options_are_baked_in(tiny_bert, tmp_path) -> None:
    model = _trained_like(SbMoeEncoder.from_backbone(tiny_bert, n_experts=3, device="cpu"))
    export(model, tmp_path / "int8", source="sbmoe", int8=True)
    onnx = OnnxModel(tmp_path / "int8")
    assert onnx.fingerprint == f"{fingerprint(model)}-int8-{INT8_SCHEME}"
    got = onnx.encode(TEXTS, Side.PASSAGE, 24).dense
    expected = model.encode(TEXTS, Side.PASSAGE, 24).dense
    cosine = torch.nn.functional.cosine_similarity(got, expected)
    assert (cosine > 0.9).all()  # quantised, not identical
    assert onnx.configure(inference="top1") is onnx
    with pytest.raises(ValueError, match="export again"):
        onnx.configure(inference="all")
    with pytest.raises(ValueError, match="empty query"):
        onnx.encode(["  "], Side.QUERY)


def test_the_random_gate_has_no_graph(tiny_bert, tmp_path) -> None:
    model = SbMoeEncoder.from_backbone(tiny_bert, gate="random", device="cpu").eval()
    with pytest.raises(ValueError, match="no ONNX graph"):
        export(model, tmp_path / "x", source="random")
    assert not (tmp_path / "x").exists()


def test_export_command_line(tiny_bert, tmp_path, capsys) -> None:
    from pyserini_moe.cli import run_main
    from pyserini_moe.export import main

    saved = _trained_like(TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu"))
    saved.save(tmp_path / "taser")
    assert main(["--encoder", str(tmp_path / "taser"), "--output", str(tmp_path / "onnx")]) == 0
    assert sorted(p.name for p in Path(tmp_path / "onnx").glob("*.onnx")) == [
        "passage-dense.onnx", "query-dense.onnx"]
    assert run_main(main, ["--encoder", str(tmp_path / "taser"), "--output",
                           str(tmp_path / "onnx")]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_backend_exports_once_caches_and_renews_a_stale_export(tiny_bert, tmp_path) -> None:
    from pyserini_moe.cli.args import backend_encoder
    from pyserini_moe.modeling.onnx import is_onnx_export

    model = _trained_like(SbMoeEncoder.from_backbone(tiny_bert, n_experts=3, device="cpu"))
    spec = str(model.save(tmp_path / "sbmoe"))
    assert backend_encoder(spec, "torch") == spec
    export_dir = backend_encoder(spec, "onnx", {"inference": "all"})
    assert Path(export_dir) == tmp_path / "sbmoe" / "onnx" / "fp32-inference=all"
    assert is_onnx_export(export_dir) and OnnxModel(export_dir).args["inference"] == "all"
    stamp = (Path(export_dir) / "pyserini_moe_onnx.json").stat().st_mtime_ns
    assert backend_encoder(spec, "onnx", {"inference": "all"}) == export_dir  # cached
    assert (Path(export_dir) / "pyserini_moe_onnx.json").stat().st_mtime_ns == stamp
    assert backend_encoder(export_dir, "onnx") == export_dir  # already an export
    with pytest.raises(ValueError, match="pass --backend onnx"):
        backend_encoder(export_dir, "onnx-int8")
    _trained_like(model).save(tmp_path / "sbmoe")  # new weights: the cached export is stale
    renewed = backend_encoder(spec, "onnx", {"inference": "all"})
    assert OnnxModel(renewed).meta["source_fingerprint"] == fingerprint(
        load_encoder(spec, options={"inference": "all"}))
    with pytest.raises(ValueError, match="unknown backend"):
        backend_encoder(spec, "tensorrt")


def test_an_int8_export_of_an_older_scheme_is_made_again(tiny_bert, tmp_path) -> None:
    """Its vectors differ from the current scheme's; reusing it would mix two encoders."""
    from pyserini_moe.cli.args import backend_encoder

    spec = str(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "m"))
    meta_file = Path(backend_encoder(spec, "onnx-int8")) / "pyserini_moe_onnx.json"
    meta = json.loads(meta_file.read_text())
    assert meta["int8_scheme"] == INT8_SCHEME
    # as exports written before schemes were recorded
    meta["int8_scheme"] = None
    meta["fingerprint"] = f"{meta['source_fingerprint']}-int8"
    meta_file.write_text(json.dumps(meta))
    backend_encoder(spec, "onnx-int8")
    assert json.loads(meta_file.read_text())["int8_scheme"] == INT8_SCHEME


def test_index_and_search_run_with_the_onnx_backend(tiny_bert, tiny_corpus, tmp_path) -> None:
    from pyserini_moe.index.__main__ import main as index_main
    from pyserini_moe.runs import read_trec_run
    from pyserini_moe.search.__main__ import main as search_main

    spec = str(_trained_like(TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu"))
               .save(tmp_path / "taser"))
    common = ["--corpus", str(tiny_corpus), "--encoder", spec, "--quiet", "--device", "cpu"]
    assert index_main(["--retriever", "dense", "--index", str(tmp_path / "torch"), *common]) == 0
    assert index_main(["--retriever", "dense", "--index", str(tmp_path / "onnx"), "--backend",
                       "onnx", *common]) == 0
    runs = {}
    # an fp32 export has its model's identity: each index is searched by either backend
    for index, backend in (("torch", "torch"), ("torch", "onnx"), ("onnx", "torch")):
        out = tmp_path / f"{index}-{backend}.trec"
        assert search_main(["--retriever", "dense", "--index", str(tmp_path / index),
                            "--topics", f"{tiny_corpus}:test", "--output", str(out),
                            "--encoder", spec, "--backend", backend, "--hits", "5",
                            "--quiet"]) == 0
        runs[index, backend] = read_trec_run(out)
    reference = runs["torch", "torch"]
    for run in runs.values():
        assert run.keys() == reference.keys()
        for qid, docs in run.items():
            assert docs == pytest.approx(reference[qid], abs=1e-4)
