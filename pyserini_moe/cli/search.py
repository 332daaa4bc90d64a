"""``python -m pyserini_moe.search``: search an index with a set of topics, write a TREC run.

Examples::

    python -m pyserini_moe.search --retriever bm25 --index indexes/scifact-bm25 \\
        --topics scifact:test --output runs/bm25.scifact.test.trec --hits 1000
    python -m pyserini_moe.search --retriever bm25 --index indexes/scifact-bm25 \\
        --topics beir-v1.0.0-scifact-test --output run.trec
    # ArguAna: every query is a corpus document; drop it (Pyserini's 2CR does)
    python -m pyserini_moe.search --retriever bm25 --index indexes/arguana-bm25 \\
        --topics arguana:test --output runs/bm25.arguana.test.trec --remove-query
    python -m pyserini_moe.search --retriever bm25 --index indexes/arguana-bm25-multifield \\
        --topics arguana:test --output run.trec --remove-query --fields contents=1.0 title=1.0
    python -m pyserini_moe.search --retriever dense --index indexes/scifact-minilm \\
        --topics scifact:test --output runs/minilm.trec     # encoder read from the index
    # --retriever left out: the kind the index records (here dense)
    python -m pyserini_moe.search --index indexes/scifact-minilm --topics scifact:test \\
        --output runs/minilm.trec
    # one model, several indexes (CoT-MoTE dense + sparse; CAME's three experts), fused
    python -m pyserini_moe.search --retriever fused --index idx/cotmote-dense idx/cotmote-sparse \\
        --fusion exact --topics scifact:test --output runs/cotmote-hybrid.trec \\
        --expert-runs runs/cotmote
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from collections.abc import Callable

from pyserini_moe.cli import (
    ArgumentParser,
    HelpFormatter,
    finite_float,
    output_file,
    positive_int,
    refuse_inside_outputs,
    settings_from,
)
from pyserini_moe.cli.args import add_backend_arg, add_device_args, backend_encoder
from pyserini_moe.errors import UserError
from pyserini_moe.io import refuse_input_as_output
from pyserini_moe.representation import INDEX_KINDS
from pyserini_moe.runs import Run, check_run_tag, refuse_non_run_output, run_writer
from pyserini_moe.search.dispatch import (
    RETRIEVERS,
    SEARCH_FUSIONS,
    Findings,
    SearchSettings,
    TopicSearcher,
    recorded_retriever,
)
from pyserini_moe.search.hybrid import PYSERINI_ALPHA

# Pyserini's query-encoder flags (``pyserini.search.faiss``): here the index records how its
# encoder encodes (a backbone's zero-shot pooling, L2 norm and query prefix; the model's class
# comes with the model), so a search never sets them.
_INDEX_ENCODER_FLAGS = ("--pooling", "--l2-norm", "--query-prefix", "--encoder-class")


def _dest(flag: str) -> str:
    """Where argparse keeps ``flag``: apart from :class:`SearchSettings`' fields."""
    return "pyserini_" + flag.removeprefix("--").replace("-", "_")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.search",
        description="Search an index with topics and write a TREC run file "
                    "(qid Q0 docid rank score tag).",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--retriever", choices=RETRIEVERS, default=None,
                        help="kind of retrieval; must match the index kind. Default: the kind "
                             "the index records (dense, impact, multivector, bm25), fused for "
                             "several indexes, bm25 for an index without our metadata "
                             "(Pyserini's own Lucene indexes, prebuilt index names)")
    parser.add_argument("--index", required=True, nargs="+",
                        help="index folder built by `python -m pyserini_moe.index` (or any Lucene "
                             "index / Pyserini prebuilt index name for bm25); fused: one index per "
                             "expert")
    parser.add_argument("--topics", required=True,
                        help="`<collection>:<split>` (e.g. scifact:test), a TSV/JSONL topics file, "
                             "or a Pyserini topics name (e.g. beir-v1.0.0-scifact-test)")
    parser.add_argument("--output", required=True, type=output_file,
                        help="TREC run file to write (atomically)")
    parser.add_argument("--hits", type=int, default=1000, help="results per query")
    parser.add_argument("--batch-size", type=int, default=64, help="queries per batch")
    parser.add_argument("--threads", type=int, default=1, help="search threads per batch")
    parser.add_argument("--run-tag", default=None,
                        help="last column of the run (default: what made it: the retriever, "
                             "fused-FUSION, or RETRIEVER+bm25 for a BM25 hybrid)")
    enc = parser.add_argument_group("dense, impact, multivector")
    enc.add_argument("--encoder", default=None,
                     help="query encoder (default: the encoder recorded in the index; another "
                          "model than the one that built the index is refused)")
    add_backend_arg(enc, "run the query encoder with PyTorch or onnxruntime (CUDA when present); "
                         "onnx exports the model once (python -m pyserini_moe.export) and caches "
                         "the export; an int8 encoder only searches indexes built with it")
    enc.add_argument("--query-max-length", "--max-length", dest="query_max_length", type=int,
                     default=None,
                     help="query tokens kept (default: what the index records, the length "
                          "its encoder was trained at, else every position the model has, 512 "
                          "for BERT; a longer query is cut, with a warning); --max-length is "
                          "Pyserini's name for it")
    enc.add_argument("--encoded-queries", default=None, metavar="PATH",
                     help="Pyserini's flag: queries encoded ahead of time instead of a model "
                          "(dense: a folder with embedding.pkl; impact: a JSON-lines file; as "
                          "`python -m pyserini_moe.encode_queries` and Pyserini write them), "
                          "looked up by their text. A pickle is read only if it holds nothing "
                          "but a table of texts and vectors")
    enc.add_argument("--query-max-terms", type=int, default=1024,
                     help="impact: query terms kept (the heaviest); may not exceed Lucene's max "
                          "clause count (1024), which refuses longer queries")
    add_device_args(enc)
    for flag in _INDEX_ENCODER_FLAGS:  # Pyserini's, accepted only to be refused (see main)
        enc.add_argument(flag, dest=_dest(flag), default=None, help=argparse.SUPPRESS,
                         action=argparse.BooleanOptionalAction if flag == "--l2-norm" else None)
    enc.add_argument("--ef-search", type=int, default=None,
                     help="dense HNSW index: Faiss efSearch, the search breadth (Pyserini's flag)")
    enc.add_argument("--faiss-params", default=None,
                     help="multivector: Faiss search parameters of the token index, e.g. "
                          "nprobe=32 (IVF) or efSearch=256 (HNSW); a --compression index takes "
                          "nprobe=N (centroids a query token probes) and ndocs=N (documents "
                          "re-scored with decoded tokens)")
    enc.add_argument("--exhaustive", action="store_true",
                     help="multivector: exact MaxSim against every document instead of Faiss "
                          "candidates (slow; the reference for candidate recall)")
    fus = parser.add_argument_group(
        "fused: each index (dense, impact, multivector) of one model retrieves its own "
        "--candidates, scores are put in the model's units, then fused")
    fus.add_argument("--fusion", choices=SEARCH_FUSIONS, default="came_sum",
                     help="came_sum: sum, a missing document scored at the expert's K-th score "
                          "(CAME eq. 12); exact: every expert re-scores the union of the "
                          "candidates exactly and the scores are summed (CoT-MoTE's s_den + "
                          "s_spr); norm_sum, norm_max, sum_rr, max_rr, linear: CAME table 4; rrf, "
                          "combsum, combmnz, wsum: ranx")
    fus.add_argument("--fusion-weights", type=finite_float, nargs="+", default=None,
                     help="linear / wsum: one weight per index")
    fus.add_argument("--expert-runs", default=None, metavar="PREFIX",
                     help="also write each expert's own run to PREFIX.<kind>.trec")
    hyb = parser.add_argument_group(
        "hybrid with BM25 (Pyserini's semantics: model + alpha * BM25, a missing score gets that "
        "list's minimum); fuse saved runs with `python -m pyserini_moe.fuse`")
    hyb.add_argument("--bm25-index", default=None,
                     help="a BM25 index of the same corpus: fuse the model's run with BM25's")
    hyb.add_argument("--alpha", type=finite_float, default=PYSERINI_ALPHA,
                     help="weight of the BM25 scores (of the model's with --weight-on-dense); "
                          f"default {PYSERINI_ALPHA}, Pyserini's default (it used to be "
                          "1.0: pass --alpha 1.0 to reproduce older hybrid runs)")
    hyb.add_argument("--weight-on-dense", action="store_true",
                     help="Pyserini's flag: alpha weighs the model's side, BM25 + alpha * model")
    hyb.add_argument("--hybrid-normalize", "--normalization", dest="hybrid_normalize",
                     action="store_true",
                     help="normalise each list per query first (Ma et al. 2021; Pyserini's "
                          "--normalization)")
    hyb.add_argument("--candidates", type=int, default=1000,
                     help="K': hits taken from each side before fusing")
    bm25 = parser.add_argument_group("bm25")
    bm25.add_argument("--k1", type=finite_float, default=0.9, help="BM25 k1")
    bm25.add_argument("--b", type=finite_float, default=0.4, help="BM25 b")
    bm25.add_argument("--rm3", action="store_true",
                      help="Pyserini's RM3 query expansion (10 terms of the top 10 documents, "
                           "original query weight 0.5)")
    bm25.add_argument("--rocchio", action="store_true",
                      help="Pyserini's Rocchio query expansion, at its defaults")
    bm25.add_argument("--qld", action="store_true",
                      help="Pyserini's query likelihood with Dirichlet smoothing (mu 1000) in "
                           "place of BM25")
    bm25.add_argument("--fields", nargs="+", type=field_weight, default=None,
                      metavar="FIELD=WEIGHT",
                      help="Pyserini's flag: search these fields of a multifield index (`index "
                           "--layout multifield`) with these weights, e.g. contents=1.0 "
                           "title=1.0 (Pyserini's BEIR multifield runs); default: contents")
    out = parser.add_argument_group("output, as Pyserini's search commands")
    out.add_argument("--output-format", choices=("trec", "msmarco"), default="trec",
                     help="trec: qid Q0 docid rank score tag; msmarco: qid<TAB>docid<TAB>rank")
    out.add_argument("--remove-query", action="store_true",
                     help="drop the hit whose docid is the query's own id, keeping --hits hits "
                          "(one more is searched; Pyserini keeps the --hits - 1 left): needed "
                          "for BEIR ArguAna (and Quora), whose queries are corpus documents that "
                          "retrieve themselves first; BEIR and Pyserini's 2CR drop them, and the "
                          "regression files pass it for ArguAna (regressions/bm25-beir.yaml: "
                          "2CR's BM25 rows). Any retriever; with --expert-runs, theirs too")
    out.add_argument("--max-passage", action="store_true",
                     help="Pyserini's flag for a corpus of passages whose ids are "
                          "<docid><delimiter><n> (MS MARCO documents split into segments): rank "
                          "documents, each at its best passage's score")
    out.add_argument("--max-passage-hits", type=positive_int, default=100,
                     help="documents kept a query with --max-passage (search --hits passages "
                          "deep enough to fill them)")
    out.add_argument("--max-passage-delimiter", default="#",
                     help="what separates the document id from the passage number")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def field_weight(value: str) -> tuple[str, float]:
    """argparse type of ``--fields``: ``FIELD=WEIGHT`` (Pyserini's form), weight a number >= 0."""
    name, sep, weight = value.partition("=")
    try:
        number = float(weight)
    except ValueError:
        number = -1.0
    if not sep or not name.strip() or not number >= 0:
        raise argparse.ArgumentTypeError(f"{value!r}: expected FIELD=WEIGHT with a weight >= 0, "
                                         "e.g. title=1.0")
    return name.strip(), number


