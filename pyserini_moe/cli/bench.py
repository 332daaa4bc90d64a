"""``python -m pyserini_moe.lab.bench`` (`make bench`): the command; its sections live in
:mod:`pyserini_moe.lab.bench` (see that package's docstring)."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from pyserini_moe.cli import ArgumentParser, HelpFormatter, positive_int
from pyserini_moe.cli.args import add_device_arg
from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.errors import UserError
from pyserini_moe.io import atomic_path, refuse_one_file_twice
from pyserini_moe.lab.bench import __doc__ as PACKAGE_DOC
from pyserini_moe.lab.bench.processes import Indexes
from pyserini_moe.lab.bench.report import Report, cpu_description, device_name
from pyserini_moe.lab.bench.scaling import SCALED, bench_scaling, earlier_scaling, scaling_size

SECTIONS = ("encoding", "pipeline", "onnx", "latency", "scaling", "approximate")
# The scaling corpora's default pool: the collections of the measured sittings (docs/performance.md,
# 19,472 real documents with SciFact), fixed so that a point means the same documents in every
# sitting; ArguAna, a local collection since, would otherwise have joined it and changed the 20k
# and 100k corpora under the earlier points.
SCALING_POOL = ("cisi", "cranfield", "scifact", "vaswani")


# The sections that read each section's own setting (by dest): a setting given for sections of
# which none runs is refused, as other commands refuse a setting they would not read (fuse: a flag
# its method does not use); --backbone, --corpus, --max-length, --device and --output-dir are read
# by every section.
FLAG_SECTIONS: dict[str, tuple[str, ...]] = {
    "topics": ("onnx", "latency", "scaling", "approximate"),
    "docs": ("encoding", "onnx"),
    "batch_size": ("encoding", "pipeline", "onnx"),
    "repeats": ("encoding", "pipeline", "onnx"),
    "pipeline_docs": ("pipeline",),
    "tokenizer_workers": ("pipeline",),
    "length_bucket": ("pipeline",),
    "latency_docs": ("latency", "approximate"),
    "latency_queries": ("latency", "scaling"),
    "batched_queries": ("latency",),
    "multivector_compression": ("latency", "scaling"),
    "multivector_faiss": ("approximate",),
    "scaling_sizes": ("scaling",),
    "scaling_from": ("scaling",),
    "scaling_retrievers": ("scaling",),
    "scaling_pool": ("scaling",),
}


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.lab.bench", description=PACKAGE_DOC.split("\n\n")[0],
        formatter_class=HelpFormatter)
    parser.add_argument("--backbone", default="all-minilm-l6-v2",
                        help="the backbone (a Hugging Face name or a folder) every model of the "
                             "run is built from, untrained")
    parser.add_argument("--corpus", default="scifact",
                        help="the collection encoded, indexed and searched (a local "
                             "collection's name or a BEIR folder)")
    parser.add_argument("--topics", default="scifact:test",
                        help="queries (and qrels) of the onnx, latency, scaling and approximate "
                             "sections")
    parser.add_argument("--scaling-sizes", type=scaling_size, nargs="+", default=[1000, None],
                        metavar="N|all",
                        help="corpus sizes of the scaling section: the first N documents of "
                             "--corpus, then of --scaling-pool, then perturbed copies; all = "
                             "--corpus whole (default: 1000 all). 20000 (the local collections "
                             "together) and 100000 are opt-in (make bench-scaling, make "
                             "bench-scaling-100k); measured on two AVX2 cores: 1000 all 20000 in "
                             "an hour, 100000 in 3.1 hours (dense 40 min, impact 98, compressed "
                             "multi-vector 46: split it with --scaling-retrievers)")
    parser.add_argument("--scaling-from", type=Path, nargs="+", action="extend", default=[],
                        metavar="BENCH_JSON",
                        help="bench.json files of earlier runs whose scaling rows join this "
                             "run's fit at the sizes this run does not measure (e.g. 1000 all "
                             "20000 in one sitting, then --scaling-sizes 100000 --scaling-from "
                             "its bench.json); the fit notes points from another CPU (default: "
                             "none)")
    parser.add_argument("--scaling-retrievers", nargs="+", choices=SCALED, default=list(SCALED),
                        help="the retrievers the scaling section measures (default: all); the "
                             "--scaling-from rows of the others still join the report and fit, "
                             "so one slow retriever's largest point can have a sitting of its "
                             "own")
    parser.add_argument("--scaling-pool", nargs="*", default=None,
                        help="collections that follow --corpus in the scaling corpora "
                             "(default: CISI, Cranfield, SciFact and Vaswani, less --corpus: the "
                             "measured sittings' documents)")
    parser.add_argument("--docs", type=positive_int, default=128,
                        help="documents timed per encoder (encoding and onnx sections)")
    parser.add_argument("--max-length", type=positive_int, default=128,
                        help="document tokens of every index and timing (the local "
                             "regressions' length)")
    parser.add_argument("--batch-size", type=positive_int, default=32,
                        help="passages per encoding batch (encoding, onnx and pipeline sections)")
    parser.add_argument("--pipeline-docs", type=positive_int, default=1024,
                        help="passages of the pipeline section's timings (--corpus repeated "
                             "where it has fewer); at least 2 x --batch-size, as a pipeline's "
                             "rate is timed from its first batch on")
    parser.add_argument("--tokenizer-workers", type=positive_int, default=2,
                        help="tokenizer processes of the pipeline section's throughput rows")
    parser.add_argument("--length-bucket", type=positive_int, default=16,
                        help="batches sorted together in the pipeline section's bucketed row "
                             "(keep --pipeline-docs at 10 windows of --batch-size x this or "
                             "more, or the pipeline has nothing to overlap)")
    parser.add_argument("--repeats", type=positive_int, default=2,
                        help="interleaved timing rounds (encoding, onnx and pipeline sections)")
    parser.add_argument("--latency-docs", type=positive_int, default=1000,
                        help="the first N documents of --corpus, indexed and searched by the "
                             "latency section and the approximate section's multi-vector index")
    parser.add_argument("--latency-queries", type=positive_int, default=50,
                        help="queries timed one at a time (p50, p95) by the latency and scaling "
                             "sections")
    parser.add_argument("--batched-queries", type=positive_int, default=128,
                        help="queries of the latency section's batched throughput (batches of "
                             "64)")
    parser.add_argument("--multivector-faiss", default="ivf64,pq16", metavar="ivf{nlist},...",
                        help="the approximate token index of the approximate section (the "
                             "index command's --faiss), an IVF index, searched at nprobe 4 and "
                             "16")
    parser.add_argument("--multivector-compression", default="pq64", metavar="pq{m}[x{bits}]",
                        help="the compressed multivector index of the latency section and the "
                             "scaling section's multivector-compressed retriever (the index "
                             "command's --compression)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        help="the sections to run, each named once; they run in the order of "
                             "this list, whatever order they are given in (default: all of "
                             "them)")
    add_device_arg(parser, default="cpu",
                   note="; where the models encode (Faiss and Lucene search on the CPU); a GPU "
                        "skips the onnx section, whose onnxruntime here is the CPU build")
    parser.add_argument("--output-dir", type=Path, default=Path("work/bench"),
                        help="where bench.md, bench.json and the models, corpus slices and "
                             "indexes of the run are written")
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command's flags, every one checked before anything is built: a value a section would
    only refuse after the models and indexes before it were built (an index flag, through the
    index command), a value listed twice, a flag no section of the run reads."""

    parser = build_parser()
    args = parser.parse_args(argv)
    refuse_repeats(args)
    refuse_unread(args)
    if "pipeline" in args.sections and args.pipeline_docs < 2 * args.batch_size:
        parser.error(f"--pipeline-docs {args.pipeline_docs}: the pipeline section needs at least "
                     f"2 x --batch-size = {2 * args.batch_size} passages (a pipeline's rate is "
                     "timed from its first batch on, so it needs a second batch)")
    check_multivector_settings(args)
    from pyserini_moe.modeling.base import check_device  # noqa: PLC0415 - torch: not for --help

    if args.scaling_pool is None:
        args.scaling_pool = [name for name in SCALING_POOL if name != args.corpus]
    # one error line when CUDA is asked for and absent; "auto" becomes the device it means, and
    # cpu:N the CPU (torch has one CPU device: the onnx section runs, the report says cpu)
    device = check_device(args.device)
    args.device = "cpu" if device.type == "cpu" else str(device)
    return args


