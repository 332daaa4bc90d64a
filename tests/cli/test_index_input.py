"""Unusual input to the ``index`` command (:mod:`pyserini_moe.cli.index`): damaged or
incomplete models, flags the chosen index kind does not read, outputs that are inputs,
user folders or another kind of output, interrupted builds and two writers of one index;
each is one ``error:`` line (or exit 130/143) and nothing is left half-written."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import BertTokenizerFast

from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli.index import main as index_main
from pyserini_moe.errors import UserError
from pyserini_moe.index.encoded import BuildSettings
from pyserini_moe.modeling import ColbertEncoder, DprBiEncoder, SiameseBiEncoder
from pyserini_moe.modeling.folder import MODEL_FILE, WEIGHTS_FILE
from tests.helpers import (
    dense_copy,
    err_text,
    folder_files,
    kept,
    refusal_line,
    refused,
    trainer_into,
    user_files,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_an_index_inside_a_bare_named_collection_is_refused(shared: Path, capsys) -> None:
    before = sorted(p.name for p in (shared / "tiny").iterdir())
    err = refusal_line(index_main, ["--retriever", "bm25", "--corpus", "tiny", "--index",
                                    str(shared / "tiny" / "bm25")], capsys)
    assert err.startswith("error: ") and "is inside the input tiny" in err
    assert sorted(p.name for p in (shared / "tiny").iterdir()) == before


def test_a_truncated_weights_file_is_one_error_line(model, tiny_corpus, tmp_path, capsys) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(model, broken)
    weights = broken / "model.safetensors"  # a Siamese model: the sentence-transformers layout
    weights.write_bytes(weights.read_bytes()[:1000])
    code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(tiny_corpus),
                                     "--index", str(tmp_path / "i"), "--encoder", str(broken),
                                     "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and err.startswith(f"error: {weights}: cannot read the weights")
    assert "damaged or incomplete" in err and not (tmp_path / "i").exists()


def test_a_public_beir_name_offline_is_one_error_line(tmp_path, capsys, monkeypatch) -> None:
    import urllib.request

    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.setenv("PYSERINI_MOE_CACHE", str(tmp_path / "cache"))
    code = run_main(index_cli.main, ["--retriever", "bm25", "--corpus", "nfcorpus", "--index",
                                     str(tmp_path / "i")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and err.startswith("error: collection 'nfcorpus': not in the local data "
                                        "folder ")  # where a local copy was looked for first
    assert ", and could not download the data set" in err
    assert not (tmp_path / "i").exists()


class _Code:
    """Pickles as a call of ``os.mkdir(marker)``: proof, if the folder appears, that it ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return os.mkdir, (str(self.marker),)


def test_a_backbone_whose_pickled_weights_hold_code_is_not_loaded(tiny_bert, tiny_corpus,
                                                                  tmp_path, capsys) -> None:
    """A pytorch_model.bin holding code ended in torch's traceback (it never ran)."""
    evil = tmp_path / "evil"
    shutil.copytree(tiny_bert, evil)
    (evil / "model.safetensors").unlink()
    torch.save({"embeddings.word_embeddings.weight": _Code(tmp_path / "ran")},
               evil / "pytorch_model.bin")
    code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(tiny_corpus),
                                     "--index", str(tmp_path / "i"), "--encoder", str(evil),
                                     "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"error: {evil / 'pytorch_model.bin'}: not loaded: it holds code "
                                 "or objects a safe load refuses"]
    assert not (tmp_path / "ran").exists() and not (tmp_path / "i").exists()


