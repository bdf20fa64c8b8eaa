# The two commands of the README:
#   make demo   set up, then write report.html (interactive report of the shipped 2-layer model)
#   make test   set up, then ruff, mypy, tsc, vitest, pytest (including browser tests)
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
EXTRAS := dev,transformer-lens,transformers,marimo
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
NPM := npm --prefix js
JS_SOURCES := $(shell find js/src -type f 2>/dev/null)
BUNDLE := circuitwidgets/static/index.js

.PHONY: setup demo test bundle clean

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

demo: setup
	$(BIN)/circuitwidgets report -o report.html

test: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(NPM) run typecheck
	$(NPM) test
	$(BIN)/pytest

clean:
	rm -rf circuitwidgets/static js/node_modules dist build .pytest_cache .mypy_cache .ruff_cache