def run_tag(s: SearchSettings) -> str:
    """The run's default tag: what produced it (``dense``, ``fused-came_sum``, ``dense+bm25``)."""
    tag = f"fused-{s.fusion}" if s.retriever == "fused" else s.retriever
    return f"{tag}+bm25" if s.bm25_index else tag


def _backend_encoder(args: argparse.Namespace) -> str:
    """``--encoder`` (default: the one recorded in the first index) for ``--backend``."""
    from pyserini_moe.index.meta import read_meta

    first = args.index[0]
    meta = read_meta(first)
    encoder = args.encoder or (meta.encoder if meta else None)
    if not encoder:
        raise UserError(f"{first} records no encoder: give --encoder with --backend")
    _refuse_other_precision(args.index, args.backend)
    return backend_encoder(encoder, args.backend, meta.encoder_options if meta else None)


def _refuse_other_precision(indexes: list[str], backend: str) -> None:
    """An int8 encoder's vectors differ from the model's, so it only searches indexes an int8
    encoder built, and an fp32 one only the others: said before an export that could not match
    (it takes seconds to minutes and writes into the model folder)."""
    from pyserini_moe.index.meta import read_meta
    from pyserini_moe.modeling.onnx import is_int8_fingerprint

    want_int8 = backend == "onnx-int8"
    for index in indexes:
        meta = read_meta(index)
        recorded = meta.encoder_fingerprint if meta else None
        if recorded and is_int8_fingerprint(recorded) != want_int8:
            built, fitting = ("an int8 ONNX encoder", "onnx-int8") if not want_int8 else \
                ("the fp32 model (PyTorch or --backend onnx)", "torch or onnx")
            raise UserError(f"{index} was built by {built}, so a --backend {backend} query "
                            f"encoder cannot match its vectors: search with --backend {fitting}, "
                            f"or rebuild the index with --backend {backend}")