def _given(args: argparse.Namespace, dest: str) -> bool:
    """Whether the flag of ``dest`` was typed (even at its default value): the project's
    :class:`~pyserini_moe.cli.ArgumentParser` marks every flag it stores (``--scaling-from``
    extends a list that is empty unless given)."""
    if dest == "scaling_from":
        return bool(args.scaling_from)
    return hasattr(args, f"_listed_{dest}") or hasattr(args, f"_stored_{dest}")


def _listed(items: list[str]) -> str:
    return " and ".join(filter(None, [", ".join(items[:-1]), items[-1]]))


def refuse_repeats(args: argparse.Namespace) -> None:
    """A section, a scaling retriever or size, or a bench.json listed twice would be run or
    counted twice (two bm25 rows at one size, both in the fit)."""
    sizes = ["all" if n is None else str(n) for n in args.scaling_sizes]
    for flag, values in (("--sections", args.sections),
                         ("--scaling-retrievers", args.scaling_retrievers),
                         ("--scaling-sizes", sizes)):
        twice = sorted({value for value in values if values.count(value) > 1})
        if twice:
            raise UserError(f"{flag} lists {_listed(twice)} twice: give each once")
    refuse_one_file_twice(((f"--scaling-from {path}", str(path)) for path in args.scaling_from),
                          "bench.json file")


