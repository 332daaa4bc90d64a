"""Turn the top ``depth`` hits of a run into binary qrels.

Used by regressions to measure how much of a reference ranking another run recovers: the
reference's top-100 as qrels makes recall@100 the overlap of the two top-100 lists.

    python lab/run_to_qrels.py --run exhaustive.trec --depth 100 --output top100.qrels
"""

from __future__ import annotations

import argparse

from pyserini_moe.data import write_trec_qrels
from pyserini_moe.runs import ranked, read_trec_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    run = read_trec_run(args.run)
    write_trec_qrels({qid: {d: 1 for d, _ in ranked(hits)[:args.depth]} for qid, hits in run.items()},
                     args.output)


if __name__ == "__main__":
    main()
