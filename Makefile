# tailrace: the two set-up commands (`make demo`, `make test`) work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# A real Triton Inference Server (tritonserver 2.51, Python backend) from PyPI; it pins numpy<2, so it gets
# its own virtualenv, never the main one.
TRITON_VENV := .venv-triton
TRITON_STAMP := $(TRITON_VENV)/.installed
MODELS := build/models

.PHONY: demo test test-fast lint install triton models bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,test]'
	touch $(STAMP)

install: $(STAMP)

$(TRITON_STAMP): deploy/triton/requirements.txt
	$(PYTHON) -m venv $(TRITON_VENV)
	$(TRITON_VENV)/bin/pip install --quiet --upgrade pip
	$(TRITON_VENV)/bin/pip install --quiet -r deploy/triton/requirements.txt
	touch $(TRITON_STAMP)

triton: $(TRITON_STAMP)

models: $(STAMP)
	$(BIN)/tailrace models build --out $(MODELS)

demo: $(STAMP)
	$(BIN)/tailrace demo

# Everything: lint, the unit tier, and the integration tier (real Locust, endpoints, Triton, chronyd, Chromium).
test: $(STAMP) $(TRITON_STAMP) lint
	$(BIN)/python -m pytest -q tests

# The unit tier only: pure tests, no processes (under 2 minutes).
test-fast: $(STAMP) lint
	$(BIN)/python -m pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf build runs .pytest_cache