def refuse_unread(args: argparse.Namespace) -> None:
    """A flag typed for sections that do not run (``--scaling-retrievers`` without the scaling
    section) is refused, naming the sections that read it; a setting at its default is not."""
    running = set(args.sections)
    unread: dict[str, tuple[str, ...]] = {}
    for dest, sections in FLAG_SECTIONS.items():
        if _given(args, dest) and not running & set(sections):
            unread[f"--{dest.replace('_', '-')}"] = sections
    if unread:
        count = len({section for sections in unread.values() for section in sections})
        reads = _listed([f"{flag} ({', '.join(sections)})" for flag, sections in unread.items()])
        raise UserError(f"--sections {' '.join(args.sections)} does not run the "
                        f"section{'s' if count > 1 else ''} that read{'s' if count == 1 else ''} "
                        f"{reads}: add {'it' if count == 1 else 'one'} to --sections or leave "
                        f"the flag{'s' if len(unread) > 1 else ''} out")
    if (_given(args, "multivector_compression") and "latency" not in running
            and "multivector-compressed" not in args.scaling_retrievers):
        raise UserError("--multivector-compression is read by the latency section and the scaling "
                        "section's multivector-compressed retriever, and this run has neither "
                        f"(--scaling-retrievers {' '.join(args.scaling_retrievers)}): leave it "
                        "out")