def _settings(args: argparse.Namespace) -> SearchSettings:
    """The flags as :class:`SearchSettings`: the retriever the index records when none is given,
    one index as a path (several for ``fused``), ``--fields`` as a mapping."""
    retriever = args.retriever or recorded_retriever(args.index)
    index = args.index if retriever == "fused" or len(args.index) > 1 else args.index[0]
    return settings_from(SearchSettings, args, retriever=retriever, index=index,
                         fields=_field_weights(args.fields) if args.fields else None)


def _field_weights(pairs: list[tuple[str, float]]) -> dict[str, float]:
    """``--fields`` as a mapping: a field given twice (``contents=1 contents=2``) is refused,
    as a mapping would keep its last weight and drop the first without a word."""
    weights: dict[str, float] = {}
    for name, weight in pairs:
        if name in weights:
            raise UserError(f"--fields: the field {name!r} is given twice ({name}={weights[name]:g} "
                            f"and {name}={weight:g}): give each field once, with one weight")
        weights[name] = weight
    return weights


def _refuse_unread_run_tag(args: argparse.Namespace) -> None:
    """``--run-tag`` in the msmarco format, which has no tag column: the tag would be written
    nowhere, without a word."""
    if args.run_tag is not None and args.output_format == "msmarco":
        raise UserError("--run-tag: --output-format msmarco has no tag column (qid, docid, "
                        "rank); leave it out, or write --output-format trec")


