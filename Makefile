# Joiner: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export PATH := $(BIN):$(PATH)
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1

.PHONY: install demo test bench synth lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit("Joiner needs Python >= 3.11") if sys.version_info < (3, 11) else None'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## The README's first command: the main job on the embedded local default.
demo: $(STAMP)
	$(BIN)/joiner demo

## The README's second command: the whole suite (unit, handler, end-to-end, synth, cfn-lint, cdk-nag).
test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m bench.schedule
	$(BIN)/python -m bench.cost
	$(BIN)/python -m bench.scan
	$(BIN)/python -m bench.interruption
	$(BIN)/python -m bench.disruption

synth: $(STAMP)
	$(BIN)/python -m infra.synth

clean:
	rm -rf $(VENV) cdk.out .pytest_cache .hypothesis
