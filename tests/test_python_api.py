"""The Python API: every code block of docs/python.md runs, in order, on tiny models and a tiny
collection put in place of the names the page uses (so the examples cannot rot), and the API's
own contract (one query string, errors in one line) holds."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

from pyserini_moe.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "python.md"
README = ROOT / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def python_blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


@pytest.fixture(scope="module")
def workspace(tiny_bert, tiny_mlm, tiny_corpus, tmp_path_factory) -> Path:
    """The page's folders: models/taser-detr/last and models/cotmote/last as tiny models."""
    from pyserini_moe.modeling import CotMoteEncoder, TaserEncoder

    root = tmp_path_factory.mktemp("api")
    torch.manual_seed(0)
    taser = TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu")
    taser.query_max_length = 16
    taser.save(root / "models" / "taser-detr" / "last")
    mote = CotMoteEncoder.from_backbone(tiny_mlm, sparse_top_k=12, device="cpu")
    mote.query_max_length = 16
    mote.save(root / "models" / "cotmote" / "last")
    return root


def _localised(code: str, corpus: Path) -> str:
    """The page's collection name as the tiny collection's folder; its query texts as words the
    tiny tokenizer knows are not needed (unknown words are [UNK], still a query)."""
    return code.replace('"scifact', f'"{corpus}')


def _run_blocks(page: Path, corpus: Path) -> None:
    for number, code in enumerate(python_blocks(page), 1):
        where = f"{page.relative_to(ROOT)} block {number}"
        try:
            exec(compile(_localised(code, corpus), where, "exec"), {"__name__": "__docs__"})
        except Exception as e:  # noqa: BLE001 - the failing block is named
            pytest.fail(f"{where} fails: {type(e).__name__}: {e}")


def test_every_code_block_of_the_python_page_and_the_readme_runs(workspace, tiny_corpus,
                                                                 monkeypatch, capsys) -> None:
    """docs/python.md first, then the README's blocks in the same folder (the README's Pyserini
    snippet reads the topics file its `convert` line writes: written here in its place)."""
    assert len(python_blocks(PAGE)) >= 5, "docs/python.md lost its examples"
    assert len(python_blocks(README)) >= 2, "the README lost its Python examples"
    monkeypatch.chdir(workspace)
    _run_blocks(PAGE, tiny_corpus)
    from pyserini_moe.data.topics import load_topics

    topics = load_topics(f"{tiny_corpus}:test")
    (workspace / "topics.scifact.test.tsv").write_text(
        "".join(f"{qid}\t{text}\n" for qid, text in topics.items()))
    _run_blocks(README, tiny_corpus)
    out = capsys.readouterr().out
    assert "ndcg@10" in out  # the evaluation block printed its metrics
    assert (workspace / "runs" / "taser-detr.trec").is_file()
    assert (workspace / "models" / "taser-detr-copy" / "pyserini_moe.json").is_file()


def test_search_takes_one_string_and_batch_search_lists(workspace, tiny_corpus,
                                                        monkeypatch) -> None:
    import pyserini_moe as pm

    monkeypatch.chdir(workspace)
    index = workspace / "indexes" / "lone"
    pm.build_index("dense", corpus=tiny_corpus, encoder="models/taser-detr/last", index=index)
    searcher = pm.open_searcher(index)
    hits = searcher.search("what is dense retrieval", k=3)
    assert len(hits) == 3 and all(isinstance(h, pm.Hit) for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    both = searcher.batch_search(["what is dense retrieval", "cat sat"], ["a", "b"], k=3)
    assert both["a"] == hits  # one query, alone or in a batch: the same hits
    run = searcher.run({"a": "what is dense retrieval"}, k=3)
    assert list(run["a"]) == [h.docid for h in hits]
    with pytest.raises(UserError, match="one query string"):
        searcher.search(["what is dense retrieval"])
    with pytest.raises(UserError, match="2 queries but 1 qids"):
        searcher.batch_search(["a", "b"], ["q"])
    with pytest.raises(UserError, match="no setting warp"):
        pm.open_searcher(index, warp=3)
    with pytest.raises(UserError, match="index kind 'faiss'"):
        pm.build_index("faiss", corpus=tiny_corpus, index=workspace / "x")


def test_evaluate_takes_a_dict_run_and_dict_qrels() -> None:
    import pyserini_moe as pm

    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}}
    run = {"q1": {"d1": 2.0, "d3": 1.0}, "q2": {"d3": 2.0, "d2": 1.0}}
    values = pm.evaluate(run, qrels, ["recall@1", "mrr@10"])
    assert values == pytest.approx({"recall@1": 0.5, "mrr@10": 0.75})


def test_importing_the_package_loads_no_torch() -> None:
    """The API's names load on first use: ``python -m pyserini_moe.<command> --help`` stays
    fast."""
    import subprocess
    import sys

    code = "import sys, pyserini_moe; print('torch' in sys.modules, 'load_model' in dir(pyserini_moe))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.stdout.split() == ["False", "True"], done.stderr
