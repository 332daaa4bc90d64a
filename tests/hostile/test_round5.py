"""Fifth hostile pass (work/hostile5/report.md), the cases left after its first fixes: export
--overwrite over a user's files (H5-48 is in test_round4_inputs.py), model sizes without an upper
bound (H5-03, H5-06), a flag's value blamed on the recipe (H5-15), messages that named the wrong
thing (H5-55, H5-66, H5-76), index metadata that lied unnoticed (H5-57, H5-60) and transformers'
LOAD REPORT under --quiet."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.cli import train as train_cli
from pyserini_moe.data.corpus import open_corpus
from pyserini_moe.encode import DenseDocumentEncoder, DenseQueryEncoder
from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import META_FILE, RECORDED_PRECISIONS, IndexMeta
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.modeling.base import PRECISIONS
from pyserini_moe.modeling.came import CameArgs
from pyserini_moe.modeling.colbert import ColbertArgs
from pyserini_moe.modeling.sbmoe import SbMoeArgs
from pyserini_moe.modeling.taser import TaserArgs
from pyserini_moe.search.encoded_queries import read_encoded_queries
from pyserini_moe.validate import MAX_EXPERTS, MAX_WIDTH, ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")
RECIPES = Path(__file__).resolve().parents[2] / "encoders"


@pytest.fixture(scope="module")
def ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    return model_index_run(tmp_path_factory.mktemp("round5"))


# --- sizes that allocate (H5-03, H5-06) --------------------------------------------------------


@pytest.mark.parametrize(("args", "name", "value", "limit"), [
    (CameArgs, "dim", 10**14, MAX_WIDTH), (ColbertArgs, "dim", MAX_WIDTH + 1, MAX_WIDTH),
    (SbMoeArgs, "n_experts", 10**9, MAX_EXPERTS), (SbMoeArgs, "expert_width", 10**12, MAX_WIDTH),
    (TaserArgs, "num_experts", MAX_EXPERTS + 1, MAX_EXPERTS)])
def test_a_size_past_its_bound_is_refused_before_anything_is_built(args, name, value,
                                                                   limit) -> None:
    with pytest.raises(ConfigError, match=rf"^{name}: must be <= {limit:,}, got {value}$"):
        args(**{name: value})
    args(**{name: limit})  # the bound itself is allowed


def test_a_recipe_with_a_huge_came_dim_is_one_line(tmp_path, capsys) -> None:  # H5-03
    recipe = RECIPES / "came-minilm.yaml"
    assert run_main(train_cli.main, ["--config", str(recipe), "--output-dir",
                                     str(tmp_path / "out"),
                                     "--set", "model.args.dim=100000000000000"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: --set model.args.dim=100000000000000: must be <= 65,536, " \
                          "got 100000000000000"
    assert not (tmp_path / "out").exists()


# --- train --seed out of numpy's range (H5-15) ------------------------------------------------


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_a_bad_seed_flag_is_blamed_on_the_flag(tmp_path, capsys, seed) -> None:
    recipe = RECIPES / "siamese-minilm.yaml"
    with pytest.raises(SystemExit) as exit_:
        train_cli.main(["--config", str(recipe), "--seed", seed])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"argument --seed: must be in [0, 2**32), got {seed}" in err
    assert str(recipe) not in err


# --- messages that named the wrong thing (H5-55, H5-66, H5-76) ----------------------------------


def test_a_dense_folder_given_to_an_impact_index_says_so(tmp_path) -> None:  # H5-55
    folder = tmp_path / "eq"
    folder.mkdir()
    pd.DataFrame({"text": ["q"], "embedding": [[1.0, 2.0]]}).to_pickle(folder / "embedding.pkl")
    with pytest.raises(FileNotFoundError, match="dense encoded queries, but the index is an "
                                                "impact index"):
        read_encoded_queries(folder, "impact")
    with pytest.raises(FileNotFoundError, match=r"missing: not found"):
        read_encoded_queries(tmp_path / "missing", "impact")


def test_a_too_long_length_names_the_flag_of_its_side(tiny_bert) -> None:  # H5-66
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
    with pytest.raises(UserError, match=r"use --query-max-length 512 or less$"):
        DenseQueryEncoder(model, max_length=10**11)
    with pytest.raises(UserError, match=r"use --max-length 512 or less$"):
        DenseDocumentEncoder(model, max_length=10**11)


def test_a_beir_corpus_file_points_to_its_folder(tiny_corpus) -> None:  # H5-76
    with pytest.raises(UserError, match=rf'BEIR record, "_id" and "text": give --corpus '
                                        rf'{tiny_corpus}, the BEIR folder'):
        list(open_corpus(tiny_corpus / "corpus.jsonl").corpus())


# --- index metadata that lied unnoticed (H5-57, H5-60) -------------------------------------------


def _edited(ws, folder: Path, **changes) -> Path:
    shutil.copytree(ws["index"], folder)
    meta = json.loads((folder / META_FILE).read_text())
    (folder / META_FILE).write_text(json.dumps({**meta, **changes}))
    return folder


def test_a_recorded_document_count_the_index_does_not_hold_is_refused(ws, tmp_path,
                                                                      capsys) -> None:  # H5-57
    index = _edited(ws, tmp_path / "index", num_docs=999)
    code = run_main(search_cli.main, ["--index", str(index), "--topics", f"{ws['corpus']}:test",
                                      "--output", str(tmp_path / "r.trec"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"{index / META_FILE}: the metadata says 999 documents, the Faiss " \
                         "index holds 30" in err
    assert not (tmp_path / "r.trec").exists()


def test_an_unknown_precision_is_damaged_metadata(ws, tmp_path) -> None:  # H5-60
    index = _edited(ws, tmp_path / "index", precision="fp8")
    with pytest.raises(UserError, match="'precision' must be one of fp32, fp16, bf16, int8, got "
                                        "'fp8'"):
        IndexMeta.from_json(json.loads((index / META_FILE).read_text()), index / META_FILE)


def test_the_recorded_precisions_are_the_models_and_onnx_int8() -> None:
    assert set(RECORDED_PRECISIONS) == set(PRECISIONS) | {"int8"}


# --- transformers' LOAD REPORT under --quiet (pass 4, H4-60's note) -------------------------------


def test_quiet_silences_the_load_report_of_a_checkpoint_with_extra_weights(tiny_mlm,
                                                                            tmp_path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = "the cat sat on the mat. a dense model reads it. the sparse one too. and more."
    (corpus / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n" for i in range(8)))
    command = [sys.executable, "-m", "pyserini_moe.pretrain", "--backbone", str(tiny_mlm),
               "--corpus", str(corpus), "--max-steps", "1", "--batch-size", "4", "--device",
               "cpu"]
    env = {**{k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"},
           "OMP_NUM_THREADS": "1"}  # a --quiet run in this process set it
    loud = subprocess.run([*command, "--output-dir", str(tmp_path / "a")], env=env,
                          capture_output=True, text=True, check=True)
    quiet = subprocess.run([*command, "--output-dir", str(tmp_path / "b"), "--quiet"], env=env,
                           capture_output=True, text=True, check=True)
    assert "LOAD REPORT" in loud.stderr  # the checkpoint's MLM head is unused by the encoder
    assert "LOAD REPORT" not in quiet.stderr
