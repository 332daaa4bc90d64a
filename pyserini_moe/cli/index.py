"""``python -m pyserini_moe.index``: build an index of a collection.

Examples::

    python -m pyserini_moe.index --retriever bm25 --corpus scifact --index indexes/scifact-bm25
    python -m pyserini_moe.index --retriever bm25 --corpus arguana --layout multifield \
        --index indexes/arguana-bm25-multifield     # search with --fields contents=1.0 title=1.0
    python -m pyserini_moe.index --retriever dense --corpus scifact --index indexes/scifact-minilm \
        --encoder all-minilm-l6-v2
    python -m pyserini_moe.index --retriever impact --corpus scifact --index indexes/scifact-splade \
        --encoder models/splade-minilm/best --quantization 100
    # several indexes of one model from one encoding pass (CoT-MoTE: dense + sparse)
    python -m pyserini_moe.index --retriever dense impact --corpus scifact \
        --encoder models/cotmote/best --index indexes/mote-dense indexes/mote-sparse
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import TYPE_CHECKING

from pyserini_moe.cli import ArgumentParser, HelpFormatter
from pyserini_moe.cli.args import (
    add_backend_arg,
    add_device_args,
    add_encoder_option_arg,
    add_zero_shot_args,
    backend_encoder,
    parse_options,
    zero_shot_settings,
)
from pyserini_moe.errors import UserError
from pyserini_moe.index.readers import MODEL_FLAGS, READERS, unread_problem
from pyserini_moe.io import refuse_input_as_output
from pyserini_moe.representation import INDEX_KINDS

if TYPE_CHECKING:
    from pyserini_moe.index.encoded import BuildSettings

RETRIEVERS = ("bm25", *INDEX_KINDS)

_NOT_SHARDED = "BM25 indexes are not sharded: Lucene indexes the whole corpus itself (use --threads)"
# Why a flag is not read, where that says more than the kinds that read it.
_WHY = {"layout": "a model encodes title + ' ' + text", "shard_id": _NOT_SHARDED,
        "shard_num": _NOT_SHARDED,
        **{name: "BM25 has none (Lucene indexes the text itself)" for name in MODEL_FLAGS
           if name not in ("shard_id", "shard_num")}}
# A flag's name where it is not its dest's.
_FLAG_NAMES = {"normalize": "l2-norm"}


def refuse_unread_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A flag given (away from its default) that no ``--retriever`` kind of this build reads,
    per :data:`READERS`: refused before anything is read or built."""
    given = [name for name in READERS if getattr(args, name) != parser.get_default(name)]
    if "encoder" in given and args.retriever is parser.get_default("retriever"):  # not typed
        raise UserError("--encoder names a model, but --retriever was not given and builds "
                        f"BM25 by default: add --retriever {' / '.join(INDEX_KINDS)} (or leave "
                        "--encoder out for a BM25 index)")
    names = {**_FLAG_NAMES, "precision": args.precision}
    problem = unread_problem(given, args.retriever, READERS, _WHY, names)
    if problem:
        raise UserError(problem)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.index",
        description="Build an index of a collection in the BEIR layout with Pyserini's indexer. "
                    "The index is written to a temporary folder and renamed when complete.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--retriever", choices=RETRIEVERS, nargs="+", default=["bm25"],
                        help="kind of index; several model-based kinds (e.g. dense impact) are "
                             "built from ONE encoding pass, one --index folder each, in order")
    parser.add_argument("--corpus", required=True,
                        help="collection name (scifact, cranfield, ... or a public BEIR name), a "
                             "folder with corpus.jsonl(.gz), Pyserini's JsonCollection (a "
                             ".json/.jsonl file or a folder of them, {\"id\", \"contents\"}) or a "
                             "TREC CAR paragraphs file (.cbor)")
    parser.add_argument("--index", required=True, nargs="+",
                        help="output index folder (one per --retriever kind)")
    parser.add_argument("--threads", type=int, default=1, help="indexing threads (Lucene)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing index")
    parser.add_argument("--layout", choices=("flat", "multifield"), default="flat",
                        help="bm25: Pyserini's BEIR index forms: flat, contents = title + ' ' + "
                             "text in one field (beir-v1.0.0-*.flat); multifield, contents = "
                             "text and a `title` field of its own (beir-v1.0.0-*.multifield), "
                             "searched with --fields contents=1.0 title=1.0")
    enc = parser.add_argument_group("model-based indexes (dense, impact, multivector)")
    enc.add_argument("--encoder", default=None,
                     help="a model folder saved by `python -m pyserini_moe.train`, or a Hugging Face "
                          "backbone name/path used zero-shot (pooled as its sentence-transformers "
                          "configuration says, see --pooling); "
                          "'all-minilm-l6-v2' is the packaged MiniLM")
    add_encoder_option_arg(enc, "an encode-time option of the model, recorded in the index and "
                                "applied to queries when searching (e.g. SB-MoE: inference=all; "
                                "repeatable)")
    add_backend_arg(enc, "run the encoder with PyTorch or onnxruntime (CUDA when present); onnx "
                         "exports the model once (python -m pyserini_moe.export) and caches the "
                         "export; fp32 indexes are searchable with either backend, onnx-int8 is "
                         "another encoder")
    enc.add_argument("--batch-size", type=int, default=32, help="documents per encoding batch")
    enc.add_argument("--max-length", type=int, default=256, help="document tokens kept")
    enc.add_argument("--tokenizer-workers", type=int, default=1, metavar="N",
                     help="workers that tokenize the next batches while the model encodes "
                          "this one: 1 = a background thread; N > 1 = N processes, one core "
                          "each (spawned at the start, seconds), for a model on a GPU with "
                          "cores to spare")
    enc.add_argument("--length-bucket", type=int, default=1, metavar="W",
                     help="sort each W consecutive batches by text length before padding, so "
                          "that a batch pads only to its own longest text (the docid order of "
                          "the index is unchanged; vectors differ from unsorted batches by float "
                          "rounding only); 1 = off. Worth it where lengths vary (ArguAna at 256 "
                          "tokens: 28%% of the positions are padding, 11%% with W=8)")
    add_device_args(enc)
    add_zero_shot_args(enc)
    enc.add_argument("--faiss", default="flat",
                     help="dense: flat | hnsw[M]; multivector: flat | ivf{nlist},pq{m} | hnsw[M]")
    enc.add_argument("--compression", default="none", metavar="none|pq{m}[x{bits}]",
                     help="multivector: store each token as its centroid + a product-quantised "
                          "residual of m codes of bits bits (default 8) (PLAID-style search) "
                          "instead of float16, e.g. pq64 (66 bytes a token at 128 dimensions, "
                          "float16 256) or pq64x12 (98 bytes, a finer codec); the codec is "
                          "trained on the corpus's first 262,144 tokens and every later token "
                          "is compressed as it is encoded: no float16 token reaches the disk")
    enc.add_argument("--doc-max-terms", type=int, default=None, metavar="N",
                     help="impact: keep each passage's N heaviest terms (static pruning; "
                          "the index records N and its mean terms per passage)")
    enc.add_argument("--quantization", type=int, default=100,
                     help="impact: weights are stored as round(w * factor); the factor is recorded "
                          "in the index and applied to queries too")
    enc.add_argument("--shard-id", type=int, default=None,
                     help="encode only this shard (0-based) of --shard-num contiguous slices of "
                          "the corpus; join the shards with `python -m pyserini_moe.merge`")
    enc.add_argument("--shard-num", type=int, default=None, help="number of shards")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _build_settings(args: argparse.Namespace) -> BuildSettings:
    """The flags of a model's indexes as :class:`BuildSettings` (which checks them together)."""
    from pyserini_moe.index.encoded import BuildSettings, Shard

    if not args.encoder:
        raise UserError(f"--encoder is required for a {' + '.join(args.retriever)} index")
    zero_shot = zero_shot_settings(args)
    if zero_shot and args.backend != "torch":
        raise UserError(f"--{next(iter(zero_shot)).replace('_', '-')} and the other "
                        "zero-shot settings apply to --backend torch")
    return BuildSettings(
        args.corpus, args.encoder, dict(zip(args.retriever, args.index)),
        batch_size=args.batch_size, max_length=args.max_length, faiss=args.faiss,
        tokenizer_workers=args.tokenizer_workers, length_bucket=args.length_bucket,
        quantization=args.quantization, threads=args.threads, device=args.device,
        precision=args.precision, compression=args.compression, doc_max_terms=args.doc_max_terms,
        overwrite=args.overwrite, progress=not args.quiet,
        options=parse_options(args.encoder_option),
        shard=Shard(args.shard_id, args.shard_num) if args.shard_num is not None else None,
        zero_shot=zero_shot)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.retriever == ["bm25"]:  # the one count a BM25 build takes (a model's: BuildSettings)
        from pyserini_moe.modeling.device import check_parallelism  # torch: not for --help

        check_parallelism("--threads", args.threads)
    if (args.shard_id is None) != (args.shard_num is None):
        raise UserError("--shard-id and --shard-num go together")
    kinds = args.retriever
    if len(set(kinds)) < len(kinds):
        raise UserError(f"--retriever lists a kind twice: {' '.join(kinds)}")
    if len(args.index) != len(kinds):
        raise UserError(f"{len(kinds)} --retriever kind(s) but {len(args.index)} --index "
                        "folder(s): give one folder per kind, in the same order")
    if "bm25" in kinds and len(kinds) > 1:
        raise UserError("a BM25 index is built by Lucene from the text, not from an encoder: "
                        "build it in its own command")
    refuse_unread_flags(parser, args)
    settings = None if kinds == ["bm25"] else _build_settings(args)
    refuse_input_as_output(args.index, [args.corpus, args.encoder])
    start = time.perf_counter()
    if settings is None:
        from pyserini_moe.index.lucene import build_bm25_index

        build_bm25_index(args.corpus, args.index[0], threads=args.threads,
                         overwrite=args.overwrite, layout=args.layout)
    else:
        from pyserini_moe.index.encoded import build_indexes

        build_indexes(dataclasses.replace(settings, encoder=backend_encoder(
            args.encoder, args.backend, settings.options)))
    print(f"{' + '.join(kinds)} index written to {' '.join(args.index)} in "
          f"{time.perf_counter() - start:.1f}s", file=sys.stderr)
    return 0

