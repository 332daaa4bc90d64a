"""encode_stream: the background tokenizer changes nothing but the waiting: same vectors as
encoding batch by batch (bit for bit on the CPU), same order, errors raised at their batch."""

from __future__ import annotations

import multiprocessing
import operator
import threading
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
import torch

from pyserini_moe.encode.pipeline import encode_stream
from pyserini_moe.errors import UserError
from pyserini_moe.modeling import CameEncoder, SbMoeEncoder, SiameseBiEncoder
from pyserini_moe.modeling.base import Side

pytestmark = pytest.mark.usefixtures("one_thread")
BATCHES = [["a cat sat on the mat", "dense"], ["what is retrieval", "x y z w", "sparse experts"],
           ["mixture"]]


@pytest.mark.parametrize("make", [
    lambda p: SiameseBiEncoder.from_backbone(p, device="cpu"),
    lambda p: SbMoeEncoder.from_backbone(p, n_experts=3, device="cpu")])
def test_same_vectors_in_the_same_order_as_batch_by_batch(make, tiny_bert: Path) -> None:
    model = make(tiny_bert).eval()
    for side in (Side.QUERY, Side.PASSAGE):
        streamed = list(encode_stream(model, iter(BATCHES), side, 16, prefetch=2))
        assert [batch for batch, _ in streamed] == BATCHES
        for texts, (_, out) in zip(BATCHES, streamed, strict=True):
            assert torch.equal(out.dense, model.encode(texts, side, 16).dense)


def test_the_callers_use_of_the_models_tokenizer_cannot_change_a_streamed_batch(
        tiny_bert: Path) -> None:
    # A fast tokenizer's settings are state: the stream tokenizes with a copy of its own, so
    # the model's tokenizer changed mid-stream (here left padding, which moves every token's
    # position) leaves the batches still to come as they were
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    batches = [["a cat sat on the mat today", "x"]] * 12
    expected = model.encode(batches[0], Side.PASSAGE, 16).dense
    stream = encode_stream(model, iter(batches), Side.PASSAGE, 16, prefetch=1)
    outs = [next(stream)[1].dense]
    model.tokenizer.padding_side = "left"
    try:
        outs += [out.dense for _, out in stream]
        assert not torch.equal(model.encode(batches[0], Side.PASSAGE, 16).dense, expected)
    finally:
        model.tokenizer.padding_side = "right"
    assert len(outs) == 12 and all(torch.equal(out, expected) for out in outs)


