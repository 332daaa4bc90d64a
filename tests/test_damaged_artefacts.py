"""Every file of every artefact the toolkit reads, damaged, is one error line or no harm.

Each artefact is built once by the toolkit itself (on the tiny models), then each of its files is
in turn removed, emptied, cut to half, overwritten with garbage bytes, and (JSON metadata) made
to lie with larger numbers. The command that reads the artefact must then either work or print a
single ``error:`` line, exit 2, naming the damaged file or its folder: never a traceback.

The files come from the built artefact, not from a list here, so a file a new version writes is
damaged too; each must be one its folder's kind declares (``outputs.output_kind``), or the test says
which file to declare.

Some damage leaves a file well formed and only its values wrong (an id list holding one id twice,
offsets out of order): no reader trips over it, so it would search on silently wrong. Those
damages (``REFUSED``) apply to the files they name, and the command must refuse them: work is not
an answer.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from pyserini_moe.cli import encode_queries as encode_queries_cli
from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import merge as merge_cli
from pyserini_moe.cli import regress as regress_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.cli import train as train_cli
from pyserini_moe.outputs import output_kind
from tests.helpers import regression_file, toy_collection

pytestmark = pytest.mark.usefixtures("one_thread")

# damage that leaves the file well formed -> the files (by name) it applies to; see the docstring
REFUSED: dict[str, tuple[str, ...]] = {"repeated": ("docid", "docids.txt"),
                                       "disordered": ("offsets.npy",)}
DAMAGES = ("missing", "empty", "half", "garbage", "lying", *REFUSED)


def damage(path: Path, how: str) -> bool:
    """Damage ``path`` as ``how`` says; False where that damage does not apply (lying: JSON
    only)."""
    data = path.read_bytes()
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "half":
        path.write_bytes(data[:len(data) // 2])
    elif how == "garbage":
        path.write_bytes(np.random.default_rng(0).integers(0, 256, max(len(data), 64),
                                                           dtype=np.uint8).tobytes())
    elif how == "lying":
        if path.suffix != ".json":
            return False
        path.write_text(json.dumps(_lie(json.loads(data))))
    elif how == "repeated":  # the second id made a copy of the first
        lines = data.decode("utf-8").split("\n")
        if len(lines) < 3:  # one id: none to repeat
            return False
        path.write_text("\n".join([lines[0], lines[0], *lines[2:]]), encoding="utf-8")
    elif how == "disordered":  # the second and third offsets swapped: [0, 64, 32, 96, ...]
        offsets = np.load(path)
        offsets[[1, 2]] = offsets[[2, 1]]
        np.save(path, offsets)
    return True


def _lie(value: object) -> object:
    """Every whole number in a JSON value made larger: counts, sizes, dimensions that lie."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, dict):
        return {k: _lie(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_lie(v) for v in value]
    return value


# --- the artefacts, each built once -------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tiny_bert, tiny_corpus, tmp_path_factory) -> dict[str, Path]:
    from pyserini_moe.modeling import ColbertEncoder, CotMoteEncoder, SiameseBiEncoder
    from pyserini_moe.modeling.onnx import export

    root = tmp_path_factory.mktemp("artefacts")
    torch.manual_seed(0)
    models = {"dense": SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"),
              "hybrid": CotMoteEncoder.from_backbone(tiny_bert, sparse_top_k=12, device="cpu"),
              "multivector": ColbertEncoder.from_backbone(tiny_bert, device="cpu")}
    out = {f"{kind} model": model.save(root / f"{kind}-model") for kind, model in models.items()}
    export(models["dense"], root / "onnx", source="siamese")
    out["onnx export"] = root / "onnx"
    for name, kind, model, extra in [
            ("dense index", "dense", "dense", []), ("multivector index", "multivector",
                                                    "multivector", []),
            ("multivector index compressed", "multivector", "multivector",
             ["--compression", "pq4"]),
            ("hybrid dense index", "dense", "hybrid", []),
            ("impact index", "impact", "hybrid", [])]:
        folder = root / name.replace(" ", "-")
        assert index_cli.main(["--retriever", kind, "--corpus", str(tiny_corpus), "--index",
                               str(folder), "--encoder", str(out[f"{model} model"]),
                               "--max-length", "32", "--quiet", *extra]) == 0
        out[name] = folder
    for shard in (0, 1):  # a dense index in two shards, merged by the reader
        assert index_cli.main(["--retriever", "dense", "--corpus", str(tiny_corpus), "--index",
                               str(root / f"shard-{shard}"), "--encoder", str(out["dense model"]),
                               "--max-length", "32", "--quiet", "--shard-id", str(shard),
                               "--shard-num", "2"]) == 0
    out["dense shard"] = root / "shard-0"
    assert encode_queries_cli.main(["--index", str(out["dense index"]), "--topics",
                                    f"{tiny_corpus}:test", "--output", str(root / "encoded")]) == 0
    out["encoded queries"] = root / "encoded"
    (root / "run.trec").write_text("q0 Q0 d0 1 3.0 t\nq1 Q0 d1 1 2.0 t\n")
    out["run"] = root / "run.trec"
    toy = toy_collection(root / "toy")
    recipe = root / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({
        "model": {"type": "siamese", "backbone": str(tiny_bert)},
        "data": {"collection": str(toy), "query_max_length": 8, "passage_max_length": 8,
                 "validation_fraction": 0.25,
                 "negatives": {"source": "run", "run": str(toy / "negatives.trec")}},
        "training": {"learning_rate": 1e-3, "batch_size": 6, "max_steps": 2, "eval_every": 1,
                     "device": "cpu"}}))
    out["recipe"] = recipe
    assert train_cli.main(["--config", str(recipe), "--output-dir", str(root / "training"),
                           "--quiet"]) == 0
    out["training checkpoint"] = root / "training" / "checkpoint"
    out["regression file"] = regression_file(root)
    return out