def test_a_model_with_nan_weights_builds_no_index(tiny_bert, tiny_corpus, tmp_path,
                                                  capsys) -> None:
    """One token's embedding NaN: the documents holding it encode to NaN; the first is named."""
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
    cat = BertTokenizerFast.from_pretrained(tiny_bert).convert_tokens_to_ids("cat")
    embeddings = next(p for name, p in model.named_parameters() if "word_embeddings" in name)
    with torch.no_grad():
        embeddings[cat] = float("nan")
    folder = model.save(tmp_path / "model")
    docs = [json.loads(line) for line in (tiny_corpus / "corpus.jsonl").read_text().splitlines()]
    first = next(d["_id"] for d in docs if "cat" in f"{d['title']} {d['text']}".split())
    assert first != docs[0]["_id"]  # the refusal names the bad document, not the first one
    index = tmp_path / "dense"
    code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(tiny_corpus),
                                     "--index", str(index), "--encoder", str(folder),
                                     "--device", "cpu", "--max-length", "64", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith(f"error: {index}: document '{first}' encodes to NaN "
                                            "or infinite values"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no index, no temporary


@pytest.fixture(scope="module")
def slow_build(tiny_bert, tmp_path_factory) -> tuple[Path, Path]:
    """A corpus big enough that a one-document-per-batch build runs for a while."""
    root = tmp_path_factory.mktemp("slow")
    corpus = root / "corpus"
    (corpus / "qrels").mkdir(parents=True)
    words = ["cat", "dog", "sat", "mat", "model", "expert", "query", "passage", "dense", "sparse"]
    with open(corpus / "corpus.jsonl", "w") as f:
        for i in range(20000):
            text = " ".join(words[(i * k) % 10] for k in range(1, 12))
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    (corpus / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "cat"}) + "\n")
    (corpus / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(root / "model")
    return corpus, model


def _as_in_a_terminal() -> None:
    """Give the command the SIGINT disposition of a foreground terminal. A suite started as a
    background job of a non-interactive shell (``make test &``) inherits SIGINT ignored, as POSIX
    asks of background jobs; Python then installs no Ctrl-C handler and the build rightly runs to
    the end, which failed this test for a reason outside the code under test."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_index_build_leaves_nothing(slow_build, tmp_path, sig, code) -> None:
    corpus, model = slow_build
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyserini_moe.index", "--retriever", "dense", "--corpus",
         str(corpus), "--encoder", str(model), "--index", "idx", "--batch-size", "1",
         "--max-length", "32", "--device", "cpu", "--quiet"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=_as_in_a_terminal)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".idx.tmp-*")):  # encoding has started
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert err.strip().splitlines()[-1] == "interrupted"
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "left behind"


def test_two_writers_of_one_index_one_is_refused_and_the_index_is_whole(slow_build,
                                                                        tmp_path) -> None:
    """Both used to report success, the last silently replacing the first."""
    corpus, model = slow_build
    command = [sys.executable, "-m", "pyserini_moe.index", "--retriever", "dense", "--corpus",
               str(corpus), "--encoder", str(model), "--index", "idx", "--batch-size", "512",
               "--max-length", "16", "--device", "cpu", "--quiet"]
    procs = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"}) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert "idx already exists" in refused.strip().splitlines()[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    assert len((tmp_path / "idx" / "docid").read_text().splitlines()) == 20000


# --- BM25 index with a model's flags --------------------------------------------------------------


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


# --- impact --faiss, dense --quantization ---------------------------------------------------------


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


def test_an_encoder_without_retriever_asks_for_the_retriever(tmp_path, capsys, error_line) -> None:
    assert error_line(index_cli.main, ["--corpus", "scifact", "--encoder", "m", "--index",
                                       str(tmp_path / "i")], capsys) == (
        "error: --encoder names a model, but --retriever was not given and builds BM25 by "
        "default: add --retriever dense / impact / multivector (or leave --encoder out for a "
        "BM25 index)")


def _build_index(encoder: Path, corpus: Path, out: Path, capsys) -> tuple[int, str]:
    code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(corpus), "--index",
                                     str(out), "--encoder", str(encoder), "--device", "cpu",
                                     "--quiet"])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def _edit_config(folder: Path, edit: str) -> Path:
    config = folder / "config.json"
    if edit == "truncated":
        config.write_text('{"model_type": "bert", "hidden_size": 32')
    else:
        field, value = edit.split("=")
        config.write_text(json.dumps({**json.loads(config.read_text()), field: value}))
    return config


@pytest.mark.parametrize("edit", ["num_attention_heads=two", "truncated"])
def test_a_saved_model_with_a_damaged_config_is_one_error_line(ws, tmp_path, capsys,
                                                               edit) -> None:
    broken = tmp_path / "model"
    shutil.copytree(ws["model"], broken)
    config = _edit_config(broken, edit)
    code, err = _build_index(broken, ws["corpus"], tmp_path / "i", capsys)
    assert code == 2 and err.startswith(f"error: {config}: the model config is damaged")
    assert "save or copy the model again" in err and not (tmp_path / "i").exists()


@pytest.mark.parametrize("edit", ["hidden_size=big", "truncated"])
def test_a_backbone_with_a_damaged_config_is_one_error_line(tiny_bert, tiny_corpus, tmp_path,
                                                            capsys, edit) -> None:
    broken = tmp_path / "bert"
    shutil.copytree(tiny_bert, broken)
    config = _edit_config(broken, edit)
    code, err = _build_index(broken, tiny_corpus, tmp_path / "i", capsys)
    # (a truncated one was "not a local model folder and not loadable from the hub")
    assert code == 2 and err.startswith(f"error: {config}: the model config is damaged")
    assert not (tmp_path / "i").exists()


def test_a_trained_model_without_its_metadata_is_refused(ws, tiny_bert, tmp_path,
                                                         capsys) -> None:
    torch.manual_seed(0)
    model = DprBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "dpr")
    (model / MODEL_FILE).unlink()
    code, err = _build_index(model, ws["corpus"], tmp_path / "i", capsys)
    assert code == 2 and err == (f"error: {model}: the model metadata ({MODEL_FILE}) is missing "
                                 f"beside a trained model's weights ({WEIGHTS_FILE}): the folder "
                                 "is incomplete; save or copy the model again")
    assert not (tmp_path / "i").exists()


def test_overwrite_never_deletes_a_folder_of_user_files(ws, tmp_path, capsys) -> None:
    precious = tmp_path / "precious"
    (precious / "sub").mkdir(parents=True)
    (precious / "notes.txt").write_text("keep")
    code = run_main(index_cli.main, ["--retriever", "bm25", "--corpus", str(ws["corpus"]),
                                     "--index", str(precious), "--overwrite", "--quiet"])
    assert code == 2 and "holds files this toolkit did not write (e.g. notes.txt)" in err_text(capsys)
    assert (precious / "notes.txt").read_text() == "keep" and (precious / "sub").is_dir()
    # an index it wrote, and an empty folder, are still replaced
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder in (ws["root"] / "bm25-again", empty):
        for _ in range(2):
            assert index_cli.main(["--retriever", "bm25", "--corpus", str(ws["corpus"]),
                                   "--index", str(folder), "--overwrite", "--quiet"]) == 0


@pytest.mark.parametrize("second", ["{a}/sparse", "{rel}"], ids=["nested", "same, spelled apart"])
def test_two_index_folders_may_not_nest_or_coincide(ws, tmp_path, capsys, monkeypatch,
                                                    second) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    a = tmp_path / "A"
    other = second.format(a=a, rel="x/../A")
    code = run_main(index_cli.main, ["--retriever", "dense", "multivector", "--corpus",
                                     str(ws["corpus"]), "--encoder", str(ws["model"]), "--index",
                                     str(a), other, "--device", "cpu", "--overwrite", "--quiet"])
    err = err_text(capsys)  # BuildSettings says it first; the command line's check says it too
    assert code == 2 and "its own output folder, none inside another" in err
    assert not a.exists()


@pytest.fixture(scope="module")
def colbert(tiny_bert, tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return ColbertEncoder.from_backbone(tiny_bert, dim=16, device="cpu").save(
        tmp_path_factory.mktemp("colbert") / "model")


@pytest.mark.parametrize(("spec", "said"), [
    ("ivf4,pq7", "does not fit the model's 16-dimensional token vectors"),
    ("ivf100000,pq4", "cannot be trained on this index's"),
])
def test_a_faiss_spec_that_cannot_work_is_one_line(ws, colbert, tmp_path, capsys, spec,
                                                   said) -> None:
    code = run_main(index_cli.main, ["--retriever", "multivector", "--corpus", str(ws["corpus"]),
                                     "--encoder", str(colbert), "--index", str(tmp_path / "mv"),
                                     "--faiss", spec, "--device", "cpu", "--quiet"])
    err = err_text(capsys)
    assert code == 2 and said in err and "faiss::" not in err
    assert not (tmp_path / "mv").exists()


def _index(ws: dict[str, Path], folder: Path) -> int:
    return run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(ws["corpus"]),
                                     "--encoder", str(ws["model"]), "--index", str(folder),
                                     "--device", "cpu", "--max-length", "64", "--overwrite",
                                     "--quiet"])


def test_index_overwrite_keeps_user_files_put_in_an_index(ws, tmp_path, capsys) -> None:
    folder = tmp_path / "ixu"
    shutil.copytree(ws["index"], folder)
    user_files(folder)
    assert _index(ws, folder) == 2
    assert "holds files this toolkit did not write (e.g. notes.txt), also sub/" in err_text(capsys)
    assert kept(folder) and (folder / "pyserini_moe_index.json").is_file()
    shutil.rmtree(folder / "sub")
    (folder / "notes.txt").unlink()
    assert _index(ws, folder) == 0  # an index holding nothing else is still replaced


@pytest.mark.parametrize("source", ["corpus", "bert", "model"])
def test_index_overwrite_never_replaces_a_collection_or_a_model(ws, tiny_bert, tmp_path, capsys,
                                                                source) -> None:
    folder = tmp_path / "copy"
    shutil.copytree({"corpus": ws["corpus"], "bert": tiny_bert, "model": ws["model"]}[source],
                    folder)
    before = sorted(p.name for p in folder.iterdir())
    assert _index(ws, folder) == 2
    err = err_text(capsys)
    assert ("is a model, not an index" if source == "model"
            else "holds files this toolkit did not write") in err
    assert sorted(p.name for p in folder.iterdir()) == before
    assert not (folder / "pyserini_moe_index.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]  # no temporary left


# --- a name starting with "_" is no Lucene segment; doc_vectors/ is looked in ---------------------


@pytest.mark.parametrize("name", ["_notes.txt", "_thesis_v2.tex", "doc_vectors/thesis.tex",
                                  "doc_vectors/mine.bin"])
def test_index_overwrite_keeps_a_users_file(ws, tmp_path, capsys, name) -> None:
    folder = dense_copy(ws, tmp_path / "ix")
    (folder / name).parent.mkdir(exist_ok=True)
    (folder / name).write_text("mine")
    before = folder_files(folder)
    assert _index(ws, folder) == 2
    # a dense index writes no doc_vectors/ (an impact index does): the folder is named whole
    shown = name.split("/")[0] + "/" if "/" in name else name
    assert f"did not write (e.g. {shown})" in err_text(capsys)
    assert folder_files(folder) == before


# --- training folders -----------------------------------------------------------------------------


def test_index_overwrite_names_a_training_folder_as_one(ws, siamese_recipe, toy_data, tiny_bert,
                                                        capsys) -> None:
    trainer_into(siamese_recipe, toy_data, tiny_bert).train()
    out = siamese_recipe.output_dir
    before = folder_files(out)
    assert _index(ws, out) == 2
    assert "is a training run, not an index" in err_text(capsys)
    assert folder_files(out) == before


def test_an_index_over_its_own_corpus_is_refused(bm25_ws, capsys) -> None:
    refused(index_cli.main, ["--retriever", "bm25", "--corpus", str(bm25_ws["corpus"]), "--index",
                             str(bm25_ws["corpus"]), "--overwrite"], "is also an input", capsys,
            bm25_ws["corpus"])


def test_an_index_over_its_own_encoder_is_refused(bm25_ws, capsys) -> None:
    refused(index_cli.main, ["--retriever", "dense", "--corpus", str(bm25_ws["corpus"]), "--encoder",
                             str(bm25_ws["model"]), "--index", str(bm25_ws["model"]), "--overwrite",
                             "--device", "cpu"], "is also an input", capsys, bm25_ws["model"])


@pytest.mark.parametrize("removed,message", [
    (("tokenizer.json", "tokenizer_config.json", "vocab.txt"), "tokenizer files"),
    (("config.json",), "no config.json"),
])
def test_an_incomplete_model_folder_is_refused(bm25_ws, tmp_path, capsys, removed, message) -> None:
    broken = tmp_path / "model"
    shutil.copytree(bm25_ws["model"], broken)
    for name in removed:
        (broken / name).unlink(missing_ok=True)
    refused(index_cli.main, ["--retriever", "dense", "--corpus", str(bm25_ws["corpus"]), "--encoder",
                             str(broken), "--index", str(tmp_path / "i"), "--device", "cpu",
                             "--quiet"], message, capsys)
    assert not (tmp_path / "i").exists()


def test_bad_device_and_faiss_form_are_refused_before_encoding(bm25_ws, tmp_path, capsys) -> None:
    base = ["--retriever", "dense", "--corpus", str(bm25_ws["corpus"]), "--encoder", str(bm25_ws["model"]),
            "--quiet"]
    refused(index_cli.main, [*base, "--index", str(tmp_path / "a"), "--device", "tpu:7"],
            "--device 'tpu:7'", capsys)
    refused(index_cli.main, [*base, "--index", str(tmp_path / "b"), "--faiss", "hnswXYZ",
                             "--device", "cpu"], "unknown faiss index 'hnswXYZ'", capsys)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_an_index_named_as_an_existing_file_says_so_with_or_without_overwrite(
        tiny_corpus, tmp_path, capsys, error_line, overwrite) -> None:
    """"pass --overwrite" would lead into a second refusal: a file is not replaced by a folder."""
    target = tmp_path / "run.trec"
    target.write_text("kept\n")
    error = error_line(index_cli.main, ["--retriever", "bm25", "--corpus", str(tiny_corpus),
                                        "--index", str(target), *overwrite], capsys)
    assert f"{target} is a file, not a folder" in error and "--overwrite" not in error
    assert target.read_text() == "kept\n"