def test_an_error_in_the_tokenizer_thread_is_raised_at_its_batch(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    stream = encode_stream(model, iter([["fine"], ["   "], ["never reached"]]), Side.QUERY, 16)
    assert next(stream)[1].dense.shape[0] == 1
    with pytest.raises(UserError, match="empty query"):
        next(stream)


def test_stopping_early_ends_the_thread(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    stream = encode_stream(model, (["text"] for _ in range(100)), Side.PASSAGE, 16, prefetch=1)
    next(stream)
    stream.close()  # the consumer breaks off: the tokenizer threads must not stay blocked
    assert not _pipeline_threads()


def test_an_encoder_without_encode_tokens_is_encoded_batch_by_batch() -> None:
    class Plain:
        def encode(self, texts, side, max_length, only=None):
            return len(texts)

    assert [n for _, n in encode_stream(Plain(), BATCHES, Side.PASSAGE, 16)] == [2, 3, 1]


def test_batches_of_records_are_encoded_by_their_texts(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    records = [[{"id": "d1", "text": "a cat"}], [{"id": "d2", "text": "dense"}]]
    pairs = list(encode_stream(model, records, Side.PASSAGE, 16,
                               texts=lambda batch: [r["text"] for r in batch]))
    assert [batch[0]["id"] for batch, _ in pairs] == ["d1", "d2"]
    assert torch.equal(pairs[1][1].dense, model.encode(["dense"], Side.PASSAGE, 16).dense)


# texts of very different lengths, so that sorting a window moves them across batches
UNEVEN = [["a", "the longest text of them all by far, with many words in it", "mid length text"],
          ["short", "x"], ["another fairly long passage about experts and routers", "b", "cc"]]


@pytest.mark.parametrize("make", [
    lambda p: CameEncoder.from_backbone(p, device="cpu"),  # dense + sparse + multi
    lambda p: SbMoeEncoder.from_backbone(p, n_experts=3, device="cpu")])
@pytest.mark.parametrize("bucket", [2, 5])
def test_a_bucketed_stream_puts_every_vector_back_in_its_batch(make, bucket, tiny_bert: Path
                                                               ) -> None:
    model = make(tiny_bert).eval()
    streamed = list(encode_stream(model, iter(UNEVEN), Side.PASSAGE, 16, bucket=bucket))
    assert [batch for batch, _ in streamed] == UNEVEN
    for texts, (_, out) in zip(UNEVEN, streamed, strict=True):
        alone = model.encode(texts, Side.PASSAGE, 16)
        for name in model.representations:
            got, want = getattr(out, name), getattr(alone, name)
            if name == "multi":  # padded to the window's longest: compare the real tokens
                assert torch.equal(out.mask[:, :alone.mask.shape[1]], alone.mask)
                assert not out.mask[:, alone.mask.shape[1]:].any()
                got = got[:, :want.shape[1]] * alone.mask[..., None]
                want = want * alone.mask[..., None]
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_sorting_a_window_cuts_its_padding(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    seen: list[int] = []
    encode_tokens = model.encode_tokens

    def spy(tokens, side, only=None):
        seen.append(int(tokens["attention_mask"].numel()))
        return encode_tokens(tokens, side, only)

    model.encode_tokens = spy
    list(encode_stream(model, iter(UNEVEN), Side.PASSAGE, 16))
    plain, seen[:] = sum(seen), []
    list(encode_stream(model, iter(UNEVEN), Side.PASSAGE, 16, bucket=3))
    assert sum(seen) < plain


def test_two_workers_give_the_one_workers_vectors_bit_for_bit(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    batches = [[f"text number {i} " * (i % 7 + 1), "short"] for i in range(20)]
    one = [out.dense for _, out in encode_stream(model, iter(batches), Side.PASSAGE, 32)]
    two = list(encode_stream(model, iter(batches), Side.PASSAGE, 32, workers=2, prefetch=3))
    assert [batch for batch, _ in two] == batches
    for a, (_, b) in zip(one, two, strict=True):
        assert torch.equal(a, b.dense)


def test_every_worker_has_started_before_the_first_batch(tiny_bert: Path) -> None:
    """The pool spawns its processes as work arrives; the stream waits for all of them, so its
    rate from the first batch on is the full one (issue 36's host scaling: measured from the
    first batch, two workers had looked slower than one while the second was still starting)."""
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    stream = encode_stream(model, (["text"] for _ in range(4)), Side.PASSAGE, 16, workers=3)
    next(stream)
    assert len(multiprocessing.active_children()) == 3
    stream.close()


class _FailsInTheWorker:
    """A tokenizer that pickles in the parent and fails to unpickle in a worker process."""

    def __reduce__(self):
        return operator.truediv, (1, 0)


def test_a_worker_that_cannot_start_is_raised_and_leaves_no_process(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    model.tokenizer = _FailsInTheWorker()
    with pytest.raises(BrokenProcessPool):
        next(encode_stream(model, iter([["text"]]), Side.PASSAGE, 16, workers=2))
    assert not multiprocessing.active_children()


def test_stopping_early_ends_every_worker(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    stream = encode_stream(model, (["text"] for _ in range(100)), Side.PASSAGE, 16, workers=2,
                           bucket=2)
    next(stream)
    assert _pipeline_threads() and multiprocessing.active_children()
    stream.close()
    assert not _pipeline_threads() and not multiprocessing.active_children()


def test_an_error_in_a_tokenizer_process_is_raised_at_its_window(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    stream = encode_stream(model, iter([["fine"], ["   "], ["never reached"]]), Side.QUERY, 16,
                           workers=2)
    assert next(stream)[1].dense.shape[0] == 1
    with pytest.raises(UserError, match="empty query"):
        next(stream)
    assert not multiprocessing.active_children()


def _pipeline_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tokenize")]


def test_an_error_reading_the_batches_is_raised_to_the_consumer(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()

    def damaged():
        yield ["fine"]
        raise UserError("corpus.jsonl line 2: not JSON")

    with pytest.raises(UserError, match="not JSON"):
        list(encode_stream(model, damaged(), Side.PASSAGE, 16))


def test_workers_and_bucket_must_be_positive(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    with pytest.raises(ValueError, match="workers and bucket"):
        list(encode_stream(model, iter(BATCHES), Side.PASSAGE, 16, bucket=0))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("bucket", [1, 4])
def test_on_cuda_pinned_batches_give_the_batch_by_batch_vectors(tiny_bert: Path, bucket) -> None:
    model = SbMoeEncoder.from_backbone(tiny_bert, n_experts=3, device="cuda").eval()
    streamed = list(encode_stream(model, iter(UNEVEN), Side.PASSAGE, 16, workers=2,
                                  bucket=bucket))
    for texts, (_, out) in zip(UNEVEN, streamed, strict=True):
        assert out.dense.device.type == "cuda"
        torch.testing.assert_close(out.dense, model.encode(texts, Side.PASSAGE, 16).dense,
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("workers,bucket", [(2, 1), (1, 4)])
def test_an_onnx_encoder_refuses_the_settings_it_cannot_follow(workers, bucket) -> None:
    """An ONNX export encodes batch by batch: --tokenizer-workers / --length-bucket were
    ignored in silence."""
    from pyserini_moe.encode.pipeline import encode_stream
    from pyserini_moe.errors import UserError

    class Exported:  # a TextEncoder that is no RetrievalModel (an ONNX export)
        def encode(self, texts, side, max_length, only=None):
            raise AssertionError("not reached")

    with pytest.raises(UserError, match="apply to PyTorch encoders"):
        next(encode_stream(Exported(), [["a"]], Side.PASSAGE, 16, workers=workers, bucket=bucket))


def test_tokenizer_workers_end_when_their_parent_is_killed(tiny_bert: Path, tmp_path) -> None:
    """SIGKILL of an index build runs no clean-up: its tokenizer processes stayed behind
    (~400 MB each). The kernel now ends them with their parent."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "from pyserini_moe.modeling import SiameseBiEncoder\n"
        "from pyserini_moe.modeling.base import Side\n"
        "from pyserini_moe.encode.pipeline import encode_stream\n"
        "if __name__ == '__main__':\n"
        f"    model = SiameseBiEncoder.from_backbone({str(tiny_bert)!r}, device='cpu').eval()\n"
        "    def batches():\n"
        "        yield ['a cat sat'] * 4\n"
        "        print('ready', flush=True)\n"
        "        time.sleep(600)\n"
        "        yield ['never']\n"
        "    for _ in encode_stream(model, batches(), Side.PASSAGE, 16, workers=2):\n"
        "        pass\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        children = _children(parent.pid)
        assert len(children) >= 2  # the two workers (and the resource tracker)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.time() + 30
        while time.time() < deadline and any(_alive(pid) for pid in children):
            time.sleep(0.2)
        assert not [pid for pid in children if _alive(pid)]
    finally:
        if parent.poll() is None:
            parent.kill()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_worker_that_dies_is_one_line(tiny_bert: Path) -> None:
    """A tokenizer process killed mid-stream (the OOM killer) was a 21-line BrokenProcessPool
    traceback."""
    import os
    import signal

    from pyserini_moe.encode.pipeline import encode_stream
    from pyserini_moe.errors import UserError

    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()

    def batches():
        yield ["a cat sat"] * 4
        workers = [pid for pid in _children(os.getpid())
                   if b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes()
                   and b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
        os.kill(workers[0], signal.SIGKILL)
        for _ in range(2000):  # work enough left that the pool notices before it is done
            yield ["dense retrieval"] * 4

    with pytest.raises(UserError, match="a tokenizer worker process died"):
        for _ in encode_stream(model, batches(), Side.PASSAGE, 16, workers=2, prefetch=1):
            pass