def _search(index: Path, tmp: Path, corpus: Path, *extra: str) -> list[str]:
    return ["--index", str(index), "--topics", f"{corpus}:test", "--output",
            str(tmp / "out.trec"), "--quiet", *extra]


# artefact -> (the command that reads it, its argv given the damaged copy and a scratch folder)
READERS: dict[str, tuple[Callable, Callable[[Path, Path, dict, Path], list[str]]]] = {
    "dense model": (index_cli.main, lambda a, tmp, b, c: [
        "--retriever", "dense", "--corpus", str(c), "--index", str(tmp / "i"), "--encoder",
        str(a), "--max-length", "32", "--quiet"]),
    "hybrid model": (index_cli.main, lambda a, tmp, b, c: [
        "--retriever", "impact", "--corpus", str(c), "--index", str(tmp / "i"), "--encoder",
        str(a), "--max-length", "32", "--quiet"]),
    "onnx export": (index_cli.main, lambda a, tmp, b, c: [
        "--retriever", "dense", "--corpus", str(c), "--index", str(tmp / "i"), "--encoder",
        str(a), "--max-length", "32", "--quiet"]),
    "dense index": (search_cli.main, lambda a, tmp, b, c: _search(a, tmp, c)),
    # fused exactly with its model's dense index: the Lucene files and doc_vectors/ are read
    "impact index": (search_cli.main, lambda a, tmp, b, c: [
        "--retriever", "fused", "--fusion", "exact", "--index", str(b["hybrid dense index"]),
        str(a), "--topics", f"{c}:test", "--output", str(tmp / "out.trec"), "--quiet"]),
    # its partner the other way round: exact fusion reads the dense vectors back by docid
    "hybrid dense index": (search_cli.main, lambda a, tmp, b, c: [
        "--retriever", "fused", "--fusion", "exact", "--index", str(a), str(b["impact index"]),
        "--topics", f"{c}:test", "--output", str(tmp / "out.trec"), "--quiet"]),
    "multivector index": (search_cli.main, lambda a, tmp, b, c: _search(a, tmp, c)),
    "multivector index compressed": (search_cli.main, lambda a, tmp, b, c: _search(a, tmp, c)),
    "dense shard": (merge_cli.main, lambda a, tmp, b, c: [
        "--shards", str(a), str(b["dense shard"].parent / "shard-1"), "--index",
        str(tmp / "merged"), "--quiet"]),
    "encoded queries": (search_cli.main, lambda a, tmp, b, c: _search(
        b["dense index"], tmp, c, "--encoded-queries", str(a))),
    "run": (eval_cli.main, lambda a, tmp, b, c: ["--run", str(a), "--qrels", f"{c}:test"]),
    "recipe": (train_cli.main, lambda a, tmp, b, c: [
        "--config", str(a), "--output-dir", str(tmp / "run"), "--init-only", "--quiet"]),
    # the checkpoint of a copied training run, resumed one step further
    "training checkpoint": (train_cli.main, lambda a, tmp, b, c: [
        "--config", str(b["recipe"]), "--output-dir", str(_training_copy(a, b, tmp)),
        "--resume", "--max-steps", "3", "--quiet"]),
    "regression file": (regress_cli.main, lambda a, tmp, b, c: [
        str(a), "--dry-run", "--work-dir", str(tmp / "work")]),
}


def _training_copy(checkpoint: Path, built: dict[str, Path], tmp: Path) -> Path:
    """The training run the original checkpoint belongs to, with the damaged checkpoint in it."""
    run = tmp / "training"
    shutil.copytree(built["training checkpoint"].parent, run,
                    ignore=shutil.ignore_patterns("checkpoint"))
    shutil.copytree(checkpoint, run / "checkpoint")
    return run


def _files(artefact: Path) -> list[Path]:
    return [artefact] if artefact.is_file() else sorted(
        p for p in artefact.rglob("*") if p.is_file() and not p.name.startswith("."))


@pytest.mark.parametrize("name", sorted(READERS))
@pytest.mark.parametrize("how", DAMAGES)
def test_each_damaged_file_is_one_line_or_no_harm(built, tiny_corpus, tmp_path, capsys, name,
                                                  how) -> None:
    main, argv = READERS[name]
    original = built[name]
    if original.is_dir():
        assert output_kind(original) is not None, f"{original}: a file its kind does not declare"
    faults = []
    for relative in [p.relative_to(original) if original.is_dir() else Path(p.name)
                     for p in _files(original)]:
        if how in REFUSED and relative.name not in REFUSED[how]:
            continue
        case = tmp_path / str(relative).replace("/", "_")
        copy = case / original.name
        if original.is_dir():
            shutil.copytree(original, copy)
        else:
            case.mkdir()
            shutil.copy(original, copy)
        target = copy / relative if original.is_dir() else copy
        if not damage(target, how):
            continue
        try:
            code = run_main(main, argv(copy, case, built, tiny_corpus))
        except BaseException as e:  # noqa: BLE001 - a traceback is the failure reported
            faults.append(f"{relative}: {type(e).__name__}: {str(e)[:200]}")
            continue
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        errors = [line for line in err if line.startswith("error:")]
        if code == 2 and (len(errors) != 1 or not any(
                part in errors[0] for part in (relative.name, original.name, copy.name))):
            faults.append(f"{relative}: exit 2 but {err[-3:]}")
        elif code not in (0, 2) or (code == 0 and how in REFUSED):
            faults.append(f"{relative}: exit {code}: {err[-3:]}")
    assert not faults, f"{name}, {how}:\n" + "\n".join(faults)