def check_multivector_settings(args: argparse.Namespace) -> None:
    """``--multivector-compression`` and ``--multivector-faiss`` checked as the index command
    checks ``--compression`` and ``--faiss``, against the token vectors of the ColBERT model
    bench builds: a bad value was a traceback of the index process after the models, the corpus
    slice and the indexes before it were built. Only for the sections that run (Faiss is imported
    here: a GPU node running the pipeline section alone may lack it)."""

    from pyserini_moe.modeling.colbert import ColbertArgs  # noqa: PLC0415 - torch

    dim = ColbertArgs().dim  # bench's models are built with their default arguments
    running = set(args.sections)
    spec = args.multivector_compression
    if "latency" in running or ("scaling" in running and
                                "multivector-compressed" in args.scaling_retrievers):
        from pyserini_moe.index.residual import parse_compression  # noqa: PLC0415 - Faiss

        if spec.strip().lower() == "none":
            raise UserError("--multivector-compression none: the compressed multi-vector index "
                            "is measured against the float16 one; give pq{m} or pq{m}x{bits} "
                            "(e.g. pq64)")
        try:
            parse_compression(spec, dim)
        except UserError as e:
            raise UserError(str(e).replace("--compression", "--multivector-compression", 1)) \
                from None
    spec = args.multivector_faiss
    if "approximate" in running:
        from pyserini_moe.index.multivector import (  # noqa: PLC0415 - Faiss
            _faiss_index,
            faiss_factory_string,
        )

        try:
            factory = faiss_factory_string(spec)
            _faiss_index(dim, factory, spec)
        except UserError as e:
            reason = str(e).replace(f"--faiss {spec} ", "", 1)
            raise UserError(f"--multivector-faiss {spec}: {reason}") from None
        if not factory.startswith("IVF"):
            raise UserError(f"--multivector-faiss {spec}: the approximate section searches its "
                            "token index at nprobe 4 and 16, so it needs an IVF index, e.g. "
                            "ivf64,pq16")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    earlier = {path: earlier_scaling(path) for path in args.scaling_from}  # bad files fail first
    # torch and the models after the flags: --help answers at once
    from pyserini_moe.lab.bench.models import build_models, check_backbone  # noqa: PLC0415
    from pyserini_moe.lab.bench.pipeline import bench_section  # noqa: PLC0415
    from pyserini_moe.modeling.auto import load_encoder  # noqa: PLC0415

    check_backbone(args.backbone)

    work = args.output_dir
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    paths = build_models(args.backbone, work / "models")
    texts = [d.contents for _, d in zip(range(args.docs), BeirCollection.load(args.corpus)
                                        .corpus())]
    report = Report()
    indexes = Indexes(work, args.max_length, args.device)
    # the sections that search import Faiss, Pyserini and ranx only when they run: the pipeline
    # section needs torch alone (a bare GPU node)
    if args.sections != ["pipeline"]:
        from pyserini_moe.lab.bench.encoding import (  # noqa: PLC0415
            bench_encoding,
            bench_onnx,
            sentence_transformer,
            sparse_encoder,
        )
        from pyserini_moe.lab.bench.search import bench_approximate, bench_latency  # noqa: PLC0415
    if "encoding" in args.sections:
        models = {t: load_encoder(p, device=args.device) for t, p in paths.items()}
        models["sentence-transformers"] = sentence_transformer(paths["siamese"], args.max_length,
                                                               args.device)
        models["sparse-encoder"] = sparse_encoder(paths["splade"], work / "models" / "st-splade",
                                                  args.max_length, args.device)
        bench_encoding(report, models, texts, args.max_length, args.batch_size, args.repeats,
                       args.device)
    if "pipeline" in args.sections:
        bench_section(report, args, paths,
                      on_model=lambda: save(report, work, args, started, complete=False))
    if "onnx" in args.sections and args.device == "cpu":
        bench_onnx(report, work, indexes, paths["siamese"], texts, args, came=paths["came"])
    if "latency" in args.sections:
        bench_latency(report, work, indexes, paths, args)
    if "scaling" in args.sections:
        bench_scaling(report, work, indexes, paths, args, earlier,
                      on_point=lambda: save(report, work, args, started, complete=False))
    if "approximate" in args.sections:
        bench_approximate(report, work, indexes, paths, args)
    print(save(report, work, args, started, complete=True))
    return 0


def save(report: Report, work: Path, args: argparse.Namespace, started: float, *,
         complete: bool) -> str:
    """Write bench.md and bench.json (each whole or not at all) with the run's description last,
    and return the markdown. The scaling section saves after each point too (``complete`` false),
    so a 100k sitting cut short keeps the points it measured, for ``--scaling-from``."""

    report.sections.pop("run", None)
    report.add("run", seconds=round(time.perf_counter() - started), complete=complete,
               cores=os.cpu_count(), cpu=cpu_description(), device=device_name(args.device),
               backbone=args.backbone, corpus=args.corpus)
    text = report.markdown()
    with atomic_path(work / "bench.md") as tmp:
        tmp.write_text(text + "\n")
    with atomic_path(work / "bench.json") as tmp:
        tmp.write_text(json.dumps({"sections": report.sections, "targets": report.targets},
                                  indent=2) + "\n")
    return text
