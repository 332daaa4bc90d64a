"""Encode-time precision (``--fp16`` / ``--bf16``): autocast on request, float32 out, fp16 refused
on CPU, and the index records what it was encoded with."""

from __future__ import annotations

import pytest
import torch

from pyserini_moe.cli import run_main
from pyserini_moe.errors import UserError
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.index.meta import read_meta
from pyserini_moe.modeling import Side
from pyserini_moe.modeling.auto import load_encoder

pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["a cat sat on the mat", "dense retrieval with a mixture of experts"]


def test_bf16_vectors_are_float32_and_close_to_fp32(tiny_bert) -> None:
    model = load_encoder(tiny_bert, device="cpu")
    reference = model.encode(TEXTS, Side.PASSAGE, 32).dense
    half = model.set_precision("bf16").encode(TEXTS, Side.PASSAGE, 32).dense
    assert half.dtype == torch.float32
    assert not torch.equal(half, reference)  # autocast did run in bfloat16
    assert torch.nn.functional.cosine_similarity(half, reference).min() > 0.99
    assert model.set_precision("fp32").encode(TEXTS, Side.PASSAGE, 32).dense.equal(reference)


def test_fp16_needs_cuda_and_names_are_checked(tiny_bert) -> None:
    model = load_encoder(tiny_bert, device="cpu")
    with pytest.raises(UserError, match="--fp16 needs a CUDA device"):
        model.set_precision("fp16")
    with pytest.raises(UserError, match="unknown precision 'fp8'"):
        model.set_precision("fp8")
    assert model.precision == "fp32"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fp16_on_cuda(tiny_bert) -> None:
    model = load_encoder(tiny_bert, device="cuda", precision="fp16")
    reference = load_encoder(tiny_bert, device="cuda").encode(TEXTS, Side.QUERY, 32).dense
    half = model.encode(TEXTS, Side.QUERY, 32).dense
    assert half.dtype == torch.float32
    assert torch.nn.functional.cosine_similarity(half, reference).min() > 0.999


def test_index_flags_record_the_precision(tiny_corpus, tiny_bert, tmp_path, capsys) -> None:
    base = ["--retriever", "dense", "--corpus", str(tiny_corpus), "--encoder", str(tiny_bert),
            "--device", "cpu", "--quiet"]
    assert index_cli.main([*base, "--index", str(tmp_path / "bf16"), "--bf16"]) == 0
    assert read_meta(tmp_path / "bf16").precision == "bf16"
    assert run_main(index_cli.main, [*base, "--index", str(tmp_path / "fp16"), "--fp16"]) == 2
    assert "--fp16 needs a CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "fp16").exists()
    with pytest.raises(SystemExit):  # one precision at a time
        index_cli.main([*base, "--index", str(tmp_path / "x"), "--fp16", "--bf16"])


def test_search_and_encode_queries_take_bf16(tiny_corpus, tiny_bert, tmp_path) -> None:
    from pyserini_moe.cli import encode_queries as encode_queries_cli
    from pyserini_moe.runs import read_trec_run
    from pyserini_moe.search import __main__ as search_cli

    index = tmp_path / "index"
    assert index_cli.main(["--retriever", "dense", "--corpus", str(tiny_corpus), "--encoder",
                           str(tiny_bert), "--device", "cpu", "--quiet", "--index",
                           str(index)]) == 0
    runs = {}
    for flags in ([], ["--bf16"]):
        out = tmp_path / f"run{len(flags)}.trec"
        assert search_cli.main(["--retriever", "dense", "--index", str(index), "--topics",
                                f"{tiny_corpus}:test", "--output", str(out), "--hits", "3",
                                "--device", "cpu", "--quiet", *flags]) == 0
        runs[len(flags)] = read_trec_run(out)
    assert runs[1].keys() == runs[0].keys() and runs[1] != runs[0]  # same queries, bf16 scores
    assert encode_queries_cli.main(["--index", str(index), "--topics", f"{tiny_corpus}:test",
                                    "--output", str(tmp_path / "q"), "--device", "cpu",
                                    "--bf16"]) == 0


def test_flags_that_would_do_nothing_are_refused(tiny_corpus, tmp_path, capsys) -> None:
    from pyserini_moe.search import __main__ as search_cli

    base = ["--corpus", str(tiny_corpus), "--index", str(tmp_path / "i")]
    assert run_main(index_cli.main, ["--retriever", "bm25", *base, "--bf16"]) == 2
    assert "BM25 has none" in capsys.readouterr().err
    assert run_main(index_cli.main, ["--retriever", "dense", *base, "--encoder", "x",
                                     "--doc-max-terms", "5"]) == 2
    assert "--doc-max-terms applies to impact" in capsys.readouterr().err
    assert run_main(search_cli.main, ["--retriever", "bm25", "--index", str(tmp_path),
                                      "--topics", f"{tiny_corpus}:test", "--output",
                                      str(tmp_path / "r.trec"), "--fp16"]) == 2
    assert "BM25 has none" in capsys.readouterr().err
    assert not (tmp_path / "i").exists() and not (tmp_path / "r.trec").exists()


def test_bf16_on_a_cpu_without_bfloat16_instructions_is_said_once(tiny_bert, monkeypatch,
                                                                   caplog) -> None:
    """Issue 39: --bf16 ran 4.4x slower without a word where the CPU emulates bfloat16, and the
    fp16 refusal recommended it there."""
    from pyserini_moe.modeling import base

    monkeypatch.setattr(base, "cpu_has_bf16", lambda: False)
    base._say_bf16_is_emulated.cache_clear()
    model = load_encoder(tiny_bert, device="cpu")
    with caplog.at_level("WARNING", logger="pyserini_moe.modeling.base"):
        model.set_precision("bf16")
        load_encoder(tiny_bert, device="cpu", precision="bf16")  # a second model: said once
    assert [r.getMessage() for r in caplog.records] == [
        "this CPU has no bfloat16 instructions (avx512_bf16 or amx_bf16): --bf16 is emulated here "
        "and slower than float32; leave it out"]
    with pytest.raises(UserError) as info:
        model.set_precision("fp16")
    assert "--bf16" not in str(info.value)
    base._say_bf16_is_emulated.cache_clear()


def test_a_cpu_with_bfloat16_instructions_is_told_to_use_bf16(tiny_bert, monkeypatch,
                                                              caplog) -> None:
    from pyserini_moe.modeling import base

    monkeypatch.setattr(base, "cpu_has_bf16", lambda: True)
    model = load_encoder(tiny_bert, device="cpu")
    with caplog.at_level("WARNING"):
        model.set_precision("bf16")
    assert not caplog.records
    with pytest.raises(UserError, match="slower than float32; use --bf16$"):
        model.set_precision("fp16")


@pytest.mark.parametrize(("flags", "expected"), [("fpu avx2 avx512_bf16", True),
                                                 ("fpu amx_bf16 amx_tile", True),
                                                 ("fpu avx2 avx512f", False)])
def test_bfloat16_instructions_are_read_from_the_cpu_flags(tmp_path, flags, expected) -> None:
    from pyserini_moe.modeling.base import cpu_has_bf16

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: x\nflags\t\t: {flags}\n\n")
    assert cpu_has_bf16(cpuinfo) is expected
    assert cpu_has_bf16(tmp_path / "missing") is False  # not Linux: unknown, taken as no
