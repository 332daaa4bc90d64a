# pyserini-moe: every target installs what it needs first (`setup`), so each works on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# A CPU wheel of this torch lies on the project machines; install it before anything that
# depends on torch, or pip pulls a multi-GB CUDA build. GPU users may override TORCH_SPEC.
TORCH_SPEC ?= torch==2.13.0
STAMP  := $(VENV)/.installed
WORK   ?= work

.PHONY: setup demo lint test test-fast regress regress-dry regress-smoke bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/python -m pyserini_moe._java --install-pth
	touch $(STAMP)

# The main job on the embedded default: BM25 on SciFact test through Pyserini, evaluated with
# ranx and cross-checked with Pyserini's trec_eval.
demo: setup
	$(BIN)/python -m pyserini_moe.index --retriever bm25 --corpus scifact \
		--index $(WORK)/demo/scifact-bm25 --overwrite
	$(BIN)/python -m pyserini_moe.search --retriever bm25 --index $(WORK)/demo/scifact-bm25 \
		--topics scifact:test --output $(WORK)/demo/bm25.scifact.test.trec --hits 1000
	$(BIN)/python -m pyserini_moe.eval --run $(WORK)/demo/bm25.scifact.test.trec \
		--qrels scifact:test --trec-eval

# Style and import rules (pyproject.toml [tool.ruff]); `make test` runs it first.
lint: setup
	$(BIN)/ruff check pyserini_moe tests tools

test: lint
	$(BIN)/python -m pytest -q

regress: setup
	$(BIN)/python -m pyserini_moe.regress --scale all regressions/*.yaml

# Speed, memory and size side by side (MiniLM on SciFact), with the targets met / not met;
# 12.5 minutes on 2 idle cores (measured 2026-11-24). Writes $(WORK)/bench/bench.{md,json}.
# Add a Vaswani scaling point with: python -m pyserini_moe.bench --scaling-corpus vaswani
bench: setup
	$(BIN)/python -m pyserini_moe.bench --output-dir $(WORK)/bench

# Every step of every paper-scale file, for real, on small stand-ins (a SciFact slice in the
# files' data formats, a tiny random BERT, 2 training steps); fails naming file, condition, step.
regress-smoke: setup
	$(BIN)/python -m pyserini_moe.regress --smoke regressions/*-paper.yaml

regress-dry: setup
	$(BIN)/python -m pyserini_moe.regress --dry-run regressions/*.yaml

clean:
	rm -rf $(WORK) .pytest_cache
