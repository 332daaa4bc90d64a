"""``BuildSettings`` checks itself: a model's index build is refused when its
settings are made, one line each, before any model loads or folder is touched; the command line
and the library share these checks."""

from __future__ import annotations

import dataclasses

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.index.encoded import BuildSettings, Shard

REFUSED = [
    ({"batch_size": 0}, "--batch-size must be >= 1"),
    ({"max_length": -1}, "--max-length must be >= 1"),
    ({"quantization": 0}, "--quantization must be >= 1"),
    ({"tokenizer_workers": 0}, "--tokenizer-workers must be >= 1"),
    ({"length_bucket": 0}, "--length-bucket must be >= 1"),
    ({"threads": 0}, "--threads must be >= 1"),
    ({"outputs": {}}, "index kinds"),
    ({"outputs": {"splade": "x"}}, "index kinds \\['splade'\\]"),
    ({"outputs": {"dense": "x", "impact": "x"}}, "its own output folder"),
    ({"faiss": "ivf100,pq8"}, "unknown faiss index"),
    ({"compression": "pq16"}, "--compression applies to multivector"),
    ({"outputs": {"multivector": "m"}, "compression": "pq16", "shard": Shard(0, 2)},
     "not to shards"),
    ({"doc_max_terms": 64}, "--doc-max-terms applies to impact"),
]


@pytest.mark.parametrize(("given", "said"), REFUSED, ids=[s for _, s in REFUSED])
def test_settings_that_cannot_work_are_refused_when_made(given, said, tmp_path) -> None:
    with pytest.raises(UserError, match=said) as caught:
        BuildSettings(**{"corpus": "c", "encoder": "m", "outputs": {"dense": "d"}, **given})
    assert "\n" not in str(caught.value)
    assert not any(tmp_path.iterdir())


def test_valid_settings_are_made_and_changed_copies_checked_again() -> None:
    s = BuildSettings("c", "m", {"multivector": "m", "impact": "i"}, compression="pq16",
                      doc_max_terms=64)
    assert s.compressed
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.batch_size = 0  # type: ignore[misc]
    with pytest.raises(UserError, match="--batch-size"):
        dataclasses.replace(s, batch_size=0)


def test_tokenizer_workers_are_bounded_by_the_usable_cores(monkeypatch, caplog) -> None:
    """Each worker is a process of its own: above the cores they only contend (a warning), far
    above a refusal (12 on 2 cores took 126 s and 4 GB for 4 documents)."""
    import logging

    from pyserini_moe.modeling import device

    monkeypatch.setattr(device, "usable_cores", lambda: 2)
    device._warn_contention.cache_clear()  # said once a process
    base = {"corpus": "scifact", "encoder": "m", "outputs": {"dense": "x"}}
    with pytest.raises(UserError, match="--tokenizer-workers 12: .* 2 usable core"):
        BuildSettings(**base, tokenizer_workers=12)
    with caplog.at_level(logging.WARNING):
        BuildSettings(**base, tokenizer_workers=3)
    assert any("above the 2 usable core" in r.getMessage() for r in caplog.records)
    caplog.clear()
    BuildSettings(**base, tokenizer_workers=2)
    assert not caplog.records


def test_threads_are_warned_above_the_cores_and_refused_past_javas_limit(monkeypatch,
                                                                          caplog) -> None:
    """Threads are cheap (Pyserini's ``--threads 16`` runs anywhere, with a warning); past Java's
    thread-pool limit Lucene's indexer throws, so the count is refused naming the flag."""
    import logging

    from pyserini_moe.modeling import device

    monkeypatch.setattr(device, "usable_cores", lambda: 2)
    device._warn_contention.cache_clear()
    base = {"corpus": "scifact", "encoder": "m", "outputs": {"impact": "x"}}
    with caplog.at_level(logging.WARNING):
        BuildSettings(**base, threads=16)
        BuildSettings(**base, threads=16)  # settings checked again: not said again
    assert sum("--threads 16 is above the 2 usable core" in r.getMessage()
               for r in caplog.records) == 1
    with pytest.raises(UserError, match="--threads 300000: at most 32767 threads"):
        BuildSettings(**base, threads=300_000)


def test_a_quantisation_past_a_java_int_is_refused() -> None:
    """Lucene keeps each impact weight in a Java int: a factor past it, or one that turns a
    weight past it, is one line naming --quantization (it was a Java error, or a silently
    wrapped weight)."""
    import torch

    from pyserini_moe.encode.impact import quantize

    base = {"corpus": "scifact", "encoder": "m", "outputs": {"impact": "x"}}
    with pytest.raises(UserError, match="--quantization must be <= 2147483647"):
        BuildSettings(**base, quantization=2**31)
    with pytest.raises(UserError, match="--quantization 100000000: a term weight of 30 "):
        quantize(torch.tensor([[0.0, 30.0]]), ["a", "b"], 10**8)
    assert quantize(torch.tensor([[0.0, 3.0]]), ["a", "b"], 100) == [{"b": 300}]
