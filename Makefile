# tailrace: the two set-up commands (`make demo`, `make test`) work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MODELS := build/models

.PHONY: demo test install models bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

models: $(STAMP)
	$(BIN)/tailrace models build --out $(MODELS)

demo: $(STAMP)
	$(BIN)/tailrace demo

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf build runs .pytest_cache
