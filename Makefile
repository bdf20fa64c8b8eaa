# The two commands of the README:
#   make demo   set up, then write report.html (interactive report of the shipped 2-layer model)
#   make test   set up, then ruff (lint and format), mypy, tsc, vitest, the documentation build (as
#               `make docs`), pytest (including browser tests, and the docs' offline check on that build)
#   make docs   set up, then build the documentation site into docs/_build/html and check it offline
#
# `setup` is incremental: each step reruns only when its inputs change.

SHELL := /bin/bash
.DEFAULT_GOAL := test

VENV ?= .venv
PYTHON ?= $(shell command -v python3.11 || command -v python3)
BIN := $(VENV)/bin
# torch first and pinned: this version resolves to the local CPU wheel; any other
# spec may pull gigabytes of CUDA wheels.
TORCH_SPEC := torch==2.13.0
EXTRAS := dev,transformer-lens,transformers,marimo,docs,hosts,nnsight
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
NPM := npm --prefix js
JS_SOURCES := $(shell find js/src -type f 2>/dev/null)
BUNDLE := circuitwidgets/static/index.js

.PHONY: setup demo test docs bundle clean

setup: $(VENV)/.installed $(CHROMIUM) $(BUNDLE)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

js/node_modules/.package-lock.json: js/package.json js/package-lock.json
	$(NPM) ci --no-audit --no-fund

# `pip install -e .` runs the npm build of js/ through hatch-jupyter-builder.
$(VENV)/.installed: $(BIN)/python pyproject.toml js/node_modules/.package-lock.json
	$(BIN)/pip install "$(TORCH_SPEC)"
	$(BIN)/pip install -e ".[$(EXTRAS)]"
	touch $@

$(CHROMIUM):
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver

$(BUNDLE): $(JS_SOURCES) js/build.mjs js/node_modules/.package-lock.json
	$(NPM) run build

bundle: $(BUNDLE)

# Peers' own environments, for cross-checks that `make test` runs (not needed by `make demo`).
# sae-lens, for tests/test_features_saelens.py (dictionaries and evaluation numbers against SAELens
# itself), in its own environment: sae-lens pins transformer-lens < 4, which clashes with ours (4.x),
# so it is not an extra of the package. torch first and pinned, as for $(VENV).
SAELENS_VENV := .venv-saelens
$(SAELENS_VENV)/.installed:
	$(PYTHON) -m venv $(SAELENS_VENV)
	$(SAELENS_VENV)/bin/pip install "$(TORCH_SPEC)"
	$(SAELENS_VENV)/bin/pip install "sae-lens==6.54.12"
	$(SAELENS_VENV)/bin/python -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '2.13.0')"
	touch $@

# circuit-tracer 0.5 in an environment of its own (it pins TransformerLens 3 and transformers 4, which ours
# excludes): tests/test_graphs_circuit_tracer.py runs it as a subprocess to cross-check attribution graphs.
CTRACER := .venv-peers/ctracer
$(CTRACER)/.installed:
	$(PYTHON) -m venv $(CTRACER)
	$(CTRACER)/bin/pip install "$(TORCH_SPEC)"
	$(CTRACER)/bin/pip install "circuit-tracer==0.5.0"
	touch $@

demo: setup
	$(BIN)/circuitwidgets report -o report.html

test: setup $(SAELENS_VENV)/.installed $(CTRACER)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(NPM) run typecheck
	$(NPM) test
	$(SPHINX)
	CW_DOCS_BUILT=1 $(BIN)/pytest

# Sphinx + MyST-NB (docs/conf.py). Warnings are errors and every cross-reference must
# resolve (-n -W); a notebook cell that raises fails the build (docs/_ext/cw_docs.py;
# executions are cached in docs/_build/.executed/). Then every page is opened in
# headless Chromium with the network cut: each widget must draw, with no request and no error.
# `make test` runs the same build, and its pytest run checks it (tests/e2e/test_e2e_docs.py).
SPHINX := $(BIN)/python -m sphinx -b html -n -W --keep-going -q docs docs/_build/html

docs: setup
	$(SPHINX)
	CW_DOCS_BUILT=1 $(BIN)/pytest -q tests/e2e/test_e2e_docs.py
	@echo "docs: open docs/_build/html/index.html"

clean:
	rm -rf circuitwidgets/static js/node_modules dist build .pytest_cache .mypy_cache .ruff_cache