def _refuse_encoder_flags(args: argparse.Namespace) -> None:
    """Pyserini's query-encoder flags, given to ``search``, would otherwise be argparse's
    "unrecognized arguments": one line says where these settings come from instead."""
    given = [flag for flag in _INDEX_ENCODER_FLAGS if getattr(args, _dest(flag)) is not None]
    if given:
        raise UserError(f"{', '.join(given)}: these settings come from the index, which records "
                        "how its encoder was used zero-shot (pooling, L2 norm, query prefix; the "
                        "model's class comes with the model): give them to `python -m "
                        "pyserini_moe.index` (--pooling, --l2-norm, --query-prefix)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _refuse_encoder_flags(args)  # before any work
    settings = _settings(args)  # every check of the flags together (SearchSettings)
    _refuse_unread_run_tag(args)
    if args.expert_runs and settings.retriever != "fused":
        raise UserError("--expert-runs applies to --retriever fused")
    # before the search, not after it; an empty --run-tag is refused, not replaced by the default
    tag = check_run_tag(run_tag(settings) if args.run_tag is None else args.run_tag)
    expert_outputs = ([f"{args.expert_runs}.{kind}.trec" for kind in INDEX_KINDS]
                      if args.expert_runs else [])
    refuse_input_as_output([args.output, *expert_outputs],
                           [args.topics, *args.index, args.bm25_index, args.encoder,
                            args.encoded_queries])
    for output in [args.output, *expert_outputs]:  # before the search, not after it
        refuse_non_run_output(output)
        refuse_inside_outputs("--output" if output == args.output else "--expert-runs", output,
                              file=True)
    from pyserini_moe.data.topics import load_topics

    topics = load_topics(args.topics)
    if settings.backend != "torch":  # a model search (SearchSettings refuses it elsewhere)
        settings = dataclasses.replace(settings, encoder=_backend_encoder(args))
    searched = search_in_parts(TopicSearcher(settings), topics, args, tag)
    for notice in searched.findings.notices:
        print(notice, file=sys.stderr)
    terms = "" if searched.query_terms is None else f"; {searched.query_terms:.1f} terms a query"
    print(f"{searched.queries} queries searched in {searched.seconds:.1f}s "
          f"({searched.queries / max(searched.seconds, 1e-9):.1f} q/s; "
          f"{searched.open_seconds:.1f}s more to load the model and index{terms}); run written "
          f"to {args.output}", file=sys.stderr)
    return 0


@dataclasses.dataclass
class Searched:
    """What the command reports of a search written a part at a time."""

    findings: Findings
    queries: int = 0
    seconds: float = 0.0
    open_seconds: float = 0.0
    query_terms: float | None = None


def search_in_parts(searcher: TopicSearcher, topics: dict[str, str], args: argparse.Namespace,
                    tag: str) -> Searched:
    """Search ``topics`` a part at a time (:meth:`TopicSearcher.search_parts`), each part's run
    (and a fusion's expert runs, ``--expert-runs``) appended to the outputs, which appear whole
    at the end or not at all."""
    searched = Searched(Findings(), open_seconds=searcher.open_seconds)
    with contextlib.ExitStack() as outputs:
        write = outputs.enter_context(run_writer(args.output, tag, args.hits, args.output_format))
        experts: dict[str, Callable[[Run], None]] = {}
        for outcome in searcher.search_parts(topics):
            write(outcome.run)
            for kind, expert_run in outcome.expert_runs.items() if args.expert_runs else ():
                if kind not in experts:
                    experts[kind] = outputs.enter_context(run_writer(
                        f"{args.expert_runs}.{kind}.trec", kind, args.candidates))
                experts[kind](expert_run)
            searched.findings += outcome.findings
            searched.queries += len(outcome.run)
            searched.seconds += outcome.search_seconds
            searched.query_terms = outcome.query_terms  # the encoder's mean over every part
    return searched
