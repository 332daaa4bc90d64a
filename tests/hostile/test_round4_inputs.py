"""Fourth hostile pass (work/hostile4/report.md), inputs read from files and flags: encoded queries
(H4-01, H4-03 to H4-06), the index metadata's ``query_max_length`` (H4-10 to H4-12), ``export
--overwrite`` (H4-44, H4-45) and a multi-vector index's ``--faiss-params`` (H4-58, H4-59). Each
is one error line naming what to fix, and nothing is deleted on the way."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pyserini_moe.cli import encode_queries as encode_cli
from pyserini_moe.cli import export as export_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import META_FILE, IndexMeta
from pyserini_moe.index.multivector import MultiVectorIndex, MultiVectorIndexWriter
from pyserini_moe.search.encoded_queries import read_encoded_queries

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    return model_index_run(tmp_path_factory.mktemp("round4-inputs"))


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RuntimeWarning" not in err
    return err


# --- search --encoded-queries: dense tables (H4-01, H4-03) -------------------------------------


def _dense(folder: Path, embeddings: list) -> Path:
    folder.mkdir()
    pd.DataFrame({"text": [f"query {i}" for i in range(len(embeddings))],
                  "embedding": embeddings}).to_pickle(folder / "embedding.pkl")
    return folder


@pytest.mark.parametrize("embedding", ["1,2,3", {"a": 1.0}, None, ["1", "2"], [[1.0], [2.0, 3.0]],
                                       [True, False]],
                         ids=["string", "dict", "none", "strings", "ragged", "booleans"])
def test_a_dense_vector_that_is_not_numbers_is_one_line(tmp_path, embedding) -> None:  # H4-01
    folder = _dense(tmp_path / "q", [np.ones(4, dtype=np.float32), embedding])
    with pytest.raises(UserError, match=r"embedding\.pkl: the query 'query 1' has no "):
        read_encoded_queries(folder, "dense")


def test_dense_values_that_overflow_float32_say_so_without_a_warning(tmp_path) -> None:  # H4-03
    folder = _dense(tmp_path / "q", [np.full(4, 1e300)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in cast" fails the test
        with pytest.raises(UserError, match="'query 0' has values that overflow float32"):
            read_encoded_queries(folder, "dense")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_dense_non_finite_values_are_refused(tmp_path, bad) -> None:
    folder = _dense(tmp_path / "q", [np.array([1.0, bad, 0.0])])
    with pytest.raises(UserError, match="NaN or infinite"):
        read_encoded_queries(folder, "dense")


def test_dense_lists_and_float64_still_read_as_float32(tmp_path) -> None:  # H4-02 stays OK
    folder = _dense(tmp_path / "q", [[1.0, 2.0], np.array([3.0, 4.0]), np.array([5, 6])])
    vectors = read_encoded_queries(folder, "dense")
    assert all(v.dtype == np.float32 for v in vectors.values())
    assert vectors["query 2"].tolist() == [5.0, 6.0]


def test_search_with_a_damaged_table_is_one_line(ws, tmp_path, capsys) -> None:  # H4-01
    folder = _dense(tmp_path / "q", ["1,2,3"])
    code = run_main(search_cli.main, ["--index", str(ws["index"]), "--topics",
                                      f"{ws['corpus']}:test", "--encoded-queries", str(folder),
                                      "--output", str(tmp_path / "r.trec"), "--quiet"])
    err = _err(capsys)
    assert code == 2 and "embedding.pkl: the query 'query 0' has no vector of numbers" in err
    assert not (tmp_path / "r.trec").exists()


# --- search --encoded-queries: impact JSON lines (H4-04 to H4-06) ------------------------------


def _impact(path: Path, weight: object) -> Path:
    lines = [{"id": "q0", "contents": "fine", "vector": {"a": 3, "b": 40}},
             {"id": "q1", "contents": "what is it", "vector": {"what": weight, "is": 7}}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), 1e30, 2**31, 10**400, 0.35, 35.5,
                                    -5, True, "5", None],
                         ids=["nan", "inf", "1e30", "2^31", "10^400", "0.35", "35.5", "negative",
                              "bool", "string", "null"])
def test_an_impact_weight_that_is_not_a_quantised_integer_is_refused(tmp_path,
                                                                     weight) -> None:  # H4-04..06
    path = _impact(tmp_path / "q.jsonl", weight)
    with pytest.raises(UserError, match=r"q\.jsonl, line 2 \(query 'what is it'\): the weight of "
                                        r"'what' is .*must be integers .*already quantised"):
        read_encoded_queries(path, "impact")


def test_whole_impact_weights_read_as_ints(tmp_path) -> None:
    vectors = read_encoded_queries(_impact(tmp_path / "q.jsonl", 35.0), "impact")
    assert vectors["what is it"] == {"what": 35, "is": 7}
    assert all(type(w) is int for v in vectors.values() for w in v.values())


# --- the index metadata's query_max_length (H4-10 to H4-12) ------------------------------------


@pytest.mark.parametrize("bad", [-5, 0])
def test_a_recorded_query_length_below_one_is_damage(tmp_path, bad) -> None:  # H4-10, H4-11
    with pytest.raises(UserError, match=rf"{META_FILE}: the index metadata is damaged "
                                        rf"\('query_max_length' must be >= 1 or absent, got {bad}"):
        IndexMeta.from_json({"kind": "dense", "query_max_length": bad}, tmp_path / META_FILE)
    assert IndexMeta.from_json({"kind": "dense", "query_max_length": 16}).query_max_length == 16
    assert IndexMeta.from_json({"kind": "dense"}).query_max_length is None


def _edited(ws, folder: Path, length: int) -> Path:
    shutil.copytree(ws["index"], folder)
    meta = json.loads((folder / META_FILE).read_text())
    (folder / META_FILE).write_text(json.dumps({**meta, "query_max_length": length}))
    return folder


@pytest.mark.parametrize("bad", [-5, 0])
def test_search_and_encode_queries_refuse_it_in_one_line(ws, tmp_path, capsys, bad) -> None:
    index = _edited(ws, tmp_path / "index", bad)
    search = ["--index", str(index), "--topics", f"{ws['corpus']}:test", "--device", "cpu"]
    assert run_main(search_cli.main, [*search, "--output", str(tmp_path / "r.trec")]) == 2
    assert f"{index / META_FILE}: the index metadata is damaged" in _err(capsys)
    assert run_main(encode_cli.main, [*search, "--output", str(tmp_path / "q")]) == 2
    assert f"{index / META_FILE}: the index metadata is damaged" in _err(capsys)
    assert not (tmp_path / "r.trec").exists() and not (tmp_path / "q").exists()


def test_a_recorded_length_above_the_positions_names_the_metadata(ws, tmp_path,
                                                                   capsys) -> None:  # H4-12
    index = _edited(ws, tmp_path / "index", 100_000)
    search = ["--index", str(index), "--topics", f"{ws['corpus']}:test", "--device", "cpu",
              "--quiet"]
    assert run_main(search_cli.main, [*search, "--output", str(tmp_path / "r.trec")]) == 2
    err = _err(capsys)
    assert f"{index / META_FILE}: the index metadata records query_max_length 100000" in err
    assert "--query-max-length 512 or less" in err
    # the flag overrides what the metadata records
    assert run_main(search_cli.main, [*search, "--output", str(tmp_path / "r.trec"),
                                      "--query-max-length", "16"]) == 0


# --- export --overwrite (H4-44, H4-45) ---------------------------------------------------------


def _folders(root: Path, ws: dict[str, Path]) -> dict[str, Path]:
    """A folder of user files, a copy of a model and one of an index: none is an export."""
    user = root / "user"
    (user / "sub").mkdir(parents=True)
    (user / "notes.txt").write_text("keep")
    (user / "sub" / "y").write_text("keep")
    return {"user": user, "model": Path(shutil.copytree(ws["model"], root / "model")),
            "index": Path(shutil.copytree(ws["index"], root / "index"))}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_export_overwrite_replaces_no_folder_but_an_export(ws, tmp_path, capsys) -> None:  # H4-44
    for name, folder in _folders(tmp_path, ws).items():
        before = _snapshot(folder)
        code = run_main(export_cli.main, ["--encoder", str(ws["model"]), "--output", str(folder),
                                          "--overwrite"])
        said = {"user": "holds files this toolkit did not write (e.g. notes.txt)",
                "model": "is a model, not an ONNX export", "index": "is an index, not an ONNX "
                "export"}[name]
        assert code == 2 and said in _err(capsys), name
        assert _snapshot(folder) == before, name


def _fake_export(folder: Path) -> Path:
    folder.mkdir()
    (folder / "pyserini_moe_onnx.json").write_text("{}")
    (folder / "query-dense.onnx").write_bytes(b"old graph")
    return folder


@pytest.mark.parametrize("encoder", ["corpus", "export"])
def test_a_failed_export_keeps_the_old_output(ws, tmp_path, capsys, encoder) -> None:  # H4-45
    output = _fake_export(tmp_path / "out")
    source = ws["corpus"] if encoder == "corpus" else _fake_export(tmp_path / "other-export")
    before = _snapshot(output)
    code = run_main(export_cli.main, ["--encoder", str(source), "--output", str(output),
                                      "--overwrite"])
    assert code == 2 and _err(capsys).startswith("error: ")
    assert _snapshot(output) == before


def test_export_overwrite_replaces_an_export_whole(ws, tmp_path) -> None:
    output = _fake_export(tmp_path / "out")
    (output / "query-sparse.onnx").write_bytes(b"a graph the new export does not write")
    (output / "vocab.txt").write_text("[PAD]\n")
    assert export_cli.main(["--encoder", str(ws["model"]), "--output", str(output),
                            "--overwrite"]) == 0
    assert json.loads((output / "pyserini_moe_onnx.json").read_text())["source"] == \
        str(ws["model"])
    assert not (output / "query-sparse.onnx").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary left beside it


@pytest.mark.parametrize("extra", ["notes.txt", "sub/data.bin"])
def test_export_overwrite_keeps_an_export_holding_user_files(ws, tmp_path, capsys,
                                                             extra) -> None:  # H5-48
    output = _fake_export(tmp_path / "out")
    (output / extra).parent.mkdir(exist_ok=True)
    (output / extra).write_text("the user's")
    before = _snapshot(output)
    code = run_main(export_cli.main, ["--encoder", str(ws["model"]), "--output", str(output),
                                      "--overwrite"])
    shown = extra.split("/")[0] + ("/" if "/" in extra else "")
    assert code == 2 and f"holds files this toolkit did not write (e.g. {shown})" in _err(capsys)
    assert _snapshot(output) == before


# --- multi-vector --faiss-params (H4-58, H4-59) ------------------------------------------------

DIM = 8


@pytest.fixture(scope="module")
def mv(tmp_path_factory) -> dict[str, Path]:
    """Tiny multi-vector indexes of each Faiss form (random token vectors)."""
    root = tmp_path_factory.mktemp("mv")
    rng = np.random.default_rng(0)
    docs = {f"d{i}": rng.standard_normal((12, DIM)).astype(np.float32) for i in range(60)}
    indexes = {}
    for spec in ("flat", "hnsw8", "ivf4,flat"):
        with MultiVectorIndexWriter(root / spec, DIM, {"encoder": "test"}, faiss_index=spec,
                                    progress=False) as writer:
            writer.add_batch(list(docs), list(docs.values()))
        indexes[spec] = root / spec
    return indexes


@pytest.mark.parametrize(("spec", "params", "said"), [
    ("hnsw8", "nprobe=4", r"'nprobe' is not one of its parameters: this HNSW index \(hnsw8\) "
                          r"takes efSearch=N"),
    ("ivf4,flat", "efSearch=64", r"'efSearch' is not one .*IVF index \(ivf4,flat\) takes "
                                 r"nprobe=N"),
    ("flat", "nprobe=4", r"this flat index \(flat\) takes no parameters"),
    ("hnsw8", "efSearch=8,efSearch=9", "'efSearch' is given twice"),
])
def test_a_parameter_of_another_index_form_is_one_line(mv, spec, params, said) -> None:  # H4-58
    with pytest.raises(UserError, match=said):
        MultiVectorIndex(mv[spec], faiss_params=params)


@pytest.mark.parametrize("value", ["nan", "-7", "0", "1.5", "", "inf", "99999999999"])
def test_a_faiss_value_that_is_not_a_positive_integer_is_refused(mv, value) -> None:  # H4-59
    with pytest.raises(UserError, match=rf"efSearch must be a positive integer .*got '{value}'"):
        MultiVectorIndex(mv["hnsw8"], faiss_params=f"efSearch={value}")
    with pytest.raises(UserError, match=rf"nprobe must be a positive integer .*got '{value}'"):
        MultiVectorIndex(mv["ivf4,flat"], faiss_params=f"nprobe={value}")


def test_valid_faiss_parameters_work_as_before(mv) -> None:
    import faiss

    q = np.random.default_rng(1).standard_normal((4, DIM)).astype(np.float32)
    given = MultiVectorIndex(mv["hnsw8"], faiss_params="efSearch=20")
    given.search(q, k=5, candidates_per_token=300)
    assert given.index.hnsw.efSearch == 20  # the user's value is kept, not raised
    default = MultiVectorIndex(mv["hnsw8"])
    default.search(q, k=5, candidates_per_token=300)
    assert default.index.hnsw.efSearch == 300  # Faiss's 16 is raised to the candidate depth
    assert faiss.extract_index_ivf(
        MultiVectorIndex(mv["ivf4,flat"], faiss_params="nprobe=3").index).nprobe == 3
    assert faiss.extract_index_ivf(MultiVectorIndex(mv["ivf4,flat"]).index).nprobe == 2
    assert len(MultiVectorIndex(mv["flat"], faiss_params="").search(q, k=5)) == 5


@pytest.mark.parametrize("field", ["quantization", "dim", "max_length"])
def test_a_recorded_count_below_one_names_the_metadata(tmp_path: Path, field: str) -> None:
    """H4-51: "quantization": 0 was refused as "quantization factor must be >= 1", naming neither
    the index nor its metadata."""
    with pytest.raises(UserError, match=f"the index metadata is damaged \\('{field}' must be >= 1 "
                                        "or absent, got 0\\)"):
        IndexMeta.from_json({"kind": "impact", field: 0}, tmp_path / "pyserini_moe_index.json")
