# pyserini-moe: every target installs what it needs first (`setup`), so each works on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# A CPU wheel of this torch lies on the project machines; install it before anything that
# depends on torch, or pip pulls a multi-GB CUDA build. GPU users may override TORCH_SPEC.
TORCH_SPEC ?= torch==2.13.0
STAMP  := $(VENV)/.installed
WORK   ?= work

.PHONY: setup demo lint test regress regress-dry regress-smoke bench bench-scaling bench-scaling-100k gpu-check scale-check clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/python -m pyserini_moe._java --install-pth
	touch $(STAMP)

# The main job on the embedded default, end to end: BM25, the zero-shot packaged MiniLM and a
# TASER Det-R model trained from it for one epoch on SciFact train (encoders/taser-detr-minilm.yaml,
# the quick recipe's first half), each indexed and searched through Pyserini (Lucene, Faiss),
# Det-R + BM25 hybrid, evaluated on SciFact test with ranx (cross-checked with Pyserini's
# trec_eval) and paired t-tests against BM25. 10m51s from a fresh clone on 2 idle cores, setup
# included (README).
DEMO = $(WORK)/demo
demo: setup
	$(BIN)/python -m pyserini_moe.index --retriever bm25 --corpus scifact \
		--index $(DEMO)/bm25-index --overwrite
	$(BIN)/python -m pyserini_moe.search --retriever bm25 --index $(DEMO)/bm25-index \
		--topics scifact:test --output $(DEMO)/bm25.trec
	$(BIN)/python -m pyserini_moe.index --retriever dense --corpus scifact \
		--encoder all-minilm-l6-v2 --index $(DEMO)/minilm-index --overwrite
	$(BIN)/python -m pyserini_moe.search --retriever dense --index $(DEMO)/minilm-index \
		--topics scifact:test --output $(DEMO)/minilm-zero-shot.trec
	$(BIN)/python -m pyserini_moe.train --config encoders/taser-detr-minilm.yaml --epochs 1 \
		--output-dir $(DEMO)/taser-detr --overwrite
	$(BIN)/python -m pyserini_moe.index --retriever dense --corpus scifact \
		--encoder $(DEMO)/taser-detr/best --index $(DEMO)/taser-detr-index --overwrite
	$(BIN)/python -m pyserini_moe.search --retriever dense --index $(DEMO)/taser-detr-index \
		--topics scifact:test --output $(DEMO)/taser-detr.trec
	$(BIN)/python -m pyserini_moe.search --retriever dense --index $(DEMO)/taser-detr-index \
		--bm25-index $(DEMO)/bm25-index --alpha 1.0 --hybrid-normalize \
		--topics scifact:test --output $(DEMO)/taser-detr+bm25.trec
	$(BIN)/python -m pyserini_moe.eval --qrels scifact:test --trec-eval --baseline bm25.trec \
		--run $(DEMO)/bm25.trec $(DEMO)/minilm-zero-shot.trec $(DEMO)/taser-detr.trec \
		$(DEMO)/taser-detr+bm25.trec

# Style and import rules (pyproject.toml [tool.ruff]); `make test` runs it first.
lint: setup
	$(BIN)/ruff check pyserini_moe tests lab

# Two pytest-xdist workers of one thread each (the tests' models are tiny: threads inside a
# worker only contend); module-scoped fixtures stay on one worker (--dist loadscope).
TEST_WORKERS ?= 2
test: lint
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope

regress: setup
	$(BIN)/python -m pyserini_moe.regress --scale all regressions/*.yaml

# Speed, memory and size side by side (MiniLM on SciFact), with the targets met / not met;
# 20 minutes on 2 idle cores (measured 2026-11-25, scaling section included).
# Writes $(WORK)/bench/bench.{md,json}.
bench: setup
	$(BIN)/python -m pyserini_moe.lab.bench --output-dir $(WORK)/bench

# On a CUDA machine: the CUDA tests, one protocol training (TASER Det-R) and the encoding table
# (bench --sections pipeline --device cuda) into $(WORK)/gpu-check; without CUDA a dry run that
# says what it skips. Writes $(WORK)/gpu-check/{*.log,bench/bench.md}.
gpu-check: setup
	$(BIN)/python lab/gpu_check.py --output-dir $(WORK)/gpu-check

# The training side of the paper files at MS MARCO's size on a synthetic collection (about 3.5 GB
# written once, then reused): each stage measured and projected to the full run; stages already
# measured are skipped, so the check can be spread over sittings (STAGES="--stage bm25-index").
# Writes $(WORK)/scale-check/, each stage's figures in docs/results/scale-check/ and their table
# docs/results/scale-check.md.
scale-check: setup
	$(BIN)/python -m pyserini_moe.lab.scale --root $(WORK)/scale-check \
		--table docs/results/scale-check.md --results docs/results/scale-check $(STAGES)

# The scaling section alone with its opt-in points, one sitting each, in either order: bench-scaling
# measures 1k, 5k and ~20k documents (the local collections together), 58 min; bench-scaling-100k
# ~100k (word-shuffled copies past the local data), 3.1 h (dense 40 min, impact 98, compressed
# multi-vector 46; both measured 2026-11-26 on 2 idle AVX2 cores), so split it with RETRIEVERS=...
# (--scaling-retrievers). Each joins the other's points to its fit when the other's bench.json is
# there (--scaling-from), or the files named by SCALING_FROM=... (e.g. the committed
# docs/results/bench-scaling-*.json).
# Write $(WORK)/bench-scaling/ and $(WORK)/bench-scaling-100k/bench.{md,json}, after every point.
bench-scaling: setup
	$(BIN)/python -m pyserini_moe.lab.bench --sections scaling --scaling-sizes 1000 all 20000 \
		$(call scaling_from,$(WORK)/bench-scaling-100k) $(scaling_retrievers) \
		--output-dir $(WORK)/bench-scaling

bench-scaling-100k: setup
	$(BIN)/python -m pyserini_moe.lab.bench --sections scaling --scaling-sizes 100000 \
		$(call scaling_from,$(WORK)/bench-scaling) $(scaling_retrievers) \
		--output-dir $(WORK)/bench-scaling-100k

# --scaling-from SCALING_FROM, else the other sitting's bench.json in $(1) if there is one.
scaling_from = $(call scaling_files,$(or $(SCALING_FROM),$(wildcard $(1)/bench.json)))
scaling_files = $(if $(1),--scaling-from $(1))
scaling_retrievers = $(if $(RETRIEVERS),--scaling-retrievers $(RETRIEVERS))

# Every step of every paper-scale file, for real, on small stand-ins (a SciFact slice in the
# files' data formats, a tiny random BERT, 2 training steps); fails naming file, condition, step.
regress-smoke: setup
	$(BIN)/python -m pyserini_moe.regress --smoke regressions/*-paper.yaml

regress-dry: setup
	$(BIN)/python -m pyserini_moe.regress --dry-run regressions/*.yaml

clean:
	rm -rf $(WORK) .pytest_cache
